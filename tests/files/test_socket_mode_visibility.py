"""Spec §10 item 8 end to end: a socket left at 0666 makes its session invisible and unreachable."""

from __future__ import annotations

import os

import anyio
import pytest

from pi_cross_session._internal.protocol.paths import Locations
from tests.support.wire_session import headless_session

pytestmark = pytest.mark.anyio


async def test_a_0666_socket_hides_the_peer_until_0600_is_restored(locations: Locations) -> None:
    async with (
        headless_session(locations, "alpha") as (_, alpha),
        headless_session(locations, "beta") as (_, beta),
    ):
        identity = beta.identity
        assert identity is not None
        socket_path = locations.socket_path(identity.instance_id)
        assert [p.name for p in (await alpha.list_peers()).peers] == ["beta"]

        await anyio.to_thread.run_sync(os.chmod, socket_path, 0o666)
        listing = await alpha.list_peers()
        assert listing.peers == []
        assert listing.hidden == 1  # its process lives, so it is hidden, never reaped
        report = await alpha.send("beta", "can you hear me?")
        assert (report.ok, report.status, report.message_written) == (False, "not_found", False)
        assert alpha.remaining_budget() == 256  # nothing was attempted

        await anyio.to_thread.run_sync(os.chmod, socket_path, 0o600)
        report = await alpha.send("beta", "and now?")
        assert (report.ok, report.status) == (True, "submitted")
