"""A process that appends events to a journal dir as fast as it can, until it is killed.

Started by ``test_journal_kill_process.py`` as ``python journal_writer_process.py DIR``. Event
``i`` has message id ``m<i>``; texts of varying length (kept, so lines differ in size) make a kill
in the middle of a write possible. After every hundredth event it prints how many events
:meth:`JournalWriter.record` has reported written, which the test holds the file to.
"""

from __future__ import annotations

import sys

from pi_cross_session._internal.security.io.journal import (
    Direction,
    Event,
    EventKind,
    JournalPolicy,
    JournalWriter,
    Party,
)

SESSION = Party("writer", "a" * 32)
PEER = Party("reader", "b" * 32)


def main(directory: str) -> None:
    writer = JournalWriter(directory, policy=JournalPolicy(keep_text=True), files_kept=1_000)
    index = 0
    while True:
        text = "t" * (index * 37 % 3_000)
        event = Event(
            1_700_000_000_000 + index,
            EventKind.SENT,
            f"m{index}",
            SESSION,
            PEER,
            text=text,
            direction=Direction.OUT,
        )
        if not writer.record(event):
            raise SystemExit(f"event {index} was not written")
        index += 1
        if index % 100 == 0:
            print(index, flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
