"""The four frames of wire v1 as frozen pydantic models, validated exactly as the contract says.

* :class:`Hello` — the client's first frame: whom it wants (``target``), optionally who it is
  (``from``, which makes the connection authenticated), and what it understands (``capabilities``).
* :class:`Message` — one plain-text message (second frame).
* :class:`StatusQuery` — "what became of my message ``messageId``?" (second frame, instead).
* :class:`Response` — every reply of a receiver, ``ready`` included.

Validation follows the JavaScript reference's rules, which are stricter than Python's defaults in
ways that matter for interoperability and security:

* lengths are counted in the contract's units (UTF-16 code units, code points, see
  :mod:`~pi_cross_session._internal.protocol.text`);
* a number is exactly an integer where one is required: ``true`` is not ``1`` and ``1.0`` is
  refused, even though Python's ``Literal[1]`` would take both;
* an optional field may be absent but never ``null`` (``from: null`` is not "no sender");
* texts must be well-formed Unicode, so a ``\\ud800`` escape that :mod:`json` turns into a lone
  surrogate is refused here;
* unknown extra fields are ignored, which is how newer peers add fields without breaking older ones.

Serialisation writes keys in the order the reference emits them and compact JSON (see
:mod:`~pi_cross_session._internal.protocol.jsonwire`), so our frames are byte-identical to the
reference's for the same content. A frame's fields are declared in that order, under their wire
names as aliases, and :meth:`_Frame.to_wire` reads the shape from those declarations alone.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Final, Literal, TypeAlias, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from pi_cross_session._internal.protocol import jsonwire
from pi_cross_session._internal.protocol.capabilities import ADVERTISED
from pi_cross_session._internal.protocol.codec import encode_frame
from pi_cross_session._internal.protocol.codes import Code, is_retryable, wire_next
from pi_cross_session._internal.protocol.errors import (
    FrameError,
    FrameTooLargeError,
    FrameValidationError,
)
from pi_cross_session._internal.protocol.limits import (
    MAX_CAPABILITIES,
    MAX_CAPABILITY_UNITS,
    MAX_ERROR_UNITS,
    MAX_FRAME_BYTES,
    MAX_FRAME_TEMPLATES,
    MAX_KNOWN_FRAME_CHARS,
    MAX_KNOWN_HELLOS,
    MAX_NEXT_UNITS,
    MAX_SAFE_INTEGER,
    MAX_SESSION_ID_UNITS,
    MAX_STATUS_UNITS,
    MAX_SUMMARY_CODE_POINTS,
    MAX_TEXT_UNITS,
)
from pi_cross_session._internal.protocol.paths import INSTANCE_ID_RE as INSTANCE_ID_RE
from pi_cross_session._internal.protocol.text import ID_RE as ID_RE
from pi_cross_session._internal.protocol.text import (
    is_blank,
    require_well_formed,
    utf16_length,
)

#: The wire version every frame carries in ``v``.
WIRE_VERSION: Final = 1
#: The ``requestId`` a receiver uses when it cannot trust the frame it is answering.
UNKNOWN_REQUEST_ID: Final = "unknown"

TOKEN_RE: Final = re.compile(r"[0-9a-f]{64}")


# -- field validators ------------------------------------------------------------------------------


def _exact_int(expected: int) -> Callable[[object], int]:
    def check(value: object) -> int:
        if type(value) is not int or value != expected:
            raise ValueError(f"must be the integer {expected}")
        return value

    return check


def _safe_integer(value: object) -> int:
    # JS Number.isSafeInteger: an integer, no bool, within +-(2**53 - 1). Floats are refused even
    # with a zero fraction: we promise to send integers, and we expect the same of peers.
    if type(value) is not int or not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
        raise ValueError("must be a safe integer (an integer no larger than 2**53 - 1)")
    return value


def _matching(pattern: re.Pattern[str], what: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if pattern.fullmatch(value) is None:
            raise ValueError(f"must be {what}")
        return value

    return check


def _units_between(low: int, high: int) -> Callable[[str], str]:
    def check(value: str) -> str:
        if not low <= utf16_length(value) <= high:
            raise ValueError(f"must be {low} to {high} UTF-16 code units long")
        return value

    return check


def _summary(value: str) -> str:
    if is_blank(value):
        raise ValueError("must not be blank")
    if len(value) > MAX_SUMMARY_CODE_POINTS:
        raise ValueError(f"must be at most {MAX_SUMMARY_CODE_POINTS} code points")
    return value


def _capability_list(value: list[str]) -> tuple[str, ...]:
    if len(value) > MAX_CAPABILITIES:
        raise ValueError(f"must list at most {MAX_CAPABILITIES} capabilities")
    for item in value:
        if utf16_length(item) > MAX_CAPABILITY_UNITS:
            raise ValueError(f"each capability must be at most {MAX_CAPABILITY_UNITS} units")
    return tuple(value)


WireId: TypeAlias = Annotated[str, AfterValidator(_matching(ID_RE, "1-128 of [A-Za-z0-9_-]"))]
InstanceId: TypeAlias = Annotated[
    str, AfterValidator(_matching(INSTANCE_ID_RE, "32 lowercase hex"))
]
SessionId: TypeAlias = Annotated[str, AfterValidator(_units_between(1, MAX_SESSION_ID_UNITS))]
SafeInt: TypeAlias = Annotated[int, BeforeValidator(_safe_integer)]
V1: TypeAlias = Annotated[int, BeforeValidator(_exact_int(WIRE_VERSION))]
Capabilities: TypeAlias = Annotated[list[str], AfterValidator(_capability_list)]
MessageText: TypeAlias = Annotated[
    str, AfterValidator(require_well_formed), AfterValidator(_units_between(0, MAX_TEXT_UNITS))
]
Summary: TypeAlias = Annotated[str, AfterValidator(require_well_formed), AfterValidator(_summary)]


StatusWord: TypeAlias = Annotated[
    str, AfterValidator(require_well_formed), AfterValidator(_units_between(0, MAX_STATUS_UNITS))
]
NextText: TypeAlias = Annotated[
    str, AfterValidator(require_well_formed), AfterValidator(_units_between(0, MAX_NEXT_UNITS))
]
ErrorText: TypeAlias = Annotated[
    str, AfterValidator(require_well_formed), AfterValidator(_units_between(0, MAX_ERROR_UNITS))
]


class _Frame(BaseModel):
    """Shared configuration: immutable, strict types, extra fields ignored, aliases on the wire.

    A frame's fields are declared in the order the reference writes them, so the declarations
    alone say what a frame looks like on the wire (:meth:`to_wire`)."""

    model_config = ConfigDict(frozen=True, strict=True, extra="ignore", populate_by_name=True)

    #: Wire names of optional fields that may be absent but never ``null``.
    NO_NULL: ClassVar[tuple[str, ...]] = ()
    #: Each field's attribute and wire name, in declaration order: taken from ``model_fields``
    #: once per class, so that writing a frame does not ask pydantic about its fields each time.
    _WIRE_NAMES: ClassVar[tuple[tuple[str, str], ...]] = ()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls._WIRE_NAMES = tuple(
            (name, name if field.alias is None else field.alias)
            for name, field in cls.model_fields.items()
        )

    @model_validator(mode="before")
    @classmethod
    def _refuse_null_optionals(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            for key in cls.NO_NULL:
                if key in data and data[key] is None:
                    raise ValueError(f"{key} must be absent or a value, never null")
        return data

    def to_wire(self) -> dict[str, Any]:
        """The frame as the JSON object it is on the wire: its fields in declaration order, under
        their aliases, with those that are ``None`` left out (the wire has them absent, not null).

        Not ``model_dump(by_alias=True, exclude_none=True)``, which gives the same keys: it took up
        to three times as long (timeit) and warns of capabilities kept as a tuple, and a sender
        writes a message this way on every send."""
        values = self.__dict__  # where pydantic keeps a model's field values
        body: dict[str, Any] = {}
        for name, key in self._WIRE_NAMES:
            value = values[name]
            kind = type(value)
            # Exact types first, as most fields are plain; a nested frame is told by its class's
            # MRO because ``isinstance`` against a pydantic model goes through ABC machinery,
            # which cost as much as all the rest of this loop.
            if kind is str or kind is int or kind is bool:
                body[key] = value
            elif value is None:
                continue
            elif kind is tuple:  # capabilities, kept as a tuple for hashing
                body[key] = list(value)
            elif _Frame in kind.__mro__:
                body[key] = value.to_wire()
            else:  # a reply's peer: raw JSON, written as it came
                body[key] = value
        return body


# -- client frames ---------------------------------------------------------------------------------


class Target(_Frame):
    """Whom a hello is for: the receiver's session id and its current incarnation."""

    id: SessionId
    instance_id: InstanceId = Field(alias="instanceId")


class Sender(_Frame):
    """Who a hello claims to be; the receiver checks it against the sender's registration."""

    id: SessionId
    instance_id: InstanceId = Field(alias="instanceId")
    token: str


class Hello(_Frame):
    """First frame of every connection. Without ``from`` the connection can only probe."""

    NO_NULL = ("from", "capabilities")

    v: V1
    type: Literal["hello"]
    # Here, not last: the reference writes a hello's capabilities right after its type.
    capabilities: Capabilities | None = None
    request_id: WireId = Field(alias="requestId")
    # Any string: a malformed token is an authentication failure, decided against the
    # registration, not a malformed frame (the reply then echoes this hello's requestId).
    token: str
    target: Target
    sender: Sender | None = Field(default=None, alias="from")


class Message(_Frame):
    """One plain-text message.

    A blank ``text`` parses here: the receiver refuses it later with its own code.
    """

    NO_NULL = ("goalId",)

    v: V1
    type: Literal["message"]
    request_id: WireId = Field(alias="requestId")
    message_id: WireId = Field(alias="messageId")
    text: MessageText
    summary: Summary
    sent_at: SafeInt = Field(alias="sentAt")
    goal_id: WireId | None = Field(default=None, alias="goalId")

    @property
    def text_is_blank(self) -> bool:
        """Blank after a JS trim; the receiver answers ``invalid_message`` for it."""
        return is_blank(self.text)


class StatusQuery(_Frame):
    """Asks for the state of one message previously sent by the same authenticated sender."""

    v: V1
    type: Literal["status"]
    request_id: WireId = Field(alias="requestId")
    message_id: WireId = Field(alias="messageId")


# -- receiver frames -------------------------------------------------------------------------------


class PeerIdentity(_Frame):
    """The receiver's identity as stated in a response: session id, incarnation, process id."""

    id: str
    instance_id: str = Field(alias="instanceId")
    pid: int


class Response(_Frame):
    """Every reply of a receiver.

    ``peer`` is kept as the raw JSON value: the contract does not make its shape part of "a valid
    response", so a sender judges it separately (a bad ``peer`` is a wrong endpoint or an invalid
    receipt, not an invalid response). Use :meth:`peer_identity` to read it.
    """

    NO_NULL = ("capabilities", "code", "state", "retryable", "next", "error")

    v: V1
    type: Literal["response"]
    request_id: WireId = Field(alias="requestId")
    ok: bool
    status: StatusWord
    capabilities: Capabilities | None = None
    code: StatusWord | None = None
    state: StatusWord | None = None
    retryable: bool | None = None
    next: NextText | None = None
    error: ErrorText | None = None
    peer: Any = None

    def peer_identity(self) -> PeerIdentity | None:
        """The ``peer`` field when it is a well-formed identity, else ``None``."""
        if self.peer is None:
            return None
        try:
            return PeerIdentity.model_validate(self.peer, by_alias=True, by_name=False)
        except ValidationError:
            return None

    def names_peer(self, session_id: str, instance_id: str) -> bool:
        """Whether ``peer`` is a well-formed identity (as :meth:`peer_identity` reads one) of this
        session and incarnation. Every reply a sender reads asks this, so it reads the raw value
        rather than building the identity."""
        peer = self.peer
        return (
            type(peer) is dict
            and peer.get("id") == session_id
            and peer.get("instanceId") == instance_id
            and type(peer.get("pid")) is int
            and type(session_id) is str
            and type(instance_id) is str
        )

    @classmethod
    def build(
        cls,
        *,
        request_id: str,
        ok: bool,
        status: str,
        error: str | None = None,
        peer: PeerIdentity | None = None,
        capabilities: Iterable[str] = ADVERTISED,
    ) -> Response:
        """A reply as a receiver writes it: ``code`` and ``state`` equal ``status``, ``retryable``
        only for load refusals, ``next`` from our guidance texts, ``peer`` only with ``ok``;
        validated in full (an owner that writes the same replies again and again keeps them in
        its :class:`ReplyTemplates`)."""
        status = str(status)
        caps = tuple(capabilities)
        shown_peer = peer if ok else None

        body: dict[str, Any] = {
            "v": WIRE_VERSION,
            "type": "response",
            "request_id": request_id,
            "ok": ok,
            "status": status,
            "capabilities": list(caps),
            "code": status,
            "state": status,
            "retryable": (not ok) and is_retryable(status),
            "next": wire_next(ok=ok, status=status),
        }
        if error is not None:
            body["error"] = error
        if shown_peer is not None:
            body["peer"] = shown_peer.to_wire()

        return cls(**body)


_FrameT = TypeVar("_FrameT", bound=_Frame)
_ParsedT = TypeVar("_ParsedT")
_KeyT = TypeVar("_KeyT")
_ValueT = TypeVar("_ValueT")

ClientFrame: TypeAlias = Hello | Message | StatusQuery
AnyFrame: TypeAlias = Hello | Message | StatusQuery | Response


# -- replies we write again and again ------------------------------------------------------------


class ReplyTemplates:
    """The replies one owner (a session's authenticator, its admission) writes again and again,
    which differ only in their ``requestId``: each validated in full once, then copied with each
    new id after the id alone is checked (the only field that differs; an id that fails the check
    is validated in full, and refused). At most ``bound`` kept, the oldest dropped first.

    Owned, not shared: what one owner kept is never another's (a receiver's replies cost about
    3 µs less each this way: docs/performance.md)."""

    __slots__ = ("_bound", "_kept")

    def __init__(self, bound: int = MAX_FRAME_TEMPLATES) -> None:
        self._bound = bound
        self._kept: dict[tuple[Any, ...], Response] = {}

    def build(
        self,
        *,
        request_id: str,
        ok: bool,
        status: str,
        error: str | None = None,
        peer: PeerIdentity | None = None,
        capabilities: Iterable[str] = ADVERTISED,
    ) -> Response:
        """What :meth:`Response.build` gives for these fields."""
        caps = tuple(capabilities)
        key = (ok, str(status), error, peer if ok else None, caps)
        kept = self._kept.get(key)
        if kept is not None and type(request_id) is str and ID_RE.fullmatch(request_id):
            return _with_request_id(kept, request_id)
        reply = Response.build(
            request_id=request_id,
            ok=ok,
            status=status,
            error=error,
            peer=peer,
            capabilities=caps,
        )
        keep_bounded(self._kept, key, reply, self._bound)
        return reply


def _with_request_id(frame: _FrameT, request_id: str) -> _FrameT:
    """A copy of a validated ``frame`` with another (valid) ``request_id``, nothing else changed
    (pydantic's own copy: the id is the one field that differs, and it was checked)."""
    return frame.model_copy(update={"request_id": request_id})


@dataclass(frozen=True, slots=True)
class Encoded:
    """A frame written out already: its ``requestId``, and its bytes with the LF."""

    request_id: str
    data: bytes


class HelloTemplate:
    """The hellos one sender writes to one peer, which differ only in their ``requestId``:
    validated once, and written as the template's bytes around each new id."""

    __slots__ = ("_head", "_tail")

    def __init__(
        self,
        *,
        token: str,
        target_id: str,
        target_instance_id: str,
        sender: Sender | None,
        capabilities: tuple[str, ...],
    ) -> None:
        """Raises pydantic's ``ValidationError`` when these make no valid hello, and the
        encoder's errors when it could not be written."""
        fields: dict[str, Any] = {
            "v": WIRE_VERSION,
            "type": "hello",
            "capabilities": list(capabilities),
            "request_id": "template",
            "token": token,
            "target": {"id": target_id, "instanceId": target_instance_id},
        }
        if sender is not None:
            fields["sender"] = sender
        wire = Hello(**fields).to_wire()
        keys = list(wire)
        cut = keys.index("requestId")
        before = jsonwire.dumps({key: wire[key] for key in keys[:cut]})
        after = jsonwire.dumps({key: wire[key] for key in keys[cut + 1 :]})
        # An object's text is its members joined by commas inside braces, so the hello is the
        # members before its id, the id, then the members after.
        head = before[:-1] + ',"requestId":'
        tail = "," + after[1:]
        encode_frame(head + '"x"' + tail)  # the encoder's checks, on everything but the id
        self._head = head.encode()
        self._tail = tail.encode() + b"\n"

    def encode(self, request_id: str) -> Encoded:
        """The hello with ``request_id`` (which must be a valid id), as bytes."""
        if type(request_id) is not str or ID_RE.fullmatch(request_id) is None:
            raise ValueError("a requestId is 1-128 of [A-Za-z0-9_-]")
        data = b"".join((self._head, b'"', request_id.encode(), b'"', self._tail))
        return Encoded(request_id, data)


# -- parsing and encoding --------------------------------------------------------------------------


def _validate(model: type[_FrameT], data: object, *, code: str) -> _FrameT:
    try:
        # Wire input is read by wire names only: ``request_id`` or ``sender`` in a frame are not
        # ``requestId`` or ``from`` (the Python names exist for our own code, not for peers).
        return model.model_validate(data, by_alias=True, by_name=False)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "frame"
        raise FrameValidationError(f"{where}: {first['msg']}", code=code) from exc


def parse_hello(data: object) -> Hello:
    """Validate a first frame; anything that is not a hello fails as ``authentication_failed``."""
    return _validate(Hello, data, code=Code.AUTHENTICATION_FAILED)


def parse_request(data: object) -> Message | StatusQuery:
    """Validate a second frame: a message or a status query, else ``invalid_frame``."""
    kind = data.get("type") if isinstance(data, Mapping) else None
    if kind == "message":
        return _validate(Message, data, code=Code.INVALID_FRAME)
    if kind == "status":
        return _validate(StatusQuery, data, code=Code.INVALID_FRAME)
    raise FrameValidationError("expected a message or a status frame", code=Code.INVALID_FRAME)


def parse_response(data: object) -> Response:
    """Validate a receiver's reply; anything else is ``invalid_response`` to the sender."""
    return _validate(Response, data, code=Code.INVALID_RESPONSE)


def loads_frame(text: str) -> Any:
    """Parse a frame's text as JSON (see :mod:`~pi_cross_session._internal.protocol.jsonwire`)."""
    return jsonwire.loads(text)


def dumps_frame(frame: AnyFrame) -> str:
    """Serialise a frame to its compact JSON text, without the LF (the codec adds it)."""
    return jsonwire.dumps(frame.to_wire())


class ReceivedResponse:
    """A receiver's reply as a sender reads it: judged by :class:`Response` (now, or before for a
    reply known by its text), with the fields a sender judges at hand. A reply taken as known
    has its model built only when someone asks for it (:meth:`model`): a listing probes every
    peer every time and reads nothing of a ``ready`` but its id, status, sender and
    capabilities, and building the model would be most of that cost."""

    __slots__ = ("_data", "_model")

    def __init__(self, data: Mapping[str, Any], model: Response | None = None) -> None:
        self._data = data
        self._model = model

    @property
    def request_id(self) -> str:
        return str(self._data["requestId"])

    @property
    def ok(self) -> bool:
        return bool(self._data["ok"])

    @property
    def status(self) -> str:
        return str(self._data["status"])

    @property
    def error(self) -> str | None:
        error = self._data.get("error")
        return None if error is None else str(error)

    @property
    def capabilities(self) -> tuple[str, ...] | None:
        capabilities = self._data.get("capabilities")
        return None if capabilities is None else tuple(capabilities)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ReceivedResponse):
            return NotImplemented
        return self._data == other._data

    __hash__ = None  # type: ignore[assignment]  # equal by content, which may change nothing

    def __repr__(self) -> str:
        return f"ReceivedResponse({self._data!r})"

    def names_peer(self, session_id: str, instance_id: str) -> bool:
        """Whether ``peer`` is a well-formed identity (as :meth:`Response.peer_identity` reads one)
        of this session and incarnation."""
        peer = self._data.get("peer")
        return (
            type(peer) is dict
            and type(peer.get("pid")) is int
            and type(session_id) is str
            and type(instance_id) is str
            and peer.get("id") == session_id
            and peer.get("instanceId") == instance_id
        )

    def model(self) -> Response:
        """The reply as a :class:`Response` (built once; it is valid, that was checked)."""
        if self._model is None:
            self._model = parse_response(self._data)
        return self._model


def response_from_text(
    text: str, request_id: str | None = None, known: KnownReplies | None = None
) -> ReceivedResponse:
    """The sender's way in: a reply's text → JSON → a :class:`ReceivedResponse`, judged by the
    rules of :func:`parse_response` and failing as it does (``invalid_response``).

    ``request_id`` is the id the reply should carry, when the caller knows it; with ``known``
    (its owner's replies judged before), a reply whose text is, but for that id, the text of a
    reply the model judged valid before is that reply with this id: the same characters around a
    valid id give the same JSON and the same verdicts, so it is taken without being parsed or
    judged again (a peer's every ``ready`` differs only in its id)."""
    spot = None if request_id is None or known is None else _id_spot(text)
    around = spot[0] if spot is not None and spot[1] == request_id else None
    if around is not None and known is not None:
        kept = known.get(around)
        if kept is not None:
            return ReceivedResponse({**kept, "requestId": request_id})
    data = jsonwire.loads(text)
    model = parse_response(data)  # raises for anything invalid
    if around is not None and known is not None and model.request_id == request_id:
        known.remember(around, data)
    return ReceivedResponse(data, model)


class KnownReplies:
    """Replies one sender (an exchanger) judged valid, by their text before and after
    ``"requestId":"<id>"``, with their JSON; at most ``bound``, the oldest dropped first (see
    :func:`response_from_text`). Owned, so what one sender learnt is never another's."""

    __slots__ = ("_bound", "_kept")

    def __init__(self, bound: int = MAX_FRAME_TEMPLATES) -> None:
        self._bound = bound
        self._kept: dict[tuple[str, str], dict[str, Any]] = {}

    def __len__(self) -> int:
        return len(self._kept)

    def get(self, around: tuple[str, str]) -> dict[str, Any] | None:
        """The reply known for the text ``around`` an id, if any."""
        return self._kept.get(around)

    def remember(self, around: tuple[str, str], data: dict[str, Any]) -> None:
        """Keep ``data`` for its text around its id, if that spot is its ``requestId``."""
        if _id_spot_holds(around, data):
            keep_bounded(self._kept, around, dict(data), self._bound)


_ID_MEMBER: Final = '"requestId":"'


class ServerMemo:
    """What a receiver (an endpoint, over all its connections) knows from before: the hellos it
    accepted, by the bounds they were judged under and their text before and after
    ``"requestId":"<id>"``, and the bytes of the replies it writes again and again, by everything
    but their id (each table bounded, the oldest dropped first). Owned, so that what one
    endpoint accepted is never taken by another, whose bounds may be tighter."""

    __slots__ = ("_hellos", "_reply_bytes")

    def __init__(self) -> None:
        self._hellos: dict[tuple[Hashable, str, str], Hello] = {}
        self._reply_bytes: dict[tuple[Any, ...], tuple[bytes, bytes]] = {}

    def __len__(self) -> int:
        """Hellos known."""
        return len(self._hellos)

    def reply_bytes(self, reply: Response) -> bytes:
        """What :func:`frame_to_bytes` gives for ``reply``, from the bytes of an earlier reply
        that differed only in its id when there was one."""
        data = _reply_bytes(self._reply_bytes, reply)
        if len(data) > MAX_FRAME_BYTES:
            raise FrameTooLargeError(
                f"the frame would be {len(data)} bytes with its newline; the limit is "
                f"{MAX_FRAME_BYTES}"
            )
        return data

    def known_hello(self, text: str, under: Hashable) -> Hello | None:
        """The receiver's shortcut for a first frame: when ``text`` is, but for its requestId, the
        text of a hello accepted before under the same bounds ``under`` (:meth:`remember_hello`),
        that hello with this id; else ``None``, and the text must be judged and parsed as any other.

        The same characters around a valid id parse to the same hello, and a valid id (1-128 of
        ``[A-Za-z0-9_-]``) needs no escaping, so what a parse would find is known without one; what
        the text would cost to parse was judged under those bounds then. The hello's claim (token,
        target) is still judged on every hello, by the handler."""
        spot = _id_spot(text)
        if spot is None:
            return None
        (head, tail), request_id = spot
        known = self._hellos.get((under, head, tail))
        if known is None:
            return None
        return _with_request_id(known, request_id)

    def remember_hello(self, text: str, hello: Hello, under: Hashable) -> None:
        """``hello``, parsed from ``text`` and judged under the bounds ``under``, was accepted: know
        the same text with another id from now on — if that spot is its ``requestId`` (see
        :func:`_id_spot_holds`) and the text is short enough."""
        spot = _id_spot(text)
        if spot is None or spot[1] != hello.request_id:
            return
        key = (under, *spot[0])
        if key in self._hellos:
            return
        try:
            data = jsonwire.loads(text)
        except FrameError:
            return
        if type(data) is dict and _id_spot_holds(spot[0], data):
            keep_bounded(self._hellos, key, hello, MAX_KNOWN_HELLOS)


def _id_spot(text: str) -> tuple[tuple[str, str], str] | None:
    """The text before and after the one ``"requestId":"<id>"`` in it, and that id (none if the
    member is missing or appears twice, the id is not valid, or the text is too long to keep)."""
    if len(text) > MAX_KNOWN_FRAME_CHARS:
        return None
    at = text.find(_ID_MEMBER)
    if at < 0:
        return None
    start = at + len(_ID_MEMBER)
    end = text.find('"', start)
    request_id = text[start:end]
    if end < 0 or ID_RE.fullmatch(request_id) is None or text.find(_ID_MEMBER, end) >= 0:
        return None
    return (text[:at], text[end + 1 :]), request_id


def _id_spot_holds(around: tuple[str, str], data: dict[str, Any]) -> bool:
    """Whether the spot between ``around``'s two texts *is* the frame's ``requestId``: another id
    written there must change its ``requestId`` and nothing else (the same characters could be a
    nested member, or a key repeated later, which JSON lets win)."""
    head, tail = around
    other_id = "-" if data.get("requestId") == "_" else "_"  # any other valid id
    try:
        other = jsonwire.loads(f'{head}{_ID_MEMBER}{other_id}"{tail}')
    except FrameError:
        return False
    return type(other) is dict and other == {**data, "requestId": other_id}


def keep_bounded(table: dict[_KeyT, _ValueT], key: _KeyT, value: _ValueT, bound: int) -> None:
    """Put ``value`` in a bounded table (every table of frames kept again and again), dropping
    its oldest entry first when it is full."""
    if len(table) >= bound:
        del table[next(iter(table))]
    table[key] = value


def frame_from_text(text: str, parse: Callable[[object], _ParsedT]) -> _ParsedT:
    """The one way in: a frame's text (a decoded line) → JSON → the frame ``parse`` validates
    (:func:`parse_hello`, :func:`parse_request` or :func:`parse_response`).

    Raises :class:`~pi_cross_session._internal.protocol.errors.FrameError` for text that is not JSON
    and
    :class:`~pi_cross_session._internal.protocol.errors.FrameValidationError` for JSON that is not
    that frame, each with the code ``parse`` gives it.
    """
    return parse(jsonwire.loads(text))


def frame_to_bytes(frame: AnyFrame, *, max_frame_bytes: int = MAX_FRAME_BYTES) -> bytes:
    """The one way out: a frame → compact JSON in the reference's key order → UTF-8 and its LF,
    ready to write. Raises :class:`~pi_cross_session._internal.protocol.errors.FrameTooLargeError`
    when the line would exceed ``max_frame_bytes`` (checked before anything is written). A receiver
    writes its replies through its :class:`ServerMemo` instead (:meth:`ServerMemo.reply_bytes`:
    the same bytes, without encoding the same reply again and again)."""
    return encode_frame(jsonwire.dumps(frame.to_wire()), max_frame_bytes=max_frame_bytes)


def _reply_bytes(table: dict[tuple[Any, ...], tuple[bytes, bytes]], reply: Response) -> bytes:
    """A reply's line, from the bytes ``table`` kept of an earlier reply that differed only in
    its id (kept there when it is new)."""
    peer = reply.peer
    request_id = reply.request_id
    if (peer is not None and (type(peer) is not dict or len(peer) > _PLAIN_PEER_KEYS)) or (
        ID_RE.fullmatch(request_id) is None  # a copy made around validation
    ):
        return encode_frame(jsonwire.dumps(reply.to_wire()), max_frame_bytes=MAX_FRAME_BYTES)
    key = (
        reply.ok,
        reply.status,
        reply.capabilities,
        reply.code,
        reply.state,
        reply.retryable,
        reply.next,
        reply.error,
        None if peer is None else tuple(peer.items()),
    )
    try:
        parts = table.get(key)
    except TypeError:  # a peer holding lists or objects: written the plain way
        return encode_frame(jsonwire.dumps(reply.to_wire()), max_frame_bytes=MAX_FRAME_BYTES)
    if parts is None:
        wire = reply.to_wire()
        keys = list(wire)
        cut = keys.index("requestId")
        before = jsonwire.dumps({name: wire[name] for name in keys[:cut]})
        after = jsonwire.dumps({name: wire[name] for name in keys[cut + 1 :]})
        # An object's text is its members joined by commas inside braces: the members before
        # the id, the id, then the members after (the encoder checks all but the id).
        head, tail = before[:-1] + ',"requestId":', "," + after[1:]
        encode_frame(head + '"x"' + tail, max_frame_bytes=MAX_FRAME_BYTES)
        parts = (head.encode(), tail.encode() + b"\n")
        keep_bounded(table, key, parts, MAX_FRAME_TEMPLATES)
    # A valid requestId is 1-128 of [A-Za-z0-9_-]: its JSON is itself in quotes.
    return b"".join((parts[0], b'"', request_id.encode(), b'"', parts[1]))


#: A reply's ``peer`` is taken into the key as it is only when it looks like an identity (at
#: most this many members); anything larger is written the plain way, and not kept.
_PLAIN_PEER_KEYS: Final = 3
