"""The model's tools, independent of any host: parameters, descriptions, and what they do.

``list_pi`` and ``send_pi_message`` are the contract's two tools; ``peer_goal`` manages the
session's goal-scoped grant (goal-scoped-v1 §1).

A host adapter turns each :class:`ToolSpec` into its own tool definition and calls
:func:`run_list_pi` / :func:`run_send_pi_message`, which return a :class:`ToolOutput`: the text the
model reads, structured ``details`` for programs, and whether the call failed. The texts come from
:mod:`.render`; nothing here decides policy (the runtime and the receiver do).

Parameter limits follow the contract (spec §6.2) in its units: ``target`` 1–512 and ``summary``
1–400 UTF-16 code units, ``message`` 1–1,000,000 UTF-16 code units. The JSON schema advertises the
same numbers as ``minLength``/``maxLength`` for the model; the check itself is one validator that
counts the real units (so an astral-heavy string cannot slip through a code-point count) and names
the contract's code (``invalid_target`` / ``invalid_message``) in its error, whichever bound failed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Final, Literal

import anyio
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from pi_cross_session._internal.plugin import outbound
from pi_cross_session._internal.plugin.capped import capped_sessions
from pi_cross_session._internal.plugin.render import host_tools, listings, receiving, sending
from pi_cross_session._internal.plugin.runtime import NotReadyError, SessionRuntime
from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.frames import ID_RE, INSTANCE_ID_RE
from pi_cross_session._internal.protocol.limits import (
    MAX_DELIVERY_WAIT_S,
    MAX_SUMMARY_CODE_POINTS,
    MAX_TARGET_UNITS,
    MAX_TEXT_UNITS,
    MAX_TOOL_SUMMARY_UNITS,
)
from pi_cross_session._internal.protocol.text import utf16_length
from pi_cross_session._internal.security.gate import PEER_GOAL_TOOL
from pi_cross_session._internal.security.goals import (
    Authority,
    GoalError,
    GoalErrorCode,
    TaskHandle,
    TaskKind,
)
from pi_cross_session._internal.security.goals.bounds import (
    MAX_GOAL_OBJECTIVE_UNITS,
    MAX_GOAL_PEERS,
)

LIST_PI: Final = "list_pi"
SEND_PI_MESSAGE: Final = "send_pi_message"
PEER_GOAL: Final = PEER_GOAL_TOOL

#: Schema patterns (advertised and enforced by pydantic).
_ID_PATTERN: Final = f"^{ID_RE.pattern}$"
_INSTANCE_ID_PATTERN: Final = f"^{INSTANCE_ID_RE.pattern}$"


def _within(code: str, what: str, limit: int) -> AfterValidator:
    def check(value: str) -> str:
        if not 1 <= utf16_length(value) <= limit:
            raise ValueError(host_tools.utf16_limit_error(code, what, limit))
        return value

    return AfterValidator(check)


def _bounds(limit: int) -> dict[str, Any]:
    # Advertised only: the validator above enforces them, in UTF-16 units and with our code.
    return {"minLength": 1, "maxLength": limit}


class ListPiParams(BaseModel):
    """``list_pi`` takes no parameters."""

    model_config = ConfigDict(extra="forbid", title="list_pi")


class SendPiMessageParams(BaseModel):
    """``send_pi_message``: who to message, what, and an optional one-line preview."""

    model_config = ConfigDict(extra="forbid", title="send_pi_message")

    target: Annotated[
        str,
        Field(
            description=host_tools.SEND_TARGET_DESCRIPTION,
            json_schema_extra=_bounds(MAX_TARGET_UNITS),
        ),
        _within(Code.INVALID_TARGET, "target", MAX_TARGET_UNITS),
    ]
    message: Annotated[
        str,
        Field(
            description=host_tools.SEND_MESSAGE_DESCRIPTION,
            json_schema_extra=_bounds(MAX_TEXT_UNITS),
        ),
        _within(Code.INVALID_MESSAGE, "message", MAX_TEXT_UNITS),
    ]
    summary: (
        Annotated[
            str,
            Field(json_schema_extra=_bounds(MAX_TOOL_SUMMARY_UNITS)),
            _within(Code.INVALID_MESSAGE, "summary", MAX_TOOL_SUMMARY_UNITS),
        ]
        | None
    ) = Field(default=None, description=host_tools.SEND_SUMMARY_DESCRIPTION)
    goal_id: str | None = Field(
        default=None,
        alias="goalId",
        pattern=_ID_PATTERN,
        description=host_tools.SEND_GOAL_DESCRIPTION,
    )
    wait_seconds: float | None = Field(
        default=None,
        alias="waitSeconds",
        gt=0,
        le=MAX_DELIVERY_WAIT_S,
        allow_inf_nan=False,
        description=host_tools.SEND_WAIT_DESCRIPTION,
    )


_GoalId = Annotated[str, Field(pattern=_ID_PATTERN)]
_PeerId = Annotated[str, Field(pattern=_INSTANCE_ID_PATTERN)]


class PeerGoalParams(BaseModel):
    """``peer_goal``: one action on the session's goal, with the parameters that action takes."""

    model_config = ConfigDict(extra="forbid", title="peer_goal")

    action: Literal["start", "bind", "unbind", "complete", "cancel", "status"] = Field(
        description=host_tools.GOAL_ACTION_DESCRIPTION
    )
    goal_id: _GoalId | None = Field(
        default=None, alias="goalId", description=host_tools.GOAL_ID_DESCRIPTION
    )
    objective: (
        Annotated[
            str,
            Field(json_schema_extra=_bounds(MAX_GOAL_OBJECTIVE_UNITS)),
            _within(Code.INVALID_GOAL, "objective", MAX_GOAL_OBJECTIVE_UNITS),
        ]
        | None
    ) = Field(default=None, description=host_tools.GOAL_OBJECTIVE_DESCRIPTION)
    peer_ids: list[_PeerId] | None = Field(
        default=None,
        alias="peerIds",
        min_length=1,
        max_length=MAX_GOAL_PEERS,
        description=host_tools.GOAL_PEER_IDS_DESCRIPTION,
    )
    run_ids: list[_GoalId] | None = Field(
        default=None,
        alias="runIds",
        min_length=1,
        max_length=MAX_GOAL_PEERS,
        description=host_tools.GOAL_RUN_IDS_DESCRIPTION,
    )
    agent_ids: list[_GoalId] | None = Field(
        default=None,
        alias="agentIds",
        min_length=1,
        max_length=MAX_GOAL_PEERS,
        description=host_tools.GOAL_AGENT_IDS_DESCRIPTION,
    )

    def misuse(self) -> str | None:
        """Why these parameters do not fit the action (goal-scoped-v1 §1.3), or ``None``."""
        given = {
            name
            for name, value in (
                ("goalId", self.goal_id),
                ("objective", self.objective),
                ("peerIds", self.peer_ids),
                ("runIds", self.run_ids),
                ("agentIds", self.agent_ids),
            )
            if value is not None
        }
        allowed, required = _ACTION_PARAMS[self.action]
        extra = sorted(given - allowed)
        if extra:
            return f"{self.action} does not take {', '.join(extra)}"
        missing = sorted(required - given)
        if missing:
            return f"{self.action} needs {', '.join(missing)}"
        if self.action == "bind" and not given & {"peerIds", "runIds", "agentIds"}:
            return "bind needs peerIds, runIds or agentIds"
        return None

    @classmethod
    def wire_arguments(cls, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """``arguments`` under their wire names (``goal_id`` → ``goalId``): a host may hand
        on the validated model's field names, while the gate reads the names the model sent."""
        fields = cls.model_fields
        return {
            (fields[key].alias or key) if key in fields else key: value
            for key, value in arguments.items()
        }

    def tasks(self) -> list[TaskHandle]:
        """The task handles named by ``runIds`` and ``agentIds``."""
        return [TaskHandle(TaskKind.RUN, i) for i in self.run_ids or ()] + [
            TaskHandle(TaskKind.AGENT, i) for i in self.agent_ids or ()
        ]


#: Per action: the parameters it accepts, and those it requires.
_ACTION_PARAMS: Final[dict[str, tuple[set[str], set[str]]]] = {
    "start": ({"objective"}, {"objective"}),
    "bind": ({"goalId", "peerIds", "runIds", "agentIds"}, {"goalId"}),
    "unbind": ({"goalId", "peerIds"}, {"goalId", "peerIds"}),
    "complete": ({"goalId"}, {"goalId"}),
    "cancel": ({"goalId"}, {"goalId"}),
    "status": ({"goalId", "objective", "peerIds", "runIds", "agentIds"}, set()),
}


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """Everything a host needs to register one tool, except how to run it.

    ``read_only`` and ``open_world`` are the facts a host maps to its permission hints: listing
    only reads; sending changes another session's conversation, so it is neither read-only nor
    closed-world, but it destroys nothing.
    """

    name: str
    label: str
    description: str
    snippet: str
    parameters: type[BaseModel]
    guidelines: tuple[str, ...] = ()
    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False
    open_world: bool = True


LIST_PI_SPEC: Final = ToolSpec(
    name=LIST_PI,
    label=host_tools.LIST_PI_LABEL,
    description=host_tools.LIST_PI_DESCRIPTION,
    snippet=host_tools.LIST_PI_SNIPPET,
    parameters=ListPiParams,
    read_only=True,
    idempotent=True,
    open_world=False,
)

SEND_PI_MESSAGE_SPEC: Final = ToolSpec(
    name=SEND_PI_MESSAGE,
    label=host_tools.SEND_LABEL,
    description=host_tools.SEND_DESCRIPTION,
    snippet=host_tools.SEND_SNIPPET,
    parameters=SendPiMessageParams,
    guidelines=host_tools.SEND_GUIDELINES,
)

#: Not read-only (most actions change the goal), but it destroys nothing and reaches no other
#: session, so a host's permission layer need not ask: the tool checks who is asking itself.
PEER_GOAL_SPEC: Final = ToolSpec(
    name=PEER_GOAL,
    label=host_tools.GOAL_LABEL,
    description=host_tools.GOAL_DESCRIPTION,
    snippet=host_tools.GOAL_SNIPPET,
    parameters=PeerGoalParams,
    guidelines=host_tools.GOAL_GUIDELINES,
    open_world=False,
)

TOOL_SPECS: Final = (LIST_PI_SPEC, SEND_PI_MESSAGE_SPEC, PEER_GOAL_SPEC)


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """What a tool call produced: text for the model, details for programs, failed or not."""

    text: str
    details: dict[str, Any] = field(default_factory=dict)
    is_error: bool = False


async def run_list_pi(runtime: SessionRuntime) -> ToolOutput:
    """This session, then every other live session of the agent dir, newest first.

    Works even when this session's inbox is not running (the first line then says so): listing
    reads the registry and probes, it needs no identity of ours.
    """
    try:
        me = await runtime.me()
        listing = await runtime.list_peers()
    except Exception as exc:  # reported to the model as a failed call, never raised into the host
        return ToolOutput(
            host_tools.tool_failure(LIST_PI, exc),
            {"ok": False, "code": "internal_error", "error": str(exc)},
            is_error=True,
        )
    details: dict[str, Any] = {
        "self": None if me is None else me.to_dict(),
        "peers": [peer.to_dict() for peer in listing.peers],
        "unread": listing.unread,
    }
    capped = await anyio.to_thread.run_sync(capped_sessions, runtime.locations)
    if capped is not None:
        details["capped"] = list(capped.names)
    latch = runtime.latch
    if latch is not None:
        details["inboxClosed"] = receiving.closed_data(latch)
    text = listings.listing(
        me,
        listing.peers,
        unread=listing.unread,
        unchecked=listing.unchecked,
        capped=capped,
        agent_dir=runtime.locations.agent_dir,
        closed=None if latch is None else receiving.closed_line(latch, runtime.reopen),
    )
    ids = listings.runtime_ids(listing.peers)
    return ToolOutput(text if ids is None else f"{text}\n{ids}", details)


async def run_send_pi_message(runtime: SessionRuntime, params: SendPiMessageParams) -> ToolOutput:
    """Send one message; the text and details say exactly what is known of its fate.

    On success ``details`` holds ``status``, ``messageId`` and ``target``; on failure also
    ``code``, ``state``, ``retryable`` and ``next``, and the output is marked as an error. A
    message that went out with its summary cut says so (a note, and ``summaryCut``).
    """
    try:
        report = await runtime.send(
            params.target,
            params.message,
            summary=params.summary,
            goal_id=params.goal_id,
            wait_s=params.wait_seconds or 0.0,
        )
    except Exception as exc:  # the runtime reports every known ending; this is a bug of ours
        return ToolOutput(
            host_tools.tool_failure(SEND_PI_MESSAGE, exc),
            {"ok": False, "code": "internal_error", "error": str(exc), "messageId": None},
            is_error=True,
        )
    details = sending.send_details(report)
    if not report.ok:
        details["code"] = report.status
    text = sending.send_result(report)
    folded = outbound.cut_summary_length(params.summary)
    if folded is not None and report.message_written:
        # The model is told that its preview went out shorter, rather than finding out from a reply.
        details["summaryCut"] = {"codePoints": folded, "kept": MAX_SUMMARY_CODE_POINTS}
        text = f"{text}\n{host_tools.summary_cut(folded)}"
    return ToolOutput(text, details, is_error=not report.ok)


async def run_peer_goal(
    runtime: SessionRuntime, params: PeerGoalParams, authority: Callable[[], Authority]
) -> ToolOutput:
    """Take one goal action; every outcome returns the goal's current view.

    ``authority`` says who is asking *now* (the host re-reads its turn state each time, since a
    bind awaits a listing in between). Refusals are errors with a code: ``goal_not_authorized``,
    ``invalid_goal``, ``goal_already_active``, ``goal_too_many_peers``, ``goal_task_owned``,
    ``not_ready``.
    """
    try:
        problem = params.misuse()
        if problem is not None:
            raise GoalError(GoalErrorCode.INVALID, problem)
        goal_id = params.goal_id or ""
        if params.action == "start":
            runtime.goal_start(params.objective or "", authority=authority())
        elif params.action == "bind":
            await runtime.goal_bind(
                goal_id, params.peer_ids or (), tasks=params.tasks(), authority=authority
            )
        elif params.action == "unbind":
            runtime.goal_unbind(goal_id, params.peer_ids or (), authority=authority())
        elif params.action == "complete":
            runtime.goal_complete(goal_id, authority=authority())
        elif params.action == "cancel":
            runtime.goal_cancel(goal_id, authority=authority())
    except GoalError as exc:
        return _goal_output(runtime, params.action, exc.code.value, exc.message)
    except NotReadyError as exc:
        return _goal_output(runtime, params.action, Code.NOT_READY, str(exc))
    return _goal_output(runtime, params.action)


def _goal_output(
    runtime: SessionRuntime, action: str, code: str | None = None, error: str | None = None
) -> ToolOutput:
    view = runtime.goal_status().as_dict()
    if code is None:
        return ToolOutput(host_tools.goal_view_text(view), view)
    details = {"ok": False, "code": code, "error": error, **view}
    return ToolOutput(host_tools.goal_refused(action, code, error or ""), details, is_error=True)


__all__ = [
    "LIST_PI",
    "LIST_PI_SPEC",
    "PEER_GOAL",
    "PEER_GOAL_SPEC",
    "SEND_PI_MESSAGE",
    "SEND_PI_MESSAGE_SPEC",
    "TOOL_SPECS",
    "ListPiParams",
    "PeerGoalParams",
    "SendPiMessageParams",
    "ToolOutput",
    "ToolSpec",
    "run_list_pi",
    "run_peer_goal",
    "run_send_pi_message",
]
