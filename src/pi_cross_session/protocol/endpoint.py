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
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

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


class InboundHandler(Protocol[SessionT]):
    """Every decision of a connection, made outside the endpoint.

    ``SessionT`` is whatever the handler wants to remember between the hello and the second
    frame (typically the authenticated sender, or a marker for a probe-only connection).
    """

    async def on_hello(self, hello: Hello) -> tuple[Response, SessionT | None]:
        """Judge a hello. Return the reply and a session; ``None`` ends the connection."""
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


@dataclass(slots=True)
class _Counters:
    open: int = 0
    peak: int = 0
    accepted: int = 0
    refused: int = 0
    deadline_cuts: int = 0
    idle_cuts: int = 0
    faults: int = 0


@dataclass(slots=True)
class _Connection(Generic[SessionT]):
    """Per-connection progress: how many frames were handled and what the hello produced."""

    frames: int = 0
    session: SessionT | None = None
    finished: bool = False
    idle_cut: bool = False


class Endpoint(Generic[SessionT]):
    """A listener at one socket path serving one handler."""

    def __init__(
        self,
        path: str,
        handler: InboundHandler[SessionT],
        *,
        files: SocketFiles,
        config: EndpointConfig | None = None,
    ) -> None:
        self.path = path
        self._handler = handler
        self._files = files
        self._config = config or EndpointConfig()
        self._counters = _Counters()

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
            if counters.open >= self._config.max_connections:
                counters.refused += 1
                await anyio.aclose_forcefully(stream)
                continue
            counters.open += 1
            counters.accepted += 1
            counters.peak = max(counters.peak, counters.open)
            connections.start_soon(self._serve_connection, stream)

    async def _serve_connection(self, stream: anyio.abc.SocketStream) -> None:
        state: _Connection[SessionT] = _Connection()
        try:
            with anyio.move_on_after(self._config.connection_deadline_s) as deadline:
                await self._converse(stream, state)
            if deadline.cancelled_caught:
                self._counters.deadline_cuts += 1
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass  # the peer went away; there is nobody left to answer
        finally:
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
        reply, session = await self._handler.on_hello(hello)
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
