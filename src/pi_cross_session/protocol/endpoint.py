"""The receiving side of the data plane: a Unix-socket listener that speaks wire v1.

The endpoint owns bytes, deadlines and connection counts; it decides nothing about who may talk or
what is admitted. For each connection it

1. refuses at once (closes without a reply) when ``max_connections`` are already open;
2. feeds what it reads into a :class:`~pi_cross_session.protocol.codec.FrameDecoder`;
3. hands the first frame, if it is a hello, to :meth:`InboundHandler.on_hello`;
4. hands the second frame, if it is a message or status query, to
   :meth:`InboundHandler.on_request`, writes the reply and half-closes;
5. answers a frame it cannot even parse (bad UTF-8, too large, not JSON, not the expected kind) with
   the fixed fault reply of the contract, built from the code alone and never from the input.

Frames are handled strictly in order and one at a time, so a fault that arrives after a message can
never undo that message's admission (spec §3.1). A connection lives at most
``connection_deadline_s`` from accept, and after its hello at most ``idle_after_hello_s`` without
receiving anything.

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
import socket
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Generic, Protocol, TypeVar

import anyio
import anyio.abc

from pi_cross_session.protocol.capabilities import ADVERTISED
from pi_cross_session.protocol.codec import NEED_DATA, Fault, Frame, FrameDecoder, encode_frame
from pi_cross_session.protocol.codes import Code, refusal_text
from pi_cross_session.protocol.errors import FrameError, FrameValidationError
from pi_cross_session.protocol.frames import (
    UNKNOWN_REQUEST_ID,
    Hello,
    Message,
    Response,
    StatusQuery,
    dumps_frame,
    loads_frame,
    parse_hello,
    parse_request,
)
from pi_cross_session.protocol.limits import (
    ACCEPT_BACKOFF_S,
    CONNECTION_DEADLINE_S,
    IDLE_AFTER_HELLO_S,
    MAX_CONNECTIONS,
    MAX_FRAME_BYTES,
    READ_CHUNK_BYTES,
    WAITING_SHED_AFTER_S,
)

logger = logging.getLogger(__name__)

SessionT = TypeVar("SessionT")


class SocketFiles(Protocol):
    """The file operations the endpoint needs (provided by the module that judges files)."""

    def ensure_private_dir(self, path: str) -> None:
        """Create or check the 0700 runtime dir that holds the socket."""

    def remove_file(self, path: str) -> None:
        """Remove whatever stale file is at the socket path (missing is fine)."""

    def make_socket_private(self, path: str) -> None:
        """After bind: check the socket is ours and set it to 0600."""


@dataclass(frozen=True, slots=True)
class PeerCredentials:
    """Who the kernel says opened a connection, as of its ``connect()``.

    A field is ``None`` when the platform does not report it; nothing is enforced on a ``None``.
    """

    pid: int | None
    uid: int | None
    gid: int | None


#: Reads the peer credentials of an accepted Unix socket: ``None`` when the platform exposes none;
#: raises ``OSError`` when it should but the call failed (the endpoint then closes the connection).
PeerCredentialsReader = Callable[[socket.socket], PeerCredentials | None]

# <sys/un.h> on macOS: the option level for local sockets and its two options. CPython does not
# export them, and they are part of the stable kernel ABI.
_SOL_LOCAL: Final = 0
_LOCAL_PEERCRED: Final = 0x001
_LOCAL_PEERPID: Final = 0x002
#: ``struct xucred``: ``u_int cr_version; uid_t cr_uid; short cr_ngroups; gid_t cr_groups[16]``.
_XUCRED: Final = struct.Struct("=IIh2x16I")
_XUCRED_VERSION: Final = 0
#: ``struct ucred`` of Linux: ``pid_t pid; uid_t uid; gid_t gid``.
_UCRED: Final = struct.Struct("=3i")


def _linux_credentials(sock: socket.socket) -> PeerCredentials:
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    pid, uid, gid = _UCRED.unpack(raw)
    return PeerCredentials(pid=pid, uid=uid, gid=gid)


def parse_xucred(raw: bytes) -> tuple[int, int | None]:
    """``(uid, first gid)`` from a macOS ``struct xucred``; ``ValueError`` if it is not one."""
    if len(raw) < _XUCRED.size:
        raise ValueError(f"xucred of {len(raw)} bytes, expected {_XUCRED.size}")
    version, uid, ngroups, *groups = _XUCRED.unpack_from(raw)
    if version != _XUCRED_VERSION:
        raise ValueError(f"xucred version {version}")
    return uid, (groups[0] if ngroups > 0 else None)


def _darwin_credentials(sock: socket.socket) -> PeerCredentials:
    raw = sock.getsockopt(_SOL_LOCAL, _LOCAL_PEERCRED, _XUCRED.size)
    try:
        uid, gid = parse_xucred(raw)
    except ValueError as exc:
        raise OSError(f"unreadable peer credentials: {exc}") from exc
    try:
        pid: int | None = sock.getsockopt(_SOL_LOCAL, _LOCAL_PEERPID)
    except OSError:
        pid = None  # macOS before 10.8 reports the uid only
    return PeerCredentials(pid=pid, uid=uid, gid=gid)


def _no_credentials(sock: socket.socket) -> None:
    del sock


def _platform_reader() -> tuple[str, PeerCredentialsReader]:
    if sys.platform.startswith("linux"):
        return "SO_PEERCRED", _linux_credentials
    if sys.platform == "darwin":
        return "LOCAL_PEERCRED", _darwin_credentials
    # Other BSDs have getpeereid() but Python does not expose it, and their structs differ from
    # both of the above; we would rather enforce nothing than misread a uid.
    return "unavailable", _no_credentials


_SOURCE_AND_READER: Final = _platform_reader()
#: How this platform's peer credentials are read (``"unavailable"``: not at all), for status.
PEER_CREDENTIALS_SOURCE: Final = _SOURCE_AND_READER[0]


def read_peer_credentials(sock: socket.socket) -> PeerCredentials | None:
    """The kernel's record of who connected to ``sock`` (an accepted ``AF_UNIX`` stream).

    ``None`` on a platform that exposes no peer credentials (:data:`PEER_CREDENTIALS_SOURCE` is
    ``"unavailable"``); ``OSError`` when the call fails.
    """
    return _SOURCE_AND_READER[1](sock)


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

    def on_request(self, session: SessionT, request: Message | StatusQuery) -> Response:
        """Answer the second frame. Synchronous so that admission is atomic."""
        ...


@dataclass(frozen=True, slots=True)
class EndpointConfig:
    """Bounds of one endpoint; the defaults are the contract's."""

    max_connections: int = MAX_CONNECTIONS
    connection_deadline_s: float = CONNECTION_DEADLINE_S
    idle_after_hello_s: float = IDLE_AFTER_HELLO_S
    max_frame_bytes: int = MAX_FRAME_BYTES
    capabilities: tuple[str, ...] = ADVERTISED
    #: At capacity, a connection still waiting for its first line this long may be shed.
    waiting_shed_after_s: float = WAITING_SHED_AFTER_S


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
    #: Connections still waiting for their first line, closed at capacity to serve a newcomer.
    shed_waiting: int = 0


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


@dataclass(slots=True)
class _Connection(Generic[SessionT]):
    """Per-connection progress: how many frames were handled and what the hello produced."""

    peer: PeerCredentials | None = None
    frames: int = 0
    session: SessionT | None = None
    finished: bool = False
    idle_cut: bool = False
    opened_at: float = 0.0
    stream: anyio.abc.SocketStream | None = None
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    #: Closed by the endpoint to make room (its slot was released then).
    shed: bool = False

    @property
    def pid(self) -> int | None:
        """The connecting process, when the kernel said."""
        return None if self.peer is None else self.peer.pid


class Endpoint(Generic[SessionT]):
    """A listener at one socket path serving one handler.

    ``peer_credentials`` reads who connected (the default asks the kernel); tests inject another
    reader to play a connection from another uid, which they cannot open without root.
    """

    def __init__(
        self,
        path: str,
        handler: InboundHandler[SessionT],
        *,
        files: SocketFiles,
        config: EndpointConfig | None = None,
        peer_credentials: PeerCredentialsReader = read_peer_credentials,
    ) -> None:
        self.path = path
        self._handler = handler
        self._files = files
        self._config = config or EndpointConfig()
        self._peer_credentials = peer_credentials
        # The effective uid is what the kernel compares file modes against, so it is the uid
        # that owns our 0700 dir and 0600 socket: the only one allowed to talk to us.
        self._uid = os.geteuid()
        self._counters = _Counters()
        # Connections that have not completed their first line, oldest first (see _victim).
        self._waiting: dict[int, _Connection[SessionT]] = {}

    def statistics(self) -> EndpointStatistics:
        """Counters since this endpoint was created."""
        c = self._counters
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
            shed_waiting=c.shed,
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
        listener = await anyio.create_unix_listener(self.path)
        try:
            await anyio.to_thread.run_sync(self._files.make_socket_private, self.path)
            async with anyio.create_task_group() as connections:
                task_status.started()
                await self._accept_loop(listener, connections)
        finally:
            with anyio.CancelScope(shield=True):
                await listener.aclose()

    async def _accept_loop(
        self, listener: anyio.abc.SocketListener, connections: anyio.abc.TaskGroup
    ) -> None:
        counters = self._counters
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                logger.warning("accept failed on %s: %s", self.path, exc)
                await anyio.sleep(ACCEPT_BACKOFF_S)
                continue
            # Before the capacity check, so another user can neither hold a slot nor be counted
            # as a connection of ours.
            admitted, peer = self._vet_peer(stream)
            if not admitted:
                await anyio.aclose_forcefully(stream)
                continue
            state: _Connection[SessionT] = _Connection(
                peer=peer, opened_at=anyio.current_time(), stream=stream
            )
            if counters.open >= self._config.max_connections:
                victim = self._victim(state)
                if victim is None:
                    # The contract's rule: the 65th is destroyed with no reply.
                    counters.refused += 1
                    await anyio.aclose_forcefully(stream)
                    continue
                await self._shed(victim)
            counters.open += 1
            counters.accepted += 1
            counters.peak = max(counters.peak, counters.open)
            if peer is None:
                counters.unverified += 1
            self._waiting[id(state)] = state
            connections.start_soon(self._serve_connection, state)

    def _victim(self, newcomer: _Connection[SessionT]) -> _Connection[SessionT] | None:
        """At capacity: a connection still waiting for its first line that should give way.

        First fairness: if one process holds more waiting connections than the newcomer's
        process would after it, that process's oldest gives way (a slowloris from one process
        cannot starve everyone else). Then age: the oldest connection that has waited longer than
        any real sender would. Otherwise nobody, and the newcomer is refused as the contract says.
        A connection that has sent its hello is never shed.
        """
        waiting = list(self._waiting.values())
        if not waiting:
            return None
        held: dict[int | None, int] = {}
        for conn in waiting:
            held[conn.pid] = held.get(conn.pid, 0) + 1
        heaviest = max(held, key=lambda pid: held[pid])
        if heaviest != newcomer.pid and held[heaviest] > held.get(newcomer.pid, 0) + 1:
            return next(conn for conn in waiting if conn.pid == heaviest)
        oldest = waiting[0]
        if anyio.current_time() - oldest.opened_at >= self._config.waiting_shed_after_s:
            return oldest
        return None

    async def _shed(self, victim: _Connection[SessionT]) -> None:
        # The slot is released now, and the socket closed before the newcomer is served, so the
        # open count and the descriptors in use never exceed the bound.
        victim.shed = True
        self._waiting.pop(id(victim), None)
        self._counters.open -= 1
        self._counters.shed += 1
        victim.scope.cancel()
        if victim.stream is not None:
            await anyio.aclose_forcefully(victim.stream)

    def _vet_peer(self, stream: anyio.abc.SocketStream) -> tuple[bool, PeerCredentials | None]:
        """Whether the connection may be served at all, and who the kernel says is on it."""
        try:
            peer = self._peer_credentials(stream.extra(anyio.abc.SocketAttribute.raw_socket))
        except OSError as exc:
            # The platform has credentials but would not give them (typically the peer is
            # already gone): refuse rather than serve someone we could not check.
            self._counters.unreadable += 1
            logger.info("peer credentials unreadable on %s: %s", self.path, exc)
            return False, None
        if peer is not None and peer.uid is not None and peer.uid != self._uid:
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

    async def _serve_connection(self, state: _Connection[SessionT]) -> None:
        stream = state.stream
        assert stream is not None
        try:
            with state.scope, anyio.move_on_after(self._config.connection_deadline_s) as deadline:
                await self._converse(stream, state)
            if deadline.cancelled_caught:
                self._counters.deadline_cuts += 1
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass  # the peer went away (or was shed); there is nobody left to answer
        finally:
            self._waiting.pop(id(state), None)
            if not state.shed:
                self._counters.open -= 1
            if state.idle_cut:
                self._counters.idle_cuts += 1
            await anyio.aclose_forcefully(stream)

    async def _converse(self, stream: anyio.abc.SocketStream, state: _Connection[SessionT]) -> None:
        decoder = FrameDecoder(max_frame_bytes=self._config.max_frame_bytes)
        while True:
            *frames, last = decoder.events()
            for frame in frames:
                assert isinstance(frame, Frame)  # events() ends with its one non-frame event
                await self._handle_frame(stream, state, frame)
                if state.finished:
                    return
            if isinstance(last, Fault):
                self._counters.faults += 1
                await self._send_fault(stream, last.code)
                return
            if last is not NEED_DATA:
                return  # the peer closed (ConnectionClosed)
            if state.frames:
                # After the hello only: a silent client may hold a slot for 5 s, not 30.
                with anyio.move_on_after(self._config.idle_after_hello_s) as idle:
                    data = await _receive(stream)
                if idle.cancelled_caught:
                    state.idle_cut = True
                    return
            else:
                data = await _receive(stream)
            decoder.receive_data(data)

    async def _handle_frame(
        self, stream: anyio.abc.SocketStream, state: _Connection[SessionT], frame: Frame
    ) -> None:
        state.frames += 1
        self._waiting.pop(id(state), None)  # a first line came: never shed from here on
        if state.frames == 1:
            await self._first_frame(stream, state, frame)
        else:
            await self._second_frame(stream, state, frame)

    async def _first_frame(
        self, stream: anyio.abc.SocketStream, state: _Connection[SessionT], frame: Frame
    ) -> None:
        try:
            hello = parse_hello(loads_frame(frame.text))
        except FrameError:
            self._counters.faults += 1
            await self._send_fault(stream, Code.INVALID_FRAME)
            state.finished = True
            return
        except FrameValidationError:
            self._counters.faults += 1
            await self._send_fault(stream, Code.AUTHENTICATION_FAILED)
            state.finished = True
            return
        reply, session = await self._handler.on_hello(hello, peer=state.peer)
        await self._send(stream, reply)
        if session is None:
            state.finished = True
        state.session = session

    async def _second_frame(
        self, stream: anyio.abc.SocketStream, state: _Connection[SessionT], frame: Frame
    ) -> None:
        state.finished = True
        try:
            request = parse_request(loads_frame(frame.text))
        except (FrameError, FrameValidationError):
            self._counters.faults += 1
            await self._send_fault(stream, Code.INVALID_FRAME)
            return
        assert state.session is not None  # a refused hello finishes the connection
        reply = self._handler.on_request(state.session, request)
        await self._send(stream, reply)
        await stream.send_eof()

    async def _send_fault(self, stream: anyio.abc.SocketStream, code: Code) -> None:
        reply = Response.build(
            request_id=UNKNOWN_REQUEST_ID,
            ok=False,
            status=code,
            error=refusal_text(code),
            capabilities=self._config.capabilities,
        )
        await self._send(stream, reply)

    async def _send(self, stream: anyio.abc.SocketStream, reply: Response) -> None:
        await stream.send(encode_frame(dumps_frame(reply)))


async def _receive(stream: anyio.abc.SocketStream) -> bytes:
    """The next bytes from the peer; ``b""`` once it has closed its side."""
    try:
        return await stream.receive(READ_CHUNK_BYTES)
    except anyio.EndOfStream:
        return b""
