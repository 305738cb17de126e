"""The remote plane's envelopes and names (protocol/remote/envelope.py): built, read, refused."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from pydantic import ValidationError

from pi_cross_session._internal.protocol.limits import (
    MAX_CAPABILITIES,
    MAX_CAPABILITY_UNITS,
    MAX_NAME_CODE_POINTS,
    MAX_SAFE_INTEGER,
    MAX_SESSION_ID_UNITS,
)
from pi_cross_session._internal.protocol.remote import envelope as env
from pi_cross_session._internal.protocol.remote.envelope import (
    EVERYONE,
    EnvelopeError,
    Kind,
    Outcome,
    PeerRecord,
    RemoteMessage,
    RemoteSender,
    ReplyBody,
    SendBody,
    Tombstone,
)
from pi_cross_session._internal.protocol.remote.settings import (
    MAX_MACHINE_NAME_CHARS,
    MAX_RECORD_BYTES,
    REMOTE_RECORD_CWD_CHARS,
)
from pi_cross_session._internal.security.remote.identity import SIGNATURE_BYTES
from tests.support.nats_subjects import subject_matches

NONCE = "0" * 31 + "1"
IID = "a" * 32


def sender() -> RemoteSender:
    return RemoteSender(
        id="s-1", instance_id=IID, name="alice", capabilities=["cancel-safe-queue-v1"]
    )


def send_body(text: str = "hello") -> SendBody:
    message = RemoteMessage(message_id="m-1", text=text, summary="hello", sent_at=1_700_000_000_000)
    return SendBody(target="b" * 32, sender=sender(), message=message)


def build_send(**overrides: object) -> env.Envelope:
    fields: dict[str, object] = {
        "kind": Kind.SEND,
        "account": "pi-xs",
        "origin": "laptop",
        "to": "buildbox",
        "nonce": NONCE,
        "at_ms": 1_700_000_000_000,
        "body": send_body(),
    }
    fields.update(overrides)
    return env.build(**fields)  # type: ignore[arg-type]


def test_an_envelope_survives_its_bytes() -> None:
    sent = build_send()
    data = env.encode(sent)
    assert data.startswith(b'{"v":1,"kind":"send","account":"pi-xs","origin":"laptop"')
    back = env.decode(data)
    assert back == sent
    body = back.read_body()
    assert isinstance(body, SendBody)
    assert body.message.text == "hello"
    assert body.sender.capabilities == ("cancel-safe-queue-v1",)


def test_a_reply_carries_the_request_nonce_and_nothing_else_does() -> None:
    reply = env.build(
        kind=Kind.REPLY,
        account="pi-xs",
        origin="buildbox",
        to="laptop",
        nonce="c" * 32,
        at_ms=1,
        body=ReplyBody(outcome=Outcome.RECEIPT, status="submitted"),
        re=NONCE,
    )
    assert env.decode(env.encode(reply)).re == NONCE
    raw = json.loads(env.encode(reply))
    del raw["re"]
    with pytest.raises(EnvelopeError):
        env.decode(json.dumps(raw).encode())
    raw = json.loads(env.encode(build_send()))
    raw["re"] = NONCE
    with pytest.raises(EnvelopeError):
        env.decode(json.dumps(raw).encode())


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("v", 2),
        ("v", 1.0),
        ("kind", "deliver"),
        ("origin", "Laptop"),
        ("origin", "-laptop"),
        ("origin", "a" * 33),
        ("to", "two words"),
        ("id", "A" * 32),
        ("at", 1.5),
        ("at", 2**53),
        ("account", ""),
        ("body", []),
    ],
)
def test_a_field_out_of_its_rules_is_refused(field: str, value: object) -> None:
    raw = json.loads(env.encode(build_send()))
    raw[field] = value
    with pytest.raises(EnvelopeError):
        env.decode(json.dumps(raw).encode())


@pytest.mark.parametrize("data", [b"", b"[]", b"\xff", b'{"v":NaN}', b"1"])
def test_bytes_that_are_no_object_are_refused(data: bytes) -> None:
    with pytest.raises(EnvelopeError):
        env.decode(data)


def test_a_body_is_read_for_its_kind_with_frame_rules() -> None:
    raw = json.loads(env.encode(build_send()))
    raw["body"]["message"]["sentAt"] = 1.0
    with pytest.raises(EnvelopeError):
        env.decode(json.dumps(raw).encode()).read_body()
    raw = json.loads(env.encode(build_send()))
    raw["body"]["message"]["text"] = "\ud800"
    with pytest.raises(EnvelopeError):
        env.decode(json.dumps(raw).encode()).read_body()
    raw = json.loads(env.encode(build_send()))
    raw["kind"] = "status"
    with pytest.raises(EnvelopeError):
        env.decode(json.dumps(raw).encode()).read_body()


def peer_record(**overrides: object) -> PeerRecord:
    fields: dict[str, object] = {
        "seq": 7,
        "id": "s",
        "instance_id": IID,
        "name": "alice",
        "cwd": "/w",
        "status": "idle",
        "inbound": "accept",
        "started_at": 1,
        "updated_at": 2,
        "capabilities": ["cancel-safe-queue-v1"],
    }
    fields.update(overrides)
    return PeerRecord(**fields)  # type: ignore[arg-type]


def published(body: PeerRecord | Tombstone, kind: Kind = Kind.PEER) -> env.Envelope:
    return env.build(
        kind=kind,
        account="pi-xs",
        origin="laptop",
        to=EVERYONE,
        nonce=NONCE,
        at_ms=3,
        body=body,
    )


def test_a_peer_record_never_holds_a_token_socket_or_pid() -> None:
    record = peer_record()
    wire = record.to_wire()
    assert not {"token", "socketPath", "pid"} & set(wire)
    assert env.decode(env.encode(published(record))).read_body() == record


def test_a_record_leads_with_its_sequence_and_needs_one() -> None:
    # The sequence is what readers order records by, so a record without one is no record.
    assert next(iter(peer_record().to_wire())) == "seq"
    raw = json.loads(env.encode(published(peer_record())))
    del raw["body"]["seq"]
    with pytest.raises(EnvelopeError):
        env.decode(json.dumps(raw).encode()).read_body()
    for seq in (1.0, "7", 2**53, True):
        raw["body"]["seq"] = seq
        with pytest.raises(EnvelopeError):
            env.decode(json.dumps(raw).encode()).read_body()


def test_a_tombstone_survives_its_bytes_and_is_read_only_as_one() -> None:
    stone = Tombstone(seq=8, instance_id=IID)
    assert stone.to_wire() == {"seq": 8, "instanceId": IID}
    sent = published(stone, Kind.GONE)
    back = env.decode(env.encode(sent))
    assert back.kind is Kind.GONE
    assert back.to == EVERYONE
    assert back.read_body() == stone
    # The same body under the kind of a live record is not a record.
    raw = json.loads(env.encode(sent))
    raw["kind"] = "peer"
    with pytest.raises(EnvelopeError):
        env.decode(json.dumps(raw).encode()).read_body()
    raw = json.loads(env.encode(sent))
    raw["body"]["instanceId"] = "A" * 32
    with pytest.raises(EnvelopeError):
        env.decode(json.dumps(raw).encode()).read_body()


def test_records_and_requests_are_told_apart_by_kind() -> None:
    assert {Kind.PEER, Kind.GONE} == env.RECORD_KINDS
    assert {Kind.SEND, Kind.STATUS} == env.REQUEST_KINDS
    assert not env.RECORD_KINDS & env.REQUEST_KINDS
    assert Kind.REPLY not in env.RECORD_KINDS | env.REQUEST_KINDS


def test_a_record_cwd_is_bounded_in_code_points() -> None:
    # Astral characters are two UTF-16 units each: the bound counts them once.
    longest = "\U0001d11e" * REMOTE_RECORD_CWD_CHARS
    assert peer_record(cwd=longest).cwd == longest
    with pytest.raises(ValidationError):
        peer_record(cwd="/" * (REMOTE_RECORD_CWD_CHARS + 1))
    raw = json.loads(env.encode(published(peer_record())))
    raw["body"]["cwd"] = "/" * (REMOTE_RECORD_CWD_CHARS + 1)
    with pytest.raises(EnvelopeError):
        env.decode(json.dumps(raw).encode()).read_body()


def test_the_largest_record_fits_under_the_record_bound() -> None:
    """Every field at its bound, in the character JSON escapes longest (six bytes each): an
    honest record, however odd, is never dropped as too large before its signature is read."""
    worst = "\x01"
    record = peer_record(
        seq=MAX_SAFE_INTEGER,
        id=worst * MAX_SESSION_ID_UNITS,
        name=worst * MAX_NAME_CODE_POINTS,
        cwd=worst * REMOTE_RECORD_CWD_CHARS,
        status="busy",
        inbound="refuse",
        started_at=-MAX_SAFE_INTEGER,
        updated_at=-MAX_SAFE_INTEGER,
        capabilities=[worst * MAX_CAPABILITY_UNITS] * MAX_CAPABILITIES,
    )
    envelope = env.build(
        kind=Kind.PEER,
        account="a" * 64,
        origin="x" * MAX_MACHINE_NAME_CHARS,
        to=EVERYONE,
        nonce="f" * 32,
        at_ms=-MAX_SAFE_INTEGER,
        body=record,
    )
    data = env.encode(envelope)
    # Each character really is escaped, so this is the worst case and not a gentle one.
    assert data.count(b"\\u0001") == (
        MAX_SESSION_ID_UNITS
        + MAX_NAME_CODE_POINTS
        + REMOTE_RECORD_CWD_CHARS
        + MAX_CAPABILITY_UNITS * MAX_CAPABILITIES
    )
    assert SIGNATURE_BYTES + len(data) <= MAX_RECORD_BYTES


# -- names and subjects ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "laptop", "build-box-2", "x" * 32, "0"])
def test_machine_names(name: str) -> None:
    assert env.is_machine_name(name)
    assert env.parse_record_key(env.record_key(name, IID)) == (name, IID)
    assert env.parse_record_subject(env.record_subject(name, IID)) == (name, IID)


def test_a_request_subject_names_both_ends() -> None:
    subject = env.request_subject("buildbox", "laptop")
    assert subject == "pi-xs.v1.to.buildbox.from.laptop"
    assert env.request_origin(subject, "buildbox") == "laptop"
    # Addressed to another machine (even one whose name ours starts with): not ours to read.
    assert env.request_origin(subject, "build") is None
    assert env.request_origin(subject, "laptop") is None
    # The gateway serves every origin on one wildcard; each origin publishes on its own.
    assert subject_matches(env.requests_to("buildbox"), subject)
    assert subject_matches(env.requests_from("laptop"), subject)
    assert not subject_matches(env.requests_to("laptop"), subject)
    assert not subject_matches(env.requests_from("buildbox"), subject)


@pytest.mark.parametrize("to", ["a", "laptop", "build-box-2", "x" * 32])
@pytest.mark.parametrize("origin", ["b", "buildbox", "0-1", "y" * 32])
def test_request_subjects_round_trip(to: str, origin: str) -> None:
    assert env.request_origin(env.request_subject(to, origin), to) == origin


@pytest.mark.parametrize(
    "tail",
    ["", "Laptop", "lap.top", "*", ">", "laptop.extra", "-laptop", "x" * 33, "lap top"],
)
def test_a_request_subject_whose_origin_is_no_machine_names_none(tail: str) -> None:
    assert env.request_origin(f"pi-xs.v1.to.buildbox.from.{tail}", "buildbox") is None


@pytest.mark.parametrize(
    "subject",
    [
        "pi-xs.v1.to.buildbox",
        "pi-xs.v1.to.buildbox.laptop",
        "pi-xs.v2.to.buildbox.from.laptop",
        "pi-xs.v1.in.buildbox.from.laptop",
        "x.pi-xs.v1.to.buildbox.from.laptop",
    ],
)
def test_what_is_not_a_request_subject_names_no_origin(subject: str) -> None:
    assert env.request_origin(subject, "buildbox") is None


def test_the_earlier_layout_and_inboxes_are_apart_from_requests() -> None:
    earlier = env.earlier_request_subject("buildbox")
    assert earlier == "pi-xs.v1.to.buildbox"
    # A request of the earlier layout names no origin, so no request wildcard takes it.
    assert not subject_matches(env.requests_to("buildbox"), earlier)
    assert env.request_origin(earlier, "buildbox") is None
    assert env.inbox_prefix("laptop") == "pi-xs.v1.in.laptop"
    # The probe sits where inboxes are, but under a name no machine can have.
    probe_owner = env.OPEN_PROBE_SUBJECT.split(".")[3]
    assert env.OPEN_PROBE_SUBJECT.startswith("pi-xs.v1.in.")
    assert not env.is_machine_name(probe_owner)


def test_record_subjects_belong_to_their_machine() -> None:
    subject = env.record_subject("laptop", IID)
    assert subject == f"$KV.pi-xs-peers.laptop.{IID}"
    assert subject_matches(env.records_of("laptop"), subject)
    assert not subject_matches(env.records_of("buildbox"), subject)
    assert not subject_matches(env.records_of("lap"), subject)


@pytest.mark.parametrize(
    "subject",
    [
        f"$KV.pi-xs-peers.laptop.{IID}.x",
        f"$KV.pi-xs-peers.Laptop.{IID}",
        f"$KV.pi-xs-peers.laptop.{'A' * 32}",
        "$KV.pi-xs-peers.laptop.",
        f"$KV.other.laptop.{IID}",
        f"pi-xs-peers.laptop.{IID}",
        f"$KV.pi-xs-peers.*.{IID}",
    ],
)
def test_what_is_not_a_record_subject_is_none(subject: str) -> None:
    assert env.parse_record_subject(subject) is None


NOT_MACHINE_NAMES = ["", "A", "a_b", "a.b", "-a", "a-", "x" * 33, "a*", ">", "*", "a b"]

SUBJECT_MAKERS: dict[str, Callable[[str], str]] = {
    "request to": lambda name: env.request_subject(name, "laptop"),
    "request from": lambda name: env.request_subject("laptop", name),
    "requests to": env.requests_to,
    "requests from": env.requests_from,
    "earlier request": env.earlier_request_subject,
    "inbox": env.inbox_prefix,
    "record": lambda name: env.record_subject(name, IID),
    "records of": env.records_of,
}


@pytest.mark.parametrize("name", NOT_MACHINE_NAMES)
def test_not_machine_names(name: str) -> None:
    assert not env.is_machine_name(name)
    assert env.parse_record_key(f"{name}.{IID}") is None
    assert env.parse_record_subject(f"$KV.pi-xs-peers.{name}.{IID}") is None


@pytest.mark.parametrize("maker", sorted(SUBJECT_MAKERS))
@pytest.mark.parametrize("name", NOT_MACHINE_NAMES)
def test_no_subject_is_made_of_a_name_that_is_no_machine(maker: str, name: str) -> None:
    """A name with a dot or a wildcard would reach other machines' subjects."""
    with pytest.raises(ValueError, match="machine"):
        SUBJECT_MAKERS[maker](name)
