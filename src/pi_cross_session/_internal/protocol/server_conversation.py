"""The receiving side of one connection, as a pure state machine (spec §3.1–3.3).

Like h11's ``Connection``, it knows nothing of sockets, clocks or event loops: bytes go in
(:meth:`ServerConversation.receive_data`, ``b""`` for EOF), events come out
(:meth:`~ServerConversation.next_event`), and every reply leaves as the bytes to write. The endpoint
(:mod:`~pi_cross_session._internal.protocol.io.endpoint`) drives it and asks its handler for each
decision::

    conversation = ServerConversation(opened_at=now)
    while True:
        event = conversation.next_event()
        if event is NEED_DATA:
            conversation.receive_data(await read(), now)      # b"" once the peer has closed
        elif isinstance(event, HelloReceived):
            write(conversation.accept_hello(ready, now))      # or refuse_hello(reply): the end
        elif isinstance(event, RequestReceived):
            write(conversation.answer(reply)); half_close()   # the end
        elif isinstance(event, Rejected):
            write(event.reply)                                # the end
        else:                                                 # PeerClosed: nothing to write
            break

What it decides:

* **One hello, then at most one request** (a message or a status query), handled strictly one at a
  time and in order: while the driver decides about a frame, the next one waits in the decoder
  (:data:`PAUSED`), so a fault that arrives after a message never undoes its admission, and after
  the request's reply anything further is never read.
* **A frame that is not what the state expects gets the fixed reply of the contract**, built from
  its code alone (:func:`fault_reply`), never from the input, and the conversation ends:

  - the framing faults of :class:`~pi_cross_session._internal.protocol.codec.FrameDecoder`, with
  their own
    code (``message_too_large`` or ``invalid_frame``);
  - a first frame that is not JSON: ``invalid_frame``; JSON that is not a hello, or a frame that
    would cost more to parse than any hello can (:mod:`~pi_cross_session._internal.protocol.shape`,
    judged
    *before* parsing): ``authentication_failed``;
  - a second frame that is not a message or a status query, or that is too costly to parse:
    ``invalid_frame``.

* **Deadlines, as values the driver enforces** (:attr:`ServerConversation.deadline`): the
  connection lives ``connection_deadline_s`` from accept, whatever it does; while it waits for its
  request (after ``ready``) it is also cut after ``idle_after_hello_s`` without a byte and
  ``request_deadline_s`` after ``ready`` in all. Before the hello, while the handler judges it and
  while a reply is written, only the connection deadline applies (the contract's rule). When the
  driver's clock passes the deadline it calls :meth:`~ServerConversation.expire`, which says which
  bound cut the connection.

The states and their transitions are the table :data:`SERVER_TRANSITIONS`; a pair that is not in
it is this side breaking the protocol
(:class:`~pi_cross_session._internal.protocol.errors.LocalProtocolError`) and leaves the
conversation in
:attr:`ServerState.ERROR` for good.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Final, TypeAlias

from pi_cross_session._internal.protocol.capabilities import ADVERTISED
from pi_cross_session._internal.protocol.codec import ConnectionClosed, Fault, Frame, FrameDecoder
from pi_cross_session._internal.protocol.codes import Code, refusal_text
from pi_cross_session._internal.protocol.conversation import (
    ENDED,
    NEED_DATA,
    PAUSED,
    Idle,
    NeedData,
)
from pi_cross_session._internal.protocol.errors import (
    FrameError,
    FrameValidationError,
    LocalProtocolError,
)
from pi_cross_session._internal.protocol.frames import (
    UNKNOWN_REQUEST_ID,
    Hello,
    Message,
    Response,
    ServerMemo,
    StatusQuery,
    frame_from_text,
    frame_to_bytes,
    parse_hello,
    parse_request,
)
from pi_cross_session._internal.protocol.limits import (
    CONNECTION_DEADLINE_S,
    IDLE_AFTER_HELLO_S,
    MAX_FRAME_BYTES,
    MAX_KNOWN_FRAME_CHARS,
    REQUEST_DEADLINE_AFTER_READY_S,
)
from pi_cross_session._internal.protocol.shape import RECEIVER_BOUNDS, ShapeBounds, affordable

__all__ = [
    "DEFAULT_BOUNDS",
    "ENDED",
    "NEED_DATA",
    "PAUSED",
    "SERVER_TRANSITIONS",
    "Deadline",
    "Ending",
    "HelloReceived",
    "Idle",
    "PeerClosed",
    "Rejected",
    "RequestReceived",
    "ServerBounds",
    "ServerConversation",
    "ServerEvent",
    "ServerInput",
    "ServerState",
    "fault_reply",
    "server_transition",
]


class ServerState(StrEnum):
    """Where a connection is, from the receiver's side."""

    #: Accepted; its first frame is awaited.
    AWAIT_HELLO = "await_hello"
    #: A hello was handed out; the driver is deciding (authentication) and will send the reply.
    JUDGING_HELLO = "judging_hello"
    #: ``ready`` was sent; a message or status query is awaited.
    AWAIT_REQUEST = "await_request"
    #: The request was handed out; its reply is being decided and written (never shed then).
    ANSWERING = "answering"
    #: Over: nothing more is read or written.
    CLOSED = "closed"
    #: This side broke the table; nothing more is allowed.
    ERROR = "error"


class ServerInput(StrEnum):
    """What moves a server conversation: what arrived, what the driver sends, or the clock."""

    #: A frame that is a hello (affordable and valid).
    HELLO = "hello"
    #: A frame that is a message or a status query (affordable and valid).
    REQUEST = "request"
    #: A frame that is not what the state expects, or a framing fault: the fixed reply goes out.
    BAD_FRAME = "bad_frame"
    #: The peer closed its side.
    EOF = "eof"
    #: The driver accepts the hello: ``ready``, and a request may follow.
    SEND_READY = "send_ready"
    #: The driver refuses the hello: its reply ends the connection.
    SEND_REFUSAL = "send_refusal"
    #: The driver answers the request: its reply ends the connection.
    SEND_ANSWER = "send_answer"
    #: Nobody can say what became of the request (a proxy lost its remote side): the connection
    #: ends without a reply, which a sender files as "receipt unknown".
    CLOSE_UNANSWERED = "close_unanswered"
    #: The driver's clock passed :attr:`ServerConversation.deadline`.
    EXPIRE = "expire"


class Ending(StrEnum):
    """How a conversation ended, for the endpoint's counters."""

    ANSWERED = "answered"
    HELLO_REFUSED = "hello_refused"
    #: A frame broke the rules and got the fixed reply.
    FAULT = "fault"
    PEER_CLOSED = "peer_closed"
    #: Cut by the absolute connection deadline.
    CUT_AT_DEADLINE = "cut_at_deadline"
    #: Cut after ``ready`` for saying nothing for ``idle_after_hello_s``.
    CUT_IDLE = "cut_idle"
    #: Cut after ``ready`` for not completing its request within ``request_deadline_s``.
    CUT_REQUEST = "cut_request"
    #: Closed without a reply to its request (see ``ServerInput.CLOSE_UNANSWERED``).
    UNANSWERED = "unanswered"


_S = ServerState
_I = ServerInput

#: Every allowed (state, input) pair: the next state, and how the conversation ended if it did.
#: An ``EXPIRE`` ending is the bound that was due (see :attr:`ServerConversation.deadline`), so it
#: is ``None`` here.
ServerStep: TypeAlias = tuple[ServerState, Ending | None]
SERVER_TRANSITIONS: Final[Mapping[tuple[ServerState, ServerInput], ServerStep]] = MappingProxyType(
    {
        (_S.AWAIT_HELLO, _I.HELLO): (_S.JUDGING_HELLO, None),
        (_S.AWAIT_HELLO, _I.BAD_FRAME): (_S.CLOSED, Ending.FAULT),
        (_S.AWAIT_HELLO, _I.EOF): (_S.CLOSED, Ending.PEER_CLOSED),
        (_S.AWAIT_HELLO, _I.EXPIRE): (_S.CLOSED, None),
        (_S.JUDGING_HELLO, _I.SEND_READY): (_S.AWAIT_REQUEST, None),
        (_S.JUDGING_HELLO, _I.SEND_REFUSAL): (_S.CLOSED, Ending.HELLO_REFUSED),
        (_S.JUDGING_HELLO, _I.EXPIRE): (_S.CLOSED, None),
        (_S.AWAIT_REQUEST, _I.REQUEST): (_S.ANSWERING, None),
        (_S.AWAIT_REQUEST, _I.BAD_FRAME): (_S.CLOSED, Ending.FAULT),
        (_S.AWAIT_REQUEST, _I.EOF): (_S.CLOSED, Ending.PEER_CLOSED),
        (_S.AWAIT_REQUEST, _I.EXPIRE): (_S.CLOSED, None),
        (_S.ANSWERING, _I.SEND_ANSWER): (_S.CLOSED, Ending.ANSWERED),
        (_S.ANSWERING, _I.CLOSE_UNANSWERED): (_S.CLOSED, Ending.UNANSWERED),
        (_S.ANSWERING, _I.EXPIRE): (_S.CLOSED, None),
    }
)

#: The states in which a frame is read and judged, and how: the parser, the input a good frame
#: is, the code of a frame too costly to parse (it is "not the expected kind"), and whether a
#: frame known from before may be taken without a parse (hellos: see
#: :meth:`~pi_cross_session._internal.protocol.frames.ServerMemo.known_hello`).
_READING: Final[
    Mapping[ServerState, tuple[Callable[[object], object], ServerInput, Code, bool]]
] = {
    _S.AWAIT_HELLO: (parse_hello, _I.HELLO, Code.AUTHENTICATION_FAILED, True),
    _S.AWAIT_REQUEST: (parse_request, _I.REQUEST, Code.INVALID_FRAME, False),
}


def server_transition(state: ServerState, event: ServerInput) -> ServerStep:
    """The table as a total function: a pair it does not hold leads to :attr:`ServerState.ERROR`."""
    return SERVER_TRANSITIONS.get((state, event), (ServerState.ERROR, None))


# -- events --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HelloReceived:
    """A valid first frame: the driver judges it, then ``accept_hello`` or ``refuse_hello``."""

    hello: Hello


@dataclass(frozen=True, slots=True)
class RequestReceived:
    """A valid second frame: the driver answers it with ``answer`` (then half-closes)."""

    request: Message | StatusQuery


@dataclass(frozen=True, slots=True)
class Rejected:
    """A frame that broke the rules. ``reply`` is the fixed reply for ``code`` (built from the code
    alone); the driver writes it and closes. ``costly`` says the frame was refused unparsed."""

    code: Code
    reply: bytes
    costly: bool = False


@dataclass(frozen=True, slots=True)
class PeerClosed:
    """The peer closed before the conversation was done (``partial``: mid-frame); nothing to
    write."""

    partial: bool


ServerEvent: TypeAlias = HelloReceived | RequestReceived | Rejected | PeerClosed | NeedData | Idle


# -- bounds and replies --------------------------------------------------------------------------


def fault_reply(code: Code, capabilities: tuple[str, ...] = ADVERTISED) -> bytes:
    """The fixed reply to a frame that broke the rules: ``requestId:"unknown"``, our text for the
    code, nothing taken from the frame."""
    return frame_to_bytes(
        Response.build(
            request_id=UNKNOWN_REQUEST_ID,
            ok=False,
            status=code,
            error=refusal_text(code),
            capabilities=capabilities,
        )
    )


#: The codes a server conversation can reject a frame with.
_FAULT_CODES: Final = (Code.INVALID_FRAME, Code.MESSAGE_TOO_LARGE, Code.AUTHENTICATION_FAILED)


@dataclass(frozen=True, slots=True)
class ServerBounds:
    """The bounds of every conversation of one endpoint; the defaults are the contract's."""

    max_frame_bytes: int = MAX_FRAME_BYTES
    #: The most strings, containers and separators a frame may hold to be parsed at all.
    shape_bounds: ShapeBounds = RECEIVER_BOUNDS
    connection_deadline_s: float = CONNECTION_DEADLINE_S
    idle_after_hello_s: float = IDLE_AFTER_HELLO_S
    request_deadline_s: float = REQUEST_DEADLINE_AFTER_READY_S
    #: What the fixed replies advertise.
    capabilities: tuple[str, ...] = ADVERTISED
    #: The fixed replies, encoded once per endpoint.
    fault_replies: Mapping[Code, bytes] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        replies = {code: fault_reply(code, self.capabilities) for code in _FAULT_CODES}
        object.__setattr__(self, "fault_replies", MappingProxyType(replies))


DEFAULT_BOUNDS: Final = ServerBounds()


@dataclass(frozen=True, slots=True)
class Deadline:
    """When the connection is cut unless it moves on first, and which bound that is."""

    at: float
    ending: Ending


# -- the conversation ----------------------------------------------------------------------------


class ServerConversation:
    """One inbound connection, from accept to close (see the module docstring).

    ``opened_at`` is when the connection was accepted, on the driver's clock; every ``now`` given
    later is on the same clock.
    """

    __slots__ = (
        "_bounds",
        "_connection_deadline",
        "_deadline",
        "_decoder",
        "_heard_at",
        "_memo",
        "_new_hello",
        "_ready_at",
        "_state",
        "ending",
    )

    def __init__(
        self,
        *,
        opened_at: float,
        bounds: ServerBounds = DEFAULT_BOUNDS,
        memo: ServerMemo | None = None,
    ) -> None:
        self._bounds = bounds
        # What the receiver knows from before, over all its connections (an endpoint's).
        self._memo = ServerMemo() if memo is None else memo
        self._decoder = FrameDecoder(max_frame_bytes=bounds.max_frame_bytes)
        self._state = ServerState.AWAIT_HELLO
        self._connection_deadline = Deadline(
            opened_at + bounds.connection_deadline_s, Ending.CUT_AT_DEADLINE
        )
        self._deadline = self._connection_deadline
        self._ready_at = 0.0
        self._heard_at = 0.0
        # A hello parsed here (not known from before): remembered if the handler accepts it.
        self._new_hello: tuple[str, Hello] | None = None
        #: How the conversation ended, once it has.
        self.ending: Ending | None = None

    @property
    def state(self) -> ServerState:
        """Where the conversation is now."""
        return self._state

    @property
    def deadline(self) -> Deadline:
        """The next cut: when, and by which bound. The driver enforces it."""
        return self._deadline

    # -- bytes in, events out --------------------------------------------------------------------

    def receive_data(self, data: bytes, now: float) -> None:
        """Bytes from the peer, received at ``now``; ``b""`` once it has closed its side."""
        self._decoder.receive_data(data)
        if data:
            self._heard_at = now
            if self._state is ServerState.AWAIT_REQUEST:
                self._deadline = self._waiting_deadline()

    def next_event(self) -> ServerEvent:
        """The next thing the driver must act on (see :data:`ServerEvent`)."""
        state = self._state
        reading = _READING.get(state)
        if reading is None:
            return ENDED if state is ServerState.CLOSED or state is ServerState.ERROR else PAUSED
        event = self._decoder.next_event()
        if type(event) is Frame:
            return self._judge(event.text, *reading)
        if event is NEED_DATA:
            return NEED_DATA
        if type(event) is Fault:
            return self._reject(event.code, costly=False)
        assert type(event) is ConnectionClosed
        self._apply(ServerInput.EOF)
        return PeerClosed(event.partial)

    # -- replies out -----------------------------------------------------------------------------

    def accept_hello(self, reply: Response, now: float) -> bytes:
        """The hello is accepted: ``reply`` (its ``ready``) is written at ``now``, and the request
        deadline and the idle bound start."""
        self._apply(ServerInput.SEND_READY)
        if self._new_hello is not None:
            self._memo.remember_hello(*self._new_hello, self._bounds.shape_bounds)
            self._new_hello = None
        self._ready_at = self._heard_at = now
        self._deadline = self._waiting_deadline()
        return self._memo.reply_bytes(reply)

    def refuse_hello(self, reply: Response) -> bytes:
        """The hello is refused: ``reply`` is the last thing written."""
        self._apply(ServerInput.SEND_REFUSAL)
        self._new_hello = None
        return self._memo.reply_bytes(reply)

    def answer(self, reply: Response) -> bytes:
        """The request's reply, the last thing written (the driver then half-closes)."""
        self._apply(ServerInput.SEND_ANSWER)
        return self._memo.reply_bytes(reply)

    def close_unanswered(self) -> None:
        """Nobody can say what became of the request: the connection ends without a reply (a
        proxy whose remote side was lost; a session always answers)."""
        self._apply(ServerInput.CLOSE_UNANSWERED)

    def expire(self) -> Ending:
        """The driver's clock passed :attr:`deadline`: the conversation is over, cut by it."""
        ending = self._deadline.ending
        self._apply(ServerInput.EXPIRE)
        self.ending = ending
        return ending

    # -- inside ----------------------------------------------------------------------------------

    def _judge(
        self,
        text: str,
        parse: Callable[[object], object],
        good: ServerInput,
        costly_code: Code,
        may_be_known: bool,
    ) -> ServerEvent:
        # A hello whose text, but for its id, is that of a hello accepted before parses to that
        # hello: it was affordable and valid then, and is now.
        known = self._memo.known_hello(text, self._bounds.shape_bounds) if may_be_known else None
        if known is not None:
            self._apply(good)
            return HelloReceived(known)
        # What a frame would cost to parse is judged before it is parsed; a costly frame gets
        # the reply any frame of the wrong kind gets, and nothing is built from it.
        if not affordable(text, self._bounds.shape_bounds):
            return self._reject(costly_code, costly=True)
        try:
            frame = frame_from_text(text, parse)
        except (FrameError, FrameValidationError) as exc:
            return self._reject(Code(exc.code), costly=False)
        self._apply(good)
        if isinstance(frame, Hello):
            if may_be_known and len(text) <= MAX_KNOWN_FRAME_CHARS:
                self._new_hello = (text, frame)
            return HelloReceived(frame)
        assert isinstance(frame, (Message, StatusQuery))
        return RequestReceived(frame)

    def _reject(self, code: Code, *, costly: bool) -> Rejected:
        self._apply(ServerInput.BAD_FRAME)
        return Rejected(code, self._bounds.fault_replies[code], costly)

    def _apply(self, event: ServerInput) -> None:
        before = self._state
        state, ending = server_transition(before, event)
        self._state = state
        if state is ServerState.ERROR:
            raise LocalProtocolError(f"{event.value} is not allowed in {before.value}")
        if ending is not None:
            self.ending = ending
        if state is not ServerState.AWAIT_REQUEST:
            self._deadline = self._connection_deadline

    def _waiting_deadline(self) -> Deadline:
        """While the request is awaited: the earliest of the three bounds (on a tie, the
        connection deadline, then the idle bound)."""
        bounds = self._bounds
        cut = self._connection_deadline
        idle_at = self._heard_at + bounds.idle_after_hello_s
        request_at = self._ready_at + bounds.request_deadline_s
        if idle_at <= request_at:
            if idle_at < cut.at:
                cut = Deadline(idle_at, Ending.CUT_IDLE)
        elif request_at < cut.at:
            cut = Deadline(request_at, Ending.CUT_REQUEST)
        return cut
