"""The drivers' own fast paths on asyncio: the deadline scope on the loop's timer
(``protocol/io/deadline.py``), and our sockets' waits on the loop's own readiness callbacks
(``protocol/io/sockets.py``).

The endpoint's and the exchange's tests over real sockets (in ``tests/receiver`` and
``tests/sending``) run on asyncio, so their deadlines, shedding and accept failures all go through
these paths; this file pins the rules they rely on one by one. ``test_endpoint_driver.py`` here and
``tests/sending/test_exchange_driver.py`` run the same drivers on trio, where anyio's own scope and
waits are used (the last test checks that choice).
"""

from __future__ import annotations

import asyncio
import math
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager

import anyio
import anyio.lowlevel
import pytest

from pi_cross_session._internal.protocol.io import deadline, sockets
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.security.io import fs
from tests.support.bounds import MUST_HAPPEN_S

pytestmark = pytest.mark.anyio

#: Long enough that a wait past it is plainly past it; nothing asserts how long anything took.
PAST_S = 0.05


@contextmanager
def stream_pair() -> Iterator[tuple[sockets.UnixStream, socket.socket]]:
    """Our stream on one end of a Unix socket pair, a plain blocking socket on the other."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ours.setblocking(False)
    stream = sockets.UnixStream(ours)
    try:
        yield stream, theirs
    finally:
        stream.close()
        theirs.close()


async def accept_until_closed(
    listener: sockets.UnixListener, outcome: list[type[BaseException]]
) -> None:
    """Wait in ``accept``; note the error that ends the wait (closing the listener ends it)."""
    try:
        await listener.accept()
    except anyio.ClosedResourceError as exc:
        outcome.append(type(exc))


def watched(fd: int) -> bool:
    """Whether the running loop still watches ``fd`` for reading (removing a watch says so)."""
    return asyncio.get_running_loop().remove_reader(fd)


# -- the deadline scope ----------------------------------------------------------------------------


async def test_the_scope_cuts_a_wait_at_its_deadline_and_swallows_only_that() -> None:
    scope = deadline.deadline_scope(anyio.current_time() + PAST_S)
    assert not isinstance(scope, anyio.CancelScope)  # the loop's timer, not anyio's scope
    with scope:
        await anyio.sleep(MUST_HAPPEN_S)
    assert scope.cancelled_caught
    await anyio.lowlevel.checkpoint()  # the task is not left cancelled


async def test_a_deadline_moved_later_is_not_cut_at_the_old_one() -> None:
    with deadline.deadline_scope(anyio.current_time() + PAST_S / 10) as scope:
        scope.deadline = anyio.current_time() + MUST_HAPPEN_S
        await anyio.sleep(PAST_S)  # well past the first deadline
    assert not scope.cancelled_caught


async def test_a_deadline_moved_earlier_cuts_at_the_new_one() -> None:
    with deadline.deadline_scope(math.inf) as scope:
        await anyio.lowlevel.checkpoint()
        scope.deadline = anyio.current_time()
        await anyio.sleep(MUST_HAPPEN_S)
    assert scope.cancelled_caught


async def test_cancel_before_entering_cuts_at_the_first_wait() -> None:
    scope = deadline.deadline_scope(math.inf)
    scope.cancel()
    reached = False
    with scope:
        reached = True
        await anyio.sleep(MUST_HAPPEN_S)
    assert reached
    assert scope.cancelled_caught


async def test_a_scope_cancelled_before_entry_and_left_without_waiting_leaves_no_cancellation() -> (
    None
):
    """Shedding may cancel a connection before its task has started serving it; if the task then
    leaves the scope without waiting (its socket already closed), it must not stay cancelled:
    a task cancelled while it runs is cancelled at its next wait, even outside the scope."""
    scope = deadline.deadline_scope(math.inf)
    scope.cancel()
    with pytest.raises(ConnectionResetError), scope:
        raise ConnectionResetError
    assert not scope.cancelled_caught
    with anyio.fail_after(MUST_HAPPEN_S):
        await anyio.sleep(PAST_S)  # a wait after the scope: not cancelled


async def test_cancel_from_another_task_cuts_the_wait() -> None:
    scope = deadline.deadline_scope(math.inf)
    entered = anyio.Event()

    async def waiter() -> None:
        with scope:
            entered.set()
            await anyio.sleep(MUST_HAPPEN_S)

    with anyio.fail_after(MUST_HAPPEN_S):
        async with anyio.create_task_group() as group:
            group.start_soon(waiter)
            await entered.wait()
            scope.cancel()
    assert scope.cancelled_caught


async def test_a_cancellation_from_outside_goes_through_when_the_deadline_passed_too() -> None:
    with anyio.CancelScope() as outer:
        with deadline.deadline_scope(anyio.current_time() - 1) as inner:
            outer.cancel()
            await anyio.sleep(MUST_HAPPEN_S)
        pytest.fail("the outer cancellation was swallowed")  # pragma: no cover
    assert outer.cancelled_caught
    assert not inner.cancelled_caught


async def test_a_scope_left_before_its_deadline_leaves_no_timer() -> None:
    with deadline.deadline_scope(anyio.current_time() + PAST_S) as scope:
        pass
    await anyio.sleep(PAST_S * 2)  # the deadline passes outside the scope: nothing is cancelled
    assert not scope.cancelled_caught


# -- waiting for a socket --------------------------------------------------------------------------


async def test_a_read_waits_until_bytes_come_byte_by_byte() -> None:
    with stream_pair() as (stream, theirs):
        received = bytearray()

        async def read_all() -> None:
            while len(received) < 5:
                received.extend(await stream.receive())

        with anyio.fail_after(MUST_HAPPEN_S):
            async with anyio.create_task_group() as group:
                group.start_soon(read_all)
                for byte in b"hello":
                    await anyio.sleep(0.001)  # the reader is waiting each time
                    theirs.send(bytes([byte]))
        assert bytes(received) == b"hello"
        assert not watched(stream.socket.fileno())


async def test_closing_a_stream_wakes_its_waiting_reader_and_unwatches_the_descriptor() -> None:
    with stream_pair() as (stream, _theirs):
        fd = stream.socket.fileno()
        outcome: list[type[BaseException]] = []
        waiting = anyio.Event()

        async def reader() -> None:
            waiting.set()
            try:
                await stream.receive()
            except anyio.ClosedResourceError as exc:
                outcome.append(type(exc))

        with anyio.fail_after(MUST_HAPPEN_S):
            async with anyio.create_task_group() as group:
                group.start_soon(reader)
                await waiting.wait()
                await anyio.lowlevel.checkpoint()  # now inside the wait
                stream.close()
                # At once, before the reader runs again: the number may be reused any time now.
                unwatched_at_close = not watched(fd)
        assert outcome == [anyio.ClosedResourceError]
        assert unwatched_at_close


async def test_a_cancelled_read_unwatches_the_descriptor_and_the_next_read_works() -> None:
    with stream_pair() as (stream, theirs):
        with anyio.move_on_after(PAST_S) as scope:
            await stream.receive()
        assert scope.cancelled_caught
        assert not watched(stream.socket.fileno())
        theirs.send(b"x")
        with anyio.fail_after(MUST_HAPPEN_S):
            assert await stream.receive() == b"x"


async def test_a_write_to_a_peer_that_does_not_read_waits_for_room_and_closing_ends_it() -> None:
    with stream_pair() as (stream, _theirs):
        big = b"y" * (4 << 20)  # more than any Unix socket buffer holds
        outcome: list[type[BaseException]] = []

        async def writer() -> None:
            try:
                await stream.send(big)
            except anyio.ClosedResourceError as exc:
                outcome.append(type(exc))

        with anyio.fail_after(MUST_HAPPEN_S):
            async with anyio.create_task_group() as group:
                group.start_soon(writer)
                await anyio.sleep(PAST_S)  # the buffer is full and nobody reads
                assert outcome == []
                stream.close()
        assert outcome == [anyio.ClosedResourceError]


async def test_a_read_and_a_write_may_wait_on_one_stream_at_once() -> None:
    """A byte stream may be read in one task while another writes (anyio's contract)."""
    with stream_pair() as (stream, theirs):
        big = b"w" * (4 << 20)
        got: list[bytes] = []

        async def reader() -> None:
            got.append(await stream.receive())

        with anyio.fail_after(MUST_HAPPEN_S):
            async with anyio.create_task_group() as group:
                group.start_soon(stream.send, big)  # blocks: nobody reads yet
                group.start_soon(reader)  # waits: nothing sent yet
                await anyio.sleep(PAST_S)
                theirs.send(b"r")  # wakes the reader ...
                received = 0
                while received < len(big):  # ... and room for the writer
                    received += len(await anyio.to_thread.run_sync(theirs.recv, 1 << 16))
        assert got == [b"r"]
        assert not watched(stream.socket.fileno())
        assert not asyncio.get_running_loop().remove_writer(stream.socket.fileno())


async def test_closing_a_stream_wakes_both_its_reader_and_its_writer() -> None:
    with stream_pair() as (stream, _theirs):
        big = b"c" * (4 << 20)
        outcome: list[str] = []

        async def reader() -> None:
            with pytest.raises(anyio.ClosedResourceError):
                await stream.receive()
            outcome.append("reader")

        async def writer() -> None:
            with pytest.raises(anyio.ClosedResourceError):
                await stream.send(big)
            outcome.append("writer")

        with anyio.fail_after(MUST_HAPPEN_S):
            async with anyio.create_task_group() as group:
                group.start_soon(writer)
                group.start_soon(reader)
                await anyio.sleep(PAST_S)  # both waiting
                stream.close()
        assert sorted(outcome) == ["reader", "writer"]


async def test_a_write_completes_once_the_peer_reads() -> None:
    with stream_pair() as (stream, theirs):
        big = b"z" * (1 << 20)
        received = bytearray()

        def drain() -> None:
            while len(received) < len(big):
                received.extend(theirs.recv(1 << 16))

        with anyio.fail_after(MUST_HAPPEN_S):
            async with anyio.create_task_group() as group:
                group.start_soon(anyio.to_thread.run_sync, drain)
                await stream.send(big)
        assert bytes(received) == big


async def test_closing_the_listener_ends_a_waiting_accept(locations: Locations) -> None:
    fs.ensure_private_dir(locations.runtime_dir)
    listener = sockets.listen_unix(os.path.join(locations.runtime_dir, "listener.sock"))
    fd = listener.fileno()
    with anyio.fail_after(MUST_HAPPEN_S):
        outcome: list[type[BaseException]] = []
        async with anyio.create_task_group() as group:
            group.start_soon(accept_until_closed, listener, outcome)
            await anyio.sleep(PAST_S)
            listener.close()
        assert outcome == [anyio.ClosedResourceError]
        assert not watched(fd)


async def test_accept_yields_between_the_connections_of_a_burst_and_never_before_a_wait(
    locations: Locations,
) -> None:
    """Each connection found without a wait right after another lets the other tasks run first
    (a flood cannot starve them); the first one of a burst, and a wait when nothing is pending,
    cost no extra pass of the loop."""
    fs.ensure_private_dir(locations.runtime_dir)
    path = os.path.join(locations.runtime_dir, "listener.sock")
    listener = sockets.listen_unix(path)
    fd = listener.fileno()
    clients = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(3)]
    others_ran = 0

    async def other_task() -> None:
        nonlocal others_ran
        while True:
            others_ran += 1
            await anyio.lowlevel.checkpoint()

    try:
        with anyio.fail_after(MUST_HAPPEN_S):
            async with anyio.create_task_group() as group:
                group.start_soon(other_task)
                await anyio.lowlevel.checkpoint()
                for client in clients:
                    client.connect(path)
                ran_during: list[int] = []
                for _ in clients:
                    before = others_ran
                    (await listener.accept()).close()
                    ran_during.append(others_ran - before)
                assert ran_during == [0, 1, 1]
                group.cancel_scope.cancel()
            # Nothing pending after a burst: the accept starts waiting in its first step.
            outcome: list[type[BaseException]] = []
            async with anyio.create_task_group() as group:
                group.start_soon(accept_until_closed, listener, outcome)
                await anyio.lowlevel.checkpoint()
                assert watched(fd)  # (this unwatches it: the close below ends the wait)
                listener.close()
            assert outcome == [anyio.ClosedResourceError]
    finally:
        listener.close()
        for client in clients:
            client.close()


async def test_an_accept_cancelled_while_yielding_in_a_burst_closes_what_it_took(
    locations: Locations,
) -> None:
    """The yield between the connections of a burst comes after ``accept(2)``: cancelled there,
    the connection taken is closed at once (its client reads EOF), and the next accept takes the
    next connection."""
    fs.ensure_private_dir(locations.runtime_dir)
    path = os.path.join(locations.runtime_dir, "listener.sock")
    listener = sockets.listen_unix(path)
    clients = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(3)]
    try:
        for client in clients:
            client.connect(path)
            client.settimeout(MUST_HAPPEN_S)
        with anyio.fail_after(MUST_HAPPEN_S):
            first = await listener.accept()  # the first of the burst: no yield
            with anyio.CancelScope() as scope:
                scope.cancel()
                await listener.accept()  # takes the second, then yields: cancelled there
            assert scope.cancelled_caught
            assert clients[1].recv(1) == b""  # closed, never served
            third = await listener.accept()
            clients[2].sendall(b"3")
            assert await third.receive() == b"3"
            first.close()
            third.close()
    finally:
        listener.close()
        for client in clients:
            client.close()


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_under_another_backend_the_drivers_use_anyio() -> None:
    scope = deadline.deadline_scope(anyio.current_time() + PAST_S)
    assert isinstance(scope, anyio.CancelScope)
    assert deadline.asyncio_loop() is None
    with scope:
        await anyio.sleep(MUST_HAPPEN_S)
    assert scope.cancelled_caught
    with stream_pair() as (stream, theirs):
        with anyio.move_on_after(PAST_S):
            await stream.receive()
        theirs.send(b"x")
        assert await stream.receive() == b"x"
