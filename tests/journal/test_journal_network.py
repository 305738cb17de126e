"""Every session's journal at once: the merged history, the follower across rotations and
half-written lines, live states a hostile file cannot forge into something else, and the
retention of ended sessions' journals."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from pi_cross_session._internal.security.io.journal import (
    Direction,
    Event,
    EventFilter,
    EventKind,
    JournalWriter,
    Party,
    journal_dir,
)
from pi_cross_session._internal.security.io.journal_network import (
    InboundState,
    JournalFollower,
    LiveGoal,
    LiveState,
    prune_ended,
    read_live_state,
    read_network,
    session_dirs,
    write_live_state,
)

BUILDER = Party("builder", "1" * 32)
REVIEWER = Party("reviewer", "2" * 32)
T0 = 1_765_000_000_000


def event(index: int, writer: Party = BUILDER, peer: Party = REVIEWER) -> Event:
    direction = Direction.OUT if writer is BUILDER else Direction.IN
    return Event(T0 + index, EventKind.SENT, f"m{index}", writer, peer, direction=direction)


@pytest.fixture
def agent_dir(tmp_path: Path) -> str:
    return str(tmp_path / "network-agent")


def writer_of(agent_dir: str, who: Party, **options: int) -> JournalWriter:
    return JournalWriter(journal_dir(agent_dir, who.instance_id), **options)  # type: ignore[arg-type]


def test_the_history_merges_every_session_in_time_order(agent_dir: str) -> None:
    with writer_of(agent_dir, BUILDER) as builder, writer_of(agent_dir, REVIEWER) as reviewer:
        for index in range(0, 20, 2):
            builder.record(event(index))
            reviewer.record(event(index + 1, REVIEWER, BUILDER))
    found = read_network(agent_dir)
    assert [e.at - T0 for e in found.events] == list(range(20))
    assert found.journals == 2
    assert found.journaled == {BUILDER.instance_id, REVIEWER.instance_id}
    newest = read_network(agent_dir, limit=3)
    assert [e.message_id for e in newest.events] == ["m17", "m18", "m19"]
    only = read_network(agent_dir, where=EventFilter(session=REVIEWER.instance_id))
    assert {e.session for e in only.events} == {REVIEWER}


def test_no_journal_dir_is_no_history(agent_dir: str) -> None:
    assert read_network(agent_dir).events == []
    assert session_dirs(agent_dir) == {}


def test_a_root_that_is_a_symlink_is_not_read(agent_dir: str, tmp_path: Path) -> None:
    elsewhere = str(tmp_path / "elsewhere-agent")
    with writer_of(elsewhere, BUILDER) as builder:
        builder.record(event(0))
    os.makedirs(os.path.join(agent_dir, "cross-session"), mode=0o700)
    os.symlink(
        os.path.join(elsewhere, "cross-session", "journal"),
        os.path.join(agent_dir, "cross-session", "journal"),
    )
    found = read_network(agent_dir)
    assert found.events == []
    assert [path for path, _ in found.unreadable] == [
        os.path.join(agent_dir, "cross-session", "journal")
    ]


def test_the_follower_hands_out_each_event_once_across_rotations(agent_dir: str) -> None:
    directory = journal_dir(agent_dir, BUILDER.instance_id)
    writer = writer_of(agent_dir, BUILDER, max_file_bytes=2_000, max_line_bytes=1_000)
    follower = JournalFollower(directory)
    seen: list[str] = []
    for index in range(60):
        writer.record(event(index))
        if index % 7 == 0:
            seen += [e.message_id for e in follower.poll()]
    seen += [e.message_id for e in follower.poll()]
    writer.close()
    # Every rotation happened between two polls (a file holds about six events); nothing is
    # lost or repeated while the follower keeps up with the three rotated files kept.
    assert seen == [f"m{i}" for i in range(60)]
    assert follower.skipped == 0


def test_the_follower_holds_a_half_written_line_until_its_end_arrives(agent_dir: str) -> None:
    directory = journal_dir(agent_dir, BUILDER.instance_id)
    os.makedirs(directory, mode=0o700)
    line = json.dumps(event(0).to_json()).encode() + b"\n"
    path = os.path.join(directory, "journal.jsonl")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    follower = JournalFollower(directory)
    try:
        os.write(fd, line[:30])
        assert follower.poll() == []
        os.write(fd, line[30:])
        assert [e.message_id for e in follower.poll()] == ["m0"]
    finally:
        os.close(fd)
    assert follower.skipped == 0


def test_a_follower_from_the_end_skips_what_was_there(agent_dir: str) -> None:
    directory = journal_dir(agent_dir, BUILDER.instance_id)
    with writer_of(agent_dir, BUILDER) as writer:
        writer.record(event(0))
        follower = JournalFollower(directory, from_end=True)
        assert follower.poll() == []
        writer.record(event(1))
        assert [e.message_id for e in follower.poll()] == ["m1"]


def test_the_follower_reads_only_the_end_of_a_file_that_grew_past_a_journal(
    agent_dir: str,
) -> None:
    directory = journal_dir(agent_dir, BUILDER.instance_id)
    os.makedirs(directory, mode=0o700)
    path = os.path.join(directory, "journal.jsonl")
    with open(path, "wb") as file:
        file.truncate(100 * 1_048_576)
        file.seek(0, os.SEEK_END)
        file.write(b"\n" + json.dumps(event(7).to_json()).encode() + b"\n")
    os.chmod(path, 0o600)
    follower = JournalFollower(directory)
    assert [e.message_id for e in follower.poll()] == ["m7"]
    assert follower.skipped_bytes == 99 * 1_048_576 + 2 + len(json.dumps(event(7).to_json()))


STATE = LiveState(
    at=T0,
    instance_id=BUILDER.instance_id,
    name="builder",
    host="pi-python",
    inbound=InboundState.LATCHED,
    queue=3,
    reason="the turn was aborted",
    goal=LiveGoal("g-1", "ship the fix"),
)


def test_a_live_state_is_read_back_as_written(agent_dir: str) -> None:
    directory = journal_dir(agent_dir, BUILDER.instance_id)
    write_live_state(directory, STATE)
    assert read_live_state(directory) == STATE
    assert os.stat(os.path.join(directory, "live.json")).st_mode & 0o777 == 0o600


@pytest.mark.parametrize(
    "change",
    [
        {"inbound": "wide-open"},
        {"queue": -1},
        {"queue": True},
        {"at": "now"},
        {"instanceId": "../../etc"},
        {"name": "x" * 300},
        {"goal": "g-1"},
        {"goal": {"id": "g-1"}},
        {"ended": "no"},
        {"v": 2},
    ],
)
def test_a_live_state_of_the_wrong_shape_is_no_state(
    agent_dir: str, change: dict[str, object]
) -> None:
    directory = journal_dir(agent_dir, BUILDER.instance_id)
    write_live_state(directory, STATE)
    path = os.path.join(directory, "live.json")
    data = json.loads(Path(path).read_bytes()) | change
    Path(path).write_text(json.dumps(data))
    assert read_live_state(directory) is None


def test_a_live_state_file_that_is_not_ours_is_not_read(agent_dir: str) -> None:
    directory = journal_dir(agent_dir, BUILDER.instance_id)
    write_live_state(directory, STATE)
    path = os.path.join(directory, "live.json")
    os.chmod(path, 0o644)
    assert read_live_state(directory) is None
    os.chmod(path, 0o600)
    Path(path).write_bytes(b"{" + b" " * 10_000 + b"}")
    assert read_live_state(directory) is None


def age(directory: str, seconds: float) -> None:
    then = time.time() - seconds
    for name in os.listdir(directory):
        os.utime(os.path.join(directory, name), (then, then))


def test_ended_sessions_journals_go_after_the_retention_and_live_ones_stay(agent_dir: str) -> None:
    old, live, recent = Party("old", "a" * 32), Party("live", "b" * 32), Party("new", "c" * 32)
    for who in (old, live, recent):
        with writer_of(agent_dir, who) as writer:
            writer.record(event(0, who, BUILDER))
        write_live_state(
            journal_dir(agent_dir, who.instance_id),
            LiveState(T0, who.instance_id, who.name, "inbox", InboundState.OPEN),
        )
    fortnight = 15 * 24 * 3600
    age(journal_dir(agent_dir, old.instance_id), fortnight)
    age(journal_dir(agent_dir, live.instance_id), fortnight)
    assert prune_ended(agent_dir, [live.instance_id]) == 1
    assert set(session_dirs(agent_dir)) == {live.instance_id, recent.instance_id}


def test_a_journal_dir_holding_something_else_is_left_alone(agent_dir: str) -> None:
    with writer_of(agent_dir, BUILDER) as writer:
        writer.record(event(0))
    directory = journal_dir(agent_dir, BUILDER.instance_id)
    Path(directory, "notes.txt").write_text("mine")
    age(directory, 30 * 24 * 3600)
    assert prune_ended(agent_dir, []) == 0
    assert Path(directory, "notes.txt").read_text() == "mine"
    assert Path(directory, "journal.jsonl").exists()
