"""Goal grants in a real pi-python harness: how goals end, notifications, late results, restore.

The same set-up as ``test_goal_tool_and_scoped_turns.py`` (a real ``AgentHarness``, our extension,
a scripted model following plans, headless peers). Pinned here (goal-scoped-v1 §1.6,
goal-scoped-v1 §3 and goal-scoped-v1 §5):

* case 9: an abort, an ``error`` stop and a reload each revoke the goal; the status then shows
  no goal and how the last one ended, ``/cross-session-resume`` brings nothing back, and the old
  goal id is refused (by the receiver, and by ``peer_goal``).
* case 10: a notification about a goal-owned run keeps the goal's scope (a new ``workflow`` is
  allowed, ``set_config`` and ``bind`` are blocked, a failed tool does not end the goal); after
  ``complete``, and under a fresh goal, the same notification gets no grant. A notification
  naming no goal-owned task stays unrestricted.
* case 11: a result that returns after its goal ended (complete, abort) is still that goal's, and
  a notification naming it is blocked under a new goal.
* case 12: a fresh session (a new harness on the same session journal) starts with no goal, a new
  goal cannot resume the old run, and ownership evidence is restored from the journal (currently
  an expected failure, as is keeping evidence when the extension is loaded again).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from pi_cross_session._internal.plugin.hosts.pi_python import GOAL_EVIDENCE_TYPE
from pi_cross_session._internal.plugin.runtime import SessionRuntime
from tests.host.pi_harness import (
    GOAL_BOUND_TURN,
    GoalHarness,
    Peer,
    ScriptedChat,
    gate_blocked,
    goal_activate,
    goal_harness,
    goal_refused,
    instance_id_of,
    journal_entries,
    scoped_goal_harness,
    took_over,
)
from tests.support.waiting import eventually

pytestmark = pytest.mark.anyio


async def assert_gone_for_good(
    alpha: GoalHarness, beta: SessionRuntime, goal_id: str, reason: str
) -> None:
    """The goal ended for ``reason``; status says so, resuming restores nothing, and the old id
    is refused by the receiver and by ``peer_goal``."""
    assert alpha.runtime.goal_status().goal_id is None
    status = (await alpha.command("/cross-session-status")).splitlines()
    assert "Goal: none" in status
    assert f"  last ended: {goal_id} ({reason})" in status
    assert (await alpha.command("/cross-session-resume")).startswith("Inbox reopened")
    assert alpha.runtime.goal_status().goal_id is None
    await assert_old_id_refused(alpha, beta, goal_id)
    [bind] = await alpha.user(
        ("peer_goal", {"action": "bind", "goalId": goal_id, "peerIds": [instance_id_of(beta)]}),
    )
    assert goal_refused(bind, "invalid_goal"), bind


async def assert_old_id_refused(alpha: GoalHarness, beta: SessionRuntime, goal_id: str) -> None:
    """No goal runs, and the ended ``goal_id`` is refused by the receiver and by ``peer_goal``."""
    assert alpha.runtime.goal_status().goal_id is None
    assert "Goal: none" in (await alpha.command("/cross-session-status")).splitlines()
    late = await beta.send(alpha.instance_id, "still on it?", goal_id=goal_id)
    assert late.status == "goal_not_authorized", late
    [complete] = await alpha.user(("peer_goal", {"action": "complete", "goalId": goal_id}))
    assert goal_refused(complete, "invalid_goal"), complete


# -- pinned case 9 -----------------------------------------------------------------------------


async def test_an_abort_in_a_scoped_turn_revokes_the_goal_for_good(
    harnesses: Callable[..., Any], model: ScriptedChat, peer: Peer
) -> None:
    _, beta = peer
    alpha, goal_id = await scoped_goal_harness(harnesses, model, beta)
    alpha.plans.plans["held"] = [("hold", {})]
    ended = len(alpha.recorder.ended())
    sent = await beta.send(alpha.instance_id, "plan:held", goal_id=goal_id)
    assert sent.status == "submitted", sent
    await alpha.hold.entered.wait()
    await alpha.harness.abort()
    await eventually(lambda: len(alpha.recorder.ended()) > ended)
    await alpha.harness.wait_for_idle()
    assert alpha.recorder.ended()[-1][-1] == "aborted"
    # Latched: until the user resumes, even the old goal's member is told the inbox stopped.
    stopped = await beta.send(alpha.instance_id, "hello?", goal_id=goal_id)
    assert stopped.status == "stopped", stopped
    await assert_gone_for_good(alpha, beta, goal_id, "latch")


async def test_an_error_stop_revokes_the_goal_for_good(
    harnesses: Callable[..., Any], model: ScriptedChat, peer: Peer
) -> None:
    _, beta = peer
    alpha, goal_id = await scoped_goal_harness(harnesses, model, beta)
    reply = await alpha.harness.prompt(alpha.plans.failure_marker)
    assert reply.stopReason == "error"
    await assert_gone_for_good(alpha, beta, goal_id, "unsafe_end")


async def test_loading_the_extension_again_revokes_the_goal(
    harnesses: Callable[..., Any], model: ScriptedChat, peer: Peer
) -> None:
    _, beta = peer
    alpha, goal_id = await scoped_goal_harness(harnesses, model, beta)
    old = alpha.runtime
    alpha.harness.load_extension(goal_activate)  # the host's reload: no session_start
    await eventually(lambda: old.identity is None)
    await eventually(lambda: took_over(alpha.session_id, old))
    assert alpha.runtime is not old
    end = old.goal_view().last_end  # the superseded runtime revoked it as it stopped
    assert end is not None
    assert (end.goal_id, end.reason) == (goal_id, "shutdown")
    # The new incarnation never knew the goal, so its status cannot name how it ended.
    await assert_old_id_refused(alpha, beta, goal_id)


async def test_a_new_incarnation_revokes_the_goal(
    harnesses: Callable[..., Any], model: ScriptedChat, peer: Peer
) -> None:
    _, beta = peer
    alpha, goal_id = await scoped_goal_harness(harnesses, model, beta)
    await alpha.runtime.reload()  # new instance id, fresh state, same session
    await assert_old_id_refused(alpha, beta, goal_id)


async def test_after_a_new_incarnation_status_names_the_goal_it_ended(
    harnesses: Callable[..., Any], model: ScriptedChat, peer: Peer
) -> None:
    _, beta = peer
    alpha, goal_id = await scoped_goal_harness(harnesses, model, beta)
    await alpha.runtime.reload()
    status = (await alpha.command("/cross-session-status")).splitlines()
    assert f"  last ended: {goal_id} (reload)" in status


# -- pinned case 10 ----------------------------------------------------------------------------


async def test_a_goal_owned_notification_keeps_goal_scope_only_while_the_goal_lives(
    harnesses: Callable[..., Any], model: ScriptedChat, peer: Peer
) -> None:
    _, beta = peer
    alpha, goal_id = await scoped_goal_harness(harnesses, model, beta)
    await alpha.user(("workflow", {"script": "first"}))  # run-1, the goal's
    assert alpha.owner_of_run("run-1") == goal_id

    results = await alpha.notified(
        {"runId": "run-1"},
        ("workflow", {"script": "next"}),  # run-2
        ("workflow", {"script": "flaky", "fail": True}),
        ("workflow", {"resume_from_run_id": "run-1"}),
        ("set_config", {"permission": "allow"}),
        ("peer_goal", {"action": "bind", "goalId": goal_id, "peerIds": [instance_id_of(beta)]}),
        ("peer_goal", {"action": "status"}),
    )
    created, failed, resumed, set_config, bind, status = results
    assert created.details == {"runId": "run-2"}
    assert alpha.owner_of_run("run-2") == goal_id
    assert failed.is_error
    assert not failed.text.startswith("Blocked")  # it ran, and failed
    assert not resumed.is_error, resumed
    assert gate_blocked(set_config, "set_config"), set_config
    assert gate_blocked(bind, "peer_goal"), bind
    assert GOAL_BOUND_TURN in bind.text
    assert status.details["goalId"] == goal_id  # a failed tool did not end the goal
    assert alpha.stubs.ran == []

    # Once the goal is complete, its notifications carry no grant, nor under a new goal.
    assert not (await alpha.complete(goal_id)).is_error
    [after_complete] = await alpha.notified({"runId": "run-1"}, ("workflow", {"script": "x"}))
    assert gate_blocked(after_complete, "workflow"), after_complete
    assert GOAL_BOUND_TURN in after_complete.text
    fresh = await alpha.start_goal("a fresh objective")
    await alpha.user(("workflow", {"script": "fresh"}))  # run-3, the fresh goal's
    assert alpha.owner_of_run("run-3") == fresh
    [old_run, old_settings] = await alpha.notified(
        {"runId": "run-1"}, ("workflow", {"script": "x"}), ("set_config", {})
    )
    assert gate_blocked(old_run, "workflow"), old_run
    assert gate_blocked(old_settings, "set_config"), old_settings
    # A notification naming the fresh goal's run and an old one is scoped to no goal at all.
    [mixed] = await alpha.notified(
        {"ids": ["mesh:run-3:1:1", "mesh:run-1:1:1"]}, ("workflow", {"script": "x"})
    )
    assert gate_blocked(mixed, "workflow"), mixed
    [own] = await alpha.notified({"runId": "run-3"}, ("workflow", {"script": "fresh again"}))
    assert not own.is_error, own
    assert [r.get("script") for r in alpha.workflow.runs] == [
        "first",
        "next",
        "flaky",
        None,  # the resume of run-1
        "fresh",
        "fresh again",
    ]


async def test_a_notification_naming_no_goal_task_stays_unrestricted(
    harnesses: Callable[..., Any], model: ScriptedChat, peer: Peer
) -> None:
    _, beta = peer
    alpha = await goal_harness(harnesses, model)
    goal_id = await alpha.start_goal()
    for details in ({"runId": "run-77"}, {}):
        results = await alpha.notified(
            details,
            ("workflow", {"script": "as before goals"}),
            ("set_config", {"permission": "allow"}),
            ("goal_update", {"objective": "the user's own goal tool"}),
        )
        assert not any(r.is_error for r in results), results
    assert [name for name, _ in alpha.stubs.ran] == ["set_config", "goal_update"] * 2
    # Trusted like the user: it may even bind peers to the active goal.
    [bind] = await alpha.notified(
        {}, ("peer_goal", {"action": "bind", "goalId": goal_id, "peerIds": [instance_id_of(beta)]})
    )
    assert not bind.is_error, bind
    assert bind.details["peerIds"] == [instance_id_of(beta)]
    # What it creates while a goal is active belongs to that goal, like any task call.
    assert alpha.owner_of_run("run-1") == goal_id


# -- pinned case 11 ----------------------------------------------------------------------------


async def test_a_result_returning_after_complete_is_still_the_old_goals(
    harnesses: Callable[..., Any], model: ScriptedChat
) -> None:
    alpha = await goal_harness(harnesses, model)
    goal_id = await alpha.start_goal()
    # One reply: the workflow (noted under the goal) runs while the goal is completed.
    turn = asyncio.ensure_future(
        alpha.user(
            (
                ("workflow", {"script": "long", "hold": True}),
                ("peer_goal", {"action": "complete", "goalId": goal_id}),
            )
        )
    )
    await alpha.workflow.entered.wait()
    await eventually(lambda: alpha.runtime.goal_status().goal_id is None)
    alpha.workflow.release.set()
    workflow, complete = await turn
    assert not complete.is_error, complete
    assert workflow.details == {"runId": "run-1"}
    assert alpha.owner_of_run("run-1") == goal_id  # evidence, not a grant
    journal = await journal_entries(alpha.harness, GOAL_EVIDENCE_TYPE)
    assert {"kind": "run", "id": "run-1", "goalId": goal_id, "confirmed": True} in journal

    await alpha.start_goal("a new objective")
    [late] = await alpha.notified({"runId": "run-1"}, ("workflow", {"script": "x"}))
    assert gate_blocked(late, "workflow"), late
    [unscoped] = await alpha.notified({"runId": "run-99"}, ("workflow", {"script": "y"}))
    assert not unscoped.is_error, unscoped


async def test_a_result_returning_after_an_abort_is_still_the_old_goals(
    harnesses: Callable[..., Any], model: ScriptedChat, peer: Peer
) -> None:
    _, beta = peer
    alpha, goal_id = await scoped_goal_harness(harnesses, model, beta)
    alpha.plans.plans["long"] = [("workflow", {"script": "long", "hold": True})]
    ended = len(alpha.recorder.ended())
    sent = await beta.send(alpha.instance_id, "plan:long", goal_id=goal_id)
    assert sent.status == "submitted", sent
    await alpha.workflow.entered.wait()
    await alpha.harness.abort()  # the workflow returns its run after the abort
    await eventually(lambda: len(alpha.recorder.ended()) > ended)
    await alpha.harness.wait_for_idle()
    assert alpha.runtime.goal_status().goal_id is None
    assert alpha.owner_of_run("run-1") == goal_id

    await alpha.command("/cross-session-resume")
    await alpha.start_goal("a new objective")
    [late] = await alpha.notified({"runId": "run-1"}, ("workflow", {"script": "x"}))
    assert gate_blocked(late, "workflow"), late


# -- pinned case 12 ----------------------------------------------------------------------------


async def reopened(
    harnesses: Callable[..., Any], model: ScriptedChat, beta: SessionRuntime
) -> tuple[GoalHarness, str]:
    """A session whose goal owned ``run-1``, closed and opened again in a new harness on the
    same session journal; returns the new harness and the old goal's id."""
    alpha, goal_id = await scoped_goal_harness(harnesses, model, beta)
    await alpha.user(("workflow", {"script": "first"}))
    assert alpha.owner_of_run("run-1") == goal_id
    session = alpha.harness.session
    await alpha.harness.close()
    return await goal_harness(harnesses, model, session=session), goal_id


async def test_a_fresh_session_starts_without_a_goal_and_cannot_resume_old_runs(
    harnesses: Callable[..., Any], model: ScriptedChat, peer: Peer
) -> None:
    _, beta = peer
    alpha, old_goal = await reopened(harnesses, model, beta)
    [status] = await alpha.user(("peer_goal", {"action": "status"}))
    assert status.details == {"goalId": None}
    # The evidence is in the journal the new harness reads.
    journal = await journal_entries(alpha.harness, GOAL_EVIDENCE_TYPE)
    assert {"kind": "run", "id": "run-1", "goalId": old_goal, "confirmed": True} in journal
    stale = await beta.send(alpha.instance_id, "back to work", goal_id=old_goal)
    assert stale.status == "goal_not_authorized", stale

    goal_id = await alpha.start_goal("a new objective")
    assert not (await alpha.bind(goal_id, instance_id_of(beta))).is_error
    _, [resume] = await alpha.from_peer(
        beta, ("workflow", {"resume_from_run_id": "run-1"}), goal_id=goal_id
    )
    assert gate_blocked(resume, "workflow"), resume
    assert alpha.workflow.runs == []  # this harness's helper never ran a workflow


async def test_a_fresh_session_restores_ownership_from_the_journal(
    harnesses: Callable[..., Any], model: ScriptedChat, peer: Peer
) -> None:
    _, beta = peer
    alpha, old_goal = await reopened(harnesses, model, beta)
    assert alpha.runtime.goal_status().goal_id is None
    assert alpha.owner_of_run("run-1") == old_goal
    await alpha.start_goal("a new objective")
    [old_run] = await alpha.notified({"runId": "run-1"}, ("workflow", {"script": "x"}))
    assert gate_blocked(old_run, "workflow"), old_run


async def test_loading_the_extension_again_keeps_ownership_evidence(
    harnesses: Callable[..., Any], model: ScriptedChat, peer: Peer
) -> None:
    _, beta = peer
    alpha, old_goal = await scoped_goal_harness(harnesses, model, beta)
    await alpha.user(("workflow", {"script": "first"}))
    old = alpha.runtime
    alpha.harness.load_extension(goal_activate)
    await eventually(lambda: old.identity is None)
    await eventually(lambda: took_over(alpha.session_id, old))
    assert alpha.owner_of_run("run-1") == old_goal
    await alpha.start_goal("a new objective")
    [old_run] = await alpha.notified({"runId": "run-1"}, ("workflow", {"script": "x"}))
    assert gate_blocked(old_run, "workflow"), old_run
