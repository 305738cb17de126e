"""Local identities for remote sessions, and what one origin machine may cost (docs/remote.md).

**Derived instance ids.** A remote session ``(machine, instanceId)`` is known locally under
``HMAC-SHA256(secret, machine ‖ instanceId)`` cut to 32 hex — as a proxy (when it is published) and
as a sender identity (when it sends here): the same id, so a reply to a proxy's name goes back to
the session that wrote. The secret is new for each gateway incarnation, so a restarted gateway is a
new incarnation of every identity, as a reloaded session is; and a remote machine can neither
choose nor collide with a local instance id.

**Sender identities per machine** (:class:`SenderTable`): at most ``per_machine``; a new one takes
the place of one idle for ``idle_s`` (by then the receiver's bucket for it is full again and its
dedup windows are over, so the swap grants its machine nothing), else it is refused.

**Machine flow** (:class:`MachineFlow`): a token bucket per origin machine over every envelope it
sends, and a cap on its deliveries in flight.

**Session doors** (:class:`SessionDoors`): what every machine together may ask of one local
session at once — a few deliveries open, a few more waiting for a slot, the rest refused at once —
so that the gateway never knocks on a session's door more often than the door admits.
"""

from __future__ import annotations

import hashlib
import hmac
from collections import OrderedDict
from dataclasses import dataclass
from enum import Enum

from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.remote.envelope import is_machine_name
from pi_cross_session._internal.protocol.remote.settings import (
    MAX_REMOTE_MACHINES,
    REMOTE_DELIVERIES_PER_SESSION,
    REMOTE_IN_FLIGHT_PER_MACHINE,
    REMOTE_MACHINE_RATE_CAPACITY,
    REMOTE_MACHINE_REFILL_PER_S,
    REMOTE_SENDER_IDLE_S,
    REMOTE_SENDERS_PER_MACHINE,
    REMOTE_WAITING_PER_SESSION,
)
from pi_cross_session._internal.security.limits import RateLimiter


def derive_instance_id(secret: bytes, machine: str, remote_instance_id: str) -> str:
    """The local instance id of remote session ``remote_instance_id`` on ``machine``."""
    if not is_machine_name(machine):
        raise ValueError("not a machine name")
    mac = hmac.new(secret, f"{machine}\n{remote_instance_id}".encode(), hashlib.sha256)
    return mac.hexdigest()[:32]


class Claim(Enum):
    """What :meth:`SenderTable.claim` decided."""

    KNOWN = "known"
    NEW = "new"
    FULL = "full"


@dataclass(frozen=True, slots=True)
class Claimed:
    """The decision, and the identity that gave way for a new one (its files are to go)."""

    claim: Claim
    evicted: str | None = None


class SenderTable:
    """Which remote senders of each machine hold a local identity, least recently used first."""

    def __init__(
        self,
        *,
        per_machine: int = REMOTE_SENDERS_PER_MACHINE,
        idle_s: float = REMOTE_SENDER_IDLE_S,
    ) -> None:
        if per_machine < 1:
            raise ValueError("per_machine must be positive")
        self._per_machine = per_machine
        self._idle_s = idle_s
        #: machine -> local instance id -> last use (the caller's clock, seconds)
        self._machines: dict[str, OrderedDict[str, float]] = {}

    def count(self, machine: str) -> int:
        held = self._machines.get(machine)
        return 0 if held is None else len(held)

    def holds(self, machine: str, local_id: str) -> bool:
        held = self._machines.get(machine)
        return held is not None and local_id in held

    def claim(self, machine: str, local_id: str, now: float) -> Claimed:
        """Use (or make) ``local_id`` for a sender of ``machine`` at ``now``."""
        held = self._machines.setdefault(machine, OrderedDict())
        if local_id in held:
            held[local_id] = now
            held.move_to_end(local_id)
            return Claimed(Claim.KNOWN)
        evicted = None
        if len(held) >= self._per_machine:
            oldest, used = next(iter(held.items()))
            if now - used < self._idle_s:
                return Claimed(Claim.FULL)
            del held[oldest]
            evicted = oldest
        held[local_id] = now
        return Claimed(Claim.NEW, evicted)

    def release(self, machine: str, local_id: str) -> None:
        """Forget ``local_id`` (its files were removed)."""
        held = self._machines.get(machine)
        if held is not None:
            held.pop(local_id, None)


class MachineFlow:
    """Envelopes per origin machine (a token bucket) and its deliveries in flight."""

    def __init__(
        self,
        *,
        capacity: int = REMOTE_MACHINE_RATE_CAPACITY,
        refill_per_s: float = REMOTE_MACHINE_REFILL_PER_S,
        in_flight: int = REMOTE_IN_FLIGHT_PER_MACHINE,
        max_machines: int = MAX_REMOTE_MACHINES,
    ) -> None:
        self._bucket = RateLimiter(
            capacity=capacity, refill_per_s=refill_per_s, max_senders=max_machines
        )
        self._max_in_flight = in_flight
        self._in_flight: dict[str, int] = {}
        self.refused = 0

    def in_flight(self, machine: str) -> int:
        return self._in_flight.get(machine, 0)

    def start(self, machine: str, now: float) -> Code | None:
        """Take a token and a slot for one request of ``machine``; the refusal code if none."""
        if not self._bucket.allows(machine, now) or self.in_flight(machine) >= self._max_in_flight:
            self.refused += 1
            return Code.RATE_LIMITED
        self._bucket.commit(machine, now)
        self._in_flight[machine] = self.in_flight(machine) + 1
        return None

    def finish(self, machine: str) -> None:
        """The request of ``machine`` has been answered."""
        left = self.in_flight(machine) - 1
        if left > 0:
            self._in_flight[machine] = left
        else:
            self._in_flight.pop(machine, None)


class SessionDoors:
    """Deliveries to each local session: ``open`` of them at once, ``waiting`` more for a slot.

    The gateway asks :meth:`arrive` before it connects; ``False`` means refuse (``rate_limited``:
    nothing reached the session). An arrival that was admitted holds its place until
    :meth:`leave`, whether it waited or went straight through; the gateway itself makes the wait
    (a semaphore of ``open`` slots), this class only decides how many may stand in line.
    """

    def __init__(
        self,
        *,
        open_at_once: int = REMOTE_DELIVERIES_PER_SESSION,
        waiting: int = REMOTE_WAITING_PER_SESSION,
    ) -> None:
        if open_at_once < 1 or waiting < 0:
            raise ValueError("a session needs at least one open slot")
        self.open_at_once = open_at_once
        self._room = open_at_once + waiting
        #: session instance id -> deliveries admitted (open or waiting); none kept at zero
        self._admitted: dict[str, int] = {}
        self.refused = 0

    def admitted(self, session: str) -> int:
        return self._admitted.get(session, 0)

    def arrive(self, session: str) -> bool:
        """Take a place for one delivery to ``session``; False when the line is full."""
        held = self.admitted(session)
        if held >= self._room:
            self.refused += 1
            return False
        self._admitted[session] = held + 1
        return True

    def leave(self, session: str) -> bool:
        """Give the place back; True when ``session`` has nothing admitted any more."""
        left = self.admitted(session) - 1
        if left > 0:
            self._admitted[session] = left
            return False
        self._admitted.pop(session, None)
        return True
