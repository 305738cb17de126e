"""Sending from a real harness: the reply reaching the sender, and the refusals a send can meet.

The reply reaching the sender; an unknown name, a shared name and a self-send refused with the
names that exist; identical repeats dropped and an over-rate sender refused.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from pi_cross_session._internal.protocol.limits import RATE_CAPACITY
from pi_cross_session._internal.protocol.paths import Locations
from tests.host.conftest import headless_peer
from tests.host.pi_harness import (
    PEER_HEADER,
    POLL_S,
    WAIT_S,
    HoldTool,
    Peer,
    Recorder,
    ScriptedChat,
    call_tool,
    runtime_of,
    say,
    text_of,
)
from tests.support.waiting import eventually

pytestmark = pytest.mark.anyio


def send_once(target: str, message: str) -> Callable[[Sequence[BaseMessage]], AIMessage]:
    """Call ``send_pi_message`` once in answer to anything, then say "done"."""

    def respond(messages: Sequence[BaseMessage]) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            return say("done")
        return call_tool("send_pi_message", {"target": target, "message": message})

    return respond


async def send_results(harness: Any) -> list[Any]:
    context = await harness.session.build_context()
    return [m for m in context.messages if getattr(m, "role", None) == "toolResult"]


async def instance_of(harness: Any) -> str:
    identity = (await runtime_of(harness)).identity
    assert identity is not None
    return identity.instance_id


async def test_the_reply_to_a_peer_message_returns_to_the_sender(
    harnesses: Callable[..., Any], model: ScriptedChat, peer: Peer
) -> None:
    beta_host, beta = peer

    def respond(messages: Sequence[BaseMessage]) -> AIMessage:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            return say("replied")
        if text_of(last).startswith(PEER_HEADER) and "ping" in text_of(last):
            return call_tool("send_pi_message", {"target": "beta", "message": "pong"})
        return say("ok")

    model.responder = respond
    harness = await harnesses()
    me = await instance_of(harness)
    report = await beta.send(me, "ping")
    assert report.status == "submitted", report

    await eventually(lambda: beta_host.delivered)
    [reply] = beta_host.delivered
    assert reply.text == "pong"
    assert reply.sender.instance_id == me
    # Beta has the message as soon as it admits it; alpha records the tool result only once the
    # receipt has come back and its turn has written it, a moment later.
    with anyio.fail_after(WAIT_S):
        while not (results := await send_results(harness)):  # noqa: ASYNC110 (no event)
            await anyio.sleep(POLL_S)
    [result] = results
    assert result.details["status"] == "submitted"


async def test_an_unknown_name_is_refused_listing_the_names_that_exist(
    harnesses: Callable[..., Any], model: ScriptedChat, peer: Peer
) -> None:
    beta_host, _ = peer
    model.responder = send_once("gamma", "hello?")
    harness = await harnesses()
    await harness.prompt("tell gamma hello")
    [result] = await send_results(harness)
    assert result.details["code"] == "not_found"
    text = result.content[0]["text"]
    assert "Live sessions: beta." in text, text
    assert beta_host.delivered == []


async def test_a_shared_name_is_refused_listing_both_refs(
    harnesses: Callable[..., Any], model: ScriptedChat, locations: Locations
) -> None:
    async with (
        headless_peer(locations, "twin") as (first_host, first),
        headless_peer(locations, "twin") as (second_host, second),
    ):
        model.responder = send_once("twin", "which one of you?")
        harness = await harnesses()
        await harness.prompt("tell twin hello")
        [result] = await send_results(harness)
        assert result.details["code"] == "ambiguous"
        text = result.content[0]["text"]
        for runtime in (first, second):
            registration = runtime.registration()
            assert registration is not None
            assert f"[{registration.ref}]" in text, text
        assert first_host.delivered == second_host.delivered == []
        await harness.wait_for_idle()


async def test_a_self_send_is_refused(harnesses: Callable[..., Any], model: ScriptedChat) -> None:
    harness = await harnesses()
    registration = (await runtime_of(harness)).registration()
    assert registration is not None
    model.responder = send_once(registration.name, "talking to myself")
    await harness.prompt("message yourself")
    [result] = await send_results(harness)
    assert result.details["code"] == "invalid_target"
    assert "cannot send a message to itself" in result.content[0]["text"]
    assert (await runtime_of(harness)).remaining_budget() == 256  # nothing was spent


async def test_identical_repeats_are_dropped_and_an_over_rate_sender_refused(
    harnesses: Callable[..., Any], model: ScriptedChat, peer: Peer
) -> None:
    _, beta = peer
    hold, recorder = HoldTool(), Recorder()

    def respond(messages: Sequence[BaseMessage]) -> AIMessage:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            return say("released")
        if text_of(last).startswith(PEER_HEADER):
            return say("seen")
        return call_tool("hold", {})

    model.responder = respond
    harness = await harnesses(hold.activate, recorder.activate)
    target = await instance_of(harness)
    user_turn = asyncio.ensure_future(harness.prompt("wait for me"))
    await hold.entered.wait()

    # Busy with a user turn: admitted messages queue, so every refusal below is the limits'.
    first = await beta.send(target, "same words")
    assert first.status == "queued", first
    repeat = await beta.send(target, "same words")
    assert repeat.status == "duplicate", repeat
    for n in range(RATE_CAPACITY - 1):
        report = await beta.send(target, f"distinct {n}")
        assert report.status == "queued", (n, report)
    over = await beta.send(target, "one too many")
    assert over.status == "rate_limited", over

    hold.release.set()
    await user_turn
    # The queued messages each start a turn of their own, one after another; nothing more.
    await eventually(lambda: len(recorder.ended()) == 1 + RATE_CAPACITY)
    await eventually(lambda: harness.phase == "idle")
    states = [row.state for row in (await runtime_of(harness)).snapshot().rows]  # type: ignore[union-attr]
    assert states.count("submitted") == RATE_CAPACITY, states
