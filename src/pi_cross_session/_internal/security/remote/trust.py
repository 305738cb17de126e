"""The allow-list, and the ordered checks every envelope passes before a gateway acts on it.

Order (docs/remote.md, "Checks on every envelope"): the origin, which the NATS subject names (the
deployment vouches for it), is on the allow-list; the size is within the bound of what may arrive
there; the record's signature verifies with the origin's listed key, or the request's or reply's MAC
with the key of the pair (:mod:`.pairing`), over the bytes as they arrived; only then is anything
parsed: the JSON object, its fields, its ``origin`` is the subject's; ``account``
is ours; ``to`` is us (or everyone, for records); the kind is one we expect here; ``at`` inside the
window (a record's: its validity) and, for requests, not before we started; the nonce not seen.
Nothing from NATS is parsed unless it is bounded and signed (or MACed) by a machine we trust: an
unlisted origin costs a dictionary look-up, a forged payload one check over its bytes.

Each failure has a :class:`Cause`. Only a request from a verified origin is ever answered — with
``expired`` (clock) or ``rate_limited`` (nonce table full) — and everything else is dropped: a
sender we cannot verify learns nothing, not even a refusal.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Final

from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.errors import CrossSessionError
from pi_cross_session._internal.protocol.remote.envelope import (
    ACCOUNT_RE,
    EVERYONE,
    RECORD_KINDS,
    REQUEST_KINDS,
    Envelope,
    EnvelopeError,
    Kind,
    decode,
    is_machine_name,
)
from pi_cross_session._internal.protocol.remote.settings import (
    ENVELOPE_MAX_AGE_S,
    ENVELOPE_MAX_AHEAD_S,
    MAX_ENVELOPE_BYTES,
    MAX_RECORD_BYTES,
    REMOTE_DIAGNOSTICS_KEPT,
    REMOTE_RECORD_TTL_S,
    VERIFY_ON_LOOP_BYTES,
)
from pi_cross_session._internal.security.remote.identity import (
    SIGNATURE_BYTES,
    MachineKeyError,
    PublicKey,
    parse_public_key,
    public_key_text,
    split,
)
from pi_cross_session._internal.security.remote.pairing import MAC_BYTES, MacKey, Pairs
from pi_cross_session._internal.security.remote.replay import NonceWindow, Seen

#: Default NATS account name bound into every signature and pairwise key.
DEFAULT_ACCOUNT: Final = "pi-xs"
TRUST_VERSION: Final = 1


class TrustConfigError(CrossSessionError):
    """A trust file that cannot be used."""


@dataclass(frozen=True, slots=True)
class TrustConfig:
    """What this machine trusts: the account, remote inbound on or off, and the allow-list."""

    account: str = DEFAULT_ACCOUNT
    inbound: bool = False
    machines: Mapping[str, PublicKey] = field(default_factory=dict)

    def with_machine(self, name: str, key: PublicKey) -> TrustConfig:
        """This config with ``name`` allowed under ``key`` (replacing an earlier key)."""
        if not is_machine_name(name):
            raise TrustConfigError("not a machine name")
        return TrustConfig(self.account, self.inbound, {**self.machines, name: key})

    def without_machine(self, name: str) -> TrustConfig:
        """This config without ``name``."""
        rest = {k: v for k, v in self.machines.items() if k != name}
        return TrustConfig(self.account, self.inbound, rest)

    def with_inbound(self, inbound: bool) -> TrustConfig:
        return TrustConfig(self.account, inbound, dict(self.machines))

    def with_account(self, account: str) -> TrustConfig:
        if ACCOUNT_RE.fullmatch(account) is None:
            raise TrustConfigError("not an account name")
        return TrustConfig(account, self.inbound, dict(self.machines))

    def to_bytes(self) -> bytes:
        """The trust file's content."""
        body = {
            "version": TRUST_VERSION,
            "account": self.account,
            "inbound": "on" if self.inbound else "off",
            "machines": {name: public_key_text(key) for name, key in sorted(self.machines.items())},
        }
        return (json.dumps(body, indent=2) + "\n").encode("utf-8")


def parse_trust(data: bytes) -> TrustConfig:
    """Read a trust file; :class:`TrustConfigError` names what is wrong."""
    try:
        body: Any = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise TrustConfigError("the trust file is not UTF-8 JSON") from None
    if not isinstance(body, dict) or body.get("version") != TRUST_VERSION:
        raise TrustConfigError(f"the trust file is not version {TRUST_VERSION}")
    account, inbound, machines = body.get("account"), body.get("inbound"), body.get("machines")
    if not isinstance(account, str) or ACCOUNT_RE.fullmatch(account) is None:
        raise TrustConfigError("the trust file's account is not an account name")
    if inbound not in ("on", "off"):
        raise TrustConfigError("the trust file's inbound is neither 'on' nor 'off'")
    if not isinstance(machines, dict):
        raise TrustConfigError("the trust file's machines is not an object")
    keys: dict[str, PublicKey] = {}
    for name, text in machines.items():
        if not isinstance(name, str) or not is_machine_name(name) or not isinstance(text, str):
            raise TrustConfigError("a machine entry is not a name and a key")
        try:
            keys[name] = parse_public_key(text)
        except MachineKeyError as exc:
            raise TrustConfigError(f"machine {name}: {exc}") from None
    return TrustConfig(account=account, inbound=inbound == "on", machines=keys)


class Cause(StrEnum):
    """Why an envelope was not acted upon (counted; never told to an unverified sender)."""

    TOO_LARGE = "too_large"
    MALFORMED = "malformed"
    UNKNOWN_MACHINE = "unknown_machine"
    BAD_SIGNATURE = "bad_signature"
    #: Signed by the machine the subject names, but naming another origin inside.
    ORIGIN_MISMATCH = "origin_mismatch"
    WRONG_ACCOUNT = "wrong_account"
    NOT_FOR_US = "not_for_us"
    UNEXPECTED_KIND = "unexpected_kind"
    CLOCK = "clock"
    BEFORE_START = "before_start"
    REPLAY = "replay"
    NONCES_FULL = "nonces_full"


@dataclass(frozen=True, slots=True)
class Rejected:
    """An envelope not to act upon; ``answer`` is the code to reply with, if any."""

    cause: Cause
    answer: Code | None = None
    #: The verified envelope, when the signature checked out (so a reply can address it).
    envelope: Envelope | None = None


@dataclass(frozen=True, slots=True)
class Signed:
    """Bytes whose signature (or MAC) verified with their origin's key (made only by
    :meth:`Screened.verify`)."""

    data: bytes
    #: The origin's key it was checked under (directly, or through the pair's key).
    origin_key: PublicKey


@dataclass(frozen=True, slots=True)
class Screened:
    """A payload past the cheap checks: the key that checks it (the origin's public key for a
    record, the pair's key for a request or a reply), its signature or MAC, and the bytes."""

    key: PublicKey | MacKey
    signature: bytes
    data: bytes
    origin_key: PublicKey

    def verify(self) -> Signed | None:
        """The signed bytes, when the signature is the key's (no state: safe in any thread)."""
        if not self.key.verifies(self.signature, self.data):
            return None
        return Signed(self.data, self.origin_key)


@dataclass(frozen=True, slots=True)
class Verified:
    """An envelope that passed every check."""

    envelope: Envelope


@dataclass(frozen=True, slots=True)
class VerifierDiagnostics:
    """Counts by cause (never evicted) and the last few one-line diagnostics."""

    rejected: Mapping[str, int]
    recent: tuple[str, ...]
    accepted: int


class Verifier:
    """Runs the checks for one gateway: this machine, its account and allow-list, its start."""

    def __init__(
        self,
        *,
        me: str,
        trust: TrustConfig,
        pairs: Pairs,
        started_at_ms: int,
        nonces: NonceWindow | None = None,
        max_age_ms: int = int(ENVELOPE_MAX_AGE_S * 1000),
        max_ahead_ms: int = int(ENVELOPE_MAX_AHEAD_S * 1000),
        max_bytes: int = MAX_ENVELOPE_BYTES,
        record_max_bytes: int = MAX_RECORD_BYTES,
        record_max_age_ms: int = int(REMOTE_RECORD_TTL_S * 1000),
        diagnostics_kept: int = REMOTE_DIAGNOSTICS_KEPT,
    ) -> None:
        self._me = me
        self._trust = trust
        self._pairs = pairs
        pairs.keep(trust.account, trust.machines)
        self._started_at_ms = started_at_ms
        self._nonces = nonces or NonceWindow(max_age_ms=max_age_ms)
        self._max_age_ms = max_age_ms
        self._max_ahead_ms = max_ahead_ms
        self._max_bytes = max_bytes
        self._record_max_bytes = record_max_bytes
        self._record_max_age_ms = record_max_age_ms
        self._rejected: dict[str, int] = {}
        self._recent: deque[str] = deque(maxlen=diagnostics_kept)
        self._accepted = 0

    @property
    def trust(self) -> TrustConfig:
        return self._trust

    @trust.setter
    def trust(self, trust: TrustConfig) -> None:
        """Change what is trusted from now on (a trust file or roster that changed)."""
        self._trust = trust
        self._pairs.keep(trust.account, trust.machines)

    def diagnostics(self) -> VerifierDiagnostics:
        return VerifierDiagnostics(
            MappingProxyType(dict(self._rejected)), tuple(self._recent), self._accepted
        )

    def skew_ms(self, envelope: Envelope, now_ms: int) -> int:
        """How far ``envelope``'s clock is behind ours on arrival (transit included)."""
        return now_ms - envelope.at

    def check(
        self,
        payload: bytes,
        now_ms: int,
        *,
        origin: str,
        kinds: Collection[Kind],
        reply_to: str | None = None,
    ) -> Verified | Rejected:
        """Judge one payload from NATS that the subject (or, for a reply, the request) says came
        from ``origin``.

        ``kinds`` are the kinds expected where it arrived (requests on our subject, a reply on our
        inbox, records and tombstones in the bucket); ``reply_to`` is the nonce a reply must answer.
        """
        screened = self.screen(payload, origin=origin, kinds=kinds)
        if isinstance(screened, Rejected):
            return screened
        return self.judge(screened.verify(), now_ms, origin=origin, kinds=kinds, reply_to=reply_to)

    def screen(
        self, payload: bytes, *, origin: str, kinds: Collection[Kind]
    ) -> Screened | Rejected:
        """The cheap first checks (the origin on the allow-list, the size, a signature's or a
        MAC's room); what passes still needs its signature or MAC verified
        (:meth:`Screened.verify`, which a caller may run off its event loop for a large payload)
        before :meth:`judge`."""
        key = self._trust.machines.get(origin)
        if key is None:
            return self._reject(Cause.UNKNOWN_MACHINE, "origin not on the allow-list")
        records_only = all(kind in RECORD_KINDS for kind in kinds)
        if len(payload) > (self._record_max_bytes if records_only else self._max_bytes):
            return self._reject(Cause.TOO_LARGE, f"from {origin}: payload over the size limit")
        checker: PublicKey | MacKey = key
        if not records_only:
            pair = self._pairs.pair(origin, key)
            if pair is None:
                return self._reject(Cause.BAD_SIGNATURE, f"{origin}'s key cannot make a pair key")
            checker = pair.receiving
        parts = split(payload, SIGNATURE_BYTES if records_only else MAC_BYTES)
        if parts is None:
            return self._reject(Cause.MALFORMED, f"from {origin}: no room for a signature or MAC")
        return Screened(checker, parts[0], parts[1], key)

    def signed_as_before(self, payload: bytes, origin: str) -> bool:
        """True when ``payload``, a request or a reply whose MAC failed, is instead a request or
        reply from ``origin`` to us signed with ``origin``'s key, as gateways signed them before
        pairwise keys: an older version of ours, not a forger (a record of ``origin``'s,
        signed and public, replayed on a request subject is not one). Only up to
        ``VERIFY_ON_LOOP_BYTES``: it is one more signature check, on the caller's loop."""
        key = self._trust.machines.get(origin)
        parts = split(payload)
        if key is None or parts is None or len(payload) > VERIFY_ON_LOOP_BYTES:
            return False
        if not key.verifies(parts[0], parts[1]):
            return False
        try:
            envelope = decode(parts[1])
        except EnvelopeError:
            return False
        return (
            envelope.kind not in RECORD_KINDS
            and envelope.origin == origin
            and envelope.to == self._me
            and envelope.account == self._trust.account
        )

    def judge(
        self,
        signed: Signed | None,
        now_ms: int,
        *,
        origin: str,
        kinds: Collection[Kind],
        reply_to: str | None = None,
    ) -> Verified | Rejected:
        """The rest of the checks, on bytes whose signature or MAC verified (``None``: it did
        not)."""
        if signed is None:
            return self._reject(Cause.BAD_SIGNATURE, f"from {origin}: signature or MAC is false")
        if self._trust.machines.get(origin) != signed.origin_key:
            # Trust changed while a large payload was checked in a worker thread.
            return self._reject(Cause.UNKNOWN_MACHINE, f"{origin}: no longer trusted by that key")
        data = signed.data
        try:
            envelope = decode(data)
        except EnvelopeError as exc:
            return self._reject(Cause.MALFORMED, f"from {origin}: {exc}")
        if envelope.origin != origin:
            return self._reject(Cause.ORIGIN_MISMATCH, f"from {origin}: names another origin")
        if envelope.account != self._trust.account:
            return self._reject(Cause.WRONG_ACCOUNT, f"from {origin}: made for another account")
        record = envelope.kind in RECORD_KINDS
        wanted_to = EVERYONE if record else self._me
        if envelope.to != wanted_to:
            return self._reject(Cause.NOT_FOR_US, f"from {origin}: addressed elsewhere")
        if envelope.kind not in kinds or (reply_to is not None and envelope.re != reply_to):
            return self._reject(Cause.UNEXPECTED_KIND, f"from {origin}: not expected here")
        answerable = envelope.kind in REQUEST_KINDS
        max_age_ms = self._record_max_age_ms if record else self._max_age_ms
        if not now_ms - max_age_ms <= envelope.at <= now_ms + self._max_ahead_ms:
            return self._reject(
                Cause.CLOCK,
                f"from {origin}: made {now_ms - envelope.at} ms before our now",
                Code.EXPIRED if answerable else None,
                envelope,
            )
        if record:
            # Records carry their own sequence; a reader keeps the newest (records.py).
            self._accepted += 1
            return Verified(envelope)
        if envelope.at < self._started_at_ms:
            # Our nonces were forgotten when we started: nothing made before may pass.
            return self._reject(
                Cause.BEFORE_START,
                f"from {origin}: made before this gateway started",
                Code.EXPIRED if answerable else None,
                envelope,
            )
        seen = self._nonces.admit(envelope.origin, envelope.id, envelope.at, now_ms)
        if seen is Seen.REPLAY:
            return self._reject(Cause.REPLAY, f"from {origin}: nonce already seen")
        if seen is Seen.FULL:
            return self._reject(
                Cause.NONCES_FULL,
                f"from {origin}: too many envelopes in the window",
                Code.RATE_LIMITED if answerable else None,
                envelope,
            )
        self._accepted += 1
        return Verified(envelope)

    def _reject(
        self,
        cause: Cause,
        detail: str,
        answer: Code | None = None,
        envelope: Envelope | None = None,
    ) -> Rejected:
        self._rejected[cause.value] = self._rejected.get(cause.value, 0) + 1
        self._recent.append(f"{cause.value}: {detail}")
        return Rejected(cause, answer, envelope)
