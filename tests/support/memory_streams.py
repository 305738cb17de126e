"""Two byte streams joined in memory: what one side sends, the other receives.

The drivers (endpoint, exchange) speak anyio's ``ByteStream``; over this pair they run without
a kernel socket, so a test can put them on trio's ``MockClock``, where a 30 s
deadline passes in no wall time, and assert *when* something happened exactly.

Each direction is an unbounded queue of chunks. A chunk is delivered as it was sent (cut at
``max_bytes``), so a test decides how the bytes are split. ``send_eof`` ends one direction (the
other side then reads ``EndOfStream``); ``aclose`` ends both, and the other side's sends then
fail as on a socket whose peer has gone (``BrokenResourceError``).
"""

from __future__ import annotations

import math
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
