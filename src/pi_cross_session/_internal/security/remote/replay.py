"""Replay protection: the nonces of envelopes still inside the time window, per origin machine.

An envelope is valid from ``max_age_ms`` before its receiver's now to ``max_ahead_ms`` after it
(the time check comes first, in :mod:`~pi_cross_session._internal.security.remote.trust`). So a
nonce needs remembering only until its envelope's ``at`` has left the window — then time alone
refuses it — and the table never forgets one early: an origin whose table is full is refused until
entries age out (:attr:`Seen.FULL`), so no flood can push a nonce out and replay it.

**Compact.** A nonce is 32 hex, 16 bytes. Each is kept as those bytes and its forgetting time
(8 bytes), packed end to end in one of ``partitions`` byte strings per origin chosen by its first
byte, in arrival order. A look-up searches one partition; forgetting drops entries from a
partition's front while they are due. Arrival order is nearly but not exactly forgetting order
(an envelope dated ahead is kept longer), so an entry behind a later one may be kept a few
seconds longer than it needs: never shorter, which is what matters. Tens of thousands of nonces
in the window cost well under a MiB, not the several MiB they cost as Python strings in a dict and
a heap, so a gateway's memory does not climb with the rate of verified envelopes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from pi_cross_session._internal.protocol.remote.settings import (
    ENVELOPE_MAX_AGE_S,
    MAX_REMOTE_MACHINES,
    REMOTE_NONCE_PARTITIONS,
    REMOTE_NONCES_PER_MACHINE,
)

#: A nonce's size once decoded from its 32 hex digits …
NONCE_BYTES = 16
#: … and an entry's: the nonce, then its forgetting time (ms, big-endian, unsigned).
_ENTRY = NONCE_BYTES + 8


class Seen(Enum):
    """What the table says about a nonce."""

    NEW = "new"
    REPLAY = "replay"
    FULL = "full"


@dataclass(slots=True)
class _Origin:
    #: partition -> its entries, end to end, in arrival order
    parts: dict[int, bytearray] = field(default_factory=dict)
    count: int = 0


def _holds(packed: bytearray, nonce: bytes) -> bool:
    # A match counts only at an entry's start: bytes straddling two entries are no nonce.
    at = packed.find(nonce)
    while at >= 0:
        if at % _ENTRY == 0:
            return True
        at = packed.find(nonce, at + 1)
    return False


def _forget_front(packed: bytearray, now_ms: int) -> int:
    """Drop the due entries at the front of ``packed``; how many went."""
    due = 0
    end = len(packed)
    while due * _ENTRY < end:
        start = due * _ENTRY + NONCE_BYTES
        if int.from_bytes(packed[start : start + 8]) >= now_ms:
            break
        due += 1
    if due:
        del packed[: due * _ENTRY]
    return due


class NonceWindow:
    """Nonces seen per origin machine, each kept while its envelope could still be accepted."""

    def __init__(
        self,
        *,
        per_machine: int = REMOTE_NONCES_PER_MACHINE,
        max_age_ms: int = int(ENVELOPE_MAX_AGE_S * 1000),
        max_machines: int = MAX_REMOTE_MACHINES,
        partitions: int = REMOTE_NONCE_PARTITIONS,
    ) -> None:
        if per_machine < 1 or max_machines < 1 or not 1 <= partitions <= 256:
            raise ValueError("the bounds must be positive (and at most 256 partitions)")
        self._per_machine = per_machine
        self._max_age_ms = max_age_ms
        self._max_machines = max_machines
        self._partitions = partitions
        self._origins: dict[str, _Origin] = {}

    def size(self, origin: str) -> int:
        """Nonces held for ``origin`` (including ones due to be forgotten at the next call)."""
        held = self._origins.get(origin)
        return 0 if held is None else held.count

    def held_bytes(self) -> int:
        """The bytes the packed entries take, every origin together."""
        return sum(len(p) for held in self._origins.values() for p in held.parts.values())

    def admit(self, origin: str, nonce: str, at_ms: int, now_ms: int) -> Seen:
        """Record ``nonce`` (32 hex) from ``origin`` signed at ``at_ms`` (already inside the
        window).

        :attr:`Seen.REPLAY` when it was seen and is still remembered, :attr:`Seen.FULL` when the
        origin's table is full of nonces that may not be forgotten yet; :attr:`Seen.NEW` records it.
        """
        packed = bytes.fromhex(nonce)
        if len(packed) != NONCE_BYTES:
            raise ValueError("a nonce is 32 hex digits")
        held = self._origins.get(origin)
        if held is None:
            if len(self._origins) >= self._max_machines:
                self._drop_idle_origins(now_ms)
                if len(self._origins) >= self._max_machines:
                    return Seen.FULL
            held = self._origins[origin] = _Origin()
        key = packed[0] % self._partitions
        part = held.parts.get(key)
        if part is None:
            part = held.parts[key] = bytearray()
        held.count -= _forget_front(part, now_ms)
        if _holds(part, packed):
            return Seen.REPLAY
        if held.count >= self._per_machine:
            self._forget_expired(held, now_ms)  # what other partitions hold may be due too
            if held.count >= self._per_machine:
                return Seen.FULL
        # It could be accepted until its ``at`` is max_age old on our clock; the future side of
        # the window only makes ``at`` later, so this covers it.
        until = max(at_ms, now_ms) + self._max_age_ms
        part += packed
        part += until.to_bytes(8)
        held.count += 1
        return Seen.NEW

    def _forget_expired(self, held: _Origin, now_ms: int) -> None:
        for key in list(held.parts):
            part = held.parts[key]
            held.count -= _forget_front(part, now_ms)
            if not part:
                del held.parts[key]

    def _drop_idle_origins(self, now_ms: int) -> None:
        for origin in list(self._origins):
            held = self._origins[origin]
            self._forget_expired(held, now_ms)
            if not held.count:
                del self._origins[origin]
