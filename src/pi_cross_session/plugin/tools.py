"""The model's two tools, independent of any host: parameters, descriptions, and what they do.

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

from dataclasses import dataclass, field
from typing import Annotated, Any, Final

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from pi_cross_session.plugin import render
from pi_cross_session.plugin.runtime import SessionRuntime
from pi_cross_session.protocol.codes import Code
from pi_cross_session.protocol.limits import (
    MAX_TARGET_UNITS,
    MAX_TEXT_UNITS,
    MAX_TOOL_SUMMARY_UNITS,
)
from pi_cross_session.protocol.text import utf16_length

LIST_PI: Final = "list_pi"
SEND_PI_MESSAGE: Final = "send_pi_message"


def _within(code: str, what: str, limit: int) -> AfterValidator:
    def check(value: str) -> str:
        if not 1 <= utf16_length(value) <= limit:
            raise ValueError(render.utf16_limit_error(code, what, limit))
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
            description=render.SEND_TARGET_DESCRIPTION,
            json_schema_extra=_bounds(MAX_TARGET_UNITS),
        ),
        _within(Code.INVALID_TARGET, "target", MAX_TARGET_UNITS),
    ]
    message: Annotated[
        str,
        Field(
            description=render.SEND_MESSAGE_DESCRIPTION,
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
    ) = Field(default=None, description=render.SEND_SUMMARY_DESCRIPTION)


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
    label=render.LIST_PI_LABEL,
    description=render.LIST_PI_DESCRIPTION,
    snippet=render.LIST_PI_SNIPPET,
    parameters=ListPiParams,
    read_only=True,
    idempotent=True,
    open_world=False,
)

SEND_PI_MESSAGE_SPEC: Final = ToolSpec(
    name=SEND_PI_MESSAGE,
    label=render.SEND_LABEL,
    description=render.SEND_DESCRIPTION,
    snippet=render.SEND_SNIPPET,
    parameters=SendPiMessageParams,
    guidelines=render.SEND_GUIDELINES,
)

TOOL_SPECS: Final = (LIST_PI_SPEC, SEND_PI_MESSAGE_SPEC)


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
            render.tool_failure(LIST_PI, exc),
            {"ok": False, "code": "internal_error", "error": str(exc)},
            is_error=True,
        )
    details = {
        "self": None if me is None else me.to_dict(),
        "peers": [peer.to_dict() for peer in listing.peers],
    }
    return ToolOutput(render.listing(me, listing.peers), details)


async def run_send_pi_message(runtime: SessionRuntime, params: SendPiMessageParams) -> ToolOutput:
    """Send one message; the text and details say exactly what is known of its fate.

    On success ``details`` holds ``status``, ``messageId`` and ``target``; on failure also
    ``code``, ``state``, ``retryable`` and ``next``, and the output is marked as an error.
    """
    try:
        report = await runtime.send(params.target, params.message, summary=params.summary)
    except Exception as exc:  # the runtime reports every known ending; this is a bug of ours
        return ToolOutput(
            render.tool_failure(SEND_PI_MESSAGE, exc),
            {"ok": False, "code": "internal_error", "error": str(exc), "messageId": None},
            is_error=True,
        )
    details = render.send_details(report)
    if not report.ok:
        details["code"] = report.status
    return ToolOutput(render.send_result(report), details, is_error=not report.ok)


__all__ = [
    "LIST_PI",
    "LIST_PI_SPEC",
    "SEND_PI_MESSAGE",
    "SEND_PI_MESSAGE_SPEC",
    "TOOL_SPECS",
    "ListPiParams",
    "SendPiMessageParams",
    "ToolOutput",
    "ToolSpec",
    "run_list_pi",
    "run_send_pi_message",
]
