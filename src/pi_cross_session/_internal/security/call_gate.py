"""One tool call, judged: what a host adapter asks the gate, and what it does with the answer.

The rules themselves are :func:`~pi_cross_session._internal.security.gate.decide`'s; this module
puts together what they are fed for one call, so that an adapter only translates its host's event
into these arguments and the verdict back into its host's answer:

1. **Delegated work never manages a goal.** A call from outside the session's own loop (a
   workflow's sub-agent) to ``peer_goal`` with anything but a read-only action is blocked, whoever
   started the work: only this session's own turns may manage its goal.
2. **The goal view is the running turn's**, computed anew for every call (a goal that ended
   earlier in the turn grants nothing any more): the turn's goal authority, the grant it holds,
   and whether it names the active goal (then the turn is goal-bound).
3. **The gate decides** (:func:`~pi_cross_session._internal.security.gate.decide`); an allowed call
that
   may create one of the goal's tasks is noted before it runs.
4. **Failing closed**: when judging raised (a bug, or a host object we could not read), a
   restricted turn's gated tool is blocked and anything else passes (:func:`fail_closed`).

Pure: the caller passes the turn's authority and facts, the goals and the policy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from pi_cross_session._internal.security import goal_turns
from pi_cross_session._internal.security.gate import (
    PEER_GOAL_READ_ONLY_ACTIONS,
    PEER_GOAL_TOOL,
    Category,
    GatePolicy,
    block_reason,
    decide,
)
from pi_cross_session._internal.security.goals import Goals
from pi_cross_session._internal.security.provenance import TurnAuthority, TurnFacts
from pi_cross_session._internal.security.task_rules import rule_for


@dataclass(frozen=True, slots=True)
class CallJudgement:
    """The answer for one call: allowed, or blocked with the reason the model reads."""

    allowed: bool = True
    reason: str | None = None
    #: An allowed call that may create a task of the active goal: note it before it runs.
    notes_task: bool = False


def judge_call(
    *,
    tool_name: str,
    arguments: Mapping[str, Any],
    own_loop: bool,
    authority: TurnAuthority,
    facts: TurnFacts | None,
    goals: Goals | None,
    policy: GatePolicy,
) -> CallJudgement:
    """Judge one tool call (``arguments`` with the wire's field names) made in a turn of
    ``authority``, from the session's own loop or not, with the running turn's ``facts``."""
    if (
        not own_loop
        and tool_name == PEER_GOAL_TOOL
        and arguments.get("action") not in PEER_GOAL_READ_ONLY_ACTIONS
    ):
        return CallJudgement(False, block_reason(authority, tool_name, Category.TASKS))
    goal_authority = goal_turns.authority_of(facts, goals)
    grant = None if facts is None else goal_turns.grant_for(goal_authority, goals)
    if facts is not None and goal_turns.names_goal(goal_authority):
        authority = replace(authority, goal_bound=True)
    verdict = decide(authority, tool_name, arguments, policy=policy, grant=grant)
    if not verdict.allowed:
        return CallJudgement(False, verdict.reason)
    notes = (
        goals is not None
        and goals.active_id is not None
        and rule_for(policy.task_rules, tool_name, arguments) is not None
    )
    return CallJudgement(notes_task=notes)


def fail_closed(authority: TurnAuthority, tool_name: str, policy: GatePolicy) -> CallJudgement:
    """The answer when judging a call failed: a restricted turn's gated tool is blocked."""
    if authority.restricted and tool_name in policy.gated_names:
        return CallJudgement(False, block_reason(authority, tool_name, Category.OTHER))
    return CallJudgement()
