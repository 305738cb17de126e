"""The remote plane's envelopes and names (protocol/remote/envelope.py): built, read, refused."""

from __future__ import annotations

import json

import pytest

from pi_cross_session.protocol.remote import envelope as env
from pi_cross_session.protocol.remote.envelope import (
    EVERYONE,
    EnvelopeError,
    Kind,
    Outcome,
    PeerRecord,
    RemoteMessage,
    RemoteSender,
    ReplyBody,
    SendBody,
)

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


def test_a_peer_record_never_holds_a_token_socket_or_pid() -> None:
    record = PeerRecord(
        id="s",
        instance_id=IID,
        name="alice",
        cwd="/w",
        status="idle",
        inbound="accept",
        started_at=1,
        updated_at=2,
        capabilities=["cancel-safe-queue-v1"],
    )
    wire = record.to_wire()
    assert not {"token", "socketPath", "pid"} & set(wire)
    published = env.build(
        kind=Kind.PEER,
        account="pi-xs",
        origin="laptop",
        to=EVERYONE,
        nonce=NONCE,
        at_ms=3,
        body=record,
    )
    assert env.decode(env.encode(published)).read_body() == record


@pytest.mark.parametrize("name", ["a", "laptop", "build-box-2", "x" * 32, "0"])
def test_machine_names(name: str) -> None:
    assert env.is_machine_name(name)
    assert env.request_subject(name) == f"pi-xs.v1.to.{name}"
    assert env.parse_record_key(env.record_key(name, IID)) == (name, IID)


@pytest.mark.parametrize("name", ["", "A", "a_b", "a.b", "-a", "a-", "x" * 33, "a*", ">"])
def test_not_machine_names(name: str) -> None:
    assert not env.is_machine_name(name)
    with pytest.raises(ValueError, match="machine"):
        env.request_subject(name)
    assert env.parse_record_key(f"{name}.{IID}") is None
