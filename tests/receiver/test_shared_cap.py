"""Endpoints that share a cap (a gateway's proxies do: ``SharedCap``) hold the connections of all
of them to it, besides each one's own 64: at the shared cap, a newcomer to any of them is treated
as at capacity there (one of that endpoint's connections gives way by the shedding rules, or the
newcomer is closed without a reply), and every connection that ends gives its place back."""

from __future__ import annotations

from contextlib import AsyncExitStack

import anyio
import pytest

from pi_cross_session._internal.protocol.fairness import SharedCap
from pi_cross_session._internal.protocol.paths import Locations
from tests.support import raw_client
from tests.support.bounds import MUST_HAPPEN_S
from tests.support.raw_client import RawClient
from tests.support.socket_peers import settled_peer
from tests.support.waiting import eventually, wait_until_idle

pytestmark = pytest.mark.anyio

CAP = 3


async def test_connections_across_endpoints_are_held_to_the_shared_cap(
    locations: Locations,
) -> None:
    shared = SharedCap(cap=CAP)
    async with (
        settled_peer(locations, "one", shared=shared) as one,
        settled_peer(locations, "two", shared=shared) as two,
    ):
        hello_two = raw_client.line(raw_client.hello(two.registration))
        with anyio.fail_after(MUST_HAPPEN_S):
            async with AsyncExitStack() as stack:
                # The cap's worth of silent connections to the first endpoint, all from this
                # process and young: none of them would give way to a newcomer from it.
                for _ in range(CAP):
                    await stack.enter_async_context(RawClient.connect(one.registration.socket_path))
                await eventually(lambda: shared.open == CAP)
                async with RawClient.connect(two.registration.socket_path) as refused:
                    await refused.send(hello_two)
                    assert await refused.read_to_eof() == b""  # closed without a reply
                assert shared.refused == 1
                assert two.endpoint.statistics().refused_over_capacity == 1
                assert one.endpoint.statistics().open_connections == CAP
            # Their places come back as they close: the second endpoint serves again.
            await wait_until_idle(one.endpoint)
            assert shared.open == 0
            async with RawClient.connect(two.registration.socket_path) as served:
                await served.send(hello_two)
                reply = await served.read_line()
                assert reply is not None
                assert raw_client.parse_reply(reply).status == "ready"
        await wait_until_idle(two.endpoint)
    assert shared.open == 0
