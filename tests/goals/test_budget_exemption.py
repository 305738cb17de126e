"""Pinned cases 1 and 2 (goal-scoped-v1 §5): a bound peer's scoped rounds are neither blocked by
nor charged to the receiver's lifetime budget, and the status rows stay bounded meanwhile.

A real receiving runtime (scripted host: the test runs and ends each turn) and a real peer
session bound to its goal; unscoped traffic comes from raw wire senders. Every scoped round is
answered ``submitted`` and its turn settles before the next round starts.
"""

from __future__ import annotations

import pytest

from pi_cross_session._internal.plugin.render.peer_text import PEER_TEXT_NOTICE
from pi_cross_session._internal.protocol.limits import MAX_CACHE_ENTRIES, RATE_REFILL_PER_S
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.security.turns import TurnEnding
from tests.goals.kit import OBJECTIVE, Peer, peer_session, send, start_goal
from tests.support.waiting import eventually
from tests.support.wire_session import (
    Receiver,
    WireSender,
    assert_accounted,
    assert_accounted_bounded,
    running_receiver,
)

pytestmark = pytest.mark.anyio

#: Fake seconds between rounds: one rate token for the bound peer (30-token bucket, 0.5/s), so
#: its scoped rounds are never rate limited however many there are. Rate limits do apply to
#: scoped traffic (goal-scoped-v1 §2.4); this only keeps the test about the budget.
ROUND_S = 1 / RATE_REFILL_PER_S


async def _round(
    rx: Receiver, peer: Peer, goal_id: str, unscoped: WireSender, n: int
) -> tuple[str, str]:
    """One scoped message from the bound peer, then one unscoped message; each settled."""
    rx.clock.advance(ROUND_S)
    scoped = await send(rx, peer, f"scoped round {n}", goal_id=goal_id)
    assert scoped.ok, scoped
    rx.turns.settle_submissions()
    plain = await unscoped.send(f"unscoped round {n}")
    rx.turns.settle_submissions()
    return scoped.status, plain.status


async def _drive(rx: Receiver, rounds: int, budget: int) -> None:
    async with peer_session(rx, "bound-peer") as peer:
        goal_id = await start_goal(rx, [peer])
        # Unscoped senders take turns, each staying well inside its own rate bucket.
        senders = [rx.sender(f"plain-{i}") for i in range(9)]
        results = [
            await _round(rx, peer, goal_id, senders[n % len(senders)], n) for n in range(rounds)
        ]
        assert [scoped for scoped, _ in results] == ["submitted"] * rounds
        assert [plain for _, plain in results] == ["submitted"] * budget + ["budget_exhausted"] * (
            rounds - budget
        )
        assert rx.runtime.remaining_budget() == 0

        # Scoped admissions after the budget ran out: admitted, and the budget stays at 0.
        for n in range(3):
            rx.clock.advance(ROUND_S)
            report = await send(rx, peer, f"after exhaustion {n}", goal_id=goal_id)
            assert report.status == "submitted"
            rx.turns.settle_submissions()
            assert rx.runtime.remaining_budget() == 0
        assert (await senders[0].send("one more unscoped")).status == "budget_exhausted"

        # What the host received: every scoped message under the goal notice, every unscoped
        # one under the plain notice.
        scoped_calls = [c for c in rx.host.calls if c.delivery.goal_id == goal_id]
        plain_calls = [c for c in rx.host.calls if c.delivery.goal_id is None]
        assert len(scoped_calls) == rounds + 3
        assert len(plain_calls) == budget
        assert all(OBJECTIVE in c.content and goal_id in c.content for c in scoped_calls)
        assert all(PEER_TEXT_NOTICE in c.content for c in plain_calls)
        assert all(c.delivery.sender.instance_id == peer.instance_id for c in scoped_calls)
        # Each scoped send was charged and refunded on its receipt: the peer spent nothing.
        assert peer.budget() == 256
        assert peer.confirmations() == 1


async def test_case1_small_budget_scoped_rounds_go_on_after_unscoped_exhaustion(
    locations: Locations,
) -> None:
    async with running_receiver(locations, budget=8) as rx:
        await _drive(rx, rounds=20, budget=8)
        snapshot = assert_accounted(rx, all_final=True)
        assert (snapshot.remaining_budget, snapshot.total_budget) == (0, 8)
        assert snapshot.refusals == {"budget_exhausted": 20 - 8 + 1}


async def test_case1_real_budget_270_scoped_rounds_while_256_unscoped_exhaust_it(
    locations: Locations,
) -> None:
    async with running_receiver(locations) as rx:
        await _drive(rx, rounds=270, budget=256)
        # 273 scoped + 256 unscoped admissions: more than the 512 rows kept (case 2).
        snapshot = assert_accounted_bounded(rx, all_final=True)
        assert snapshot.admitted == 273 + 256
        assert len(snapshot.rows) == MAX_CACHE_ENTRIES
        assert snapshot.evicted_rows == 273 + 256 - MAX_CACHE_ENTRIES
        assert (snapshot.remaining_budget, snapshot.total_budget) == (0, 256)


async def test_case2_status_rows_stay_bounded_and_pending_rows_are_never_evicted(
    locations: Locations,
) -> None:
    # A small row bound shows what the 512 of the test above cannot: queued rows survive even
    # when they alone exceed the bound, and they take no other sender's place (security/rows.py).
    async with (
        running_receiver(locations, admission={"max_rows": 8}) as rx,
        peer_session(rx, "bound-peer") as peer,
    ):
        goal_id = await start_goal(rx, [peer])
        plain = rx.sender("plain")
        for n in range(8):
            assert (await plain.send(f"settled {n}")).status == "submitted"
            rx.turns.settle_submissions()
        assert len(rx.snapshot().rows) == 8

        rx.turns.user_turn()  # busy with a known turn: capable senders are queued
        queued = []
        for n in range(12):
            rx.clock.advance(ROUND_S)
            report = await send(rx, peer, f"queued {n}", goal_id=goal_id)
            assert report.status == "queued"
            queued.append(report.message_id)
        snapshot = rx.snapshot()
        # Pending rows are bounded by the queue, not by the 8 final rows, and evict none of them:
        # 20 rows, above the bound of 8, the plain sender's all kept.
        assert [row.message_id for row in snapshot.rows[8:]] == queued
        assert {row.state for row in snapshot.rows[8:]} == {"queued"}
        assert {row.sender_instance_id for row in snapshot.rows[:8]} == {plain.instance_id}
        assert snapshot.evicted_rows == 0
        assert_accounted_bounded(rx)

        # One safe settle per message drains the queue in order; then the bound holds again.
        rx.turns.end(TurnEnding.STOP)
        for n in range(12):
            await eventually(lambda n=n: len(rx.host.submitted) == 8 + n + 1)  # type: ignore[misc]
            rx.turns.settle_submissions()
        assert [d.message_id for d in rx.host.submitted[8:]] == queued
        assert (await plain.send("after the drain")).status == "submitted"
        rx.turns.settle_submissions()
        snapshot = assert_accounted_bounded(rx, all_final=True)
        assert len(snapshot.rows) == 8
        assert snapshot.evicted_rows == 8 + 12 + 1 - 8
        # The peer's first finished row took the plain sender's oldest (it held no other); every
        # later one took the peer's own, and the plain sender's last message its own oldest.
        kept = [(row.sender_instance_id, row.message_id) for row in snapshot.rows]
        assert [m for s, m in kept if s == peer.instance_id] == queued[-1:]
        assert len([m for s, m in kept if s == plain.instance_id]) == 7
