"""security/gate.py without a host: verdicts by provenance, the policy's rules, the ledger."""

from __future__ import annotations

import itertools

import pytest

from pi_cross_session._internal.security.gate import (
    DEFAULT_GATED_TOOLS,
    NO_TURN,
    Category,
    GatePolicy,
    Provenance,
    TurnAuthority,
    decide,
)
from tests.support.turn_driver import TurnDriver

SPEC_NAMES = (
    "Agent",
    "agent",
    "subagent",
    "steer_subagent",
    "send_subagent",
    "send_user_message",
    "set_active_tools",
    "set_config",
)
PI_PYTHON_NAMES = ("workflow", "goal_update", "goal_complete")
ORDINARY = ("bash", "read", "ls", "find", "grep", "list_pi", "send_pi_message", "hold")


@pytest.mark.parametrize(
    ("provenance", "cancelled", "restricted"),
    [
        (Provenance.USER, False, False),
        (Provenance.NOTIFICATION, False, False),
        (Provenance.PEER, False, True),
        (Provenance.UNKNOWN, False, True),
        *((p, True, True) for p in Provenance),
    ],
)
def test_which_turns_are_restricted(
    provenance: Provenance, cancelled: bool, restricted: bool
) -> None:
    turn = TurnAuthority(provenance, cancelled)
    assert turn.restricted is restricted
    verdict = decide(turn, "workflow", {})
    assert verdict.allowed is not restricted


def test_the_spec_names_and_pi_python_equivalents_are_gated_by_default() -> None:
    assert set(SPEC_NAMES) | set(PI_PYTHON_NAMES) == set(DEFAULT_GATED_TOOLS)
    peer = TurnAuthority(Provenance.PEER)
    for name in (*SPEC_NAMES, *PI_PYTHON_NAMES):
        assert not decide(peer, name).allowed, name
    for name in ORDINARY:
        assert decide(peer, name, {"command": "anything at all"}).allowed, name


def test_a_user_turn_is_never_restricted() -> None:
    user = TurnAuthority(Provenance.USER)
    for name in (*SPEC_NAMES, *PI_PYTHON_NAMES, "mesh", "mesh_control", "edit", "write"):
        args = {"action": "grow", "path": "AGENTS.md"}
        assert decide(user, name, args).allowed, name


def test_the_reason_names_the_tool_the_cause_and_the_way_out() -> None:
    peer = decide(TurnAuthority(Provenance.PEER), "subagent")
    assert peer.category is Category.DELEGATE
    assert peer.reason is not None
    assert peer.reason.startswith("Blocked by cross-session safety: `subagent` would start")
    assert "another agent session, not by your user" in peer.reason
    assert "Tell your user" in peer.reason
    unknown = decide(NO_TURN, "set_config").reason or ""
    assert "it is not known who started this turn" in unknown
    cancelled = decide(TurnAuthority(Provenance.USER, cancelled=True), "goal_complete").reason
    assert "this turn was cancelled" in (cancelled or "")


@pytest.mark.parametrize(
    ("action", "allowed"),
    [
        ("list_agents", True),
        ("status", True),
        ("message_ack", True),
        ("growth_list", True),
        ("spawn", False),
        ("continue", False),
        (None, False),
    ],
)
def test_mesh_actions(action: str | None, allowed: bool) -> None:
    peer = TurnAuthority(Provenance.PEER)
    assert decide(peer, "mesh", {"action": action}).allowed is allowed
    assert decide(peer, "mesh_control", {"action": action}).allowed


def test_mesh_control_grow_is_gated() -> None:
    assert not decide(TurnAuthority(Provenance.PEER), "mesh_control", {"action": "grow"}).allowed


PROTECTED_PATHS = (
    "AGENTS.md",
    "docs/../AGENTS.md",
    "sub/agents.MD",
    "CLAUDE.md",
    "AGENTS.override.md",
    ".pi-python/extensions/evil.py",
    "/home/u/.pi/agent/settings.json",
    "~/.pi-python/agent.toml",
    "/srv/pi-home/trust.json",
    "../pi-home/agent/trust.json",
)
ORDINARY_PATHS = ("src/app.py", "README.md", "docs/agents.txt", "notes/pi/plan.md", "~/x")


@pytest.mark.parametrize(
    ("tool", "path"), list(itertools.product(("edit", "write"), PROTECTED_PATHS))
)
def test_file_tools_may_not_touch_configuration_in_a_peer_turn(tool: str, path: str) -> None:
    policy = GatePolicy().with_protected_roots("/srv/pi-home", cwd="/srv/work")
    verdict = decide(TurnAuthority(Provenance.PEER), tool, {"path": path}, policy=policy)
    assert not verdict.allowed
    assert verdict.category is Category.CONFIG_FILE


@pytest.mark.parametrize(
    ("tool", "path"), list(itertools.product(("edit", "write"), ORDINARY_PATHS))
)
def test_file_tools_may_edit_ordinary_files_in_a_peer_turn(tool: str, path: str) -> None:
    policy = GatePolicy().with_protected_roots("/srv/pi-home", cwd="/srv/work")
    assert decide(TurnAuthority(Provenance.PEER), tool, {"path": path}, policy=policy).allowed


def test_the_set_is_configurable() -> None:
    policy = GatePolicy().with_tools(add=["deploy"], remove=["goal_update"])
    peer = TurnAuthority(Provenance.PEER)
    assert not decide(peer, "deploy", policy=policy).allowed
    assert decide(peer, "goal_update", policy=policy).allowed
    assert decide(peer, "deploy", policy=policy).category is Category.OTHER
    assert "deploy" in policy.gated_names
    # The default is untouched (policies are immutable).
    assert decide(peer, "goal_update").allowed is False


def test_the_ledger_learns_provenance_from_the_opening_only() -> None:
    ledger = TurnDriver()
    assert ledger.authority == NO_TURN
    ledger.start()
    assert ledger.authority.provenance is Provenance.UNKNOWN
    assert ledger.observe(Provenance.USER)
    assert not ledger.observe(Provenance.NOTIFICATION)  # never downgraded
    assert ledger.observe(Provenance.PEER)  # a peer message in the opening wins
    assert not ledger.observe(Provenance.USER)
    ledger.close_opening()
    assert ledger.authority == TurnAuthority(Provenance.PEER)
    ledger.end()

    ledger.start()
    ledger.observe(Provenance.USER)
    ledger.close_opening()
    assert not ledger.observe(Provenance.PEER)  # steered in mid-turn: no relabelling
    assert ledger.authority == TurnAuthority(Provenance.USER)
    ledger.cancel()
    assert ledger.authority.restricted
    ledger.end()
    assert ledger.authority == NO_TURN


def test_calls_from_outside_the_loop_are_judged_by_the_running_or_last_turn() -> None:
    ledger = TurnDriver()
    assert ledger.authority_for_call(own_loop=False) == TurnAuthority(Provenance.UNKNOWN)
    ledger.start()
    ledger.observe(Provenance.USER)
    ledger.cancel()
    ledger.end()
    # Between turns: the last turn's provenance, without its cancellation.
    assert ledger.authority_for_call(own_loop=False) == TurnAuthority(Provenance.USER)
    assert ledger.authority_for_call(own_loop=True) == NO_TURN
    ledger.start()
    ledger.observe(Provenance.PEER)
    assert ledger.authority_for_call(own_loop=False) == TurnAuthority(Provenance.PEER)


def test_a_turn_that_starts_while_our_submission_is_in_flight_is_a_peer_turn() -> None:
    ledger = TurnDriver()
    ledger.start(peer=True)
    assert not ledger.observe(Provenance.USER)  # the user's prompt that won the race
    ledger.close_opening()
    assert ledger.authority == TurnAuthority(Provenance.PEER)
