"""What ``/cross-session-status --json`` shows of goals: the goal view of goal-scoped-v1 §1.1
(``goalId``, ``objective``, ``owner``, ``peerIds``), how the last goal ended, and the sender's
confirmations. Read from real runtimes, through the same function the command uses, and as JSON
text."""

from __future__ import annotations

import json

import pytest

from pi_cross_session._internal.plugin.commands import HostReport, status, status_data
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.security.goals import USER_TURN
from tests.goals.kit import OBJECTIVE, peer_session, send, start_goal
from tests.support.wire_session import assert_accounted, running_receiver

pytestmark = pytest.mark.anyio


async def test_status_json_shows_the_goal_its_end_and_the_senders_confirmations(
    locations: Locations,
) -> None:
    async with running_receiver(locations) as rx, peer_session(rx, "helper") as peer:
        before = status_data(rx.runtime, HostReport())
        assert (before["goal"], before["lastGoalEnd"], before["goalConfirmations"]) == (
            {"goalId": None},
            None,
            0,
        )

        goal_id = await start_goal(rx, [peer])
        identity = rx.runtime.identity
        assert identity is not None
        data = status_data(rx.runtime, HostReport())
        goal = data["goal"]
        assert {k: goal[k] for k in ("goalId", "objective", "owner", "peerIds")} == {
            "goalId": goal_id,
            "objective": OBJECTIVE,
            "owner": {
                "sessionId": identity.session_id,
                "instanceId": identity.instance_id,
                "cwd": rx.host.cwd,
            },
            "peerIds": [peer.instance_id],
        }
        assert isinstance(goal["taskOwnership"], str)
        assert data["lastGoalEnd"] is None

        # The sender's side: one confirmed (receiver, goal) pair after a scoped receipt.
        assert (await send(rx, peer, "scoped", goal_id=goal_id)).status == "submitted"
        rx.turns.settle_submissions()
        assert status_data(peer.runtime, HostReport())["goalConfirmations"] == 1
        assert status_data(peer.runtime, HostReport())["goal"] == {"goalId": None}

        rx.runtime.goal_complete(goal_id, authority=USER_TURN)
        after = json.loads(status(rx.runtime, "--json", HostReport()))
        assert after["goal"] == {"goalId": None}
        assert after["lastGoalEnd"] == {"goalId": goal_id, "reason": "completed"}
        assert after["goalConfirmations"] == 0
        assert after["remainingBudget"] == 256  # the scoped message cost the receiver nothing
        assert [m["state"] for m in after["messages"]] == ["submitted"]
        assert_accounted(rx, all_final=True)


async def test_status_json_after_stop_keeps_the_last_goal_end(locations: Locations) -> None:
    async with running_receiver(locations) as rx:
        goal_id = await start_goal(rx)
        await rx.runtime.stop()
        data = status_data(rx.runtime, HostReport())
        assert data["running"] is False
        assert data["goal"] == {"goalId": None}
        assert data["lastGoalEnd"] == {"goalId": goal_id, "reason": "shutdown"}
        assert data["goalConfirmations"] == 0
