"""Every session's journal at once: the merged history, the tail that grows, each session's live
state, and the retention of ended sessions' journals.

:mod:`.journal` writes and reads one session's journal dir; this module is what ``log`` and
``watch`` need across the agent dir's sessions:

* :func:`session_dirs` lists the journal dirs (``<agentDir>/cross-session/journal/<instanceId>``),
  a bounded number of them;
* :func:`read_network` merges their events in time order (each session's are in order already);
* :class:`JournalFollower` hands out, at each :meth:`~JournalFollower.poll`, the events one
  session appended since the last poll, across a rotation;
* :class:`LiveState` is what a running session publishes beside its journal (``live.json``): its
  inbound state and why, its queue depth, its active goal. Registrations stay exactly as the
  contract has them; this file is ours alone, private like the journal;
* :func:`prune_ended` removes the journals of sessions that ended long ago
  (:data:`~.journal_settings.JOURNAL_RETENTION_S`).

Like the single-session reader, nothing here raises for what it finds on disk: a file that is not
ours, not valid or cut short is skipped and counted, and a dir that is not private is not read.
"""

from __future__ import annotations

import contextlib
import heapq
import json
import logging
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from pi_cross_session._internal.protocol.paths import INSTANCE_ID_RE, node_join
from pi_cross_session._internal.security.io import fs
from pi_cross_session._internal.security.io.journal import (
    FORMAT_VERSION,
    Event,
    EventFilter,
    EventKind,
    JournalReader,
    LineSplitter,
    journal_files,
    parse_line,
)
from pi_cross_session._internal.security.io.journal_settings import (
    JOURNAL_DIR,
    JOURNAL_FILE,
    JOURNAL_READ_CHUNK_BYTES,
    JOURNAL_RETENTION_S,
    LIVE_STATE_FILE,
    MAX_JOURNAL_DIRS,
    MAX_JOURNAL_FILE_BYTES,
    MAX_JOURNAL_LINE_BYTES,
    MAX_LIVE_GOAL_CODE_POINTS,
    MAX_LIVE_REASON_CODE_POINTS,
)

__all__ = [
    "InboundState",
    "JournalDirs",
    "JournalFollower",
    "LiveGoal",
    "LiveState",
    "NetworkRead",
    "find_journals",
    "journal_root",
    "prune_ended",
    "read_live_state",
    "read_network",
    "session_dirs",
    "write_live_state",
]

logger = logging.getLogger(__name__)

_STATE_DIR: Final = "cross-session"
#: Entries of the journal root looked at, at most.
_SCAN_CAP: Final = MAX_JOURNAL_DIRS * 4
#: Names a journal dir may hold: what :func:`prune_ended` may remove (anything else stays).
_OURS_PREFIXES: Final = ("journal", "live.json", ".live.json.")


def journal_root(agent_dir: str) -> str:
    """``<agentDir>/cross-session/journal``: the dir holding every session's journal dir."""
    return node_join(agent_dir, _STATE_DIR, JOURNAL_DIR)


@dataclass
class JournalDirs:
    """The session journal dirs of an agent dir that may be read, and what was refused."""

    #: Instance id → dir, the most recently changed first, at most the limit asked for.
    dirs: dict[str, str] = field(default_factory=dict)
    #: Journal dirs found (named by an instance id), read or not.
    found: int = 0
    #: (path, why) of each dir not read: a symbolic link, another user's, a loose mode.
    refused: list[tuple[str, str]] = field(default_factory=list)
    #: Private journal dirs left out past the limit.
    capped: int = 0


def find_journals(agent_dir: str, *, limit: int = MAX_JOURNAL_DIRS) -> JournalDirs:
    """The journal dirs to read. The root and each session's dir must be private dirs of ours
    (0700, ours, not a symbolic link): anything else is refused, not read and not repaired (a
    session sets its own dir back to 0700 when it opens its journal). Never raises."""
    found = JournalDirs()
    root = journal_root(agent_dir)
    inspection = fs.inspect_private_dir(root)
    if inspection.state is fs.DirState.MISSING:
        return found
    if inspection.state is not fs.DirState.PRIVATE:
        found.refused.append((root, inspection.detail))
        return found
    dated: list[tuple[float, str, str]] = []
    try:
        with os.scandir(root) as entries:
            for seen, entry in enumerate(entries):
                if seen >= _SCAN_CAP:  # a root stuffed with junk is not scanned forever
                    break
                if not INSTANCE_ID_RE.fullmatch(entry.name):
                    continue  # not a session's journal (a temporary file, a user's note)
                judged = fs.inspect_private_dir(entry.path)
                if judged.state is fs.DirState.MISSING:
                    continue  # removed since the listing (retention)
                found.found += 1
                if judged.state is not fs.DirState.PRIVATE:
                    found.refused.append((entry.path, judged.detail))
                    continue
                with contextlib.suppress(OSError):
                    dated.append(
                        (entry.stat(follow_symlinks=False).st_mtime, entry.name, entry.path)
                    )
    except OSError as exc:
        found.refused.append((root, f"cannot be listed: {exc.strerror or exc}"))
    dated.sort(reverse=True)
    found.capped = max(0, len(dated) - limit)
    found.dirs = {name: path for _, name, path in dated[:limit]}
    return found


def session_dirs(agent_dir: str, *, limit: int = MAX_JOURNAL_DIRS) -> dict[str, str]:
    """Each readable session journal dir by instance id (see :func:`find_journals`)."""
    return find_journals(agent_dir, limit=limit).dirs


#: The order of a message's steps, to break a tie between two events of the same millisecond
#: written by two sessions (the sender's ``sent`` before the receiver's ``admitted``). Within one
#: session the lines' own order decides after this, and it agrees with this order.
_STEP: Final = {
    EventKind.SENT: 0,
    EventKind.ADMITTED: 1,
    EventKind.REFUSED: 2,
    EventKind.RECEIPT_UNKNOWN: 2,
    EventKind.QUEUED: 2,
    EventKind.SUBMITTED: 3,
    EventKind.DELIVERED: 4,
    EventKind.INJECTION_FAILED: 4,
    EventKind.EXPIRED: 4,
    EventKind.DROPPED: 4,
}


@dataclass
class NetworkRead:
    """What :func:`read_network` found: the events kept (oldest first) and what was passed over."""

    events: list[Event] = field(default_factory=list)
    #: Events that passed the filter, kept or not (more than ``events`` when ``limit`` cut).
    matched: int = 0
    #: Instance ids whose journal was read: the other end of an event outside it kept none.
    journaled: set[str] = field(default_factory=set)
    #: Journal dirs found, read or not, and those left out past the dirs' limit.
    journals: int = 0
    capped: int = 0
    skipped: int = 0
    skipped_bytes: int = 0
    #: (dir, lines skipped, bytes skipped) for each dir that had any.
    skipped_in: list[tuple[str, int, int]] = field(default_factory=list)
    #: (path, why) of each dir or file not read.
    unreadable: list[tuple[str, str]] = field(default_factory=list)


def read_network(
    agent_dir: str, *, where: EventFilter | None = None, limit: int | None = None
) -> NetworkRead:
    """Every session's events that pass ``where``, the newest ``limit`` of them (all without
    one), oldest first. One journal file is open at a time, and at most ``limit`` events are
    held: a min-heap of the newest so far, keyed by time, then a message's step, then the order
    read."""
    dirs = find_journals(agent_dir)
    found = NetworkRead(journals=dirs.found, capped=dirs.capped, unreadable=list(dirs.refused))
    newest: list[tuple[int, int, int, Event]] = []
    order = 0
    for instance_id, path in dirs.dirs.items():
        found.journaled.add(instance_id)
        reader = JournalReader(path, where=where)
        for event in reader:
            order += 1
            found.matched += 1
            item = (event.at, _STEP[event.kind], order, event)
            if limit is None or len(newest) < limit:
                heapq.heappush(newest, item)
            elif limit > 0 and item[:3] > newest[0][:3]:
                heapq.heapreplace(newest, item)
        found.skipped += reader.skipped
        found.skipped_bytes += reader.skipped_bytes
        if reader.skipped or reader.skipped_bytes:
            found.skipped_in.append((path, reader.skipped, reader.skipped_bytes))
        found.unreadable.extend(reader.unreadable)
    newest.sort(key=lambda item: item[:3])
    found.events = [item[3] for item in newest]
    return found


class JournalFollower:
    """The events one session's journal gained since the last :meth:`poll`.

    The first poll reads what is there (the rotated files, then the current one); each later poll
    reads on from where the last one stopped. A rotation is followed: the rest of the file that
    was renamed is read before the new one. A line still being written is held (at most
    :data:`MAX_JOURNAL_LINE_BYTES`) until its newline arrives. A file larger than a journal ever
    grows (:data:`MAX_JOURNAL_FILE_BYTES`) is not ours: only its last that many bytes are read, and
    :attr:`skipped_bytes` says how much was passed over.
    """

    def __init__(self, directory: str, *, from_end: bool = False) -> None:
        self.directory = directory
        self.skipped = 0
        self.skipped_bytes = 0
        self.unreadable: str | None = None
        self._from_end = from_end
        self._started = False
        self._inode: int | None = None
        self._offset = 0
        self._lines = LineSplitter(MAX_JOURNAL_LINE_BYTES)

    def poll(self) -> list[Event]:
        """The new events, oldest first (never raises for what is on disk)."""
        events: list[Event] = []
        if not self._started:
            self._started = True
            inspection = fs.inspect_private_dir(self.directory)
            if inspection.state in (fs.DirState.UNUSABLE, fs.DirState.UNREADABLE):
                self.unreadable = inspection.detail
                return events
            if not self._from_end:
                for path in journal_files(self.directory)[:-1]:
                    if os.path.basename(path) != JOURNAL_FILE:
                        self._read_whole(path, events)
        if self.unreadable is not None:
            return events
        self._read_current(events)
        return events

    def _read_whole(self, path: str, events: list[Event]) -> None:
        reader = JournalReader(os.path.dirname(path))
        for event in reader.read_file(path):
            events.append(event)
        self.skipped += reader.skipped
        self.skipped_bytes += reader.skipped_bytes

    def _read_current(self, events: list[Event]) -> None:
        path = os.path.join(self.directory, JOURNAL_FILE)
        try:
            fd, size = fs.open_private_file(path, append=False)
        except fs.FileSystemError:
            return  # not written yet, or rotated this instant: the next poll finds it
        try:
            inode = os.fstat(fd).st_ino
            if inode != self._inode:
                if self._inode is not None:
                    self._finish_rotated(events)
                self._inode = inode
                self._offset = 0
                self._lines.reset()
                if self._from_end:
                    self._from_end = False
                    self._offset = size
            if size < self._offset:  # truncated under us: not our writer's doing; start again
                self._offset = 0
                self._lines.reset()
            if size - self._offset > MAX_JOURNAL_FILE_BYTES:
                # More than a journal file ever holds is new: not ours; read only its end.
                self.skipped_bytes += size - MAX_JOURNAL_FILE_BYTES - self._offset
                self._offset = size - MAX_JOURNAL_FILE_BYTES
                self._lines.reset(mid_line=True)
            self._read_from(fd, events)
        except OSError:
            pass
        finally:
            os.close(fd)

    def _finish_rotated(self, events: list[Event]) -> None:
        """Read the rest of the file we were following, which a rotation renamed."""
        for path in reversed(journal_files(self.directory)):
            try:
                st = os.stat(path, follow_symlinks=False)
            except OSError:
                continue
            if st.st_ino != self._inode:
                continue
            try:
                fd, _ = fs.open_private_file(path, append=False)
            except fs.FileSystemError:
                return
            try:
                self._read_from(fd, events)
            except OSError:
                pass
            finally:
                os.close(fd)
            if self._lines.pending:  # the old file ended without a newline: a lost fragment
                self.skipped += 1
            return

    def _read_from(self, fd: int, events: list[Event]) -> None:
        os.lseek(fd, self._offset, os.SEEK_SET)
        while chunk := os.read(fd, JOURNAL_READ_CHUNK_BYTES):
            self._offset += len(chunk)
            for raw in self._lines.feed(chunk):
                event = parse_line(raw)
                if event is None:
                    self.skipped += 1
                else:
                    events.append(event)


# -- live state ------------------------------------------------------------------------------------


class InboundState(StrEnum):
    """Whether a session takes messages now: ``open``, ``refusing`` (its inbound policy is
    ``refuse``) or ``latched`` (an aborted turn closed it until the user reopens it)."""

    OPEN = "open"
    REFUSING = "refusing"
    LATCHED = "latched"


@dataclass(frozen=True, slots=True)
class LiveGoal:
    """A session's active goal: its id and the objective the local user gave it (cut)."""

    goal_id: str
    objective: str


@dataclass(frozen=True, slots=True)
class LiveState:
    """What a running session of ours publishes about itself beside its journal.

    ``host`` says what kind of session it is (``pi-python``, ``mcp``, ``inbox``…); ``reason`` says
    why the inbox is not open; ``ended`` is written last, as the session stops.
    """

    at: int
    instance_id: str
    name: str
    host: str
    inbound: InboundState
    queue: int = 0
    reason: str | None = None
    goal: LiveGoal | None = None
    ended: bool = False

    def to_json(self) -> dict[str, Any]:
        """The state as ``live.json`` holds it."""
        data: dict[str, Any] = {
            "v": FORMAT_VERSION,
            "at": self.at,
            "instanceId": self.instance_id,
            "name": self.name,
            "host": self.host,
            "inbound": self.inbound.value,
            "queue": self.queue,
            "ended": self.ended,
        }
        if self.reason is not None:
            data["reason"] = self.reason[:MAX_LIVE_REASON_CODE_POINTS]
        if self.goal is not None:
            data["goal"] = {
                "id": self.goal.goal_id,
                "objective": self.goal.objective[:MAX_LIVE_GOAL_CODE_POINTS],
            }
        return data

    @classmethod
    def from_json(cls, data: object) -> LiveState | None:
        """The state a decoded ``live.json`` holds, or ``None`` (never raises)."""
        if not isinstance(data, dict) or data.get("v") != FORMAT_VERSION:
            return None
        try:
            return _live_from(data)
        except (KeyError, TypeError, ValueError):
            return None


def _bounded_str(value: object, limit: int) -> str:
    if not isinstance(value, str) or len(value) > limit:
        raise ValueError("a bounded string")
    return value


def _live_from(data: Mapping[str, Any]) -> LiveState:
    at, queue = data["at"], data["queue"]
    if type(at) is not int or type(queue) is not int or at < 0 or not 0 <= queue <= 1_000_000:
        raise ValueError("times and counts are plain integers")
    instance_id = data["instanceId"]
    if not isinstance(instance_id, str) or not INSTANCE_ID_RE.fullmatch(instance_id):
        raise ValueError("an instance id")
    ended = data["ended"]
    if not isinstance(ended, bool):
        raise TypeError("ended is a boolean")
    goal_data = data.get("goal")
    goal = None
    if goal_data is not None:
        if not isinstance(goal_data, dict):
            raise TypeError("a goal is an object")
        goal = LiveGoal(
            _bounded_str(goal_data["id"], 64),
            _bounded_str(goal_data["objective"], MAX_LIVE_GOAL_CODE_POINTS),
        )
    reason = data.get("reason")
    return LiveState(
        at=at,
        instance_id=instance_id,
        name=_bounded_str(data["name"], 256),
        host=_bounded_str(data["host"], 32),
        inbound=InboundState(data["inbound"]),
        queue=queue,
        reason=None if reason is None else _bounded_str(reason, MAX_LIVE_REASON_CODE_POINTS),
        goal=goal,
        ended=ended,
    )


#: ``live.json`` is a few hundred bytes; a larger one is not ours and is not read.
_MAX_LIVE_BYTES: Final = 4_096


def write_live_state(directory: str, state: LiveState) -> None:
    """Replace ``<directory>/live.json`` (atomically, 0600), creating the private dir if needed.
    Raises the file system's errors: the caller decides what a failure costs."""
    fs.ensure_private_dir(directory)
    data = json.dumps(state.to_json(), ensure_ascii=True, separators=(",", ":")).encode("ascii")
    fs.write_private_file(directory, LIVE_STATE_FILE, data)


def read_live_state(directory: str) -> LiveState | None:
    """The live state a session published, or ``None`` when there is none we can trust."""
    try:
        fd, size = fs.open_private_file(os.path.join(directory, LIVE_STATE_FILE), append=False)
    except fs.FileSystemError:
        return None
    try:
        if size > _MAX_LIVE_BYTES:
            return None
        raw = os.read(fd, _MAX_LIVE_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        return LiveState.from_json(json.loads(raw.decode("utf-8")))
    except (ValueError, RecursionError):
        return None


# -- retention -------------------------------------------------------------------------------------


def _newest_mtime(directory: str) -> float | None:
    newest: float | None = None
    try:
        with os.scandir(directory) as entries:
            for seen, entry in enumerate(entries):
                if seen >= 64:
                    break
                with contextlib.suppress(OSError):
                    mtime = entry.stat(follow_symlinks=False).st_mtime
                    newest = mtime if newest is None else max(newest, mtime)
    except OSError:
        return None
    return newest


def _remove_journal_dir(directory: str) -> bool:
    """Remove a journal dir holding only our files (regular files of ours by name); anything
    else in it keeps the dir where it is."""
    if fs.inspect_private_dir(directory).state is not fs.DirState.PRIVATE:
        return False
    try:
        with os.scandir(directory) as entries:
            found = [(entry.name, entry.is_file(follow_symlinks=False)) for entry in entries]
        if not all(name.startswith(_OURS_PREFIXES) and plain for name, plain in found):
            return False  # someone put something here: not ours to remove
        for name, _ in found:
            os.unlink(os.path.join(directory, name))
        os.rmdir(directory)
    except OSError:
        return False
    return True


def prune_ended(
    agent_dir: str,
    live_ids: Iterable[str],
    *,
    retention_s: float = JOURNAL_RETENTION_S,
    now: float | None = None,
) -> int:
    """Remove the journals of sessions not in ``live_ids`` whose newest file is older than
    ``retention_s``; returns how many went. Safe to run from several sessions at once."""
    keep = set(live_ids)
    cutoff = (time.time() if now is None else now) - retention_s
    removed = 0
    for instance_id, directory in session_dirs(agent_dir, limit=_SCAN_CAP).items():
        if instance_id in keep:
            continue
        newest = _newest_mtime(directory)
        if newest is not None and newest < cutoff and _remove_journal_dir(directory):
            removed += 1
    return removed
