"""The journal in real processes: a writer killed with SIGKILL loses at most the event it was
writing (the reader yields every complete event and skips at most one partial line), and a writer
whose file cannot grow fails its events, never its caller."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pi_cross_session._internal.security.io.journal import journal_dir, journal_files, read_journal
from tests.support.bounds import MUST_HAPPEN_S

pytestmark = pytest.mark.faults

WRITER = Path(__file__).with_name("journal_writer_process.py")
#: Events the process must have written before it is killed.
BEFORE_KILL = 2_000


@pytest.mark.parametrize("attempt", range(3))
def test_a_writer_killed_mid_loop_loses_at_most_the_event_being_written(
    tmp_path: Path, attempt: int
) -> None:
    directory = journal_dir(str(tmp_path / f"killed-agent-{attempt}"), "a" * 32)
    path = os.path.join(directory, "journal.jsonl")
    process = subprocess.Popen(
        [sys.executable, str(WRITER), directory],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).parents[2],
    )
    reported = 0
    try:
        assert process.stdout is not None
        while reported < BEFORE_KILL:
            line = process.stdout.readline()
            assert line, "the writer ended before it was killed"
            reported = int(line)
        process.send_signal(signal.SIGKILL)
        assert process.wait(timeout=MUST_HAPPEN_S) == -signal.SIGKILL
        # What it reported after the count we waited for, before the kill, counts too.
        reported = max([reported, *map(int, process.stdout.read().split())])
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()

    # The writer rotates at the default size (keeping every file): the kill may fall in any file.
    raw = b"".join(Path(name).read_bytes() for name in journal_files(directory))
    assert Path(path).exists()
    complete = raw.count(b"\n")
    found = read_journal(directory)
    # Every complete line is an event, in order, with none missing before the kill's point.
    assert [event.message_id for event in found.events] == [f"m{i}" for i in range(complete)]
    assert found.skipped == (0 if raw.endswith(b"\n") else 1)
    assert found.unreadable == ()
    # An event the writer reported written is in the file: nothing waits in a buffer of ours.
    assert len(found.events) >= reported


#: Run by the next test in a process whose files may not grow past 20,000 bytes (``EFBIG``; Python
#: ignores ``SIGXFSZ``, so the write that crosses the limit is cut short and the next ones fail).
FILE_SIZE_LIMITED = """
import json, resource, sys
from pi_cross_session._internal.security.io.journal import (
    Direction, Event, EventKind, JournalPolicy, JournalWriter, Party,
)
resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
writer = JournalWriter(sys.argv[1], policy=JournalPolicy(keep_text=True))
a, b = Party("a", "a" * 32), Party("b", "b" * 32)
results = [
    writer.record(Event(
        1_700_000_000_000, EventKind.SENT, f"m{i}", a, b, text="t" * 300, direction=Direction.OUT
    ))
    for i in range(200)
]
print(json.dumps({"results": results, "failures": writer.failures}))
"""


def test_a_file_that_cannot_grow_fails_the_events_not_the_caller(tmp_path: Path) -> None:
    directory = journal_dir(str(tmp_path / "full-agent"), "a" * 32)
    done = subprocess.run(
        [sys.executable, "-c", FILE_SIZE_LIMITED, directory],
        capture_output=True,
        timeout=MUST_HAPPEN_S,
        check=True,
        cwd=Path(__file__).parents[2],
    )
    outcome = json.loads(done.stdout)
    written = outcome["results"].count(True)
    assert 0 < written < 200
    assert outcome["results"] == [True] * written + [False] * (200 - written)
    assert outcome["failures"] == 200 - written
    assert os.path.getsize(os.path.join(directory, "journal.jsonl")) <= 20_000
    found = read_journal(directory)
    assert [event.message_id for event in found.events] == [f"m{i}" for i in range(written)]
    assert found.skipped <= 1
