"""An executable reading of step 11 of the admission pipeline with *bounded* tables.

:class:`tests.receiver.model.ReceiverModel` judges any byte stream, with tables so large that
nothing is ever forgotten. This model judges well-formed messages and status queries from many
authenticated identities, with tables small enough that they fill all the time, and says exactly
what the receiver must answer, including after something was forgotten. It is written from the
contract (spec §5 steps 10–12, goal-scoped-v1 §2.3 step 11) and from the eviction rules
``docs/security.md`` states ("Bounded tables and who can evict what"); like the other model it
imports nothing from the package, and it keeps its state in plain lists, the slow obvious way.

The rules, as the docs state them:

* ids and digests: past the bound, the committing sender gives up its own oldest other entry;
  a sender holding no other takes the oldest entry of the sender holding the most (among equal
  holders, the one whose count changed least recently). Digests past their 30 s window go
  first, whoever's.
* status rows: the same rule over finished rows, applied when a row finishes.
* rate buckets: past the bound, the bucket with the most tokens goes — counted without the cap,
  so among full buckets the one full the longest — the least recently committed among equals; a
  forgotten sender starts again with a full bucket.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

#: Text dedup window (spec §5 step 11.2), in seconds of the receiver's monotonic clock.
TEXT_WINDOW_S: Final = 30.0


@dataclass
class _Entry:
    owner: str
    key: object
    serial: int


@dataclass
class FairTable:
    """Entries in the order of their last commit, each owned by a sender."""

    bound: int
    entries: list[_Entry] = field(default_factory=list)
    serial: int = 0
    #: When each owner's count of entries last changed (a serial).
    changed: dict[str, int] = field(default_factory=dict)
    #: Entries evicted so far: of the committing sender itself, and of another sender.
    evicted_own: int = 0
    evicted_foreign: int = 0

    def __contains__(self, key: object) -> bool:
        return any(entry.key == key for entry in self.entries)

    def keys_of(self, owner: str) -> list[object]:
        return [entry.key for entry in self.entries if entry.owner == owner]

    def drop(self, key: object) -> None:
        gone = [entry for entry in self.entries if entry.key == key]
        self.entries = [entry for entry in self.entries if entry.key != key]
        for entry in gone:
            self._stamp(entry.owner)

    def _stamp(self, owner: str) -> None:
        self.serial += 1
        self.changed[owner] = self.serial

    def commit(self, owner: str, key: object) -> list[object]:
        """Add (or refresh) ``key`` for ``owner``, then trim to the bound; returns the evicted."""
        refreshed = [entry for entry in self.entries if entry.key == key]
        if refreshed and refreshed[0].owner == owner:
            # The same entry again: it becomes its owner's newest; its owner's count is as it was.
            self.entries.remove(refreshed[0])
        else:
            self.drop(key)
            self._stamp(owner)
        self.serial += 1
        self.entries.append(_Entry(owner, key, self.serial))
        evicted: list[object] = []
        while len(self.entries) > self.bound:
            victim = self._victim(owner, key)
            if victim is None:
                break
            self.drop(victim.key)  # its owner's count changes: it goes to the back of its level
            evicted.append(victim.key)
            if victim.owner == owner:
                self.evicted_own += 1
            else:
                self.evicted_foreign += 1
        return evicted

    def _victim(self, committer: str, newest: object) -> _Entry | None:
        mine = [e for e in self.entries if e.owner == committer and e.key != newest]
        if mine:
            return mine[0]
        counts: dict[str, int] = {}
        for entry in self.entries:
            counts[entry.owner] = counts.get(entry.owner, 0) + 1
        others = [e for e in self.entries if e.owner != committer]
        if not others:
            return None
        most = max(counts[e.owner] for e in others)
        largest = [owner for owner in counts if owner != committer and counts[owner] == most]
        chosen = min(largest, key=lambda name: self.changed[name])
        # ``entries`` is in commit order: the chosen owner's first entry is its oldest.
        return next(e for e in others if e.owner == chosen)


@dataclass
class _Bucket:
    tokens: float
    stamp: float


@dataclass
class Buckets:
    """Token buckets, least recently committed first."""

    capacity: float
    refill: float
    bound: int
    order: list[str] = field(default_factory=list)
    buckets: dict[str, _Bucket] = field(default_factory=dict)

    def tokens(self, sender: str, now: float) -> float:
        bucket = self.buckets.get(sender)
        if bucket is None:
            return self.capacity
        return min(self.capacity, bucket.tokens + max(0.0, now - bucket.stamp) * self.refill)

    def commit(self, sender: str, now: float) -> None:
        left = self.tokens(sender, now) - 1.0
        old = self.buckets.get(sender)
        self.buckets[sender] = _Bucket(left, now if old is None else max(old.stamp, now))
        if sender in self.order:
            self.order.remove(sender)
        self.order.append(sender)
        while len(self.order) > self.bound:
            others = [s for s in self.order if s != sender]
            # ``max`` keeps the first of equals: ``order`` is least recently committed first.
            victim = max(others, key=lambda s: self._uncapped(s, now))
            self.order.remove(victim)
            del self.buckets[victim]

    def _uncapped(self, sender: str, now: float) -> float:
        bucket = self.buckets[sender]
        return bucket.tokens + (now - bucket.stamp) * self.refill


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one frame must get, and whether it is admitted (a row and a host submission)."""

    status: str
    ok: bool
    admitted: bool = False


@dataclass
class TablesModel:
    """The receiver's step-11 state for one incarnation with no active goal and a budget that
    never runs out, as the table fuzzer configures it."""

    ids: FairTable
    texts: FairTable
    rows: FairTable
    rate: Buckets
    #: Text digests: key -> monotonic time of the last admission.
    stamps: dict[object, float] = field(default_factory=dict)

    @classmethod
    def bounded(
        cls, *, ids: int, texts: int, rows: int, senders: int, capacity: int, refill: float
    ) -> TablesModel:
        return cls(
            FairTable(ids), FairTable(texts), FairTable(rows), Buckets(capacity, refill, senders)
        )

    def message(
        self, sender: str, message_id: str, text: str, goal_id: str | None, now: float
    ) -> Verdict:
        """A fresh, well-formed message from an authenticated ``sender`` at ``now``."""
        text_key = (sender, goal_id or "", text)
        seen = (sender, message_id) in self.ids or (sender, message_id) in self.rows
        last = self.stamps.get(text_key)
        if seen or (last is not None and now - last < TEXT_WINDOW_S):
            return Verdict("duplicate", False)
        if self.rate.tokens(sender, now) < 1.0:
            return Verdict("rate_limited", False)
        self.ids.commit(sender, (sender, message_id))
        self._commit_text(text_key, now)
        self.rate.commit(sender, now)
        if goal_id is not None:
            # No goal is active: every goal id is refused after the commit (goal-scoped-v1 §2.3
            # step 11), with no row and no budget spent.
            return Verdict("goal_not_authorized", False)
        self.rows.commit(sender, (sender, message_id))
        return Verdict("submitted", True, admitted=True)

    def status(self, sender: str, message_id: str) -> Verdict:
        known = (sender, message_id) in self.rows
        return Verdict("submitted" if known else "unknown", True)

    def _commit_text(self, key: tuple[str, str, str], now: float) -> None:
        self.stamps[key] = now
        # Expired digests go first, whoever's they are.
        for entry in list(self.texts.entries):
            if now - self.stamps[entry.key] >= TEXT_WINDOW_S and entry.key != key:
                self.texts.drop(entry.key)
                del self.stamps[entry.key]
        for gone in self.texts.commit(key[0], key):
            del self.stamps[gone]
