"""The suite, the benchmarks and the demos need nothing beside the checkout.

Two checks: statically, no file under ``tests``, ``bench`` or ``demo`` names the contract folder
one level up or climbs from its own location past the checkout's root; and at run time, the
audit hook of ``tests/confinement.py`` fails a test that reads beside the checkout (shown here on
a throwaway test run in a child pytest).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Final

import pytest

from tests.confinement import REPO_ROOT, WATCHER, Watcher

SCANNED: Final = ("tests", "bench", "demo")
#: Files allowed to name the parent: the guard itself, and this check.
GUARDS: Final = {Path("tests/confinement.py"), Path("tests/test_self_contained.py")}
SIBLING_DIR: Final = "shared"
UP: Final = ".."

CLIMB_INDEX = re.compile(r"__file__\)(?:\.resolve\(\))?\.parents\[(\d+)\]")
CLIMB_CHAIN = re.compile(r"__file__\)(?:\.resolve\(\))?((?:\.parent\b)+)")
ROOT_PARENT = re.compile(r"ROOT\)?\.parents?\b")


def scanned_files() -> list[Path]:
    files: list[Path] = []
    for top in SCANNED:
        for path in sorted((REPO_ROOT / top).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                files.append(path)
    return files


def problems_in(relative: Path, text: str, parent: str | None) -> list[str]:
    """What in ``text`` (the file at ``relative``) points beside the checkout."""
    found: list[str] = []
    if f"{UP}/{SIBLING_DIR}" in text:
        found.append(f"names {UP}/{SIBLING_DIR}")
    if parent is not None and parent + "/" in text:
        found.append("names the checkout's parent directory")
    # parents[0] of tests/x/y.py is tests/x: the root is parents[len(parts) - 1].
    deepest = len(relative.parts) - 1
    found += [
        f"climbs to parents[{m.group(1)}]"
        for m in CLIMB_INDEX.finditer(text)
        if int(m.group(1)) > deepest
    ]
    found += [
        "climbs past the root with .parent"
        for m in CLIMB_CHAIN.finditer(text)
        if m.group(1).count(".parent") - 1 > deepest
    ]
    if ROOT_PARENT.search(text):
        found.append("takes the parent of the repository root")
    return found


def test_no_file_under_tests_bench_or_demo_points_beside_the_checkout() -> None:
    parent = None if WATCHER.parent_is_shared else str(REPO_ROOT.parent)
    files = scanned_files()
    assert len(files) > 100
    offenders = {}
    for path in files:
        relative = path.relative_to(REPO_ROOT)
        if relative in GUARDS:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        found = problems_in(relative, text, parent)
        if found:
            offenders[str(relative)] = found
    assert offenders == {}


@pytest.mark.parametrize(
    ("relative", "text"),
    [
        ("tests/a.py", f"X = '{UP}/{SIBLING_DIR}/spec'"),
        ("tests/a.py", "ROOT = Path(__file__).resolve().parents[2]"),
        ("tests/a/b.py", "ROOT = Path(__file__).resolve().parents[3]"),
        ("tests/a.py", "HERE = Path(__file__).parent.parent.parent"),
        ("tests/a.py", "DATA = REPO_ROOT.parent / 'x'"),
        ("bench/a.py", "/elsewhere/x"),
    ],
)
def test_the_static_check_sees_each_way_out(relative: str, text: str) -> None:
    assert problems_in(Path(relative), text, "/elsewhere") != []


@pytest.mark.parametrize(
    ("relative", "text"),
    [
        ("tests/a.py", "ROOT = Path(__file__).resolve().parents[1]"),
        ("tests/a/b.py", "ROOT = Path(__file__).resolve().parents[2]"),
        ("tests/a.py", "HERE = Path(__file__).parent.parent"),
        ("tests/a.py", "hostile = '../../etc/passwd'"),
    ],
)
def test_the_static_check_lets_the_checkout_be(relative: str, text: str) -> None:
    assert problems_in(Path(relative), text, "/elsewhere") == []


def test_the_watcher_tells_a_sibling_from_the_checkout(tmp_path: Path) -> None:
    repo = tmp_path / "clone" / "repo"
    watcher = Watcher(repo)
    assert watcher.is_beside(str(tmp_path / "clone" / SIBLING_DIR / "spec.md"))
    assert watcher.is_beside(str(tmp_path / "clone" / "repo-other" / "x"))
    assert not watcher.is_beside(str(repo / "tests" / "x"))
    assert not watcher.is_beside(str(repo))
    assert not watcher.is_beside(str(tmp_path / "elsewhere"))


def test_a_read_beside_the_checkout_is_recorded() -> None:
    beside = REPO_ROOT.parent / SIBLING_DIR / f"missing-{uuid.uuid4().hex}"
    with pytest.raises(FileNotFoundError):
        beside.read_bytes()
    assert WATCHER.take() == [f"open: {beside}"]


def test_a_test_that_reads_beside_the_checkout_fails(tmp_path: Path) -> None:
    beside = REPO_ROOT.parent / SIBLING_DIR / f"missing-{uuid.uuid4().hex}"
    probe = tmp_path / "test_probe.py"
    probe.write_text(
        "import pytest\n\n"
        "def test_reads_beside():\n"
        "    with pytest.raises(FileNotFoundError):\n"
        f"        open({str(beside)!r}).close()\n\n"
        "def test_stays_inside():\n"
        "    pass\n",
        encoding="utf-8",
    )
    plugins = ["-p", "tests.confinement", "-p", "no:cacheprovider"]
    isolated = ["--rootdir", str(tmp_path), "-c", os.devnull]
    # Only the guard is loaded (no installed plugin): the child starts in a fraction of the time.
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", *plugins, *isolated, "-q", str(probe)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "2 passed, 1 error" in run.stdout, run.stdout
    assert "ERROR at teardown of test_reads_beside" in run.stdout
    assert f"open: {beside}" in run.stdout
