"""The drivers over in-memory streams on trio's virtual clock (deadlines tested in no wall time).

Every test here runs on ``MockClock(autojump_threshold=0)``: when every task waits, the clock jumps
to the next deadline, so the contract's real 30 s, 5 s and 350 ms pass in no wall time and a test
can assert *when* something happened, exactly. Nothing here opens a socket.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from tests.support.memory_streams import MemoryByteStream

#: How exact a virtual time must be: float sums of the deadlines, nothing more.
EXACT = 1e-9


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, object]]:
    from trio.testing import MockClock

    return ("trio", {"clock": MockClock(autojump_threshold=0)})


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
