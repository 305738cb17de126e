"""The receiving side of the data plane: a Unix-socket listener that drives wire v1.

The endpoint is a driver: it owns the socket, the clock and the connection counts, and decides
nothing itself. What a connection may say, in which order, with which fixed replies and under which
deadlines is the pure
:class:`~pi_cross_session._internal.protocol.server_conversation.ServerConversation`; who may talk
and what is admitted is the injected :class:`InboundHandler`; who gives way at capacity and how much
each process may have read are the pure policies of
:mod:`~pi_cross_session._internal.protocol.fairness`. For each connection the endpoint

1. refuses at once (closes without a reply) when ``max_connections`` are already open and nobody
   should give way;
2. feeds what it reads to the conversation, under the conversation's deadline (one cancel scope
   per connection, moved when the deadline moves: on asyncio a single loop timer, see
   :mod:`~pi_cross_session._internal.protocol.io.deadline`);
3. hands a hello to :meth:`InboundHandler.on_hello` and a message or status query to
   :meth:`InboundHandler.on_request`, and writes what the conversation makes of their replies
   (half-closing after the request's);
4. writes the fixed reply the conversation gives a frame that broke the rules, and closes.

Workers take turns: one accepts, hands accepting on to the next and serves what it accepted
itself, so a connection's hello is answered without another task being woken first; a worker
whose connection has ended waits for its next turn rather than ending (waking a task costs a
fraction of creating one), so a session answering probe after probe creates no task per probe.

Frames are handled strictly in order and one at a time, so a fault that arrives after a message can
never undo that message's admission (spec §3.1). A connection lives at most
``connection_deadline_s`` from accept, and after its hello at most ``idle_after_hello_s`` without
receiving anything and ``request_deadline_s`` in all until its second frame is complete.
:meth:`Endpoint.serve_stream` serves one connection over any byte stream (tests drive the
endpoint in memory, under a mock clock, with it).

What one hostile process of the same user can make it spend is bounded too (``docs/security.md``,
"Under attack"):

* **slots** — at capacity, or when ``accept`` fails for lack of file descriptors, a connection
  gives way to the newcomer by
  :class:`~pi_cross_session._internal.protocol.fairness.SheddingPolicy`: the process holding the
  most connections first, then the oldest past ``shed_after_s``; only one being answered never does.
  The 65th connection is destroyed, as the contract says, only when nobody should give way;
* **the loop** — each process's reads draw on a byte budget
  (:class:`~pi_cross_session._internal.protocol.fairness.ReadBudget`), and a frame whose JSON would
  need more values or containers than any valid frame is refused unparsed
  (:mod:`~pi_cross_session._internal.protocol.shape`), with the reply a frame of the wrong kind
  gets;
* **descriptors** — connections are held to what leaves ``descriptor_reserve`` descriptors free
  for the rest of the session: from the start when the open-file limit is low, and as soon as
  ``accept`` fails with ``EMFILE``, ``ENFILE``, ``ENOBUFS`` or ``ENOMEM`` otherwise. No accept
  failure ends the endpoint: it sheds connections (so descriptors come back) and accepts again, or
  else backs off (growing, bounded, cut short when a connection closes); every accept failure is
  counted by errno in :class:`EndpointStatistics`, and the free descriptors are counted again
  every ``descriptor_check_s`` to give the connections back what came free.

``on_request`` is synchronous on purpose: admission must be atomic with respect to every other
connection (spec §3.2), and a function without ``await`` cannot be interleaved.

Before any of that, the endpoint asks the kernel who connected (:func:`read_peer_credentials`:
``SO_PEERCRED`` on Linux, ``LOCAL_PEERCRED``/``LOCAL_PEERPID`` on macOS). A connection from
another uid is closed before a byte is read or written; the connecting pid is handed to
:meth:`InboundHandler.on_hello` so that the handler can hold an authenticated sender to the pid its
registration names. Where the platform tells nothing, nothing is enforced and the connection is
counted as unverified (see ``docs/security.md``, "Kernel-checked peers").
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Generic, Protocol, TypeAlias, TypeVar

import anyio
import anyio.abc

from pi_cross_session._internal.protocol.capabilities import ADVERTISED
from pi_cross_session._internal.protocol.conversation import NEED_DATA
from pi_cross_session._internal.protocol.credentials import PeerCredentials, may_connect
from pi_cross_session._internal.protocol.fairness import ReadBudget, SharedCap, SheddingPolicy, Slot
from pi_cross_session._internal.protocol.frames import (
    Hello,
    Message,
    Response,
    ServerMemo,
    StatusQuery,
)
from pi_cross_session._internal.protocol.io import memory, sockets
from pi_cross_session._internal.protocol.io.deadline import DeadlineScope, deadline_scope
from pi_cross_session._internal.protocol.io.deadline import now as loop_now
from pi_cross_session._internal.protocol.io.peercred import (
    PeerCredentialsReader,
    read_peer_credentials,
)
from pi_cross_session._internal.protocol.limits import (
    ACCEPT_BACKOFF_MAX_S,
    ACCEPT_BACKOFF_S,
    CONNECTION_DEADLINE_S,
    DESCRIPTOR_CHECK_S,
    DESCRIPTOR_RESERVE,
    IDLE_AFTER_HELLO_S,
    MAX_CONNECTIONS,
    MAX_FRAME_BYTES,
    MAX_IDLE_CONNECTION_TASKS,
    MEMORY_GIVE_BACK_AFTER_BYTES,
    MEMORY_GIVE_BACK_EVERY_S,
    PEER_READ_BURST_BYTES,
    PEER_READ_BYTES_PER_S,
    READ_CHUNK_BYTES,
    REQUEST_DEADLINE_AFTER_READY_S,
    SHED_AFTER_S,
)
from pi_cross_session._internal.protocol.pressure import Backoff, Headroom, failure_name, shortage
from pi_cross_session._internal.protocol.server_conversation import (
    Ending,
    HelloReceived,
    Rejected,
    RequestReceived,
    ServerBounds,
    ServerConversation,
    ServerState,
)
from pi_cross_session._internal.protocol.shape import RECEIVER_BOUNDS, ShapeBounds

logger = logging.getLogger(__name__)

SessionT = TypeVar("SessionT")

#: What :meth:`InboundHandler.on_request` returns: the reply, or an awaitable of it (``None``:
#: close without a reply).
RequestAnswer: TypeAlias = Response | Awaitable[Response | None]


class SocketFiles(Protocol):
    """The file operations the endpoint needs (provided by the module that judges files)."""

    def ensure_private_dir(self, path: str) -> None:
        """Create or check the 0700 runtime dir that holds the socket."""

    def remove_file(self, path: str) -> None:
        """Remove whatever stale file is at the socket path (missing is fine)."""

    def make_socket_private(self, path: str) -> None:
        """After bind: check the socket is ours and set it to 0600."""


class InboundHandler(Protocol[SessionT]):
    """Every decision of a connection, made outside the endpoint.

    ``SessionT`` is whatever the handler wants to remember between the hello and the second
    frame (typically the authenticated sender, or a marker for a probe-only connection).
    """

    async def on_hello(
        self, hello: Hello, *, peer: PeerCredentials | None = None
    ) -> tuple[Response, SessionT | None]:
        """Judge a hello. Return the reply and a session; ``None`` ends the connection.

        ``peer`` is what the kernel reported about the connecting process (``None`` when the
        platform reports nothing); the endpoint has already refused other uids.
        """
        ...

    def on_request(self, session: SessionT, request: Message | StatusQuery) -> RequestAnswer:
        """Answer the second frame. Synchronous so that admission is atomic; a handler that
        cannot answer by itself (a proxy, whose answer comes from another machine) returns an
        awaitable of the reply, ``None`` when nobody can say what became of the request."""
        ...


@dataclass(frozen=True, slots=True)
class EndpointConfig:
    """Bounds of one endpoint; the defaults are the contract's, and ours where it has none."""

    max_connections: int = MAX_CONNECTIONS
    connection_deadline_s: float = CONNECTION_DEADLINE_S
    idle_after_hello_s: float = IDLE_AFTER_HELLO_S
    max_frame_bytes: int = MAX_FRAME_BYTES
    capabilities: tuple[str, ...] = ADVERTISED
    #: From ``ready`` to the end of the second frame, at most (absolute, unlike the idle bound).
    request_deadline_s: float = REQUEST_DEADLINE_AFTER_READY_S
    #: At capacity, a connection open this long (and not being answered) may be shed.
    shed_after_s: float = SHED_AFTER_S
    #: Bytes one process may have us read at once, then per second (see ``ReadBudget``).
    read_burst_bytes: int = PEER_READ_BURST_BYTES
    read_bytes_per_s: float = PEER_READ_BYTES_PER_S
    #: The most strings, containers and separators a frame may hold to be parsed at all.
    shape_bounds: ShapeBounds = RECEIVER_BOUNDS
    #: Pauses after a failed ``accept`` that shedding could not make good: first, then at most.
    accept_backoff_s: float = ACCEPT_BACKOFF_S
    accept_backoff_max_s: float = ACCEPT_BACKOFF_MAX_S
    #: Descriptors kept free for the rest of the session when they are short (a low open-file
    #: limit, or ``accept`` ran out of them), and how often the free ones are counted then.
    descriptor_reserve: int = DESCRIPTOR_RESERVE
    descriptor_check_s: float = DESCRIPTOR_CHECK_S
    #: A connection that read more than this gives its freed memory back to the OS on closing
    #: (at most once per ``give_back_every_s``, and once more that long after the last).
    give_back_after_bytes: int = MEMORY_GIVE_BACK_AFTER_BYTES
    give_back_every_s: float = MEMORY_GIVE_BACK_EVERY_S


@dataclass(frozen=True, slots=True)
class EndpointStatistics:
    """A snapshot of the endpoint's counters, for status displays and tests."""

    open_connections: int
    peak_connections: int
    accepted: int
    refused_over_capacity: int
    deadline_cuts: int
    idle_cuts: int
    faults: int
    #: Closed without a byte because another uid connected (not counted in ``accepted``).
    foreign_uid_closed: int
    #: Closed without a byte because the peer credentials could not be read.
    credentials_unreadable: int
    #: Accepted without peer credentials, because the platform exposes none (nothing enforced).
    unverified: int
    #: Connections closed (without a byte) to make room for a newcomer, at capacity or out of
    #: file descriptors.
    shed: int = 0
    #: Of those, the ones closed because ``accept`` had run out of file descriptors.
    shed_for_descriptors: int = 0
    #: Connections cut because their second frame was not complete ``request_deadline_s`` after
    #: ``ready``.
    request_deadline_cuts: int = 0
    #: Frames refused unparsed because their JSON would cost more than any valid frame's.
    costly_frames: int = 0
    #: Reads delayed because the connecting process had used its byte budget.
    throttled_reads: int = 0
    #: Failed ``accept`` calls by errno name (``EMFILE`` …) or exception name; none ends the
    #: endpoint.
    accept_failures: Mapping[str, int] = field(default_factory=dict)
    #: The newest of those, and how long ago it happened (seconds), when there was one.
    last_accept_failure: str | None = None
    last_accept_failure_age_s: float | None = None
    #: Connections allowed while file descriptors are short (``None``: not short, the limit is
    #: ``max_connections``).
    descriptor_cap: int | None = None
    #: Times freed heap memory was handed back to the OS after large connections (glibc only).
    memory_given_back: int = 0
    #: Requests closed without a reply because the handler could not say what became of them.
    unanswered: int = 0


@dataclass(slots=True)
class _Counters:
    open: int = 0
    peak: int = 0
    accepted: int = 0
    refused: int = 0
    deadline_cuts: int = 0
    idle_cuts: int = 0
    faults: int = 0
    foreign_uid: int = 0
    unreadable: int = 0
    unverified: int = 0
    shed: int = 0
    shed_for_descriptors: int = 0
    request_cuts: int = 0
    costly: int = 0
    throttled: int = 0
    unanswered: int = 0
    accept_failures: dict[str, int] = field(default_factory=dict)
    last_accept_failure: str | None = None
    last_accept_failure_at: float | None = None
    given_back: int = 0


@dataclass(slots=True)
class _Connection(Generic[SessionT]):
    """One open connection: its stream, who the kernel says is on it, and its conversation."""

    stream: anyio.abc.ByteStream
    peer: PeerCredentials | None
    conversation: ServerConversation
    #: The connection's one cancel scope: its deadline follows the conversation's, and shedding
    #: cancels it.
    scope: DeadlineScope
    opened_at: float
    #: What the hello produced (the handler's session), once ``ready`` was sent.
    session: SessionT | None = None
    bytes_read: int = 0
    #: Closed by the endpoint to make room (its slot was released then).
    shed: bool = False

    @property
    def pid(self) -> int | None:
        """The connecting process, when the kernel said."""
        return None if self.peer is None else self.peer.pid

    def slot(self) -> Slot:
        """How the shedding policy sees this connection: a request being answered never gives
        way."""
        answering = self.conversation.state is ServerState.ANSWERING
        return Slot(id(self), self.pid, self.opened_at, answering)


class _IdleWorker:
    """A worker between connections: woken by ``wake`` when it is its turn to accept."""

    __slots__ = ("wake",)

    def __init__(self) -> None:
        self.wake = anyio.Event()


class Endpoint(Generic[SessionT]):
    """A listener at one socket path serving one handler.

    ``peer_credentials`` reads who connected (the default asks the kernel); tests inject another
    reader to play a connection from another uid, which they cannot open without root. ``clock``
    only dates accept failures for the status (deadlines run on the event loop's clock).
    """

    def __init__(
        self,
        path: str,
        handler: InboundHandler[SessionT],
        *,
        files: SocketFiles,
        config: EndpointConfig | None = None,
        peer_credentials: PeerCredentialsReader = read_peer_credentials,
        clock: Callable[[], float] = time.monotonic,
        shared: SharedCap | None = None,
    ) -> None:
        self.path = path
        self._shared = shared
        self._handler = handler
        self._files = files
        self._config = config = config or EndpointConfig()
        self._peer_credentials = peer_credentials
        self._clock = clock
        # The effective uid is what the kernel compares file modes against, so it is the uid
        # that owns our 0700 dir and 0600 socket: the only one allowed to talk to us.
        self._uid = os.geteuid()
        # Hellos accepted and reply bytes written before, over all this endpoint's connections.
        self._memo = ServerMemo()
        self._bounds = ServerBounds(
            max_frame_bytes=config.max_frame_bytes,
            shape_bounds=config.shape_bounds,
            connection_deadline_s=config.connection_deadline_s,
            idle_after_hello_s=config.idle_after_hello_s,
            request_deadline_s=config.request_deadline_s,
            capabilities=config.capabilities,
        )
        self._counters = _Counters()
        # Every open connection, oldest first (insertion order): what the shedding policy sees.
        self._open: dict[int, _Connection[SessionT]] = {}
        self._shedding = SheddingPolicy(shed_after_s=config.shed_after_s)
        self._reads = ReadBudget(burst=config.read_burst_bytes, per_s=config.read_bytes_per_s)
        self._backoff = Backoff(config.accept_backoff_s, config.accept_backoff_max_s)
        self._headroom = Headroom(
            reserve=config.descriptor_reserve, max_connections=config.max_connections
        )
        # Set once descriptors ran short: from then on they are counted every few seconds.
        self._short = anyio.Event()
        # Set when a connection that read plenty has closed: wakes the task giving memory back.
        self._released = anyio.Event()
        # Set whenever a connection ends: a descriptor came back, so a paused accept may retry.
        self._freed = anyio.Event()
        # Workers waiting for their turn to accept, the most recently idle last.
        self._idle: list[_IdleWorker] = []

    def statistics(self) -> EndpointStatistics:
        """Counters since this endpoint was created."""
        c = self._counters
        failed_at = c.last_accept_failure_at
        return EndpointStatistics(
            open_connections=c.open,
            peak_connections=c.peak,
            accepted=c.accepted,
            refused_over_capacity=c.refused,
            deadline_cuts=c.deadline_cuts,
            idle_cuts=c.idle_cuts,
            faults=c.faults,
            foreign_uid_closed=c.foreign_uid,
            credentials_unreadable=c.unreadable,
            unverified=c.unverified,
            shed=c.shed,
            shed_for_descriptors=c.shed_for_descriptors,
            request_deadline_cuts=c.request_cuts,
            costly_frames=c.costly,
            throttled_reads=c.throttled,
            accept_failures=MappingProxyType(dict(c.accept_failures)),
            last_accept_failure=c.last_accept_failure,
            last_accept_failure_age_s=None if failed_at is None else self._clock() - failed_at,
            descriptor_cap=self._headroom.cap,
            memory_given_back=c.given_back,
            unanswered=c.unanswered,
        )

    async def serve(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Listen until cancelled. Reports ready (``task_status.started()``) once the socket is
        private and accepting. On exit the listener and every connection are closed; removing the
        socket file is left to the owner's cleanup, which also removes the registration first."""
        runtime_dir = self.path.rsplit("/", 1)[0] or "/"
        await anyio.to_thread.run_sync(self._files.ensure_private_dir, runtime_dir)
        await anyio.to_thread.run_sync(self._files.remove_file, self.path)
        listener = sockets.listen_unix(self.path)
        try:
            await anyio.to_thread.run_sync(self._files.make_socket_private, self.path)
            # A process whose open-file limit cannot hold every connection and the reserve (a
            # low ``ulimit -n``) is held to what it can from the start, before any runs out.
            self._count_descriptors(listener)
            if self._headroom.cap is not None:
                self._short.set()
            async with anyio.create_task_group() as workers:
                workers.start_soon(self._recount_descriptors, listener)
                if memory.AVAILABLE:
                    workers.start_soon(self._give_back_memory)
                workers.start_soon(self._worker, listener, workers)
                task_status.started()
        finally:
            listener.close()

    async def serve_stream(
        self, stream: anyio.abc.ByteStream, *, peer: PeerCredentials | None = None
    ) -> None:
        """Serve one connection over any byte stream, to its end, as the accept loop serves each
        socket (counted as accepted and open meanwhile; no capacity check, no kernel check).

        Tests drive the endpoint over in-memory streams with it, and benches replay bytes."""
        await self._serve(self._admit(stream, peer))

    async def _worker(self, listener: sockets.UnixListener, workers: anyio.abc.TaskGroup) -> None:
        """Accept one connection, hand accepting on to another worker, serve the connection; then
        wait to accept again, or end when enough workers wait already.

        Exactly one worker accepts at a time, and the connection is served by the worker that
        accepted it: a probe's hello is read and answered without waiting for another task to
        be woken (one pass of the event loop less per connection), and a connection is never
        left between two tasks. The next accepting worker is woken meanwhile, so it runs as soon
        as this one waits. At most ``MAX_IDLE_CONNECTION_TASKS`` workers wait between
        connections (waking one costs a fraction of creating one: anyio wraps every new task)."""
        while True:
            conn = await self._accept_one(listener)
            if self._idle:
                self._idle.pop().wake.set()
            else:
                workers.start_soon(self._worker, listener, workers)
            await self._serve(conn)
            del conn
            if len(self._idle) >= MAX_IDLE_CONNECTION_TASKS:
                return
            idle = _IdleWorker()
            self._idle.append(idle)
            try:
                await idle.wake.wait()
            finally:
                if idle in self._idle:  # cancelled while waiting: the endpoint is stopping
                    self._idle.remove(idle)

    async def _accept_one(self, listener: sockets.UnixListener) -> _Connection[SessionT]:
        """The next connection to serve: accepted, from our uid, within capacity (shedding
        another, or refusing it, as the rules say), counted and on its deadline."""
        counters = self._counters
        while True:
            try:
                stream = await listener.accept()
            except (OSError, anyio.BrokenResourceError) as exc:
                # ClosedResourceError (we closed the listener) is not caught: serving is over.
                await self._accept_failed(exc)
                continue
            self._backoff.reset()
            # Before the capacity check, so another user can neither hold a slot nor be counted
            # as a connection of ours.
            admitted, peer = self._vet_peer(stream)
            if not admitted:
                stream.close()
                continue
            shared = self._shared
            if counters.open >= self._headroom.capacity or (shared is not None and shared.full):
                newcomer_pid = None if peer is None else peer.pid
                victim = self._victim(newcomer_pid=newcomer_pid, known=True)
                if victim is None:
                    # The contract's rule: the 65th is destroyed with no reply.
                    counters.refused += 1
                    if shared is not None and shared.full:
                        shared.refused += 1
                    stream.close()
                    continue
                try:
                    await self._shed(victim)
                except BaseException:
                    stream.close()
                    raise
            if peer is None:
                counters.unverified += 1
            return self._admit(stream, peer)

    async def _accept_failed(self, exc: BaseException) -> None:
        """Count a failed ``accept``; make descriptors come back, or pause before the next one.

        Out of descriptors (or buffers, or memory), the connections are held to what leaves
        ``descriptor_reserve`` free for the rest of the session, and the ones above that give way
        by the same rule as at capacity; accept then runs again at once, and the pending newcomer
        takes a freed descriptor. When nobody gives way (or the failure is of another kind), the
        loop pauses, longer after each failure in a row, until the pause ends or a connection
        closes.
        """
        counters = self._counters
        short = shortage(exc)
        name = short or failure_name(exc)
        counters.accept_failures[name] = counters.accept_failures.get(name, 0) + 1
        counters.last_accept_failure = name
        counters.last_accept_failure_at = self._clock()
        if short is not None:
            cap = self._headroom.on_shortage(counters.open)
            self._short.set()
            shed = 0
            while counters.open > cap or not shed:
                # The newcomer is still in the kernel's queue: its process is not known yet.
                victim = self._victim(newcomer_pid=None, known=False)
                if victim is None:
                    break
                counters.shed_for_descriptors += 1
                await self._shed(victim)
                shed += 1
            if shed:
                return
        delay = self._backoff.next_delay()
        if self._backoff.in_a_row == 1:
            logger.warning(
                "accept failed on %s (%s); %s, pausing %.2f s and counting",
                self.path,
                name,
                "out of resources with nobody to shed" if short else "not a resource shortage",
                delay,
            )
        self._freed = anyio.Event()
        with anyio.move_on_after(delay):
            await self._freed.wait()

    async def _recount_descriptors(self, listener: sockets.UnixListener) -> None:
        """While descriptors are short, count them every ``descriptor_check_s`` (the accept loop
        may be waiting for a connection meanwhile, with a cap that no longer holds)."""
        while True:
            await self._short.wait()
            await anyio.sleep(self._config.descriptor_check_s)
            self._count_descriptors(listener)
            if self._headroom.cap is None:
                self._short = anyio.Event()

    async def _give_back_memory(self) -> None:
        """After a connection that read plenty has closed, hand the freed heap back to the OS,
        at most once a period (so the last of a flood is given back one period after it)."""
        while True:
            await self._released.wait()
            await anyio.sleep(self._config.give_back_every_s)
            self._released = anyio.Event()
            memory.give_back()
            self._counters.given_back += 1

    def _count_descriptors(self, listener: sockets.UnixListener) -> None:
        """Count the free descriptors (duplicating the listener's, then closing the copies) and
        let the connections have what is free beyond the reserve."""
        fd = listener.fileno()
        was_short = self._headroom.cap is not None
        copies: list[int] = []
        try:
            for _ in range(self._headroom.wanted(self._counters.open)):
                copies.append(os.dup(fd))
        except OSError:
            pass  # as many as there were
        finally:
            for copy in copies:
                os.close(copy)
        self._headroom.on_count(self._counters.open, len(copies))
        if was_short and self._headroom.cap is None:
            logger.info(
                "file descriptors are back on %s: up to %d connections again",
                self.path,
                self._config.max_connections,
            )

    def _victim(self, *, newcomer_pid: int | None, known: bool) -> _Connection[SessionT] | None:
        """The connection that gives way to a newcomer (see ``SheddingPolicy``), if any.

        ``known`` says whether the newcomer was accepted (so its process is known); when
        ``accept`` itself failed, it holds nothing as far as fairness goes.
        """
        conns = list(self._open.values())
        holds = sum(1 for conn in conns if conn.pid == newcomer_pid) if known else 0
        chosen = self._shedding.victim(
            [conn.slot() for conn in conns], newcomer_holds=holds, now=loop_now()
        )
        return None if chosen is None else self._open.get(chosen.key)

    async def _shed(self, victim: _Connection[SessionT]) -> None:
        # The slot is released now, and the socket closed before the newcomer is served, so the
        # open count and the descriptors in use never exceed the bound.
        victim.shed = True
        self._open.pop(id(victim), None)
        self._count_closed()
        self._counters.shed += 1
        victim.scope.cancel()
        await _close(victim.stream)

    def _vet_peer(self, stream: sockets.UnixStream) -> tuple[bool, PeerCredentials | None]:
        """Whether the connection may be served at all, and who the kernel says is on it."""
        try:
            peer = self._peer_credentials(stream.socket)
        except OSError as exc:
            # The platform has credentials but would not give them (typically the peer is
            # already gone): refuse rather than serve someone we could not check.
            self._counters.unreadable += 1
            logger.info("peer credentials unreadable on %s: %s", self.path, exc)
            return False, None
        if not may_connect(peer, self._uid):
            assert peer is not None
            self._counters.foreign_uid += 1
            logger.warning(
                "closed a connection to %s from uid %d (pid %s): only uid %d may connect",
                self.path,
                peer.uid,
                peer.pid,
                self._uid,
            )
            return False, None
        return True, peer

    # -- one connection ----------------------------------------------------------------------------

    def _admit(
        self, stream: anyio.abc.ByteStream, peer: PeerCredentials | None
    ) -> _Connection[SessionT]:
        """Open a connection's accounts: counted, visible to shedding, its deadline running."""
        now = loop_now()
        conversation = ServerConversation(opened_at=now, bounds=self._bounds, memo=self._memo)
        conn: _Connection[SessionT] = _Connection(
            stream=stream,
            peer=peer,
            conversation=conversation,
            scope=deadline_scope(conversation.deadline.at),
            opened_at=now,
        )
        counters = self._counters
        counters.open += 1
        counters.accepted += 1
        counters.peak = max(counters.peak, counters.open)
        if self._shared is not None:
            self._shared.open += 1
        self._open[id(conn)] = conn
        return conn

    def _count_closed(self) -> None:
        """A connection's slot is free again (here and in the shared cap)."""
        self._counters.open -= 1
        if self._shared is not None:
            self._shared.open -= 1

    async def _serve(self, conn: _Connection[SessionT]) -> None:
        conversation = conn.conversation
        try:
            with conn.scope:
                await self._converse(conn)
            if conn.scope.cancelled_caught and not conn.shed:
                conversation.expire()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass  # the peer went away (or was shed); there is nobody left to answer
        finally:
            self._open.pop(id(conn), None)
            counters = self._counters
            if not conn.shed:
                self._count_closed()
            ending = conversation.ending
            if ending is Ending.FAULT:
                counters.faults += 1
            elif ending is Ending.CUT_IDLE:
                counters.idle_cuts += 1
            elif ending is Ending.CUT_REQUEST:
                counters.request_cuts += 1
            elif ending is Ending.CUT_AT_DEADLINE:
                counters.deadline_cuts += 1
            elif ending is Ending.UNANSWERED:
                counters.unanswered += 1
            await _close(conn.stream)
            self._freed.set()
            if conn.bytes_read > self._config.give_back_after_bytes:
                self._released.set()

    async def _converse(self, conn: _Connection[SessionT]) -> None:
        """Drive the conversation: read when it needs bytes, ask the handler for each decision,
        write what it says. Its deadline is the connection's cancel scope's."""
        conversation = conn.conversation
        stream = conn.stream
        scope = conn.scope
        while True:
            deadline = conversation.deadline.at
            if scope.deadline != deadline:
                scope.deadline = deadline
            event = conversation.next_event()
            if event is NEED_DATA:
                data, now = await self._read(conn)
                conversation.receive_data(data, now)
            elif type(event) is HelloReceived:
                reply, session = await self._handler.on_hello(event.hello, peer=conn.peer)
                if session is None:
                    await stream.send(conversation.refuse_hello(reply))
                    return
                conn.session = session
                await stream.send(conversation.accept_hello(reply, loop_now()))
            elif type(event) is RequestReceived:
                assert conn.session is not None  # a refused hello ends the conversation
                # Synchronous, so admission is atomic; from here on the connection is never shed.
                answer = self._handler.on_request(conn.session, event.request)
                if not isinstance(answer, Response):
                    # A proxy's: the answer comes from elsewhere, under the connection deadline
                    # alone (a request being answered is neither idle nor late).
                    scope.deadline = conversation.deadline.at
                    later = await answer
                    if later is None:
                        conversation.close_unanswered()
                        return
                    answer = later
                await stream.send(conversation.answer(answer))
                await stream.send_eof()
                return
            elif type(event) is Rejected:
                if event.costly:
                    self._counters.costly += 1
                await stream.send(event.reply)
                return
            else:
                return  # the peer closed first: nobody to answer

    async def _read(self, conn: _Connection[SessionT]) -> tuple[bytes, float]:
        """The next bytes (``b""`` at EOF) and when they came, once the connecting process's
        read budget allows."""
        reads = self._reads
        # Not in debt: no need to ask the clock (most reads).
        wait = reads.delay(conn.pid, loop_now()) if reads.owes(conn.pid) else 0.0
        if wait > 0:
            # Its process has had more read than its share: its bytes wait in the kernel (and
            # its writes block), while every other process is read at once.
            self._counters.throttled += 1
            await anyio.sleep(wait)
        try:
            data = await conn.stream.receive(READ_CHUNK_BYTES)
        except anyio.EndOfStream:
            data = b""
        now = loop_now()
        conn.bytes_read += len(data)
        self._reads.charge(conn.pid, len(data), now)
        return data, now


async def _close(stream: anyio.abc.ByteStream) -> None:
    """Close a connection's stream now, whatever is pending on it."""
    if isinstance(stream, sockets.UnixStream):
        stream.close()  # never waits, so it needs no protection from cancellation
    else:
        await anyio.aclose_forcefully(stream)
