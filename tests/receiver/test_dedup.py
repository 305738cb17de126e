"""Spec §10 item 11 at the wire: message-id and text deduplication per sender incarnation.

Admission time is a fake clock (``RuntimeOptions(clock=...)``) that the test advances; senders date
their frames by it, so "31 s later" takes no wall time. Every admitted message's peer turn is run
and settled by the test, as a host would, so the receiver is idle again before the next one.
"""

from __future__ import annotations

import pytest

from pi_cross_session._internal.protocol.paths import Locations
from tests.support.wire_session import Receiver, WireSender, assert_accounted, running_receiver

pytestmark = pytest.mark.anyio


async def _send_settled(rx: Receiver, sender: WireSender, text: str, message_id: str) -> str:
    """Send one message; run the peer turn it starts, if any; return the wire status."""
    reply = await sender.send(text, message_id=message_id)
    rx.turns.settle_submissions()
    return reply.status


async def test_item11_same_message_id_with_other_text_is_duplicate_even_after_31_s(
    locations: Locations,
) -> None:
    async with running_receiver(locations) as rx:
        alpha = rx.sender("alpha")
        assert await _send_settled(rx, alpha, "first text", "m-1") == "submitted"
        assert await _send_settled(rx, alpha, "second text", "m-1") == "duplicate"
        rx.advance(31)
        reply = await alpha.send("third text", message_id="m-1")
        assert (reply.ok, reply.status, reply.retryable) == (False, "duplicate", False)
        # The id stays taken but the text window has passed: a new id with the old text is fine.
        assert await _send_settled(rx, alpha, "first text", "m-2") == "submitted"
        assert [d.text for d in rx.host.submitted] == ["first text", "first text"]
        assert rx.state(alpha, "m-1") == "submitted"
        assert_accounted(rx, all_final=True)


async def test_item11_new_id_with_same_text_is_duplicate_within_30_s_and_accepted_after(
    locations: Locations,
) -> None:
    async with running_receiver(locations) as rx:
        alpha = rx.sender("alpha")
        assert rx.runtime.remaining_budget() == 256
        assert await _send_settled(rx, alpha, "same text", "m-1") == "submitted"
        assert await _send_settled(rx, alpha, "same text", "m-2") == "duplicate"
        assert rx.runtime.remaining_budget() == 255  # a duplicate costs nothing
        rx.advance(29.5)
        assert await _send_settled(rx, alpha, "same text", "m-3") == "duplicate"
        rx.advance(0.5)  # exactly 30 s after the admission: the window is "< 30 s"
        assert await _send_settled(rx, alpha, "same text", "m-4") == "submitted"
        assert rx.runtime.remaining_budget() == 254
        # The window restarts from the latest admission.
        rx.advance(29.5)
        assert await _send_settled(rx, alpha, "same text", "m-5") == "duplicate"
        assert [d.message_id for d in rx.host.submitted] == ["m-1", "m-4"]
        assert_accounted(rx, all_final=True)


async def test_item11_a_b_a_across_settled_turns_is_duplicate(locations: Locations) -> None:
    async with running_receiver(locations) as rx:
        alpha = rx.sender("alpha")
        assert await _send_settled(rx, alpha, "text A", "m-1") == "submitted"
        assert await _send_settled(rx, alpha, "text B", "m-2") == "submitted"
        assert await _send_settled(rx, alpha, "text A", "m-3") == "duplicate"
        assert await _send_settled(rx, alpha, "text B", "m-4") == "duplicate"
        # The summary and the id play no part: only the text's bytes do.
        reply = await alpha.send("text A", message_id="m-5", summary="a different summary")
        assert reply.status == "duplicate"
        assert await _send_settled(rx, alpha, "text A ", "m-6") == "submitted"  # other bytes
        # Budget as in the reference's dedup test: 256 → 253, then 252 after one more.
        assert rx.runtime.remaining_budget() == 253
        assert await _send_settled(rx, alpha, "text C", "m-7") == "submitted"
        assert rx.runtime.remaining_budget() == 252
        assert len(rx.snapshot().rows) == 4
        assert_accounted(rx, all_final=True)


async def test_item11_another_senders_identical_text_and_id_are_accepted(
    locations: Locations,
) -> None:
    async with running_receiver(locations) as rx:
        alpha, beta = rx.sender("alpha"), rx.sender("beta")
        assert await _send_settled(rx, alpha, "shared text", "m-1") == "submitted"
        assert await _send_settled(rx, beta, "shared text", "m-1") == "submitted"
        assert await _send_settled(rx, alpha, "shared text", "m-2") == "duplicate"
        assert await _send_settled(rx, beta, "shared text", "m-2") == "duplicate"
        rows = {(r.sender_instance_id, r.message_id) for r in rx.snapshot().rows}
        assert rows == {(alpha.instance_id, "m-1"), (beta.instance_id, "m-1")}
        assert_accounted(rx, all_final=True)


async def test_item11_duplicates_are_judged_before_the_rate_and_cost_no_token(
    locations: Locations,
) -> None:
    """A duplicate spends nothing: 30 duplicates later the sender still has its 29 tokens."""
    async with running_receiver(locations) as rx:
        alpha = rx.sender("alpha")
        rx.turns.user_turn()  # queue instead of submitting: no turn to settle per message
        assert (await alpha.send("only once", message_id="m-0")).status == "queued"
        for i in range(30):
            assert (await alpha.send("only once", message_id=f"d-{i}")).status == "duplicate"
        statuses = [(await alpha.send()).status for _ in range(30)]
        assert statuses == ["queued"] * 29 + ["rate_limited"]
        assert_accounted(rx)
