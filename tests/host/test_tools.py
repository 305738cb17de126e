"""The model's tools in a real harness, against a live peer session in the same process."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from pi_cross_session._internal.plugin.render import listings
from pi_cross_session._internal.protocol.paths import Locations
from tests.host.pi_harness import Peer, ScriptedChat, call_tool, runtime_of, say, text_of
from tests.support.waiting import eventually

pytestmark = pytest.mark.anyio


def tool_once(name: str, args: dict[str, Any]) -> Callable[[Sequence[BaseMessage]], AIMessage]:
    """Call ``name`` in answer to a prompt, then report what the tool said."""

    def respond(messages: Sequence[BaseMessage]) -> AIMessage:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            return say(f"tool said: {text_of(last)}")
        return call_tool(name, args)

    return respond


async def tool_results(harness: Any) -> list[Any]:
    """Every tool result message saved in the harness's session."""
    context = await harness.session.build_context()
    return [m for m in context.messages if getattr(m, "role", None) == "toolResult"]


async def test_list_pi_lists_a_live_peer(
    harnesses: Callable[..., Any], model: ScriptedChat, peer: Peer
) -> None:
    _, beta = peer
    harness = await harnesses()
    model.responder = tool_once("list_pi", {})
    reply = await harness.prompt("who else is running?")
    assert reply.stopReason == "stop"
    [result] = await tool_results(harness)
    assert not result.isError
    text = result.content[0]["text"]
    me = await runtime_of(harness)
    lines = text.splitlines()
    assert lines[0].startswith("This session: ")
    assert str(me.registration().name) in lines[0]  # type: ignore[union-attr]
    beta_registration = beta.registration()
    assert beta_registration is not None
    assert len(lines) == 3
    assert lines[1].startswith(f"beta [{beta_registration.ref}] — idle — ")
    # The full runtime id, which peer_goal bind takes (the listing line shows only the ref).
    expected = f"beta [{beta_registration.ref}] = {beta_registration.instance_id}"
    assert lines[2] == f"Runtime ids (for peer_goal bind): {expected}"
    assert result.details["self"]["instanceId"] == me.identity.instance_id  # type: ignore[union-attr]
    assert [p["name"] for p in result.details["peers"]] == ["beta"]
    assert "token" not in result.details["peers"][0]


async def test_list_pi_with_no_peer_says_where_it_looked(
    harnesses: Callable[..., Any], model: ScriptedChat, locations: Locations
) -> None:
    # Issue 24 item 3: "no other live sessions" names the agent dir and how to look elsewhere.
    harness = await harnesses()
    model.responder = tool_once("list_pi", {})
    await harness.prompt("who else is running?")
    [result] = await tool_results(harness)
    assert not result.isError
    lines = result.content[0]["text"].splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("This session: ")
    assert f'in the agent dir "{locations.agent_dir}". ' in lines[1]
    assert "PI_CODING_AGENT_DIR" in lines[1]
    assert lines[1] == listings.no_peers(locations.agent_dir)
    assert result.details["peers"] == []


async def test_send_reaches_the_peer_and_reports_honestly(
    harnesses: Callable[..., Any], model: ScriptedChat, peer: Peer
) -> None:
    beta_host, _ = peer
    harness = await harnesses()
    model.responder = tool_once(
        "send_pi_message", {"target": "beta", "message": "build is green", "summary": "CI"}
    )
    await harness.prompt("tell beta the build is green")
    await eventually(lambda: beta_host.delivered)
    [delivery] = beta_host.delivered
    assert delivery.text == "build is green"
    assert delivery.summary == "CI"
    me = await runtime_of(harness)
    assert delivery.sender.instance_id == me.identity.instance_id  # type: ignore[union-attr]

    [result] = await tool_results(harness)
    assert not result.isError
    details = result.details
    assert details["ok"] is True
    assert details["status"] == "submitted"
    assert details["messageId"] == delivery.message_id
    assert details["target"]["name"] == "beta"
    text = result.content[0]["text"]
    assert text.startswith("Message submitted to beta [")
    assert "not yet read or acted on" in text  # honest: submitted is not "read"
    assert me.remaining_budget() == 255


async def test_a_failed_send_is_an_error_with_structured_details(
    harnesses: Callable[..., Any], model: ScriptedChat, peer: Peer
) -> None:
    harness = await harnesses()
    model.responder = tool_once("send_pi_message", {"target": "gamma", "message": "hello?"})
    reply = await harness.prompt("tell gamma hello")
    assert reply.stopReason == "stop"
    [result] = await tool_results(harness)
    assert result.isError  # marked by our tool_result hook; the host's results carry no flag
    details = result.details
    assert details["ok"] is False
    assert details["code"] == "not_found"
    assert details["retryable"] is False
    assert details["next"]
    assert details["messageId"] is None  # nothing was sent, so there is nothing to ask about
    text = result.content[0]["text"]
    assert text.startswith("Message not sent: there is no such live session"), text
    assert "next: list the live sessions with list_pi" in text


async def test_parameters_over_the_utf16_limit_never_reach_the_runtime(
    harnesses: Callable[..., Any], model: ScriptedChat, peer: Peer
) -> None:
    beta_host, _ = peer
    harness = await harnesses()
    # 300 astral characters: 300 code points (under the schema's 512) but 600 UTF-16 units.
    model.responder = tool_once("send_pi_message", {"target": "\U0001f600" * 300, "message": "x"})
    await harness.prompt("send something odd")
    [result] = await tool_results(harness)
    assert result.isError
    assert "invalid_target" in result.content[0]["text"]
    assert beta_host.delivered == []
    assert (await runtime_of(harness)).remaining_budget() == 256


async def test_the_peer_sees_our_address_in_its_listing(
    harnesses: Callable[..., Any], peer: Peer
) -> None:
    _, beta = peer
    harness = await harnesses()
    me = await runtime_of(harness)
    listing = await beta.list_peers()
    registration = me.registration()
    assert registration is not None
    assert [p.instance_id for p in listing.peers] == [registration.instance_id]
    assert listings.address(listing.peers[0]).endswith(f"[{registration.ref}]")
