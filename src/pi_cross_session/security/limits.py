"""How much a receiver lets one sender do: rate, duplicates, and the lifetime budget.

Each policy is a small class with an injected notion of time (``now`` in seconds, monotonic) and a
strict split between *asking* and *committing*: ``check_*`` methods never change state, ``commit``
does. The admission pipeline asks every question first and commits only when every answer was yes,
so a refused message costs the sender nothing (spec §5, step 11–12).

Every structure is bounded; the bound and the eviction rule sit beside it:

* :class:`RateLimiter` — a token bucket per sender incarnation (30 tokens, 0.5/s), at most 256
  senders tracked, least recently used forgotten first. A forgotten sender comes back with a full
  bucket, which is the price of a bounded table; 256 senders × 30 tokens is still bounded by the
  lifetime budget below.
* :class:`MessageIdLedger` — message ids already admitted per sender incarnation, kept for the
  whole receiver incarnation (no time window: an id is never reusable), at most 512 remembered.
  The 256-unit budget means unscoped traffic never reaches the cap.
* :class:`TextDedup` — the SHA-256 of each admitted text per sender (and goal), suppressing the same
  text within 30 s, whatever came in between (A, B, A is caught). Entries older than the window are
  useless and are pruned; the table is capped at 512 regardless.
* :class:`LifetimeBudget` — 256 units per incarnation shared by inbound commits and outbound
  attempts; never refunded, never refilled (goal-scoped refunds arrive with goal grants: see
  :meth:`LifetimeBudget.can_spend`).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass

from pi_cross_session.protocol.limits import (
    LIFETIME_BUDGET,
    MAX_CACHE_ENTRIES,
    MAX_RATE_SENDERS,
    RATE_CAPACITY,
    RATE_REFILL_PER_S,
    TEXT_DEDUP_WINDOW_S,
)


@dataclass(slots=True)
class _Bucket:
    tokens: float
    stamp: float


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
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

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
        """Spend one token (after :meth:`allows` said yes and the message was admitted)."""
        left = self.tokens(sender, now) - 1.0
        previous = self._buckets.get(sender)
        # Never move the stamp back: time already credited must not be credited twice.
        stamp = now if previous is None else max(previous.stamp, now)
        self._buckets[sender] = _Bucket(tokens=left, stamp=stamp)
        self._buckets.move_to_end(sender)
        while len(self._buckets) > self._max_senders:
            self._buckets.popitem(last=False)

    def __len__(self) -> int:
        return len(self._buckets)


class MessageIdLedger:
    """Message ids admitted per sender incarnation, for the receiver's whole incarnation."""

    def __init__(self, *, max_entries: int = MAX_CACHE_ENTRIES) -> None:
        self._max = max_entries
        self._seen: OrderedDict[tuple[str, str], None] = OrderedDict()

    def seen(self, sender: str, message_id: str) -> bool:
        """True when this sender incarnation already had a message with this id admitted."""
        return (sender, message_id) in self._seen

    def commit(self, sender: str, message_id: str) -> None:
        """Remember an admitted id; the oldest is forgotten past ``max_entries``."""
        self._seen[(sender, message_id)] = None
        while len(self._seen) > self._max:
            self._seen.popitem(last=False)

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

    @staticmethod
    def key(sender: str, text: str, goal_id: str | None = None) -> tuple[str, str, str]:
        """The dedup key: sender incarnation, goal (empty when unscoped), text digest."""
        return (sender, goal_id or "", text_digest(text))

    def is_duplicate(self, key: tuple[str, str, str], now: float) -> bool:
        """True when the same key was admitted less than ``window_s`` ago."""
        last = self._last.get(key)
        return last is not None and now - last < self._window

    def commit(self, key: tuple[str, str, str], now: float) -> None:
        """Record an admission of ``key`` at ``now``."""
        self._last[key] = now
        self._last.move_to_end(key)
        self._prune(now)

    def _prune(self, now: float) -> None:
        while self._last:
            oldest_key, oldest = next(iter(self._last.items()))
            if now - oldest < self._window and len(self._last) <= self._max:
                break
            del self._last[oldest_key]

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
