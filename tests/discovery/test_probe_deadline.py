"""A session's listings wait for a probe as long as its own probe deadline says.

The listing stops waiting for any probe a little after the probe's deadline (a guard against a
probe that ignores it). A runtime configured with a longer probe deadline (tests on a loaded
machine use one) must get a guard to match, not the contract's 350 ms plus margin.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.abc
import pytest

from pi_cross_session._internal.protocol.io.exchange import ExchangeConfig
from pi_cross_session._internal.protocol.limits import PROBE_DEADLINE_S, PROBE_GUARD_MARGIN_S
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import Registration
from pi_cross_session._internal.security.io import fs
from tests.support.bounds import MUST_HAPPEN_S
from tests.support.fake_receiver import ready
from tests.support.socket_peers import make_registration, publish
from tests.support.wire_session import headless_session

pytestmark = pytest.mark.anyio

#: How late the slow peer answers: past the contract's guard, well inside the configured deadline.
ANSWER_AFTER_S = 3 * (PROBE_DEADLINE_S + PROBE_GUARD_MARGIN_S)


@asynccontextmanager
async def slow_peer(locations: Locations, name: str) -> AsyncIterator[Registration]:
    """A published peer that answers every hello with ``ready``, ``ANSWER_AFTER_S`` late."""
    registration = make_registration(locations, name, pid=os.getpid())
    answer = ready(registration)

    async def serve(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            line = b""
            while not line.endswith(b"\n"):
                line += await stream.receive()
            await anyio.sleep(ANSWER_AFTER_S)
            # A lister that gave up has closed its end already.
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                await stream.send(answer.make(json.loads(line)))

    fs.ensure_private_dir(locations.runtime_dir)
    listener = await anyio.create_unix_listener(registration.socket_path)
    os.chmod(registration.socket_path, 0o600)
    async with listener, anyio.create_task_group() as group:
        group.start_soon(listener.serve, serve)
        publish(locations, registration)
        try:
            yield registration
        finally:
            group.cancel_scope.cancel()


async def test_a_listing_waits_for_the_configured_probe_deadline(locations: Locations) -> None:
    patient = ExchangeConfig(probe_deadline_s=MUST_HAPPEN_S)
    async with (
        slow_peer(locations, "slow") as peer,
        headless_session(locations, "lister", exchange=patient, listing_at_start=False) as (
            _,
            lister,
        ),
    ):
        listing = await lister.list_peers()
        assert [p.instance_id for p in listing.peers] == [peer.instance_id]


async def test_with_the_contracts_deadline_a_late_answer_hides_the_peer(
    locations: Locations,
) -> None:
    async with (
        slow_peer(locations, "slow") as peer,
        headless_session(
            locations, "lister", exchange=ExchangeConfig(), listing_at_start=False
        ) as (_, lister),
    ):
        listing = await lister.list_peers()
        assert listing.peers == []
        assert listing.hidden == 1  # its pid is alive: hidden, not reaped
        assert peer.instance_id
