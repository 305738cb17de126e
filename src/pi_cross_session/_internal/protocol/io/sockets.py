"""Unix stream sockets for the two drivers: a listener, a cancel-safe connect, and a byte stream.

The endpoint and the exchange speak anyio's :class:`~anyio.abc.ByteStream` interface, so tests
drive them over in-memory streams; these are the real ones, thinner than anyio's own. An
exchange is a few hundred bytes each way, and what it costs beyond the kernel's work is Python
overhead per call, so a call that can complete at once does:

* :meth:`UnixStream.receive` and :meth:`UnixStream.send` try the socket first and wait for
  readiness only when it would block. Only then are they cancellation points (a cancelled caller
  is stopped at its next wait, which comes within one frame: the drivers' work between waits is
  bounded by the frame cap) and yield to the event loop; a read that filled the whole buffer also
  yields, without a cancellation point (more is probably waiting, and the other connections get
  their turn);
* :meth:`UnixStream.aclose` closes at once (anyio's ``aclose_forcefully`` opens a cancel scope
  whose ``cancel()`` formats the task's ``repr``, socket addresses included, on every close);
* readiness is waited for by file descriptor number (anyio registers the socket object itself,
  and asyncio's selector formats its ``repr`` each time it finds it unregistered), and on asyncio
  with the loop's own callbacks (:class:`Readiness`).

Why these and not anyio's (``bench/exchange.py``, medians of alternated runs against the same
tree with its own sockets; docs/performance.md, "Waits given back to anyio"): anyio's Unix
listener and streams, which pass a checkpoint (one more turn of the event loop) on every receive,
send and accept and close through a cancel scope, cost 2.3× the receiver's CPU per probe and 2.1×
the sender's (two runs: far enough over that more were not needed); and with the deadline scope
already anyio's, our streams waiting through anyio's ``wait_readable``/``wait_writable`` instead
of :class:`Readiness` took the receiver's CPU per probe from 1.09× to 1.17× and the sender's from
1.05× to 1.17× (ten runs and more each), where the project allows itself 1.05× for giving
machinery back.

A socket closed while another task waits on it is announced first (``notify_closing``), so the
event loop never holds a closed descriptor that the kernel may hand out again. Errors keep anyio's
meaning: :class:`anyio.EndOfStream` at EOF, :class:`anyio.BrokenResourceError` (from the
``OSError``) when the connection broke, :class:`anyio.ClosedResourceError` once closed here.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any, Final

import anyio
import anyio.abc
import anyio.lowlevel

from pi_cross_session._internal.protocol.io.deadline import asyncio_loop
from pi_cross_session._internal.protocol.limits import LISTEN_BACKLOG, READ_CHUNK_BYTES

__all__ = ["UnixListener", "UnixStream", "connect_unix", "listen_unix"]

#: Linux creates a socket non-blocking in the same call; elsewhere it is made so just after.
_SOCK_NONBLOCK: Final[int] = getattr(socket, "SOCK_NONBLOCK", 0)


class Readiness:
    """One descriptor's wait for readability, or for writability (one wait at a time; a stream
    keeps one of each), on the asyncio loop's own callbacks; under another backend, anyio's. The
    owner calls :meth:`closing` before it closes the descriptor, so the loop never watches a
    descriptor number the kernel may hand out again."""

    __slots__ = ("_elsewhere", "_fd", "_future", "_loop", "_writing")

    def __init__(self, fd: int, *, writing: bool) -> None:
        self._fd = fd
        self._writing = writing
        self._future: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Waits in progress through anyio (under another backend).
        self._elsewhere = 0

    async def wait(self) -> None:
        """Until the descriptor is readable (or writable); :class:`anyio.ClosedResourceError` if
        :meth:`closing` is called meanwhile."""
        loop = asyncio_loop()
        if loop is None:
            self._elsewhere += 1
            try:
                await (anyio.wait_writable if self._writing else anyio.wait_readable)(self._fd)
            finally:
                self._elsewhere -= 1
            return
        future: asyncio.Future[None] = loop.create_future()
        if self._writing:
            loop.add_writer(self._fd, self._ready, future)
        else:
            loop.add_reader(self._fd, self._ready, future)
        self._future, self._loop = future, loop
        try:
            await future
        finally:
            if self._future is future:
                self._release()

    def closing(self) -> None:
        """The descriptor is about to be closed: stop watching it, and wake the wait."""
        if self._elsewhere:
            anyio.notify_closing(self._fd)
        future = self._future
        if future is None:
            return
        self._release()
        if not future.done():
            future.set_exception(anyio.ClosedResourceError())

    def _ready(self, future: asyncio.Future[None]) -> None:
        # Level-triggered: stop watching at once, or the loop calls back until the task runs.
        if self._future is future:
            self._release()
        if not future.done():
            future.set_result(None)

    def _release(self) -> None:
        loop = self._loop
        self._future = None
        assert loop is not None
        if self._writing:
            loop.remove_writer(self._fd)
        else:
            loop.remove_reader(self._fd)


class UnixStream(anyio.abc.ByteStream):
    """One connected ``AF_UNIX`` stream socket (non-blocking), owned by this object."""

    def __init__(self, sock: socket.socket) -> None:
        self.socket = sock
        self._fd = sock.fileno()
        self._closed = False
        self._readable = Readiness(self._fd, writing=False)
        self._writable = Readiness(self._fd, writing=True)

    @property
    def extra_attributes(self) -> dict[Any, Any]:
        return {anyio.abc.SocketAttribute.raw_socket: lambda: self.socket}

    async def receive(self, max_bytes: int = READ_CHUNK_BYTES) -> bytes:
        """The next bytes, as soon as there are some; :class:`anyio.EndOfStream` at EOF."""
        while True:
            try:
                data = self.socket.recv(max_bytes)
            except BlockingIOError:
                await self._wait(self._readable)
                continue
            except OSError as exc:
                raise self._failure(exc) from exc
            if not data:
                raise anyio.EndOfStream
            if len(data) == max_bytes:
                # A full buffer: more is probably waiting. Let the other tasks run first (without
                # a cancellation point: the bytes are read and must reach the caller).
                await anyio.lowlevel.cancel_shielded_checkpoint()
            return data

    async def send(self, item: bytes) -> None:
        """Write all of ``item``, waiting for room in the socket buffer if it is full."""
        view = memoryview(item)
        while view:
            try:
                sent = self.socket.send(view)
            except BlockingIOError:
                await self._wait(self._writable)
                continue
            except OSError as exc:
                raise self._failure(exc) from exc
            view = view[sent:]

    async def send_eof(self) -> None:
        """Half-close: the peer reads EOF after what was written."""
        try:
            self.socket.shutdown(socket.SHUT_WR)
        except OSError as exc:
            raise self._failure(exc) from exc

    async def aclose(self) -> None:
        """Close at once (see :meth:`close`); never waits."""
        self.close()

    def close(self) -> None:
        """Close the socket; a task waiting on it wakes with :class:`anyio.ClosedResourceError`."""
        if self._closed:
            return
        self._closed = True
        self._readable.closing()
        self._writable.closing()
        self.socket.close()

    async def _wait(self, readiness: Readiness) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        await readiness.wait()

    def _failure(self, exc: OSError) -> Exception:
        if self._closed:
            return anyio.ClosedResourceError()
        return anyio.BrokenResourceError(str(exc))


class UnixListener:
    """A listening ``AF_UNIX`` socket. :meth:`accept` raises the ``OSError`` of a failed
    ``accept(2)`` as it is (``EMFILE`` …): what to do about it is the endpoint's decision."""

    def __init__(self, sock: socket.socket) -> None:
        self.socket = sock
        self._fd = sock.fileno()
        self._closed = False
        self._readable = Readiness(self._fd, writing=False)
        # Whether the last accept found a connection: then one found without waiting yields
        # before it is returned, so a flood of connections cannot keep the loop from the others.
        self._hot = False

    def fileno(self) -> int:
        """The listening descriptor."""
        return self._fd

    async def accept(self) -> UnixStream:
        """The next connection, non-blocking.

        A connection found without waiting right after another one (a burst, or a flood) is
        returned only after the other tasks have had a turn; the first one after a wait is
        returned at once (a probe's connection waits for no extra pass of the loop)."""
        while True:
            if self._closed:
                raise anyio.ClosedResourceError
            try:
                client, _ = self.socket.accept()
            except BlockingIOError:
                self._hot = False
                await self._readable.wait()
                continue
            break
        try:
            client.setblocking(False)
            if self._hot:
                await anyio.lowlevel.checkpoint()
        except BaseException:
            client.close()  # cancelled while yielding: nobody will serve it
            raise
        self._hot = True
        return UnixStream(client)

    def close(self) -> None:
        """Stop listening (the socket file stays: removing it is the owner's cleanup)."""
        if self._closed:
            return
        self._closed = True
        self._readable.closing()
        self.socket.close()


def listen_unix(path: str, *, backlog: int = LISTEN_BACKLOG) -> UnixListener:
    """Bind a new socket at ``path`` and listen. The directory must already be private (the
    socket is created with whatever the umask allows, and made 0600 by the caller)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        sock.bind(path)
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return UnixListener(sock)


async def connect_unix(path: str) -> UnixStream:
    """Connect to the Unix socket at ``path``, cancel-safe.

    anyio's own ``connect_unix`` (on asyncio) waits for a listener with a full backlog on a plain
    future that the event loop may still try to resolve after a cancellation, which raises
    ``InvalidStateError`` out of the loop (seen when a session stopped mid-send). Here the wait
    is ``anyio.wait_writable``, which tolerates cancellation.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | _SOCK_NONBLOCK)
    try:
        if not _SOCK_NONBLOCK:
            sock.setblocking(False)
        while True:
            try:
                sock.connect(path)
            except BlockingIOError:
                # A Unix stream connect that would block was not started: wait, then try again.
                await anyio.wait_writable(sock.fileno())
                continue
            break
    except BaseException:
        sock.close()
        raise
    return UnixStream(sock)
