"""A turn that fails closes the inbox, and says so everywhere (issue 24, item 2).

A real pi-python harness whose scripted model cannot reach its provider: the peer message that
started the turn is delivered, the turn ends with ``stopReason: error``, and the inbox stays
closed (the contract's fail-closed rule). What is checked is that this is visible: the notice
names the message, its sender and the host's words and says how to reopen; the status, ``/peers``
and ``list_pi`` say the inbox is closed and why; a refused sender (a real ``pi-cross-session send``
process) prints the receiver's own words; and ``/cross-session-resume`` on an open inbox says it
was open.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from pi_agent_harness.types import NoticeEvent

from pi_cross_session._internal.plugin.hosts import pi_python
from pi_cross_session._internal.security.admission import TurnOutcome
from pi_cross_session._internal.security.io.journal import journal_dir
from pi_cross_session._internal.security.io.journal_network import (
    InboundState,
    LiveState,
    read_live_state,
)
from pi_cross_session._internal.security.turns import TurnEnding
from tests.host.pi_harness import (
    PEER_HEADER,
    Recorder,
    ScriptedChat,
    call_tool,
    reply_text,
    runtime_of,
    say,
    text_of,
)
from tests.support.processes import Result, run_cli
from tests.support.waiting import eventually

pytestmark = pytest.mark.anyio

#: What the provider's failure says: plain words, then a terminal escape and a line of its own,
#: which every surface must show escaped on one line.
PROVIDER_ERROR = "Connection error.\x1b[2J\nforged: inbox reopened"


def failing_provider(messages: Sequence[BaseMessage]) -> AIMessage:
    """The model's provider is unreachable for a peer's message; a user turn works (and calls
    ``list_pi`` when asked to list)."""
    last = messages[-1]
    if isinstance(last, ToolMessage):
        return say("listed")
    if text_of(last).startswith(PEER_HEADER):
        raise ConnectionError(PROVIDER_ERROR)
    if isinstance(last, HumanMessage) and text_of(last) == "list":
        return call_tool("list_pi", {})
    return say("ok")


async def send(agent_dir: Path, cwd: Path, target: str, text: str) -> Result:
    """``pi-cross-session send`` as its own process, named ``alpha``; the harness keeps serving
    on this loop meanwhile."""
    return await anyio.to_thread.run_sync(
        lambda: run_cli(agent_dir, "send", "--name", "alpha", target, text, cwd=cwd)
    )


def one_line(text: str) -> None:
    assert "\x1b" not in text
    assert "\nforged" not in text


async def test_a_failed_turn_says_which_message_why_and_how_to_reopen(
    harnesses: Callable[..., Any],
    model: ScriptedChat,
    private_agent_dir: Path,
    workdir: Path,
) -> None:
    recorder = Recorder()
    harness = await harnesses(recorder.activate)
    notices: list[str] = []
    harness.subscribe(
        lambda event, _signal: (
            notices.append(event.text) if isinstance(event, NoticeEvent) else None
        )
    )
    model.responder = failing_provider
    runtime = await runtime_of(harness)
    identity = runtime.identity
    assert identity is not None
    target = identity.instance_id

    first = await send(private_agent_dir, workdir, target, "please rebase onto main")
    assert first.returncode == 0, first
    message_id = first.message_id()
    await eventually(lambda: recorder.ended())
    assert recorder.ended() == [["error"]]

    # (a) The user is told at once: which message, from whom, what the host said, how to reopen.
    await eventually(lambda: any("inbox closed" in n for n in notices))
    [notice] = [n for n in notices if "inbox closed" in n]
    assert notice.startswith("Cross-session inbox closed: the turn in which message "), notice
    assert message_id in notice
    assert "from alpha [" in notice
    assert "stop reason error" in notice
    assert "Connection error.\\x1b[2J forged: inbox reopened" in notice
    assert "/cross-session-resume" in notice
    one_line(notice)

    # ... and so does the live state it publishes beside its journal, for `watch`.
    directory = journal_dir(str(private_agent_dir), identity.instance_id)

    def latched() -> LiveState | None:
        state = read_live_state(directory)
        return state if state is not None and state.inbound is InboundState.LATCHED else None

    await eventually(latched)
    live = latched()
    assert live is not None
    assert live.reason is not None
    assert message_id in live.reason
    assert "/cross-session-resume" in live.reason
    assert live.host == "pi-python"
    one_line(live.reason)

    # (b) The status says closed until its user reopens it, and why, in text and JSON.
    status = await reply_text(harness, "/cross-session-status")
    [phase] = [line for line in status.splitlines() if line.startswith("Phase: ")]
    assert "; inbox closed until its user reopens it: the turn in which message" in phase
    assert message_id in phase
    assert "Connection error." in phase
    one_line(phase)
    assert "To reopen the inbox: run /cross-session-resume" in status
    data = json.loads(await reply_text(harness, "/cross-session-status --json"))
    assert data["stopped"] is True
    latch = data["latch"]
    assert latch["messageId"] == message_id
    assert latch["sender"]["name"] == "alpha"
    assert latch["stopReason"] == "error"
    assert latch["hostError"] == PROVIDER_ERROR
    assert latch["reason"] == "a turn ended without a clean stop"
    # The message did enter the conversation before its turn failed: its sender may hear so.
    [row] = data["messages"]
    assert row["messageId"] == message_id
    assert row["delivered"] is True

    # ... and so do this session's own listings: /peers and the model's list_pi.
    peers = await reply_text(harness, "/peers")
    [closed] = [line for line in peers.splitlines() if "inbox is closed" in line]
    assert closed.startswith("This session's inbox is closed until its user reopens it: ")
    assert message_id in closed
    one_line(closed)
    assert await reply_text(harness, "list") == "listed"
    [listed] = [r for r in model.tool_results() if r.startswith("This session: ")]
    assert closed in listed.splitlines()
    context = await harness.session.build_context()
    [result] = [m for m in context.messages if getattr(m, "role", None) == "toolResult"]
    assert result.details["inboxClosed"]["messageId"] == message_id
    assert result.details["inboxClosed"]["stopReason"] == "error"

    # (c) A sender is refused stopped with the receiver's own words, escaped.
    refused = await send(private_agent_dir, workdir, target, "are you there?")
    assert refused.returncode == 2, refused
    said = refused.stdout + refused.stderr
    assert "(stopped)" in said
    assert "a turn ended without a clean stop (stop reason: error)" in said
    # Never another sender's message, nor the host's own error text.
    assert message_id not in said
    assert "Connection error" not in said
    # The code alone claims nothing: the advice points at the receiver's words.
    assert "/cross-session-resume" not in said

    # (d) Resuming reopens once; on an open inbox it says so instead.
    reopened = await reply_text(harness, "/cross-session-resume")
    assert reopened.startswith("Inbox reopened"), reopened
    again = await reply_text(harness, "/cross-session-resume")
    assert again.startswith("The inbox was already open"), again
    assert "reopened" not in again.lower().replace("nothing to reopen", "")
    status = await reply_text(harness, "/cross-session-status")
    assert "; inbox open" in status
    assert "inbox is closed" not in await reply_text(harness, "/peers")


async def test_a_failed_user_turn_closes_the_inbox_and_says_it_was_no_peer_message(
    harnesses: Callable[..., Any], model: ScriptedChat
) -> None:
    harness = await harnesses()
    notices: list[str] = []
    harness.subscribe(
        lambda event, _signal: (
            notices.append(event.text) if isinstance(event, NoticeEvent) else None
        )
    )

    def unreachable(messages: Sequence[BaseMessage]) -> AIMessage:
        raise ConnectionError("Connection error.")

    model.responder = unreachable
    await harness.prompt("hello")
    await eventually(lambda: any("inbox closed" in n for n in notices))
    [notice] = [n for n in notices if "inbox closed" in n]
    assert notice.startswith(
        "Cross-session inbox closed: a turn ended without a clean stop "
        '(the host reported stop reason error: "Connection error.")'
    ), notice
    runtime = await runtime_of(harness)
    snapshot = runtime.snapshot()
    assert snapshot is not None
    assert snapshot.latch is not None
    assert snapshot.latch.message_id is None


@pytest.mark.parametrize(
    ("messages", "ending", "outcome"),
    [
        (
            [{"role": "assistant", "stopReason": "error", "errorMessage": "Connection error."}],
            TurnEnding.ERROR,
            TurnOutcome("error", "Connection error."),
        ),
        ([{"role": "assistant", "stopReason": "length"}], TurnEnding.OTHER, TurnOutcome("length")),
        (
            [{"role": "assistant", "stopReason": "toolUse"}, {"role": "toolResult"}],
            TurnEnding.OTHER,
            TurnOutcome("toolUse"),
        ),
        ([{"role": "user"}], TurnEnding.UNKNOWN, TurnOutcome()),
        ([{"role": "assistant", "stopReason": ""}], TurnEnding.UNKNOWN, TurnOutcome()),
        ([{"role": "assistant", "stopReason": "stop"}], TurnEnding.STOP, TurnOutcome("stop")),
    ],
    ids=["error", "length", "tool-use-last", "no-assistant", "no-reason", "stop"],
)
def test_how_a_run_ended_is_read_from_its_last_assistant_message(
    messages: list[dict[str, Any]], ending: TurnEnding, outcome: TurnOutcome
) -> None:
    """Only ``stop`` is a clean end (any other word, or none, closes the inbox); the words the
    host wrote are kept for the reason."""
    assert pi_python.ending_of(messages) is ending
    assert pi_python.outcome_of(messages) == outcome
