"""Replay protection: the nonces of envelopes still inside the time window, per origin machine.

An envelope is valid from ``max_age_ms`` before its receiver's now to ``max_ahead_ms`` after it
(the time check comes first, in :mod:`~pi_cross_session.security.remote.trust`). So a nonce needs
remembering only until its envelope's ``at`` has left the window — then time alone refuses it —
and the table never forgets one early: an origin whose table is full is refused until entries age
out (:attr:`Seen.FULL`), so no flood can push a nonce out and replay it.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from enum import Enum

from pi_cross_session.protocol.limits import (
    ENVELOPE_MAX_AGE_S,
    MAX_REMOTE_MACHINES,
    REMOTE_NONCES_PER_MACHINE,
)


class Seen(Enum):
    """What the table says about a nonce."""

    NEW = "new"
    REPLAY = "replay"
    FULL = "full"


@dataclass(slots=True)
class _Origin:
    #: nonce -> the moment (ms, receiver's clock) it may be forgotten
    until: dict[str, int] = field(default_factory=dict)
    #: (until, nonce), to forget in order
    order: list[tuple[int, str]] = field(default_factory=list)


class NonceWindow:
    """Nonces seen per origin machine, each kept while its envelope could still be accepted."""

    def __init__(
        self,
        *,
        per_machine: int = REMOTE_NONCES_PER_MACHINE,
        max_age_ms: int = int(ENVELOPE_MAX_AGE_S * 1000),
        max_machines: int = MAX_REMOTE_MACHINES,
    ) -> None:
        if per_machine < 1 or max_machines < 1:
            raise ValueError("the bounds must be positive")
        self._per_machine = per_machine
        self._max_age_ms = max_age_ms
        self._max_machines = max_machines
        self._origins: dict[str, _Origin] = {}

    def size(self, origin: str) -> int:
        """Nonces held for ``origin`` (including ones due to be forgotten at the next call)."""
        held = self._origins.get(origin)
        return 0 if held is None else len(held.until)

    def admit(self, origin: str, nonce: str, at_ms: int, now_ms: int) -> Seen:
        """Record ``nonce`` from ``origin`` signed at ``at_ms`` (already inside the window).

        :attr:`Seen.REPLAY` when it was seen and is still remembered, :attr:`Seen.FULL` when the
        origin's table is full of nonces that may not be forgotten yet; :attr:`Seen.NEW` records it.
        """
        held = self._origins.get(origin)
        if held is None:
            if len(self._origins) >= self._max_machines:
                self._drop_idle_origins(now_ms)
                if len(self._origins) >= self._max_machines:
                    return Seen.FULL
            held = self._origins[origin] = _Origin()
        self._forget_expired(held, now_ms)
        if nonce in held.until:
            return Seen.REPLAY
        if len(held.until) >= self._per_machine:
            return Seen.FULL
        # It could be accepted until its ``at`` is max_age old on our clock; the future side of
        # the window only makes ``at`` later, so this covers it.
        until = max(at_ms, now_ms) + self._max_age_ms
        held.until[nonce] = until
        heapq.heappush(held.order, (until, nonce))
        return Seen.NEW

    def _forget_expired(self, held: _Origin, now_ms: int) -> None:
        while held.order and held.order[0][0] < now_ms:
            _, nonce = heapq.heappop(held.order)
            held.until.pop(nonce, None)

    def _drop_idle_origins(self, now_ms: int) -> None:
        for origin in list(self._origins):
            held = self._origins[origin]
            self._forget_expired(held, now_ms)
            if not held.until:
                del self._origins[origin]
