"""A proxy's socket: a remote session's door on this machine (docs/remote.md, "Proxies").

It keeps the door rules of any endpoint of ours — another uid is closed before a byte, at most
``max_connections`` at once (and the gateway's shared cap), frames bounded and refused unparsed when
too costly, one hello then at most one message or status query, 30 s from accept and 5 s from
``ready`` to the end of the second frame — and judges the hello with the same
:class:`~pi_cross_session.security.auth.Authenticator` a session uses (our token and target; the
sender's registration, token and kernel-checked pid).

What it cannot do in-line is answer a message: the answer comes from another machine. So the
second frame goes to ``forward``, which returns the reply to write, or ``None`` when nobody knows
what became of the message: then the connection is closed without a receipt, which every sender
files as ``connection_closed`` — ``receipt_unknown``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import anyio
import anyio.abc

from pi_cross_session.protocol.codec import NEED_DATA, Fault, Frame, FrameDecoder
from pi_cross_session.protocol.codes import Code, refusal_text
from pi_cross_session.protocol.credentials import PeerCredentials
from pi_cross_session.protocol.errors import FrameError, FrameValidationError
from pi_cross_session.protocol.frames import (
    UNKNOWN_REQUEST_ID,
    Message,
    Response,
    StatusQuery,
    frame_from_text,
    frame_to_bytes,
    parse_hello,
    parse_request,
)
from pi_cross_session.protocol.io.peercred import read_peer_credentials
from pi_cross_session.protocol.limits import (
    CONNECTION_DEADLINE_S,
    MAX_CONNECTIONS,
    MAX_FRAME_BYTES,
    READ_CHUNK_BYTES,
    REQUEST_DEADLINE_AFTER_READY_S,
)
from pi_cross_session.protocol.shape import RECEIVER_BOUNDS, affordable
from pi_cross_session.security.auth import Authenticator, Caller
from pi_cross_session.security.io import fs

logger = logging.getLogger(__name__)

#: ``forward(caller, request)``: the reply, or ``None`` for "unknown" (close without a receipt).
Forward = Callable[[Caller, Message | StatusQuery], Awaitable[Response | None]]


@dataclass(slots=True)
class ConnectionBudget:
    """Connections open across every proxy of a gateway, and the shared cap."""

    cap: int
    open: int = 0
    refused: int = 0


@dataclass(slots=True)
class ProxyStatistics:
    accepted: int = 0
    refused_over_capacity: int = 0
    foreign_uid_closed: int = 0
    faults: int = 0
    forwarded: int = 0
    unknown_endings: int = 0
    cut: int = 0
    by_status: dict[str, int] = field(default_factory=dict)


class ProxySocket:
    """Serves one proxy's Unix socket until cancelled."""

    def __init__(
        self,
        path: str,
        authenticator: Authenticator,
        forward: Forward,
        *,
        budget: ConnectionBudget,
        capabilities: tuple[str, ...],
        max_connections: int = MAX_CONNECTIONS,
        connection_deadline_s: float = CONNECTION_DEADLINE_S,
        request_deadline_s: float = REQUEST_DEADLINE_AFTER_READY_S,
    ) -> None:
        self.path = path
        self._auth = authenticator
        self._forward = forward
        self._budget = budget
        self._capabilities = capabilities
        self._max = max_connections
        self._deadline_s = connection_deadline_s
        self._request_deadline_s = request_deadline_s
        self._open = 0
        self._uid = os.geteuid()
        self.stats = ProxyStatistics()

    async def serve(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Listen (the socket private before anyone may use it) and serve until cancelled."""
        runtime_dir = self.path.rsplit("/", 1)[0] or "/"
        await anyio.to_thread.run_sync(fs.ensure_private_dir, runtime_dir)
        await anyio.to_thread.run_sync(fs.remove_file, self.path)
        listener = await anyio.create_unix_listener(self.path)
        try:
            await anyio.to_thread.run_sync(fs.make_socket_private, self.path)
            async with anyio.create_task_group() as connections:
                task_status.started()
                while True:
                    stream = await listener.accept()
                    if not self._admit(stream):
                        await anyio.aclose_forcefully(stream)
                        continue
                    connections.start_soon(self._serve_connection, stream)
        finally:
            with anyio.CancelScope(shield=True):
                await listener.aclose()
                try:
                    await anyio.to_thread.run_sync(fs.remove_file, self.path)
                except fs.FileSystemError as exc:
                    logger.info("could not remove proxy socket %s: %s", self.path, exc)

    def _admit(self, stream: anyio.abc.SocketStream) -> bool:
        try:
            peer = read_peer_credentials(stream.extra(anyio.abc.SocketAttribute.raw_socket))
        except OSError:
            return False
        if peer is not None and peer.uid is not None and peer.uid != self._uid:
            self.stats.foreign_uid_closed += 1
            return False
        if self._open >= self._max or self._budget.open >= self._budget.cap:
            self.stats.refused_over_capacity += 1
            self._budget.refused += 1
            return False
        self._open += 1
        self._budget.open += 1
        self.stats.accepted += 1
        return True

    async def _serve_connection(self, stream: anyio.abc.SocketStream) -> None:
        try:
            with anyio.move_on_after(self._deadline_s) as deadline:
                await self._converse(stream)
            if deadline.cancelled_caught:
                self.stats.cut += 1
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass  # the sender went away
        finally:
            self._open -= 1
            self._budget.open -= 1
            await anyio.aclose_forcefully(stream)

    async def _converse(self, stream: anyio.abc.SocketStream) -> None:
        try:
            peer = read_peer_credentials(stream.extra(anyio.abc.SocketAttribute.raw_socket))
        except OSError:
            return
        decoder = FrameDecoder(max_frame_bytes=MAX_FRAME_BYTES)
        caller: Caller | None = None
        ready_at: float | None = None
        while True:
            *frames, last = decoder.events()
            for frame in frames:
                assert isinstance(frame, Frame)
                if caller is None:
                    caller = await self._first(stream, frame, peer)
                    if caller is None:
                        return
                    ready_at = anyio.current_time()
                    continue
                await self._second(stream, frame, caller)
                return
            if isinstance(last, Fault):
                self.stats.faults += 1
                await self._fault(stream, last.code)
                return
            if last is not NEED_DATA:
                return
            if ready_at is None:
                data = await _receive(stream)
            else:
                with anyio.move_on_after(
                    ready_at + self._request_deadline_s - anyio.current_time()
                ) as cut:
                    data = await _receive(stream)
                if cut.cancelled_caught:
                    self.stats.cut += 1
                    return
            decoder.receive_data(data)

    async def _first(
        self, stream: anyio.abc.SocketStream, frame: Frame, peer: PeerCredentials | None
    ) -> Caller | None:
        # A frame that would cost more to parse than any hello is not a hello (as in endpoints).
        affordable_hello = affordable(frame.text, RECEIVER_BOUNDS)
        code: Code | None = None if affordable_hello else Code.AUTHENTICATION_FAILED
        if code is None:
            try:
                hello = frame_from_text(frame.text, parse_hello)
            except FrameError:
                code = Code.INVALID_FRAME
            except FrameValidationError:
                code = Code.AUTHENTICATION_FAILED
        if code is not None:
            self.stats.faults += 1
            await self._fault(stream, code)
            return None
        reply, caller = await self._auth.on_hello(hello, peer=peer)
        await _send(stream, reply)
        return caller

    async def _second(self, stream: anyio.abc.SocketStream, frame: Frame, caller: Caller) -> None:
        try:
            if not affordable(frame.text, RECEIVER_BOUNDS):
                raise FrameValidationError("too costly")
            request = frame_from_text(frame.text, parse_request)
        except (FrameError, FrameValidationError):
            self.stats.faults += 1
            await self._fault(stream, Code.INVALID_FRAME)
            return
        if caller.sender is None:
            # A probe-only connection: a message needs a sender, a status query is not one.
            if isinstance(request, Message):
                await _send(stream, self._refusal(request.request_id, Code.AUTHENTICATION_FAILED))
            else:
                await self._fault(stream, Code.INVALID_FRAME)
            return
        self.stats.forwarded += 1
        reply = await self._forward(caller, request)
        if reply is None:
            # Nobody knows whether the remote session admitted it: no receipt at all.
            self.stats.unknown_endings += 1
            return
        self.stats.by_status[reply.status] = self.stats.by_status.get(reply.status, 0) + 1
        await _send(stream, reply)
        await stream.send_eof()

    def _refusal(self, request_id: str, code: Code) -> Response:
        return Response.build(
            request_id=request_id,
            ok=False,
            status=code,
            error=refusal_text(code),
            capabilities=self._capabilities,
        )

    async def _fault(self, stream: anyio.abc.SocketStream, code: Code) -> None:
        await _send(stream, self._refusal(UNKNOWN_REQUEST_ID, code))


async def _send(stream: anyio.abc.SocketStream, reply: Response) -> None:
    await stream.send(frame_to_bytes(reply))


async def _receive(stream: anyio.abc.SocketStream) -> bytes:
    try:
        return await stream.receive(READ_CHUNK_BYTES)
    except anyio.EndOfStream:
        return b""
