"""At capacity, a connection gives way to a newcomer by fairness, then by age; nothing else does.

The contract allows 64 connections and destroys the 65th. A slowloris — connections that never
finish a line, or that finish a probe hello and then trickle one byte of a second frame now and
then — would then lock every sender out for the 30 s connection deadline. So, at capacity, the
endpoint closes (without a byte) one open connection for the newcomer:

* fairness first: when one process holds more connections than the newcomer's process would, that
  process's oldest connection gives way, whatever its phase (before its hello, or after ``ready``);
* then age: a connection open longer than ``shed_after_s`` (5 s by default, far beyond any real
  sender) gives way;
* otherwise the newcomer is destroyed with no reply, as the contract says. A connection whose
  request was admitted and is being answered never gives way (the policy's table in
  ``tests/receiver/test_fairness.py`` pins that; over a socket it lasts microseconds).

The other process is real (a subprocess holding raw connections), so the kernel's pid is what the
fairness rule sees. Capacity is lowered to 8 to keep the tests small.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from pi_cross_session._internal.protocol.io.endpoint import EndpointConfig
from pi_cross_session._internal.protocol.paths import Locations
from tests.support import raw_client
from tests.support.bounds import MUST_HAPPEN_S
from tests.support.raw_client import RawClient
from tests.support.socket_peers import PeerHandle, running_peer

pytestmark = pytest.mark.anyio

CAPACITY = 8
#: How long the holder may take to open its connections (a hang guard, not a measurement).
HOLDER_READY_S = 20.0

#: Opens N connections to a socket, optionally sends a probe-style first line on each (and reads
#: its reply), says "held" and keeps them until its stdin closes.
HOLDER = """
import socket, sys
path, count, first = sys.argv[1], int(sys.argv[2]), sys.argv[3]
held = []
for _ in range(count):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    if first != "-":
        s.sendall(first.encode() + b"\\n")
        reply = b""
        while not reply.endswith(b"\\n"):
            reply += s.recv(65536)
        s.sendall(b'{"v":1,"ty')  # the start of a second frame, never finished
    held.append(s)
print("held", flush=True)
sys.stdin.read()
"""


@asynccontextmanager
async def holder(path: str, count: int, first_line: str = "-") -> AsyncIterator[None]:
    """Another process holding ``count`` connections: silent, or past ``first_line``'s reply and
    a few bytes into a second frame (the endpoint answering its hellos runs on this very loop)."""
    argv = [sys.executable, "-c", HOLDER, path, str(count), first_line]
    async with await anyio.open_process(argv, stdin=subprocess.PIPE) as process:
        try:
            assert process.stdout is not None
            with anyio.fail_after(HOLDER_READY_S):
                said = await BufferedByteReceiveStream(process.stdout).receive_until(b"\n", 64)
            assert said.strip() == b"held"
            yield
        finally:
            process.kill()


async def probe_ok(peer: PeerHandle) -> bool:
    """A probe from this process: True when it got ``ready``, False when closed with no byte."""
    async with RawClient.connect(peer.registration.socket_path) as client:
        await client.send(raw_client.line(raw_client.hello(peer.registration)))
        reply = await client.read_line()
        if reply is None:
            return False
        return raw_client.parse_reply(reply).status == "ready"


async def wait_open(peer: PeerHandle, count: int) -> None:
    with anyio.fail_after(MUST_HAPPEN_S):
        while peer.endpoint.statistics().open_connections < count:  # noqa: ASYNC110 (counters)
            await anyio.sleep(0.01)


async def test_a_slowloris_from_one_process_gives_way_to_a_sender_from_another(
    locations: Locations,
) -> None:
    config = EndpointConfig(max_connections=CAPACITY)
    async with (
        running_peer(locations, "beta", config=config) as beta,
        holder(beta.registration.socket_path, CAPACITY),
    ):
        await wait_open(beta, CAPACITY)
        for _ in range(3):
            assert await probe_ok(beta)
        stats = beta.endpoint.statistics()
        # One slot was taken from the slowloris; each probe then frees it again on closing.
        assert stats.shed == 1
        assert stats.refused_over_capacity == 0
        assert stats.peak_connections == CAPACITY  # never above the bound


async def test_connections_past_ready_from_one_process_give_way_to_a_sender_from_another(
    locations: Locations,
) -> None:
    """Regression: slots held after a valid probe hello (then a second frame begun, and kept
    alive against the idle bound) were never shed, so every probe of every listing was refused
    for as long as the holder liked."""
    config = EndpointConfig(max_connections=CAPACITY)
    async with running_peer(locations, "beta", config=config) as beta:
        first = raw_client.line(raw_client.hello(beta.registration)).decode().rstrip("\n")
        async with holder(beta.registration.socket_path, CAPACITY, first):
            await wait_open(beta, CAPACITY)
            for _ in range(3):
                assert await probe_ok(beta)
            stats = beta.endpoint.statistics()
            assert (stats.shed, stats.refused_over_capacity) == (1, 0)
            assert stats.peak_connections == CAPACITY


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
        assert (stats.shed, stats.refused_over_capacity) == (0, 1)


async def test_connections_open_longer_than_any_sender_would_give_way(
    locations: Locations,
) -> None:
    config = EndpointConfig(max_connections=CAPACITY, shed_after_s=0.2)
    async with running_peer(locations, "beta", config=config) as beta, AsyncExitStack() as held:
        silent = [
            await held.enter_async_context(RawClient.connect(beta.registration.socket_path))
            for _ in range(CAPACITY)
        ]
        await wait_open(beta, CAPACITY)
        await anyio.sleep(0.3)  # let them outstay the (shortened) patience; not a timing check
        assert await probe_ok(beta)
        assert beta.endpoint.statistics().shed == 1
        assert await silent[0].read_to_eof() == b""  # the oldest was closed without a byte


async def test_by_age_a_connection_past_ready_gives_way_too(locations: Locations) -> None:
    config = EndpointConfig(max_connections=CAPACITY, shed_after_s=0.2)
    async with running_peer(locations, "beta", config=config) as beta, AsyncExitStack() as held:
        path = beta.registration.socket_path
        probes = [await held.enter_async_context(RawClient.connect(path)) for _ in range(CAPACITY)]
        for client in probes:
            await client.send(raw_client.line(raw_client.hello(beta.registration)))
            assert (await client.read_reply()).status == "ready"
        await anyio.sleep(0.3)
        # From this same process, so fairness does not apply; age does.
        assert await probe_ok(beta)
        assert beta.endpoint.statistics().shed == 1
        assert await probes[0].read_to_eof() == b""
