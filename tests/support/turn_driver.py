"""A test host for the turn tracker: ledger-style calls translated into the tracker's events.

Tests of the gate and of the goal view need turns whose opening says exactly this or that. They
describe them with the calls of the old provenance ledger (``start``, ``observe``,
``close_opening``, ``cancel``, ``end``), and :class:`TurnDriver` reports each one to a real
:class:`~pi_cross_session._internal.security.turns.TurnTracker` the way a host adapter would:

* ``start(peer=True)`` is a turn the host knows a peer started (``TurnStarted(PEER)``);
* ``observe(PEER, claim=c)`` is our message entering the conversation
  (:class:`OurMessageStarted`): the tracker asks its observer what was submitted as that message,
  and this driver's observer answers ``c`` (admission answers from its rows in the real thing);
  without a claim it is a peer message we cannot place (``TurnOpened(PEER)``);
* any other ``observe`` is ``TurnOpened(provenance, handles)``; handles named with a peer message
  come as an extra ``TurnOpened(UNKNOWN, handles)``, which adds them and changes nothing else;
* ``close_opening`` is :class:`ModelReplied`, ``cancel`` :class:`TurnAborted`, ``end`` a clean
  :class:`TurnEnded`.

``observe`` returns whether the tracker's view of the turn's provenance changed.
"""

from __future__ import annotations

from collections.abc import Iterable

from pi_cross_session._internal.security.goals import TaskHandle
from pi_cross_session._internal.security.provenance import (
    PeerClaim,
    Provenance,
    TurnAuthority,
    TurnFacts,
)
from pi_cross_session._internal.security.turns import (
    ModelReplied,
    OurMessageStarted,
    Settle,
    TurnAborted,
    TurnEnded,
    TurnEnding,
    TurnOpened,
    TurnStarted,
    TurnTracker,
)


class ClaimBook:
    """A tracker observer standing in for admission: the claims of messages "we submitted"."""

    def __init__(self) -> None:
        self.claims: dict[tuple[str, str], PeerClaim] = {}
        self.aborts = 0
        self.settles: list[Settle] = []

    def submitted(self, claim: PeerClaim) -> OurMessageStarted:
        """Record ``claim`` as a message we submitted; the event of it entering the turn."""
        message_id = f"m-{len(self.claims) + 1}"
        self.claims[(claim.sender[0], message_id)] = claim
        return OurMessageStarted(message_id, claim.sender[0])

    def message_entered(self, message_id: str, sender_instance_id: str) -> PeerClaim | None:
        return self.claims.get((sender_instance_id, message_id))

    def turn_aborted(self) -> None:
        self.aborts += 1

    def turn_settled(self, settle: Settle) -> None:
        self.settles.append(settle)


class TurnDriver:
    """Ledger-style calls, reported to a real tracker (see the module docstring)."""

    def __init__(self) -> None:
        self.tracker = TurnTracker()
        self.book = ClaimBook()
        self.tracker.observe(self.book)

    def start(self, *, peer: bool = False) -> None:
        self.tracker.handle(TurnStarted(Provenance.PEER if peer else Provenance.UNKNOWN))

    def observe(
        self,
        provenance: Provenance,
        *,
        claim: PeerClaim | None = None,
        handles: Iterable[TaskHandle] = (),
    ) -> bool:
        before = self.tracker.authority.provenance
        named = tuple(handles)
        if provenance is Provenance.PEER:
            event = TurnOpened(Provenance.PEER) if claim is None else self.book.submitted(claim)
            self.tracker.handle(event)
            if named:
                self.tracker.handle(TurnOpened(Provenance.UNKNOWN, named))
        else:
            self.tracker.handle(TurnOpened(provenance, named))
        return self.tracker.authority.provenance is not before

    def close_opening(self) -> None:
        self.tracker.handle(ModelReplied())

    def cancel(self) -> None:
        self.tracker.handle(TurnAborted())

    def end(self) -> None:
        self.tracker.handle(TurnEnded(TurnEnding.STOP))

    @property
    def running(self) -> bool:
        return self.tracker.on_record

    @property
    def authority(self) -> TurnAuthority:
        return self.tracker.authority

    def authority_for_call(self, *, own_loop: bool) -> TurnAuthority:
        return self.tracker.authority_for_call(own_loop=own_loop)

    @property
    def facts(self) -> TurnFacts | None:
        return self.tracker.facts
