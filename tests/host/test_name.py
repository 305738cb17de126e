"""A session's name, through a real harness: ``/cross-session-name``, PI_CROSS_SESSION_NAME and
``[cross_session] name`` in agent.toml, in that order of precedence, and what peers see.

A rename keeps the incarnation (instance id, ref, message states) and rewrites the registration
before the command answers; ``/cross-session-status`` says the name and where it came from; the
choice is saved in the session and holds when it is resumed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from pi_cross_session._internal.plugin.runtime import SessionRuntime
from pi_cross_session._internal.protocol.paths import Locations
from tests.host.pi_harness import POLL_S, WAIT_S, Peer, reply_text, runtime_of

pytestmark = pytest.mark.anyio


def registered_name(locations: Locations, runtime: SessionRuntime) -> str:
    identity = runtime.identity
    assert identity is not None
    data = json.loads(Path(locations.registration_path(identity.instance_id)).read_text())
    name = data["name"]
    assert isinstance(name, str)
    return name


async def listed_as(beta: SessionRuntime, instance_id: str, name: str) -> None:
    """Wait until beta's listing shows ``instance_id`` under ``name``."""
    with anyio.fail_after(WAIT_S):
        while True:
            listing = await beta.list_peers()
            if any(p.instance_id == instance_id and p.name == name for p in listing.peers):
                return
            await anyio.sleep(POLL_S)


async def test_a_rename_is_published_shown_in_status_and_reaches_peers(
    harnesses: Callable[..., Any], locations: Locations, peer: Peer
) -> None:
    _, beta = peer
    harness = await harnesses()
    runtime = await runtime_of(harness)
    identity = runtime.identity
    assert identity is not None
    default = registered_name(locations, runtime)
    assert default.startswith("pi-")  # pi-python sessions have no name of their own

    shown = await reply_text(harness, "/cross-session-name")
    assert shown.startswith(f"Name: {default} (set by the host's session name, or the default)")
    assert "Usage: /cross-session-name NEW" in shown

    reply = await reply_text(harness, "/cross-session-name   Parser\tporter  ")
    assert reply.startswith("This session is now named Parser porter;")  # cleaned as the wire
    assert "saved with this session" in reply
    # Already published when the command answered; the same incarnation.
    assert registered_name(locations, runtime) == "Parser porter"
    assert runtime.identity == identity

    status = await reply_text(harness, "/cross-session-status")
    assert f"Inbox: Parser porter [{identity.instance_id[:8]}]" in status
    assert "Name: Parser porter (set by /cross-session-name in this session)" in status
    data = json.loads(await reply_text(harness, "/cross-session-status --json"))
    assert (data["name"], data["nameSource"]) == ("Parser porter", "session")

    await listed_as(beta, identity.instance_id, "Parser porter")
    report = await beta.send("Parser porter", "found you by your new name")
    assert report.ok, report
    assert report.target is not None
    assert report.target.instance_id == identity.instance_id


async def test_a_blank_name_is_refused_with_the_usage(
    harnesses: Callable[..., Any], locations: Locations
) -> None:
    harness = await harnesses()
    runtime = await runtime_of(harness)
    before = registered_name(locations, runtime)
    reply = await reply_text(harness, "/cross-session-name \u200b\u00a0")
    assert reply.startswith("Usage: /cross-session-name NEW")
    assert registered_name(locations, runtime) == before


async def test_the_name_choice_is_saved_and_holds_on_resume(
    harnesses: Callable[..., Any], locations: Locations, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PI_CROSS_SESSION_NAME", "from-the-environment")
    harness = await harnesses()
    assert registered_name(locations, await runtime_of(harness)) == "from-the-environment"
    await reply_text(harness, "/cross-session-name reviewer")
    entries = await harness.session.get_entries()
    saved = [e for e in entries if getattr(e, "customType", None) == "cross-session-name"]
    assert [e.data["name"] for e in saved] == ["reviewer"]

    session = harness.session
    await harness.close()
    resumed = await harnesses(session=session)
    runtime = await runtime_of(resumed)
    # The session's own choice wins over the environment, which still names new sessions.
    assert registered_name(locations, runtime) == "reviewer"
    shown = await reply_text(resumed, "/cross-session-name")
    assert shown.startswith("Name: reviewer (set by /cross-session-name in this session)")


async def test_the_environment_wins_over_agent_toml(
    harnesses: Callable[..., Any],
    locations: Locations,
    pi_home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (pi_home / "agent.toml").write_text('[cross_session]\nname = "from-config"\n')
    configured = await harnesses()
    runtime = await runtime_of(configured)
    assert registered_name(locations, runtime) == "from-config"
    status = await reply_text(configured, "/cross-session-status")
    assert "Name: from-config (set by [cross_session] name in agent.toml)" in status

    monkeypatch.setenv("PI_CROSS_SESSION_NAME", "from-env")
    launched = await harnesses()
    runtime = await runtime_of(launched)
    assert registered_name(locations, runtime) == "from-env"
    status = await reply_text(launched, "/cross-session-status")
    assert "Name: from-env (set by the environment variable PI_CROSS_SESSION_NAME)" in status
