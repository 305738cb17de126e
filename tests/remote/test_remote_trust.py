"""Machine keys, the allow-list and the ordered envelope checks (security/remote/)."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection

import pytest

from pi_cross_session._internal.protocol import jsonwire
from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.remote import envelope as env
from pi_cross_session._internal.protocol.remote.envelope import (
    EVERYONE,
    Body,
    Kind,
    Outcome,
    PeerRecord,
    RemoteMessage,
    RemoteSender,
    ReplyBody,
    SendBody,
    Tombstone,
)
from pi_cross_session._internal.protocol.remote.settings import MAX_RECORD_BYTES
from pi_cross_session._internal.security.remote import trust as trust_module
from pi_cross_session._internal.security.remote.identity import (
    MachineKey,
    MachineKeyError,
    PublicKey,
    parse_public_key,
    split,
)
from pi_cross_session._internal.security.remote.pairing import MacKey, Pairs, derive_pair
from pi_cross_session._internal.security.remote.replay import NonceWindow
from pi_cross_session._internal.security.remote.trust import (
    Cause,
    Rejected,
    TrustConfig,
    TrustConfigError,
    Verified,
    Verifier,
    parse_trust,
)
from tests.support.call_counts import CallCount, count_calls

NOW = 1_700_000_000_000
LAPTOP = MachineKey.generate()
DESK = MachineKey.generate()
STRANGER = MachineKey.generate()
#: The machine that checks: every request and reply below is meant for it.
BUILDBOX = MachineKey.generate()
NAMES = {LAPTOP: "laptop", DESK: "desk", STRANGER: "stranger"}
REQUESTS = frozenset({Kind.SEND, Kind.STATUS})
RECORDS = frozenset({Kind.PEER, Kind.GONE})


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
    return mac_sealed(key, env.encode(envelope))


def mac_sealed(key: MachineKey, data: bytes) -> bytes:
    """``data`` behind the MAC of the pair of ``key``'s machine and buildbox, as its gateway
    sends a request or a reply to buildbox (whatever the envelope inside says)."""
    pair = derive_pair(
        account="pi-xs", me=NAMES[key], key=key, other="buildbox", other_key=BUILDBOX.public_key
    )
    assert pair is not None
    return pair.sending.seal(data)


def record(seq: int = 1) -> PeerRecord:
    return PeerRecord(
        seq=seq,
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


def published(
    content: Body,
    *,
    kind: Kind = Kind.PEER,
    key: MachineKey = LAPTOP,
    at: int = NOW,
    nonce: str = "1" * 32,
    to: str = EVERYONE,
) -> bytes:
    """A record or tombstone of the laptop's, as it lies in the bucket."""
    envelope = env.build(
        kind=kind, account="pi-xs", origin="laptop", to=to, nonce=nonce, at_ms=at, body=content
    )
    return key.seal(env.encode(envelope))


def verifier(**overrides: object) -> Verifier:
    trust = (
        TrustConfig()
        .with_machine("laptop", LAPTOP.public_key)
        .with_machine("desk", DESK.public_key)
    )
    fields: dict[str, object] = {
        "me": "buildbox",
        "trust": trust,
        "pairs": Pairs(account="pi-xs", me="buildbox", key=BUILDBOX),
        "started_at_ms": NOW - 60_000,
    }
    fields.update(overrides)
    return Verifier(**fields)  # type: ignore[arg-type]


def check(
    v: Verifier,
    data: bytes,
    now: int = NOW,
    *,
    origin: str = "laptop",
    kinds: Collection[Kind] = REQUESTS,
) -> Verified | Rejected:
    return v.check(data, now, origin=origin, kinds=kinds)


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> CallCount:
    """Every way in to reading an envelope's bytes: the JSON reader under it, the two steps of
    reading, and the verifier's own reference to them."""
    return count_calls(
        monkeypatch,
        [
            (jsonwire, "loads"),
            (env, "loads_object"),
            (env, "from_object"),
            (trust_module, "decode"),
        ],
    )


@pytest.fixture
def signature_checks(monkeypatch: pytest.MonkeyPatch) -> CallCount:
    return count_calls(monkeypatch, [(PublicKey, "verifies"), (MacKey, "verifies")])


# -- keys ------------------------------------------------------------------------------------------


def test_a_key_signs_the_bytes_as_sent() -> None:
    sealed = LAPTOP.seal(b"payload")
    parts = split(sealed)
    assert parts is not None
    signature, data = parts
    assert data == b"payload"
    assert LAPTOP.public_key.verifies(signature, data)
    assert not LAPTOP.public_key.verifies(signature, b"payloaD")
    assert not STRANGER.public_key.verifies(signature, data)
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


#: Each case: the payload, the origin its subject names, and why it is dropped.
UNANSWERED: dict[str, tuple[Callable[[], bytes], str, Cause]] = {
    "short": (lambda: b"x" * 10, "laptop", Cause.MALFORMED),
    "not-json": (lambda: mac_sealed(LAPTOP, b"not json"), "laptop", Cause.MALFORMED),
    "signed-not-maced": (
        lambda: LAPTOP.seal(b'{"a request signed": "as records are"}'),
        "laptop",
        Cause.BAD_SIGNATURE,
    ),
    "unknown-machine": (
        lambda: payload(STRANGER, origin="stranger"),
        "stranger",
        Cause.UNKNOWN_MACHINE,
    ),
    "bad-signature": (lambda: payload(STRANGER), "laptop", Cause.BAD_SIGNATURE),
    "another-machines-key": (lambda: payload(DESK), "laptop", Cause.BAD_SIGNATURE),
    "origin-mismatch": (lambda: payload(origin="desk"), "laptop", Cause.ORIGIN_MISMATCH),
    "wrong-account": (lambda: payload(account="other"), "laptop", Cause.WRONG_ACCOUNT),
    "not-for-us": (lambda: payload(to="elsewhere"), "laptop", Cause.NOT_FOR_US),
    "for-everyone": (lambda: payload(to=EVERYONE), "laptop", Cause.NOT_FOR_US),
    "unexpected-kind": (lambda: payload(kind=Kind.REPLY), "laptop", Cause.UNEXPECTED_KIND),
    "a-record-among-requests": (
        lambda: mac_sealed(LAPTOP, published(record())[64:]),
        "laptop",
        Cause.UNEXPECTED_KIND,
    ),
    "a-signed-record-among-requests": (lambda: published(record()), "laptop", Cause.BAD_SIGNATURE),
}


@pytest.mark.parametrize("case", sorted(UNANSWERED))
def test_an_unverified_or_misaddressed_envelope_is_dropped_unanswered(case: str) -> None:
    make, origin, cause = UNANSWERED[case]
    v = verifier()
    verdict = check(v, make(), origin=origin)
    assert isinstance(verdict, Rejected)
    assert (verdict.cause, verdict.answer) == (cause, None)
    assert v.diagnostics().accepted == 0


def test_a_payload_over_the_limit_is_not_even_parsed(parses: CallCount) -> None:
    verdict = check(verifier(max_bytes=100), payload())
    assert isinstance(verdict, Rejected)
    assert verdict.cause is Cause.TOO_LARGE
    assert parses.count == 0


def test_a_tampered_byte_breaks_the_signature(parses: CallCount) -> None:
    """The signature is checked over the bytes as they arrived, before they are read: a flipped
    byte is a bad signature, whatever it did to the JSON."""
    for index in (-3, 70, 80):
        data = bytearray(payload())
        data[index] ^= 1
        verdict = check(verifier(), bytes(data))
        assert isinstance(verdict, Rejected)
        assert verdict.cause is Cause.BAD_SIGNATURE
    assert parses.count == 0


# -- nothing is read before it is known to be bounded and signed -----------------------------------


def test_the_counters_see_a_parse_and_a_signature_check(
    parses: CallCount, signature_checks: CallCount
) -> None:
    """The counted functions are the ones a good envelope goes through, so the zero counts
    below mean something."""
    assert isinstance(check(verifier(), payload()), Verified)
    assert parses.count > 0
    assert signature_checks.count == 1
    before = parses.count
    verdict = check(verifier(), mac_sealed(LAPTOP, b"not json"))
    assert isinstance(verdict, Rejected)
    assert verdict.cause is Cause.MALFORMED
    assert parses.count > before


#: Payloads the verifier must refuse without reading a byte of their JSON: the payload, the
#: origin its subject names, the kinds expected there, the verifier's overrides, the cause.
UNREAD: dict[str, tuple[Callable[[], bytes], str, frozenset[Kind], dict[str, object], Cause]] = {
    "forged": (lambda: payload(STRANGER), "laptop", REQUESTS, {}, Cause.BAD_SIGNATURE),
    "signed-by-another-listed-machine": (
        lambda: payload(DESK, origin="desk"),
        "laptop",
        REQUESTS,
        {},
        Cause.BAD_SIGNATURE,
    ),
    "forged-and-hostile": (
        lambda: mac_sealed(STRANGER, b"[" * 100_000),
        "laptop",
        REQUESTS,
        {},
        Cause.BAD_SIGNATURE,
    ),
    "forged-record": (
        lambda: published(record(), key=STRANGER),
        "laptop",
        RECORDS,
        {},
        Cause.BAD_SIGNATURE,
    ),
    "unknown-origin": (
        lambda: payload(STRANGER, origin="stranger"),
        "stranger",
        REQUESTS,
        {},
        Cause.UNKNOWN_MACHINE,
    ),
    "listed-origin-inside-unknown-subject": (
        lambda: payload(),
        "stranger",
        REQUESTS,
        {},
        Cause.UNKNOWN_MACHINE,
    ),
    "oversized": (lambda: payload(), "laptop", REQUESTS, {"max_bytes": 100}, Cause.TOO_LARGE),
    "oversized-record": (
        lambda: LAPTOP.seal(b" " * MAX_RECORD_BYTES),
        "laptop",
        RECORDS,
        {},
        Cause.TOO_LARGE,
    ),
    "shorter-than-a-signature": (lambda: b"{}", "laptop", REQUESTS, {}, Cause.MALFORMED),
}


@pytest.mark.parametrize("case", sorted(UNREAD))
def test_nothing_is_parsed_unless_bounded_and_signed(case: str, parses: CallCount) -> None:
    make, origin, kinds, overrides, cause = UNREAD[case]
    data = make()
    verdict = check(verifier(**overrides), data, origin=origin, kinds=kinds)
    assert isinstance(verdict, Rejected)
    assert (verdict.cause, verdict.answer, verdict.envelope) == (cause, None, None)
    assert parses.count == 0


def test_an_unlisted_origin_costs_no_signature_check(signature_checks: CallCount) -> None:
    v = verifier()
    for data in (payload(STRANGER, origin="stranger"), payload(), b"x" * 10_000_000):
        verdict = check(v, data, origin="stranger")
        assert isinstance(verdict, Rejected)
        assert verdict.cause is Cause.UNKNOWN_MACHINE
    assert signature_checks.count == 0


def test_the_checks_run_origin_then_size_then_signature(signature_checks: CallCount) -> None:
    huge_forgery = STRANGER.seal(b" " * 200)
    v = verifier(max_bytes=100)
    unknown = check(v, huge_forgery, origin="stranger")
    assert isinstance(unknown, Rejected)
    assert unknown.cause is Cause.UNKNOWN_MACHINE
    oversized = check(v, huge_forgery)
    assert isinstance(oversized, Rejected)
    assert oversized.cause is Cause.TOO_LARGE
    assert signature_checks.count == 0
    forged = check(verifier(), mac_sealed(STRANGER, b"not json"))
    assert isinstance(forged, Rejected)
    assert forged.cause is Cause.BAD_SIGNATURE
    assert signature_checks.count == 1


# -- the origin is the subject's -------------------------------------------------------------------


@pytest.mark.parametrize("named", ["desk", "stranger", "buildbox"])
def test_a_machine_cannot_speak_for_another_on_its_own_subject(named: str) -> None:
    """The deployment lets the laptop publish only on its own subjects; inside, it may claim any
    origin, and that claim must not stand."""
    v = verifier()
    verdict = check(v, payload(origin=named))
    assert isinstance(verdict, Rejected)
    assert (verdict.cause, verdict.answer) == (Cause.ORIGIN_MISMATCH, None)
    assert v.diagnostics().rejected == {"origin_mismatch": 1}


def test_an_envelope_relayed_on_another_machines_subject_fails_its_signature() -> None:
    """The laptop's own envelope, replayed where the desk's requests arrive, is checked with the
    desk's key."""
    verdict = check(verifier(), payload(), origin="desk")
    assert isinstance(verdict, Rejected)
    assert verdict.cause is Cause.BAD_SIGNATURE


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
    data = published(record())
    v = verifier(nonces=NonceWindow(per_machine=1))
    for _ in range(2):  # the same record read twice (a KV history) is fine
        assert isinstance(check(v, data, kinds={Kind.PEER}), Verified)
    assert isinstance(check(v, published(record(2), nonce="2" * 32), kinds=RECORDS), Verified)
    # Records took no room in the nonce table: a request still has its one slot.
    assert isinstance(check(v, payload()), Verified)


def test_a_tombstone_is_a_record() -> None:
    stone = published(Tombstone(seq=2, instance_id="a" * 32), kind=Kind.GONE)
    verdict = check(verifier(), stone, kinds=RECORDS)
    assert isinstance(verdict, Verified)
    assert verdict.envelope.read_body() == Tombstone(seq=2, instance_id="a" * 32)
    unexpected = check(verifier(), stone, kinds={Kind.PEER})
    assert isinstance(unexpected, Rejected)
    assert unexpected.cause is Cause.UNEXPECTED_KIND
    addressed = published(Tombstone(seq=2, instance_id="a" * 32), kind=Kind.GONE, to="buildbox")
    misaddressed = check(verifier(), addressed, kinds=RECORDS)
    assert isinstance(misaddressed, Rejected)
    assert misaddressed.cause is Cause.NOT_FOR_US


@pytest.mark.parametrize(
    ("at", "passes"),
    [
        (NOW - 30_000, True),
        (NOW - 30_001, False),
        (NOW + 5_000, True),
        (NOW + 5_001, False),
    ],
)
@pytest.mark.parametrize("kind", sorted(RECORDS))
def test_a_record_is_valid_for_the_record_ttl_by_default(at: int, passes: bool, kind: Kind) -> None:
    body: Body = record() if kind is Kind.PEER else Tombstone(seq=1, instance_id="a" * 32)
    verdict = check(verifier(), published(body, kind=kind, at=at), kinds=RECORDS)
    if passes:
        assert isinstance(verdict, Verified)
    else:
        assert isinstance(verdict, Rejected)
        # Nobody asked for a record: a stale one is dropped, never answered.
        assert (verdict.cause, verdict.answer) == (Cause.CLOCK, None)
        assert verdict.envelope is not None


def test_records_have_their_own_window_and_requests_keep_theirs() -> None:
    """A deployment's longer TTL stretches how long a record is valid, not a request."""
    v = verifier(record_max_age_ms=120_000, started_at_ms=0)
    at = NOW - 100_000
    assert isinstance(check(v, published(record(), at=at), kinds=RECORDS), Verified)
    request = check(v, payload(at=at))
    assert isinstance(request, Rejected)
    assert (request.cause, request.answer) == (Cause.CLOCK, Code.EXPIRED)
    too_old = check(v, published(record(), at=NOW - 120_001), kinds=RECORDS)
    assert isinstance(too_old, Rejected)
    assert too_old.cause is Cause.CLOCK
    shorter = verifier(record_max_age_ms=10_000)
    stale = check(shorter, published(record(), at=NOW - 10_001), kinds=RECORDS)
    assert isinstance(stale, Rejected)
    assert stale.cause is Cause.CLOCK
    assert isinstance(check(shorter, payload(at=NOW - 10_001)), Verified)


def test_a_record_signed_before_the_gateway_started_still_counts() -> None:
    """Records are ordered by their sequence, not by nonces, so nothing was forgotten at start."""
    v = verifier(started_at_ms=NOW)
    assert isinstance(check(v, published(record(), at=NOW - 1_000), kinds=RECORDS), Verified)
    request = check(v, payload(at=NOW - 1_000))
    assert isinstance(request, Rejected)
    assert request.cause is Cause.BEFORE_START


def test_records_have_their_own_size_bound_where_only_records_arrive() -> None:
    data = published(record())
    tight = verifier(record_max_bytes=len(data) - 1)
    too_large = check(tight, data, kinds=RECORDS)
    assert isinstance(too_large, Rejected)
    assert too_large.cause is Cause.TOO_LARGE
    # Where requests may arrive too, the envelope bound applies (and a request's MAC).
    mixed = check(tight, data, kinds={Kind.PEER, Kind.SEND})
    assert isinstance(mixed, Rejected)
    assert mixed.cause is Cause.BAD_SIGNATURE
    assert isinstance(check(verifier(record_max_bytes=len(data)), data, kinds=RECORDS), Verified)


def test_a_reply_must_answer_our_request() -> None:
    """The laptop checks buildbox's replies: MACed by buildbox for the laptop, answering the
    request's nonce."""
    v = Verifier(
        me="laptop",
        trust=TrustConfig().with_machine("buildbox", BUILDBOX.public_key),
        pairs=Pairs(account="pi-xs", me="laptop", key=LAPTOP),
        started_at_ms=0,
    )
    pair = derive_pair(
        account="pi-xs", me="buildbox", key=BUILDBOX, other="laptop", other_key=LAPTOP.public_key
    )
    assert pair is not None

    def reply(nonce: str) -> bytes:
        envelope = env.build(
            kind=Kind.REPLY,
            account="pi-xs",
            origin="buildbox",
            to="laptop",
            nonce=nonce,
            at_ms=NOW,
            body=ReplyBody(outcome=Outcome.RECEIPT, status="submitted"),
            re="2" * 32,
        )
        return pair.sending.seal(env.encode(envelope))

    answered = v.check(
        reply("4" * 32), NOW, origin="buildbox", kinds={Kind.REPLY}, reply_to="2" * 32
    )
    assert isinstance(answered, Verified)
    other = v.check(reply("5" * 32), NOW, origin="buildbox", kinds={Kind.REPLY}, reply_to="9" * 32)
    assert isinstance(other, Rejected)
    assert other.cause is Cause.UNEXPECTED_KIND
    # buildbox's MAC for another machine (or the laptop's own for buildbox) is not a reply.
    mine = derive_pair(
        account="pi-xs", me="laptop", key=LAPTOP, other="buildbox", other_key=BUILDBOX.public_key
    )
    assert mine is not None
    reflected = mine.sending.seal(reply("6" * 32)[32:])
    refused = v.check(reflected, NOW, origin="buildbox", kinds={Kind.REPLY}, reply_to="2" * 32)
    assert isinstance(refused, Rejected)
    assert refused.cause is Cause.BAD_SIGNATURE


def test_refusals_are_counted_by_cause() -> None:
    v = verifier()
    check(v, payload(STRANGER))
    check(v, payload(STRANGER))
    check(v, payload())
    check(v, payload(STRANGER, origin="stranger"), origin="stranger")
    diagnostics = v.diagnostics()
    assert diagnostics.rejected == {"bad_signature": 2, "unknown_machine": 1}
    assert diagnostics.accepted == 1
    assert len(diagnostics.recent) == 3
    assert json.dumps(list(diagnostics.recent))  # plain text lines


def test_a_request_signed_as_older_versions_did_is_told_apart_from_a_replayed_record() -> None:
    v = verifier()
    maced = payload()
    signed_request = LAPTOP.seal(maced[32:])
    assert isinstance(check(v, signed_request), Rejected)
    assert v.signed_as_before(signed_request, "laptop")
    # A record is signed and public: replayed on a request subject it is no older gateway.
    assert not v.signed_as_before(published(record()), "laptop")
    # Signed for another machine, by another key, or too large to look at on the loop.
    assert not v.signed_as_before(LAPTOP.seal(payload(to="desk")[32:]), "laptop")
    assert not v.signed_as_before(STRANGER.seal(maced[32:]), "laptop")
    assert not v.signed_as_before(LAPTOP.seal(b" " * 70_000), "laptop")
    assert not v.signed_as_before(signed_request, "stranger")


def test_a_machine_no_longer_trusted_while_its_payload_was_checked_is_refused() -> None:
    """A large payload is checked in a worker thread between screening and judging; trust
    changing meanwhile must not let it through."""
    v = verifier()
    screened = v.screen(payload(), origin="laptop", kinds=REQUESTS)
    assert not isinstance(screened, Rejected)
    signed = screened.verify()
    v.trust = v.trust.without_machine("laptop")
    gone = v.judge(signed, NOW, origin="laptop", kinds=REQUESTS)
    assert isinstance(gone, Rejected)
    assert gone.cause is Cause.UNKNOWN_MACHINE
    # Trusted again under a new key: what the old key vouched for is still refused.
    v.trust = v.trust.with_machine("laptop", STRANGER.public_key)
    rekeyed = v.judge(signed, NOW, origin="laptop", kinds=REQUESTS)
    assert isinstance(rekeyed, Rejected)
    assert rekeyed.cause is Cause.UNKNOWN_MACHINE
