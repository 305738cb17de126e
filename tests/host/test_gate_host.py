"""The tool-call gate in a real harness: a peer-only turn cannot delegate; a user turn can."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from tests.host.pi_harness import (
    FakeWorkflowTool,
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


def workflow_on_request(messages: Sequence[BaseMessage]) -> AIMessage:
    """Whoever asks — user or peer — the model tries to start a workflow, then reports."""
    last = messages[-1]
    if isinstance(last, ToolMessage):
        return say(f"result: {text_of(last)}")
    if isinstance(last, HumanMessage) and "workflow" in text_of(last):
        return call_tool("workflow", {"script": "fan out"})
    return say("ok")


async def test_a_peer_turn_cannot_start_a_workflow_but_a_user_turn_can(
    harnesses: Callable[..., Any], model: ScriptedChat, peer: Peer
) -> None:
    _, beta = peer
    workflow, recorder = FakeWorkflowTool(), Recorder()
    harness = await harnesses(workflow.activate, recorder.activate)
    model.responder = workflow_on_request
    target = (await runtime_of(harness)).identity.instance_id  # type: ignore[union-attr]

    sent = await beta.send(target, "please start a workflow to refactor everything")
    assert sent.status == "submitted"
    await eventually(lambda: recorder.ended())
    assert workflow.runs == []  # blocked before it ran
    [blocked] = model.tool_results()
    assert blocked.startswith("Blocked by cross-session safety: `workflow`")
    assert "started by a message from another agent session" in blocked
    assert "Tell your user" in blocked
    assert recorder.ended() == [["toolUse", "stop"]]  # the turn itself went on normally

    # The same request from the local user is theirs to make.
    await eventually(lambda: harness.phase == "idle")
    reply = await reply_text(harness, "run the workflow please")
    assert reply == "result: workflow ran"
    assert workflow.runs == [{"script": "fan out"}]

    # A block does not close the inbox: the peer can still write.
    again = await beta.send(target, "thanks")
    assert again.status == "submitted"


async def test_a_peer_turn_may_answer_with_ordinary_tools(
    harnesses: Callable[..., Any], model: ScriptedChat, peer: Peer
) -> None:
    beta_host, beta = peer
    recorder = Recorder()
    harness = await harnesses(recorder.activate)

    def answer(messages: Sequence[BaseMessage]) -> AIMessage:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            return say("answered")
        if text_of(last).startswith("Message from another session"):
            return call_tool("send_pi_message", {"target": "beta", "message": "here you go"})
        return say("ok")

    model.responder = answer
    target = (await runtime_of(harness)).identity.instance_id  # type: ignore[union-attr]
    assert (await beta.send(target, "what is the answer?")).status == "submitted"
    await eventually(lambda: beta_host.delivered)
    assert [d.text for d in beta_host.delivered] == ["here you go"]
    assert not any(r.startswith("Blocked") for r in model.tool_results())


async def test_a_notification_turn_of_another_extension_is_trusted(
    harnesses: Callable[..., Any], model: ScriptedChat, peer: Peer
) -> None:
    _, beta = peer
    workflow, recorder = FakeWorkflowTool(), Recorder()
    apis: list[Any] = []
    harness = await harnesses(workflow.activate, recorder.activate, apis.append)
    model.responder = workflow_on_request

    # Another extension of this session (code the user loaded) reports back with its own type.
    apis[0]._require_bridge().trigger_message("workflow-report", "workflow finished; next one?")
    await eventually(lambda: recorder.ended())
    await eventually(lambda: harness.phase == "idle")
    [run] = recorder.runs()
    assert run[0]["customType"] == "workflow-report"
    assert workflow.runs == [{"script": "fan out"}]  # not gated

    # A clean notification turn leaves the inbox open.
    runtime = await runtime_of(harness)
    assert not runtime.snapshot().stopped  # type: ignore[union-attr]
    target = runtime.identity.instance_id  # type: ignore[union-attr]
    assert (await beta.send(target, "hello")).status == "submitted"
