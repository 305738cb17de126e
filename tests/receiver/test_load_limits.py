"""Spec §10 items 12 and 13 at the wire: per-sender rate, the 50-message queue, and the lifetime
budget shared by inbound admissions and outbound sends."""

from __future__ import annotations

import pytest

from pi_cross_session._internal.plugin.runtime import SessionRuntime
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.security.provenance import Provenance
from pi_cross_session._internal.security.turns import TurnEnding
from tests.support.waiting import eventually
from tests.support.wire_session import (
    Receiver,
    WireSender,
    assert_accounted,
    headless_session,
    running_receiver,
)

pytestmark = pytest.mark.anyio


async def _send_settled(rx: Receiver, sender: WireSender, **fields: object) -> str:
    reply = await sender.send(**fields)  # type: ignore[arg-type]
    rx.turns.settle_submissions()
    return reply.status


async def test_item12_one_sender_gets_30_queued_then_rate_limited_a_second_fills_the_queue(
    locations: Locations,
) -> None:
    async with running_receiver(locations) as rx:
        rx.turns.user_turn()  # busy with a known user turn: capable senders are queued
        one, two = rx.sender("one"), rx.sender("two")
        replies = [await one.send() for _ in range(31)]
        assert [r.status for r in replies] == ["queued"] * 30 + ["rate_limited"]
        assert (replies[-1].ok, replies[-1].retryable) == (False, True)
        replies = [await two.send() for _ in range(21)]
        assert [r.status for r in replies] == ["queued"] * 20 + ["queue_full"]
        assert (replies[-1].ok, replies[-1].retryable) == (False, True)
        assert rx.snapshot().queued == 50
        # The queue is checked before the rate: every sender now hears queue_full.
        assert (await one.send()).status == "queue_full"
        assert (await rx.sender("three").send()).status == "queue_full"
        assert rx.host.calls == []
        assert rx.runtime.remaining_budget() == 256 - 50
        assert_accounted(rx)

        # One safe settle lets exactly one message through, oldest first.
        oldest = rx.snapshot().rows[0].message_id
        rx.turns.end(TurnEnding.STOP)
        await eventually(lambda: len(rx.host.calls) == 1)
        assert rx.host.calls[0].delivery.message_id == oldest
        assert rx.snapshot().queued == 49
        rx.turns.start(Provenance.PEER)
        # Two seconds refill one token of the rate-limited sender (0.5/s): it fits the freed slot.
        rx.advance(2)
        assert (await one.send()).status == "queued"
        assert (await two.send()).status == "queue_full"
        rx.turns.end(TurnEnding.STOP)
        await eventually(lambda: len(rx.host.calls) == 2)
        assert rx.snapshot().queued == 49
        snapshot = assert_accounted(rx)
        assert snapshot.refusals == {"rate_limited": 1, "queue_full": 4}


async def test_item13_a_small_budget_is_spent_then_exhausted_and_nothing_refills_it(
    locations: Locations,
) -> None:
    async with running_receiver(locations, budget=5) as rx:
        alpha = rx.sender("alpha")
        statuses = [await _send_settled(rx, alpha, message_id=f"m-{i}") for i in range(5)]
        assert statuses == ["submitted"] * 5
        reply = await alpha.send(message_id="m-5")
        assert (reply.ok, reply.status, reply.retryable) == (False, "budget_exhausted", False)
        snapshot = rx.snapshot()
        assert (snapshot.remaining_budget, snapshot.total_budget, snapshot.admitted) == (0, 5, 5)
        # The budget comes before dedup: a reused id hears budget_exhausted, not duplicate.
        assert (await alpha.send(message_id="m-0")).status == "budget_exhausted"
        # A settled turn does not refill it.
        rx.turns.user_turn()
        rx.turns.end(TurnEnding.STOP)
        assert (await alpha.send()).status == "budget_exhausted"
        # Neither does the latch and /cross-session-resume.
        rx.turns.user_turn()
        rx.turns.abort()
        rx.turns.end(TurnEnding.ABORTED)
        assert (await alpha.send()).status == "stopped"
        assert rx.runtime.resume().reopened
        assert (await alpha.send()).status == "budget_exhausted"
        # Nor time.
        rx.advance(3600)
        assert (await rx.sender("fresh").send()).status == "budget_exhausted"
        assert rx.runtime.remaining_budget() == 0
        # Status queries are free and still answered (the host confirmed m-0: delivered, which
        # this sender understands).
        assert (await alpha.status("m-0")).status == "delivered"
        snapshot = assert_accounted(rx, all_final=True)
        assert len(snapshot.rows) == 5


async def test_item13_the_real_budget_admits_256_then_budget_exhausted(
    locations: Locations,
) -> None:
    async with running_receiver(locations) as rx:
        # Nine senders so that no one of them reaches its 30-token burst.
        senders = [rx.sender(f"s{i}") for i in range(9)]
        statuses = [await _send_settled(rx, senders[n % 9]) for n in range(256)]
        assert statuses == ["submitted"] * 256
        for sender in (senders[0], rx.sender("late")):
            reply = await sender.send()
            assert (reply.status, reply.retryable) == ("budget_exhausted", False)
        snapshot = assert_accounted(rx, all_final=True)
        assert (snapshot.remaining_budget, snapshot.admitted, len(snapshot.rows)) == (0, 256, 256)
        assert len(rx.host.calls) == 256


async def test_item13_remaining_budget_counts_inbound_admissions_and_outbound_sends(
    locations: Locations,
) -> None:
    async with (
        running_receiver(locations, budget=6) as rx,
        headless_session(locations, "beta", clock=rx.clock) as (beta_host, beta),
    ):
        runtime: SessionRuntime = rx.runtime
        alpha = rx.sender("alpha")
        assert await _send_settled(rx, alpha, text="inbound 1") == "submitted"
        assert runtime.remaining_budget() == 5

        # Inbound from a real session runtime: costs the receiver one unit too.
        report = await beta.send("receiver", "inbound from beta")
        assert (report.ok, report.status) == (True, "submitted"), report
        assert beta.identity is not None
        assert report.message_id is not None
        rx.ledger.note(beta.identity.instance_id, report.message_id, report.status, ok=True)
        rx.turns.settle_submissions()
        assert runtime.remaining_budget() == 4
        assert beta.remaining_budget() == 255  # the sender paid for its own attempt

        # Outbound: one unit per attempt.
        out = await runtime.send("beta", "outbound 1")
        assert out.ok, out
        assert runtime.remaining_budget() == 3
        await eventually(lambda: len(beta_host.delivered) == 1)

        # Free: refusals, status queries, listings (probes), sends that resolve no target.
        assert (await alpha.send("inbound 1")).status == "duplicate"
        assert (await alpha.status(alpha.fresh_id())).status == "unknown"
        assert [p.name for p in (await runtime.list_peers()).peers] == ["beta"]
        assert (await runtime.send("nobody", "x")).status == "not_found"
        assert (await runtime.query_status("beta", out.message_id or "")).ok
        assert runtime.remaining_budget() == 3

        assert (await runtime.send("beta", "outbound 2")).ok
        assert await _send_settled(rx, alpha, text="inbound 2") == "submitted"
        assert (await runtime.send("beta", "outbound 3")).ok
        assert runtime.remaining_budget() == 0

        # Exhausted both ways: inbound refused on the wire, outbound refused before any exchange.
        assert (await alpha.send("inbound 3")).status == "budget_exhausted"
        admitted_by_beta = beta.snapshot().admitted  # type: ignore[union-attr]
        local = await runtime.send("beta", "outbound 4")
        assert (local.ok, local.status, local.message_written) == (False, "budget_exhausted", False)
        assert beta.snapshot().admitted == admitted_by_beta  # type: ignore[union-attr]
        snapshot = assert_accounted(rx, all_final=True)
        assert (snapshot.admitted, snapshot.remaining_budget) == (3, 0)
