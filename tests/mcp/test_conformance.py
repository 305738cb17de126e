"""The MCP peer's wire traffic passes the conformance replay every receiver passes: the reference
client's recorded frames (tests/wire/test_reference_conversations.py, the default phase, all
on one receiver) against an MCP peer in push mode, whose idle host takes a message at once as the
recorded idle host did. Every reply must agree with the recorded one in shape, codes, key order,
requestId echo and peer identity, and every connection must close when the recording says."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pi_cross_session._internal.plugin.hosts.mcp_seat import DeliveryMode
from pi_cross_session._internal.protocol.io.endpoint import EndpointConfig
from pi_cross_session._internal.protocol.paths import Locations
from tests.mcp.kit import mcp_peer
from tests.support.clocks import FakeClock
from tests.support.replay import Transcript, fresh_session_id, sent_at_values
from tests.support.socket_peers import make_registration, publish
from tests.support.waiting import eventually
from tests.wire.test_reference_conversations import (
    DEFAULT_PHASE,
    IDLE_AFTER_HELLO_S,
    RECEIVING,
    identities_for,
    replay_connection,
)

pytestmark = pytest.mark.anyio


async def test_the_reference_default_phase_replays_against_an_mcp_peer(
    locations: Locations, workdir: Path
) -> None:
    transcripts = [Transcript.load(RECEIVING[key].stem) for key in DEFAULT_PHASE]
    sender = make_registration(locations, "py-ref", session_id=fresh_session_id())
    publish(locations, sender)
    wall_start = min(sent_at_values(transcripts), default=int(time.time() * 1000))
    async with mcp_peer(
        locations,
        workdir,
        mode=DeliveryMode.PUSH,
        clock=FakeClock(wall_ms=wall_start),
        endpoint=EndpointConfig(idle_after_hello_s=IDLE_AFTER_HELLO_S),
    ) as peer:
        await eventually(peer.host.is_idle)
        ids = identities_for(transcripts, peer, sender)  # type: ignore[arg-type]
        for transcript in transcripts:
            for conn in transcript.connections:
                await replay_connection(transcript, conn, peer, ids)  # type: ignore[arg-type]
                # The recorded host ran the turn a submission started before the next
                # connection; here the notification is written before the next one.
                await eventually(lambda: peer.host.seat.handing is None)
        snapshot = peer.snapshot()
        # One admission (03); 06's duplicate and 07's unauthenticated message admitted nothing.
        assert snapshot.admitted == 1
        assert snapshot.refusals == {"duplicate": 1, "authentication_failed": 1}
        assert len(peer.channel) == 1
