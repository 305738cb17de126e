"""Who gives way when the endpoint is full, and how much each process may have it read.

Two policies the endpoint asks before it acts, both pure (time is an argument, nothing here knows
sockets or clocks), so each is tested as a table:

* :class:`SheddingPolicy` — at capacity (64 connections), or when ``accept`` fails for lack of
  file descriptors, which open connection should be closed (without a byte) so that a newcomer can
  be served. The contract destroys the 65th connection; that is still the answer when nobody should
  give way. But a contract-only endpoint lets one process hold every slot for 30 s (a slowloris
  before the hello, or one byte of a second frame every two seconds after it), and every listing
  then misses the session. So:

  1. **fairness first** — if the process (kernel pid) holding the most connections holds more
     than the newcomer's process would after the newcomer, its oldest connection gives way: one
     process can never hold the slots another process needs;
  2. **then age** — the oldest connection open longer than ``shed_after_s`` (5 s: a real sender is
     done by then) gives way;
  3. otherwise nobody, and the newcomer is refused as the contract says.

  A connection whose request was admitted and is being answered never gives way, whatever its
  phase otherwise; every other one may (waiting for its hello, inside authentication, after
  ``ready``).

* :class:`ReadBudget` — a token bucket of bytes per process: each read is charged to the
  connecting pid, and a process in debt has its connections wait before their next read. An honest
  sender's burst (a hello and a few full frames) always fits; a process streaming megabytes to make
  the loop parse is slowed to a fixed rate, while every other process is read at once.

* :class:`SharedCap` — the connections open across several endpoints of one process (a gateway's
  proxies, one per remote session), held to one cap besides each endpoint's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from pi_cross_session._internal.protocol.limits import (
    MAX_READ_BUDGET_PEERS,
    PEER_READ_BURST_BYTES,
    PEER_READ_BYTES_PER_S,
    SHED_AFTER_S,
)

#: The key of connections whose pid the platform does not report: they share one budget.
UNKNOWN_PID: Final = None


@dataclass(frozen=True, slots=True)
class Slot:
    """One open connection as the shedding policy sees it.

    ``key`` identifies the connection to the caller; ``pid`` is the kernel's word on who opened it
    (``None`` when the platform says nothing); ``opened_at`` is when it was accepted (the caller's
    clock); ``answering`` is true once its request was admitted and the reply is being written.
    """

    key: int
    pid: int | None
    opened_at: float
    answering: bool = False


class SheddingPolicy:
    """Chooses the connection that gives way to a newcomer (see the module docstring)."""

    def __init__(self, *, shed_after_s: float = SHED_AFTER_S) -> None:
        self.shed_after_s = shed_after_s

    def victim(self, slots: Sequence[Slot], *, newcomer_holds: int, now: float) -> Slot | None:
        """The slot to close, or ``None`` when the newcomer should be refused instead.

        ``slots`` are the open connections, oldest first. ``newcomer_holds`` is how many of them
        the newcomer's process already holds (0 when it holds none, or when the newcomer is not
        known yet because ``accept`` itself failed).
        """
        held: dict[int | None, int] = {}
        for slot in slots:
            held[slot.pid] = held.get(slot.pid, 0) + 1
        sheddable = [slot for slot in slots if not slot.answering]
        if not sheddable:
            return None
        # The heaviest process that has something to give; ties go to the one whose oldest
        # sheddable connection is oldest (the first met, as ``sheddable`` is oldest first).
        oldest_of: dict[int | None, Slot] = {}
        for slot in sheddable:
            oldest_of.setdefault(slot.pid, slot)
        heaviest = max(oldest_of, key=lambda pid: held[pid])
        if held[heaviest] > newcomer_holds + 1:
            return oldest_of[heaviest]
        oldest = sheddable[0]
        if now - oldest.opened_at >= self.shed_after_s:
            return oldest
        return None


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float


class ReadBudget:
    """Bytes each process may have the endpoint read: ``burst`` at once, then ``per_s``.

    Reads are charged after they happen (:meth:`charge`), so a bucket can go into debt by at most
    one read; :meth:`delay` is how long that process's connections wait before their next read.
    Connections without a pid share one bucket. At most ``max_peers`` processes are remembered: a
    full bucket is the same as none and is dropped, and past the bound the fullest is forgotten.
    """

    def __init__(
        self,
        *,
        burst: int = PEER_READ_BURST_BYTES,
        per_s: float = PEER_READ_BYTES_PER_S,
        max_peers: int = MAX_READ_BUDGET_PEERS,
    ) -> None:
        if burst <= 0 or per_s <= 0 or max_peers <= 0:
            raise ValueError("burst, per_s and max_peers must be positive")
        self.burst = burst
        self.per_s = per_s
        self.max_peers = max_peers
        self._buckets: dict[int | None, _Bucket] = {}

    def __len__(self) -> int:
        return len(self._buckets)

    def tokens(self, pid: int | None, now: float) -> float:
        """Bytes ``pid`` may still have read at ``now`` (negative: in debt)."""
        bucket = self._buckets.get(pid)
        if bucket is None:
            return float(self.burst)
        return min(float(self.burst), bucket.tokens + (now - bucket.at) * self.per_s)

    def owes(self, pid: int | None) -> bool:
        """Whether ``pid`` was in debt after its last read (else it may read at once, whenever:
        its budget only grows with time)."""
        bucket = self._buckets.get(pid)
        return bucket is not None and bucket.tokens < 0

    def delay(self, pid: int | None, now: float) -> float:
        """Seconds before ``pid``'s connections may read again (0: at once)."""
        tokens = self.tokens(pid, now)
        return 0.0 if tokens >= 0 else -tokens / self.per_s

    def charge(self, pid: int | None, nbytes: int, now: float) -> None:
        """Record that ``nbytes`` were read from a connection of ``pid`` at ``now``."""
        tokens = self.tokens(pid, now) - nbytes
        if tokens >= self.burst:
            self._buckets.pop(pid, None)
            return
        bucket = self._buckets.get(pid)
        if bucket is None:
            self._make_room(now)
            self._buckets[pid] = _Bucket(tokens, now)
        else:
            bucket.tokens, bucket.at = tokens, now

    def _make_room(self, now: float) -> None:
        if len(self._buckets) < self.max_peers:
            return
        for pid in [pid for pid in self._buckets if self.tokens(pid, now) >= self.burst]:
            del self._buckets[pid]
        if len(self._buckets) >= self.max_peers:
            fullest = max(self._buckets, key=lambda pid: self.tokens(pid, now))
            del self._buckets[fullest]


__all__ = ["UNKNOWN_PID", "ReadBudget", "SheddingPolicy", "Slot"]


@dataclass(slots=True)
class SharedCap:
    """Connections open across the endpoints that share this cap, counted by the endpoints.

    Full, an endpoint treats a newcomer as at its own capacity: one of its connections gives way
    by :class:`SheddingPolicy`, or the newcomer is refused (counted in ``refused``)."""

    cap: int
    open: int = 0
    refused: int = 0

    @property
    def full(self) -> bool:
        """No connection may be added without one giving way."""
        return self.open >= self.cap
