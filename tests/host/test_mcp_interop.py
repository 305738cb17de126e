"""An MCP peer and a real pi-python session in one agent dir message each other both ways: the
MCP host's model sends with ``send_pi_message``, the pi-python session's scripted model reads the
framed message and answers with its own ``send_pi_message``, and the MCP host reads the answer
with ``wait_pi_message``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from pi_cross_session._internal.plugin.render import peer_text
from pi_cross_session._internal.protocol.io.exchange import ExchangeConfig
from pi_cross_session._internal.protocol.paths import Locations
from tests.host.conftest import PEER_PROBE_S
from tests.host.pi_harness import ScriptedChat, call_tool, runtime_of, say, text_of
from tests.mcp.kit import mcp_peer
from tests.support.waiting import eventually

pytestmark = pytest.mark.anyio

PEER_HEADER = "Message from another session"


async def test_an_mcp_peer_and_a_pi_python_session_message_each_other(
    harnesses: Callable[..., Any], model: ScriptedChat, locations: Locations, workdir: Path
) -> None:
    def responder(messages: Sequence[BaseMessage]) -> AIMessage:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            return say("answered")
        if text_of(last).startswith(PEER_HEADER) and "ping from the mcp host" in text_of(last):
            return call_tool("send_pi_message", {"target": "mcp-peer", "message": "pong from pi"})
        return say("ok")

    model.responder = responder
    harness = await harnesses()
    pi = await runtime_of(harness)
    assert pi.identity is not None
    async with mcp_peer(
        locations,
        workdir,
        system_clock=True,
        exchange=ExchangeConfig(probe_deadline_s=PEER_PROBE_S),
    ) as peer:
        text, is_error = await peer.call(
            "send_pi_message",
            {"target": pi.identity.instance_id, "message": "ping from the mcp host"},
        )
        assert not is_error, text
        assert text.startswith("Message submitted to ")

        text, is_error = await peer.call("wait_pi_message", {"seconds": 20})
        assert not is_error
        assert peer_text.fenced_text(text) == "pong from pi"
        name = pi.name
        assert name is not None
        assert f"Reply address (send_pi_message target): {name} [" in text

        # The pi-python session read the MCP host's message framed, as from any peer. Its answer
        # was queued by the MCP peer if it came before the wait began, or handed straight to the
        # wait; either way the wait's result delivered it.
        [seen] = [t for t in model.human_texts() if t.startswith(PEER_HEADER)]
        assert peer_text.fenced_text(seen) == "ping from the mcp host"
        await eventually(model.tool_results)
        [result] = model.tool_results()
        assert result.startswith(
            ("Message queued to mcp-peer [", "Message submitted to mcp-peer [")
        ), result
        await eventually(lambda: all(row.delivered for row in peer.snapshot().rows))
