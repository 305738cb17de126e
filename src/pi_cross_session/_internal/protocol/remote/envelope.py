"""Envelopes between gateways, and the records they publish (docs/remote.md, "What travels").

An envelope is one compact JSON object::

    {"v":1,"kind":"send","account":"pi-xs","origin":"laptop","to":"buildbox",
     "id":"<32 hex nonce>","at":<epoch ms>,"body":{...}}

plus ``re`` (the request's ``id``) on a reply. On NATS it travels after its 64-byte signature (see
:mod:`pi_cross_session._internal.security.remote.identity`); this module only builds and reads the
JSON.

Reading is strict in the way frames are (:mod:`~pi_cross_session._internal.protocol.frames`): JSON
as the reference reads it, exact integers, well-formed strings, every bound of a v1 frame on the
fields that become one (message id, text, summary, ``sentAt``, session ids, capabilities). A body is
read only for its envelope's kind, and only after the signature was checked (the caller's order).
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any, Final, Literal, TypeAlias

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from pi_cross_session._internal.protocol import jsonwire
from pi_cross_session._internal.protocol.errors import CrossSessionError, FrameError
from pi_cross_session._internal.protocol.frames import (
    V1,
    Capabilities,
    InstanceId,
    MessageText,
    SafeInt,
    SessionId,
    StatusWord,
    Summary,
    WireId,
)
from pi_cross_session._internal.protocol.limits import (
    MAX_NAME_CODE_POINTS,
)
from pi_cross_session._internal.protocol.remote.settings import (
    MAX_MACHINE_NAME_CHARS,
    REMOTE_RECORD_CWD_CHARS,
)
from pi_cross_session._internal.protocol.text import require_well_formed

#: A machine name: ``a-z 0-9 -``, starting and ending with a letter or digit.
MACHINE_RE: Final = re.compile(rf"[a-z0-9](?:[a-z0-9-]{{0,{MAX_MACHINE_NAME_CHARS - 2}}}[a-z0-9])?")
#: A NATS account name as we accept it in ``--account`` and in envelopes.
ACCOUNT_RE: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: A nonce: 16 random bytes in lowercase hex.
NONCE_RE: Final = re.compile(r"[0-9a-f]{32}")
#: ``to`` of a published record: meant for every machine that trusts its origin.
EVERYONE: Final = "*"
#: Subjects and the bucket, all under one prefix so a NATS account can grant exactly these.
SUBJECT_PREFIX: Final = "pi-xs.v1"
KV_BUCKET: Final = "pi-xs-peers"
#: The JetStream stream behind the bucket, and the subjects its records travel on.
KV_STREAM: Final = f"KV_{KV_BUCKET}"
RECORD_PREFIX: Final = f"$KV.{KV_BUCKET}"
#: A subject under the inbox space that no machine's inbox can be (machine names never start with
#: ``_``): a gateway publishes to it once to learn whether the deployment enforces permissions.
OPEN_PROBE_SUBJECT: Final = f"{SUBJECT_PREFIX}.in._probe.nobody"
ENVELOPE_VERSION: Final = 1


class EnvelopeError(CrossSessionError):
    """Bytes that are not an envelope (or not the body its kind needs)."""


class Kind(StrEnum):
    """What an envelope asks or says."""

    SEND = "send"
    STATUS = "status"
    REPLY = "reply"
    PEER = "peer"
    #: A signed tombstone: the origin's session is gone (a record kind, like ``peer``).
    GONE = "gone"


#: Kinds that ask the receiving gateway to act, and get exactly one reply.
REQUEST_KINDS: Final = frozenset({Kind.SEND, Kind.STATUS})
#: Kinds the bucket holds: a live session's record, or its tombstone.
RECORD_KINDS: Final = frozenset({Kind.PEER, Kind.GONE})


class Outcome(StrEnum):
    """How a request ended on the receiving machine (``reply`` bodies)."""

    #: The real session gave a good receipt (``status`` is ``submitted``/``queued``/``accepted``).
    RECEIPT = "receipt"
    #: Refused, certainly not admitted (``status`` is the refusal's code).
    REFUSED = "refused"
    #: A status query's answer (``status`` is the row state, or ``unknown``).
    ANSWER = "answer"
    #: Nobody knows whether the real session admitted it (``status`` is the local ending).
    UNKNOWN = "unknown"


def is_machine_name(value: str) -> bool:
    """True for a valid machine name."""
    return MACHINE_RE.fullmatch(value) is not None


def machine_of_name(name: str) -> str | None:
    """The machine a proxy's name ends with (``bob@buildbox``: ``buildbox``), or ``None`` when
    the name ends with no machine name."""
    head, at, machine = name.rpartition("@")
    return machine if at and head and is_machine_name(machine) else None


def _machine(machine: str) -> str:
    if not is_machine_name(machine):
        raise ValueError("not a machine name")
    return machine


def request_subject(to: str, origin: str) -> str:
    """Where ``origin`` sends its requests for ``to``: the subject names both, so a deployment
    that lets ``origin`` publish only on its own ``from.<origin>`` subjects vouches for it."""
    return f"{SUBJECT_PREFIX}.to.{_machine(to)}.from.{_machine(origin)}"


def requests_to(machine: str) -> str:
    """The wildcard subject ``machine``'s gateway serves: requests from every machine."""
    return f"{SUBJECT_PREFIX}.to.{_machine(machine)}.from.*"


def requests_from(origin: str) -> str:
    """The wildcard subject ``origin`` publishes its requests on: to every machine."""
    return f"{SUBJECT_PREFIX}.to.*.from.{_machine(origin)}"


def request_origin(subject: str, me: str) -> str | None:
    """The origin a request subject names, when it is addressed to ``me``; else ``None``."""
    head = f"{SUBJECT_PREFIX}.to.{me}.from."
    if not subject.startswith(head):
        return None
    origin = subject[len(head) :]
    return origin if is_machine_name(origin) else None


#: Requests in the layout before origins moved into the subject: ``pi-xs.v1.to.<machine>``.
def earlier_request_subject(machine: str) -> str:
    """Where a gateway of the earlier layout sends requests for ``machine``."""
    return f"{SUBJECT_PREFIX}.to.{_machine(machine)}"


def inbox_prefix(machine: str) -> str:
    """``machine``'s reply subjects start here; only it may subscribe to them."""
    return f"{SUBJECT_PREFIX}.in.{_machine(machine)}"


def record_key(machine: str, instance_id: str) -> str:
    """The KV key of one published session."""
    if not is_machine_name(machine) or NONCE_RE.fullmatch(instance_id) is None:
        raise ValueError("not a machine name and instance id")
    return f"{machine}.{instance_id}"


def record_subject(machine: str, instance_id: str) -> str:
    """The subject a record of ``machine``'s session ``instance_id`` is put on."""
    return f"{RECORD_PREFIX}.{record_key(machine, instance_id)}"


def records_of(machine: str) -> str:
    """The wildcard subject of every record ``machine`` publishes."""
    return f"{RECORD_PREFIX}.{_machine(machine)}.>"


def parse_record_key(key: str) -> tuple[str, str] | None:
    """``(machine, instance id)`` of a KV key, or ``None`` when it is not one of ours."""
    machine, _, instance_id = key.partition(".")
    if not is_machine_name(machine) or NONCE_RE.fullmatch(instance_id) is None:
        return None
    return machine, instance_id


def parse_record_subject(subject: str) -> tuple[str, str] | None:
    """``(machine, instance id)`` of a record's subject, or ``None`` when it is not one."""
    head = RECORD_PREFIX + "."
    if not subject.startswith(head):
        return None
    return parse_record_key(subject[len(head) :])


# -- models ----------------------------------------------------------------------------------------


def _matching(pattern: re.Pattern[str], what: str) -> AfterValidator:
    def check(value: str) -> str:
        if pattern.fullmatch(value) is None:
            raise ValueError(f"must be {what}")
        return value

    return AfterValidator(check)


def _name(value: str) -> str:
    if not value or len(value) > MAX_NAME_CODE_POINTS:
        raise ValueError(f"must be 1 to {MAX_NAME_CODE_POINTS} code points")
    return value


def _cwd(value: str) -> str:
    if len(value) > REMOTE_RECORD_CWD_CHARS:
        raise ValueError(f"must be at most {REMOTE_RECORD_CWD_CHARS} code points")
    return value


Machine: TypeAlias = Annotated[str, _matching(MACHINE_RE, "a machine name")]
Nonce: TypeAlias = Annotated[str, _matching(NONCE_RE, "32 lowercase hex")]
Account: TypeAlias = Annotated[str, _matching(ACCOUNT_RE, "an account name")]
Name: TypeAlias = Annotated[str, AfterValidator(require_well_formed), AfterValidator(_name)]
Cwd: TypeAlias = Annotated[str, AfterValidator(require_well_formed), AfterValidator(_cwd)]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, strict=True, extra="ignore", populate_by_name=True)


class RemoteSender(_Model):
    """The local sender on the origin machine, as its gateway vouches for it (no token)."""

    id: SessionId
    instance_id: InstanceId = Field(alias="instanceId")
    name: Name
    capabilities: Capabilities

    def to_wire(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "instanceId": self.instance_id,
            "name": self.name,
            "capabilities": list(self.capabilities),
        }


class RemoteMessage(_Model):
    """The message frame's content, as the sender wrote it (``requestId`` is per hop)."""

    message_id: WireId = Field(alias="messageId")
    text: MessageText
    summary: Summary
    sent_at: SafeInt = Field(alias="sentAt")

    def to_wire(self) -> dict[str, Any]:
        return {
            "messageId": self.message_id,
            "text": self.text,
            "summary": self.summary,
            "sentAt": self.sent_at,
        }


class SendBody(_Model):
    """``send``: deliver ``message`` from ``sender`` to the session ``target`` on ``to``."""

    target: InstanceId
    sender: RemoteSender
    message: RemoteMessage

    def to_wire(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "sender": self.sender.to_wire(),
            "message": self.message.to_wire(),
        }


class StatusBody(_Model):
    """``status``: ask ``target`` what became of ``messageId`` that ``sender`` sent it."""

    target: InstanceId
    sender: RemoteSender
    message_id: WireId = Field(alias="messageId")

    def to_wire(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "sender": self.sender.to_wire(),
            "messageId": self.message_id,
        }


class ReplyBody(_Model):
    """``reply``: how the request ended."""

    # Not strict: on the wire the word is a plain string.
    outcome: Outcome = Field(strict=False)
    status: StatusWord

    def to_wire(self) -> dict[str, Any]:
        return {"outcome": self.outcome.value, "status": self.status}


class PeerRecord(_Model):
    """``peer``: one live session of the origin machine, as its KV record publishes it.

    Everything a listing shows, and the capabilities its ``ready`` advertised; never its token,
    socket path or pid. ``seq`` is the origin's record sequence: it grows with every record and
    tombstone a machine signs, so no reader takes one older than what it has seen.
    """

    seq: SafeInt
    id: SessionId
    instance_id: InstanceId = Field(alias="instanceId")
    name: Name
    cwd: Cwd
    status: Literal["idle", "busy"]
    inbound: Literal["accept", "refuse"]
    started_at: SafeInt = Field(alias="startedAt")
    updated_at: SafeInt = Field(alias="updatedAt")
    capabilities: Capabilities

    def to_wire(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "id": self.id,
            "instanceId": self.instance_id,
            "name": self.name,
            "cwd": self.cwd,
            "status": self.status,
            "inbound": self.inbound,
            "startedAt": self.started_at,
            "updatedAt": self.updated_at,
            "capabilities": list(self.capabilities),
        }


class Tombstone(_Model):
    """``gone``: the origin's session ``instanceId`` ended; only its own machine can say so."""

    seq: SafeInt
    instance_id: InstanceId = Field(alias="instanceId")

    def to_wire(self) -> dict[str, Any]:
        return {"seq": self.seq, "instanceId": self.instance_id}


Body: TypeAlias = SendBody | StatusBody | ReplyBody | PeerRecord | Tombstone
_BODY_OF: Final[dict[Kind, type[Body]]] = {
    Kind.SEND: SendBody,
    Kind.STATUS: StatusBody,
    Kind.REPLY: ReplyBody,
    Kind.PEER: PeerRecord,
    Kind.GONE: Tombstone,
}


class Envelope(_Model):
    """The signed unit between gateways; ``body`` stays raw until :meth:`read_body`."""

    v: V1
    kind: Kind = Field(strict=False)
    account: Account
    origin: Machine
    to: str
    id: Nonce
    at: SafeInt
    re: Nonce | None = None
    body: dict[str, Any]

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {
            "v": self.v,
            "kind": self.kind.value,
            "account": self.account,
            "origin": self.origin,
            "to": self.to,
            "id": self.id,
            "at": self.at,
        }
        if self.re is not None:
            wire["re"] = self.re
        wire["body"] = self.body
        return wire

    def read_body(self) -> Body:
        """The body as its kind's model; :class:`EnvelopeError` when it is not one."""
        model = _BODY_OF[self.kind]
        try:
            return model.model_validate(self.body)
        except ValidationError:
            raise EnvelopeError(f"the body is not a {self.kind.value} body") from None


def build(
    *,
    kind: Kind,
    account: str,
    origin: str,
    to: str,
    nonce: str,
    at_ms: int,
    body: Body,
    re: str | None = None,
) -> Envelope:
    """An envelope of ours, checked by the rules every reader applies."""
    if to != EVERYONE and not is_machine_name(to):
        raise ValueError("'to' must be a machine name or '*'")
    fields: dict[str, Any] = {
        "v": ENVELOPE_VERSION,
        "kind": kind,
        "account": account,
        "origin": origin,
        "to": to,
        "id": nonce,
        "at": at_ms,
        "body": body.to_wire(),
    }
    if re is not None:
        fields["re"] = re
    return Envelope.model_validate(fields)


def encode(envelope: Envelope) -> bytes:
    """The envelope's exact bytes (compact JSON, UTF-8): what the signature covers."""
    return jsonwire.dumps(envelope.to_wire()).encode("utf-8")


def loads_object(data: bytes) -> dict[str, Any]:
    """The JSON object in ``data``, before any field is trusted (to find its origin)."""
    try:
        value = jsonwire.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, FrameError):
        raise EnvelopeError("the envelope is not UTF-8 JSON") from None
    if not isinstance(value, dict):
        raise EnvelopeError("the envelope is not a JSON object")
    return value


def from_object(value: dict[str, Any]) -> Envelope:
    """Validate a parsed envelope object; :class:`EnvelopeError` when it breaks a rule."""
    try:
        envelope = Envelope.model_validate(value)
    except ValidationError:
        raise EnvelopeError("the envelope's fields break the rules") from None
    if envelope.to != EVERYONE and not is_machine_name(envelope.to):
        raise EnvelopeError("the envelope's 'to' is not a machine")
    if (envelope.kind is Kind.REPLY) != (envelope.re is not None):
        raise EnvelopeError("'re' belongs to replies, and every reply has one")
    return envelope


def decode(data: bytes) -> Envelope:
    """Read an envelope's bytes (unsigned: the caller checked the signature first)."""
    return from_object(loads_object(data))
