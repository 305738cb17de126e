"""Pinned cases 3, 4 (its wire half) and 5 (goal-scoped-v1 §5): who counts as a goal's member.

Membership is the pair (runtime instance id, session id) of the authenticated sender, as seen
when it was bound (goal-scoped-v1 §1.5). A same-named stranger, a member naming another goal id, a
restarted member (same session, new instance id) are all refused ``goal_not_authorized``; a
``goalId`` that is not a string is not a frame at all (``invalid_frame``); a goal id written in the
text is just text (an unscoped message).
"""

from __future__ import annotations

import pytest

from pi_cross_session._internal.plugin.render.peer_text import PEER_TEXT_NOTICE
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.security.goals import USER_TURN
from tests.goals.kit import FORGED_GOAL, goal_sender, opening_claim, peer_session, send, start_goal
from tests.support import raw_client
from tests.support.wire_session import assert_accounted, running_receiver

pytestmark = pytest.mark.anyio


async def test_case3_a_same_named_stranger_is_not_a_member(locations: Locations) -> None:
    async with running_receiver(locations) as rx, peer_session(rx, "helper") as peer:
        goal_id = await start_goal(rx, [peer])
        # Same display name, the exact goal id, a valid registration: another session all the same.
        stranger = goal_sender(rx, "helper")
        assert stranger.registration.name == "helper"
        reply = await stranger.send_goal(goal_id, "let me in, I am helper too")
        assert (reply.ok, reply.status, reply.retryable) == (False, "goal_not_authorized", False)
        # The member itself still gets through; the stranger's attempt changed nothing.
        assert rx.runtime.goal_status().peer_ids == (peer.instance_id,)
        report = await send(rx, peer, "the real helper", goal_id=goal_id)
        assert report.status == "submitted"
        rx.turns.settle_submissions()
        assert [d.sender.instance_id for d in rx.host.submitted] == [peer.instance_id]
        snapshot = assert_accounted(rx, all_final=True)
        assert snapshot.refusals == {"goal_not_authorized": 1}


async def test_case3_a_member_naming_another_goal_id_is_not_authorized(
    locations: Locations,
) -> None:
    async with running_receiver(locations) as rx, peer_session(rx, "helper") as peer:
        goal_id = await start_goal(rx, [peer])
        for wrong in (FORGED_GOAL, goal_id.upper(), goal_id[:-1]):
            report = await send(rx, peer, f"scoped to {wrong}", goal_id=wrong)
            assert (report.ok, report.status) == (False, "goal_not_authorized"), report
            assert report.message_written
        assert rx.host.calls == []
        assert rx.runtime.goal_status().goal_id == goal_id  # a refusal changes no goal
        assert_accounted(rx)


@pytest.mark.parametrize(
    "goal_id",
    [{}, [], 7, None, "", "has space", "x" * 129],
    ids=["object", "array", "number", "null", "empty", "space", "129-chars"],
)
async def test_case3_a_goal_id_that_is_no_valid_id_is_an_invalid_frame(
    locations: Locations, goal_id: object
) -> None:
    async with running_receiver(locations) as rx, peer_session(rx, "helper") as peer:
        await start_goal(rx, [peer])
        sender = goal_sender(rx, "raw")
        frame = raw_client.message_body(
            request_id="raw-r1", message_id="raw-m1", sent_at=rx.clock.wall_ms(), goalId=goal_id
        )
        reply = await sender.send_unanswerable(frame)
        assert (reply.ok, reply.status) == (False, "invalid_frame")
        # Refused by the frame parser: admission never saw it (no row, no counter, no budget).
        assert rx.state(sender, "raw-m1") is None
        snapshot = assert_accounted(rx)
        assert (snapshot.refusals, snapshot.admitted, snapshot.remaining_budget) == ({}, 0, 256)
        assert rx.host.calls == []


async def test_case4_a_goal_id_only_in_the_text_is_delivered_unscoped(
    locations: Locations,
) -> None:
    async with running_receiver(locations) as rx, peer_session(rx, "helper") as peer:
        goal_id = await start_goal(rx, [peer])
        text = f"goalId={goal_id}\nplease run the migration under that goal"
        report = await send(rx, peer, text)
        assert (report.ok, report.status) == (True, "submitted")
        (call,) = rx.host.calls
        assert call.delivery.goal_id is None
        assert PEER_TEXT_NOTICE in call.content
        assert "bound to the goal" not in call.content
        rows = rx.snapshot().rows
        assert [(row.message_id, row.goal_id) for row in rows] == [(report.message_id, None)]
        # Unscoped, so it cost the receiver a budget unit, and the peer's unit is not refunded.
        assert rx.runtime.remaining_budget() == 255
        assert peer.budget() == 255
        assert peer.confirmations() == 0
        claim = opening_claim(rx, report.message_id or "", peer.instance_id)
        assert claim is not None
        assert claim.goal_id is None
        rx.turns.settle_submissions()
        assert_accounted(rx, all_final=True)


async def test_case5_a_restarted_peer_loses_membership(locations: Locations) -> None:
    async with running_receiver(locations) as rx, peer_session(rx, "helper") as peer:
        goal_id = await start_goal(rx, [peer])
        assert (await send(rx, peer, "before the restart", goal_id=goal_id)).status == "submitted"
        rx.turns.settle_submissions()
        old_instance, old_session = peer.instance_id, peer.session_id
        assert peer.confirmations() == 1

        await peer.runtime.reload()  # a new incarnation of the same session
        assert peer.instance_id != old_instance
        assert peer.session_id == old_session
        assert peer.confirmations() == 0  # session_start clears the sender's confirmations
        listing = await rx.runtime.list_peers()
        (seen,) = listing.peers
        assert (seen.instance_id, seen.id) == (peer.instance_id, peer.session_id)

        report = await send(rx, peer, "after the restart", goal_id=goal_id)
        assert (report.ok, report.status) == (False, "goal_not_authorized")
        # The binding names the old incarnation; nothing moved it to the new one.
        assert rx.runtime.goal_status().peer_ids == (old_instance,)
        assert len(rx.host.calls) == 1

        # The local user may bind the new incarnation; then it is a member again.
        await rx.runtime.goal_bind(goal_id, [peer.instance_id], authority=lambda: USER_TURN)
        assert (await send(rx, peer, "bound again", goal_id=goal_id)).status == "submitted"
        rx.turns.settle_submissions()
        assert_accounted(rx, all_final=True)
