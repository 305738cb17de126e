"""Task tools under a goal grant: which calls create or drive a task, and which task they name.

A goal grant (goal-scoped-v1 §3) lets a bound peer's turn create task work for the goal and drive
the tasks the goal owns — nothing else among the gated tools. What counts as a task depends on the
host's tools, so the knowledge is data: a :class:`TaskToolRule` per tool (and action, for tools
with an ``action`` argument) says

* which kind of handle the tool deals in (a run, a sub-agent);
* which argument names an *existing* handle (resume, steer, cancel …) — such a call is allowed in
  a scoped turn only when the goal owns that handle;
* whether a call naming no handle *creates* one (allowed in a scoped turn; the new handle then
  belongs to the goal);
* which arguments are never allowed under a grant (``schedule``: work for later outlives the
  turn that authorized it);
* where a result shows the handle it created (a ``details`` path, else a pattern in the text).

The defaults cover pi-python's ``workflow`` tool (pi-dynamic-workflows: a run id, resumable with
``resume_from_run_id``; a background run reports its id only in the text) and the reference's
names (``Agent``, ``steer_subagent``, ``send_subagent``, ``mesh``), so ports of those tools behave
as the reference specifies. ``mesh`` ``continue`` is left out on purpose: the reference allows it
only with a continuation permit, which this implementation does not issue, so it stays blocked.

Pure functions over plain data; no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from pi_cross_session._internal.protocol.frames import ID_RE
from pi_cross_session._internal.security.goals import TaskHandle, TaskKind


@dataclass(frozen=True, slots=True)
class TaskToolRule:
    """How one task tool (or one action of it) behaves under a goal grant."""

    kind: TaskKind
    #: The argument naming an existing handle the call acts on, if the tool has one.
    handle_arg: str | None = None
    #: A call that names no handle creates a new one.
    creates: bool = False
    #: Arguments that, when given (and not null/false), are never allowed under a grant.
    forbidden_args: frozenset[str] = frozenset()
    #: Where the result's ``details`` hold the created handle's id (a path of keys).
    result_path: tuple[str, ...] = ()
    #: A pattern whose first group is the handle id in the result text (fallback).
    result_pattern: re.Pattern[str] | None = None


#: Rules keyed by ``(tool name, action)``; ``action`` ``None`` matches any call of the tool.
TaskRules = Mapping[tuple[str, str | None], TaskToolRule]

_RUN_ID_TEXT: Final = re.compile(rf"\brun_id: ({ID_RE.pattern})\b")
_MESH_DRIVE_ACTIONS: Final = (
    "resume",
    "retry_failed",
    "steer",
    "cancel",
    "pause",
    "message_send",
    "message_broadcast",
    "growth_decide",
)

DEFAULT_TASK_RULES: Final[TaskRules] = {
    # pi-python: pi-dynamic-workflows' ``workflow`` starts a run, or resumes one by id.
    ("workflow", None): TaskToolRule(
        TaskKind.RUN,
        handle_arg="resume_from_run_id",
        creates=True,
        result_path=("runId",),
        result_pattern=_RUN_ID_TEXT,
    ),
    # The reference's names (goal-scoped-v1 §3 table).
    ("Agent", None): TaskToolRule(
        TaskKind.AGENT,
        handle_arg="resume",
        creates=True,
        forbidden_args=frozenset({"schedule"}),
        result_path=("agentId",),
    ),
    ("steer_subagent", None): TaskToolRule(TaskKind.AGENT, handle_arg="agent_id"),
    ("send_subagent", None): TaskToolRule(TaskKind.AGENT, handle_arg="agent_id"),
    ("mesh", "run"): TaskToolRule(TaskKind.RUN, creates=True, result_path=("run", "id")),
    **{("mesh", a): TaskToolRule(TaskKind.RUN, handle_arg="runId") for a in _MESH_DRIVE_ACTIONS},
}


def rule_for(
    rules: TaskRules, tool_name: str, tool_input: Mapping[str, object] | None
) -> TaskToolRule | None:
    """The rule for this call: the tool's action-specific rule, else its tool-wide one."""
    action = (tool_input or {}).get("action")
    if isinstance(action, str):
        specific = rules.get((tool_name, action))
        if specific is not None:
            return specific
    return rules.get((tool_name, None))


def _given(value: object) -> bool:
    return value is not None and value is not False and value != ""


def named_handle(rule: TaskToolRule, tool_input: Mapping[str, object] | None) -> TaskHandle | str:
    """The existing handle a call acts on; ``""`` when it names none; ``"invalid"`` when the
    argument is there but is not a handle id (never allowed under a grant)."""
    if rule.handle_arg is None:
        return ""
    value = (tool_input or {}).get(rule.handle_arg)
    if not _given(value):
        return ""
    if not isinstance(value, str) or ID_RE.fullmatch(value) is None:
        return "invalid"
    return TaskHandle(rule.kind, value)


def forbidden(rule: TaskToolRule, tool_input: Mapping[str, object] | None) -> bool:
    """True when the call passes an argument a grant never covers."""
    arguments = tool_input or {}
    return any(_given(arguments.get(name)) for name in rule.forbidden_args)


def created_handle(rule: TaskToolRule, details: object, text: str | None) -> TaskHandle | None:
    """The handle a successful call reports, from its ``details`` or, failing that, its text."""
    value: object = details
    for key in rule.result_path:
        value = value.get(key) if isinstance(value, Mapping) else None
    if rule.result_path and isinstance(value, str) and ID_RE.fullmatch(value):
        return TaskHandle(rule.kind, value)
    if rule.result_pattern is not None and text:
        found = rule.result_pattern.search(text)
        if found is not None:
            return TaskHandle(rule.kind, found.group(1))
    return None


def notification_handles(details: object) -> tuple[TaskHandle, ...]:
    """The task handles a notification message names in its ``details``.

    ``runId`` names a run and ``agentId`` a sub-agent (pi-python's workflow results, the
    reference's agent notices); ``ids`` is the reference's list, where ``mesh:<run>:…`` names a
    run and any other entry a sub-agent. Malformed ids are ignored (they name no task).
    """
    if not isinstance(details, Mapping):
        return ()
    found: list[TaskHandle] = []
    for key, kind in (("runId", TaskKind.RUN), ("agentId", TaskKind.AGENT)):
        value = details.get(key)
        if isinstance(value, str) and ID_RE.fullmatch(value):
            found.append(TaskHandle(kind, value))
    ids = details.get("ids")
    if isinstance(ids, list):
        for entry in _strings(ids):
            head, _, rest = entry.partition(":")
            if head == "mesh":
                candidate, kind = rest.partition(":")[0], TaskKind.RUN
            else:
                candidate, kind = head, TaskKind.AGENT
            if ID_RE.fullmatch(candidate):
                found.append(TaskHandle(kind, candidate))
    return tuple(dict.fromkeys(found))


def _strings(values: Iterable[object]) -> Iterable[str]:
    return (value for value in values if isinstance(value, str))


__all__ = [
    "DEFAULT_TASK_RULES",
    "TaskRules",
    "TaskToolRule",
    "created_handle",
    "forbidden",
    "named_handle",
    "notification_handles",
    "rule_for",
]
