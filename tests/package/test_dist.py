"""``make dist``: the wheel and sdist the README tells a user to install, built and checked.

The target builds both offline (the dev venv's hatchling, no isolation), runs ``twine check
--strict`` on them, and unpacks the wheel beside the dev venv's dependencies, where the wheel's own
copy of the package must import and its ``pi-cross-session`` script run. Here it runs for real (a
couple of seconds), into a temporary dir; the wheel must carry what the README promises of a plain
install: the command and the entry point through which pi-python loads the extension.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import pi_cross_session
from tests.data_paths import REPO_ROOT
from tests.support.bounds import MUST_HAPPEN_S

BUILD_TOOLS = ("build", "hatchling", "twine")


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.skipif(
    any(importlib.util.find_spec(tool) is None for tool in BUILD_TOOLS),
    reason=f"the dev extra's build tools ({', '.join(BUILD_TOOLS)}) are not installed",
)
def test_make_dist_builds_a_checked_wheel_and_sdist(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    bin_dir = str(Path(sys.executable).parent)
    done = subprocess.run(
        # -o: the dev venv is taken as it is; this test never installs anything into it.
        ["make", "-s", "-o", ".venv/.installed", "dist", f"DIST={dist}", f"BIN={bin_dir}"],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        timeout=MUST_HAPPEN_S * 4,
        check=False,
    )
    assert done.returncode == 0, done
    version = pi_cross_session.__version__
    wheel = dist / f"pi_cross_session-{version}-py3-none-any.whl"
    sdist = dist / f"pi_cross_session-{version}.tar.gz"
    assert sorted(os.listdir(dist)) == sorted([wheel.name, sdist.name])  # the check dir is gone
    assert done.stdout.count("PASSED") == 2, done.stdout  # twine, once per file

    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        [entry_points] = [name for name in names if name.endswith(".dist-info/entry_points.txt")]
        entries = archive.read(entry_points).decode()
    assert "pi_cross_session/py.typed" in names
    assert "pi-cross-session = pi_cross_session._internal.cli:main" in entries
    assert "[pi_agent.extensions]" in entries
    assert (
        "pi-cross-session = pi_cross_session._internal.plugin.hosts.pi_python:activate" in entries
    )
    with tarfile.open(sdist) as archive:
        members = {
            Path(name).relative_to(f"pi_cross_session-{version}").as_posix()
            for name in archive.getnames()
        }
    assert {
        "README.md",
        "docs/user-guide.md",
        "demo/try_model.py",
        "demo/try_session.py",
    } <= members
