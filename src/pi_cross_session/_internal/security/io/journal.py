"""The event journal: what a session saw of the messages passing through it, one JSON line each.

A session appends an :class:`Event` whenever a message of its moves (sent, admitted, refused,
queued, submitted, delivered, expired, dropped); ``watch`` and ``log`` read the journals back to
show the network. This module is the file side only: the writer, the reader and the line format.
It lives in the file layer because every file it opens is judged here, through
:func:`~pi_cross_session._internal.security.io.fs.open_private_file` and
:func:`~pi_cross_session._internal.security.io.fs.ensure_private_dir`.

Files
-----
``<agentDir>/cross-session/journal/<instanceId>/journal.jsonl`` (see :func:`journal_dir`), dir
0700, files 0600. Before a line would take it past :data:`MAX_JOURNAL_FILE_BYTES` it is renamed
``journal.1.jsonl`` (the older ones shift to ``journal.2.jsonl`` …, the oldest past
:data:`JOURNAL_FILES_KEPT` is replaced) and a new one is started. One writer per dir: each session
writes its own.

Durability
----------
Each event is one complete line handed to one ``os.write`` on an ``O_APPEND`` descriptor, with no
buffer of ours in between. A process killed at any point (SIGKILL included) therefore loses at
most the event being written; lines written before it are never touched again, and a partial last
line is skipped by the reader. Nothing is ``fsync``-ed: a crash of the machine may lose the events
of its last seconds (the journal is a picture of the network, not a ledger). A journal that cannot
be written (disk full, an unsafe file) never fails the send or the admission it records: the
writer counts the failure, logs it once and retries opening the file at the next event.

Reading
-------
:class:`JournalReader` never raises on what it finds in a file: a line that is not valid UTF-8,
not JSON, not an object of the expected shape, of the wrong types, over the line bound, or cut by
a kill is skipped and counted. It reads in chunks, holding at most one line of
:data:`MAX_JOURNAL_LINE_BYTES`, so a 100 MiB file is never loaded whole. Every field it yields was
validated (:class:`Event` checks itself); names, text and summaries are a peer's strings and stay
strings: the caller escapes them for its sink.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import re
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import TracebackType
from typing import Any, Final, Self

from pi_cross_session._internal.protocol.codes import Code, SenderState, is_code
from pi_cross_session._internal.protocol.limits import MAX_SUMMARY_CODE_POINTS
from pi_cross_session._internal.protocol.paths import INSTANCE_ID_RE, node_join
from pi_cross_session._internal.protocol.text import ID_RE
from pi_cross_session._internal.security.io import fs
from pi_cross_session._internal.security.io.journal_settings import (
    JOURNAL_DIR,
    JOURNAL_ENABLED_DEFAULT,
    JOURNAL_FILE,
    JOURNAL_FILES_KEPT,
    JOURNAL_KEEP_TEXT_DEFAULT,
    JOURNAL_READ_CHUNK_BYTES,
    JOURNAL_STEM,
    JOURNAL_SUFFIX,
    MAX_JOURNAL_FILE_BYTES,
    MAX_JOURNAL_LINE_BYTES,
    MAX_JOURNAL_NAME_CODE_POINTS,
)

__all__ = [
    "FORMAT_VERSION",
    "Direction",
    "Event",
    "EventFilter",
    "EventKind",
    "JournalPolicy",
    "JournalRead",
    "JournalReader",
    "JournalWriter",
    "LineSplitter",
    "Party",
    "PlainStep",
    "encode_event",
    "journal_dir",
    "journal_files",
    "names_session",
    "parse_line",
    "party_json",
    "plain_lines",
    "read_journal",
]

logger = logging.getLogger(__name__)

#: The version of the line format, written as ``"v"``; a line of another version is skipped.
FORMAT_VERSION: Final = 1
#: Epoch milliseconds a JSON reader elsewhere can hold exactly.
_MAX_EPOCH_MS: Final = 2**53 - 1
#: The private area of the agent dir, as the command line's identities name it.
_STATE_DIR: Final = "cross-session"
_ROTATED_RE: Final = re.compile(
    rf"{re.escape(JOURNAL_STEM)}\.([1-9][0-9]{{0,3}}){re.escape(JOURNAL_SUFFIX)}"
)
#: Entries of a journal dir looked at when listing its files (it holds only the journal's own).
_LISTING_CAP: Final = 256


class EventKind(StrEnum):
    """What happened to a message, in the words every other output uses for its states.

    A sender writes ``sent`` when the message frame went out, then the receipt it got
    (``queued``, ``submitted``, ``admitted`` for ``accepted``) or ``refused`` (with the code) or
    ``receipt_unknown``, and, if it waited, what the receiver later said (``delivered``,
    ``expired``, ``dropped``). A receiver writes ``admitted`` at its commit, then each move of the
    message's row (``queued``, ``submitted``, ``delivered``, ``injection_failed``, ``expired``,
    ``dropped`` with the ``dropped_*`` word as its code), or ``refused`` with the code.
    """

    #: A session of ours handed the message to a receiver (the sender's side).
    SENT = "sent"
    #: A receiver took the message in (its row was born; the receipt follows).
    ADMITTED = "admitted"
    REFUSED = SenderState.REFUSED.value
    RECEIPT_UNKNOWN = SenderState.RECEIPT_UNKNOWN.value
    QUEUED = Code.QUEUED.value
    SUBMITTED = Code.SUBMITTED.value
    DELIVERED = Code.DELIVERED.value
    INJECTION_FAILED = Code.INJECTION_FAILED.value
    EXPIRED = Code.EXPIRED.value
    DROPPED = Code.DROPPED.value


class Direction(StrEnum):
    """Which end of the message wrote the event: its sender (``out``) or its receiver (``in``)."""

    OUT = "out"
    IN = "in"


def _is_plain_int(value: object) -> bool:
    return type(value) is int


@dataclass(frozen=True, slots=True)
class Party:
    """One end of a message: a session's name (a peer's string, cut to the wire's bound) and its
    instance id (32 lowercase hex characters)."""

    name: str
    instance_id: str

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise TypeError("a party's name is a string")
        if not isinstance(self.instance_id, str) or not INSTANCE_ID_RE.fullmatch(self.instance_id):
            raise ValueError("a party's instance id is 32 lowercase hex characters")
        if len(self.name) > MAX_JOURNAL_NAME_CODE_POINTS:
            object.__setattr__(self, "name", self.name[:MAX_JOURNAL_NAME_CODE_POINTS])

    def matches(self, wanted: str) -> bool:
        """True when ``wanted`` is this party's name or instance id."""
        return wanted in (self.name, self.instance_id)


@dataclass(frozen=True, slots=True)
class Event:
    """One step of one message as a session of ours saw it.

    ``at`` is epoch milliseconds; ``session`` is the session that wrote the event, ``peer`` the
    other end (``direction`` says which of them sent the message); ``code`` is the vocabulary
    word of a refusal or a drop (``rate_limited``, ``dropped_shutdown`` …), ``None`` otherwise.
    A summary is cut to the wire's bound (200 code points), as a name is.

    ``text`` and ``summary`` are kept in the journal only when :attr:`JournalPolicy.keep_text`
    allows, which it does not by default: the text is the peer's (or the user's) and may be
    private, it would outlive the conversation it was meant for in a file nobody asked for, and the
    journal exists to show the network (who sent what to whom, and how it ended), not its content.
    A writer whose policy does not keep text drops both fields before anything reaches the disk.
    """

    at: int
    kind: EventKind
    message_id: str
    session: Party
    peer: Party
    code: str | None = None
    summary: str | None = None
    text: str | None = None
    #: True when the writer had to cut the text, the summary or a name to fit the line bound.
    cut: bool = False
    #: Which end wrote it: the message's sender (``out``) or its receiver (``in``).
    direction: Direction = field(kw_only=True)

    def __post_init__(self) -> None:
        if not _is_plain_int(self.at) or not 0 <= self.at <= _MAX_EPOCH_MS:
            raise ValueError("an event's time is epoch milliseconds")
        object.__setattr__(self, "kind", EventKind(self.kind))
        object.__setattr__(self, "direction", Direction(self.direction))
        if not isinstance(self.message_id, str) or not ID_RE.fullmatch(self.message_id):
            raise ValueError("an event's message id is a message id of the contract")
        if not isinstance(self.session, Party) or not isinstance(self.peer, Party):
            raise TypeError("an event's session and peer are parties")
        if self.code is not None and not (isinstance(self.code, str) and is_code(self.code)):
            raise ValueError("an event's code is a word of the vocabulary")
        for value in (self.summary, self.text):
            if value is not None and not isinstance(value, str):
                raise TypeError("an event's summary and text are strings")
        if not isinstance(self.cut, bool):
            raise TypeError("an event's cut flag is a boolean")
        if self.summary is not None and len(self.summary) > MAX_SUMMARY_CODE_POINTS:
            object.__setattr__(self, "summary", self.summary[:MAX_SUMMARY_CODE_POINTS])
            object.__setattr__(self, "cut", True)

    def to_json(self) -> dict[str, Any]:
        """The event as the journal writes it (camelCase keys, absent optional fields left out)."""
        line: dict[str, Any] = {
            "v": FORMAT_VERSION,
            "at": self.at,
            "kind": self.kind.value,
            "direction": self.direction.value,
            "messageId": self.message_id,
            "session": {"name": self.session.name, "instanceId": self.session.instance_id},
            "peer": {"name": self.peer.name, "instanceId": self.peer.instance_id},
        }
        if self.code is not None:
            line["code"] = self.code
        if self.summary is not None:
            line["summary"] = self.summary
        if self.text is not None:
            line["text"] = self.text
        if self.cut:
            line["cut"] = True
        return line

    @classmethod
    def from_json(cls, data: object) -> Event | None:
        """The event a decoded line holds, or ``None`` when it is not one (never raises)."""
        if not isinstance(data, dict) or data.get("v") != FORMAT_VERSION:
            return None
        try:
            return cls(
                at=data["at"],
                kind=EventKind(data["kind"]),
                direction=Direction(data["direction"]),
                message_id=data["messageId"],
                session=_party_from(data["session"]),
                peer=_party_from(data["peer"]),
                code=data.get("code"),
                summary=data.get("summary"),
                text=data.get("text"),
                cut=data.get("cut", False),
            )
        except (KeyError, TypeError, ValueError):
            return None


def _party_from(data: object) -> Party:
    if not isinstance(data, dict):
        raise TypeError("a party is an object")
    name = data["name"]
    if not isinstance(name, str) or len(name) > MAX_JOURNAL_NAME_CODE_POINTS:
        raise ValueError("a party's name is a bounded string")
    return Party(name=name, instance_id=data["instanceId"])


def _dumps(line: dict[str, Any]) -> bytes:
    # ASCII only: a lone surrogate or a control character is escaped, so every line is valid
    # UTF-8 and one physical line whatever a peer's strings hold.
    return json.dumps(line, ensure_ascii=True, separators=(",", ":")).encode("ascii") + b"\n"


def _cut_to_fit(line: dict[str, Any], slot: tuple[str, ...], max_bytes: int) -> bool:
    """Shorten the string at ``slot`` to the longest prefix with which the line fits; True when
    it then fits. The prefix is searched by halving, on at most ``max_bytes`` code points (each
    costs at least one byte)."""
    *parents, key = slot
    holder = line
    for parent in parents:
        holder = holder[parent]
    value: str = holder[key]
    low, high = 0, min(len(value), max_bytes)
    holder[key] = value[:high]
    if len(_dumps(line)) <= max_bytes:
        return True
    while low < high:
        middle = (low + high + 1) // 2
        holder[key] = value[:middle]
        if len(_dumps(line)) <= max_bytes:
            low = middle
        else:
            high = middle - 1
    holder[key] = value[:low]
    return len(_dumps(line)) <= max_bytes


#: What is cut, in this order, when a line is over its bound: the text, the summary, then names.
_CUT_ORDER: Final = (("text",), ("summary",), ("peer", "name"), ("session", "name"))


def encode_event(
    event: Event, *, keep_text: bool = False, max_line_bytes: int = MAX_JOURNAL_LINE_BYTES
) -> bytes | None:
    """The event's journal line (newline included), never longer than ``max_line_bytes``.

    Without ``keep_text`` the text and summary are left out. A line over the bound is cut, in
    :data:`_CUT_ORDER`, and marked ``"cut": true``; ``None`` when even that cannot make it fit
    (only with a bound far below the default).
    """
    line = event.to_json()
    if not keep_text:
        line.pop("text", None)
        line.pop("summary", None)
    encoded = _dumps(line)
    if len(encoded) <= max_line_bytes:
        return encoded
    line["cut"] = True
    for slot in _CUT_ORDER:
        if slot[0] not in line:
            continue
        if _cut_to_fit(line, slot, max_line_bytes):
            return _dumps(line)
    return None


# -- the plain line, straight from checked values --------------------------------------------------


@functools.lru_cache(maxsize=256)
def party_json(name: str, instance_id: str) -> str:
    """A party as a journal line holds it (``{"name":…,"instanceId":…}``, ASCII JSON), the name
    cut to the wire's bound.

    Cached: a session names itself and its few peers in every line, and encoding a party is most
    of what a line costs (``bench/exchange.py --journal``, docs/performance.md). 256 entries of a
    few hundred bytes at most; a peer's name is the key as it came, never trusted for more.
    """
    party = Party(name, instance_id)  # checks the instance id and cuts the name
    return json.dumps(
        {"name": party.name, "instanceId": party.instance_id},
        ensure_ascii=True,
        separators=(",", ":"),
    )


#: One step of a message for :func:`plain_lines`: its time, its kind and its code (or ``None``).
PlainStep = tuple[int, EventKind, str | None]


def plain_lines(
    direction: Direction,
    message_id: str,
    session_json: str,
    peer_json: str,
    steps: Sequence[PlainStep],
) -> bytes | None:
    """The lines :func:`encode_event` writes for one message's events without text, summary or
    cut (one per step), byte for byte, built without an :class:`Event` or ``json.dumps``: what
    they share is formatted once (a fraction of the cost; measured in docs/performance.md).
    ``session_json`` and ``peer_json`` come from :func:`party_json`. ``None`` when a value fails
    the checks an :class:`Event` makes (the caller counts it)."""
    if not ID_RE.fullmatch(message_id):
        return None
    # Every value placed unquoted here is a word of ours or an id of the contract's alphabet:
    # none needs escaping, so the bytes are those json.dumps writes.
    shared = (
        f'"direction":"{direction.value}","messageId":"{message_id}",'
        f'"session":{session_json},"peer":{peer_json}'
    )
    lines = []
    for at, kind, code in steps:
        if not _is_plain_int(at) or not 0 <= at <= _MAX_EPOCH_MS:
            return None
        if code is None:
            tail = "}\n"
        elif is_code(code):
            tail = f',"code":"{code}"}}\n'
        else:
            return None
        lines.append(f'{{"v":{FORMAT_VERSION},"at":{at},"kind":"{kind.value}",{shared}{tail}')
    return "".join(lines).encode("ascii")


# -- writing ---------------------------------------------------------------------------------------


def journal_dir(agent_dir: str, instance_id: str) -> str:
    """``<agentDir>/cross-session/journal/<instanceId>``: the journal of one session."""
    if not INSTANCE_ID_RE.fullmatch(instance_id):
        raise ValueError("an instance id is 32 lowercase hex characters")
    return node_join(agent_dir, _STATE_DIR, JOURNAL_DIR, instance_id)


def _rotated_name(index: int) -> str:
    return JOURNAL_FILE if index == 0 else f"{JOURNAL_STEM}.{index}{JOURNAL_SUFFIX}"


@dataclass(frozen=True, slots=True)
class JournalPolicy:
    """The user's settings for the journal: whether to write one, and whether it keeps message
    text and summaries (off by default; see :class:`Event` for why)."""

    enabled: bool = JOURNAL_ENABLED_DEFAULT
    keep_text: bool = JOURNAL_KEEP_TEXT_DEFAULT


class JournalWriter:
    """Appends events to one session's journal dir; see the module's docstring for the promises.

    Nothing is created until the first event is recorded, and nothing at all when the policy
    turns journaling off. :meth:`record` never raises for the file system: it answers whether the
    line was written and counts failures in :attr:`failures`. Safe to call from several threads.
    """

    def __init__(
        self,
        directory: str,
        *,
        policy: JournalPolicy | None = None,
        max_line_bytes: int = MAX_JOURNAL_LINE_BYTES,
        max_file_bytes: int = MAX_JOURNAL_FILE_BYTES,
        files_kept: int = JOURNAL_FILES_KEPT,
    ) -> None:
        if max_file_bytes < max_line_bytes or files_kept < 0:
            raise ValueError("a journal file holds at least one line; files_kept is not negative")
        self.directory = directory
        self.policy = policy if policy is not None else JournalPolicy()
        self.max_line_bytes = max_line_bytes
        self.max_file_bytes = max_file_bytes
        self.files_kept = files_kept
        #: Lines written, events not written (an error or an unfit line), and the last error.
        self.written = 0
        self.failures = 0
        self.last_error: Exception | None = None
        self._fd: int | None = None
        self._size = 0
        self._lock = threading.Lock()
        self._warned = False

    def record(self, event: Event) -> bool:
        """Append ``event`` as one line; True when it was written."""
        if not self.policy.enabled:
            return False
        line = encode_event(
            event, keep_text=self.policy.keep_text, max_line_bytes=self.max_line_bytes
        )
        return self.record_lines(line)

    def record_lines(self, lines: bytes | None, count: int = 1) -> bool:
        """Append ``count`` lines already encoded (each ending in a newline, each within the line
        bound: from :func:`encode_event` or :func:`plain_line`) with one ``write``; ``None`` is
        an event that could not be encoded, counted as a failure. True when written."""
        if not self.policy.enabled:
            return False
        with self._lock:
            if lines is None:
                self.failures += count
                return False
            try:
                self._append(lines)
            except (OSError, fs.FileSystemError) as exc:
                self._failed(exc, count)
                return False
            self.written += count
            return True

    def _append(self, line: bytes) -> None:
        if self._fd is not None and self._size + len(line) > self.max_file_bytes:
            self._rotate()
        if self._fd is None:
            fs.ensure_private_dir(self.directory)
            self._fd, self._size = fs.open_private_file(self._path(0), append=True)
            if self._size + len(line) > self.max_file_bytes:
                self._rotate()
                self._fd, self._size = fs.open_private_file(self._path(0), append=True)
        fd = self._fd
        assert fd is not None
        written = os.write(fd, line)
        self._size += written
        if written != len(line):
            # A short write (disk full) left a fragment: end it, so that it spoils no later line.
            self._size += os.write(fd, b"\n")
            raise OSError("the journal lines were written only in part")

    def _rotate(self) -> None:
        """``journal.jsonl`` → ``journal.1.jsonl`` …; what falls past :attr:`files_kept` goes."""
        self._close_fd()
        for index in range(self.files_kept, 0, -1):
            with contextlib.suppress(FileNotFoundError):
                os.replace(self._path(index - 1), self._path(index))
        if self.files_kept == 0:
            fs.remove_file(self._path(0))

    def _path(self, index: int) -> str:
        return os.path.join(self.directory, _rotated_name(index))

    def _failed(self, exc: Exception, count: int = 1) -> None:
        self.failures += count
        self.last_error = exc
        self._close_fd()
        if not self._warned:
            self._warned = True
            logger.warning("the event journal in %r cannot be written: %s", self.directory, exc)

    def _close_fd(self) -> None:
        fd, self._fd = self._fd, None
        self._size = 0
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def close(self) -> None:
        """Close the file (a later :meth:`record` opens it again)."""
        with self._lock:
            self._close_fd()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


# -- reading ---------------------------------------------------------------------------------------


def journal_files(directory: str) -> list[str]:
    """The journal files of a dir, oldest first: the rotated ones by falling number, then the
    current one (each only if present). Never raises: an unreadable dir has no files."""
    rotated: list[tuple[int, str]] = []
    current = False
    try:
        with os.scandir(directory) as entries:
            for seen, entry in enumerate(entries):
                if seen >= _LISTING_CAP:
                    break
                match = _ROTATED_RE.fullmatch(entry.name)
                if match:
                    rotated.append((int(match.group(1)), entry.name))
                elif entry.name == JOURNAL_FILE:
                    current = True
    except (OSError, ValueError):
        return []
    names = [name for _, name in sorted(rotated, reverse=True)]
    if current:
        names.append(JOURNAL_FILE)
    return [os.path.join(directory, name) for name in names]


#: The fewest hex characters that name an instance id by its start (lines show six).
MIN_ID_PREFIX: Final = 6


def names_session(wanted: str, name: str, instance_id: str) -> bool:
    """True when ``wanted`` names the session ``name`` / ``instance_id`` as a person asks about
    one: its name, its instance id, or the first :data:`MIN_ID_PREFIX` or more hex characters of
    that id, in either case (``log --session``, ``watch --session`` and its filter)."""
    if wanted in (name, instance_id):
        return True
    return len(wanted) >= MIN_ID_PREFIX and instance_id.startswith(wanted.lower())


@dataclass(frozen=True, slots=True)
class EventFilter:
    """Which events a reader yields; every field set must match (``None`` matches anything).

    ``session`` and ``peer`` match a name or an instance id of the event's writer and of its
    other end; ``since`` is epoch milliseconds (events at or after it).

    ``end`` and ``other_end`` name the message's ends whichever of them wrote the event, as a
    person asks about a session (:func:`names_session`). With both, the event is between those two
    sessions, either way round; ``other_end`` alone matches either end, as ``end`` does.
    """

    session: str | None = None
    peer: str | None = None
    kinds: frozenset[EventKind] | None = None
    since: int | None = None
    message_id: str | None = None
    end: str | None = None
    other_end: str | None = None

    def matches(self, event: Event) -> bool:
        """True when ``event`` passes every criterion set."""
        return (
            (self.session is None or event.session.matches(self.session))
            and (self.peer is None or event.peer.matches(self.peer))
            and (self.kinds is None or event.kind in self.kinds)
            and (self.since is None or event.at >= self.since)
            and (self.message_id is None or event.message_id == self.message_id)
            and self._ends_match(event)
        )

    def _ends_match(self, event: Event) -> bool:
        if self.end is None and self.other_end is None:
            return True
        one, other = event.session, event.peer
        return self._pair_matches(one, other) or self._pair_matches(other, one)

    def _pair_matches(self, one: Party, other: Party) -> bool:
        return (self.end is None or self.refers_to(one, self.end)) and (
            self.other_end is None or self.refers_to(other, self.other_end)
        )

    @staticmethod
    def refers_to(who: Party, wanted: str) -> bool:
        """True when ``wanted`` names ``who`` (see :func:`names_session`)."""
        return names_session(wanted, who.name, who.instance_id)


class LineSplitter:
    """Cuts bytes into lines without their newline, holding at most ``max_line_bytes`` of a line
    not yet ended. A line over the bound is never held whole: :meth:`feed` yields ``None`` for it
    once, when it crosses the bound, and drops the rest up to its newline."""

    def __init__(self, max_line_bytes: int = MAX_JOURNAL_LINE_BYTES) -> None:
        self.max_line_bytes = max_line_bytes
        self.pending = bytearray()
        self.overlong = False
        #: Dropping the end of a line whose start was not read (see :meth:`reset`).
        self.mid_line = False

    def reset(self, *, mid_line: bool = False) -> None:
        """Forget the held fragment; with ``mid_line``, the bytes up to the next newline are the
        end of a line not seen whole, and are dropped (not counted: its start was never read,
        unless no newline ever comes)."""
        self.pending.clear()
        self.overlong = self.mid_line = mid_line

    def feed(self, chunk: bytes) -> Iterator[bytes | None]:
        """The lines ``chunk`` completes (``None`` for one over the bound)."""
        pending = self.pending
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            if not self.overlong:
                if len(pending) + len(piece) > self.max_line_bytes:
                    self.overlong = True
                    pending.clear()
                    yield None
                else:
                    pending += piece
            if end < 0:
                return
            if not self.overlong:
                yield bytes(pending)
            pending.clear()
            self.overlong = self.mid_line = False
            start = end + 1


def _lines(fd: int, splitter: LineSplitter) -> Iterator[bytes | None]:
    """The lines of a file from its offset, ``None`` for one over the bound and for a last line
    without a newline (cut by a kill, or being written)."""
    while chunk := os.read(fd, JOURNAL_READ_CHUNK_BYTES):
        yield from splitter.feed(chunk)
    if splitter.pending or splitter.mid_line:
        yield None


def parse_line(raw: bytes | None) -> Event | None:
    """The event one journal line holds (without its newline), or ``None`` (never raises)."""
    if raw is None:
        return None
    try:
        return Event.from_json(json.loads(raw.decode("utf-8")))
    except (ValueError, RecursionError):
        return None


class JournalReader:
    """Iterates over the events of one journal dir, oldest first, that pass ``where``.

    :attr:`skipped` counts the lines that were not events (see the module's docstring),
    :attr:`skipped_bytes` the bytes of oversize files not read, and :attr:`unreadable` the files
    that could not be opened or read, with why: all grow while
    iterating. Never raises for what it finds on disk.
    """

    def __init__(
        self,
        directory: str,
        *,
        where: EventFilter | None = None,
        max_line_bytes: int = MAX_JOURNAL_LINE_BYTES,
    ) -> None:
        self.directory = directory
        self.where = where if where is not None else EventFilter()
        self.max_line_bytes = max_line_bytes
        self.skipped = 0
        #: Bytes of oversize files passed over (see :meth:`read_file`).
        self.skipped_bytes = 0
        self.unreadable: list[tuple[str, str]] = []

    def __iter__(self) -> Iterator[Event]:
        inspection = fs.inspect_private_dir(self.directory)
        if inspection.state in (fs.DirState.UNUSABLE, fs.DirState.UNREADABLE):
            # A symlink, another user's dir, or not a dir: nothing in it is ours to read.
            self.unreadable.append((self.directory, inspection.detail))
            return
        for path in journal_files(self.directory):
            yield from self.read_file(path)

    def read_file(self, path: str) -> Iterator[Event]:
        """The events of one journal file that pass the filter. A file larger than a journal
        file ever grows (:data:`MAX_JOURNAL_FILE_BYTES`) was not written by us: only its last
        that many bytes are read, and :attr:`skipped_bytes` counts the rest."""
        try:
            fd, size = fs.open_private_file(path, append=False)
        except fs.FileSystemError as exc:
            # A file rotated away since the listing is no problem; anything else is said.
            if not (isinstance(exc, fs.FileOperationError) and exc.code == "ENOENT"):
                self.unreadable.append((path, str(exc)))
            return
        splitter = LineSplitter(self.max_line_bytes)
        try:
            if size > MAX_JOURNAL_FILE_BYTES:
                self.skipped_bytes += size - MAX_JOURNAL_FILE_BYTES
                os.lseek(fd, size - MAX_JOURNAL_FILE_BYTES, os.SEEK_SET)
                splitter.reset(mid_line=True)
            for raw in _lines(fd, splitter):
                event = parse_line(raw)
                if event is None:
                    self.skipped += 1
                elif self.where.matches(event):
                    yield event
        except OSError as exc:
            self.unreadable.append((path, str(exc)))
        finally:
            os.close(fd)


@dataclass(frozen=True, slots=True)
class JournalRead:
    """Everything :func:`read_journal` found: the events, the lines skipped, the files refused."""

    events: tuple[Event, ...]
    skipped: int
    unreadable: tuple[tuple[str, str], ...] = field(default=())
    skipped_bytes: int = 0


def read_journal(
    directory: str, *, where: EventFilter | None = None, limit: int | None = None
) -> JournalRead:
    """The events of a journal dir that pass ``where``, oldest first; with ``limit``, only the
    newest ``limit`` of them are held (the reading still streams through every file)."""
    reader = JournalReader(directory, where=where)
    if limit is None:
        events: tuple[Event, ...] = tuple(reader)
    else:
        events = tuple(deque(reader, maxlen=max(limit, 0)))
    return JournalRead(events, reader.skipped, tuple(reader.unreadable), reader.skipped_bytes)
