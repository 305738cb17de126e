"""The sender's Unix connect waits for a full backlog and can be cancelled while it waits.

A listener that does not accept fills its backlog; a further non-blocking connect then fails with
EAGAIN and must wait. Cancelling that wait (a send deadline, a shutdown) must leave the event loop
clean — anyio's own connect could make the loop raise ``InvalidStateError`` here — and a wait
that outlasts the jam must end in a connection.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from pi_cross_session._internal.protocol.io.sockets import connect_unix
from tests.support.bounds import MUST_HAPPEN_S

pytestmark = pytest.mark.anyio


@contextmanager
def jammed_listener(path: str) -> Iterator[tuple[socket.socket, list[socket.socket]]]:
    """A listener whose backlog is full: the next connect would block."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(0)
    fillers: list[socket.socket] = []
    try:
        while True:
            filler = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            filler.setblocking(False)
            try:
                filler.connect(path)
            except BlockingIOError:
                filler.close()
                break
            fillers.append(filler)
        yield listener, fillers
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


async def test_a_connect_waiting_on_a_full_backlog_is_cancelled_cleanly(tmp_path: Path) -> None:
    path = str(tmp_path / "jam.sock")
    with jammed_listener(path):
        for _ in range(20):  # many cancellations at slightly different moments
            with anyio.move_on_after(0.02) as scope:
                await connect_unix(path)
            assert scope.cancelled_caught
            await (
                anyio.lowlevel.checkpoint()
            )  # let the loop run any callback a bad wait would have left


async def test_a_connect_waiting_on_a_full_backlog_gets_through_once_it_clears(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "jam.sock")
    with jammed_listener(path) as (listener, _):

        async def clear_later() -> None:
            await anyio.sleep(0.05)
            accepted, _ = listener.accept()  # one slot frees
            accepted.close()

        async with anyio.create_task_group() as group:
            group.start_soon(clear_later)
            with anyio.fail_after(MUST_HAPPEN_S):
                stream = await connect_unix(path)
            await stream.aclose()
