"""Status, cleanup and robustness of the extension inside a real harness."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import pytest

from pi_cross_session._internal.plugin.hosts import pi_python
from pi_cross_session._internal.plugin.hosts.headless import HeadlessHost
from pi_cross_session._internal.plugin.runtime import SessionRuntime
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.security.turns import TurnEvent, TurnStarted
from tests.host.pi_harness import (
    Recorder,
    ScriptedChat,
    reply_text,
    runtime_of,
    session_id,
    took_over,
)
from tests.support.waiting import eventually

pytestmark = pytest.mark.anyio

Peer = tuple[HeadlessHost, SessionRuntime]


async def test_status_text_and_json(
    harnesses: Callable[..., Any], model: ScriptedChat, peer: Peer
) -> None:
    _, beta = peer
    recorder = Recorder()
    harness = await harnesses(recorder.activate)
    runtime = await runtime_of(harness)
    registration = runtime.registration()
    assert registration is not None
    assert (await beta.send(registration.instance_id, "status check")).status == "submitted"
    await eventually(lambda: recorder.ended())
    await eventually(lambda: harness.phase == "idle")

    text = await reply_text(harness, "/cross-session-status")
    lines = text.splitlines()
    assert lines[0] == f"Inbox: {registration.name} [{registration.ref}]"
    assert lines[1] == "Phase: idle; inbox open"
    assert lines[2].startswith("Budget: 255 of 256 left; queue 0/50; admitted 1")
    assert "delivered" in text  # a submitted row the host confirmed
    assert "from beta [" in text
    assert "Inbound: accept (set by the default)" in text

    data = json.loads(await reply_text(harness, "/cross-session-status --json"))
    assert data["running"] is True
    assert data["stopped"] is False
    assert data["phase"] == "idle"
    assert data["remainingBudget"] == 255
    assert data["pending"] == 0
    assert data["instanceId"] == registration.instance_id
    assert data["inbound"] == "accept"
    assert data["inboundSource"] == "default"
    assert data["problems"] == []
    [message] = data["messages"]
    assert message["state"] == "submitted"
    assert message["source"] == beta.identity.instance_id  # type: ignore[union-attr]

    assert (await reply_text(harness, "/cross-session-status --yaml")).startswith("Usage:")


async def test_peers_command_lists_like_the_tool(harnesses: Callable[..., Any], peer: Peer) -> None:
    harness = await harnesses()
    for command in ("/peers", "/list-pi"):
        lines = (await reply_text(harness, command)).splitlines()
        assert lines[0].startswith("This session: ")
        assert len(lines) == 2
        assert lines[1].startswith("beta [")


async def test_close_removes_the_registration_and_the_socket(
    harnesses: Callable[..., Any], locations: Locations
) -> None:
    harness = await harnesses()
    runtime = await runtime_of(harness)
    identity = runtime.identity
    assert identity is not None
    registration_path = locations.registration_path(identity.instance_id)
    socket_path = locations.socket_path(identity.instance_id)
    assert os.path.exists(registration_path)  # noqa: ASYNC240
    assert os.path.exists(socket_path)  # noqa: ASYNC240
    sid = await session_id(harness)

    await harness.close()
    assert not os.path.exists(registration_path)  # noqa: ASYNC240
    assert not os.path.exists(socket_path)  # noqa: ASYNC240
    assert runtime.identity is None
    assert pi_python.runtime_for(sid) is None
    assert os.listdir(locations.peers_dir) == []
    # The last state stays readable after the end.
    snapshot = runtime.snapshot()
    assert snapshot is not None
    assert snapshot.shut_down


async def test_a_failing_hook_never_breaks_the_turn(
    harnesses: Callable[..., Any], model: ScriptedChat, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = await harnesses()

    original = SessionRuntime.on_turn

    def broken(self: SessionRuntime, event: TurnEvent) -> None:
        if isinstance(event, TurnStarted):
            raise RuntimeError("simulated failure")
        original(self, event)

    monkeypatch.setattr(SessionRuntime, "on_turn", broken)
    assert await reply_text(harness, "hello") == "ok"
    assert harness.phase == "idle"
    data = json.loads(await reply_text(harness, "/cross-session-status --json"))
    assert data["problems"] == [
        "tracking the start of a turn: RuntimeError: simulated failure",
    ]
    text = await reply_text(harness, "/cross-session-status")
    assert "Problems seen in this session" in text


async def test_two_sessions_in_one_process_have_their_own_runtimes(
    harnesses: Callable[..., Any],
) -> None:
    first, second = await harnesses(), await harnesses()
    one, two = await runtime_of(first), await runtime_of(second)
    assert one is not two
    assert one.identity.instance_id != two.identity.instance_id  # type: ignore[union-attr]
    listing = await one.list_peers()
    assert [p.instance_id for p in listing.peers] == [two.identity.instance_id]  # type: ignore[union-attr]
    assert one.registration().name != two.registration().name  # type: ignore[union-attr]


async def test_loading_the_extension_again_replaces_the_inbox(
    harnesses: Callable[..., Any], locations: Locations
) -> None:
    harness = await harnesses()
    sid = await session_id(harness)
    old = await runtime_of(harness)
    assert old.identity is not None
    old_registration = locations.registration_path(old.identity.instance_id)

    # The host sends no second session_start; the new activation takes over by itself.
    harness.load_extension(pi_python.activate)
    await eventually(lambda: old.identity is None)
    await eventually(lambda: took_over(sid, old))
    new = pi_python.runtime_for(sid)
    assert new is not None
    assert new is not old
    assert not os.path.exists(old_registration)  # noqa: ASYNC240
    assert len(os.listdir(locations.peers_dir)) == 1
    assert "list_pi" in harness.extension_registry.get_tools()
