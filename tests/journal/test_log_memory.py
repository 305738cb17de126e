"""``pi-cross-session log`` keeps its memory bounded whatever the journals weigh: a 100 MiB journal
file is read only at its end, and 200 MiB of real events is streamed with only the newest
``--limit`` held. Measured as the peak resident size of the real command's process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from pi_cross_session._internal.security.io.journal import (
    Direction,
    Event,
    EventKind,
    Party,
    encode_event,
)
from pi_cross_session._internal.security.io.journal_settings import (
    MAX_JOURNAL_FILE_BYTES,
    MAX_JOURNAL_LINE_BYTES,
)
from tests.journal.conftest import Journals
from tests.support.bounds import MUST_HAPPEN_S
from tests.support.processes import CLI, cli_env

MIB = 1024 * 1024
#: What ``log`` may reach at its peak: the interpreter and its imports take about 30 MiB; either
#: file below, held whole or as events, takes more than 100 MiB on top.
PEAK_BOUND_KIB = 120 * 1024
#: A process that reports its only child's peak resident size (KiB) after it ended.
_MEASURE = (
    "import resource, subprocess, sys\n"
    "with open(sys.argv[1], 'wb') as out, open(sys.argv[2], 'wb') as err:\n"
    "    code = subprocess.run(sys.argv[3:], stdout=out, stderr=err).returncode\n"
    "print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
)

SENDER = Party("sender", "a7" * 16)
RECEIVER = Party("receiver", "b8" * 16)


def sent(at: int, index: int, text: str | None = None) -> Event:
    message_id = f"{index:08x}-0000-4000-8000-000000000000"
    return Event(
        at, EventKind.SENT, message_id, SENDER, RECEIVER, text=text, direction=Direction.OUT
    )


def measured_log(agent_dir: Path, *args: str) -> tuple[int, int, str, str]:
    """Run ``log ARGS`` as its own process (not a fork of a bigger one, whose pages would count);
    its exit status, its peak resident size in KiB, its stdout and its stderr."""
    out, err = agent_dir.parent / "log.out", agent_dir.parent / "log.err"
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(out), str(err), *CLI, "log", *args],
        env=cli_env(agent_dir),
        capture_output=True,
        text=True,
        timeout=MUST_HAPPEN_S * 4,
        check=True,
    )
    code, peak_kib = map(int, done.stdout.split())
    return code, peak_kib, out.read_text(), err.read_text()


def test_a_100_mib_journal_file_is_read_at_its_end_in_bounded_memory(
    journals: Journals, private_agent_dir: Path
) -> None:
    t0 = time.time_ns() // 1_000_000 - 60_000
    events = b"".join(json.dumps(sent(t0 + i, i).to_json()).encode() + b"\n" for i in range(3))
    # What came before the events ended with a newline; the last event was cut by a kill.
    tail = b"\n" + events + json.dumps(sent(t0 + 3, 3).to_json()).encode()[:40]
    path = journals.append_raw(SENDER.instance_id, b"")
    with path.open("r+b") as file:
        # Sparse: 100 MiB that cost no disk, then the events a session would have appended.
        file.truncate(100 * MIB - len(tail))
        file.seek(0, os.SEEK_END)
        file.write(tail)
    assert path.stat().st_size == 100 * MIB

    code, peak_kib, out, err = measured_log(private_agent_dir)

    assert code == 0, err
    assert len(out.splitlines()) == 3, out
    assert f"{100 * MIB - MAX_JOURNAL_FILE_BYTES:,} bytes of files larger than a journal" in err
    print(f"peak {peak_kib} KiB")
    assert peak_kib < PEAK_BOUND_KIB, f"peak {peak_kib} KiB"


def test_200_mib_of_events_are_streamed_keeping_only_the_newest(
    journals: Journals, private_agent_dir: Path
) -> None:
    # One full journal file of events that kept their text (lines near the bound), and 199 more
    # rotated files that are the same file (hard links: 200 MiB to read, 1 MiB of disk).
    t0 = time.time_ns() // 1_000_000 - 60_000
    text = "t" * (MAX_JOURNAL_LINE_BYTES - 600)
    lines: list[bytes] = []
    size = 0
    while True:
        line = encode_event(sent(t0 + len(lines), len(lines), text), keep_text=True)
        assert line is not None
        if size + len(line) > MAX_JOURNAL_FILE_BYTES:
            break
        lines.append(line)
        size += len(line)
    first = journals.append_raw(SENDER.instance_id, b"".join(lines), name="journal.1.jsonl")
    for index in range(2, 201):
        os.link(first, first.with_name(f"journal.{index}.jsonl"))

    code, peak_kib, out, err = measured_log(private_agent_dir, "--json")

    assert code == 0, err
    shown = out.splitlines()
    assert len(shown) == 1000
    assert len(json.loads(shown[-1])["text"]) == len(text)
    assert f"showing the newest 1,000 of {200 * len(lines):,} events" in err
    print(f"peak {peak_kib} KiB")
    assert peak_kib < PEAK_BOUND_KIB, f"peak {peak_kib} KiB"
