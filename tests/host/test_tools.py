"""The model's tools in a real harness, against a live peer session in the same process (and a
real ``pi-cross-session inbox`` process where a summary sent cut is checked as it arrived)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from pi_cross_session._internal.plugin.render import host_tools, listings
from pi_cross_session._internal.protocol.limits import MAX_SUMMARY_CODE_POINTS
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.text import utf16_length
from tests.host.pi_harness import Peer, ScriptedChat, call_tool, runtime_of, say, text_of
from tests.support.processes import Inboxes
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


#: A summary within the tool's 400 UTF-16 units that folds to 262 code points: 120 letters, one
#: space for the tabs, 130 astral characters (two units each), one space for the line break and
#: the spaces around it, 10 letters. The wire keeps the first 200 code points of the folded line.
LONG_SUMMARY = "  " + "a" * 120 + "\t\t" + "\U0001f600" * 130 + "  \n " + "z" * 10
FOLDED_LONG_SUMMARY = "a" * 120 + " " + "\U0001f600" * 130 + " " + "z" * 10


async def test_a_summary_longer_than_a_message_carries_is_sent_cut_and_the_result_says_so(
    harnesses: Callable[..., Any], model: ScriptedChat, private_agent_dir: Path, tmp_path: Path
) -> None:
    # Issue 24: the tool took a 262-character summary and sent 200 of it without a word.
    assert utf16_length(LONG_SUMMARY) == 398  # within the tool's bound: not refused
    inboxes = Inboxes(private_agent_dir, tmp_path)
    try:
        inbox = inboxes.start("bob")
        harness = await harnesses()
        model.responder = tool_once(
            "send_pi_message", {"target": "bob", "message": "hi", "summary": LONG_SUMMARY}
        )
        await harness.prompt("tell bob hi")
        received = await anyio.to_thread.run_sync(partial(inbox.wait_event, "message"))
    finally:
        inboxes.close()
    assert received["summary"] == FOLDED_LONG_SUMMARY[:MAX_SUMMARY_CODE_POINTS]
    [result] = await tool_results(harness)
    assert not result.isError
    text = result.content[0]["text"]
    first, note = text.split("\n")
    assert first.startswith("Message submitted to bob [")
    assert note == host_tools.summary_cut(262)
    assert note == (
        "Note: the summary was 262 characters once folded to one line; a message carries at "
        "most 200, so it was cut to its first 200."
    )
    assert result.details["summaryCut"] == {"codePoints": 262, "kept": 200}
    assert result.details["messageId"] == received["messageId"]


async def test_a_summary_that_folds_to_what_a_message_carries_gets_no_note(
    harnesses: Callable[..., Any], model: ScriptedChat, peer: Peer
) -> None:
    beta_host, _ = peer
    harness = await harnesses()
    # 204 characters, 200 once its whitespace is folded: nothing is cut.
    summary = "  a summary\tof   exactly two hundred after folding " + "x" * 153
    model.responder = tool_once(
        "send_pi_message", {"target": "beta", "message": "hi", "summary": summary}
    )
    await harness.prompt("tell beta hi")
    await eventually(lambda: beta_host.delivered)
    [result] = await tool_results(harness)
    assert not result.isError
    assert "\n" not in result.content[0]["text"]
    assert "summaryCut" not in result.details
    assert len(beta_host.delivered[0].summary) == MAX_SUMMARY_CODE_POINTS


async def test_a_send_that_wrote_nothing_says_nothing_of_its_summary(
    harnesses: Callable[..., Any], model: ScriptedChat, peer: Peer
) -> None:
    harness = await harnesses()
    model.responder = tool_once(
        "send_pi_message", {"target": "gamma", "message": "hi", "summary": LONG_SUMMARY}
    )
    await harness.prompt("tell gamma hi")
    [result] = await tool_results(harness)
    assert result.isError
    assert result.details["code"] == "not_found"
    assert "Note: the summary" not in result.content[0]["text"]
    assert "summaryCut" not in result.details


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
