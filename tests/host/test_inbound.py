"""Inbound messages reaching a real harness: a turn when idle, the queue when busy, the latch."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from pi_agent_core.extensions import ExtensionAPI

from pi_cross_session._internal.plugin.hosts import pi_python
from pi_cross_session._internal.plugin.hosts.pi_python import CUSTOM_TYPE
from pi_cross_session._internal.plugin.render import peer_text
from pi_cross_session._internal.plugin.runtime import SessionRuntime
from pi_cross_session._internal.security.admission import Delivery
from tests.host.pi_harness import (
    PEER_HEADER,
    POLL_S,
    WAIT_S,
    HoldTool,
    Peer,
    Recorder,
    ScriptedChat,
    call_tool,
    reply_text,
    runtime_of,
    say,
    text_of,
)
from tests.support.waiting import eventually

pytestmark = pytest.mark.anyio

FENCE_NONCE = re.compile(r"^----- peer text ([0-9a-f]{16}) begins -----$", re.MULTILINE)


def is_peer_text(message: BaseMessage) -> bool:
    return text_of(message).startswith(PEER_HEADER)


def framed(sender: SessionRuntime, text: str, content: str) -> str:
    """The text the model must read for ``text`` from ``sender`` (peer_text.peer_message), with the
    fence nonce the receiver drew for ``content``."""
    registration = sender.registration()
    assert registration is not None
    delivery = Delivery("id", registration, text, summary="", sent_at=0, goal_id=None)
    match = FENCE_NONCE.search(content)
    assert match is not None, content
    return peer_text.peer_message(delivery, nonce=match.group(1))


async def target_of(harness: Any) -> str:
    """How a peer addresses ``harness``: its exact instance id."""
    identity = (await runtime_of(harness)).identity
    assert identity is not None
    return identity.instance_id


async def test_a_message_to_an_idle_session_starts_a_turn(
    harnesses: Callable[..., Any], model: ScriptedChat, peer: Peer
) -> None:
    _, beta = peer
    recorder = Recorder()
    harness = await harnesses(recorder.activate)
    model.responder = lambda messages: say("ack" if is_peer_text(messages[-1]) else "ok")

    report = await beta.send(await target_of(harness), "please rebase onto main", summary="rebase")
    assert report.ok, report
    assert report.status == "submitted"
    await eventually(lambda: recorder.ended())

    [run] = recorder.runs()
    first = run[0]
    assert first["role"] == "custom"
    assert first["customType"] == CUSTOM_TYPE
    assert first["content"] == framed(beta, "please rebase onto main", first["content"])
    assert first["details"]["messageId"] == report.message_id
    assert first["details"]["from"]["instanceId"] == beta.identity.instance_id  # type: ignore[union-attr]
    assert first["details"]["summary"] == "rebase"
    assert "token" not in first["details"]["from"]
    assert [m["role"] for m in run] == ["custom", "assistant"]
    assert recorder.ended() == [["stop"]]
    assert model.human_texts() == [first["content"]]

    # The receiver saw the message enter the conversation, and the sender can ask about it.
    await eventually(lambda: harness.phase == "idle")
    status = await beta.query_status(await target_of(harness), report.message_id or "")
    assert status.status == "delivered"  # beta understands delivery receipts
    snapshot = (await runtime_of(harness)).snapshot()
    assert snapshot is not None
    assert snapshot.rows[0].diagnostic == "The host confirmed the message entered the conversation"


async def test_a_message_while_busy_is_queued_and_starts_the_next_turn(
    harnesses: Callable[..., Any], model: ScriptedChat, peer: Peer
) -> None:
    _, beta = peer
    hold, recorder = HoldTool(), Recorder()
    harness = await harnesses(hold.activate, recorder.activate)

    def respond(messages: Sequence[BaseMessage]) -> AIMessage:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            return say("held and released")
        if is_peer_text(last):
            return say("peer message handled")
        return call_tool("hold", {})

    model.responder = respond
    user_turn = asyncio.ensure_future(harness.prompt("wait for me"))
    await hold.entered.wait()

    queued = await beta.send(await target_of(harness), "while you were busy")
    assert queued.status == "queued", queued
    assert [r.state for r in (await runtime_of(harness)).snapshot().rows] == ["queued"]  # type: ignore[union-attr]

    hold.release.set()
    final = await user_turn
    assert text_of_assistant(final) == "held and released"
    await eventually(lambda: len(recorder.ended()) == 2)

    user_run, peer_run = recorder.runs()
    assert user_run[0]["role"] == "user"
    assert all(m["customType"] != CUSTOM_TYPE for m in user_run)  # never steered into it
    assert peer_run[0]["customType"] == CUSTOM_TYPE
    assert peer_run[0]["content"] == framed(beta, "while you were busy", peer_run[0]["content"])
    assert recorder.ended() == [["toolUse", "stop"], ["stop"]]  # the last reason counts
    await eventually(lambda: harness.phase == "idle")
    rows = (await runtime_of(harness)).snapshot().rows  # type: ignore[union-attr]
    assert [r.state for r in rows] == ["submitted"]


def text_of_assistant(message: Any) -> str:
    return "".join(b.get("text", "") for b in message.content if b.get("type") == "text")


async def test_an_aborted_turn_latches_the_inbox_until_resumed(
    harnesses: Callable[..., Any], model: ScriptedChat, peer: Peer
) -> None:
    _, beta = peer
    hold, recorder = HoldTool(), Recorder()
    harness = await harnesses(hold.activate, recorder.activate)

    def respond(messages: Sequence[BaseMessage]) -> AIMessage:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            return say("done")
        if is_peer_text(last) and "hold" in text_of(last):
            return call_tool("hold", {})
        return say("ok")

    model.responder = respond
    target = await target_of(harness)
    first = await beta.send(target, "please hold")
    assert first.status == "submitted"
    await hold.entered.wait()
    await harness.abort()
    await eventually(lambda: recorder.ended())
    assert recorder.ended()[-1][-1] == "aborted"

    runtime = await runtime_of(harness)
    snapshot = runtime.snapshot()
    assert snapshot is not None
    assert snapshot.stopped
    refused = await beta.send(target, "are you there?")
    assert refused.status == "stopped"
    assert not refused.retryable

    # A user turn does not reopen it; only the local command does, and says what it does not do.
    assert await reply_text(harness, "hello") == "ok"
    assert (await beta.send(target, "still there?")).status == "stopped"
    text = await reply_text(harness, "/cross-session-resume")
    assert text.startswith("Inbox reopened")
    assert "not refilled" in text
    again = await beta.send(target, "back again")
    assert again.status == "submitted", again
    await eventually(lambda: len(recorder.ended()) == 3)  # peer, user, peer (command runs aside)


async def test_an_aborted_assistant_message_latches_before_the_run_ends(
    harnesses: Callable[..., Any], model: ScriptedChat, peer: Peer
) -> None:
    """Spec §5.6: an assistant ``message_end`` with ``stopReason: aborted`` is a latch trigger of
    its own; the inbox is closed when that message ends, not only when the run does."""
    _, beta = peer
    hold = HoldTool()
    latched_at_message_end: list[bool] = []

    def watch(api: ExtensionAPI) -> None:
        # Registered after our extension, so our hook for the same event has already run.
        def on_message_end(event: Any) -> None:
            message = getattr(event, "message", None)
            if getattr(message, "stopReason", None) == "aborted":
                runtime = pi_python.runtime_for(api.session_id)
                snapshot = None if runtime is None else runtime.snapshot()
                latched_at_message_end.append(snapshot is not None and snapshot.stopped)

        api.on("message_end", on_message_end)

    harness = await harnesses(hold.activate, watch)

    def respond(messages: Sequence[BaseMessage]) -> AIMessage:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            return say("done")
        if is_peer_text(last) and "hold" in text_of(last):
            return call_tool("hold", {})
        return say("ok")

    model.responder = respond
    target = await target_of(harness)
    assert (await beta.send(target, "please hold")).status == "submitted"
    await hold.entered.wait()
    await harness.abort()
    await eventually(lambda: latched_at_message_end)
    assert latched_at_message_end == [True]


async def test_resume_while_nothing_is_latched_reports_an_open_inbox(
    harnesses: Callable[..., Any],
) -> None:
    # Issue 24 item 2(d): an open inbox is not "reopened"; the command says it was open.
    harness = await harnesses()
    text = await reply_text(harness, "/cross-session-resume")
    assert text.startswith("The inbox was already open"), text
    assert "Inbox reopened" not in text
    assert "nothing to reopen" in text


async def test_inbound_refuse_is_applied_published_and_saved(
    harnesses: Callable[..., Any], model: ScriptedChat, peer: Peer
) -> None:
    _, beta = peer
    harness = await harnesses()
    target = await target_of(harness)
    text = await reply_text(harness, "/cross-session-inbound refuse")
    assert text.startswith("This session now refuses messages")
    assert "saved with this session" in text
    runtime = await runtime_of(harness)
    assert runtime.inbound == "refuse"
    await wait_listed(beta, target, "refuse")
    refused = await beta.send(target, "hello")
    assert refused.status == "refused"

    entries = await harness.session.get_entries()
    saved = [e for e in entries if getattr(e, "customType", None) == "cross-session-inbound"]
    assert [e.data["inbound"] for e in saved] == ["refuse"]

    # A later harness on the same session (a resume) starts with the saved choice.
    session = harness.session
    await harness.close()
    resumed = await harnesses(session=session)
    resumed_runtime = await runtime_of(resumed)
    assert resumed_runtime.inbound == "refuse"
    status = await reply_text(resumed, "/cross-session-inbound")
    assert "refuses messages" in status
    assert "/cross-session-inbound in this session" in status
    assert (await reply_text(resumed, "/cross-session-inbound maybe")).startswith("Usage:")


async def wait_listed(beta: SessionRuntime, target: str, inbound: str) -> None:
    """Wait until beta's listing shows ``target`` with the given inbound policy."""
    with anyio.fail_after(WAIT_S):
        while True:
            listing = await beta.list_peers()
            if any(p.instance_id == target and p.inbound == inbound for p in listing.peers):
                return
            await anyio.sleep(POLL_S)
