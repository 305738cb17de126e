"""Sessions of ours write their journals: real command-line inboxes and sends, both ends of each
message, the user's setting (on, text, off, a value we do not know), and the live state each
session publishes beside its journal while it runs and after it stops."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pi_cross_session._internal.security.io.journal import Direction, Event
from pi_cross_session._internal.security.io.journal_network import (
    InboundState,
    journal_root,
    read_live_state,
    read_network,
    session_dirs,
)
from tests.support.bounds import MUST_HAPPEN_S
from tests.support.processes import Inboxes, InboxProcess, Result, run_cli


def until(condition: Callable[[], object], what: str) -> None:
    """Poll ``condition`` until it is true (files only expose state)."""
    deadline = time.monotonic() + MUST_HAPPEN_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.02)


def steps(agent_dir: Path, message_id: str, direction: Direction) -> list[str]:
    """The states one end journaled for one message, in order (a code after a space)."""
    events = read_network(str(agent_dir)).events
    return [
        event.kind.value + ("" if event.code is None else f" {event.code}")
        for event in events
        if event.message_id == message_id and event.direction is direction
    ]


def events_of(agent_dir: Path, message_id: str) -> list[Event]:
    return [e for e in read_network(str(agent_dir)).events if e.message_id == message_id]


def test_a_send_between_a_cli_and_an_inbox_is_journaled_at_both_ends(
    inboxes: Inboxes,
    cli: Callable[..., Result],
    private_agent_dir: Path,
) -> None:
    reviewer = inboxes.start("reviewer", busy=0.1)
    sent = cli("send", "--name", "builder", "--wait", "5", "reviewer", "hand-off: branch ready")
    assert sent.returncode == 0, sent
    message_id = sent.message_id()
    until(
        lambda: steps(private_agent_dir, message_id, Direction.IN)[-1:] == ["delivered"],
        "the receiver journals the delivery",
    )
    assert steps(private_agent_dir, message_id, Direction.OUT) == ["sent", "submitted", "delivered"]
    assert steps(private_agent_dir, message_id, Direction.IN) == [
        "admitted",
        "submitted",
        "delivered",
    ]
    events = events_of(private_agent_dir, message_id)
    out = next(e for e in events if e.direction is Direction.OUT)
    into = next(e for e in events if e.direction is Direction.IN)
    # Each side names itself and the other, with the instance ids the registrations hold.
    assert (out.session.name, out.peer.name) == ("builder", "reviewer")
    assert (into.session.name, into.peer.name) == ("reviewer", "builder")
    assert out.peer.instance_id == into.session.instance_id
    assert into.peer.instance_id == out.session.instance_id
    # No text, no summary: the default keeps the network's shape, not its content.
    assert all(e.text is None and e.summary is None for e in events)
    raw = b"".join(
        Path(d, "journal.jsonl").read_bytes() for d in session_dirs(str(private_agent_dir)).values()
    )
    assert b"hand-off" not in raw
    reviewer.stop()


def test_a_refusal_is_journaled_with_its_code_by_both_ends(
    inboxes: Inboxes,
    cli: Callable[..., Result],
    private_agent_dir: Path,
) -> None:
    inboxes.start("closed", "--refuse")
    sent = cli("send", "--name", "builder", "closed", "anyone there?")
    assert sent.returncode != 0, sent
    message_id = sent.message_id()
    assert steps(private_agent_dir, message_id, Direction.OUT) == ["sent", "refused refused"]
    until(
        lambda: steps(private_agent_dir, message_id, Direction.IN) == ["refused refused"],
        "the receiver journals its refusal",
    )


def test_with_text_kept_the_journal_holds_the_text_and_its_first_line_as_summary(
    private_agent_dir: Path, tmp_path: Path
) -> None:
    env = {"PI_CROSS_SESSION_JOURNAL": "text"}
    process = InboxProcess(private_agent_dir, "--name", "keeper", env=env, cwd=tmp_path)
    try:
        process.wait_event("ready")
        sent = run_cli(
            private_agent_dir, "send", "keeper", "first line\nsecond line", cwd=tmp_path, env=env
        )
        assert sent.returncode == 0, sent
        message_id = sent.message_id()
        until(
            lambda: any(
                e.direction is Direction.IN for e in events_of(private_agent_dir, message_id)
            ),
            "the receiver journals the message",
        )
        events = events_of(private_agent_dir, message_id)
        for direction in Direction:
            first = next(e for e in events if e.direction is direction)
            assert first.text == "first line\nsecond line"
            assert first.summary == "first line"
    finally:
        process.close()


@pytest.mark.parametrize("setting", ["off", "OFF", "maybe"])
def test_journaling_off_writes_nothing_and_an_unknown_value_means_off(
    private_agent_dir: Path, tmp_path: Path, setting: str
) -> None:
    env = {"PI_CROSS_SESSION_JOURNAL": setting}
    process = InboxProcess(private_agent_dir, "--name", "quiet", env=env, cwd=tmp_path)
    try:
        process.wait_event("ready")
        sent = run_cli(private_agent_dir, "send", "quiet", "not journaled", cwd=tmp_path, env=env)
        assert sent.returncode == 0, sent
        process.stop()
    finally:
        process.close()
    assert not os.path.exists(journal_root(str(private_agent_dir)))
    if setting == "maybe":
        # Both the inbox and the send say why nothing was written.
        assert "PI_CROSS_SESSION_JOURNAL is 'maybe'" in process.output()
        assert "PI_CROSS_SESSION_JOURNAL is 'maybe'" in sent.stderr


def test_each_session_publishes_its_live_state_and_marks_it_ended(
    inboxes: Inboxes,
    private_agent_dir: Path,
) -> None:
    open_inbox = inboxes.start("open-one")
    refusing = inboxes.start("refusing-one", "--refuse")
    states = {}

    def published() -> bool:
        for directory in session_dirs(str(private_agent_dir)).values():
            state = read_live_state(directory)
            if state is not None:
                states[state.name] = state
        return {"open-one", "refusing-one"} <= states.keys()

    until(published, "both inboxes publish a live state")
    assert states["open-one"].inbound is InboundState.OPEN
    assert states["open-one"].host == "inbox"
    assert states["refusing-one"].inbound is InboundState.REFUSING
    assert states["refusing-one"].reason == "its inbound policy is refuse"
    assert not any(state.ended for state in states.values())
    refusing.stop()
    open_inbox.stop()
    published()
    assert all(state.ended for state in states.values())
