"""How an MCP server's closed inbox says it is reopened: through the server's own
``cross-session-resume`` prompt, never pi-python's ``/cross-session-resume`` command, which an MCP
host does not have. The real server (``serve_streams``, what ``pi-cross-session mcp`` runs) is
driven by the SDK's client; its inbox closes the way it does in a host, by a channel notification
that cannot be written."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.shared.message import SessionMessage

from pi_cross_session._internal.plugin.hosts import mcp
from pi_cross_session._internal.plugin.hosts.mcp_seat import DeliveryMode
from pi_cross_session._internal.plugin.render import host_status, mcp_host, receiving
from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.security.admission import Latch, LatchReason
from tests.mcp.kit import mcp_peer, receipt_of
from tests.support.waiting import eventually

pytestmark = pytest.mark.anyio

#: pi-python's way to reopen; an MCP server must never tell its user or model to take it.
PI_PYTHON_WAY = receiving.REOPEN_WITH_COMMAND


class BrokenPush:
    """The push loop's writer when the host's pipe is gone: every notification fails."""

    async def send(self, item: SessionMessage, /) -> None:
        raise anyio.BrokenResourceError


def test_every_closed_inbox_text_names_the_prompt() -> None:
    latch = Latch(reason=LatchReason.UNSAFE_END, at_ms=0)
    reopen = mcp_host.REOPEN_WITH_PROMPT
    for text in (
        receiving.closed_line(latch, reopen),
        host_status.inbox_latched(latch, reopen=reopen),
    ):
        assert text.endswith(f"{reopen}.")
        assert "cross-session-resume prompt" in text
        assert PI_PYTHON_WAY not in text
    assert "the model cannot run it" in reopen


async def test_a_closed_mcp_inbox_says_to_reopen_it_with_the_servers_prompt(
    locations: Locations,
    workdir: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(mcp._Transport, "pushes", lambda self: BrokenPush())
    caplog.set_level(logging.WARNING, logger=mcp.__name__)
    async with mcp_peer(locations, workdir, mode=DeliveryMode.PUSH, name="mcp-closed") as peer:
        await eventually(lambda: peer.host.is_idle())  # once the host said it is initialized
        alice = peer.sender("alice")
        target = peer.registration
        receipt = await receipt_of(
            alice.registration, target, "hello", message_id="m1", sent_at=peer.clock.wall_ms()
        )
        assert receipt is None  # the notification was never written: no receipt claims it
        await eventually(lambda: peer.runtime.latch is not None)
        latch = peer.runtime.latch
        assert latch is not None

        listed, is_error = await peer.call("list_pi")
        status = await peer.session.get_prompt("cross-session-status")
        status_text: Any = status.messages[0].content
        refused = await receipt_of(
            alice.registration, target, "again", message_id="m2", sent_at=peer.clock.wall_ms()
        )
        resumed = await peer.session.get_prompt("cross-session-resume")
        resumed_text: Any = resumed.messages[0].content

    assert not is_error
    closed = receiving.closed_line(latch, mcp_host.REOPEN_WITH_PROMPT)
    assert closed in listed.splitlines()
    assert f"To reopen the inbox: {mcp_host.REOPEN_WITH_PROMPT}." in status_text.text
    notice = host_status.inbox_latched(latch, reopen=mcp_host.REOPEN_WITH_PROMPT)
    assert notice in caplog.messages
    for text in (listed, status_text.text, *caplog.messages):
        assert PI_PYTHON_WAY not in text
    assert refused is not None
    assert refused.status == Code.STOPPED
    assert "Inbox reopened" in resumed_text.text
