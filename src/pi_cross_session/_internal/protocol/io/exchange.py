"""The sending side of the data plane: one exchange per connection, under one deadline.

An exchange vets the peer's endpoint, connects, says hello, and then either stops (a *probe*),
writes one message, or writes one status query, and reads the receipt. Everything, vetting
included, runs under a single absolute monotonic deadline (5 s for sends and status queries,
350 ms for probes). This module is the driver: it vets and connects itself — the registered
``socketPath`` must be the path we compute for that instance id, and the socket a real socket of
ours with no group/other bits, else ``unsafe_endpoint`` or the errno name and no connection (a
vetting answer that arrives after the deadline never connects) — and then moves bytes for the
pure :class:`~pi_cross_session._internal.protocol.client_conversation.ClientConversation`, which
judges every reply in the contract's order (spec §3.7) and owns the deadline as a value.

Every other ending raises :class:`ExchangeError` with a code that
:func:`~pi_cross_session._internal.protocol.codes.classify` turns into an honest verdict. This
process running out of file descriptors (or buffers, or memory) before the connection exists is
``transport_error`` with nothing written, the errno in the detail and as the error's cause
(:func:`~pi_cross_session._internal.protocol.pressure.shortage` finds it). Nothing is ever
retried here: whether to try again is the caller's decision, and after ``receipt_unknown`` the
right move is a status query, not a resend. The error also says whether the message frame was
written at all, so a caller can tell "certainly not delivered" from "unknown".
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import anyio
import anyio.abc
from pydantic import ValidationError

from pi_cross_session._internal.protocol.capabilities import ADVERTISED
from pi_cross_session._internal.protocol.client_conversation import (
    ClientConversation,
    Failed,
    ReadyReceived,
    Settled,
)
from pi_cross_session._internal.protocol.codes import Classification, Code, classify
from pi_cross_session._internal.protocol.conversation import NEED_DATA
from pi_cross_session._internal.protocol.errors import (
    CrossSessionError,
    FrameTooLargeError,
    LocalProtocolError,
)
from pi_cross_session._internal.protocol.frames import (
    WIRE_VERSION,
    Encoded,
    HelloTemplate,
    KnownReplies,
    Message,
    ReceivedResponse,
    Response,
    Sender,
    StatusQuery,
    keep_bounded,
)
from pi_cross_session._internal.protocol.io import sockets
from pi_cross_session._internal.protocol.io.deadline import deadline_scope
from pi_cross_session._internal.protocol.io.deadline import now as loop_now
from pi_cross_session._internal.protocol.io.offload import Offload
from pi_cross_session._internal.protocol.limits import (
    MAX_FRAME_BYTES,
    MAX_FRAME_TEMPLATES,
    PROBE_DEADLINE_S,
    PROBE_GUARD_MARGIN_S,
    READ_CHUNK_BYTES,
    SEND_DEADLINE_S,
)
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.pressure import shortage
from pi_cross_session._internal.protocol.registration import Registration

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


class Receipt:
    """A good ending: the ``ready`` reply, and the receipt when a second frame was sent."""

    __slots__ = ("_ready", "_reply", "frames_written")

    def __init__(
        self, ready: ReceivedResponse, reply: ReceivedResponse | None, frames_written: int
    ) -> None:
        self._ready = ready
        self._reply = reply
        self.frames_written = frames_written

    @property
    def ready(self) -> Response:
        """The receiver's ``ready``."""
        return self._ready.model()

    @property
    def reply(self) -> Response | None:
        """The receipt (or status answer), when a second frame was sent."""
        return None if self._reply is None else self._reply.model()

    @property
    def status(self) -> str:
        """``ready`` for a probe, the receipt's status (or the message's row state) otherwise."""
        return (self._reply or self._ready).status

    @property
    def peer_capabilities(self) -> tuple[str, ...]:
        """What the receiver advertised in its ``ready``."""
        return self._ready.capabilities or ()

    def __repr__(self) -> str:
        return f"Receipt(status={self.status!r}, frames_written={self.frames_written})"


@dataclass(frozen=True, slots=True)
class ExchangeConfig:
    """Deadlines and bounds of the client side; the defaults are the contract's."""

    send_deadline_s: float = SEND_DEADLINE_S
    probe_deadline_s: float = PROBE_DEADLINE_S
    max_frame_bytes: int = MAX_FRAME_BYTES
    capabilities: tuple[str, ...] = ADVERTISED


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
        connect: Connector = sockets.connect_unix,
        new_request_id: Callable[[], str] | None = None,
    ) -> None:
        self._locations = locations
        self._vetting = vetting
        self._vet_runner = Offload(vetting, locations.runtime_dir)
        self._config = config or ExchangeConfig()
        self._connect = connect
        self._new_request_id = new_request_id or _random_id
        # Hellos by peer and sender (oldest dropped first), see ``_hello``.
        self._hellos: dict[tuple[str, str, str, Sender | None], HelloTemplate] = {}
        #: Replies judged before, so that a peer's every ``ready`` is not parsed again.
        self._known_replies = KnownReplies()

    # -- public API ------------------------------------------------------------------------------

    @property
    def locations(self) -> Locations:
        """The agent dir this exchanger sends from."""
        return self._locations

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

    def _hello(self, peer: Registration, *, sender: Sender | None) -> Encoded:
        """A hello to ``peer``, written out: from a template per peer and sender, since a listing
        says hello to the same peers again and again."""
        key = (peer.token, peer.id, peer.instance_id, sender)
        template = self._hellos.get(key)
        if template is None:
            try:
                template = HelloTemplate(
                    token=peer.token,
                    target_id=peer.id,
                    target_instance_id=peer.instance_id,
                    sender=sender,
                    capabilities=self._config.capabilities,
                )
            except FrameTooLargeError as exc:
                raise ExchangeError(Code.MESSAGE_TOO_LARGE, str(exc)) from exc
            except (ValidationError, LocalProtocolError) as exc:
                # Only a registration built around validation can get here; never connect to it.
                raise ExchangeError(Code.UNSAFE_ENDPOINT, "the peer cannot be addressed") from exc
            keep_bounded(self._hellos, key, template, MAX_FRAME_TEMPLATES)
        return template.encode(self._new_request_id())

    async def _exchange(
        self,
        peer: Registration,
        hello: Encoded,
        second: Message | StatusQuery | None,
        deadline_s: float,
        progress: Progress,
    ) -> Receipt:
        try:
            # Both frames are encoded here: an oversized message fails locally, unconnected.
            conversation = ClientConversation(
                hello,
                second,
                peer_id=peer.id,
                peer_instance_id=peer.instance_id,
                started_at=loop_now(),
                deadline_s=deadline_s,
                max_frame_bytes=self._config.max_frame_bytes,
                known=self._known_replies,
            )
        except FrameTooLargeError as exc:
            raise ExchangeError(Code.MESSAGE_TOO_LARGE, str(exc)) from exc
        # One absolute deadline for everything, vetting included.
        with deadline_scope(conversation.deadline):
            return await self._run(peer, conversation, progress)
        timeout = conversation.expire()
        raise _failure(progress, timeout.code, timeout.detail)

    async def _run(
        self, peer: Registration, conversation: ClientConversation, progress: Progress
    ) -> Receipt:
        path = await self._vet(peer)
        try:
            stream = await self._connect(path)
        except OSError as exc:
            raise ExchangeError(Code.TRANSPORT_ERROR, _describe_os_error(exc)) from exc
        try:
            return await self._converse(stream, conversation, progress)
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            detail = _describe_os_error(exc) if isinstance(exc, OSError) else "the connection broke"
            raise _failure(progress, Code.TRANSPORT_ERROR, detail) from exc
        finally:
            # Done either way: close at once, without waiting for the receiver's half-close.
            if isinstance(stream, sockets.UnixStream):
                stream.close()
            else:
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

    @staticmethod
    async def _converse(
        stream: anyio.abc.ByteStream, conversation: ClientConversation, progress: Progress
    ) -> Receipt:
        """Drive the conversation: write what it says, read when it needs bytes."""
        await stream.send(conversation.send_hello())
        progress.frames_written = 1
        while True:
            event = conversation.next_event()
            if event is NEED_DATA:
                try:
                    data = await stream.receive(READ_CHUNK_BYTES)
                except anyio.EndOfStream:
                    data = b""
                conversation.receive_data(data)
            elif type(event) is ReadyReceived:
                await stream.send(conversation.send_request())
                progress.frames_written = 2
                progress.message_written = conversation.sends_message
            elif type(event) is Settled:
                return Receipt(event.ready, event.reply, progress.frames_written)
            else:
                assert type(event) is Failed
                raise _failure(progress, event.code, event.detail, event.remote_error)


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


def _random_id() -> str:
    """A fresh requestId: 128 random bits in hex (the reference uses a UUID; any 1-128 of
    ``[A-Za-z0-9_-]`` will do, and this is a tenth of the cost)."""
    return os.urandom(16).hex()


def _describe_os_error(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0)
    return f"{name}: {exc.strerror}" if name else str(exc) or type(exc).__name__
