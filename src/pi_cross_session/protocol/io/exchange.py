"""The sending side of the data plane: one exchange per connection, under one deadline.

An exchange vets the peer's endpoint, connects, says hello, and then either stops (a *probe*),
writes one message, or writes one status query, and reads the receipt. Everything, vetting
included, runs under a single absolute monotonic deadline (5 s for sends and status queries,
350 ms for probes). The rules, in the order they are applied (spec §3.7):

* the registered ``socketPath`` must be the path we compute for that instance id, and the socket
  must be a real socket of ours with no group/other bits — else ``unsafe_endpoint`` or the errno
  name, and no connection. A vetting answer that arrives after the deadline never connects;
* a reply whose ``requestId`` is not the current phase's is ``invalid_receipt`` — checked before
  ``ok``, so a refusal we cannot attribute is never mistaken for a refusal of *our* frame;
* a ``ready`` must come from the peer we meant (``wrong_endpoint`` otherwise) and, for a message,
  advertise ``cancel-safe-queue-v1`` (``unsupported`` otherwise, and the message is never written);
  a goal-scoped message also needs ``goal-scoped-peer-v1``;
* a receipt must be ``submitted``, ``queued`` or ``accepted`` from the same peer.

Every other ending raises :class:`ExchangeError` with a code that
:func:`~pi_cross_session.protocol.codes.classify` turns into an honest verdict. This process
running out of file descriptors (or buffers, or memory) before the connection exists is
``transport_error`` with nothing written, the errno in the detail and as the error's cause
(:func:`~pi_cross_session.protocol.pressure.shortage` finds it). Nothing is ever
retried here: whether to try again is the caller's decision, and after ``receipt_unknown`` the
right move is a status query, not a resend. The error also says whether the message frame was
written at all, so a caller can tell "certainly not delivered" from "unknown".
"""

from __future__ import annotations

import errno
import logging
import socket
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import anyio
import anyio.abc
from pydantic import ValidationError

from pi_cross_session.protocol.capabilities import ADVERTISED, can_queue, can_scope_to_goal
from pi_cross_session.protocol.codec import (
    NEED_DATA,
    ConnectionClosed,
    Fault,
    Frame,
    FrameDecoder,
    encode_frame,
)
from pi_cross_session.protocol.codes import OK_RECEIPTS, Classification, Code, classify
from pi_cross_session.protocol.errors import (
    CrossSessionError,
    FrameError,
    FrameTooLargeError,
    FrameValidationError,
)
from pi_cross_session.protocol.frames import (
    WIRE_VERSION,
    Hello,
    Message,
    Response,
    Sender,
    StatusQuery,
    dumps_frame,
    loads_frame,
    parse_response,
)
from pi_cross_session.protocol.io.offload import Offload
from pi_cross_session.protocol.limits import (
    MAX_FRAME_BYTES,
    PROBE_DEADLINE_S,
    PROBE_GUARD_MARGIN_S,
    READ_CHUNK_BYTES,
    SEND_DEADLINE_S,
)
from pi_cross_session.protocol.paths import Locations
from pi_cross_session.protocol.pressure import shortage
from pi_cross_session.protocol.registration import Registration

logger = logging.getLogger(__name__)


Connector = Callable[[str], Awaitable[anyio.abc.ByteStream]]


class EndpointVetting(Protocol):
    """The socket check the exchange needs (provided by the module that judges files)."""

    def vet_socket(self, path: str) -> str | None:
        """``None`` when the socket at ``path`` is safe to connect to, else the refusal code."""


class ExchangeError(CrossSessionError):
    """An exchange that did not end in a good receipt.

    ``code`` is the receiver's ``status`` for a refusal, or a local code. ``remote_error`` is the
    receiver's own text, if it gave one (a diagnostic, never trusted). ``message_written`` is True
    once the message frame was handed to the socket: before that, the message was certainly not
    delivered, whatever the code says.
    """

    def __init__(
        self,
        code: str,
        detail: str,
        *,
        remote_error: str | None = None,
        message_written: bool = False,
        frames_written: int = 0,
    ) -> None:
        super().__init__(f"{code}: {detail}", code=code)
        self.detail = detail
        self.remote_error = remote_error
        self.message_written = message_written
        self.frames_written = frames_written

    @property
    def verdict(self) -> Classification:
        """The sender-side classification of this ending (spec §4.3)."""
        return classify(self.code)


@dataclass(frozen=True, slots=True)
class Receipt:
    """A good ending: the ``ready`` reply, and the receipt when a second frame was sent."""

    ready: Response
    reply: Response | None
    frames_written: int

    @property
    def status(self) -> str:
        """``ready`` for a probe, the receipt's status (or the message's row state) otherwise."""
        return (self.reply or self.ready).status

    @property
    def peer_capabilities(self) -> tuple[str, ...]:
        """What the receiver advertised in its ``ready``."""
        return tuple(self.ready.capabilities or ())


@dataclass(frozen=True, slots=True)
class ExchangeConfig:
    """Deadlines and bounds of the client side; the defaults are the contract's."""

    send_deadline_s: float = SEND_DEADLINE_S
    probe_deadline_s: float = PROBE_DEADLINE_S
    max_frame_bytes: int = MAX_FRAME_BYTES
    capabilities: tuple[str, ...] = ADVERTISED


async def _connect_unix(path: str) -> anyio.abc.ByteStream:
    """Connect to a Unix socket, cancel-safe.

    anyio's own ``connect_unix`` (on asyncio) waits for a listener with a full backlog on a plain
    future that the event loop may still try to resolve after a cancellation, which raises
    ``InvalidStateError`` out of the loop (seen when a session stopped mid-send). Here the wait
    is ``anyio.wait_writable``, which tolerates cancellation.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        while True:
            try:
                sock.connect(path)
            except BlockingIOError:
                # A Unix stream connect that would block was not started: wait, then try again.
                await anyio.wait_writable(sock)
                continue
            break
    except BaseException:
        sock.close()
        raise
    return await anyio.abc.UNIXSocketStream.from_socket(sock)


@dataclass(slots=True)
class Progress:
    """How far an exchange got; readable by the caller even when the exchange was cancelled."""

    frames_written: int = 0
    message_written: bool = False


class Exchanger:
    """Makes exchanges with peers of one agent dir (whose locations decide the socket paths)."""

    def __init__(
        self,
        locations: Locations,
        vetting: EndpointVetting,
        *,
        config: ExchangeConfig | None = None,
        connect: Connector = _connect_unix,
        new_request_id: Callable[[], str] | None = None,
    ) -> None:
        self._locations = locations
        self._vetting = vetting
        self._vet_runner = Offload(vetting, locations.runtime_dir)
        self._config = config or ExchangeConfig()
        self._connect = connect
        self._new_request_id = new_request_id or _uuid4

    # -- public API ------------------------------------------------------------------------------

    async def probe(self, peer: Registration) -> Receipt:
        """Prove ``peer`` is alive: a hello without ``from``, nothing after ``ready``."""
        hello = self._hello(peer, sender=None)
        return await self._exchange(peer, hello, None, self._config.probe_deadline_s, Progress())

    @property
    def listing_guard_s(self) -> float:
        """How long a listing waits for one of this exchanger's probes: its own deadline plus a
        margin, so a listing never gives up on a probe that is still within its deadline."""
        return self._config.probe_deadline_s + PROBE_GUARD_MARGIN_S

    async def is_live(self, peer: Registration) -> bool:
        """True when a probe ends in ``ready`` from this very peer; any failure is False, except
        that this process running out of descriptors (or buffers, or memory) is raised: it says
        nothing about the peer, so a listing must not take the peer for dead."""
        try:
            await self.probe(peer)
        except ExchangeError as exc:
            if shortage(exc) is not None:
                raise
            return False
        return True

    async def send(
        self,
        peer: Registration,
        *,
        sender: Sender,
        message: Message,
        progress: Progress | None = None,
    ) -> Receipt:
        """Deliver one message; the receipt's status is ``submitted``, ``queued`` or
        ``accepted``. Raises :class:`ExchangeError` for every other ending.

        Pass ``progress`` to learn how far the exchange got if the caller cancels it.
        """
        hello = self._hello(peer, sender=sender)
        return await self._exchange(
            peer, hello, message, self._config.send_deadline_s, progress or Progress()
        )

    async def query_status(self, peer: Registration, *, sender: Sender, message_id: str) -> Receipt:
        """Ask ``peer`` for the state of a message this sender sent it; free for the receiver.

        The receipt's status is the message's row state, or ``unknown`` when the receiver has no
        row (which does not mean "not delivered": a restart forgets everything).
        """
        hello = self._hello(peer, sender=sender)
        query = StatusQuery(
            v=WIRE_VERSION, type="status", request_id=self._new_request_id(), message_id=message_id
        )
        return await self._exchange(peer, hello, query, self._config.send_deadline_s, Progress())

    # -- the exchange ----------------------------------------------------------------------------

    def _hello(self, peer: Registration, *, sender: Sender | None) -> Hello:
        fields: dict[str, object] = {
            "v": WIRE_VERSION,
            "type": "hello",
            "capabilities": list(self._config.capabilities),
            "request_id": self._new_request_id(),
            "token": peer.token,
            "target": {"id": peer.id, "instanceId": peer.instance_id},
        }
        if sender is not None:
            fields["sender"] = sender
        try:
            return Hello.model_validate(fields)
        except ValidationError as exc:
            # Only a registration built around validation can get here; never connect to it.
            raise ExchangeError(Code.UNSAFE_ENDPOINT, "the peer cannot be addressed") from exc

    async def _exchange(
        self,
        peer: Registration,
        hello: Hello,
        second: Message | StatusQuery | None,
        deadline_s: float,
        progress: Progress,
    ) -> Receipt:
        # Both frames are encoded before anything else happens: an oversized message fails here,
        # locally, with no connection made.
        try:
            hello_bytes = encode_frame(
                dumps_frame(hello), max_frame_bytes=self._config.max_frame_bytes
            )
            second_bytes = (
                b""
                if second is None
                else encode_frame(dumps_frame(second), max_frame_bytes=self._config.max_frame_bytes)
            )
        except FrameTooLargeError as exc:
            raise ExchangeError(Code.MESSAGE_TOO_LARGE, str(exc)) from exc
        with anyio.move_on_after(deadline_s) as deadline:
            return await self._run(peer, hello, second, hello_bytes, second_bytes, progress)
        assert deadline.cancelled_caught
        raise _failure(progress, Code.TIMEOUT, f"no complete answer within {deadline_s:g} s")

    async def _run(
        self,
        peer: Registration,
        hello: Hello,
        second: Message | StatusQuery | None,
        hello_bytes: bytes,
        second_bytes: bytes,
        progress: Progress,
    ) -> Receipt:
        path = await self._vet(peer)
        try:
            stream = await self._connect(path)
        except OSError as exc:
            raise ExchangeError(Code.TRANSPORT_ERROR, _describe_os_error(exc)) from exc
        try:
            return await self._converse(
                stream, peer, hello, second, hello_bytes, second_bytes, progress
            )
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            detail = _describe_os_error(exc) if isinstance(exc, OSError) else "the connection broke"
            raise _failure(progress, Code.TRANSPORT_ERROR, detail) from exc
        finally:
            # Done either way: close at once, without waiting for the receiver's half-close.
            await anyio.aclose_forcefully(stream)

    async def _vet(self, peer: Registration) -> str:
        try:
            expected = self._locations.socket_path(peer.instance_id)
        except ValueError as exc:
            raise ExchangeError(
                Code.UNSAFE_ENDPOINT, "the peer's instance id is malformed"
            ) from exc
        if peer.socket_path != expected:
            raise ExchangeError(
                Code.UNSAFE_ENDPOINT,
                "the registered socket path is not the one this agent dir uses",
            )
        # In a worker thread so a stalled filesystem cannot block the loop (abandoned, not waited
        # for, when the deadline passes, and then its late answer is never acted upon) — unless
        # the runtime dir is known to be on a local filesystem (see protocol.offload).
        refusal = await self._vet_runner.run(self._vetting.vet_socket, expected)
        if refusal is not None:
            raise ExchangeError(refusal, "the peer's socket failed the safety check")
        return expected

    async def _converse(
        self,
        stream: anyio.abc.ByteStream,
        peer: Registration,
        hello: Hello,
        second: Message | StatusQuery | None,
        hello_bytes: bytes,
        second_bytes: bytes,
        progress: Progress,
    ) -> Receipt:
        def fail(code: str, detail: str) -> ExchangeError:
            return _failure(progress, code, detail)

        await stream.send(hello_bytes)
        progress.frames_written = 1
        decoder = FrameDecoder(max_frame_bytes=self._config.max_frame_bytes)
        ready: Response | None = None
        while True:
            try:
                data = await stream.receive(READ_CHUNK_BYTES)
            except anyio.EndOfStream:
                data = b""
            decoder.receive_data(data)
            *frames, last = decoder.events()
            for frame in frames:
                assert isinstance(frame, Frame)
                # At most two replies are ever read: the first ends in a failure or leads to the
                # second frame, the second settles the exchange either way.
                reply = _parse_reply(frame, fail)
                expected_id = hello.request_id if ready is None else _request_id(second)
                if reply.request_id != expected_id:
                    raise fail(Code.INVALID_RECEIPT, "a reply for another request (or for none)")
                if not reply.ok:
                    raise _failure(progress, reply.status, "the receiver refused", reply.error)
                if ready is None:
                    ready = self._check_ready(reply, peer, second, fail)
                    if second is None:
                        return Receipt(ready=ready, reply=None, frames_written=1)
                    await stream.send(second_bytes)
                    progress.frames_written = 2
                    progress.message_written = isinstance(second, Message)
                    continue
                self._check_receipt(reply, peer, second, fail)
                return Receipt(ready=ready, reply=reply, frames_written=2)
            if isinstance(last, Fault):
                raise fail(Code.INVALID_RESPONSE, f"the reply is not a frame: {last.detail}")
            if isinstance(last, ConnectionClosed):
                raise fail(Code.CONNECTION_CLOSED, "the receiver closed before answering")
            assert last is NEED_DATA

    @staticmethod
    def _check_ready(
        reply: Response,
        peer: Registration,
        second: Message | StatusQuery | None,
        fail: Callable[[str, str], ExchangeError],
    ) -> Response:
        if reply.status != Code.READY or not _same_peer(reply, peer):
            raise fail(Code.WRONG_ENDPOINT, "the socket did not answer as the registered session")
        if second is None:
            return reply
        if not can_queue(reply.capabilities):
            raise fail(
                Code.UNSUPPORTED,
                "the receiver lacks cancel-safe-queue-v1; nothing was sent (upgrade it)",
            )
        scoped = isinstance(second, Message) and second.goal_id is not None
        if scoped and not can_scope_to_goal(reply.capabilities):
            raise fail(
                Code.UNSUPPORTED,
                "the receiver cannot scope messages to a goal; nothing was sent",
            )
        return reply

    @staticmethod
    def _check_receipt(
        reply: Response,
        peer: Registration,
        second: Message | StatusQuery | None,
        fail: Callable[[str, str], ExchangeError],
    ) -> None:
        if not _same_peer(reply, peer):
            raise fail(Code.INVALID_RECEIPT, "the receipt names another session")
        if isinstance(second, Message) and reply.status not in OK_RECEIPTS:
            raise fail(Code.INVALID_RECEIPT, f"{reply.status!r} is not a delivery receipt")


def _failure(
    progress: Progress, code: str, detail: str, remote_error: str | None = None
) -> ExchangeError:
    return ExchangeError(
        code,
        detail,
        remote_error=remote_error,
        message_written=progress.message_written,
        frames_written=progress.frames_written,
    )


def _request_id(frame: Message | StatusQuery | None) -> str | None:
    return None if frame is None else frame.request_id


def _same_peer(reply: Response, peer: Registration) -> bool:
    identity = reply.peer_identity()
    return (
        identity is not None and identity.id == peer.id and identity.instance_id == peer.instance_id
    )


def _parse_reply(frame: Frame, fail: Callable[[str, str], ExchangeError]) -> Response:
    try:
        return parse_response(loads_frame(frame.text))
    except (FrameError, FrameValidationError) as exc:
        raise fail(Code.INVALID_RESPONSE, f"the reply is not a valid response: {exc}") from exc


def _uuid4() -> str:
    return str(uuid.uuid4())


def _describe_os_error(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0)
    return f"{name}: {exc.strerror}" if name else str(exc) or type(exc).__name__
