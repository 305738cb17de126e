"""Pinned cases 7 (its runtime half), 8 and 9 (goal-scoped-v1 §5, goal-scoped-v1 §1.6): what ends a
goal, and what happens to the messages that were waiting for it.

A queued scoped message never reaches the host once its goal ends (``complete``, ``cancel``,
the latch, an unsafe end, reload, stop) or its sender is unbound: its row ends
``dropped_goal_revoked`` while other queued messages end as the event decides
(``dropped_cancelled`` for the latch, ``dropped_shutdown`` for reload and stop, or stay queued).
Nothing brings a goal back: after ``/cross-session-resume`` the goal is still gone and its id is
refused ``goal_not_authorized``.
"""

from __future__ import annotations

import pytest

from pi_cross_session._internal.plugin.commands import HostReport, status_data
from pi_cross_session._internal.protocol.limits import TURN_START_GRACE_S
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.security.goals import (
    USER_TURN,
    Authority,
    AuthorityKind,
    GoalEnd,
    GoalError,
    GoalErrorCode,
    RevokeReason,
)
from pi_cross_session._internal.security.turns import TurnEnding
from tests.goals.kit import opening_claim, peer_session, row_state, send, start_goal
from tests.support.waiting import eventually
from tests.support.wire_session import (
    assert_accounted,
    assert_accounted_across,
    last_rows,
    running_receiver,
)

pytestmark = pytest.mark.anyio

ENDED_BY = {"complete": RevokeReason.COMPLETED, "cancel": RevokeReason.CANCELLED}


@pytest.mark.parametrize("how", ["complete", "cancel", "unbind"])
async def test_case8_a_queued_scoped_message_is_dropped_when_its_grant_ends(
    locations: Locations, how: str
) -> None:
    async with running_receiver(locations) as rx, peer_session(rx, "helper") as peer:
        goal_id = await start_goal(rx, [peer])
        rx.turns.user_turn()  # busy with a known turn: the scoped message waits in the queue
        queued = await send(rx, peer, "do the next step when you can", goal_id=goal_id)
        assert queued.status == "queued"
        assert peer.confirmations() == 1

        if how == "unbind":
            status = rx.runtime.goal_unbind(goal_id, [peer.instance_id], authority=USER_TURN)
            assert (status.goal_id, status.peer_ids) == (goal_id, ())
            assert rx.runtime.goal_view().last_end is None  # the goal itself goes on
        else:
            end = rx.runtime.goal_complete if how == "complete" else rx.runtime.goal_cancel
            assert end(goal_id, authority=USER_TURN) == goal_id
            assert rx.runtime.goal_status().goal_id is None
            assert rx.runtime.goal_view().last_end == GoalEnd(goal_id, ENDED_BY[how])
        assert row_state(rx, peer.instance_id, queued.message_id) == "dropped_goal_revoked"
        assert rx.snapshot().queued == 0

        # The turn ends cleanly: nothing is owed to the queue, nothing reaches the host.
        rx.turns.end(TurnEnding.STOP)
        await rx.maintenance_pass()
        assert rx.host.calls == []
        # The sender can learn the fate of its message.
        asked = await peer.runtime.query_status(
            rx.registration.instance_id, queued.message_id or ""
        )
        assert asked.status == "dropped_goal_revoked"

        late = await send(rx, peer, "and one more thing", goal_id=goal_id)
        assert (late.ok, late.status) == (False, "goal_not_authorized")
        assert peer.confirmations() == 0  # the refusal removed the confirmation
        assert peer.budget() == 255  # the queued send was refunded, the refused one was not
        assert rx.host.calls == []
        snapshot = assert_accounted(rx, all_final=True)
        assert snapshot.remaining_budget == 256


async def test_case8_unbinding_one_peer_drops_only_its_queued_messages(
    locations: Locations,
) -> None:
    async with (
        running_receiver(locations) as rx,
        peer_session(rx, "first") as first,
        peer_session(rx, "second") as second,
    ):
        goal_id = await start_goal(rx, [first, second])
        plain = rx.sender("plain")
        rx.turns.user_turn()
        a1 = await send(rx, first, "first, step one", goal_id=goal_id)
        a2 = await send(rx, first, "first, step two", goal_id=goal_id)
        b1 = await send(rx, second, "second, step one", goal_id=goal_id)
        u1 = await plain.send("an unscoped message", message_id="u1")
        assert [r.status for r in (a1, a2, b1, u1)] == ["queued"] * 4

        status = rx.runtime.goal_unbind(goal_id, [first.instance_id], authority=USER_TURN)
        assert status.peer_ids == (second.instance_id,)
        assert row_state(rx, first.instance_id, a1.message_id) == "dropped_goal_revoked"
        assert row_state(rx, first.instance_id, a2.message_id) == "dropped_goal_revoked"
        assert row_state(rx, second.instance_id, b1.message_id) == "queued"
        assert rx.state(plain, "u1") == "queued"
        assert rx.snapshot().queued == 2

        # The survivors run, in their order, one per safe settle.
        rx.turns.end(TurnEnding.STOP)
        await eventually(lambda: len(rx.host.submitted) == 1)
        rx.turns.settle_submissions()
        await eventually(lambda: len(rx.host.submitted) == 2)
        rx.turns.settle_submissions()
        assert [d.message_id for d in rx.host.submitted] == [b1.message_id, "u1"]
        assert (await send(rx, first, "still there?", goal_id=goal_id)).status == (
            "goal_not_authorized"
        )
        assert (await send(rx, second, "still bound", goal_id=goal_id)).status == "submitted"
        rx.turns.settle_submissions()
        assert_accounted(rx, all_final=True)


#: How each event ends the goal, and what becomes of a queued message of no goal.
EVENTS = {
    "latch": (RevokeReason.LATCH, "dropped_cancelled"),
    "unsafe_end": (RevokeReason.UNSAFE_END, "dropped_cancelled"),
    "reload": (RevokeReason.RELOAD, "dropped_shutdown"),
    "stop": (RevokeReason.SHUTDOWN, "dropped_shutdown"),
}


@pytest.mark.parametrize("event", list(EVENTS))
async def test_case9_latch_unsafe_end_reload_and_stop_revoke_the_goal(
    locations: Locations, event: str
) -> None:
    reason, other_state = EVENTS[event]
    async with running_receiver(locations) as rx, peer_session(rx, "helper") as peer:
        goal_id = await start_goal(rx, [peer])
        plain = rx.sender("plain")
        rx.turns.user_turn()
        scoped = await send(rx, peer, "queued under the goal", goal_id=goal_id)
        unscoped = await plain.send("queued without a goal", message_id="u1")
        assert (scoped.status, unscoped.status) == ("queued", "queued")
        assert scoped.message_id is not None
        scoped_key = (peer.instance_id, scoped.message_id)
        unscoped_key = (plain.instance_id, "u1")
        receiver_id = rx.registration.instance_id

        if event == "latch":
            rx.turns.abort()
            rx.turns.end(TurnEnding.ABORTED)
        elif event == "unsafe_end":
            rx.turns.end(TurnEnding.ERROR)
        elif event == "reload":
            await rx.runtime.reload()
            rx.host.idle = True  # the new incarnation has no turn running
        else:
            await rx.runtime.stop()

        last = last_rows(rx)
        assert last[scoped_key].state == "dropped_goal_revoked"
        assert last[unscoped_key].state == other_state
        assert rx.runtime.goal_status().goal_id is None
        assert rx.runtime.goal_status().as_dict() == {"goalId": None}
        if event != "reload":  # see the separate test below
            assert rx.runtime.goal_view().last_end == GoalEnd(goal_id, reason)
        assert rx.host.calls == []
        assert_accounted_across(rx, all_final=True)

        outcome = rx.runtime.resume()
        assert outcome.reopened is (event != "stop")
        assert outcome.dropped == 0
        assert rx.runtime.goal_status().goal_id is None
        if event == "stop":
            # Nothing to talk to any more: the old goal id cannot even be tried.
            report = await send(rx, peer, "anyone?", goal_id=goal_id, target=receiver_id)
            assert (report.status, report.message_written) == ("not_found", False)
            assert_accounted(rx, all_final=True)
            return
        report = await send(rx, peer, "the old goal, after resume", goal_id=goal_id)
        assert (report.ok, report.status) == (False, "goal_not_authorized")
        # The refusal removed the confirmation it concerned. After a reload that is a new key
        # (the receiver's new instance id): the old incarnation's stays, unusable, until evicted.
        assert peer.confirmations() == (1 if event == "reload" else 0)
        assert rx.host.calls == []
        # The inbox itself is open again for unscoped messages.
        assert (await plain.send("after resume")).status == "submitted"
        rx.turns.settle_submissions()
        assert_accounted_across(rx, all_final=True)
        if event != "reload":
            assert_accounted(rx, all_final=True)


async def test_case9_after_a_reload_the_status_still_says_how_the_goal_ended(
    locations: Locations,
) -> None:
    async with running_receiver(locations) as rx:
        goal_id = await start_goal(rx)
        await rx.runtime.reload()
        assert rx.runtime.goal_status().goal_id is None
        assert rx.runtime.goal_view().last_end == GoalEnd(goal_id, RevokeReason.RELOAD)
        data = status_data(rx.runtime, HostReport())
        assert data["lastGoalEnd"] == {"goalId": goal_id, "reason": "reload"}


async def test_case9_a_submission_that_never_starts_a_turn_revokes_the_goal(
    locations: Locations,
) -> None:
    async with running_receiver(locations) as rx, peer_session(rx, "helper") as peer:
        goal_id = await start_goal(rx, [peer])
        report = await send(rx, peer, "nobody will start my turn", goal_id=goal_id)
        assert report.status == "submitted"
        rx.advance(TURN_START_GRACE_S)  # the host never reports the turn starting
        await eventually(lambda: rx.snapshot().stopped)
        assert rx.runtime.goal_status().goal_id is None
        assert rx.runtime.goal_view().last_end == GoalEnd(goal_id, RevokeReason.LATCH)
        assert row_state(rx, peer.instance_id, report.message_id) == "submitted"
        assert rx.runtime.resume().reopened
        late = await send(rx, peer, "the old goal", goal_id=goal_id)
        assert late.status == "goal_not_authorized"
        assert_accounted(rx, all_final=True)


async def test_case9_a_host_that_refuses_a_scoped_submission_revokes_the_goal(
    locations: Locations,
) -> None:
    async with running_receiver(locations) as rx, peer_session(rx, "helper") as peer:
        goal_id = await start_goal(rx, [peer])
        rx.host.failure = RuntimeError("the host cannot take messages now")
        report = await send(rx, peer, "will not be taken", goal_id=goal_id)
        assert (report.ok, report.status, report.message_written) == (
            False,
            "injection_failed",
            True,
        )
        assert row_state(rx, peer.instance_id, report.message_id) == "injection_failed"
        assert rx.snapshot().stopped
        assert rx.runtime.goal_view().last_end == GoalEnd(goal_id, RevokeReason.LATCH)
        assert peer.confirmations() == 0
        assert peer.budget() == 255  # a failed scoped attempt is not refunded
        rx.host.failure = None
        assert rx.runtime.resume().reopened
        assert (await send(rx, peer, "again", goal_id=goal_id)).status == "goal_not_authorized"
        assert rx.host.submitted == []
        assert_accounted(rx, all_final=True)


async def test_case7_a_bound_peers_turn_may_complete_the_goal_but_not_cancel_it(
    locations: Locations,
) -> None:
    async with running_receiver(locations) as rx, peer_session(rx, "helper") as peer:
        goal_id = await start_goal(rx, [peer])
        report = await send(rx, peer, "done: please complete the goal", goal_id=goal_id)
        assert report.status == "submitted"
        # The turn this message opens: its authority is what admission submitted.
        claim = opening_claim(rx, report.message_id or "", peer.instance_id)
        assert claim is not None
        assert (claim.goal_id, claim.sender) == (goal_id, (peer.instance_id, peer.session_id))
        scoped_turn = Authority(AuthorityKind.PEER_TURN, goal_id=claim.goal_id, sender=claim.sender)
        with pytest.raises(GoalError) as refused:
            rx.runtime.goal_cancel(goal_id, authority=scoped_turn)
        assert refused.value.code is GoalErrorCode.NOT_AUTHORIZED
        with pytest.raises(GoalError) as refused:
            await rx.runtime.goal_bind(goal_id, [peer.instance_id], authority=lambda: scoped_turn)
        assert refused.value.code is GoalErrorCode.NOT_AUTHORIZED
        # A cancelled scoped turn may not complete either.
        cancelled = Authority(
            AuthorityKind.PEER_TURN, cancelled=True, goal_id=goal_id, sender=claim.sender
        )
        with pytest.raises(GoalError):
            rx.runtime.goal_complete(goal_id, authority=cancelled)

        assert rx.runtime.goal_complete(goal_id, authority=scoped_turn) == goal_id
        assert rx.runtime.goal_view().last_end == GoalEnd(goal_id, RevokeReason.COMPLETED)
        rx.turns.settle_submissions()
        late = await send(rx, peer, "one more step", goal_id=goal_id)
        assert late.status == "goal_not_authorized"
        assert_accounted(rx, all_final=True)


async def test_a_cwd_change_ends_the_goal_and_drops_its_queued_messages(
    locations: Locations,
) -> None:
    # Our choice where the reference leaves the host stuck (goal-scoped-v1 §1.6 "code-derived and
    # untested"): the goal's scope no longer holds, so the goal ends rather than lingering unusable.
    async with running_receiver(locations) as rx, peer_session(rx, "helper") as peer:
        goal_id = await start_goal(rx, [peer])
        rx.turns.user_turn()
        queued = await send(rx, peer, "queued before the move", goal_id=goal_id)
        assert queued.status == "queued"
        rx.host.cwd = "/home/dev/elsewhere"
        rx.runtime.on_session_info_changed()
        assert rx.runtime.goal_view().last_end == GoalEnd(goal_id, RevokeReason.SCOPE_CHANGED)
        assert row_state(rx, peer.instance_id, queued.message_id) == "dropped_goal_revoked"
        assert not rx.snapshot().stopped  # not a latch: the inbox stays open
        rx.turns.end(TurnEnding.STOP)
        late = await send(rx, peer, "after the move", goal_id=goal_id)
        assert late.status == "goal_not_authorized"
        assert rx.host.calls == []
        assert_accounted(rx, all_final=True)
