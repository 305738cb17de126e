"""``pi-cross-session watch`` with its stdout on a pipe: lines, or JSON Lines with ``--json``,
through real processes while real sessions exchange messages and journals change under it.

What is checked: a live inbox is reported as it appears and as it goes; a command-line send to it
shows both ends' events as they happen; a journal holding a corrupt line, a line cut by a kill and
a 100 MiB file keeps watch up and is said on stderr; a peer's escapes stay escaped; SIGTERM ends
it with 0; it never imports rich when it prints lines, and creates nothing.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pi_cross_session._internal.security.io.journal import (
    Direction,
    Event,
    EventKind,
    JournalWriter,
    Party,
    journal_dir,
)
from tests.support.bounds import MUST_HAPPEN_S
from tests.support.processes import CLI, Inboxes, Result, WatchedProcess, cli_env

#: A journal's author that is no live session, with a hostile name.
GHOST = Party("ghost\x1b[2J\x1b]0;pwned\x07[bold]x[/]", "9" * 32)
#: How long watch may take to stop once signalled.
STOP_S = MUST_HAPPEN_S


@pytest.fixture
def no_rich(tmp_path: Path) -> dict[str, str]:
    """An environment in which importing rich fails loudly: the line modes must never try."""
    shadow = tmp_path / "shadow" / "rich"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "raise ImportError('rich imported by a mode that prints lines')\n", encoding="utf-8"
    )
    return {"PYTHONPATH": str(shadow.parent)}


@pytest.fixture
def watch(private_agent_dir: Path, tmp_path: Path) -> Iterator[Callable[..., WatchedProcess]]:
    """Start ``pi-cross-session watch ARGS`` (stdout and stderr are pipes); killed at the end."""
    started: list[WatchedProcess] = []

    def start(*args: str, env: dict[str, str] | None = None) -> WatchedProcess:
        process = WatchedProcess(
            [*CLI, "watch", *args],
            env={**cli_env(private_agent_dir), **(env or {})},
            label="watch",
            cwd=tmp_path,
        )
        started.append(process)
        return process

    yield start
    for process in started:
        process.close()


def stop(process: WatchedProcess, number: int = signal.SIGTERM) -> int:
    process.process.send_signal(number)
    code = process.process.wait(timeout=STOP_S)
    process.close()
    return code


def json_lines(process: WatchedProcess) -> list[dict[str, Any]]:
    return [json.loads(line) for line in process.lines if line.startswith("{")]


def wait_json(process: WatchedProcess, pattern: str, **fields: Any) -> dict[str, Any]:
    """The first JSON line matching ``pattern`` (a regex on the raw line) whose fields are
    ``fields``; waits for it."""
    deadline = time.monotonic() + MUST_HAPPEN_S
    while True:
        process.wait_line(pattern, timeout=max(deadline - time.monotonic(), 0.001))
        for data in json_lines(process):
            if all(data.get(key) == value for key, value in fields.items()):
                return data
        if time.monotonic() > deadline:
            raise AssertionError(f"no line with {fields}:\n{process.output()}")
        time.sleep(0.05)


def sent(cli: Callable[..., Result], *args: str) -> str:
    result = cli("send", "--name", "alpha", *args)
    assert result.returncode == 0, result
    return result.message_id()


def test_json_lines_report_sessions_and_both_ends_of_a_message(
    inboxes: Inboxes,
    cli: Callable[..., Result],
    watch: Callable[..., WatchedProcess],
    no_rich: dict[str, str],
) -> None:
    beta = inboxes.start("beta", busy=0)
    beta_id = beta.wait_event("ready")["instanceId"]
    watcher = watch("--json", env=no_rich)
    appeared = wait_json(watcher, r'"type": "session"', name="beta", change="appeared")
    assert (appeared["instanceId"], appeared["kind"], appeared["inbound"]) == (
        beta_id,
        "inbox",
        "open",
    )
    assert (appeared["journal"], appeared["remoteMachine"], appeared["queue"]) == (True, None, 0)

    message_id = sent(cli, "beta", "hello from alpha", "--wait", "20")
    out = wait_json(watcher, message_id, messageId=message_id, kind="sent")
    assert out["direction"] == "out"
    assert (out["from"]["name"], out["to"]["name"], out["to"]["instanceId"]) == (
        "alpha",
        "beta",
        beta_id,
    )
    assert out["otherSideKnown"] is True
    delivered = wait_json(
        watcher, message_id, messageId=message_id, kind="delivered", direction="in"
    )
    assert delivered["session"]["instanceId"] == beta_id
    assert delivered["from"]["name"] == "alpha"
    # The sender heard it too (it waited).
    wait_json(watcher, message_id, messageId=message_id, kind="delivered", direction="out")
    # Each object is one line of JSON with a type; nothing else is printed on stdout.
    for line in watcher.lines:
        assert json.loads(line)["type"] in ("event", "session"), line

    beta.stop()
    gone = wait_json(watcher, r'"change": "gone"', change="gone", instanceId=beta_id)
    assert gone["name"] == "beta"
    assert stop(watcher) == 0, watcher.output()
    assert "rich" not in "\n".join(watcher.err_lines), watcher.output()


def write_event(agent_dir: Path, writer: Party, peer: Party, **fields: Any) -> str:
    message_id = str(uuid.uuid4())
    journal = JournalWriter(journal_dir(str(agent_dir), writer.instance_id))
    with journal:
        assert journal.record(
            Event(
                time.time_ns() // 1_000_000,
                EventKind.SENT,
                message_id,
                writer,
                peer,
                direction=Direction.OUT,
                **fields,
            )
        )
    return message_id


def append(path: Path, data: bytes) -> None:
    with path.open("ab") as file:
        file.write(data)


@pytest.mark.slow  # about 3 s: two sends and four journals, each waited for on stdout
def test_lines_as_journals_change_under_it_hostile_corrupt_cut_and_huge(
    inboxes: Inboxes,
    cli: Callable[..., Result],
    watch: Callable[..., WatchedProcess],
    private_agent_dir: Path,
    no_rich: dict[str, str],
) -> None:
    beta = inboxes.start("beta", busy=0)
    beta_ref = beta.wait_event("ready")["instanceId"][:6]
    watcher = watch(env=no_rich)
    watcher.wait_line(rf"session beta \[{beta_ref}\] appeared: inbox, idle, open$")

    # A real message, both ends in words.
    message_id = sent(cli, "beta", "hello")
    watcher.wait_line(rf"alpha \[\w+\] → beta \[{beta_ref}\]  sent  {message_id}  \(as the sender")
    watcher.wait_line(
        rf"alpha \[\w+\] → beta \[{beta_ref}\]  delivered  {message_id}  \(as the receiver saw it\)"
    )

    # A journal whose author chose a hostile name, to a session that keeps no journal.
    nobody = Party("node-peer", "8" * 32)
    hostile = write_event(private_agent_dir, GHOST, nobody)
    shown = watcher.wait_line(re.escape(hostile)).string
    assert "\x1b" not in shown
    assert "\x07" not in shown
    assert "ghost\\x1b[2J\\x1b]0;pwned\\x07[bold]x[/] [999999] → node-peer [888888]" in shown
    assert "[receiver's side unknown: no journal]" in shown

    # A corrupt line is skipped and counted; the events after it are read.
    ghost_file = Path(journal_dir(str(private_agent_dir), GHOST.instance_id)) / "journal.jsonl"
    append(ghost_file, b"{not an event}\n")
    after_corrupt = write_event(private_agent_dir, GHOST, nobody)
    watcher.wait_line(re.escape(after_corrupt))
    watcher.wait_line(r"skipped 1 line\b", stderr=True)

    # A session killed in the middle of a line: its fragment is held, the others go on.
    cut = Party("cut", "6" * 32)
    watcher.wait_line(re.escape(write_event(private_agent_dir, cut, nobody)))
    cut_file = Path(journal_dir(str(private_agent_dir), cut.instance_id)) / "journal.jsonl"
    append(cut_file, b'{"v":1,"at":17965340,"kind":"sen')
    watcher.wait_line(re.escape(write_event(private_agent_dir, GHOST, nobody)))

    # A 100 MiB journal (sparse): only its end is read; watch says what it passed over and goes on.
    huge = Party("huge", "7" * 32)
    write_event(private_agent_dir, huge, nobody)
    huge_file = Path(journal_dir(str(private_agent_dir), huge.instance_id)) / "journal.jsonl"
    with huge_file.open("r+b") as file:
        file.truncate(100 * 1024 * 1024)
    append(huge_file, b"\n")
    after_huge = write_event(private_agent_dir, huge, nobody)
    watcher.wait_line(re.escape(after_huge))
    watcher.wait_line(r"bytes of files larger than a journal grows", stderr=True)

    # Still up, still following the real sessions.
    again = sent(cli, "beta", "still there?")
    watcher.wait_line(rf"delivered  {again}  \(as the receiver saw it\)")
    assert stop(watcher, signal.SIGINT) == 0, watcher.output()
    for line in watcher.lines:
        assert "\x1b" not in line, line


def test_it_creates_nothing_not_even_the_agent_dir(tmp_path: Path) -> None:
    missing = tmp_path / "agnet"
    process = WatchedProcess(
        [*CLI, "watch", "--json"], env=cli_env(missing), label="watch", cwd=tmp_path
    )
    try:
        # Nothing to wait for (it prints nothing here): a second of its loop, listing included.
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline and process.process.poll() is None:
            time.sleep(0.1)
        assert process.process.poll() is None, process.output()
        assert stop(process) == 0, process.output()
    finally:
        process.close()
    assert not os.path.lexists(missing)
    assert process.lines == [], process.output()
