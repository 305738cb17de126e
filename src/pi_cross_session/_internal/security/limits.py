"""How much a receiver lets one sender do: rate, duplicates, and the lifetime budget.

Each policy is a small class with an injected notion of time (``now`` in seconds, monotonic) and a
strict split between *asking* and *committing*: ``check_*`` methods never change state, ``commit``
does. The admission pipeline asks every question first and commits only when every answer was yes,
so a refused message costs the sender nothing (spec §5, step 11–12).

Every structure is bounded, and no sender can make one forget another sender's entries while it
holds entries of its own (docs/security.md, "Bounded tables and who can evict what"). The bound and
the eviction rule sit beside each:

* :class:`RateLimiter` — a token bucket per sender incarnation (30 tokens, 0.5/s), at most 256
  senders tracked. A forgotten sender comes back with a full bucket, so forgetting helps only the
  forgotten: the bucket forgotten is the one lacking the fewest tokens (a full one costs nothing),
  least recently committed among equals, found in logarithmic time. Churning the table with new
  identities therefore never refills a drained bucket while a fuller one is tracked.
* :class:`MessageIdLedger` — message ids already admitted per sender incarnation, kept for the
  whole receiver incarnation (no time window: an id is never reusable), at most 512 remembered.
  Past the bound a sender gives up its own oldest id; a sender holding none takes the oldest of the
  sender holding the most (:class:`~pi_cross_session._internal.security.shares.SenderShares`). The
  256-unit budget keeps unscoped traffic below the bound; refused goal ids and members' scoped
  messages do not spend it, hence the rule.
* :class:`TextDedup` — the SHA-256 of each admitted text per sender (and goal), suppressing the same
  text within 30 s, whatever came in between (A, B, A is caught). Entries older than the window are
  useless and are pruned first; past 512 the same rule as the ledger picks what goes.
* :class:`LifetimeBudget` — 256 units per incarnation shared by inbound commits and outbound
  attempts; never refilled, refunded only for a confirmed goal-scoped send (see
  :meth:`LifetimeBudget.refund`).
"""

from __future__ import annotations

import hashlib
import heapq
from collections import OrderedDict
from dataclasses import dataclass

from pi_cross_session._internal.protocol.limits import (
    LIFETIME_BUDGET,
    MAX_CACHE_ENTRIES,
    MAX_RATE_SENDERS,
    RATE_CAPACITY,
    RATE_REFILL_PER_S,
    TEXT_DEDUP_WINDOW_S,
)
from pi_cross_session._internal.security.shares import SenderShares


@dataclass(slots=True)
class _Bucket:
    tokens: float
    stamp: float
    #: Which commit made this bucket what it is (orders equal buckets, least recent first).
    serial: int


class RateLimiter:
    """A token bucket per sender: ``capacity`` burst, ``refill_per_s`` sustained."""

    def __init__(
        self,
        *,
        capacity: int = RATE_CAPACITY,
        refill_per_s: float = RATE_REFILL_PER_S,
        max_senders: int = MAX_RATE_SENDERS,
    ) -> None:
        self._capacity = float(capacity)
        self._refill = refill_per_s
        self._max_senders = max_senders
        self._buckets: dict[str, _Bucket] = {}
        self._serial = 0
        # Who is forgotten first: a heap of (-level, serial, sender), where a bucket's *level* is
        # its tokens at time 0 had it refilled without a cap (tokens - stamp * refill). Its tokens
        # at ``now`` are min(capacity, level + now * refill), so the highest level is the fullest
        # bucket at any time, full ones included, and the order never has to be recomputed.
        # Entries of buckets committed since (or forgotten) are stale and skipped.
        self._order: list[tuple[float, int, str]] = []

    def tokens(self, sender: str, now: float) -> float:
        """Tokens ``sender`` would have at ``now`` (a full bucket for an unknown sender)."""
        bucket = self._buckets.get(sender)
        if bucket is None:
            return self._capacity
        elapsed = max(0.0, now - bucket.stamp)  # a clock that steps back never adds tokens
        return min(self._capacity, bucket.tokens + elapsed * self._refill)

    def allows(self, sender: str, now: float) -> bool:
        """True when at least one whole token is available; changes nothing."""
        return self.tokens(sender, now) >= 1.0

    def commit(self, sender: str, now: float) -> None:
        """Spend one token (after :meth:`allows` said yes and the message was admitted).

        Past ``max_senders`` one other sender is forgotten: the one with the most tokens (a full
        bucket first, since forgetting it changes nothing; among full ones, the one full the
        longest), the least recently committed among equals. A forgotten sender comes back with a
        full bucket, so this forgets the bucket whose loss gives its owner the least.
        """
        left = self.tokens(sender, now) - 1.0
        previous = self._buckets.get(sender)
        # Never move the stamp back: time already credited must not be credited twice.
        stamp = now if previous is None else max(previous.stamp, now)
        self._serial += 1
        self._buckets[sender] = _Bucket(tokens=left, stamp=stamp, serial=self._serial)
        heapq.heappush(self._order, (self._refill * stamp - left, self._serial, sender))
        while len(self._buckets) > self._max_senders:
            self._forget_one(sender)
        if len(self._order) > 2 * len(self._buckets) + 64:
            self._compact()

    def _forget_one(self, newest: str) -> None:
        kept: list[tuple[float, int, str]] = []
        while self._order:
            entry = heapq.heappop(self._order)
            _, serial, sender = entry
            bucket = self._buckets.get(sender)
            if bucket is None or bucket.serial != serial:
                continue  # stale: committed again since, or already forgotten
            if sender == newest and len(self._buckets) > 1:
                kept.append(entry)  # the committing sender stays (unless it is alone)
                continue
            del self._buckets[sender]
            break
        for entry in kept:
            heapq.heappush(self._order, entry)

    def _compact(self) -> None:
        self._order = [
            (self._refill * bucket.stamp - bucket.tokens, bucket.serial, sender)
            for sender, bucket in self._buckets.items()
        ]
        heapq.heapify(self._order)

    def __len__(self) -> int:
        return len(self._buckets)


class MessageIdLedger:
    """Message ids admitted per sender incarnation, for the receiver's whole incarnation."""

    def __init__(self, *, max_entries: int = MAX_CACHE_ENTRIES) -> None:
        self._max = max_entries
        self._seen: SenderShares[tuple[str, str]] = SenderShares()

    def seen(self, sender: str, message_id: str) -> bool:
        """True when this sender incarnation already had a message with this id admitted."""
        return (sender, message_id) in self._seen

    def commit(self, sender: str, message_id: str) -> None:
        """Remember an admitted id. Past ``max_entries`` one id is forgotten: the sender's own
        oldest, or, when it holds no other, the oldest of the sender holding the most."""
        key = (sender, message_id)
        self._seen.add(sender, key)
        self._seen.make_room(self._max, sender, spare=(key,))

    def __len__(self) -> int:
        return len(self._seen)


def text_digest(text: str) -> str:
    """SHA-256 hex of the text's UTF-8 bytes: what text dedup compares."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class TextDedup:
    """The same text from the same sender (and goal) is a duplicate within ``window_s``."""

    def __init__(
        self, *, window_s: float = TEXT_DEDUP_WINDOW_S, max_entries: int = MAX_CACHE_ENTRIES
    ) -> None:
        self._window = window_s
        self._max = max_entries
        # Ordered by last admission, oldest first, so pruning stops at the first fresh entry.
        self._last: OrderedDict[tuple[str, str, str], float] = OrderedDict()
        # The same keys by sender, which decides what goes when fresh entries fill the table.
        self._shares: SenderShares[tuple[str, str, str]] = SenderShares()

    @staticmethod
    def key(sender: str, text: str, goal_id: str | None = None) -> tuple[str, str, str]:
        """The dedup key: sender incarnation, goal (empty when unscoped), text digest."""
        return (sender, goal_id or "", text_digest(text))

    def is_duplicate(self, key: tuple[str, str, str], now: float) -> bool:
        """True when the same key was admitted less than ``window_s`` ago."""
        last = self._last.get(key)
        return last is not None and now - last < self._window

    def commit(self, key: tuple[str, str, str], now: float) -> None:
        """Record an admission of ``key`` at ``now``. Expired entries go first, whoever they
        belong to; past ``max_entries`` one fresh entry goes: the sender's own oldest, or, when it
        holds no other, the oldest of the sender holding the most."""
        self._last[key] = now
        self._last.move_to_end(key)
        self._prune(now)  # ``key`` is fresh now: only others' expired entries go
        self._shares.add(key[0], key)
        for gone in self._shares.make_room(self._max, key[0], spare=(key,)):
            del self._last[gone]

    def _prune(self, now: float) -> None:
        while self._last:
            oldest_key, oldest = next(iter(self._last.items()))
            if now - oldest < self._window:
                break
            self._forget(oldest_key)

    def _forget(self, key: tuple[str, str, str]) -> None:
        del self._last[key]
        self._shares.remove(key)

    def __len__(self) -> int:
        return len(self._last)


class LifetimeBudget:
    """Units one incarnation may spend on inbound admissions and outbound attempts together."""

    def __init__(self, *, units: int = LIFETIME_BUDGET) -> None:
        self._total = units
        self._left = units

    @property
    def remaining(self) -> int:
        """Units left; never below 0, never above the initial amount."""
        return self._left

    @property
    def total(self) -> int:
        """Units this incarnation started with."""
        return self._total

    def can_spend(self) -> bool:
        """True while at least one unit is left."""
        return self._left > 0

    def spend(self) -> None:
        """Spend one unit; spending from an empty budget is a bug of the caller."""
        if self._left <= 0:
            raise RuntimeError("the lifetime budget is exhausted")
        self._left -= 1

    def refund(self) -> None:
        """Give back one unit spent on an outbound attempt that a goal-scoped receipt confirmed
        (goal-scoped-v1 §2.4); never above the initial amount."""
        self._left = min(self._total, self._left + 1)
