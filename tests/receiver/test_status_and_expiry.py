"""Spec §10 item 14 at the wire: status queries are source-qualified and free, and a queued
message expires after its 30 s TTL without ever reaching the host."""

from __future__ import annotations

import pytest

from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.security.turns import TurnEnding
from tests.support import raw_client
from tests.support.raw_client import RawClient
from tests.support.waiting import eventually
from tests.support.wire_session import assert_accounted, running_receiver

pytestmark = pytest.mark.anyio


async def test_item14_status_by_the_same_sender_is_queued_by_another_sender_unknown(
    locations: Locations,
) -> None:
    async with running_receiver(locations) as rx:
        rx.turns.user_turn()
        alpha, beta = rx.sender("alpha"), rx.sender("beta")
        assert (await alpha.send(message_id="m-1")).status == "queued"
        mine = await alpha.status("m-1")
        assert (mine.ok, mine.status, mine.error) == (True, "queued", None)
        theirs = await beta.status("m-1")
        assert (theirs.ok, theirs.status) == (True, "unknown")
        # beta's own m-1 is a different message; each sender sees only its own.
        assert (await beta.send(message_id="m-1")).status == "queued"
        assert (await beta.status("m-1")).status == "queued"
        assert (await alpha.status("never-sent")).status == "unknown"
        assert_accounted(rx)


async def test_item14_status_queries_cost_no_budget_and_no_rate_token(
    locations: Locations,
) -> None:
    async with running_receiver(locations) as rx:
        rx.turns.user_turn()
        alpha = rx.sender("alpha")
        assert (await alpha.send(message_id="m-1")).status == "queued"
        for _ in range(40):
            assert (await alpha.status("m-1")).status == "queued"
        assert rx.runtime.remaining_budget() == 255
        statuses = [(await alpha.send()).status for _ in range(30)]
        assert statuses == ["queued"] * 29 + ["rate_limited"]
        assert_accounted(rx)


async def test_item14_a_status_query_without_an_authenticated_sender_is_invalid_frame(
    locations: Locations,
) -> None:
    async with running_receiver(locations) as rx:
        target = rx.registration
        probe_hello = raw_client.hello(target, request_id="probe-1")  # no "from"
        replies = await raw_client.exchange_raw(
            target.socket_path,
            raw_client.line(probe_hello) + raw_client.line(raw_client.status_body()),
            replies=2,
        )
        assert [r.status for r in replies] == ["ready", "invalid_frame"]
        assert replies[1].request_id == "unknown"
        assert rx.snapshot().refusals == {}  # never reached admission


async def test_item14_a_submitted_row_reports_its_diagnostic_in_error_with_ok_true(
    locations: Locations,
) -> None:
    async with running_receiver(locations) as rx:
        alpha = rx.sender("alpha")
        assert (await alpha.send(message_id="m-1")).status == "submitted"
        before = await alpha.status("m-1")
        assert (before.ok, before.status) == (True, "submitted")
        assert before.error is not None
        assert "not yet confirmed" in before.error
        rx.turns.settle_submissions()  # the host shows the message: confirmed
        after = await alpha.status("m-1")
        # A sender with delivery receipts is told ``delivered``; the row itself stays submitted.
        assert (after.ok, after.status) == (True, "delivered")
        assert after.error is not None
        assert "confirmed" in after.error
        assert after.error != before.error
        assert_accounted(rx, all_final=True)


@pytest.mark.parametrize(
    ("age_s", "ttl_s"),
    [(0, 30.0), (10, 20.0)],
    ids=["sent-now", "sent-10s-ago"],
)
async def test_item14_a_queued_message_expires_after_30_s_with_zero_host_submits(
    locations: Locations, age_s: int, ttl_s: float
) -> None:
    """The TTL is min(admission + 30 s, sentAt + 30 s)."""
    async with running_receiver(locations) as rx:
        rx.turns.user_turn()
        alpha = rx.sender("alpha")
        reply = await alpha.send(message_id="m-1", age_ms=age_s * 1000)
        assert reply.status == "queued"
        rx.clock.advance(ttl_s - 0.5)
        await rx.maintenance_pass()
        assert (await alpha.status("m-1")).status == "queued"
        rx.clock.advance(0.5)
        await rx.maintenance_pass()
        expired = await alpha.status("m-1")
        assert (expired.ok, expired.status) == (True, "expired")
        assert expired.error  # the diagnostic says why
        assert rx.snapshot().queued == 0
        # The turn ends cleanly afterwards: nothing left to flush, nothing reaches the host.
        rx.turns.end(TurnEnding.STOP)
        await rx.maintenance_pass()
        assert rx.host.calls == []
        assert [e.state for e in rx.row_events] == ["accepted", "queued", "expired"]
        assert_accounted(rx, all_final=True)


async def test_item14_the_runtime_expires_queued_messages_by_itself(
    locations: Locations,
) -> None:
    """No wake-up from the test: the maintenance loop's own timer (at most 1 s of real time
    with a clock that jumps, more on a loaded machine) finds the expired entry."""
    async with running_receiver(locations) as rx:
        rx.turns.user_turn()
        alpha = rx.sender("alpha")
        assert (await alpha.send(message_id="m-1")).status == "queued"
        rx.clock.advance(30)
        await eventually(lambda: rx.state(alpha, "m-1") == "expired")
        assert (await alpha.status("m-1")).status == "expired"
        assert rx.host.calls == []
        assert_accounted(rx, all_final=True)


async def test_item14_a_flush_skips_expired_entries_and_submits_the_next_live_one(
    locations: Locations,
) -> None:
    async with running_receiver(locations) as rx:
        rx.turns.user_turn()
        alpha = rx.sender("alpha")
        assert (await alpha.send(message_id="old", age_ms=20_000)).status == "queued"  # TTL 10 s
        assert (await alpha.send(message_id="new")).status == "queued"  # TTL 30 s
        rx.clock.advance(15)  # no wake-up of its own: the pass that flushes meets it first
        rx.turns.end(TurnEnding.STOP)
        await eventually(lambda: len(rx.host.calls) == 1)
        assert rx.host.calls[0].delivery.message_id == "new"
        assert (await alpha.status("old")).status == "expired"
        assert (await alpha.status("new")).status == "submitted"
        rx.turns.settle_submissions()
        assert_accounted(rx, all_final=True)


async def test_item14_status_on_a_raw_connection_is_answered_then_half_closed(
    locations: Locations,
) -> None:
    """Hello and status query in one write; the receiver answers both and closes its side."""
    async with running_receiver(locations) as rx:
        rx.turns.user_turn()
        alpha = rx.sender("alpha")
        assert (await alpha.send(message_id="m-1")).status == "queued"
        target = rx.registration
        hello = raw_client.hello(target, sender=alpha.registration, request_id="h-1")
        async with RawClient.connect(target.socket_path) as client:
            await client.send(
                raw_client.line(hello)
                + raw_client.line(raw_client.status_body(request_id="s-1", message_id="m-1"))
            )
            ready = await client.read_reply()
            answer = await client.read_reply()
            assert await client.read_to_eof() == b""
        assert (ready.status, answer.request_id, answer.status) == ("ready", "s-1", "queued")
