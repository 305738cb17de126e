"""What one process can make the endpoint spend: its share of reads, and the parse of a frame.

Regression (parse-cost amplification): a first frame of 1 MiB built to be expensive
(``[{},{},…]``) was parsed in full on the event loop before it was judged as a hello, tens of
milliseconds each; a few threads sending them pushed a legitimate probe past the listing's 350 ms
deadline and left the process tens of MiB larger. Now:

* a frame whose JSON would need more strings, containers or separators than any valid frame is
  refused unparsed, with the reply a frame of the wrong kind gets (``tests/wire/test_shape.py``
  pins the measure; the hostile catalogue and fuzzer, ``test_catalogue_wire.py`` and
  ``test_fuzz_endpoint.py``, the replies);
* each process's reads draw on a byte budget, so one streaming megabytes is slowed while
  another is served at once;
* after plenty was read, freed memory is handed back to the OS (where the allocator can).
"""

from __future__ import annotations

import subprocess
import sys
from typing import Final

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from pi_cross_session._internal.protocol.io import memory
from pi_cross_session._internal.protocol.io.endpoint import EndpointConfig
from pi_cross_session._internal.protocol.limits import MAX_FRAME_BYTES
from pi_cross_session._internal.protocol.paths import Locations
from tests.receiver.test_shedding import probe_ok
from tests.support.raw_client import RawClient
from tests.support.socket_peers import settled_peer

pytestmark = pytest.mark.anyio

#: About 1 MiB of empty objects in an array, with its LF.
COSTLY: Final = (b"[" + b"{}," * 340_000 + b"{}]").ljust(MAX_FRAME_BYTES - 1) + b"\n"

#: Another process: sends one frame given on stdin, says "sent", prints the reply when it comes.
STREAMER: Final = """
import socket, sys
path = sys.argv[1]
frame = sys.stdin.buffer.read()
with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
    s.connect(path)
    s.setblocking(False)
    try:
        s.send(frame[:65536])
    except BlockingIOError:
        pass
    print("started", flush=True)
    s.setblocking(True)
    s.sendall(frame[65536:])
    print("sent", flush=True)
    print(s.recv(4096).decode().strip(), flush=True)
"""


async def test_a_costly_first_frame_is_refused_unparsed_and_counted(locations: Locations) -> None:
    async with settled_peer(locations, "beta") as beta:
        async with RawClient.connect(beta.registration.socket_path) as client:
            await client.send(COSTLY)
            reply = await client.read_reply()
            assert (reply.status, reply.request_id) == ("authentication_failed", "unknown")
            assert await client.read_to_eof() == b""
        stats = beta.endpoint.statistics()
        assert (stats.costly_frames, stats.faults) == (1, 1)
        assert await probe_ok(beta)


async def test_a_process_over_its_read_budget_is_slowed_while_another_is_served(
    locations: Locations,
) -> None:
    # 64 KiB at once, then 256 KiB a second: the streamer's 1 MiB takes seconds to be read.
    config = EndpointConfig(read_burst_bytes=65_536, read_bytes_per_s=262_144)
    async with settled_peer(locations, "beta", config=config) as beta:
        argv = [sys.executable, "-c", STREAMER, beta.registration.socket_path]
        async with await anyio.open_process(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE
        ) as streamer:
            assert streamer.stdin is not None
            assert streamer.stdout is not None
            await streamer.stdin.send(COSTLY)
            await streamer.stdin.aclose()
            lines = BufferedByteReceiveStream(streamer.stdout)
            with anyio.fail_after(10):
                assert await lines.receive_until(b"\n", 64) == b"started"
                while beta.endpoint.statistics().throttled_reads == 0:  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            # The streamer is in debt and its bytes wait; this process is read at once.
            for _ in range(3):
                assert await probe_ok(beta)
            assert beta.endpoint.statistics().costly_frames == 0  # its frame is not read yet
            with anyio.fail_after(30):
                assert await lines.receive_until(b"\n", 64) == b"sent"
                reply = await lines.receive_until(b"\n", 4096)
            assert b'"authentication_failed"' in reply
        assert beta.endpoint.statistics().costly_frames == 1


@pytest.mark.skipif(not memory.AVAILABLE, reason="this allocator cannot give memory back")
async def test_after_plenty_was_read_freed_memory_is_given_back(locations: Locations) -> None:
    config = EndpointConfig(give_back_every_s=0.05)
    async with settled_peer(locations, "beta", config=config) as beta:
        assert beta.endpoint.statistics().memory_given_back == 0
        async with RawClient.connect(beta.registration.socket_path) as client:
            await client.send(COSTLY)
            assert (await client.read_reply()).status == "authentication_failed"
        with anyio.fail_after(5):
            while beta.endpoint.statistics().memory_given_back == 0:  # noqa: ASYNC110
                await anyio.sleep(0.01)


def test_giving_memory_back_is_safe_to_ask() -> None:
    assert memory.give_back() is memory.AVAILABLE
