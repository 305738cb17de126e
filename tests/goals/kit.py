"""Shared pieces of the goal tests: real peers bound to a receiver's goal, and scoped frames.

* :func:`peer_session` runs a second real session (a headless host, its own runtime, socket and
  registration) on the receiver's :class:`~tests.support.wire_session.FakeClock`, so the
  ``sentAt`` of its messages is "now" for the receiver whatever the test did to the clock.
* :func:`send` sends from such a peer through its runtime (listing, budget, confirmations,
  exchange: the real sender path) and notes every answer the receiver gave in the receiver's
  ledger, so :func:`~tests.support.wire_session.assert_accounted` covers runtime senders too.
* :class:`GoalWireSender` is a wire sender that can put any ``goalId`` on a message frame.
* :func:`start_goal` starts a goal as the local user and binds the given peers to it.
* :func:`opening_claim` starts the turn a submitted message opens and says what the receiver's
  turn tracker learned from it (admission's record of the message, never its details).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final

from pi_cross_session._internal.plugin.hosts.headless import HeadlessHost
from pi_cross_session._internal.plugin.reports import SendReport
from pi_cross_session._internal.plugin.runtime import SessionRuntime
from pi_cross_session._internal.protocol.frames import Response
from pi_cross_session._internal.protocol.io.exchange import ExchangeConfig
from pi_cross_session._internal.security.goals import USER_TURN
from pi_cross_session._internal.security.provenance import PeerClaim, Provenance
from pi_cross_session._internal.security.turns import OurMessageStarted
from tests.support import raw_client
from tests.support.bounds import MUST_HAPPEN_S
from tests.support.raw_client import RawClient
from tests.support.socket_peers import published_sender
from tests.support.wire_session import Receiver, WireSender, headless_session

OBJECTIVE: Final = "Port the parser to the new token stream and keep every test green"
#: A well-formed goal id (a v4 UUID, like the ones goals get) that no receiver ever granted.
FORGED_GOAL: Final = "5d0c9a6e-3f6b-4c51-9f1e-2b7a8c4d6e10"


@dataclass
class Peer:
    """A second real session: a headless host and its runtime."""

    host: HeadlessHost
    runtime: SessionRuntime

    @property
    def instance_id(self) -> str:
        identity = self.runtime.identity
        assert identity is not None, "the peer is not running"
        return identity.instance_id

    @property
    def session_id(self) -> str:
        return self.runtime.host.session_id

    def budget(self) -> int:
        remaining = self.runtime.remaining_budget()
        assert remaining is not None, "the peer is not running"
        return remaining

    def confirmations(self) -> int:
        return self.runtime.goal_view().confirmations


#: Liveness probe deadline of the peers these tests start (see :func:`peer_session`).
PATIENT_PROBE_S = MUST_HAPPEN_S


@asynccontextmanager
async def peer_session(rx: Receiver, name: str, **options: Any) -> AsyncIterator[Peer]:
    """A real peer session on ``rx``'s agent dir and fake clock, serving until the block ends.

    Its listings wait as long for a liveness probe as for anything that must happen (the
    contract's 350 ms is for a quiet machine): hundreds of sends in a row on two busy cores must
    not turn a live receiver into ``not_found``; these tests are about goals, not probe deadlines.
    """
    options.setdefault("exchange", ExchangeConfig(probe_deadline_s=PATIENT_PROBE_S))
    async with headless_session(rx.locations, name, clock=rx.clock, **options) as (host, runtime):
        yield Peer(host, runtime)


async def send(
    rx: Receiver, peer: Peer, text: str, *, goal_id: str | None = None, target: str | None = None
) -> SendReport:
    """Send ``text`` from ``peer`` to ``rx`` (by its current instance id) through the peer's
    runtime; the receiver's answer, if the message frame was written, goes in ``rx.ledger``."""
    sender_id = peer.instance_id
    to = target if target is not None else rx.registration.instance_id
    report = await peer.runtime.send(to, text, goal_id=goal_id)
    if report.message_written:
        assert report.message_id is not None
        rx.ledger.note(sender_id, report.message_id, report.status, ok=report.ok)
    return report


async def start_goal(rx: Receiver, peers: Sequence[Peer] = ()) -> str:
    """Start a goal on ``rx`` as the local user and bind ``peers``; returns the goal id."""
    status = rx.runtime.goal_start(OBJECTIVE, authority=USER_TURN)
    goal_id = status.goal_id
    assert goal_id is not None
    if peers:
        bound = await rx.runtime.goal_bind(
            goal_id, [peer.instance_id for peer in peers], authority=lambda: USER_TURN
        )
        assert set(bound.peer_ids) == {peer.instance_id for peer in peers}
    return goal_id


class GoalWireSender(WireSender):
    """A :class:`WireSender` whose message frames may carry a ``goalId`` (any JSON value)."""

    async def send_goal(
        self,
        goal_id: object,
        text: str | None = None,
        *,
        message_id: str | None = None,
    ) -> Response:
        """One message frame with ``goalId``; the reply is recorded in the ledger."""
        message_id = message_id or self.fresh_id()
        frame = raw_client.message_body(
            text=text if text is not None else f"text of {message_id}",
            request_id=f"{self.registration.name}-r{self._next()}",
            message_id=message_id,
            summary="a summary",
            sent_at=self._wall_ms(),
            goalId=goal_id,
        )
        reply = await self._exchange(frame)
        self._ledger.record(self.instance_id, message_id, reply)
        return reply

    async def send_unanswerable(self, frame: dict[str, Any]) -> Response:
        """Write a hello and then ``frame``, which the endpoint refuses as a frame (so the reply
        carries no request id of ours); nothing is recorded: admission never saw it."""
        target = self._target()
        hello = raw_client.hello(
            target,
            sender=self.registration,
            request_id=f"{self.registration.name}-h{self._next()}",
            capabilities=self.capabilities,
        )
        async with RawClient.connect(target.socket_path) as client:
            await client.send(raw_client.line(hello))
            ready = await client.read_reply()
            assert (ready.ok, ready.status) == (True, "ready"), ready
            await client.send(raw_client.line(frame))
            reply = await client.read_reply()
            assert await client.read_to_eof() == b""
        return reply


def goal_sender(rx: Receiver, name: str, *, session_id: str | None = None) -> GoalWireSender:
    """A new :class:`GoalWireSender` with its own published (not served) registration."""
    return GoalWireSender(
        published_sender(rx.locations, name, session_id=session_id),
        lambda: rx.registration,
        ledger=rx.ledger,
        wall_ms=rx.clock.wall_ms,
    )


def row_state(rx: Receiver, sender_instance_id: str, message_id: str | None) -> str | None:
    """The state of one message's row in ``rx``'s current snapshot, if it has one."""
    for row in rx.snapshot().rows:
        if (row.sender_instance_id, row.message_id) == (sender_instance_id, message_id):
            return row.state
    return None


def accepted_connections(rx: Receiver) -> int:
    """Connections the receiver's current endpoint has accepted so far."""
    current = rx.runtime._current  # no public handle on the endpoint's counters
    assert current is not None, "the receiver is not running"
    return current.endpoint.statistics().accepted


def opening_claim(rx: Receiver, message_id: str, sender_instance_id: str) -> PeerClaim | None:
    """Start the peer turn ``message_id`` opens (as the host would report it) and return the claim
    the tracker recorded for it; ``None`` when it recorded none. The turn keeps running: end it
    with ``rx.turns``."""
    rx.turns.start(Provenance.PEER)
    rx.runtime.on_turn(OurMessageStarted(message_id, sender_instance_id))
    facts = rx.runtime.turns.facts
    assert facts is not None
    assert len(facts.claims) <= 1
    return next(iter(facts.claims), None)
