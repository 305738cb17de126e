"""One tool call judged as a host adapter asks it (security/call_gate.py), as a table.

The gate's own rules have their tables (``tests/goals/test_gate_goals.py``); these rows are what
the call gate adds around them: delegated work and ``peer_goal``, the running turn's goal view,
noting a task call, and failing closed."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from pi_cross_session._internal.security.call_gate import CallJudgement, fail_closed, judge_call
from pi_cross_session._internal.security.gate import DEFAULT_POLICY
from pi_cross_session._internal.security.goals import (
    USER_TURN,
    Goals,
    Member,
    Scope,
    TaskHandle,
    TaskKind,
)
from pi_cross_session._internal.security.provenance import (
    PeerClaim,
    Provenance,
    TurnAuthority,
    TurnFacts,
)

OWNER = Scope(session_id="session-owner", instance_id="f" * 32, cwd="/home/dev/project")
ALICE = Member("a" * 32, "session-alice")
USER = TurnAuthority(Provenance.USER)
PEER = TurnAuthority(Provenance.PEER)
UNKNOWN = TurnAuthority(Provenance.UNKNOWN)


def goals_with_alice() -> tuple[Goals, str]:
    numbers = itertools.count(1)
    goals = Goals(OWNER, new_id=lambda: f"goal-{next(numbers)}")
    goal_id = goals.start("ship the parser", authority=USER_TURN).goal_id
    assert goal_id is not None
    goals.bind(goal_id, [ALICE], tasks=[TaskHandle(TaskKind.RUN, "run-own")], authority=USER_TURN)
    return goals, goal_id


def user_facts() -> TurnFacts:
    return TurnFacts(Provenance.USER, False, frozenset(), frozenset())


def alice_facts(goal_id: str) -> TurnFacts:
    claim = PeerClaim(goal_id, (ALICE.instance_id, ALICE.session_id))
    return TurnFacts(Provenance.PEER, False, frozenset({claim}), frozenset())


def judge(
    tool: str,
    arguments: dict[str, Any],
    *,
    authority: TurnAuthority,
    own_loop: bool = True,
    scoped: bool = False,
    with_goal: bool = True,
) -> CallJudgement:
    goals, goal_id = goals_with_alice()
    facts = alice_facts(goal_id) if scoped else (user_facts() if authority is USER else None)
    return judge_call(
        tool_name=tool,
        arguments={k: (goal_id if v == "GOAL" else v) for k, v in arguments.items()},
        own_loop=own_loop,
        authority=authority,
        facts=facts,
        goals=goals if with_goal else None,
        policy=DEFAULT_POLICY,
    )


#: name: (tool, arguments, authority, own loop, scoped to the goal, allowed, notes a task)
ROWS: dict[str, tuple[str, dict[str, Any], TurnAuthority, bool, bool, bool, bool]] = {
    "a user turn creates a task of the active goal, noted": (
        "workflow",
        {"script": "s"},
        USER,
        True,
        False,
        True,
        True,
    ),
    "a user turn's ungated call, not noted": (
        "read",
        {"path": "x"},
        USER,
        True,
        False,
        True,
        False,
    ),
    "a user turn's delegated work may not manage the goal": (
        "peer_goal",
        {"action": "complete", "goalId": "GOAL"},
        USER,
        False,
        False,
        False,
        False,
    ),
    "delegated work may read the goal": (
        "peer_goal",
        {"action": "status"},
        USER,
        False,
        False,
        True,
        False,
    ),
    "the user's own turn manages it": (
        "peer_goal",
        {"action": "complete", "goalId": "GOAL"},
        USER,
        True,
        False,
        True,
        False,
    ),
    "an unscoped peer turn may not create a task": (
        "workflow",
        {"script": "s"},
        PEER,
        True,
        False,
        False,
        False,
    ),
    "a peer turn scoped by a member gets the goal's grant, and the call is noted": (
        "workflow",
        {"script": "s"},
        PEER,
        True,
        True,
        True,
        True,
    ),
    "the grant does not reach another tool": (
        "set_config",
        {},
        PEER,
        True,
        True,
        False,
        False,
    ),
    "a turn nobody can vouch for is restricted": (
        "Agent",
        {"prompt": "p"},
        UNKNOWN,
        True,
        False,
        False,
        False,
    ),
}


@pytest.mark.parametrize("name", sorted(ROWS))
def test_a_call_is_judged_as_the_table_says(name: str) -> None:
    tool, arguments, authority, own_loop, scoped, allowed, notes = ROWS[name]
    judgement = judge(tool, arguments, authority=authority, own_loop=own_loop, scoped=scoped)
    assert (judgement.allowed, judgement.notes_task) == (allowed, notes), judgement
    assert (judgement.reason is None) == allowed


def test_without_an_active_goal_nothing_is_noted() -> None:
    judgement = judge("workflow", {"script": "s"}, authority=USER, with_goal=False)
    assert (judgement.allowed, judgement.notes_task) == (True, False)


@pytest.mark.parametrize(
    ("authority", "tool", "blocked"),
    [
        (PEER, "workflow", True),
        (UNKNOWN, "Agent", True),
        (PEER, "read", False),
        (USER, "workflow", False),
        (TurnAuthority(Provenance.USER, cancelled=True), "workflow", True),
    ],
)
def test_a_call_that_could_not_be_judged_fails_closed(
    authority: TurnAuthority, tool: str, blocked: bool
) -> None:
    judgement = fail_closed(authority, tool, DEFAULT_POLICY)
    assert judgement.allowed is not blocked
    assert (judgement.reason is not None) == blocked
