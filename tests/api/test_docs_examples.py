"""Every example of docs/api.md, run as the program it is, against real sessions.

Each ```python block of the page must follow a ``<!-- example: NAME -->`` line, and each NAME has
a runner here; a block without one fails the suite, so an example cannot go untested. Examples run
as separate Python processes in this test's agent dir, beside real ``pi-cross-session inbox``
processes (or, for the inbox example, a real ``pi-cross-session send``).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

import pytest

from tests.support.processes import COMMAND_TIMEOUT_S, Inboxes, WatchedProcess, cli_env, run_cli

DOC: Final = Path(__file__).resolve().parents[2] / "docs" / "api.md"
EXAMPLE: Final = re.compile(
    r"^<!-- example: (?P<name>[\w-]+) -->\n```python\n(?P<code>.*?)^```$", re.DOTALL | re.MULTILINE
)


def examples() -> dict[str, str]:
    text = DOC.read_text(encoding="utf-8")
    found = {match["name"]: match["code"] for match in EXAMPLE.finditer(text)}
    assert len(found) == text.count("```python"), "a python block of docs/api.md is not an example"
    return found


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture
def inboxes(private_agent_dir: Path, workdir: Path) -> Iterator[Inboxes]:
    started = Inboxes(private_agent_dir, workdir)
    try:
        yield started
    finally:
        started.close()


def script(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"example_{name}.py"
    path.write_text(examples()[name], encoding="utf-8")
    return path


def run_example(path: Path, agent_dir: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, str(path)],
        env=cli_env(agent_dir),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done
    return done


def test_every_example_is_run() -> None:
    assert set(examples()) == set(RUNNERS)


def list_example(tmp_path: Path, private_agent_dir: Path, workdir: Path, inboxes: Inboxes) -> None:
    ready = inboxes.start("reviewer").wait_event("ready")
    done = run_example(script(tmp_path, "list"), private_agent_dir, workdir)
    # The inbox runs in a plain directory: no branch.
    assert done.stdout == f"reviewer [{ready['ref']}] idle - {workdir}\n"


def send_example(tmp_path: Path, private_agent_dir: Path, workdir: Path, inboxes: Inboxes) -> None:
    inbox = inboxes.start("reviewer", busy=0)
    done = run_example(script(tmp_path, "send"), private_agent_dir, workdir)
    match = re.fullmatch(r"submitted, then delivered: ([0-9a-f-]{36})\n", done.stdout)
    assert match is not None, done
    [message] = [e for e in inbox.events() if e["event"] == "message"]
    assert message["messageId"] == match[1]
    assert message["text"] == "Build 1432 is green."


def inbox_example(tmp_path: Path, private_agent_dir: Path, workdir: Path, inboxes: Inboxes) -> None:
    del inboxes  # the example is the inbox
    example = WatchedProcess(
        [sys.executable, str(script(tmp_path, "inbox"))],
        env=cli_env(private_agent_dir),
        label="example",
        cwd=workdir,
    )
    try:
        ref = example.wait_line(r"^listening as tests-watcher \[([0-9a-f]{8})\]$")[1]
        sent = run_cli(private_agent_dir, "send", f"tests-watcher [{ref}]", "hello\n\x1b[2Jworld")
        assert sent.returncode == 0, sent
        assert example.process.wait(timeout=COMMAND_TIMEOUT_S) == 0, example.output()
        example.wait_line(r"world")  # the last line it printed has been read
        sender = re.escape("from pi-cross-session-cli [") + r"[0-9a-f]{8}\]:"
        assert re.fullmatch(sender, example.lines[1]), example.output()
        # The body as sent, its escape sequence escaped.
        assert example.lines[2:] == ["hello", "\\x1b[2Jworld"], example.output()
    finally:
        example.close()


RUNNERS: Final[dict[str, Callable[[Path, Path, Path, Inboxes], None]]] = {
    "list": list_example,
    "send": send_example,
    "inbox": inbox_example,
}


@pytest.mark.parametrize("name", sorted(RUNNERS))
def test_example(
    name: str, tmp_path: Path, private_agent_dir: Path, workdir: Path, inboxes: Inboxes
) -> None:
    RUNNERS[name](tmp_path, private_agent_dir, workdir, inboxes)
