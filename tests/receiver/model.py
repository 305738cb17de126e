"""An executable reading of the wire contract: what a receiver must answer to any byte stream.

The hostile tests compare a live receiver with this model, example by example. It is written from
the wire contract as ``docs/protocol.md`` states it (framing, connection rules, hello, message,
status, the order of admission checks) and from the stricter choices it documents (a float is not an
integer, ``null`` is never "absent", lone surrogates are refused, and a frame whose JSON would need
more strings, containers or separators than any valid frame is refused unparsed, as "not a hello"
or "not a request"). It imports nothing from the package under test, so a bug cannot hide by being
shared: the shape of a frame is measured here with a scan of its own (:func:`shape`), not with the
receiver's string methods.

The model judges a whole stream at once: the contract makes every verdict a property of the
bytes, never of how they were chunked, so the live receiver, fed the same bytes in any chunking,
must agree.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

#: Raw bytes one frame may use, LF and a first-frame BOM included (spec §3.1).
FRAME_CAP: Final = 1_048_576
BOM: Final = b"\xef\xbb\xbf"
UNKNOWN: Final = "unknown"
BRIDGE_PREFIX: Final = "cross-session:bridge:v1\n"
MAX_SAFE_INTEGER: Final = 2**53 - 1
#: Admission windows (spec §5 step 6 and step 11.2), in ms.
MAX_AGE_MS: Final = 30_000
MAX_FUTURE_MS: Final = 5_000
TEXT_DEDUP_MS: Final = 30_000

_ID: Final = re.compile(r"[A-Za-z0-9_-]{1,128}")
_HEX32: Final = re.compile(r"[0-9a-f]{32}")

#: ECMAScript WhiteSpace and LineTerminator, what ``String.prototype.trim`` removes (every Zs
#: character is in the BMP).
JS_WHITESPACE: Final = frozenset(
    "\t\n\v\f\r \u00a0\ufeff\u2028\u2029"
    + "".join(chr(c) for c in range(0x10000) if unicodedata.category(chr(c)) == "Zs")
)


# -- framing (spec §3.1) ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Fault:
    """The stream broke the framing rules here: ``invalid_frame`` or ``message_too_large``."""

    code: str


@dataclass(frozen=True, slots=True)
class Closed:
    """The stream ended (any unterminated tail is dropped without a reply)."""


def _sequence_length(lead: int) -> int:
    if 0xC2 <= lead <= 0xDF:
        return 2
    if 0xE0 <= lead <= 0xEF:
        return 3
    if 0xF0 <= lead <= 0xF4:
        return 4
    return 0


def _tail_completable(tail: bytes) -> bool:
    """True when some continuation bytes turn ``tail`` (one cut sequence) into valid UTF-8."""
    need = _sequence_length(tail[0])
    if not need or len(tail) >= need:
        return False
    seconds = range(0x80, 0xC0) if len(tail) == 1 else (None,)
    for second in seconds:
        head = tail if second is None else tail + bytes([second])
        candidate = head + b"\x80" * (need - len(head))
        try:
            candidate.decode("utf-8")
        except UnicodeDecodeError:
            continue
        return True
    return False


def completable(prefix: bytes) -> bool:
    """True when ``prefix`` is valid UTF-8, or valid UTF-8 cut inside its last character."""
    for cut in range(min(3, len(prefix)) + 1):
        head, tail = prefix[: len(prefix) - cut], prefix[len(prefix) - cut :]
        try:
            head.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if not tail or _tail_completable(tail):
            return True
    return False


def split_frames(data: bytes, cap: int = FRAME_CAP) -> tuple[list[str], Fault | Closed]:
    """The frame texts a reader takes from ``data``, then how the stream ends.

    Only a BOM at the very start of the stream is removed, and it counts against frame 1. A frame
    is judged on its first ``cap`` raw bytes: invalid UTF-8 there (or an empty line) is
    ``invalid_frame``; a frame running past them is ``message_too_large``.
    """
    frames: list[str] = []
    at = len(BOM) if data.startswith(BOM) else 0
    first_extra = at
    while True:
        extra = first_extra if not frames else 0
        lf = data.find(b"\n", at)
        line = data[at:] if lf < 0 else data[at:lf]
        size = len(line) + extra + (0 if lf < 0 else 1)
        if size > cap:
            if not completable(line[: max(0, cap - extra)]):
                return frames, Fault("invalid_frame")
            return frames, Fault("message_too_large")
        if lf < 0:
            if not completable(line):
                return frames, Fault("invalid_frame")
            return frames, Closed()
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            return frames, Fault("invalid_frame")
        if not text:
            return frames, Fault("invalid_frame")
        frames.append(text)
        at = lf + 1


# -- what a frame would cost to parse (docs/protocol.md, "Frames too costly to parse") ------------

#: The most strings, containers (objects and arrays) and separators (commas and colons) a frame
#: may hold outside its strings to be parsed at all.
MAX_STRINGS: Final = 128
MAX_CONTAINERS: Final = 32
MAX_SEPARATORS: Final = 256
#: The characters the scan stops at; everything else is skipped in one step.
_SPECIAL: Final = re.compile(r'[\\"{\[,:]')


def shape(text: str) -> tuple[int, int, int]:
    """``(strings, containers, separators)`` of a text, by one left-to-right scan.

    A run of backslashes pairs up from its left, and the pairs never delimit anything; a run of
    odd length followed by a quote escapes that quote (the two are dropped together), and its
    last backslash is otherwise an ordinary character. Every other quote opens or closes a string
    (an unterminated one runs to the end); outside strings, ``{`` and ``[`` are containers, ``,``
    and ``:`` separators.
    """
    strings = containers = separators = 0
    inside = False
    at = 0
    while (found := _SPECIAL.search(text, at)) is not None:
        at = found.start()
        char = text[at]
        if char == "\\":
            end = at
            while end < len(text) and text[end] == "\\":
                end += 1
            odd = (end - at) % 2 == 1
            at = end + 1 if odd and end < len(text) and text[end] == '"' else end
            continue
        if char == '"':
            if not inside:
                strings += 1
            inside = not inside
        elif not inside:
            if char in "{[":
                containers += 1
            else:
                separators += 1
        at += 1
    return strings, containers, separators


def costly(text: str) -> bool:
    """True when the receiver must refuse ``text`` without parsing it."""
    strings, containers, separators = shape(text)
    return strings > MAX_STRINGS or containers > MAX_CONTAINERS or separators > MAX_SEPARATORS


# -- JSON as the contract reads it -----------------------------------------------------------------


class BadJsonError(Exception):
    """The frame text is not one JSON document."""


def _refuse_constant(name: str) -> Any:
    raise BadJsonError(name)


def _number(digits: str) -> int | float:
    try:
        return int(digits)
    except ValueError:  # too many digits for Python; JS reads a (possibly infinite) double
        return float(digits)


_DECODER: Final = json.JSONDecoder(parse_constant=_refuse_constant, parse_int=_number)


def parse_json(text: str) -> Any:
    """One JSON document; NaN/Infinity and nesting too deep to parse are not JSON."""
    try:
        return _DECODER.decode(text)
    except (ValueError, RecursionError, BadJsonError) as exc:
        raise BadJsonError(str(exc)) from exc


# -- field rules -----------------------------------------------------------------------------------


def units(value: str) -> int:
    """JavaScript string length: UTF-16 code units."""
    return len(value.encode("utf-16-le", "surrogatepass")) // 2


def well_formed(value: str) -> bool:
    """No lone surrogate (U+D800..U+DFFF). Strict UTF-8 refuses exactly those code points, and
    asking it is one C call where a scan in Python costs a second a mebibyte."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def blank(value: str) -> bool:
    return all(char in JS_WHITESPACE for char in value)


def _is_int(value: object) -> bool:
    return type(value) is int


def _wire_id(value: object) -> bool:
    return isinstance(value, str) and _ID.fullmatch(value) is not None


def _hex32(value: object) -> bool:
    return isinstance(value, str) and _HEX32.fullmatch(value) is not None


def _session_id(value: object) -> bool:
    return isinstance(value, str) and 1 <= units(value) <= 512


def _v1(body: Mapping[str, Any], kind: str) -> bool:
    return _is_int(body.get("v")) and body["v"] == 1 and body.get("type") == kind


def _no_null(body: Mapping[str, Any], *keys: str) -> bool:
    return all(body.get(key, 0) is not None for key in keys)


def is_hello(body: object) -> bool:
    """Spec §3.3: the shape of a hello (who is asking is judged separately)."""
    if not isinstance(body, dict) or not _v1(body, "hello"):
        return False
    if not _no_null(body, "from", "capabilities"):
        return False
    target = body.get("target")
    if not (
        _wire_id(body.get("requestId"))
        and isinstance(body.get("token"), str)
        and isinstance(target, dict)
        and _session_id(target.get("id"))
        and _hex32(target.get("instanceId"))
    ):
        return False
    if "from" in body:
        sender = body["from"]
        if not (
            isinstance(sender, dict)
            and _session_id(sender.get("id"))
            and _hex32(sender.get("instanceId"))
            and isinstance(sender.get("token"), str)
        ):
            return False
    if "capabilities" in body:
        caps = body["capabilities"]
        if not isinstance(caps, list) or len(caps) > 8:
            return False
        if not all(isinstance(cap, str) and units(cap) <= 64 for cap in caps):
            return False
    return True


def is_message(body: object) -> bool:
    """Spec §3.5 plus the documented strictness (integers only, no null optionals)."""
    if not isinstance(body, dict) or not _v1(body, "message"):
        return False
    text, summary, sent_at = body.get("text"), body.get("summary"), body.get("sentAt")
    return (
        _wire_id(body.get("requestId"))
        and _wire_id(body.get("messageId"))
        and isinstance(text, str)
        and well_formed(text)
        and units(text) <= 1_000_000
        and isinstance(summary, str)
        and well_formed(summary)
        and not blank(summary)
        and len(summary) <= 200
        and type(sent_at) is int
        and -MAX_SAFE_INTEGER <= sent_at <= MAX_SAFE_INTEGER
        and ("goalId" not in body or _wire_id(body["goalId"]))
    )


def is_status(body: object) -> bool:
    """Spec §3.6."""
    return (
        isinstance(body, dict)
        and _v1(body, "status")
        and _wire_id(body.get("requestId"))
        and _wire_id(body.get("messageId"))
    )


# -- the receiver ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reply:
    """One reply the receiver must write. ``statuses`` holds more than one status only where the
    contract leaves a choice between codes (a bridge envelope)."""

    ok: bool
    statuses: frozenset[str]
    request_id: str

    @classmethod
    def one(cls, ok: bool, status: str, request_id: str = UNKNOWN) -> Reply:
        return cls(ok, frozenset({status}), request_id)


@dataclass(frozen=True, slots=True)
class Identity:
    """A registration as the model knows it: session id, instance id, token."""

    session_id: str
    instance_id: str
    token: str


@dataclass
class ReceiverModel:
    """The receiver's identity, the senders it can authenticate, and what it admitted."""

    me: Identity
    #: Registrations on disk that pass every check of spec §1.5, by instance id.
    senders: dict[str, Identity]
    now_ms: int = 0
    #: (sender instance id, message id) of every admitted message, in order.
    admitted: list[tuple[str, str]] = field(default_factory=list)
    #: The same for messages committed and then refused: a goal id that is not ours.
    refused_commits: list[tuple[str, str]] = field(default_factory=list)
    _ids: set[tuple[str, str]] = field(default_factory=set)
    #: (sender, goal id or "", text) -> when it was last committed (spec §5 step 11.2; the goal
    #: id is part of the key, goal-scoped-v1 §2.3 step 11).
    _texts: dict[tuple[str, str, str], int] = field(default_factory=dict)

    def commit(self, sender: str, message: Mapping[str, Any]) -> None:
        """Record a commit the live receiver made, after it was checked against the model: an
        admission, or (with a ``goalId``) a refusal that still commits."""
        key = (sender, message["messageId"])
        goal = message.get("goalId")
        (self.admitted if goal is None else self.refused_commits).append(key)
        self._ids.add(key)
        self._texts[(sender, goal or "", message["text"])] = self.now_ms

    def judge_hello(self, text: str) -> tuple[Reply, str | None, bool]:
        """The reply to a first frame, the authenticated sender (if any), and whether the
        connection goes on."""
        if costly(text):
            return Reply.one(False, "authentication_failed"), None, False
        try:
            body = parse_json(text)
        except BadJsonError:
            return Reply.one(False, "invalid_frame"), None, False
        if not is_hello(body):
            return Reply.one(False, "authentication_failed"), None, False
        request_id = body["requestId"]
        refused = Reply.one(False, "authentication_failed", request_id)
        target, me = body["target"], self.me
        if (body["token"], target["id"], target["instanceId"]) != (
            me.token,
            me.session_id,
            me.instance_id,
        ):
            return refused, None, False
        ready = Reply.one(True, "ready", request_id)
        if "from" not in body:
            return ready, None, True
        claim = body["from"]
        known = self.senders.get(claim["instanceId"])
        if (
            claim["instanceId"] == me.instance_id
            or known is None
            or (claim["id"], claim["token"]) != (known.session_id, known.token)
        ):
            return refused, None, False
        return ready, claim["instanceId"], True

    def judge_second(self, text: str, sender: str | None) -> tuple[Reply, dict[str, Any] | None]:
        """The reply to the frame after a ``ready``, and the message if it must be committed
        (admitted, or refused ``goal_not_authorized`` after its commit)."""
        if costly(text):
            return Reply.one(False, "invalid_frame"), None
        try:
            body = parse_json(text)
        except BadJsonError:
            return Reply.one(False, "invalid_frame"), None
        kind = body.get("type") if isinstance(body, dict) else None
        if kind == "status" and is_status(body):
            if sender is None:
                return Reply.one(False, "invalid_frame"), None
            # A row exists for an admitted message only (a refused commit makes none).
            known = (sender, body["messageId"]) in self.admitted
            return Reply.one(True, "submitted" if known else "unknown", body["requestId"]), None
        if kind != "message" or not is_message(body):
            return Reply.one(False, "invalid_frame"), None
        request_id = body["requestId"]
        if sender is None:
            return Reply.one(False, "authentication_failed", request_id), None
        if blank(body["text"]):
            return Reply.one(False, "invalid_message", request_id), None
        age = self.now_ms - body["sentAt"]
        if age > MAX_AGE_MS or -age > MAX_FUTURE_MS:
            return Reply.one(False, "expired", request_id), None
        goal = body.get("goalId")
        if body["text"].startswith(BRIDGE_PREFIX):
            # A malformed envelope is invalid_bridge; a well-formed one is ours to refuse, and
            # with a goal id it is invalid_goal (goal-scoped-v1 §2.3 step 10).
            other = "unsupported" if goal is None else "invalid_goal"
            return Reply(False, frozenset({"invalid_bridge", other}), request_id), None
        last = self._texts.get((sender, goal or "", body["text"]))
        if (sender, body["messageId"]) in self._ids or (
            last is not None and self.now_ms - last < TEXT_DEDUP_MS
        ):
            return Reply.one(False, "duplicate", request_id), None
        if goal is not None:
            # No goal is ever active in the fuzzed session: the id and text are committed, then
            # refused, with no budget spent and no row (goal-scoped-v1 §2.3 step 11).
            return Reply.one(False, "goal_not_authorized", request_id), body
        return Reply.one(True, "submitted", request_id), body

    def conversation(self, data: bytes) -> Outcome:
        """Everything the receiver must answer to one connection that sends ``data`` then EOF."""
        frames, end = split_frames(data)
        replies: list[Reply] = []
        events: list[str | Fault | Closed] = [*frames, end]
        first = events[0]
        if isinstance(first, Fault):
            return Outcome([Reply.one(False, first.code)], None, None)
        if isinstance(first, Closed):
            return Outcome([], None, None)
        reply, sender, goes_on = self.judge_hello(first)
        replies.append(reply)
        if not goes_on:
            return Outcome(replies, None, None)
        second = events[1]
        if isinstance(second, Fault):
            replies.append(Reply.one(False, second.code))
            return Outcome(replies, sender, None)
        if isinstance(second, Closed):
            return Outcome(replies, sender, None)
        reply, committed = self.judge_second(second, sender)
        replies.append(reply)
        if committed is not None and not reply.ok:
            return Outcome(replies, sender, None, refused_commit=committed)
        return Outcome(replies, sender, committed)


@dataclass(frozen=True, slots=True)
class Outcome:
    """The replies a connection must get, who it authenticated, the message it must admit, and
    the message it must commit but refuse (a goal id that is not ours)."""

    replies: list[Reply]
    sender: str | None
    admitted: dict[str, Any] | None
    refused_commit: dict[str, Any] | None = None
