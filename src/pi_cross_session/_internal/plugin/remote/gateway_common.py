"""What the gateway's parts share: its logger, its counters, what a proxy carries across the hop,
the warnings it says once per machine whose envelopes it refuses, and the collaborators both its
sides are made with (:class:`GatewayParts`).

The gateway (:mod:`.gateway`) wires its outbound side (:mod:`.outbound`) and its inbound side
(:mod:`.inbound`) together; both take what they share from here, so neither imports the other's
module nor the gateway's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

import anyio

from pi_cross_session._internal.plugin.remote.link import Link
from pi_cross_session._internal.plugin.remote.said import SaidOnce
from pi_cross_session._internal.plugin.render import remote_plane
from pi_cross_session._internal.protocol.capabilities import CANCEL_SAFE_QUEUE, DELIVERY_RECEIPTS
from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.remote.settings import OLDER_CHECK_EVERY_S
from pi_cross_session._internal.security.remote.trust import Cause, Rejected, Verified, Verifier

#: The logger of every part of the gateway. One name, not one per module: the status snapshot
#: says which module a warning came from by its logger's last part, and what the gateway says
#: is said by ``gateway`` whichever of its parts says it.
GATEWAY_LOGGER: Final = "pi_cross_session._internal.plugin.remote.gateway"

logger = logging.getLogger(GATEWAY_LOGGER)

#: What a proxy may advertise of a remote session's capabilities: never goal scope (goal grants
#: stay local, docs/remote.md), nothing we do not carry.
CARRIED_CAPABILITIES = (CANCEL_SAFE_QUEUE, DELIVERY_RECEIPTS)


def carried(capabilities: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """The capabilities that survive the hop, in our order."""
    return tuple(c for c in CARRIED_CAPABILITIES if c in capabilities)


@dataclass(slots=True)
class GatewayStatistics:
    """Counters since start, for the status snapshot and tests."""

    forwarded: dict[str, int] = field(default_factory=dict)
    delivered: dict[str, int] = field(default_factory=dict)
    #: Remote sessions left without a proxy because their machine had its share of the cap.
    proxies_refused: int = 0
    proxies_evicted: int = 0
    proxies_opened: int = 0
    proxies_closed: int = 0
    senders_made: int = 0

    def count(self, table: dict[str, int], key: str) -> None:
        table[key] = table.get(key, 0) + 1


class RefusalWarnings:
    """The warnings a gateway says once per machine about that machine's envelopes: refused for
    their time, signed by a gateway of an older version, or not listened to at all."""

    def __init__(self, verifier: Verifier, wall_ms: Callable[[], int]) -> None:
        self._verifier = verifier
        self._wall_ms = wall_ms
        self._said = SaidOnce()
        #: When a false MAC of each machine was last looked at for an older version's signature.
        self._older_checked: dict[str, float] = {}

    def heard(self, machine: str) -> None:
        """``machine``'s reply verified: anything of it is said again the next time."""
        self._said.clear(machine)

    def forget(self, machine: str) -> None:
        """``machine`` is no longer trusted."""
        self._older_checked.pop(machine, None)

    def not_listening(self, machine: str) -> None:
        """A send to ``machine`` found nobody serving it from us."""
        # Said here too: the person who sees the gateway's output may not be the sender.
        if self._said.first("not_listening", machine):
            meaning = remote_plane.remote_refusal(Code.NOT_LISTENING, machine)
            fix = remote_plane.remote_next(Code.NOT_LISTENING, machine)
            logger.warning("a send to %s was not delivered: %s; %s", machine, meaning, fix)

    def why_refused(
        self, verdict: Verified | Rejected, machine: str, what: str, payload: bytes
    ) -> None:
        """Say once per machine that its envelopes are refused for their time (clock skew), or
        because it runs a version that signs what this one MACs."""
        if not isinstance(verdict, Rejected):
            return
        if verdict.cause is Cause.BAD_SIGNATURE:
            # Looked at once a minute per machine at most: junk under its name must not cost a
            # signature check each, nor hide an older gateway for good by coming first.
            now = anyio.current_time()
            if now - self._older_checked.get(machine, -OLDER_CHECK_EVERY_S) < OLDER_CHECK_EVERY_S:
                return
            self._older_checked[machine] = now
            older = self._verifier.signed_as_before(payload, machine)
            if older and self._said.first("older", machine):
                logger.warning("%s", remote_plane.older_gateway(machine, what))
            return
        if verdict.cause is not Cause.CLOCK:
            return
        if verdict.envelope is not None and self._said.first("clock", machine):
            skew_ms = self._wall_ms() - verdict.envelope.at
            logger.warning("%s", remote_plane.clock_skew(machine, skew_ms, what))


@dataclass(frozen=True, slots=True)
class GatewayParts:
    """What the gateway makes once and hands both its sides (:class:`~.outbound.Outbound` and
    :class:`~.inbound.Inbound`): the same objects, so that both count into one set of figures,
    say each warning once, and judge, MAC and time envelopes alike."""

    locations: Locations
    #: This machine's name, and the deployment's account.
    machine: str
    account: str
    link: Link
    verifier: Verifier
    warnings: RefusalWarnings
    stats: GatewayStatistics
    #: The wall clock, in milliseconds (envelopes carry it).
    wall_ms: Callable[[], int]
    #: The gateway's process id: the one its proxies answer with, and how the inbound side tells
    #: the gateway's own registrations from real sessions'.
    pid: int
    #: ``seal(machine, data)`` MACs ``data`` for a trusted ``machine`` (``None``: no longer
    #: trusted, or a key that cannot pair).
    seal: Callable[[str, bytes], bytes | None]
