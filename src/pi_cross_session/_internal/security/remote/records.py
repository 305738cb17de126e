"""The mirror of other machines' sessions: which signed record of each one is current.

Every record and tombstone a machine signs carries its sequence (``seq``), which grows with each
one it signs. A reader keeps, per session, the highest sequence it has seen, and takes nothing at
or below it: a record captured earlier and written back into the bucket cannot revive a session
that its own machine said was gone, nor bring back an older state (docs/remote.md, "Records").

Only a signed tombstone removes a session at once. A delete or purge that nobody signed changes
nothing here (the gateway re-reads that key instead); a session whose records stop coming is
removed after ``ttl_s`` without a refresh, on the reader's own clock.

Bounded: per origin machine and in all, live records and remembered sequences together. A
sequence is remembered only as long as a record signed before it could still pass the time check
(its ``at`` plus the records' validity and the future skew); after that, time alone refuses the
older records, so forgetting grants nothing.

Pure: the caller passes both clocks (``now``: monotonic seconds, for refreshes; ``now_ms``: wall
milliseconds, to compare with ``at``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass
from enum import Enum

from pi_cross_session._internal.protocol.remote.envelope import PeerRecord, Tombstone
from pi_cross_session._internal.protocol.remote.settings import (
    ENVELOPE_MAX_AHEAD_S,
    MAX_REMOTE_RECORDS,
    REMOTE_RECORD_TTL_S,
    REMOTE_RECORDS_PER_MACHINE,
)

Key = tuple[str, str]


class Offer(Enum):
    """What became of a record or tombstone offered to the book."""

    #: A record of a session not held before: it is now.
    NEW = "new"
    #: A newer record of a session already held.
    UPDATED = "updated"
    #: A tombstone that removed a held session.
    REMOVED = "removed"
    #: A tombstone for a session not held: remembered, nothing else changes.
    NOTED = "noted"
    #: At or below the sequence already seen for that session: ignored.
    STALE = "stale"
    #: A new session while its machine's share (or the whole book) is full: ignored and counted.
    FULL = "full"


@dataclass(slots=True)
class _Entry:
    seq: int
    #: The latest ``at`` seen for this session (wall ms, the origin's clock): the latest, not the
    #: newest sequence's, so that an origin whose clock stepped back is remembered long enough.
    at: int
    #: The live record, or ``None`` once a tombstone or the TTL ended it.
    record: PeerRecord | None
    #: When it was last refreshed (monotonic seconds, ours).
    seen: float


class RecordBook:
    """Current records of other machines' sessions, by ``(machine, instance id)``."""

    def __init__(
        self,
        *,
        ttl_s: float = REMOTE_RECORD_TTL_S,
        per_machine: int = REMOTE_RECORDS_PER_MACHINE,
        total: int = MAX_REMOTE_RECORDS,
        ahead_s: float = ENVELOPE_MAX_AHEAD_S,
    ) -> None:
        if per_machine < 1 or total < 1 or ttl_s <= 0:
            raise ValueError("the bounds must be positive")
        self._ttl_s = ttl_s
        self._remember_ms = int((ttl_s + ahead_s) * 1000)
        self._per_machine = per_machine
        self._total = total
        self._entries: dict[Key, _Entry] = {}
        self._per: dict[str, int] = {}
        #: Records refused for want of room, since start.
        self.ignored = 0

    def __len__(self) -> int:
        """Live records held."""
        return sum(1 for entry in self._entries.values() if entry.record is not None)

    def remembered(self) -> int:
        """Entries held: live records and remembered sequences together (the bounded number)."""
        return len(self._entries)

    def get(self, key: Key) -> PeerRecord | None:
        """The live record of ``key``, if any."""
        entry = self._entries.get(key)
        return None if entry is None else entry.record

    def seen(self, key: Key) -> float | None:
        """When the live record of ``key`` was last refreshed (monotonic), if it is held."""
        entry = self._entries.get(key)
        return None if entry is None or entry.record is None else entry.seen

    def seq(self, key: Key) -> int | None:
        """The highest sequence seen for ``key`` and still remembered."""
        entry = self._entries.get(key)
        return None if entry is None else entry.seq

    def items(self) -> Iterator[tuple[Key, PeerRecord]]:
        """Every live record."""
        for key, entry in self._entries.items():
            if entry.record is not None:
                yield key, entry.record

    def offer(self, machine: str, at_ms: int, body: PeerRecord | Tombstone, now: float) -> Offer:
        """Take a verified record or tombstone of ``machine`` (signed at ``at_ms``) if it is newer
        than what was seen for its session."""
        key = (machine, body.instance_id)
        entry = self._entries.get(key)
        if entry is not None and body.seq <= entry.seq:
            return Offer.STALE
        if isinstance(body, Tombstone):
            if entry is None:
                if not self._room_for(machine):
                    return Offer.NOTED  # nothing held to remove; not remembered for want of room
                self._add(key, _Entry(body.seq, at_ms, None, now))
                return Offer.NOTED
            held = entry.record is not None
            entry.seq, entry.at, entry.record, entry.seen = (
                body.seq,
                max(entry.at, at_ms),
                None,
                now,
            )
            return Offer.REMOVED if held else Offer.NOTED
        if entry is None:
            if not self._room_for(machine):
                self.ignored += 1
                return Offer.FULL
            self._add(key, _Entry(body.seq, at_ms, body, now))
            return Offer.NEW
        was_live = entry.record is not None
        entry.seq, entry.at, entry.record, entry.seen = body.seq, max(entry.at, at_ms), body, now
        return Offer.UPDATED if was_live else Offer.NEW

    def expire(self, now: float, now_ms: int, held: Collection[str] = ()) -> list[Key]:
        """End every record not refreshed for ``ttl_s`` (returned), and forget every sequence
        that no record still inside its validity could be older than; the machines ``held`` (not
        listened to for a while) keep theirs as they are until they are read again."""
        ended: list[Key] = []
        for key in list(self._entries):
            if key[0] in held:
                continue
            entry = self._entries[key]
            if entry.record is not None and now - entry.seen > self._ttl_s:
                entry.record = None
                ended.append(key)
            if entry.record is None and now_ms > entry.at + self._remember_ms:
                self._drop(key)
        return ended

    def forget(self, machine: str) -> list[Key]:
        """Drop everything of ``machine`` (no longer trusted); the keys whose record was live.
        Its sequences go too: were it trusted again, its records would still have to pass the
        time check, which no record older than its validity passes."""
        ended: list[Key] = []
        for key in [k for k in self._entries if k[0] == machine]:
            if self._entries[key].record is not None:
                ended.append(key)
            self._drop(key)
        return ended

    def _room_for(self, machine: str) -> bool:
        return len(self._entries) < self._total and self._per.get(machine, 0) < self._per_machine

    def _add(self, key: Key, entry: _Entry) -> None:
        self._entries[key] = entry
        self._per[key[0]] = self._per.get(key[0], 0) + 1

    def _drop(self, key: Key) -> None:
        del self._entries[key]
        left = self._per[key[0]] - 1
        if left:
            self._per[key[0]] = left
        else:
            del self._per[key[0]]
