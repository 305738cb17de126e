"""What the event journal may spend on disk and what its reader accepts. The journal's own room
(:mod:`pi_cross_session._internal.security.io.journal`; the wire's and the receiver's bounds are in
:mod:`pi_cross_session._internal.protocol.limits`)."""

from typing import Final

from pi_cross_session._internal.protocol.limits import MAX_NAME_CODE_POINTS

#: Under the agent dir's private area (``<agentDir>/cross-session``): one dir per session, named by
#: its instance id, so that each session appends to files no other process writes.
JOURNAL_DIR: Final = "journal"
#: The file a session appends to, and the stem and suffix of its rotated predecessors
#: (``journal.1.jsonl`` is the newest of them).
JOURNAL_FILE: Final = "journal.jsonl"
JOURNAL_STEM: Final = "journal"
JOURNAL_SUFFIX: Final = ".jsonl"
#: One line, newline included. An event without text takes a few hundred bytes; the worst case
#: without text (two names and a summary of 200 astral code points, each escaped as two
#: ``\uXXXX``) stays under 7,500, so this leaves room for a kept text's start. Also the reader's
#: line bound: a longer line was not written by us and is skipped without being held whole.
MAX_JOURNAL_LINE_BYTES: Final = 8_192
#: A name is cut to the wire's bound (it never is longer when it came from a frame).
MAX_JOURNAL_NAME_CODE_POINTS: Final = MAX_NAME_CODE_POINTS
#: The current file is rotated before a line would take it past this size: at most about 8,000
#: events per file, and a reader never scans much more than a session's recent history.
MAX_JOURNAL_FILE_BYTES: Final = 1_048_576
#: Rotated files kept besides the current one (so a session's journal stays under 4 MiB).
JOURNAL_FILES_KEPT: Final = 3
#: Bytes the reader asks of the OS per read: large enough to be cheap, small enough to hold.
JOURNAL_READ_CHUNK_BYTES: Final = 65_536
#: Journaling is on unless a setting turns it off: the journal is what later shows the network.
JOURNAL_ENABLED_DEFAULT: Final = True
#: Message text and its summary are not kept unless a setting allows it (see ``JournalPolicy``).
JOURNAL_KEEP_TEXT_DEFAULT: Final = False
#: Journals of sessions that ended are removed this long after their last event (by the next
#: session of ours to start): two weeks answers "what happened last week" without the agent dir
#: filling up (each journal is at most 4 MiB, most a few KiB).
JOURNAL_RETENTION_S: Final = 14 * 24 * 3600.0
#: The journal dirs a reader looks at, the most recently changed first.
MAX_JOURNAL_DIRS: Final = 512
#: Beside a running session's journal: its live state (inbound state, queue, goal).
LIVE_STATE_FILE: Final = "live.json"
#: A live state's goal objective and reason are cut to these (they are for a glance).
MAX_LIVE_GOAL_CODE_POINTS: Final = 200
MAX_LIVE_REASON_CODE_POINTS: Final = 400
