"""When a gateway stops listening to one trusted machine for a while (docs/remote.md, "Pausing a
machine").

On a deployment that enforces per-machine permissions, only a holder of machine M's NATS
credentials can publish on M's request subjects and record keys. A request whose MAC fails there,
or a record whose signature does, was therefore sent with M's credentials but without M's machine
key: they were stolen, or M's gateway is broken (an older version that signs instead). Refusing
each one costs a check over its bytes, and a megabyte of junk costs its TLS decryption and copying
before that; after a burst of such failures the gateway unsubscribes from M's requests and
records, so the servers stop delivering them at all, and subscribes again when the pause ends
(reading M's current records then). M's honest senders meanwhile get the answer every sender gets
from a machine not listening (``not_listening``), and M's sessions stay listed as they were; each
next pause, with no good request from M between, lasts twice as long, up to a bound.

On a deployment without permissions anyone may publish under M's name, so a pause would let a
stranger silence M: :func:`counts_towards_a_pause` counts nothing there.

Pure: the caller passes the time. State per trusted machine: at most ``after`` failure times, the
pause's end and its length; :meth:`forget` drops a machine no longer trusted.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Final

from pi_cross_session._internal.protocol.remote.settings import (
    MACHINE_PAUSE_AFTER_FAILURES,
    MACHINE_PAUSE_FIRST_S,
    MACHINE_PAUSE_LONGEST_S,
    MACHINE_PAUSE_WITHIN_S,
)
from pi_cross_session._internal.security.remote.trust import Cause

#: What counts towards a pause: a payload that is not the machine's MAC over a bounded envelope
#: (false, or no room for one, or too large). Not a stale clock or a replay: those are the
#: machine's own envelopes.
PAUSING_CAUSES: Final = frozenset({Cause.BAD_SIGNATURE, Cause.MALFORMED, Cause.TOO_LARGE})


def counts_towards_a_pause(cause: Cause, *, vouched: bool | None) -> bool:
    """Whether a payload refused for ``cause`` counts against its machine: only where the
    deployment's permissions vouch that the machine sent it (``vouched``; ``None``: not known,
    so no), and only when it is not that machine's MAC or signature over a bounded envelope."""
    return vouched is True and cause in PAUSING_CAUSES


@dataclass(slots=True)
class _Machine:
    failures: deque[float]
    #: The length of the last pause (0: none since the machine was last heard as it should be).
    last_pause_s: float = 0.0
    #: When the current pause ends (0: not paused).
    until: float = 0.0


@dataclass(slots=True)
class MachinePauses:
    """Failures counted per machine, and the pauses they earn."""

    after: int = MACHINE_PAUSE_AFTER_FAILURES
    within_s: float = MACHINE_PAUSE_WITHIN_S
    first_s: float = MACHINE_PAUSE_FIRST_S
    longest_s: float = MACHINE_PAUSE_LONGEST_S
    _machines: dict[str, _Machine] = field(default_factory=dict)

    def failed(self, machine: str, now: float) -> float | None:
        """A request or record from ``machine`` failed its MAC or signature at ``now``: the
        length of the pause this starts, or ``None`` (not yet; or already paused, its
        subscriptions already going)."""
        state = self._machines.get(machine)
        if state is None:
            state = self._machines[machine] = _Machine(deque(maxlen=self.after))
        if now < state.until:
            return None
        state.failures.append(now)
        if len(state.failures) < self.after or now - state.failures[0] > self.within_s:
            return None
        state.failures.clear()
        pause = min(self.longest_s, state.last_pause_s * 2 or self.first_s)
        state.last_pause_s = pause
        state.until = now + pause
        return pause

    def heard(self, machine: str) -> None:
        """A request or record from ``machine`` passed every check: its next pause is the first
        again."""
        # Only the length: failures still count within their window, so that good traffic
        # between junk never lets the junk go on.
        state = self._machines.get(machine)
        if state is not None and not state.until:
            state.last_pause_s = 0.0

    def ended(self, machine: str) -> None:
        """``machine``'s pause is over (it is listened to again)."""
        state = self._machines.get(machine)
        if state is not None:
            state.until = 0.0

    def paused_until(self, machine: str, now: float) -> float | None:
        """When ``machine``'s pause ends, if it is paused at ``now``."""
        state = self._machines.get(machine)
        return state.until if state is not None and now < state.until else None

    def forget(self, machine: str) -> None:
        """``machine`` is no longer trusted, or trusted under a new key: it starts afresh."""
        self._machines.pop(machine, None)
