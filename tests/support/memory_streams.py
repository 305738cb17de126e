"""Two byte streams joined in memory: what one side sends, the other receives.

The drivers (endpoint, exchange) speak anyio's ``ByteStream``; over this pair they run without
a kernel socket, so a test can put them on trio's ``MockClock``, where a 30 s
deadline passes in no wall time, and assert *when* something happened exactly.

Each direction is an unbounded queue of chunks. A chunk is delivered as it was sent (cut at
``max_bytes``), so a test decides how the bytes are split. ``send_eof`` ends one direction (the
other side then reads ``EndOfStream``); ``aclose`` ends both, and the other side's sends then
fail as on a socket whose peer has gone (``BrokenResourceError``).

The tests of the drivers run on ``MockClock(autojump_threshold=0)`` (each declares its own
``anyio_backend``): when every task waits, the clock jumps to the next deadline. ``EXACT``,
``clock_held``, ``read_line`` and ``read_to_eof`` serve them.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import anyio.abc
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream


@dataclass
class _Direction:
    send: MemoryObjectSendStream[bytes]
    receive: MemoryObjectReceiveStream[bytes]
    #: The rest of a chunk larger than the last ``max_bytes`` asked for.
    pending: bytearray = field(default_factory=bytearray)


def _direction() -> _Direction:
    send, receive = anyio.create_memory_object_stream[bytes](math.inf)
    return _Direction(send, receive)


class MemoryByteStream(anyio.abc.ByteStream):
    """One end of :func:`memory_stream_pair`."""

    def __init__(self, incoming: _Direction, outgoing: _Direction) -> None:
        self._in = incoming
        self._out = outgoing
        self.closed = False
        #: Everything this end has sent, in one piece (for assertions).
        self.sent = bytearray()

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if self.closed:
            raise anyio.ClosedResourceError
        incoming = self._in
        if not incoming.pending:
            try:
                incoming.pending += await incoming.receive.receive()
            except anyio.EndOfStream:
                raise anyio.EndOfStream from None
        data = bytes(incoming.pending[:max_bytes])
        del incoming.pending[:max_bytes]
        return data

    async def send(self, item: bytes) -> None:
        if self.closed:
            raise anyio.ClosedResourceError
        await anyio.lowlevel.checkpoint()
        try:
            self._out.send.send_nowait(bytes(item))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            raise anyio.BrokenResourceError from None
        self.sent += item

    async def send_eof(self) -> None:
        self._out.send.close()

    async def aclose(self) -> None:
        self.closed = True
        self._out.send.close()
        self._in.receive.close()


def memory_stream_pair() -> tuple[MemoryByteStream, MemoryByteStream]:
    """Two joined ends (say, a client's and a server's)."""
    one, two = _direction(), _direction()
    return MemoryByteStream(one, two), MemoryByteStream(two, one)


#: How exact a virtual time must be: float sums of the deadlines, nothing more.
EXACT = 1e-9


@asynccontextmanager
async def clock_held() -> AsyncIterator[None]:
    """Let a worker thread run without the virtual clock jumping meanwhile (a task waiting for a
    thread counts as waiting): for the one question an exchanger asks in a thread at its first
    exchange, whether the runtime dir is local."""
    import trio.testing

    clock = trio.lowlevel.current_clock()
    assert isinstance(clock, trio.testing.MockClock)
    clock.autojump_threshold = math.inf
    try:
        yield
    finally:
        clock.autojump_threshold = 0


async def read_line(stream: MemoryByteStream) -> bytes:
    """One line (LF included); what is read past it is lost, so use it on replies only."""
    data = b""
    while not data.endswith(b"\n"):
        data += await stream.receive()
    return data


async def read_to_eof(stream: MemoryByteStream) -> bytes:
    """Everything until the other end closes."""
    data = b""
    while True:
        try:
            data += await stream.receive()
        except anyio.EndOfStream:
            return data
