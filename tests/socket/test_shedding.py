"""At capacity, connections still waiting for their first line give way; nothing else does.

The contract allows 64 connections and destroys the 65th. A slowloris — connections that never
finish a line — would then lock every sender out for the 30 s connection deadline. So, at
capacity only, the endpoint sheds a connection that has not completed its first line yet:

* fairness first: when one process holds more waiting connections than the newcomer's process
  would, that process's oldest waiting connection is closed (without a byte) for the newcomer;
* then age: a connection that has waited longer than ``waiting_shed_after_s`` (5 s by default, far
  beyond any real sender) is closed for the newcomer;
* otherwise the newcomer is destroyed with no reply, as the contract says — and a connection that
  has sent its hello is never shed.

The other process is real (a subprocess holding raw connections), so the kernel's pid is what the
fairness rule sees. Capacity is lowered to 8 to keep the tests small.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager

import anyio
import pytest

from pi_cross_session.protocol.endpoint import EndpointConfig
from pi_cross_session.protocol.paths import Locations
from tests.support import raw_client
from tests.support.bounds import MUST_HAPPEN_S
from tests.support.peers import PeerHandle, running_peer
from tests.support.raw_client import RawClient

pytestmark = pytest.mark.anyio

CAPACITY = 8

#: Opens N connections to a socket, optionally sends a probe-style first line on each, says
#: "held" and keeps them until its stdin closes.
HOLDER = """
import socket, sys
path, count, first = sys.argv[1], int(sys.argv[2]), sys.argv[3]
held = []
for _ in range(count):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    if first != "-":
        s.sendall(first.encode() + b"\\n")
    held.append(s)
print("held", flush=True)
sys.stdin.read()
"""


@contextmanager
def holder(path: str, count: int, first_line: str = "-") -> Iterator[subprocess.Popen[str]]:
    """Another process holding ``count`` connections (silent, or after ``first_line``)."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, path, str(count), first_line],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "held"
        yield process
    finally:
        process.kill()
        process.communicate()  # reaps it and closes its pipes


async def probe_ok(peer: PeerHandle) -> bool:
    """A probe from this process: True when it got ``ready``, False when closed with no byte."""
    async with RawClient.connect(peer.registration.socket_path) as client:
        await client.send(raw_client.line(raw_client.hello(peer.registration)))
        reply = await client.read_line()
        if reply is None:
            return False
        return raw_client.check_reply(reply).status == "ready"


async def wait_open(peer: PeerHandle, count: int) -> None:
    with anyio.fail_after(MUST_HAPPEN_S):
        while peer.endpoint.statistics().open_connections < count:  # noqa: ASYNC110 (counters)
            await anyio.sleep(0.01)


async def test_a_slowloris_from_one_process_gives_way_to_a_sender_from_another(
    locations: Locations,
) -> None:
    config = EndpointConfig(max_connections=CAPACITY)
    async with running_peer(locations, "beta", config=config) as beta:
        with holder(beta.registration.socket_path, CAPACITY):
            await wait_open(beta, CAPACITY)
            for _ in range(3):
                assert await probe_ok(beta)
            stats = beta.endpoint.statistics()
            # One slot was taken from the slowloris; each probe then frees it again on closing.
            assert stats.shed_waiting == 1
            assert stats.refused_over_capacity == 0
            assert stats.peak_connections == CAPACITY  # never above the bound


async def test_a_process_filling_the_endpoint_itself_gets_the_contracts_refusal(
    locations: Locations,
) -> None:
    config = EndpointConfig(max_connections=CAPACITY)
    async with running_peer(locations, "beta", config=config) as beta, AsyncExitStack() as held:
        for _ in range(CAPACITY):
            await held.enter_async_context(RawClient.connect(beta.registration.socket_path))
        await wait_open(beta, CAPACITY)
        # Same process, young connections: nobody gives way, the newcomer is destroyed.
        assert not await probe_ok(beta)
        stats = beta.endpoint.statistics()
        assert (stats.shed_waiting, stats.refused_over_capacity) == (0, 1)


async def test_connections_waiting_longer_than_any_sender_would_give_way(
    locations: Locations,
) -> None:
    config = EndpointConfig(max_connections=CAPACITY, waiting_shed_after_s=0.2)
    async with running_peer(locations, "beta", config=config) as beta, AsyncExitStack() as held:
        silent = [
            await held.enter_async_context(RawClient.connect(beta.registration.socket_path))
            for _ in range(CAPACITY)
        ]
        await wait_open(beta, CAPACITY)
        await anyio.sleep(0.3)  # let them outstay the (shortened) patience; not a timing check
        assert await probe_ok(beta)
        assert beta.endpoint.statistics().shed_waiting == 1
        assert await silent[0].read_to_eof() == b""  # the oldest was closed without a byte


async def test_a_connection_that_sent_its_hello_is_never_shed(locations: Locations) -> None:
    config = EndpointConfig(max_connections=CAPACITY, waiting_shed_after_s=0.0)
    async with running_peer(locations, "beta", config=config) as beta:
        first = raw_client.line(raw_client.hello(beta.registration)).decode().rstrip("\n")
        with holder(beta.registration.socket_path, CAPACITY, first):
            await wait_open(beta, CAPACITY)
            with anyio.fail_after(MUST_HAPPEN_S):
                while beta.endpoint._waiting:  # noqa: ASYNC110 (all hellos read)
                    await anyio.sleep(0.01)
            # Every slot holds a connection past its hello (idle, within its 5 s): the newcomer
            # from another process is refused, however impatient the endpoint is.
            assert not await probe_ok(beta)
            stats = beta.endpoint.statistics()
            assert (stats.shed_waiting, stats.refused_over_capacity) == (0, 1)
