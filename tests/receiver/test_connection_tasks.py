"""Workers take turns accepting, and each serves the connection it accepted: a worker whose
connection has ended waits for its next turn instead of ending, the endpoint creates a worker only
when none waits, so a session answering probe after probe runs on two tasks taking turns, and a
burst of connections leaves a bounded few waiting for the next burst (``Endpoint._worker``)."""

from __future__ import annotations

from contextlib import AsyncExitStack

import anyio
import pytest

from pi_cross_session._internal.protocol.io.endpoint import Endpoint, EndpointConfig, InboundHandler
from pi_cross_session._internal.protocol.limits import MAX_IDLE_CONNECTION_TASKS
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.security.io import fs
from tests.support import raw_client
from tests.support.memory_inbox import MemoryInbox
from tests.support.raw_client import RawClient
from tests.support.socket_peers import authenticator_for, make_registration, settled_peer
from tests.support.waiting import eventually, wait_until_idle

pytestmark = pytest.mark.anyio

#: More connections at once than tasks are kept idle, so a burst also shows the bound.
CAPACITY = MAX_IDLE_CONNECTION_TASKS + 4


def tasks() -> int:
    return len(anyio.get_running_tasks())


async def test_probe_after_probe_is_served_by_one_task(locations: Locations) -> None:
    async with settled_peer(locations, "receiver") as peer:
        exchanger = peer.exchanger()
        before = tasks()
        assert await exchanger.is_live(peer.registration)
        await wait_until_idle(peer.endpoint)
        after_first = tasks()
        assert after_first == before + 1  # it accepts the next one while the first waits
        for _ in range(20):
            assert await exchanger.is_live(peer.registration)
            await wait_until_idle(peer.endpoint)
            assert tasks() == after_first
        assert peer.endpoint.statistics().accepted == 21


async def test_a_burst_leaves_tasks_for_the_next_burst(locations: Locations) -> None:
    config = EndpointConfig(max_connections=CAPACITY)
    async with settled_peer(locations, "receiver", config=config) as peer:
        path = peer.registration.socket_path
        hello = raw_client.line(raw_client.hello(peer.registration))
        before = tasks()
        for burst in range(3):
            async with AsyncExitStack() as stack:
                clients = [
                    await stack.enter_async_context(RawClient.connect(path))
                    for _ in range(CAPACITY)
                ]
                for client in clients:
                    await client.send(hello)
                for client in clients:
                    reply = await client.read_line()
                    assert reply is not None
                    assert raw_client.parse_reply(reply).status == "ready"
            await wait_until_idle(peer.endpoint)
            # Each burst needed a task per connection; of those, a bounded few wait for the next.
            assert tasks() == before + MAX_IDLE_CONNECTION_TASKS, f"burst {burst}"
        stats = peer.endpoint.statistics()
        assert stats.accepted == 3 * CAPACITY
        assert stats.open_connections == 0


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_stopping_closes_every_connection_and_leaves_no_worker(
    locations: Locations,
) -> None:
    """Cancelling ``serve`` while workers hold connections — silent ones, ones past ``ready`` —
    and others wait for their turn: every client reads EOF after its replies, nothing stays
    counted open, and no worker is left (under trio too, where the waits are anyio's)."""
    registration = make_registration(locations, "receiver")
    inbox = MemoryInbox(authenticator_for(locations, registration))
    handler: InboundHandler[object] = inbox  # type: ignore[assignment]
    endpoint = Endpoint(registration.socket_path, handler, files=fs)
    hello = raw_client.line(raw_client.hello(registration))
    before = tasks()
    try:
        async with AsyncExitStack() as clients:

            async def connect() -> RawClient:
                return await clients.enter_async_context(
                    RawClient.connect(registration.socket_path)
                )

            async with anyio.create_task_group() as group:
                await group.start(endpoint.serve)
                # A burst of probes that ended: their workers now wait for their turn.
                async with AsyncExitStack() as probes:
                    ended = [
                        await probes.enter_async_context(
                            RawClient.connect(registration.socket_path)
                        )
                        for _ in range(3)
                    ]
                    for client in ended:
                        await client.send(hello)
                    for client in ended:
                        assert (await client.read_reply()).status == "ready"
                await wait_until_idle(endpoint)
                silent = [await connect() for _ in range(2)]
                past_ready = [await connect() for _ in range(2)]
                for client in past_ready:
                    await client.send(hello + b'{"v":1')
                    assert (await client.read_reply()).status == "ready"
                await eventually(lambda: endpoint.statistics().open_connections == 4)
                group.cancel_scope.cancel()
            assert endpoint.statistics().open_connections == 0
            assert tasks() == before
            for client in silent + past_ready:
                assert await client.read_to_eof() == b""
    finally:
        fs.remove_file(registration.socket_path)
