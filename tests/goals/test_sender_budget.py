"""Pinned cases 13, 14 and 15 and the sender's side of goal scope (goal-scoped-v1 §2.2,
goal-scoped-v1 §2.4).

* A scoped send is charged like any other and refunded only on a ``submitted``/``queued``
  receipt, which also confirms the (receiver instance, goal) pair; any other ending keeps the
  charge and forgets the pair. At budget 0 a confirmed pair may still send, uncharged, one
  attempt at a time.
* Forged goal ids therefore drain the *sender's* budget, and the receiver's rate tokens, never
  the receiver's lifetime budget.
* Scope is never dropped: a malformed goal id or a scoped bridge envelope is ``invalid_goal``
  before any connection, and a receiver that does not advertise ``goal-scoped-peer-v1`` ends a
  scoped send as ``unsupported`` before the message frame is written.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from pi_cross_session._internal.plugin.reports import SendReport
from pi_cross_session._internal.protocol.bridge import BRIDGE_PREFIX
from pi_cross_session._internal.protocol.capabilities import CANCEL_SAFE_QUEUE, GOAL_SCOPED_PEER
from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.io.endpoint import EndpointConfig
from pi_cross_session._internal.protocol.io.exchange import ExchangeConfig
from pi_cross_session._internal.protocol.limits import (
    RATE_CAPACITY,
    RATE_REFILL_PER_S,
)
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import Registration
from pi_cross_session._internal.security.goals import USER_TURN, GoalConfirmations, Reservation
from pi_cross_session._internal.security.goals.bounds import MAX_GOAL_CONFIRMATIONS
from tests.goals.kit import (
    FORGED_GOAL,
    accepted_connections,
    goal_sender,
    peer_session,
    send,
    start_goal,
)
from tests.support.fake_receiver import FakeReceiver, Reply, Step, fake_receiver, ready, receipt
from tests.support.socket_peers import make_registration, running_peer
from tests.support.wire_session import assert_accounted, running_receiver

pytestmark = pytest.mark.anyio

#: Fake seconds that refill a whole rate bucket (30 tokens at 0.5/s).
FULL_BUCKET_S = RATE_CAPACITY / RATE_REFILL_PER_S


async def test_case13_forged_goal_ids_drain_the_senders_budget_not_the_receivers(
    locations: Locations,
) -> None:
    async with running_receiver(locations) as rx, peer_session(rx, "forger") as forger:
        await start_goal(rx)  # a goal exists, but the forger is not bound to it
        statuses = []
        for n in range(256):
            # The receiver spends one of the forger's rate tokens on every refusal (30-token
            # bucket, 0.5/s, per sender instance): without this refill attempt 31 would be
            # answered ``rate_limited`` (case 15). A full bucket every 30 attempts keeps every
            # answer ``goal_not_authorized``, which is the sequence this case pins.
            if n and n % RATE_CAPACITY == 0:
                rx.clock.advance(FULL_BUCKET_S)
            report = await send(rx, forger, f"forged attempt {n}", goal_id=FORGED_GOAL)
            assert report.message_written
            statuses.append(report.status)
            assert forger.budget() == 256 - (n + 1)  # each attempt costs one unit, unrefunded
        assert statuses == ["goal_not_authorized"] * 256
        assert forger.confirmations() == 0

        before = accepted_connections(rx)
        last = await send(rx, forger, "attempt 257", goal_id=FORGED_GOAL)
        assert (last.ok, last.status, last.message_written) == (False, "budget_exhausted", False)
        # Refused before any connection, not even the listing's liveness probe
        # (goal-scoped-v1 §2.4).
        assert accepted_connections(rx) - before == 0
        assert rx.host.calls == []
        snapshot = assert_accounted(rx)
        assert (snapshot.admitted, snapshot.rows, snapshot.remaining_budget) == (0, (), 256)
        assert snapshot.refusals == {"goal_not_authorized": 256}


async def test_case14_a_confirmed_goal_keeps_sending_at_sender_budget_zero(
    locations: Locations,
) -> None:
    async with (
        running_receiver(locations) as rx,
        peer_session(rx, "helper", budget=3) as peer,
    ):
        goal_id = await start_goal(rx, [peer])
        first = await send(rx, peer, "confirm the pair", goal_id=goal_id)
        assert first.status == "submitted"
        rx.turns.settle_submissions()
        assert (peer.budget(), peer.confirmations()) == (3, 1)  # charged, then refunded

        for n in range(3):  # unscoped sends are charged for good
            assert (await send(rx, peer, f"unscoped {n}")).status == "submitted"
            rx.turns.settle_submissions()
        assert peer.budget() == 0
        assert (await send(rx, peer, "one unscoped too many")).status == "budget_exhausted"

        for n in range(5):  # the confirmed pair sends on, free, one after another
            report = await send(rx, peer, f"free scoped {n}", goal_id=goal_id)
            assert report.status == "submitted"
            rx.turns.settle_submissions()
            assert (peer.budget(), peer.confirmations()) == (0, 1)

        rx.runtime.goal_complete(goal_id, authority=USER_TURN)
        refused = await send(rx, peer, "after completion", goal_id=goal_id)
        assert (refused.status, refused.message_written) == ("goal_not_authorized", True)
        assert peer.confirmations() == 0  # the refusal removed the confirmation
        local = await send(rx, peer, "and again", goal_id=goal_id)
        assert (local.status, local.message_written) == ("budget_exhausted", False)
        assert len(rx.host.calls) == 1 + 3 + 5
        snapshot = assert_accounted(rx, all_final=True)
        assert snapshot.remaining_budget == 256 - 3


@asynccontextmanager
async def goal_capable_fake(
    locations: Locations, hold_scoped_after: int
) -> AsyncIterator[FakeReceiver]:
    """A scripted receiver, published like a live session, advertising goal scope. It answers
    ``submitted`` to every message except scoped ones after the first ``hold_scoped_after``,
    which it never answers (the sender waits until its deadline: receipt unknown)."""
    registration = make_registration(locations, "goal-host")
    scoped_seen = 0

    def answer(frame: Any) -> bytes:
        nonlocal scoped_seen
        if isinstance(frame, dict) and frame.get("goalId") is not None:
            scoped_seen += 1
            if scoped_seen > hold_scoped_after:
                return b""
        return receipt(registration).make(frame)

    script: Sequence[Step] = [
        ready(registration, capabilities=(CANCEL_SAFE_QUEUE, GOAL_SCOPED_PEER)),
        Reply(answer),
    ]
    async with fake_receiver(locations, script, registration=registration, published=True) as fake:
        yield fake


async def test_case14_one_free_attempt_in_flight_and_an_unknown_receipt_ends_the_confirmation(
    locations: Locations,
) -> None:
    exchange = ExchangeConfig(send_deadline_s=0.5)
    async with (
        running_receiver(locations, budget=1, exchange=exchange) as sender,
        goal_capable_fake(locations, hold_scoped_after=1) as fake,
    ):
        target: Registration = fake.registration
        runtime = sender.runtime
        assert (await runtime.send(target.instance_id, "confirm", goal_id=FORGED_GOAL)).ok
        assert runtime.remaining_budget() == 1  # refunded
        assert (await runtime.send(target.instance_id, "spend the last unit")).ok
        assert (runtime.remaining_budget(), runtime.goal_view().confirmations) == (0, 1)

        reports: list[SendReport] = []

        async def held() -> None:
            reports.append(await runtime.send(target.instance_id, "held", goal_id=FORGED_GOAL))

        async with anyio.create_task_group() as group:
            group.start_soon(held)
            await fake.wait_for(lambda: fake.count("message") == 3)
            # The free attempt took the confirmation with it: no second one meanwhile.
            assert runtime.goal_view().confirmations == 0
            second = await runtime.send(target.instance_id, "concurrent", goal_id=FORGED_GOAL)
            assert (second.status, second.message_written) == ("budget_exhausted", False)
            assert fake.count("message") == 3
        (report,) = reports
        assert (report.status, report.state, report.message_written) == (
            "timeout",
            "receipt_unknown",
            True,
        )
        # An unknown receipt does not give the confirmation back.
        assert (runtime.remaining_budget(), runtime.goal_view().confirmations) == (0, 0)
        after = await runtime.send(target.instance_id, "after", goal_id=FORGED_GOAL)
        assert (after.status, after.message_written) == ("budget_exhausted", False)
        assert fake.count("message") == 3
        assert_accounted(sender)  # the sending session admitted nothing itself


async def test_case15_forged_goal_frames_spend_rate_tokens_then_rate_limited(
    locations: Locations,
) -> None:
    async with running_receiver(locations) as rx:
        await start_goal(rx)
        forger = goal_sender(rx, "forger")
        replies = [await forger.send_goal(FORGED_GOAL, f"forged {n}") for n in range(31)]
        assert [r.status for r in replies] == ["goal_not_authorized"] * 30 + ["rate_limited"]
        assert replies[-1].retryable
        # The bucket is the sender's, whatever the message: an unscoped one is limited too.
        assert (await forger.send("an ordinary message")).status == "rate_limited"
        # Two seconds refill one token: one more refusal, then limited again.
        rx.clock.advance(1 / RATE_REFILL_PER_S)
        assert (await forger.send_goal(FORGED_GOAL)).status == "goal_not_authorized"
        assert (await forger.send_goal(FORGED_GOAL)).status == "rate_limited"
        # A forged id repeated with the same text is a duplicate (its dedup entry was committed).
        rx.clock.advance(1 / RATE_REFILL_PER_S)
        assert (await forger.send_goal(FORGED_GOAL, "forged 0")).status == "duplicate"
        assert rx.host.calls == []
        snapshot = assert_accounted(rx)
        assert (snapshot.admitted, snapshot.rows, snapshot.remaining_budget) == (0, (), 256)
        assert snapshot.refusals == {"goal_not_authorized": 31, "rate_limited": 3, "duplicate": 1}


async def test_a_receiver_without_goal_scope_gets_unsupported_before_the_message_frame(
    locations: Locations,
) -> None:
    older = EndpointConfig(capabilities=(CANCEL_SAFE_QUEUE,))
    async with (
        running_receiver(locations) as sender,
        running_peer(locations, "older", config=older) as peer,
    ):
        target = peer.registration.instance_id
        report = await sender.runtime.send(target, "scoped", goal_id=FORGED_GOAL)
        assert (report.ok, report.status, report.state, report.retryable) == (
            False,
            "unsupported",
            "refused",
            False,
        )
        assert not report.message_written
        assert peer.inbox.entries == []  # no message frame reached its handler
        assert sender.runtime.remaining_budget() == 255  # the attempt was paid for
        assert sender.runtime.goal_view().confirmations == 0
        # The same receiver takes unscoped messages: only the scope was refused, not downgraded.
        plain = await sender.runtime.send(target, "unscoped")
        assert plain.status == "submitted"
        assert [(e.text, e.goal_id) for e in peer.inbox.entries] == [("unscoped", None)]
        assert_accounted(sender)


@pytest.mark.parametrize(
    ("goal_id", "text"),
    [
        ("", "hello"),
        ("has space", "hello"),
        ("x" * 129, "hello"),
        ("dot.ted", "hello"),
        (FORGED_GOAL, f"{BRIDGE_PREFIX}{{}}"),
    ],
    ids=["empty", "space", "129-chars", "dot", "bridge-envelope"],
)
async def test_invalid_goal_is_local_before_any_connection(
    locations: Locations, goal_id: str, text: str
) -> None:
    async with (
        running_receiver(locations) as sender,
        goal_capable_fake(locations, hold_scoped_after=0) as fake,
    ):
        report = await sender.runtime.send(fake.registration.instance_id, text, goal_id=goal_id)
        assert (report.ok, report.status, report.message_written) == (
            False,
            "invalid_goal",
            False,
        )
        assert fake.connections == 0  # not even the listing's probe
        assert sender.runtime.remaining_budget() == 256
        assert_accounted(sender)


async def test_any_refusal_of_a_scoped_send_removes_its_confirmation(
    locations: Locations,
) -> None:
    async with running_receiver(locations) as rx, peer_session(rx, "helper") as peer:
        goal_id = await start_goal(rx, [peer])
        assert (await send(rx, peer, "confirm", goal_id=goal_id)).status == "submitted"
        assert peer.confirmations() == 1
        # The host is still busy with that message: ``busy`` is a refusal like any other.
        report = await send(rx, peer, "too soon", goal_id=goal_id)
        assert report.status == "busy"
        assert (peer.confirmations(), peer.budget()) == (0, 255)
        rx.turns.settle_submissions()
        assert (await send(rx, peer, "confirm again", goal_id=goal_id)).status == "submitted"
        rx.turns.settle_submissions()
        assert (peer.confirmations(), peer.budget()) == (1, 255)
        assert_accounted(rx, all_final=True)


async def test_at_most_64_confirmations_are_kept(locations: Locations) -> None:
    # One receiver, 65 goals one after another: each confirms a new (receiver, goal) pair.
    async with running_receiver(locations) as rx, peer_session(rx, "helper") as peer:
        for n in range(MAX_GOAL_CONFIRMATIONS + 1):
            goal_id = await start_goal(rx, [peer])
            rx.clock.advance(1 / RATE_REFILL_PER_S)
            assert (await send(rx, peer, f"goal {n}", goal_id=goal_id)).status == "submitted"
            rx.turns.settle_submissions()
            rx.runtime.goal_complete(goal_id, authority=USER_TURN)
            assert peer.confirmations() == min(n + 1, MAX_GOAL_CONFIRMATIONS)
        assert peer.budget() == 256
        assert_accounted(rx, all_final=True)


@pytest.mark.parametrize("keys", [MAX_GOAL_CONFIRMATIONS - 1, MAX_GOAL_CONFIRMATIONS])
def test_confirmations_below_and_at_the_bound_are_all_kept(keys: int) -> None:
    confirmations = GoalConfirmations()
    receiver = "a" * 32
    for n in range(keys):
        _confirm(confirmations, receiver, f"goal-{n}")
    assert len(confirmations) == keys
    assert GoalConfirmations.key(receiver, "goal-0") in confirmations


def test_past_the_bound_the_oldest_confirmation_goes_first() -> None:
    confirmations = GoalConfirmations()
    receiver = "a" * 32
    for n in range(MAX_GOAL_CONFIRMATIONS + 1):
        _confirm(confirmations, receiver, f"goal-{n}")
    assert len(confirmations) == MAX_GOAL_CONFIRMATIONS
    assert GoalConfirmations.key(receiver, "goal-0") not in confirmations
    assert GoalConfirmations.key(receiver, "goal-1") in confirmations
    # The evicted pair has no free attempt left at budget 0; a kept one has exactly one.
    assert confirmations.reserve(receiver, "goal-0", 0) is Code.BUDGET_EXHAUSTED
    assert isinstance(confirmations.reserve(receiver, "goal-1", 0), Reservation)
    assert confirmations.reserve(receiver, "goal-1", 0) is Code.BUDGET_EXHAUSTED


@pytest.mark.parametrize("outcome", ["goal_not_authorized", "busy", "timeout", "accepted", ""])
def test_a_refusal_or_unknown_receipt_removes_the_confirmation(outcome: str) -> None:
    confirmations = GoalConfirmations()
    receiver = "b" * 32
    _confirm(confirmations, receiver, "goal")
    reservation = confirmations.reserve(receiver, "goal", 5)
    assert isinstance(reservation, Reservation)
    assert confirmations.settle(reservation, outcome) is False  # no refund
    assert len(confirmations) == 0


def _confirm(confirmations: GoalConfirmations, receiver: str, goal_id: str) -> None:
    reservation = confirmations.reserve(receiver, goal_id, 1)
    assert isinstance(reservation, Reservation)
    assert confirmations.settle(reservation, "submitted") is True
