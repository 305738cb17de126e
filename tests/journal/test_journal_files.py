"""The event journal's writer and reader on real files: modes, rotation, bounds, the text default,
journaling off, filters, and unsafe files in the journal's place."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from pi_cross_session._internal.protocol.limits import MAX_NAME_CODE_POINTS, MAX_SUMMARY_CODE_POINTS
from pi_cross_session._internal.security.io import fs
from pi_cross_session._internal.security.io.journal import (
    Direction,
    Event,
    EventFilter,
    EventKind,
    JournalPolicy,
    JournalReader,
    JournalWriter,
    Party,
    encode_event,
    journal_dir,
    journal_files,
    read_journal,
)
from pi_cross_session._internal.security.io.journal_settings import (
    JOURNAL_FILES_KEPT,
    MAX_JOURNAL_FILE_BYTES,
    MAX_JOURNAL_LINE_BYTES,
)

BUILDER = Party("builder", "1" * 32)
REVIEWER = Party("reviewer", "2" * 32)
TESTER = Party("tester", "3" * 32)
T0 = 1_765_000_000_000


def event(index: int, kind: EventKind = EventKind.SENT, **fields: object) -> Event:
    values: dict[str, object] = {
        "session": BUILDER,
        "peer": REVIEWER,
        "direction": Direction.OUT,
    } | fields
    return Event(T0 + index, kind, f"m{index}", **values)  # type: ignore[arg-type]


@pytest.fixture
def directory(tmp_path: Path) -> str:
    return journal_dir(str(tmp_path / "journal-agent"), "1" * 32)


@pytest.fixture
def open_umask() -> Iterator[None]:
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


def lines_of(path: str) -> list[bytes]:
    return Path(path).read_bytes().splitlines(keepends=True)


def test_the_journal_lives_in_the_agent_dirs_private_area(tmp_path: Path) -> None:
    path = journal_dir(str(tmp_path / "agent"), "f" * 32)
    assert path == f"{tmp_path}/agent/cross-session/journal/{'f' * 32}"
    with pytest.raises(ValueError, match="instance id"):
        journal_dir(str(tmp_path), "../../etc")


@pytest.mark.usefixtures("open_umask")
def test_files_are_0600_in_0700_dirs_whatever_the_umask(directory: str, tmp_path: Path) -> None:
    with JournalWriter(directory) as writer:
        assert writer.record(event(0))
    for path in (
        directory,
        os.path.dirname(directory),
        str(tmp_path / "journal-agent" / "cross-session"),
    ):
        assert stat.S_IMODE(os.lstat(path).st_mode) == fs.DIR_MODE, path
    assert stat.S_IMODE(os.lstat(os.path.join(directory, "journal.jsonl")).st_mode) == 0o600


def test_an_existing_journal_of_ours_too_open_is_made_0600(directory: str) -> None:
    os.makedirs(directory, mode=0o700)
    path = os.path.join(directory, "journal.jsonl")
    Path(path).write_bytes(b"")
    os.chmod(path, 0o644)
    with JournalWriter(directory) as writer:
        assert writer.record(event(0))
    assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600


def test_events_come_back_as_written_oldest_first(directory: str) -> None:
    written = [
        event(0, EventKind.SENT),
        event(1, EventKind.REFUSED, code="rate_limited"),
        event(2, EventKind.ADMITTED, session=REVIEWER, peer=BUILDER),
        event(3, EventKind.DROPPED, code="dropped_shutdown"),
        event(4, EventKind.DELIVERED),
    ]
    with JournalWriter(directory) as writer:
        assert all(writer.record(item) for item in written)
    found = read_journal(directory)
    assert found.events == tuple(written)
    assert (found.skipped, found.unreadable) == (0, ())
    # One line each, one JSON object each, in the project's state words.
    lines = lines_of(os.path.join(directory, "journal.jsonl"))
    assert [json.loads(line)["kind"] for line in lines] == [
        "sent",
        "refused",
        "admitted",
        "dropped",
        "delivered",
    ]


def test_text_and_summary_are_not_kept_by_default(directory: str) -> None:
    secret = "the deploy key is hunter2"
    with JournalWriter(directory) as writer:
        assert writer.record(event(0, summary=secret, text=secret))
    raw = Path(directory, "journal.jsonl").read_bytes()
    assert b"hunter2" not in raw
    (only,) = read_journal(directory).events
    assert (only.text, only.summary) == (None, None)


def test_text_is_kept_when_the_setting_allows(directory: str) -> None:
    with JournalWriter(directory, policy=JournalPolicy(keep_text=True)) as writer:
        assert writer.record(event(0, summary="first line", text="first line\nsecond"))
    (only,) = read_journal(directory).events
    assert (only.summary, only.text, only.cut) == ("first line", "first line\nsecond", False)


def test_journaling_off_writes_nothing_and_creates_nothing(tmp_path: Path) -> None:
    agent = tmp_path / "quiet-agent"
    writer = JournalWriter(journal_dir(str(agent), "1" * 32), policy=JournalPolicy(enabled=False))
    assert not writer.record(event(0))
    writer.close()
    assert not agent.exists()
    assert (writer.written, writer.failures) == (0, 0)


def test_no_line_exceeds_the_bound_whatever_the_text(directory: str) -> None:
    worst_name = "\U0001f600\x07" * (MAX_NAME_CODE_POINTS // 2)
    huge = Party(worst_name + "past the wire's bound", "4" * 32)
    texts = ["x" * 1_000_000, "\U0001f600" * 300_000, "\ud800\x00\n" * 100_000]
    with JournalWriter(directory, policy=JournalPolicy(keep_text=True)) as writer:
        for index, text in enumerate(texts):
            item = event(index, session=huge, peer=huge, summary=text, text=text)
            assert item.summary == text[:MAX_SUMMARY_CODE_POINTS]
            assert writer.record(item)
    lines = lines_of(os.path.join(directory, "journal.jsonl"))
    assert len(lines) == 3
    assert all(len(line) <= MAX_JOURNAL_LINE_BYTES and line.endswith(b"\n") for line in lines)
    found = read_journal(directory).events
    assert [item.cut for item in found] == [True] * 3
    # The text's start is kept; the names were within the bound, so they are whole.
    assert found[0].text is not None
    assert found[0].text.startswith("xxxx")
    assert {item.peer.name for item in found} == {worst_name}
    assert [item.summary for item in found] == [text[:MAX_SUMMARY_CODE_POINTS] for text in texts]


def test_names_are_cut_last_and_a_tiny_bound_is_never_exceeded() -> None:
    long_names = Party("n" * MAX_NAME_CODE_POINTS, "4" * 32)
    item = event(0, session=long_names, peer=long_names, text="t" * 500)
    line = encode_event(item, keep_text=True, max_line_bytes=400)
    assert line is not None
    assert len(line) <= 400
    decoded = json.loads(line)
    assert "text" in decoded
    assert decoded["text"] == ""
    assert decoded["cut"] is True
    assert len(decoded["peer"]["name"]) < MAX_NAME_CODE_POINTS
    assert encode_event(item, keep_text=True, max_line_bytes=50) is None


def test_rotation_at_the_bound_keeps_n_files(directory: str) -> None:
    line_bytes = len(encode_event(event(10)) or b"")  # m10 … m59: lines of one length
    per_file = 10
    writer = JournalWriter(
        directory, max_line_bytes=512, max_file_bytes=line_bytes * per_file + 5, files_kept=2
    )
    with writer:
        for index in range(10, 60):
            assert writer.record(event(index))
    names = sorted(os.listdir(directory))
    assert names == ["journal.1.jsonl", "journal.2.jsonl", "journal.jsonl"]
    for name in names:
        path = os.path.join(directory, name)
        assert os.path.getsize(path) <= line_bytes * per_file + 5
        assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
    assert [os.path.basename(path) for path in journal_files(directory)] == [
        "journal.2.jsonl",
        "journal.1.jsonl",
        "journal.jsonl",
    ]
    # The three newest files' worth of events, oldest first, none repeated or lost among them.
    found = read_journal(directory).events
    assert [item.message_id for item in found] == [f"m{i}" for i in range(30, 60)]


def test_a_restarted_writer_rotates_a_full_file_before_appending(directory: str) -> None:
    line_bytes = len(encode_event(event(0)) or b"")
    bound = line_bytes * 3
    with JournalWriter(directory, max_line_bytes=256, max_file_bytes=bound) as writer:
        for index in range(3):
            writer.record(event(index))
    with JournalWriter(directory, max_line_bytes=256, max_file_bytes=bound) as writer:
        writer.record(event(3))
    assert os.path.getsize(os.path.join(directory, "journal.jsonl")) == line_bytes
    assert [item.message_id for item in read_journal(directory).events] == [
        "m0",
        "m1",
        "m2",
        "m3",
    ]


def test_the_default_bounds_hold_a_sessions_journal_under_4_mib() -> None:
    assert MAX_JOURNAL_FILE_BYTES * (JOURNAL_FILES_KEPT + 1) <= 4 * 1_048_576


def test_filters_by_session_peer_kind_time_and_message_id(directory: str) -> None:
    items = [
        event(0, EventKind.SENT),
        event(1, EventKind.SENT, peer=TESTER),
        event(2, EventKind.ADMITTED, session=REVIEWER, peer=BUILDER),
        event(3, EventKind.REFUSED, peer=TESTER, code="busy"),
        event(4, EventKind.DELIVERED),
    ]
    with JournalWriter(directory) as writer:
        for item in items:
            writer.record(item)

    def ids(where: EventFilter) -> list[str]:
        return [found.message_id for found in JournalReader(directory, where=where)]

    assert ids(EventFilter(session="reviewer")) == ["m2"]
    assert ids(EventFilter(session="1" * 32)) == ["m0", "m1", "m3", "m4"]
    assert ids(EventFilter(peer="tester")) == ["m1", "m3"]
    assert ids(EventFilter(kinds=frozenset({EventKind.REFUSED, EventKind.DELIVERED}))) == [
        "m3",
        "m4",
    ]
    assert ids(EventFilter(since=T0 + 3)) == ["m3", "m4"]
    assert ids(EventFilter(message_id="m2")) == ["m2"]
    assert ids(EventFilter(peer="tester", since=T0 + 2)) == ["m3"]
    assert [e.message_id for e in read_journal(directory, limit=2).events] == ["m3", "m4"]


def test_events_check_their_fields() -> None:
    with pytest.raises(ValueError, match="vocabulary"):
        event(0, code="not a word")
    with pytest.raises(ValueError, match="message id"):
        Event(T0, EventKind.SENT, "bad id!", BUILDER, REVIEWER, direction=Direction.OUT)
    with pytest.raises(ValueError, match="epoch milliseconds"):
        Event(True, EventKind.SENT, "m0", BUILDER, REVIEWER, direction=Direction.OUT)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="instance id"):
        Party("x", "not an instance id")


def test_a_symlink_in_the_journals_place_is_refused_and_the_send_goes_on(
    directory: str, tmp_path: Path
) -> None:
    os.makedirs(directory, mode=0o700)
    target = tmp_path / "elsewhere"
    target.write_bytes(b"")
    os.symlink(target, os.path.join(directory, "journal.jsonl"))
    writer = JournalWriter(directory)
    assert not writer.record(event(0))
    assert not writer.record(event(1))
    assert (writer.written, writer.failures) == (0, 2)
    assert isinstance(writer.last_error, fs.UnsafePathError)
    assert target.read_bytes() == b""
    # The reader refuses it too, and says which file.
    reader = JournalReader(directory)
    assert list(reader) == []
    assert [path for path, _ in reader.unreadable] == [os.path.join(directory, "journal.jsonl")]


def test_a_fifo_in_the_journals_place_blocks_neither_side(directory: str) -> None:
    os.makedirs(directory, mode=0o700)
    os.mkfifo(os.path.join(directory, "journal.jsonl"), 0o600)
    writer = JournalWriter(directory)
    assert not writer.record(event(0))
    found = read_journal(directory)
    assert found.events == ()
    assert len(found.unreadable) == 1


def test_a_too_open_journal_is_not_read(directory: str) -> None:
    with JournalWriter(directory) as writer:
        writer.record(event(0))
    os.chmod(os.path.join(directory, "journal.jsonl"), 0o644)
    found = read_journal(directory)
    assert found.events == ()
    assert "gives others access" in found.unreadable[0][1]


def test_a_missing_journal_has_no_events(tmp_path: Path) -> None:
    found = read_journal(str(tmp_path / "nothing"))
    assert (found.events, found.skipped, found.unreadable) == ((), 0, ())


def test_a_symlinked_journal_dir_is_not_read(directory: str, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere-journal"
    with JournalWriter(str(elsewhere)) as writer:
        writer.record(event(0))
    os.makedirs(os.path.dirname(directory), mode=0o700)
    os.symlink(elsewhere, directory)
    found = read_journal(directory)
    assert found.events == ()
    assert [path for path, _ in found.unreadable] == [directory]
    # The writer refuses it too.
    writer = JournalWriter(directory)
    assert not writer.record(event(1))
    assert isinstance(writer.last_error, fs.UnsafePathError)
