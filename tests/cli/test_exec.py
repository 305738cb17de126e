"""The suite forks most commands from a server that imported the package (``tests/support/
forked.py``); here the same commands are also started the way a user starts them, ``python -m
pi_cross_session``, and must print and exit the same."""

from __future__ import annotations

import os
import re
import signal
import uuid
from pathlib import Path

import pytest

from tests.support.forked import EXEC_ENV, ZYGOTE
from tests.support.processes import InboxProcess, Result, run_cli

STARTED = {EXEC_ENV: "1"}
FRESH_ID = re.compile(r"\b[0-9a-f]{32}\b")
#: A messageId nobody sent (the same in both runs, so their outputs can be compared).
NOBODY_SENT = str(uuid.UUID(int=7))


def command_line(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as raw:
        return [part.decode() for part in raw.read().split(b"\0") if part]


def same(a: Result, b: Result) -> tuple[int, str, str]:
    """Both results, equal but for the random instance ids a command makes up (``paths``)."""
    seen = [
        (r.returncode, FRESH_ID.sub("<id>", r.stdout), FRESH_ID.sub("<id>", r.stderr))
        for r in (a, b)
    ]
    assert seen[0] == seen[1], f"{a}\n{b}"
    return seen[0]


@pytest.mark.parametrize(
    "args",
    [
        ("--version",),
        ("--help",),
        ("send", "--help"),
        ("paths",),
        ("peers",),
        ("peers", "--json"),
        ("send", "nobody", "hello"),
        ("status", NOBODY_SENT),
        ("status", "not-an-id"),
        ("doctor", "--json"),
        ("no-such-command",),
    ],
    ids=lambda args: " ".join(args),
)
def test_a_forked_command_prints_and_exits_as_a_started_one(
    private_agent_dir: Path, tmp_path: Path, args: tuple[str, ...]
) -> None:
    forked = run_cli(private_agent_dir, *args, cwd=tmp_path)
    started = run_cli(private_agent_dir, *args, cwd=tmp_path, env=STARTED)
    same(forked, started)


@pytest.mark.parametrize("how", ["forked", "started"])
def test_an_inbox_is_its_own_process_and_stops_on_sigint(
    private_agent_dir: Path, tmp_path: Path, how: str
) -> None:
    inbox = InboxProcess(
        private_agent_dir, "--name", "solo", cwd=tmp_path, env=STARTED if how == "started" else {}
    )
    try:
        ready = inbox.wait_event("ready")
        # The pid the session registered is the one a test signals, however it was started.
        assert ready["pid"] == inbox.pid
        assert inbox.pid != os.getpid()
        launched = command_line(inbox.pid)
        if how == "forked" and os.environ.get(EXEC_ENV) != "1":  # not under make test-long
            assert ZYGOTE in launched
        else:
            assert launched[1:3] == ["-m", "pi_cross_session"]
        assert os.getcwd() != str(tmp_path)
        assert os.readlink(f"/proc/{inbox.pid}/cwd") == str(tmp_path)
        assert sorted(os.listdir(f"/proc/{inbox.pid}/fd"))[:3] == ["0", "1", "2"]
        assert inbox.stop(signal.SIGINT) == 0
    finally:
        inbox.close()


def test_an_interpreter_setting_gets_a_started_process(private_agent_dir: Path) -> None:
    inbox = InboxProcess(private_agent_dir, env={"PYTHONIOENCODING": "ascii"})
    try:
        inbox.wait_event("ready")
        assert command_line(inbox.pid)[1:3] == ["-m", "pi_cross_session"]
    finally:
        inbox.close()
