"""The hostile wire catalogue, against an MCP peer's socket: every named attack on a first frame,
on a second frame, and every unverifiable sender claim (tests/receiver/test_catalogue_wire.py) gets
the same exact answer from an MCP peer as from the scripted receiver the catalogue was written
for, and admits what it admits there: nothing, or the one message, which then reaches the host as
one channel notification. The cases are the catalogue's own lists, imported, not copied: a case
added there runs here too.

The peer runs in push mode, whose host takes a message at once as the catalogue's idle scripted
host does, so an admitted message is answered ``submitted`` in both."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from pi_cross_session._internal.plugin.hosts.mcp_seat import DeliveryMode
from pi_cross_session._internal.protocol.paths import Locations
from tests.mcp.kit import McpPeer, mcp_peer
from tests.receiver.live import identity
from tests.receiver.model import Identity
from tests.receiver.strategies import hello_obj
from tests.receiver.talk import HELLO_ID, Reply, lines, talk
from tests.receiver.test_catalogue_wire import (
    CLAIMS,
    FIRST_FRAMES,
    SECOND_FRAMES,
    SUBMITTED,
    Ctx,
    auth_hello,
    message,
)
from tests.support.socket_peers import published_sender
from tests.support.wire_session import eventually

pytestmark = [pytest.mark.anyio, pytest.mark.hostile]


@asynccontextmanager
async def receiving(locations: Locations, workdir: Path) -> AsyncIterator[tuple[McpPeer, Ctx]]:
    """An MCP peer ready to take a message, a published sender ``alpha`` and another session."""
    async with mcp_peer(locations, workdir, mode=DeliveryMode.PUSH) as peer:
        await eventually(peer.host.is_idle)  # the host finished its handshake
        alpha = published_sender(locations, "alpha")
        other = published_sender(locations, "other")
        yield peer, Ctx(locations, peer.registration, alpha, other, peer.clock.wall_ms())


async def admitted(peer: McpPeer) -> list[tuple[str, str]]:
    """Admitted messages, from the receiver's rows and from what reached the host; they agree."""
    snapshot = peer.snapshot()
    rows = [(row.sender_instance_id, row.message_id) for row in snapshot.rows]
    assert snapshot.admitted == len(rows) == len(set(rows))
    await peer.channel_count(len(rows))
    await eventually(lambda: peer.host.seat.handing is None)
    pushed = [
        (row_id, (event.meta or {}).get("message_id"))
        for (row_id, _), event in zip(rows, peer.channel, strict=True)
    ]
    assert pushed == rows
    for (instance_id, _), event in zip(rows, peer.channel, strict=True):
        assert (event.meta or {}).get("ref") == instance_id[:8]
    return rows


async def still_serving(peer: McpPeer) -> None:
    """A legitimate probe still gets ``ready``."""
    probe = lines(hello_obj(identity(peer.registration)))
    assert await talk(peer.registration.socket_path, probe) == [(True, "ready", HELLO_ID)]


@pytest.mark.parametrize(("claim", "case"), [(c, n) for n, c in CLAIMS], ids=[n for n, _ in CLAIMS])
async def test_hello_from_an_unverifiable_sender_is_refused_by_an_mcp_peer(
    locations: Locations, workdir: Path, claim: Callable[[Ctx], Identity], case: str
) -> None:
    async with receiving(locations, workdir) as (peer, ctx):
        stream = lines(auth_hello(ctx, claim(ctx)), message(ctx))
        replies = await talk(ctx.target.socket_path, stream)
        assert replies == [(False, "authentication_failed", HELLO_ID)], case
        assert await admitted(peer) == []
        assert peer.channel == []
        await still_serving(peer)


@pytest.mark.parametrize(("stream", "expected"), FIRST_FRAMES)
async def test_first_frame_at_an_mcp_peer(
    locations: Locations, workdir: Path, stream: Callable[[Ctx], bytes], expected: list[Reply]
) -> None:
    async with receiving(locations, workdir) as (peer, ctx):
        assert await talk(ctx.target.socket_path, stream(ctx)) == expected
        assert await admitted(peer) == []
        assert peer.channel == []
        await still_serving(peer)


@pytest.mark.parametrize(("stream", "expected"), SECOND_FRAMES)
async def test_second_frame_at_an_mcp_peer(
    locations: Locations, workdir: Path, stream: Callable[[Ctx], bytes], expected: list[Reply]
) -> None:
    async with receiving(locations, workdir) as (peer, ctx):
        replies = await talk(ctx.target.socket_path, lines(auth_hello(ctx)) + stream(ctx))
        assert replies == [(True, "ready", HELLO_ID), *expected]
        rows = await admitted(peer)
        if expected == SUBMITTED:
            assert rows == [(ctx.alpha.instance_id, "m-1")]
        else:
            assert rows == []
            assert peer.channel == []
        await still_serving(peer)
