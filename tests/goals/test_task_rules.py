"""security/task_rules.py: which calls create or drive a task, and which task they name.

One rule per test: the rule lookup (action-specific before tool-wide), the handle a call names,
the arguments a grant never covers, the handle a result reports, and the handles a notification
names. Pure functions over plain data; the expected values are written out by hand.
"""

from __future__ import annotations

import re

import pytest

from pi_cross_session._internal.security.goals import TaskHandle, TaskKind
from pi_cross_session._internal.security.task_rules import (
    DEFAULT_TASK_RULES,
    TaskRules,
    TaskToolRule,
    created_handle,
    forbidden,
    named_handle,
    notification_handles,
    rule_for,
)

WIDE = TaskToolRule(TaskKind.RUN, handle_arg="id", creates=True)
SPECIFIC = TaskToolRule(TaskKind.AGENT, handle_arg="agent")
RULES: TaskRules = {("tool", None): WIDE, ("tool", "special"): SPECIFIC}

WORKFLOW = DEFAULT_TASK_RULES[("workflow", None)]
AGENT = DEFAULT_TASK_RULES[("Agent", None)]
STEER = DEFAULT_TASK_RULES[("steer_subagent", None)]
MESH_RUN = DEFAULT_TASK_RULES[("mesh", "run")]
MESH_RESUME = DEFAULT_TASK_RULES[("mesh", "resume")]

MAX_ID = "x" * 128
TOO_LONG = "x" * 129


def run(handle_id: str) -> TaskHandle:
    return TaskHandle(TaskKind.RUN, handle_id)


def agent(handle_id: str) -> TaskHandle:
    return TaskHandle(TaskKind.AGENT, handle_id)


# -- the default rules ---------------------------------------------------------------------------


def test_default_rules_cover_the_spec_table_and_the_workflow_tool() -> None:
    assert set(DEFAULT_TASK_RULES) == {
        ("workflow", None),
        ("Agent", None),
        ("steer_subagent", None),
        ("send_subagent", None),
        ("mesh", "run"),
        *(
            ("mesh", action)
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
    }


def test_mesh_continue_and_lowercase_agents_have_no_rule() -> None:
    # ``continue`` needs a continuation permit this implementation never issues.
    assert rule_for(DEFAULT_TASK_RULES, "mesh", {"action": "continue"}) is None
    assert rule_for(DEFAULT_TASK_RULES, "mesh", {"action": "recover"}) is None
    assert rule_for(DEFAULT_TASK_RULES, "mesh", {}) is None
    assert rule_for(DEFAULT_TASK_RULES, "agent", {}) is None
    assert rule_for(DEFAULT_TASK_RULES, "subagent", {}) is None


def test_default_rule_shapes() -> None:
    assert (WORKFLOW.kind, WORKFLOW.handle_arg, WORKFLOW.creates) == (
        TaskKind.RUN,
        "resume_from_run_id",
        True,
    )
    assert (AGENT.kind, AGENT.handle_arg, AGENT.creates) == (TaskKind.AGENT, "resume", True)
    assert AGENT.forbidden_args == frozenset({"schedule"})
    assert (STEER.handle_arg, STEER.creates) == ("agent_id", False)
    assert (MESH_RUN.handle_arg, MESH_RUN.creates) == (None, True)
    assert (MESH_RESUME.handle_arg, MESH_RESUME.creates) == ("runId", False)


# -- rule_for --------------------------------------------------------------------------------------


def test_rule_for_prefers_the_action_specific_rule() -> None:
    assert rule_for(RULES, "tool", {"action": "special"}) is SPECIFIC


@pytest.mark.parametrize(
    "tool_input",
    [None, {}, {"action": "other"}, {"action": None}, {"action": 7}, {"action": ["special"]}],
)
def test_rule_for_falls_back_to_the_tool_wide_rule(tool_input: dict[str, object] | None) -> None:
    assert rule_for(RULES, "tool", tool_input) is WIDE


def test_rule_for_an_action_with_no_rule_and_no_tool_wide_rule() -> None:
    rules: TaskRules = {("tool", "special"): SPECIFIC}
    assert rule_for(rules, "tool", {"action": "other"}) is None
    assert rule_for(rules, "tool", None) is None


def test_rule_for_an_unknown_tool() -> None:
    assert rule_for(RULES, "other", {"action": "special"}) is None


# -- named_handle ----------------------------------------------------------------------------------


def test_a_rule_without_a_handle_argument_names_nothing() -> None:
    assert named_handle(MESH_RUN, {"runId": "r1"}) == ""


@pytest.mark.parametrize(
    "tool_input",
    [None, {}, {"resume": None}, {"resume": False}, {"resume": ""}],
)
def test_an_absent_handle_argument_names_nothing(tool_input: dict[str, object] | None) -> None:
    assert named_handle(AGENT, tool_input) == ""


@pytest.mark.parametrize(
    "value", ["bad id", "a:b", TOO_LONG, "é", 7, 0, True, ["a1"], {"id": "a1"}]
)
def test_a_handle_argument_that_is_not_an_id_is_invalid(value: object) -> None:
    assert named_handle(AGENT, {"resume": value}) == "invalid"


@pytest.mark.parametrize("value", ["a1", "A_b-9", MAX_ID])
def test_a_handle_argument_names_a_handle_of_the_rules_kind(value: str) -> None:
    assert named_handle(AGENT, {"resume": value}) == agent(value)
    assert named_handle(WORKFLOW, {"resume_from_run_id": value}) == run(value)


# -- forbidden -------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["daily", True, 0, [], {"cron": "* * * * *"}])
def test_schedule_is_forbidden_when_given(value: object) -> None:
    assert forbidden(AGENT, {"prompt": "p", "schedule": value})


@pytest.mark.parametrize("tool_input", [None, {}, {"schedule": None}, {"schedule": False}])
def test_schedule_absent_is_not_forbidden(tool_input: dict[str, object] | None) -> None:
    assert not forbidden(AGENT, tool_input)


def test_schedule_empty_string_counts_as_absent() -> None:
    assert not forbidden(AGENT, {"schedule": ""})


def test_a_rule_without_forbidden_arguments_forbids_nothing() -> None:
    assert not forbidden(WORKFLOW, {"schedule": "daily"})


# -- created_handle --------------------------------------------------------------------------------


def test_created_handle_from_a_details_path() -> None:
    assert created_handle(WORKFLOW, {"runId": "r1"}, None) == run("r1")
    assert created_handle(AGENT, {"agentId": "a1"}, "") == agent("a1")
    assert created_handle(MESH_RUN, {"run": {"id": "m1"}}, None) == run("m1")


def test_the_details_path_wins_over_the_text() -> None:
    assert created_handle(WORKFLOW, {"runId": "r1"}, "run_id: r2") == run("r1")


@pytest.mark.parametrize(
    "details",
    [None, "run_id: r9", {}, {"runId": "bad id"}, {"runId": 7}, {"runId": TOO_LONG}],
)
def test_created_handle_falls_back_to_the_text_pattern(details: object) -> None:
    text = "Started in the background.\nrun_id: r2\nPoll it later."
    assert created_handle(WORKFLOW, details, text) == run("r2")


@pytest.mark.parametrize("text", [None, "", "no id here", "run_id r2", f"run_id: {TOO_LONG}"])
def test_created_handle_without_details_or_pattern_match(text: str | None) -> None:
    assert created_handle(WORKFLOW, None, text) is None


def test_the_text_pattern_stops_at_the_first_non_id_character() -> None:
    assert created_handle(WORKFLOW, None, "run_id: bad id") == run("bad")


@pytest.mark.parametrize(
    "details", [{"run": "m1"}, {"run": {"id": None}}, {"run": ["m1"]}, {"id": "m1"}]
)
def test_a_nested_path_through_a_non_mapping_finds_nothing(details: object) -> None:
    assert created_handle(MESH_RUN, details, "run_id: m2") is None  # no text pattern either


def test_a_rule_with_neither_path_nor_pattern_never_reports() -> None:
    assert created_handle(STEER, {"agentId": "a1"}, "run_id: r1") is None


def test_a_pattern_only_rule_reads_the_text() -> None:
    rule = TaskToolRule(TaskKind.AGENT, result_pattern=re.compile(r"agent=(\w+)"))
    assert created_handle(rule, {"agentId": "ignored"}, "spawned agent=a7") == agent("a7")


# -- notification_handles --------------------------------------------------------------------------


def test_run_id_and_agent_id_name_handles() -> None:
    assert notification_handles({"runId": "r1"}) == (run("r1"),)
    assert notification_handles({"agentId": "a1"}) == (agent("a1"),)
    assert notification_handles({"runId": "r1", "agentId": "a1"}) == (run("r1"), agent("a1"))


def test_ids_name_mesh_runs_and_agents() -> None:
    details = {"ids": ["mesh:m1:1:1", "a1", "mesh:m2", "a2:extra"]}
    assert notification_handles(details) == (run("m1"), agent("a1"), run("m2"), agent("a2"))


@pytest.mark.parametrize(
    "entry",
    ["", "mesh", "mesh:", "mesh::1", "mesh:bad id:1", "bad id", ":a1", TOO_LONG, 7, None, {}],
)
def test_malformed_ids_are_ignored(entry: object) -> None:
    assert notification_handles({"ids": [entry, "a1"]}) == (agent("a1"),)


@pytest.mark.parametrize("value", [7, None, "bad id", TOO_LONG, ["r1"]])
def test_malformed_run_and_agent_ids_are_ignored(value: object) -> None:
    assert notification_handles({"runId": value, "agentId": value}) == ()


def test_duplicates_are_removed_in_first_seen_order() -> None:
    details = {"runId": "r1", "agentId": "a1", "ids": ["a1", "mesh:r1:1:1", "mesh:r1:2:1", "a2"]}
    assert notification_handles(details) == (run("r1"), agent("a1"), agent("a2"))


def test_the_same_id_as_run_and_agent_is_two_handles() -> None:
    assert notification_handles({"ids": ["x1", "mesh:x1:1:1"]}) == (agent("x1"), run("x1"))


@pytest.mark.parametrize("details", [None, "runId", ["r1"], 7])
def test_details_that_are_not_a_mapping_name_nothing(details: object) -> None:
    assert notification_handles(details) == ()


@pytest.mark.parametrize("ids", ["a1", ("a1",), {"a1": 1}, None])
def test_ids_that_are_not_a_list_name_nothing(ids: object) -> None:
    assert notification_handles({"ids": ids}) == ()
