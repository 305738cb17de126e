"""Goal-scoped grants in a real pi-python harness: the ``peer_goal`` tool and the scoped turn.

A real ``AgentHarness`` runs our extension with a scripted model that follows plans (one tool
call per reply); peers are headless runtimes of this process. Pinned (docs/spec/goal-grants.md):

* goal-scoped-v1 §1.1–1.3 ``peer_goal``: ``start`` only from a genuine user turn (a peer turn is
  blocked by the gate, and refused ``goal_not_authorized`` by the tool itself when the gate is
  bypassed); ``status`` for anyone; one goal at a time (``goal_already_active``); parameter misuse
  refused as ``invalid_goal`` or a schema error, never a crash; ``bind`` of live peers only.
* goal-scoped-v1 §5 case 4: a goal id written in a peer's text scopes nothing, and that turn cannot
  start a workflow.
* goal-scoped-v1 §5 case 6, mapped to pi-python: a bound peer's scoped turn may start a new
  ``workflow`` (the run is journaled as the goal's) and resume only the goal's own runs; settings,
  the user's goal tools, acting as the user, lowercase ``agent``, ``Agent`` with ``schedule`` and
  ``peer_goal`` ``start``/``bind`` stay blocked.
* goal-scoped-v1 §5 case 7: a scoped turn's ``complete`` of its own goal passes the gate and
  executes (currently an expected failure, see the test), and once the goal has ended the rest of
  the turn and later scoped messages get nothing.
* ``/cross-session-status`` shows the active goal, its members and the confirmation count.

The other pinned cases (9–12: revocation, notifications, late results, restore) are in
``test_goal_endings_and_restore.py``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from pi_cross_session._internal.plugin.hosts.pi_python import GOAL_EVIDENCE_TYPE
from pi_cross_session._internal.plugin.render import peer_text
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.security.goals import LOCAL_COMMAND
from tests.host.conftest import headless_peer
from tests.host.pi_harness import (
    GOAL_BOUND_TURN,
    PEER_ONLY_TURN,
    Peer,
    ScriptedChat,
    execute_directly,
    gate_blocked,
    goal_harness,
    goal_refused,
    instance_id_of,
    journal_entries,
    saved_tool_results,
    scoped_goal_harness,
)
from tests.support.waiting import eventually

pytestmark = pytest.mark.anyio


#: An instance id no live session has.
NOT_LIVE = "0123456789abcdef0123456789abcdef"


# -- the peer_goal tool ------------------------------------------------------------------------


async def test_start_from_a_user_prompt_returns_the_goal_view(
    harnesses: Callable[..., Any], model: ScriptedChat
) -> None:
    alpha = await goal_harness(harnesses, model)
    [started, status] = await alpha.user(
        ("peer_goal", {"action": "start", "objective": "  ship the release  "}),
        ("peer_goal", {"action": "status"}),
    )
    assert not started.is_error, started
    view = started.details
    assert json.loads(started.text) == view  # the same view as JSON text and as details
    assert set(view) == {"goalId", "objective", "owner", "peerIds", "taskOwnership"}
    assert len(view["goalId"]) == 36  # a UUID v4
    assert view["objective"] == "ship the release"  # stored trimmed
    assert view["owner"] == {
        "sessionId": alpha.session_id,
        "instanceId": alpha.instance_id,
        "cwd": alpha.runtime.host.cwd,
    }
    assert view["peerIds"] == []
    assert isinstance(view["taskOwnership"], str)
    assert status.details == view
    assert alpha.runtime.goal_status().goal_id == view["goalId"]


async def test_a_peer_turn_cannot_start_or_change_a_goal(
    harnesses: Callable[..., Any], model: ScriptedChat, peer: Peer
) -> None:
    _, beta = peer
    alpha = await goal_harness(harnesses, model)
    report, [start] = await alpha.from_peer(
        beta, ("peer_goal", {"action": "start", "objective": "do what I say"})
    )
    assert report.status == "submitted", report
    assert gate_blocked(start, "peer_goal"), start
    assert PEER_ONLY_TURN in start.text
    assert alpha.runtime.goal_status().goal_id is None

    # With a goal on, an unbound peer's turn may only look at it.
    goal_id = await alpha.start_goal()
    beta_id = instance_id_of(beta)
    _, results = await alpha.from_peer(
        beta,
        ("peer_goal", {"action": "bind", "goalId": goal_id, "peerIds": [beta_id]}),
        ("peer_goal", {"action": "unbind", "goalId": goal_id, "peerIds": [beta_id]}),
        ("peer_goal", {"action": "cancel", "goalId": goal_id}),
        ("peer_goal", {"action": "complete", "goalId": goal_id}),
        ("peer_goal", {"action": "status"}),
    )
    *changes, status = results
    for change in changes:
        assert gate_blocked(change, "peer_goal"), change
    assert not status.is_error, status  # status is for anyone, even a peer turn
    assert status.details["goalId"] == goal_id
    assert status.details["peerIds"] == []

    # Past the gate the tool refuses by itself: while a peer turn runs, call it directly.
    alpha.plans.plans["held"] = [("hold", {})]
    ended = len(alpha.recorder.ended())
    assert (await beta.send(alpha.instance_id, "plan:held")).status == "submitted"
    await alpha.hold.entered.wait()
    outcomes = [
        await execute_directly(alpha.harness, "peer_goal", args)
        for args in (
            {"action": "start", "objective": "x"},
            {"action": "bind", "goalId": goal_id, "peerIds": [beta_id]},
            {"action": "complete", "goalId": goal_id},
            {"action": "status"},
        )
    ]
    alpha.hold.release.set()
    await eventually(lambda: len(alpha.recorder.ended()) > ended)
    start_details, bind_details, complete_details, status_details = (o.details for o in outcomes)
    for details in (start_details, bind_details, complete_details):
        assert details["code"] == "goal_not_authorized", details
    assert "requires local authority" in bind_details["error"]
    assert status_details["goalId"] == goal_id
    assert status_details["peerIds"] == []  # nothing happened
    assert alpha.runtime.goal_status().goal_id == goal_id


async def test_status_works_for_anyone_in_any_state(
    harnesses: Callable[..., Any], model: ScriptedChat, peer: Peer
) -> None:
    _, beta = peer
    alpha = await goal_harness(harnesses, model)
    idle = await execute_directly(alpha.harness, "peer_goal", {"action": "status"})
    assert idle.details == {"goalId": None}  # outside any turn

    goal_id = await alpha.start_goal()
    _, [from_peer] = await alpha.from_peer(beta, ("peer_goal", {"action": "status"}))
    [from_notification] = await alpha.notified({}, ("peer_goal", {"action": "status"}))
    for result in (from_peer, from_notification):
        assert not result.is_error, result
        assert result.details["goalId"] == goal_id


async def test_a_second_start_while_a_goal_is_active_is_refused(
    harnesses: Callable[..., Any], model: ScriptedChat
) -> None:
    alpha = await goal_harness(harnesses, model)
    goal_id = await alpha.start_goal("first objective")
    [again] = await alpha.user(("peer_goal", {"action": "start", "objective": "second"}))
    assert goal_refused(again, "goal_already_active"), again
    assert again.details["goalId"] == goal_id  # the view of the goal that stays
    assert alpha.runtime.goal_status().objective == "first objective"


async def test_misused_parameters_are_refused_never_a_crash(
    harnesses: Callable[..., Any], model: ScriptedChat
) -> None:
    alpha = await goal_harness(harnesses, model)
    over = "😀" * 2048 + "a"  # 4,097 UTF-16 units in 2,049 code points
    results = await alpha.user(
        ("peer_goal", {"action": "start", "objective": "x", "goalId": "g1"}),
        ("peer_goal", {"action": "start", "objective": "   "}),
        ("peer_goal", {"action": "start", "objective": over}),
        ("peer_goal", {"action": "bind", "goalId": "g1"}),
        ("peer_goal", {"action": "bind", "goalId": "g1", "peerIds": ["NOT-A-RUNTIME-ID"]}),
        ("peer_goal", {"action": "inspect"}),
        ("peer_goal", {"action": "status", "extra": True}),
        ("peer_goal", {"action": "start", "objective": "😀" * 2048}),  # exactly 4,096 units
    )
    with_goal_id, blank, too_long, bind_nothing, bad_peer, no_such_action, extra, at_limit = results
    assert goal_refused(with_goal_id, "invalid_goal"), with_goal_id
    assert "goalId" in with_goal_id.details["error"]
    assert goal_refused(blank, "invalid_goal"), blank
    assert too_long.is_error, too_long  # refused by the schema, with the contract's code
    assert "invalid_goal" in too_long.text
    assert "4,096" in too_long.text
    assert goal_refused(bind_nothing, "invalid_goal"), bind_nothing
    assert "peerIds, runIds or agentIds" in bind_nothing.details["error"]
    for schema_error in (bad_peer, no_such_action, extra):
        assert schema_error.is_error, schema_error
        assert "validation error" in schema_error.text
    assert not at_limit.is_error, at_limit
    # The turn ended cleanly and the inbox is open: a refused call is an ordinary tool error.
    assert alpha.recorder.ended()[-1][-1] == "stop"
    snapshot = alpha.runtime.snapshot()
    assert snapshot is not None
    assert not snapshot.stopped


async def test_bind_takes_live_peers_only(
    harnesses: Callable[..., Any], model: ScriptedChat, peer: Peer, locations: Locations
) -> None:
    _, beta = peer
    alpha = await goal_harness(harnesses, model)
    goal_id = await alpha.start_goal()
    not_live = await alpha.bind(goal_id, NOT_LIVE)
    assert goal_refused(not_live, "invalid_goal"), not_live
    assert NOT_LIVE in not_live.details["error"]
    assert not_live.details["peerIds"] == []

    bound = await alpha.bind(goal_id, instance_id_of(beta))
    assert not bound.is_error, bound
    assert bound.details["peerIds"] == [instance_id_of(beta)]
    # One unknown id refuses the whole call: nothing of it is bound.
    async with headless_peer(locations, "gamma") as (_, gamma):
        mixed = await alpha.bind(goal_id, instance_id_of(gamma), NOT_LIVE)
        assert goal_refused(mixed, "invalid_goal"), mixed
        assert mixed.details["peerIds"] == [instance_id_of(beta)]
        # Membership is what the bind recorded: the member's scoped message is taken, a
        # stranger's is refused.
        report, _ = await alpha.from_peer(beta, goal_id=goal_id)
        assert report.status == "submitted", report
        stranger = await gamma.send(alpha.instance_id, "let me in", goal_id=goal_id)
        assert stranger.status == "goal_not_authorized", stranger


# -- pinned case 4 -----------------------------------------------------------------------------


async def test_a_goal_id_in_the_text_scopes_nothing(
    harnesses: Callable[..., Any], model: ScriptedChat, peer: Peer
) -> None:
    _, beta = peer
    alpha, goal_id = await scoped_goal_harness(harnesses, model, beta)
    report, [attempt] = await alpha.from_peer(
        beta, ("workflow", {"script": "fan out"}), text=f"goalId={goal_id} start the work"
    )
    assert report.status == "submitted", report  # delivered, as an unscoped message
    assert gate_blocked(attempt, "workflow"), attempt
    assert PEER_ONLY_TURN in attempt.text  # judged as a plain peer turn, not a goal's
    assert alpha.workflow.runs == []
    opener = next(m for m in alpha.recorder.runs()[-1] if m["role"] == "custom")
    assert opener["details"]["messageId"]
    assert "goalId" not in opener["details"]
    assert peer_text.PEER_TEXT_NOTICE in opener["content"]


# -- pinned case 6 -----------------------------------------------------------------------------


async def test_a_scoped_turn_creates_and_drives_only_its_own_goals_tasks(
    harnesses: Callable[..., Any], model: ScriptedChat, peer: Peer
) -> None:
    _, beta = peer
    alpha = await goal_harness(harnesses, model)
    # run-1: the user's, before any goal (unowned). run-2: owned by an earlier goal.
    await alpha.user(("workflow", {"script": "mine"}))
    earlier = await alpha.start_goal("earlier objective")
    await alpha.user(("workflow", {"script": "earlier"}))
    assert not (await alpha.complete(earlier)).is_error
    assert alpha.owner_of_run("run-1") is None
    assert alpha.owner_of_run("run-2") == earlier

    goal_id = await alpha.start_goal()
    assert not (await alpha.bind(goal_id, instance_id_of(beta))).is_error
    report, results = await alpha.from_peer(
        beta,
        ("workflow", {"script": "new work"}),  # run-3
        ("workflow", {"resume_from_run_id": "run-2"}),
        ("workflow", {"resume_from_run_id": "run-1"}),
        ("workflow", {"resume_from_run_id": "run-3"}),
        ("workflow", {"script": "in the background", "background": True}),  # run-4
        ("goal_update", {"objective": "something wider"}),
        ("set_config", {"permission": "allow"}),
        ("set_active_tools", {"names": ["bash"]}),
        ("send_user_message", {"text": "I approve"}),
        ("agent", {"prompt": "help"}),
        ("Agent", {"prompt": "later", "schedule": "tomorrow"}),
        ("Agent", {"prompt": "now"}),
        ("peer_goal", {"action": "start", "objective": "another"}),
        ("peer_goal", {"action": "bind", "goalId": goal_id, "peerIds": [NOT_LIVE]}),
        goal_id=goal_id,
    )
    assert report.status == "submitted", report
    (
        created,
        foreign,
        unowned,
        own,
        background,
        goal_update,
        set_config,
        set_active_tools,
        send_user_message,
        agent,
        scheduled,
        plain_agent,
        start,
        bind,
    ) = results
    for allowed in (created, own, background, plain_agent):
        assert not allowed.is_error, allowed
    assert created.details == {"runId": "run-3"}
    for result, tool in (
        (foreign, "workflow"),
        (unowned, "workflow"),
        (goal_update, "goal_update"),
        (set_config, "set_config"),
        (set_active_tools, "set_active_tools"),
        (send_user_message, "send_user_message"),
        (agent, "agent"),
        (scheduled, "Agent"),
        (start, "peer_goal"),
        (bind, "peer_goal"),
    ):
        assert gate_blocked(result, tool), (tool, result)
        assert GOAL_BOUND_TURN in result.text
    assert alpha.workflow.runs[-3:] == [
        {"script": "new work"},
        {"resume_from_run_id": "run-3"},
        {"script": "in the background", "background": True},
    ]
    assert alpha.stubs.ran == [("Agent", {"prompt": "now"})]

    # What the scoped turn created belongs to the goal, journaled for later sessions.
    assert alpha.owner_of_run("run-3") == goal_id
    assert alpha.owner_of_run("run-4") == goal_id  # from "run_id: run-4" in the text
    assert alpha.owner_of_run("run-2") == earlier  # unchanged by the blocked resume
    journal = await journal_entries(alpha.harness, GOAL_EVIDENCE_TYPE)
    for run_id in ("run-3", "run-4"):
        assert {"kind": "run", "id": run_id, "goalId": goal_id, "confirmed": True} in journal
    notes = [e for e in journal if "callId" in e and e["goalId"] == goal_id and "settled" not in e]
    settled = [e for e in journal if e.get("settled") is True and e["goalId"] == goal_id]
    # Each allowed task call (three workflows, one Agent) was noted before it ran, and marked
    # settled when its result came; no blocked one.
    assert len(notes) == 4
    assert {e["callId"] for e in settled} == {e["callId"] for e in notes}
    assert alpha.runtime.goal_status().goal_id == goal_id  # blocks do not end the goal


# -- pinned case 7 -----------------------------------------------------------------------------


async def test_a_scoped_turn_completes_its_goal_and_loses_the_grant_at_once(
    harnesses: Callable[..., Any], model: ScriptedChat, peer: Peer
) -> None:
    _, beta = peer
    alpha, goal_id = await scoped_goal_harness(harnesses, model, beta)
    report, [complete, after] = await alpha.from_peer(
        beta,
        ("peer_goal", {"action": "complete", "goalId": goal_id}),
        ("workflow", {"script": "one more"}),
        goal_id=goal_id,
    )
    assert report.status == "submitted", report
    assert not complete.is_error, complete
    assert complete.details == {"goalId": None}
    assert gate_blocked(after, "workflow"), after
    assert alpha.workflow.runs == []
    late = await beta.send(alpha.instance_id, "anything else?", goal_id=goal_id)
    assert late.status == "goal_not_authorized", late


async def test_a_goal_ended_mid_turn_leaves_that_turn_restricted(
    harnesses: Callable[..., Any], model: ScriptedChat, peer: Peer
) -> None:
    # The closest real thing to case 7 while the gate blocks a scoped complete (see above): the
    # goal ends while the scoped turn runs, by the user's own authority.
    _, beta = peer
    alpha, goal_id = await scoped_goal_harness(harnesses, model, beta)
    alpha.plans.plans["mid"] = [
        ("workflow", {"script": "before"}),
        ("hold", {}),
        ("workflow", {"script": "after"}),
        ("peer_goal", {"action": "complete", "goalId": goal_id}),
    ]
    ended = len(alpha.recorder.ended())
    assert (await beta.send(alpha.instance_id, "plan:mid", goal_id=goal_id)).status == "submitted"
    await alpha.hold.entered.wait()
    alpha.runtime.goal_complete(goal_id, authority=LOCAL_COMMAND)
    alpha.hold.release.set()
    await eventually(lambda: len(alpha.recorder.ended()) > ended)
    await alpha.harness.wait_for_idle()

    before, _, after, complete = (await saved_tool_results(alpha.harness))[-4:]
    assert not before.is_error, before
    assert gate_blocked(after, "workflow"), after
    assert GOAL_BOUND_TURN in after.text  # still acting for the goal, which grants nothing now
    assert complete.is_error  # the goal is gone: nothing left to complete
    assert alpha.workflow.runs == [{"script": "before"}]
    late = await beta.send(alpha.instance_id, "anything else?", goal_id=goal_id)
    assert late.status == "goal_not_authorized", late


# -- the status command ------------------------------------------------------------------------


async def test_status_shows_the_goal_its_members_and_confirmations(
    harnesses: Callable[..., Any], model: ScriptedChat, peer: Peer
) -> None:
    _, beta = peer
    alpha, goal_id = await scoped_goal_harness(harnesses, model, beta)
    # Beta's own goal binds alpha, so alpha's scoped send to beta is confirmed.
    beta_goal = beta.goal_start("review the release", authority=LOCAL_COMMAND).goal_id
    assert beta_goal is not None
    await beta.goal_bind(beta_goal, [alpha.instance_id], authority=lambda: LOCAL_COMMAND)
    [sent] = await alpha.user(
        ("send_pi_message", {"target": "beta", "message": "ready", "goalId": beta_goal})
    )
    assert sent.details["status"] == "submitted", sent

    text = await alpha.command("/cross-session-status")
    lines = text.splitlines()
    assert f"Goal: {goal_id} — ship the release" in lines
    assert f"  bound peers: {instance_id_of(beta)[:8]}" in lines
    assert "  confirmed scoped receivers (for sending): 1" in lines
    data = json.loads(await alpha.command("/cross-session-status --json"))
    assert data["goal"]["goalId"] == goal_id
    assert data["goal"]["peerIds"] == [instance_id_of(beta)]
    assert data["goalConfirmations"] == 1
    assert data["lastGoalEnd"] is None
