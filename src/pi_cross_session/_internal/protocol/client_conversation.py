"""The sending side of one exchange, as a pure state machine (spec §3.7).

Like h11's ``Connection``, it knows nothing of sockets, clocks or event loops: the exchange
(:mod:`~pi_cross_session._internal.protocol.io.exchange`) vets the peer's socket, connects, and then
drives it::

    conversation = ClientConversation(hello, message, peer_id=..., peer_instance_id=...,
                                      started_at=now, deadline_s=5.0)
    # … all of it under one deadline: conversation.deadline
    write(conversation.send_hello())
    while True:
        event = conversation.next_event()
        if event is NEED_DATA:
            conversation.receive_data(await read())           # b"" once the peer has closed
        elif isinstance(event, ReadyReceived):
            write(conversation.send_request())
        elif isinstance(event, Settled):
            return event                                       # ready, and the receipt if any
        else:                                                  # Failed: code, detail
            raise ...

A *probe* has no request: its exchange settles on ``ready``. Both frames are encoded when the
conversation is made (or the hello comes encoded, from a
:class:`~pi_cross_session._internal.protocol.frames.HelloTemplate`), so a frame over the cap fails
before anything is connected
(:class:`~pi_cross_session._internal.protocol.errors.FrameTooLargeError`).

Replies are judged in the contract's order, the first failure deciding:

1. a framing fault, text that is not JSON, or JSON that is not a valid response:
   ``invalid_response``; the peer closing before the exchange settles: ``connection_closed``;
2. a ``requestId`` that is not the current phase's (the hello's, then the request's):
   ``invalid_receipt`` — checked before ``ok``, so a refusal we cannot attribute is never taken
   for a refusal of *our* frame;
3. ``ok:false``: a refusal, whose code is the receiver's ``status`` (the caller reads it against
   the vocabulary, :func:`~pi_cross_session._internal.protocol.codes.sender_code`);
4. for ``ready``: it must be ``ready`` from the peer we meant (``wrong_endpoint``); for a request,
   it must advertise ``cancel-safe-queue-v1``, and for a goal-scoped message also
   ``goal-scoped-peer-v1`` (``unsupported``, and the request is never written);
5. for the receipt: from the same peer, and for a message ``submitted``, ``queued`` or
   ``accepted`` (``invalid_receipt``).

The exchange's one absolute deadline (vetting and connecting included) is a value,
:attr:`ClientConversation.deadline`, that the driver enforces; when it passes, the driver calls
:meth:`~ClientConversation.expire` (``timeout``). The states and transitions are the table
:data:`CLIENT_TRANSITIONS`; a pair not in it is this side breaking the protocol.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Final, TypeAlias

from pi_cross_session._internal.protocol.capabilities import can_queue, can_scope_to_goal
from pi_cross_session._internal.protocol.codec import ConnectionClosed, Fault, Frame, FrameDecoder
from pi_cross_session._internal.protocol.codes import OK_RECEIPTS, Code
from pi_cross_session._internal.protocol.conversation import NEED_DATA, PAUSED, Idle, NeedData
from pi_cross_session._internal.protocol.errors import (
    FrameError,
    FrameTooLargeError,
    FrameValidationError,
    LocalProtocolError,
)
from pi_cross_session._internal.protocol.frames import (
    Encoded,
    Hello,
    KnownReplies,
    Message,
    ReceivedResponse,
    StatusQuery,
    frame_to_bytes,
    response_from_text,
)
from pi_cross_session._internal.protocol.limits import MAX_FRAME_BYTES

__all__ = [
    "CLIENT_TRANSITIONS",
    "NEED_DATA",
    "PAUSED",
    "ClientConversation",
    "ClientEvent",
    "ClientInput",
    "ClientState",
    "Failed",
    "ReadyReceived",
    "Settled",
    "client_transition",
]


class ClientState(StrEnum):
    """Where an exchange is, from the sender's side."""

    #: Nothing written yet (the socket is being vetted or connected).
    START = "start"
    #: The hello is written; ``ready`` is awaited.
    AWAIT_READY = "await_ready"
    #: ``ready`` was good; the driver writes the request.
    READY = "ready"
    #: The request is written; its receipt is awaited.
    AWAIT_RECEIPT = "await_receipt"
    #: Over, with a good ending (a probe's ``ready``, or a receipt).
    SETTLED = "settled"
    #: Over, with any other ending.
    FAILED = "failed"
    #: This side broke the table; nothing more is allowed.
    ERROR = "error"


class ClientInput(StrEnum):
    """What moves a client conversation."""

    SEND_HELLO = "send_hello"
    #: A good ``ready``; a request follows.
    READY = "ready"
    #: A good ``ready`` ending a probe.
    PROBE_READY = "probe_ready"
    SEND_REQUEST = "send_request"
    #: A good receipt.
    RECEIPT = "receipt"
    #: A reply, or the peer's close, that ends the exchange badly.
    FAILURE = "failure"
    #: The driver's clock passed the deadline.
    EXPIRE = "expire"


_S = ClientState
_I = ClientInput

#: Every allowed (state, input) pair and the state it leads to.
CLIENT_TRANSITIONS: Final[Mapping[tuple[ClientState, ClientInput], ClientState]] = MappingProxyType(
    {
        (_S.START, _I.SEND_HELLO): _S.AWAIT_READY,
        (_S.START, _I.EXPIRE): _S.FAILED,
        (_S.AWAIT_READY, _I.READY): _S.READY,
        (_S.AWAIT_READY, _I.PROBE_READY): _S.SETTLED,
        (_S.AWAIT_READY, _I.FAILURE): _S.FAILED,
        (_S.AWAIT_READY, _I.EXPIRE): _S.FAILED,
        (_S.READY, _I.SEND_REQUEST): _S.AWAIT_RECEIPT,
        (_S.READY, _I.EXPIRE): _S.FAILED,
        (_S.AWAIT_RECEIPT, _I.RECEIPT): _S.SETTLED,
        (_S.AWAIT_RECEIPT, _I.FAILURE): _S.FAILED,
        (_S.AWAIT_RECEIPT, _I.EXPIRE): _S.FAILED,
    }
)


def client_transition(state: ClientState, event: ClientInput) -> ClientState:
    """The table as a total function: a pair it does not hold leads to :attr:`ClientState.ERROR`."""
    return CLIENT_TRANSITIONS.get((state, event), ClientState.ERROR)


# -- events --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReadyReceived:
    """A good ``ready`` before a request: the driver writes the request next."""

    ready: ReceivedResponse


@dataclass(frozen=True, slots=True)
class Settled:
    """A good ending: the ``ready``, and the receipt when there was a request."""

    ready: ReceivedResponse
    reply: ReceivedResponse | None


@dataclass(frozen=True, slots=True)
class Failed:
    """Any other ending. ``code`` is a local code, or the receiver's ``status`` for a refusal
    (``remote_error`` is then its ``error`` text, a diagnostic never trusted)."""

    code: str
    detail: str
    remote_error: str | None = None


ClientEvent: TypeAlias = ReadyReceived | Settled | Failed | NeedData | Idle


# -- the conversation ----------------------------------------------------------------------------


class ClientConversation:
    """One exchange with one peer (see the module docstring).

    ``peer_id`` and ``peer_instance_id`` are whom the registration says we are talking to;
    ``started_at`` (the driver's clock) and ``deadline_s`` make the exchange's one deadline.
    """

    __slots__ = (
        "_deadline_s",
        "_decoder",
        "_final",
        "_hello_bytes",
        "_hello_id",
        "_known",
        "_peer",
        "_ready",
        "_request",
        "_request_bytes",
        "_state",
        "deadline",
    )

    def __init__(
        self,
        hello: Hello | Encoded,
        request: Message | StatusQuery | None,
        *,
        peer_id: str,
        peer_instance_id: str,
        started_at: float,
        deadline_s: float,
        max_frame_bytes: int = MAX_FRAME_BYTES,
        known: KnownReplies | None = None,
    ) -> None:
        # Replies its owner judged before (an exchanger's, over all its conversations).
        self._known = known
        # Both frames are encoded first: one over the cap fails here, before any connection.
        if isinstance(hello, Encoded):
            if len(hello.data) > max_frame_bytes:
                raise FrameTooLargeError(
                    f"the hello would be {len(hello.data)} bytes with its newline; the limit is "
                    f"{max_frame_bytes}"
                )
            self._hello_bytes = hello.data
        else:
            self._hello_bytes = frame_to_bytes(hello, max_frame_bytes=max_frame_bytes)
        self._request_bytes = (
            b"" if request is None else frame_to_bytes(request, max_frame_bytes=max_frame_bytes)
        )
        self._hello_id = hello.request_id
        self._request = request
        self._peer = (peer_id, peer_instance_id)
        self._deadline_s = deadline_s
        #: When the exchange fails with ``timeout`` unless it has settled (the driver's clock).
        self.deadline = started_at + deadline_s
        self._decoder = FrameDecoder(max_frame_bytes=max_frame_bytes)
        self._state = ClientState.START
        self._ready: ReceivedResponse | None = None
        self._final: Settled | Failed | None = None

    @property
    def state(self) -> ClientState:
        """Where the exchange is now."""
        return self._state

    @property
    def sends_message(self) -> bool:
        """Whether the request is a message (not a status query, not nothing)."""
        return isinstance(self._request, Message)

    # -- frames out ------------------------------------------------------------------------------

    def send_hello(self) -> bytes:
        """The hello, to write first."""
        self._apply(ClientInput.SEND_HELLO)
        return self._hello_bytes

    def send_request(self) -> bytes:
        """The message or status query, to write once ``ready`` was good."""
        self._apply(ClientInput.SEND_REQUEST)
        return self._request_bytes

    # -- bytes in, events out --------------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        """Bytes from the receiver; ``b""`` once it has closed its side."""
        self._decoder.receive_data(data)

    def next_event(self) -> ClientEvent:
        """The next thing the driver must act on (see :data:`ClientEvent`)."""
        if self._final is not None:
            return self._final
        state = self._state
        if state is not ClientState.AWAIT_READY and state is not ClientState.AWAIT_RECEIPT:
            return PAUSED
        event = self._decoder.next_event()
        if type(event) is Frame:
            return self._judge(event.text)
        if event is NEED_DATA:
            return NEED_DATA
        if type(event) is Fault:
            return self._fail(Code.INVALID_RESPONSE, f"the reply is not a frame: {event.detail}")
        assert type(event) is ConnectionClosed
        return self._fail(Code.CONNECTION_CLOSED, "the receiver closed before answering")

    def expire(self) -> Failed:
        """The driver's clock passed :attr:`deadline` before the exchange settled."""
        self._apply(ClientInput.EXPIRE)
        self._final = Failed(Code.TIMEOUT, f"no complete answer within {self._deadline_s:g} s")
        return self._final

    # -- judging replies -------------------------------------------------------------------------

    def _judge(self, text: str) -> Settled | ReadyReceived | Failed:
        awaiting_ready = self._state is ClientState.AWAIT_READY
        request = self._request
        expected_id = self._hello_id if awaiting_ready or request is None else request.request_id
        try:
            reply = response_from_text(text, expected_id, self._known)
        except (FrameError, FrameValidationError) as exc:
            return self._fail(Code.INVALID_RESPONSE, f"the reply is not a valid response: {exc}")
        if reply.request_id != expected_id:
            return self._fail(Code.INVALID_RECEIPT, "a reply for another request (or for none)")
        if not reply.ok:
            return self._fail(reply.status, "the receiver refused", reply.error)
        if awaiting_ready:
            return self._judge_ready(reply)
        return self._judge_receipt(reply)

    def _judge_ready(self, reply: ReceivedResponse) -> Settled | ReadyReceived | Failed:
        if reply.status != Code.READY or not self._same_peer(reply):
            return self._fail(
                Code.WRONG_ENDPOINT, "the socket did not answer as the registered session"
            )
        request = self._request
        if request is None:
            self._apply(ClientInput.PROBE_READY)
            self._final = Settled(reply, None)
            return self._final
        if not can_queue(reply.capabilities):
            return self._fail(
                Code.UNSUPPORTED,
                "the receiver lacks cancel-safe-queue-v1; nothing was sent (upgrade it)",
            )
        scoped = isinstance(request, Message) and request.goal_id is not None
        if scoped and not can_scope_to_goal(reply.capabilities):
            return self._fail(
                Code.UNSUPPORTED, "the receiver cannot scope messages to a goal; nothing was sent"
            )
        self._apply(ClientInput.READY)
        self._ready = reply
        return ReadyReceived(reply)

    def _judge_receipt(self, reply: ReceivedResponse) -> Settled | Failed:
        if not self._same_peer(reply):
            return self._fail(Code.INVALID_RECEIPT, "the receipt names another session")
        if isinstance(self._request, Message) and reply.status not in OK_RECEIPTS:
            return self._fail(Code.INVALID_RECEIPT, f"{reply.status!r} is not a delivery receipt")
        assert self._ready is not None
        self._apply(ClientInput.RECEIPT)
        self._final = Settled(self._ready, reply)
        return self._final

    def _same_peer(self, reply: ReceivedResponse) -> bool:
        return reply.names_peer(*self._peer)

    # -- inside ----------------------------------------------------------------------------------

    def _fail(self, code: str, detail: str, remote_error: str | None = None) -> Failed:
        self._apply(ClientInput.FAILURE)
        self._final = Failed(code, detail, remote_error)
        return self._final

    def _apply(self, event: ClientInput) -> None:
        before = self._state
        self._state = client_transition(before, event)
        if self._state is ClientState.ERROR:
            raise LocalProtocolError(f"{event.value} is not allowed in {before.value}")
