"""Machine keys, the allow-list and the ordered envelope checks (security/remote/)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from pi_cross_session.protocol.codes import Code
from pi_cross_session.protocol.remote import envelope as env
from pi_cross_session.protocol.remote.envelope import (
    EVERYONE,
    Kind,
    Outcome,
    PeerRecord,
    RemoteMessage,
    RemoteSender,
    ReplyBody,
    SendBody,
)
from pi_cross_session.security.remote.identity import (
    MachineKey,
    MachineKeyError,
    parse_public_key,
    split,
    verifies,
)
from pi_cross_session.security.remote.replay import NonceWindow
from pi_cross_session.security.remote.trust import (
    Cause,
    Rejected,
    TrustConfig,
    TrustConfigError,
    Verified,
    Verifier,
    parse_trust,
)

NOW = 1_700_000_000_000
LAPTOP = MachineKey.generate()
STRANGER = MachineKey.generate()


def body() -> SendBody:
    sender = RemoteSender(id="s", instance_id="a" * 32, name="alice", capabilities=[])
    message = RemoteMessage(message_id="m", text="hi", summary="hi", sent_at=NOW)
    return SendBody(target="b" * 32, sender=sender, message=message)


def payload(
    key: MachineKey = LAPTOP,
    *,
    nonce: str = "1" * 32,
    at: int = NOW,
    origin: str = "laptop",
    to: str = "buildbox",
    account: str = "pi-xs",
    kind: Kind = Kind.SEND,
) -> bytes:
    envelope = env.build(
        kind=kind,
        account=account,
        origin=origin,
        to=to,
        nonce=nonce,
        at_ms=at,
        body=body()
        if kind is Kind.SEND
        else ReplyBody(outcome=Outcome.RECEIPT, status="submitted"),
        re="2" * 32 if kind is Kind.REPLY else None,
    )
    return key.seal(env.encode(envelope))


def verifier(**overrides: object) -> Verifier:
    trust = TrustConfig().with_machine("laptop", LAPTOP.public_key)
    fields: dict[str, object] = {"me": "buildbox", "trust": trust, "started_at_ms": NOW - 60_000}
    fields.update(overrides)
    return Verifier(**fields)  # type: ignore[arg-type]


def check(v: Verifier, data: bytes, now: int = NOW) -> Verified | Rejected:
    return v.check(data, now, kinds={Kind.SEND, Kind.STATUS})


# -- keys ------------------------------------------------------------------------------------------


def test_a_key_signs_the_bytes_as_sent() -> None:
    sealed = LAPTOP.seal(b"payload")
    parts = split(sealed)
    assert parts is not None
    signature, data = parts
    assert data == b"payload"
    assert verifies(LAPTOP.public_key, signature, data)
    assert not verifies(LAPTOP.public_key, signature, b"payloaD")
    assert not verifies(STRANGER.public_key, signature, data)
    assert split(b"x" * 64) is None


def test_keys_round_trip_through_their_text_forms() -> None:
    again = MachineKey.from_pem(LAPTOP.to_pem())
    assert again.public_text() == LAPTOP.public_text()
    assert LAPTOP.public_text().startswith("ed25519:")
    assert parse_public_key(LAPTOP.public_text()) == LAPTOP.public_key


@pytest.mark.parametrize(
    "text", ["", "ed25519:", "ed25519:!!", "rsa:AAAA", "ed25519:" + "A" * 40, "ed25519:AAAA"]
)
def test_what_is_not_a_public_key(text: str) -> None:
    with pytest.raises(MachineKeyError):
        parse_public_key(text)


def test_a_pem_that_is_not_an_ed25519_key_is_refused() -> None:
    with pytest.raises(MachineKeyError):
        MachineKey.from_pem(b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")


# -- the trust file --------------------------------------------------------------------------------


def test_the_trust_file_round_trips_and_inbound_is_off_by_default() -> None:
    trust = TrustConfig()
    assert trust.inbound is False
    trust = trust.with_machine("laptop", LAPTOP.public_key).with_inbound(True).with_account("team")
    again = parse_trust(trust.to_bytes())
    assert again.account == "team"
    assert again.inbound is True
    assert list(again.machines) == ["laptop"]
    assert parse_trust(again.without_machine("laptop").to_bytes()).machines == {}


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"[]",
        b'{"version":2}',
        b'{"version":1,"account":"a b","inbound":"off","machines":{}}',
        b'{"version":1,"account":"a","inbound":"yes","machines":{}}',
        b'{"version":1,"account":"a","inbound":"on","machines":{"Bad":"ed25519:"}}',
        b'{"version":1,"account":"a","inbound":"on","machines":{"good":"ed25519:AAAA"}}',
    ],
)
def test_a_broken_trust_file_is_refused(body: bytes) -> None:
    with pytest.raises(TrustConfigError):
        parse_trust(body)


# -- the checks, in order --------------------------------------------------------------------------


def test_a_good_request_passes_once() -> None:
    v = verifier()
    first = check(v, payload())
    assert isinstance(first, Verified)
    assert first.envelope.origin == "laptop"
    again = check(v, payload())
    assert isinstance(again, Rejected)
    assert (again.cause, again.answer) == (Cause.REPLAY, None)


UNANSWERED: dict[str, tuple[Callable[[], bytes], Cause]] = {
    "short": (lambda: b"x" * 10, Cause.MALFORMED),
    "not-json": (lambda: LAPTOP.seal(b"not json"), Cause.MALFORMED),
    "unknown-machine": (lambda: payload(STRANGER, origin="stranger"), Cause.UNKNOWN_MACHINE),
    "bad-signature": (lambda: payload(STRANGER), Cause.BAD_SIGNATURE),
    "wrong-account": (lambda: payload(account="other"), Cause.WRONG_ACCOUNT),
    "not-for-us": (lambda: payload(to="elsewhere"), Cause.NOT_FOR_US),
    "unexpected-kind": (lambda: payload(kind=Kind.REPLY), Cause.UNEXPECTED_KIND),
}


@pytest.mark.parametrize("case", sorted(UNANSWERED))
def test_an_unverified_or_misaddressed_envelope_is_dropped_unanswered(case: str) -> None:
    make, cause = UNANSWERED[case]
    verdict = check(verifier(), make())
    assert isinstance(verdict, Rejected)
    assert (verdict.cause, verdict.answer) == (cause, None)


def test_a_payload_over_the_limit_is_not_even_parsed() -> None:
    verdict = check(verifier(max_bytes=100), payload())
    assert isinstance(verdict, Rejected)
    assert verdict.cause is Cause.TOO_LARGE


def test_a_tampered_byte_breaks_the_signature() -> None:
    data = bytearray(payload())
    data[-3] ^= 1
    verdict = check(verifier(), bytes(data))
    assert isinstance(verdict, Rejected)
    assert verdict.cause in (Cause.BAD_SIGNATURE, Cause.MALFORMED)


@pytest.mark.parametrize(
    ("at", "passes"),
    [
        (NOW - 30_000, True),
        (NOW - 30_001, False),
        (NOW + 5_000, True),
        (NOW + 5_001, False),
    ],
)
def test_the_time_window_is_the_contracts(at: int, passes: bool) -> None:
    verdict = check(verifier(), payload(at=at))
    if passes:
        assert isinstance(verdict, Verified)
    else:
        assert isinstance(verdict, Rejected)
        assert (verdict.cause, verdict.answer) == (Cause.CLOCK, Code.EXPIRED)
        assert verdict.envelope is not None  # verified, so the refusal can be addressed


def test_nothing_signed_before_the_gateway_started_passes() -> None:
    v = verifier(started_at_ms=NOW - 1_000)
    verdict = check(v, payload(at=NOW - 1_001))
    assert isinstance(verdict, Rejected)
    assert (verdict.cause, verdict.answer) == (Cause.BEFORE_START, Code.EXPIRED)
    assert isinstance(check(v, payload(at=NOW - 1_000, nonce="3" * 32)), Verified)


def test_a_full_nonce_table_refuses_that_machine_and_forgets_nothing_early() -> None:
    v = verifier(nonces=NonceWindow(per_machine=2))
    assert isinstance(check(v, payload(nonce="1" * 32)), Verified)
    assert isinstance(check(v, payload(nonce="2" * 32)), Verified)
    full = check(v, payload(nonce="3" * 32))
    assert isinstance(full, Rejected)
    assert (full.cause, full.answer) == (Cause.NONCES_FULL, Code.RATE_LIMITED)
    # The first nonce is still remembered: a replay cannot use the full table to slip through.
    replay = check(v, payload(nonce="1" * 32))
    assert isinstance(replay, Rejected)
    assert replay.cause is Cause.REPLAY
    # Once the first two left the window (and so would be refused by time), room comes back.
    later = NOW + 30_001
    assert isinstance(check(v, payload(nonce="4" * 32, at=later), later), Verified)


def test_a_record_is_meant_for_everyone_and_is_not_a_nonce() -> None:
    record = PeerRecord(
        id="s",
        instance_id="a" * 32,
        name="alice",
        cwd="/",
        status="idle",
        inbound="accept",
        started_at=1,
        updated_at=2,
        capabilities=[],
    )
    envelope = env.build(
        kind=Kind.PEER,
        account="pi-xs",
        origin="laptop",
        to=EVERYONE,
        nonce="1" * 32,
        at_ms=NOW,
        body=record,
    )
    data = LAPTOP.seal(env.encode(envelope))
    v = verifier()
    for _ in range(2):  # the same record read twice (a KV history) is fine
        assert isinstance(v.check(data, NOW, kinds={Kind.PEER}), Verified)


def test_a_reply_must_answer_our_request() -> None:
    v = Verifier(
        me="laptop",
        trust=TrustConfig().with_machine("buildbox", LAPTOP.public_key),
        started_at_ms=0,
    )
    data = payload(kind=Kind.REPLY, origin="buildbox", to="laptop")
    assert isinstance(v.check(data, NOW, kinds={Kind.REPLY}, reply_to="2" * 32), Verified)
    other = v.check(
        payload(kind=Kind.REPLY, origin="buildbox", to="laptop", nonce="5" * 32),
        NOW,
        kinds={Kind.REPLY},
        reply_to="9" * 32,
    )
    assert isinstance(other, Rejected)
    assert other.cause is Cause.UNEXPECTED_KIND


def test_refusals_are_counted_by_cause() -> None:
    v = verifier()
    check(v, payload(STRANGER))
    check(v, payload(STRANGER))
    check(v, payload())
    diagnostics = v.diagnostics()
    assert diagnostics.rejected == {"bad_signature": 2}
    assert diagnostics.accepted == 1
    assert len(diagnostics.recent) == 2
    assert json.dumps(list(diagnostics.recent))  # plain text lines
