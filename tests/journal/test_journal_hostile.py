"""A hostile, truncated or corrupt journal never breaks its reader: it skips what is not an event,
counts it, holds at most one bounded line, and yields only validated fields."""

from __future__ import annotations

import json
import os
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pi_cross_session._internal.protocol import sanitize
from pi_cross_session._internal.security.io.journal import (
    Direction,
    Event,
    EventKind,
    JournalReader,
    JournalWriter,
    Party,
    journal_dir,
    read_journal,
)
from pi_cross_session._internal.security.io.journal_settings import (
    MAX_JOURNAL_FILE_BYTES,
    MAX_JOURNAL_LINE_BYTES,
)
from tests.hypothesis_profiles import scaled

pytestmark = pytest.mark.hostile

BUILDER = Party("builder", "1" * 32)
REVIEWER = Party("reviewer", "2" * 32)
T0 = 1_765_000_000_000


def good_line(index: int) -> bytes:
    event = Event(
        T0 + index, EventKind.SENT, f"m{index}", BUILDER, REVIEWER, direction=Direction.OUT
    )
    return json.dumps(event.to_json()).encode() + b"\n"


def shaped(**changes: object) -> bytes:
    line: dict[str, object] = json.loads(good_line(99))
    line.update(changes)
    return json.dumps(line).encode() + b"\n"


@pytest.fixture
def directory(tmp_path: Path) -> str:
    path = journal_dir(str(tmp_path / "hostile-agent"), "1" * 32)
    os.makedirs(path, mode=0o700)
    return path


def plant(directory: str, data: bytes, name: str = "journal.jsonl") -> None:
    path = os.path.join(directory, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


#: Each is one line that is not an event, between two good ones.
BAD_LINES = {
    "binary garbage": bytes(range(256)).replace(b"\n", b"") + b"\n",
    "invalid utf-8": b'{"v":1,"at":1,"kind":"sent\xff\xfe"}\n',
    "not json": b"sent m1 from builder\n",
    "empty line": b"\n",
    "json array": b"[1, 2, 3]\n",
    "json string": b'"sent"\n',
    "other version": shaped(v=2),
    "no version": shaped(v=None),
    "unknown kind": shaped(kind="exploded"),
    "time as string": shaped(at="1765000000000"),
    "time as bool": shaped(at=True),
    "time as float": shaped(at=1.5),
    "negative time": shaped(at=-1),
    "huge time": shaped(at=10**30),
    "message id with spaces": shaped(messageId="m 1"),
    "message id as number": shaped(messageId=1),
    "peer as string": shaped(peer="reviewer"),
    "peer without instance id": shaped(peer={"name": "reviewer"}),
    "peer instance id forged": shaped(peer={"name": "r", "instanceId": "../../" + "a" * 26}),
    "peer name as list": shaped(peer={"name": ["r"], "instanceId": "2" * 32}),
    "peer name too long": shaped(peer={"name": "r" * 201, "instanceId": "2" * 32}),
    "code not a word": shaped(code="\x1b[31mrefused"),
    "code as number": shaped(code=7),
    "text as object": shaped(text={"a": 1}),
    "summary as number": shaped(summary=3),
    "cut as string": shaped(cut="yes"),
    "deep nesting": b"[" * 100_000 + b"]" * 100_000 + b"\n",
    "deep nesting within the bound": b"[" * 4_000 + b"]" * 4_000 + b"\n",
    "huge number": b'{"v":1,"at":' + b"9" * 5_000 + b"}\n",
    "overlong line": b'{"v":1,"pad":"' + b"x" * (MAX_JOURNAL_LINE_BYTES * 3) + b'"}\n',
}


@pytest.mark.parametrize("bad", list(BAD_LINES.values()), ids=list(BAD_LINES))
def test_a_bad_line_is_skipped_and_counted(directory: str, bad: bytes) -> None:
    plant(directory, good_line(0) + bad + good_line(2))
    found = read_journal(directory)
    assert [event.message_id for event in found.events] == ["m0", "m2"]
    assert found.skipped == 1
    assert found.unreadable == ()


def test_control_characters_stay_strings_for_the_caller_to_escape(directory: str) -> None:
    hostile = "\x1b]0;pwned\x07\r\n\x00\u202e\ud800"
    with JournalWriter(directory) as writer:
        assert writer.record(
            Event(
                T0,
                EventKind.REFUSED,
                "m0",
                BUILDER,
                Party(hostile, "2" * 32),
                code="busy",
                direction=Direction.OUT,
            )
        )
    raw = Path(directory, "journal.jsonl").read_bytes()
    assert raw.count(b"\n") == 1
    assert raw.isascii()
    assert b"\x1b" not in raw
    (event,) = read_journal(directory).events
    assert event.peer.name == hostile
    shown = sanitize.line(event.peer.name)
    assert "\x1b" not in shown
    assert "\n" not in shown
    assert "\x00" not in shown


def test_a_line_cut_short_at_the_end_is_skipped(directory: str) -> None:
    plant(directory, good_line(0) + good_line(1)[:-9])
    found = read_journal(directory)
    assert [event.message_id for event in found.events] == ["m0"]
    assert found.skipped == 1


@pytest.mark.parametrize("tail", [50_000_000, 5_000])
def test_a_huge_file_is_read_only_at_its_end_and_never_held_whole(
    directory: str, tail: int
) -> None:
    # 100 MiB with no newline (a hole: cheap to make, read like any bytes), a good event, then a
    # tail of bytes that never end their line. No journal file of ours outgrows 1 MiB, so only the
    # last MiB of this one is read: the good event is found when it lies there.
    plant(directory, good_line(0), name="journal.1.jsonl")
    path = os.path.join(directory, "journal.jsonl")
    with open(path, "wb") as file:
        file.truncate(100 * 1_048_576)
    with open(path, "ab") as file:
        file.write(b"\n" + good_line(1) + b"\xff" * tail)
    os.chmod(path, 0o600)
    size = os.path.getsize(path)
    tracemalloc.start()
    try:
        reader = JournalReader(directory)
        ids = [event.message_id for event in reader]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert ids == (["m0"] if tail > MAX_JOURNAL_FILE_BYTES else ["m0", "m1"])
    assert reader.skipped == 1  # the tail without a newline
    assert reader.skipped_bytes == size - MAX_JOURNAL_FILE_BYTES
    assert peak < 2 * 1_048_576


def test_a_rotated_file_number_out_of_range_is_not_read(directory: str) -> None:
    plant(directory, good_line(0), name="journal.99999.jsonl")
    plant(directory, good_line(1), name="journal.0.jsonl")
    plant(directory, good_line(2), name="journal.jsonl")
    assert [event.message_id for event in read_journal(directory).events] == ["m2"]


def test_a_directory_in_the_journals_place_is_refused_and_reported(directory: str) -> None:
    os.mkdir(os.path.join(directory, "journal.jsonl"))
    writer = JournalWriter(directory)
    assert not writer.record(
        Event(T0, EventKind.SENT, "m0", BUILDER, REVIEWER, direction=Direction.OUT)
    )
    assert writer.failures == 1
    found = read_journal(directory)
    assert found.events == ()
    assert len(found.unreadable) == 1


_PIECES = st.one_of(
    st.binary(max_size=300),
    st.sampled_from([good_line(1), *BAD_LINES.values()]),
    st.just(b"\n"),
)


@settings(max_examples=scaled(200))
@given(pieces=st.lists(_PIECES, max_size=12))
def test_any_bytes_between_good_lines_never_break_the_reader(
    tmp_path_factory: pytest.TempPathFactory, pieces: list[bytes]
) -> None:
    directory = journal_dir(str(tmp_path_factory.mktemp("fuzzed-agent")), "1" * 32)
    os.makedirs(directory, mode=0o700)
    middle = b"".join(pieces)
    plant(directory, good_line(0) + middle + b"\n" + good_line(2))
    found = read_journal(directory)
    ids = [event.message_id for event in found.events]
    assert ids[0] == "m0"
    assert ids[-1] == "m2"
    assert found.skipped + len(ids) >= 2
    assert found.skipped + len(ids) <= middle.count(b"\n") + 3
