"""An MCP peer in the test's own process: the real server, runtime and endpoint, driven by the
SDK's real client over the SDK's in-memory transport.

:func:`mcp_peer` runs :func:`~pi_cross_session._internal.plugin.hosts.mcp.serve_streams` (what
``pi-cross-session mcp`` runs on stdin and stdout) on a fake clock and connects a
:class:`mcp.client.ClientSession` to it, with a binding that records every channel notification.
Senders are ``WireSender``s (tests/support/wire_session.py): published registrations that speak
the wire byte by byte, so every receipt is shape-checked, into a ``Ledger`` that
``assert_accounted`` checks the receiver against. :func:`receipt_of` sends one message as any
registration (its name need not make a valid request id) and tells a missing receipt apart.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import anyio
from mcp.client import ClientSession, NotificationBinding
from mcp.shared.memory import create_client_server_memory_streams
from pydantic import BaseModel

from pi_cross_session._internal.plugin.hosts.mcp import (
    CHANNEL_METHOD,
    McpHost,
    McpOptions,
    serve_streams,
)
from pi_cross_session._internal.plugin.hosts.mcp_seat import DeliveryMode
from pi_cross_session._internal.plugin.runtime import SessionRuntime
from pi_cross_session._internal.protocol import frames
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import Registration
from tests.support import raw_client
from tests.support.clocks import FakeClock
from tests.support.waiting import eventually
from tests.support.wire_session import Ledger, SessionViews, runtime_options


class ChannelParams(BaseModel):
    """``notifications/claude/channel`` as Claude Code reads it: content and string meta."""

    content: str
    meta: dict[str, str] | None = None


@dataclass
class McpPeer(SessionViews):
    """The peer under test, its MCP client, and what the senders were told."""

    session: ClientSession
    runtime: SessionRuntime
    clock: FakeClock
    locations: Locations
    ledger: Ledger = field(default_factory=Ledger)
    channel: list[ChannelParams] = field(default_factory=list)

    @property
    def host(self) -> McpHost:
        host = self.runtime.host
        assert isinstance(host, McpHost)
        return host

    def advance(self, seconds: float) -> None:
        """Move admission time forward and wake the runtime's maintenance loop."""
        self.clock.advance(seconds)
        self.runtime.on_session_info_changed()

    async def call(self, tool: str, arguments: dict[str, Any] | None = None) -> tuple[str, bool]:
        """Call a tool as a host would; returns its text and whether it is an error."""
        result = await self.session.call_tool(tool, arguments or {})
        [block] = result.content
        assert block.type == "text", block
        return block.text, result.is_error

    async def channel_count(self, count: int) -> None:
        await eventually(lambda: len(self.channel) >= count)


@asynccontextmanager
async def mcp_peer(
    locations: Locations,
    cwd: Path,
    *,
    mode: DeliveryMode = DeliveryMode.PULL,
    name: str = "mcp-peer",
    clock: FakeClock | None = None,
    system_clock: bool = False,
    **overrides: Any,
) -> AsyncIterator[McpPeer]:
    """Run an MCP peer and its initialized client until the block ends; then the client closes
    its side, as a host closing the server's stdin, and the peer withdraws. Its admission runs
    on ``clock`` (a fresh fake one by default), or on the real clock with ``system_clock``, to
    talk to sessions that use it."""
    clock = clock or FakeClock()
    options = McpOptions(name=name, cwd=str(cwd), delivery=mode)
    channel: list[ChannelParams] = []

    async def on_channel(params: ChannelParams) -> None:
        channel.append(params)

    binding = NotificationBinding(
        method=CHANNEL_METHOD, params_type=ChannelParams, handler=on_channel
    )
    async with (
        create_client_server_memory_streams() as (client_streams, server_streams),
        anyio.create_task_group() as group,
    ):
        runtime = await group.start(
            partial(
                serve_streams,
                options,
                *server_streams,
                locations=locations,
                runtime_options=runtime_options(None if system_clock else clock, **overrides),
            )
        )
        async with ClientSession(*client_streams, notification_bindings=[binding]) as session:
            await session.initialize()
            peer = McpPeer(session, runtime, clock, locations, channel=channel)
            yield peer
            await peer.endpoint_idle()
        await client_streams[1].aclose()
        with anyio.fail_after(10):
            await runtime.wait_finished()


async def receipt_of(
    sender: Registration,
    target: Registration,
    text: str,
    *,
    message_id: str,
    summary: str = "a summary",
    sent_at: int | None = None,
) -> frames.Response | None:
    """Send one message from ``sender`` (a published registration) to ``target``; returns the
    receipt, or ``None`` when the receiver closed the connection without one."""
    async with raw_client.RawClient.connect(target.socket_path) as client:
        hello = raw_client.hello(target, sender=sender, request_id=f"h-{message_id}")
        await client.send(raw_client.line(hello))
        ready = await client.read_reply()
        assert (ready.ok, ready.status) == (True, "ready"), ready
        body = raw_client.message_body(
            text=text,
            request_id=f"r-{message_id}",
            message_id=message_id,
            summary=summary,
            sent_at=sent_at,
        )
        await client.send(raw_client.line(body))
        raw = await client.read_line()
        return None if raw is None else raw_client.parse_reply(raw)
