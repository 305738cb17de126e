"""security/gate.py under a goal grant (goal-scoped-v1 §3): what a goal-scoped turn may do.

The provenance table and the policy's name and path rules are tested in the host suite; here only
what the goal feature adds: ``goal_bound`` turns, :meth:`GatePolicy.grant_allows`,
``decide(..., grant=)``, the ``peer_goal`` classification, and the ledger's opening facts.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from pi_cross_session._internal.security.gate import (
    ALLOW,
    Category,
    GatePolicy,
    GoalGrant,
    Provenance,
    TurnAuthority,
    block_reason,
    decide,
)
from pi_cross_session._internal.security.goals import TaskHandle, TaskKind
from pi_cross_session._internal.security.provenance import PeerClaim, TurnFacts
from pi_cross_session._internal.security.task_rules import DEFAULT_TASK_RULES, TaskToolRule
from tests.support.turn_driver import TurnDriver

GOAL = "goal-1"
OTHER_GOAL = "goal-0"
OWNERS: Mapping[TaskHandle, str] = {
    TaskHandle(TaskKind.RUN, "run-own"): GOAL,
    TaskHandle(TaskKind.AGENT, "agent-own"): GOAL,
    TaskHandle(TaskKind.RUN, "run-foreign"): OTHER_GOAL,
    TaskHandle(TaskKind.AGENT, "agent-foreign"): OTHER_GOAL,
}
GRANT = GoalGrant(GOAL, OWNERS.get)
POLICY = GatePolicy()

PEER = TurnAuthority(Provenance.PEER, goal_bound=True)
NOTIFIED = TurnAuthority(Provenance.NOTIFICATION, goal_bound=True)
UNSCOPED_PEER = TurnAuthority(Provenance.PEER)
UNKNOWN = TurnAuthority(Provenance.UNKNOWN)

Call = tuple[str, dict[str, object]]


def mesh_call(action: str, run_id: str) -> Call:
    return ("mesh", {"action": action, "runId": run_id})


#: Calls a turn scoped to ``GOAL`` may make: create a task, drive an owned one, complete the goal.
GRANTED: list[Call] = [
    ("workflow", {"script": "fan out"}),
    ("workflow", {"resume_from_run_id": None}),
    ("workflow", {"resume_from_run_id": "run-own"}),
    ("Agent", {"prompt": "p"}),
    ("Agent", {"prompt": "p", "schedule": None}),
    ("Agent", {"resume": "agent-own"}),
    ("steer_subagent", {"agent_id": "agent-own"}),
    ("send_subagent", {"agent_id": "agent-own", "message": "m"}),
    ("mesh", {"action": "run", "plan": "p"}),
    *(
        mesh_call(action, "run-own")
        for action in (
            "resume",
            "retry_failed",
            "steer",
            "cancel",
            "pause",
            "message_send",
            "message_broadcast",
            "growth_decide",
        )
    ),
    ("peer_goal", {"action": "complete", "goalId": GOAL}),
]

#: Gated calls the grant never covers.
REFUSED: list[Call] = [
    ("workflow", {"resume_from_run_id": "run-foreign"}),
    ("workflow", {"resume_from_run_id": "run-unowned"}),
    ("workflow", {"resume_from_run_id": "bad id"}),
    ("workflow", {"resume_from_run_id": 7}),
    ("workflow", {"resume_from_run_id": "agent-own"}),  # an agent's id is not a run's
    ("Agent", {"prompt": "p", "schedule": "daily"}),
    ("Agent", {"resume": "agent-own", "schedule": "daily"}),
    ("Agent", {"resume": "agent-foreign"}),
    ("Agent", {"resume": "agent-unowned"}),
    ("Agent", {"resume": ["agent-own"]}),
    ("steer_subagent", {"agent_id": "agent-foreign"}),
    ("steer_subagent", {}),
    ("send_subagent", {"agent_id": "agent-unowned"}),
    ("agent", {"prompt": "p"}),
    ("subagent", {"prompt": "p"}),
    ("set_config", {"key": "k", "value": "v"}),
    ("set_active_tools", {"tools": ["read"]}),
    ("send_user_message", {"text": "hi"}),
    ("goal_update", {"plan": "p"}),
    ("goal_complete", {}),
    ("mesh", {"action": "resume", "runId": "run-foreign"}),
    ("mesh", {"action": "cancel", "runId": "run-unowned"}),
    ("mesh", {"action": "steer"}),
    ("mesh", {"action": "continue", "runId": "run-own"}),
    ("mesh", {"action": "recover", "runId": "run-own"}),
    ("mesh", {"action": "bridge_send"}),
    ("mesh", {}),
    ("mesh_control", {"action": "grow"}),
    ("edit", {"path": "AGENTS.md", "text": "x"}),
    ("write", {"path": ".pi/settings.json", "text": "x"}),
    ("peer_goal", {"action": "complete", "goalId": OTHER_GOAL}),
    ("peer_goal", {"action": "complete"}),
    ("peer_goal", {"action": "complete", "goalId": GOAL.upper()}),
    ("peer_goal", {"action": "complete", "goalId": f" {GOAL}"}),
    ("peer_goal", {"action": "start", "objective": "widen it"}),
    ("peer_goal", {"action": "bind", "goalId": GOAL, "peerIds": ["a" * 32]}),
    ("peer_goal", {"action": "unbind", "goalId": GOAL, "peerIds": ["a" * 32]}),
    ("peer_goal", {"action": "cancel", "goalId": GOAL}),
    ("peer_goal", {"goalId": GOAL}),
]

#: Calls no restricted turn is refused: not gated at all.
UNGATED: list[Call] = [
    ("read", {"path": "README.md"}),
    ("grep", {"pattern": "anything"}),
    ("edit", {"path": "src/x.py", "text": "x"}),
    ("peer_goal", {"action": "status"}),
    ("mesh", {"action": "status"}),
    ("mesh", {"action": "list"}),
    ("mesh_control", {"action": "list"}),
    ("send_pi_message", {"to": "x", "text": "y"}),
]

ALL_CALLS = GRANTED + REFUSED + UNGATED


def label(call: Call) -> str:
    return f"{call[0]}:{sorted(call[1].items())!r}"


# -- unrestricted turns ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "turn",
    [
        TurnAuthority(Provenance.USER),
        TurnAuthority(Provenance.USER, goal_bound=True),
        TurnAuthority(Provenance.NOTIFICATION),
    ],
    ids=["user", "user goal-bound", "unscoped notification"],
)
@pytest.mark.parametrize("call", ALL_CALLS, ids=label)
def test_unrestricted_turns_are_never_blocked(turn: TurnAuthority, call: Call) -> None:
    name, arguments = call
    assert not turn.restricted
    assert decide(turn, name, arguments, grant=None) is ALLOW
    assert decide(turn, name, arguments, grant=GoalGrant("goal-x", lambda _: None)) is ALLOW


@pytest.mark.parametrize(
    ("turn", "restricted"),
    [
        (TurnAuthority(Provenance.NOTIFICATION, goal_bound=True), True),
        (TurnAuthority(Provenance.NOTIFICATION, cancelled=True), True),
        (TurnAuthority(Provenance.USER, goal_bound=True), False),
        (TurnAuthority(Provenance.USER, cancelled=True, goal_bound=True), True),
        (TurnAuthority(Provenance.PEER, goal_bound=True), True),
        (TurnAuthority(Provenance.UNKNOWN, goal_bound=True), True),
    ],
)
def test_goal_bound_restricts_a_notification_turn_only(
    turn: TurnAuthority, restricted: bool
) -> None:
    assert turn.restricted is restricted


# -- restricted turns with the grant ---------------------------------------------------------------


@pytest.mark.parametrize("turn", [PEER, NOTIFIED], ids=["peer", "notification"])
@pytest.mark.parametrize("call", GRANTED, ids=label)
def test_the_grant_allows_creating_and_driving_owned_tasks(turn: TurnAuthority, call: Call) -> None:
    name, arguments = call
    assert POLICY.grant_allows(GRANT, name, arguments)
    assert decide(turn, name, arguments, grant=GRANT) is ALLOW
    # Without the grant, the same call is blocked.
    assert not decide(turn, name, arguments).allowed


@pytest.mark.parametrize("turn", [PEER, NOTIFIED], ids=["peer", "notification"])
@pytest.mark.parametrize("call", REFUSED, ids=label)
def test_the_grant_covers_nothing_else(turn: TurnAuthority, call: Call) -> None:
    name, arguments = call
    assert POLICY.classify(name, arguments) is not None
    assert not POLICY.grant_allows(GRANT, name, arguments)
    verdict = decide(turn, name, arguments, grant=GRANT)
    assert not verdict.allowed
    assert verdict.category is POLICY.classify(name, arguments)


@pytest.mark.parametrize("turn", [PEER, UNSCOPED_PEER, UNKNOWN], ids=["scoped", "peer", "unknown"])
@pytest.mark.parametrize("call", UNGATED, ids=label)
def test_ungated_calls_pass_any_restricted_turn(turn: TurnAuthority, call: Call) -> None:
    name, arguments = call
    assert POLICY.classify(name, arguments) is None
    assert decide(turn, name, arguments) is ALLOW
    assert decide(turn, name, arguments, grant=GRANT) is ALLOW


@pytest.mark.parametrize(
    "turn",
    [
        TurnAuthority(Provenance.PEER, cancelled=True, goal_bound=True),
        TurnAuthority(Provenance.NOTIFICATION, cancelled=True, goal_bound=True),
        TurnAuthority(Provenance.USER, cancelled=True),
    ],
    ids=["peer", "notification", "user"],
)
@pytest.mark.parametrize("call", GRANTED, ids=label)
def test_a_cancelled_turn_never_gets_the_grant(turn: TurnAuthority, call: Call) -> None:
    name, arguments = call
    verdict = decide(turn, name, arguments, grant=GRANT)
    assert not verdict.allowed
    assert verdict.reason is not None
    assert "cancelled" in verdict.reason


def test_the_grant_is_for_its_own_goal_only() -> None:
    other = GoalGrant(OTHER_GOAL, OWNERS.get)
    assert POLICY.grant_allows(other, "mesh", {"action": "resume", "runId": "run-foreign"})
    assert not POLICY.grant_allows(other, "mesh", {"action": "resume", "runId": "run-own"})
    assert not POLICY.grant_allows(other, "peer_goal", {"action": "complete", "goalId": GOAL})


def test_no_tool_input_at_all() -> None:
    assert POLICY.grant_allows(GRANT, "workflow", None)
    assert POLICY.grant_allows(GRANT, "Agent", None)
    assert not POLICY.grant_allows(GRANT, "steer_subagent", None)
    assert not POLICY.grant_allows(GRANT, "peer_goal", None)
    assert not POLICY.grant_allows(GRANT, "mesh", None)


@pytest.mark.parametrize(
    "category", [Category.SETTINGS, Category.ACT_AS_USER, Category.TASKS, Category.OTHER]
)
def test_a_task_rule_never_lends_a_non_delegate_tool_the_grant(category: Category) -> None:
    rules = {**DEFAULT_TASK_RULES, ("deploy", None): TaskToolRule(TaskKind.RUN, creates=True)}
    policy = GatePolicy(task_rules=rules).with_tools(add=["deploy"], category=category)
    assert not policy.grant_allows(GRANT, "deploy", {})
    assert not decide(PEER, "deploy", {}, policy=policy, grant=GRANT).allowed


def test_a_task_rule_for_an_ungated_delegate_name_is_granted() -> None:
    rules = {**DEFAULT_TASK_RULES, ("spawn", None): TaskToolRule(TaskKind.AGENT, creates=True)}
    policy = GatePolicy(task_rules=rules).with_tools(add=["spawn"], category=Category.DELEGATE)
    assert decide(PEER, "spawn", {}, policy=policy, grant=GRANT) is ALLOW


def test_a_grant_never_applies_to_a_task_rule_without_creation_or_handle() -> None:
    rules = {**DEFAULT_TASK_RULES, ("spawn", None): TaskToolRule(TaskKind.AGENT)}
    policy = GatePolicy(task_rules=rules).with_tools(add=["spawn"], category=Category.DELEGATE)
    assert not decide(PEER, "spawn", {}, policy=policy, grant=GRANT).allowed


# -- peer_goal classification ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "arguments",
    [
        {"action": "start"},
        {"action": "bind"},
        {"action": "unbind"},
        {"action": "complete"},
        {"action": "cancel"},
        {"action": "inspect"},
        {"action": "STATUS"},
        {"action": None},
        {"action": 7},
        {},
    ],
)
def test_peer_goal_other_than_status_is_a_tasks_call(arguments: dict[str, object]) -> None:
    assert POLICY.classify("peer_goal", arguments) is Category.TASKS
    verdict = decide(UNSCOPED_PEER, "peer_goal", arguments)
    assert not verdict.allowed
    assert verdict.category is Category.TASKS


def test_peer_goal_status_is_not_gated() -> None:
    assert POLICY.classify("peer_goal", {"action": "status"}) is None


@pytest.mark.parametrize(
    ("tool", "arguments", "category"),
    [
        ("mesh", {"action": ["run"]}, Category.DELEGATE),
        ("mesh", {"action": {"status": 1}}, Category.DELEGATE),
        ("peer_goal", {"action": {"complete": GOAL}}, Category.TASKS),
        ("peer_goal", {"action": ["status"]}, Category.TASKS),
    ],
)
def test_a_malformed_action_is_gated_never_raised(
    tool: str, arguments: dict[str, object], category: Category
) -> None:
    # The host lets a call through when its gate raises for a tool not gated by name: the
    # policy must judge a malformed action itself, as the riskiest thing the tool can do.
    assert POLICY.classify(tool, arguments) is category
    assert not decide(UNSCOPED_PEER, tool, arguments).allowed
    assert not POLICY.grant_allows(GRANT, tool, arguments)
    assert not decide(PEER, tool, arguments, grant=GRANT).allowed


def test_a_malformed_mesh_control_action_is_gated() -> None:
    arguments: dict[str, object] = {"action": ["grow"]}
    assert POLICY.classify("mesh_control", arguments) is Category.DELEGATE
    assert not decide(UNSCOPED_PEER, "mesh_control", arguments).allowed


# -- block reasons ---------------------------------------------------------------------------------


def test_the_block_reason_names_the_goal_for_a_goal_bound_turn() -> None:
    for turn in (PEER, NOTIFIED):
        verdict = decide(turn, "set_config", {}, grant=GRANT)
        assert verdict.reason is not None
        assert "goal" in verdict.reason
        assert "only while the goal is active" in verdict.reason
        assert "`set_config`" in verdict.reason
        assert verdict.reason == block_reason(turn, "set_config", Category.SETTINGS)


def test_an_unscoped_peer_turn_is_told_it_came_from_a_peer() -> None:
    reason = block_reason(UNSCOPED_PEER, "workflow", Category.DELEGATE)
    assert "another agent session" in reason
    assert "acts for a goal" not in reason


def test_cancellation_is_named_before_the_goal() -> None:
    turn = TurnAuthority(Provenance.PEER, cancelled=True, goal_bound=True)
    reason = block_reason(turn, "workflow", Category.DELEGATE)
    assert "cancelled" in reason
    assert "acts for a goal" not in reason


# -- the ledger's opening facts --------------------------------------------------------------------

ALICE_CLAIM = PeerClaim(GOAL, ("a" * 32, "session-alice"))
BOB_CLAIM = PeerClaim(None, ("b" * 32, "session-bob"))
RUN = TaskHandle(TaskKind.RUN, "run-own")
AGENT = TaskHandle(TaskKind.AGENT, "agent-own")


def test_no_facts_outside_a_turn() -> None:
    ledger = TurnDriver()
    assert ledger.facts is None
    assert not ledger.observe(Provenance.PEER, claim=ALICE_CLAIM, handles=[RUN])
    ledger.start()
    ledger.end()
    assert ledger.facts is None


def test_the_opening_collects_every_claim_and_handle() -> None:
    ledger = TurnDriver()
    ledger.start()
    assert ledger.observe(Provenance.NOTIFICATION, handles=[RUN])
    assert ledger.observe(Provenance.PEER, claim=ALICE_CLAIM)
    # Same provenance: the turn does not change, but what opened it is still collected.
    assert not ledger.observe(Provenance.PEER, claim=BOB_CLAIM, handles=[AGENT])
    assert ledger.facts == TurnFacts(
        Provenance.PEER, False, frozenset({ALICE_CLAIM, BOB_CLAIM}), frozenset({RUN, AGENT})
    )


def test_nothing_is_collected_after_the_opening_closed() -> None:
    ledger = TurnDriver()
    ledger.start(peer=True)
    ledger.observe(Provenance.PEER, claim=ALICE_CLAIM)
    ledger.close_opening()
    before = ledger.facts
    assert not ledger.observe(Provenance.PEER, claim=BOB_CLAIM)
    assert not ledger.observe(Provenance.NOTIFICATION, handles=[RUN])
    assert not ledger.observe(Provenance.USER)
    assert (
        ledger.facts
        == before
        == TurnFacts(Provenance.PEER, False, frozenset({ALICE_CLAIM}), frozenset())
    )


def test_a_new_turn_starts_with_no_facts_and_cancel_shows() -> None:
    ledger = TurnDriver()
    ledger.start()
    ledger.observe(Provenance.NOTIFICATION, handles=[RUN])
    ledger.close_opening()
    ledger.cancel()
    facts = ledger.facts
    assert facts is not None
    assert facts.cancelled
    ledger.end()
    ledger.start()
    assert ledger.facts == TurnFacts(Provenance.UNKNOWN, False, frozenset(), frozenset())


def test_the_ledger_authority_is_never_goal_bound() -> None:
    # Goal binding is the host's addition (from the goal view); the ledger only knows provenance.
    ledger = TurnDriver()
    ledger.start()
    ledger.observe(Provenance.NOTIFICATION, handles=[RUN])
    assert ledger.authority == TurnAuthority(Provenance.NOTIFICATION)
    assert not ledger.authority.goal_bound
