"""NATS credentials: NKeys and the JWTs of NATS's own decentralised authorization.

A NATS deployment of ours runs in *operator mode* (docs/remote.md, "Who may do what"): an
operator key signs the accounts, the account key signs one user per machine, and each user JWT
carries that machine's subject permissions. The server checks the chain and the permissions on
every connection, publish and subscription; no user is listed in the server's configuration, so
admitting a machine is signing a JWT, and revoking one is a new account JWT that lists it.

Keys are NKeys (Ed25519, in NATS's base32 text form, ``S…`` seeds and ``O…``/``A…``/``U…``
public keys); the ``nkeys`` package (nats-py's own extra) encodes seeds and signs, and nats-py
signs the server's nonce with a machine's seed when it connects. A JWT is
``base64url(header).base64url(claims).base64url(signature)``, the signature by the issuer's key
over the first two parts, with NATS's header ``{"typ":"JWT","alg":"ed25519-nkey"}``.

Pure: the caller passes the time (``issued_at``) and the random bytes of new keys.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final

import nkeys  # type: ignore[import-untyped]
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from pi_cross_session._internal.protocol.errors import CrossSessionError

_HEADER: Final = {"typ": "JWT", "alg": "ed25519-nkey"}
#: JWT claims version 2, what nats-server 2.2 and later read.
CLAIMS_VERSION: Final = 2


class CredentialsError(CrossSessionError):
    """A key, JWT or credentials text that cannot be used."""

    code = "bad_credentials"


class Role(Enum):
    """What an NKey stands for; the value is its prefix byte."""

    OPERATOR = nkeys.PREFIX_BYTE_OPERATOR
    ACCOUNT = nkeys.PREFIX_BYTE_ACCOUNT
    USER = nkeys.PREFIX_BYTE_USER

    @property
    def letter(self) -> str:
        return {Role.OPERATOR: "O", Role.ACCOUNT: "A", Role.USER: "U"}[self]


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64url(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise CredentialsError("not base64url") from None


class NKey:
    """A signing NKey: its seed (secret) and its public key."""

    def __init__(self, seed: str) -> None:
        try:
            prefix, _ = nkeys.decode_seed(bytearray(seed.encode("ascii")))
            self._pair = nkeys.from_seed(bytearray(seed.encode("ascii")))
        except (nkeys.NkeysError, UnicodeEncodeError, ValueError):
            raise CredentialsError("not an NKey seed") from None
        # nkeys.decode_seed does not check the seed's checksum: a damaged seed would silently be
        # another key.
        raw = base64.b32decode(seed + "=" * (-len(seed) % 8))
        if nkeys.crc16(bytearray(raw[:-2])).to_bytes(2, "little") != raw[-2:]:
            raise CredentialsError("the NKey seed's checksum is wrong")
        roles = {role.value: role for role in Role}
        if prefix not in roles:
            raise CredentialsError("an NKey seed of a role we do not use")
        self.role: Role = roles[prefix]
        self.seed = seed
        self.public_key: str = bytes(self._pair.public_key).decode("ascii")

    @classmethod
    def generate(cls, role: Role) -> NKey:
        """A new key from the OS's random source."""
        seed = nkeys.encode_seed(secrets.token_bytes(32), role.value)
        return cls(bytes(seed).decode("ascii"))

    def sign(self, data: bytes) -> bytes:
        """The raw Ed25519 signature of ``data``."""
        signature: bytes = self._pair.sign(data)
        return signature


def public_key_role(public_key: str) -> Role:
    """The role of an NKey public key; :class:`CredentialsError` when it is not a valid one."""
    _, role = _decode_public(public_key)
    return role


def _decode_public(public_key: str) -> tuple[Ed25519PublicKey, Role]:
    try:
        raw = base64.b32decode(public_key.encode("ascii") + b"=" * (-len(public_key) % 8))
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise CredentialsError("not an NKey public key") from None
    if len(raw) != 35:
        raise CredentialsError("not an NKey public key")
    body, checksum = raw[:-2], raw[-2:]
    if nkeys.crc16(bytearray(body)).to_bytes(2, "little") != checksum:
        raise CredentialsError("the NKey public key's checksum is wrong")
    roles = {role.value: role for role in Role}
    if body[0] not in roles:
        raise CredentialsError("an NKey public key of a role we do not use")
    return Ed25519PublicKey.from_public_bytes(body[1:]), roles[body[0]]


@dataclass(frozen=True, slots=True)
class Permissions:
    """A NATS user's subject permissions: what it may publish and subscribe to, and how many
    replies it may send to each request it receives (``0``: none)."""

    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    responses: int = 0

    def claims(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "pub": {"allow": list(self.publish)},
            "sub": {"allow": list(self.subscribe)},
        }
        if self.responses:
            body["resp"] = {"max": self.responses, "ttl": 0}
        return body


@dataclass(frozen=True, slots=True)
class Jwt:
    """A decoded JWT whose signature verified with its issuer's key."""

    issuer: str
    subject: str
    name: str
    issued_at: int
    nats: Mapping[str, Any] = field(default_factory=dict)
    text: str = ""


def _encode(issuer: NKey, subject: str, name: str, issued_at: int, nats: dict[str, Any]) -> str:
    claims: dict[str, Any] = {
        "jti": "",
        "iat": issued_at,
        "iss": issuer.public_key,
        "name": name,
        "sub": subject,
        "nats": {**nats, "version": CLAIMS_VERSION},
    }
    # The id is a digest of the claims without it, as NATS's own tools make it.
    digest = hashlib.new("sha512_256", json.dumps(claims, separators=(",", ":")).encode()).digest()
    claims["jti"] = base64.b32encode(digest).rstrip(b"=").decode("ascii")
    head = _b64url(json.dumps(_HEADER, separators=(",", ":")).encode())
    body = _b64url(json.dumps(claims, separators=(",", ":")).encode())
    signature = issuer.sign(f"{head}.{body}".encode("ascii"))
    return f"{head}.{body}.{_b64url(signature)}"


def decode(token: str) -> Jwt:
    """Read a JWT and verify its signature with the key its ``iss`` names."""
    parts = token.strip().split(".")
    if len(parts) != 3:
        raise CredentialsError("a JWT has three parts")
    try:
        header = json.loads(_unb64url(parts[0]))
        claims = json.loads(_unb64url(parts[1]))
    except ValueError:
        raise CredentialsError("the JWT's parts are not JSON") from None
    if header != _HEADER or not isinstance(claims, dict):
        raise CredentialsError("not a NATS JWT")
    issuer, subject, name, issued_at = (claims.get(k) for k in ("iss", "sub", "name", "iat"))
    nats = claims.get("nats")
    if not (
        isinstance(issuer, str)
        and isinstance(subject, str)
        and isinstance(name, str)
        and isinstance(issued_at, int)
        and isinstance(nats, dict)
    ):
        raise CredentialsError("the JWT lacks its issuer, subject, name, time or NATS claims")
    key, _ = _decode_public(issuer)
    try:
        key.verify(_unb64url(parts[2]), f"{parts[0]}.{parts[1]}".encode("ascii"))
    except InvalidSignature:
        raise CredentialsError("the JWT's signature does not verify") from None
    return Jwt(issuer, subject, name, issued_at, nats, token.strip())


# -- the three kinds of claims ---------------------------------------------------------------------

#: No limit, in NATS's JWT limits.
UNLIMITED: Final = -1


def operator_jwt(operator: NKey, *, name: str, system_account: str, issued_at: int) -> str:
    """The operator's self-signed JWT, naming the system account."""
    return _encode(
        operator,
        operator.public_key,
        name,
        issued_at,
        {"type": "operator", "system_account": system_account},
    )


def account_jwt(
    operator: NKey,
    account: str,
    *,
    name: str,
    issued_at: int,
    jetstream: bool,
    revocations: Mapping[str, int] | None = None,
    scoped_signers: Mapping[str, Permissions] | None = None,
) -> str:
    """An account's JWT, signed by the operator; ``revocations`` maps a user's public key to the
    time before which its JWTs no longer count; ``scoped_signers`` maps the public key of each of
    the account's *scoped* signing keys to the permissions every user it signs gets, whatever
    that user's JWT says (how an invitation to join admits to nothing but the join subjects)."""
    limits: dict[str, Any] = {
        "subs": UNLIMITED,
        "data": UNLIMITED,
        "payload": UNLIMITED,
        "imports": UNLIMITED,
        "exports": UNLIMITED,
        "wildcards": True,
        "conn": UNLIMITED,
        "leaf": UNLIMITED,
    }
    if jetstream:
        limits |= {
            "mem_storage": UNLIMITED,
            "disk_storage": UNLIMITED,
            "streams": UNLIMITED,
            "consumer": UNLIMITED,
        }
    nats: dict[str, Any] = {"type": "account", "limits": limits}
    if revocations:
        nats["revocations"] = dict(sorted(revocations.items()))
    if scoped_signers:
        nats["signing_keys"] = [
            {
                "kind": "user_scope",
                "key": key,
                "role": "join",
                "template": {
                    **permissions.claims(),
                    "subs": UNLIMITED,
                    "data": UNLIMITED,
                    "payload": UNLIMITED,
                },
            }
            for key, permissions in sorted(scoped_signers.items())
        ]
    return _encode(operator, account, name, issued_at, nats)


def user_jwt(
    account: NKey,
    user: str,
    *,
    name: str,
    issued_at: int,
    permissions: Permissions | None,
) -> str:
    """A user's JWT, signed by its account; ``permissions`` ``None`` allows everything in it."""
    if public_key_role(user) is not Role.USER:
        raise CredentialsError("a user JWT is for a user's public key (U…)")
    nats: dict[str, Any] = {
        "type": "user",
        "subs": UNLIMITED,
        "data": UNLIMITED,
        "payload": UNLIMITED,
    }
    if permissions is not None:
        nats |= permissions.claims()
    return _encode(account, user, name, issued_at, nats)


def scoped_user_jwt(signer: NKey, account: str, user: str, *, name: str, issued_at: int) -> str:
    """A user's JWT signed by one of ``account``'s scoped signing keys: it carries no permissions
    or limits of its own (the server refuses a scoped user's JWT that does), the scope's apply."""
    if public_key_role(user) is not Role.USER:
        raise CredentialsError("a user JWT is for a user's public key (U…)")
    return _encode(signer, user, name, issued_at, {"type": "user", "issuer_account": account})


def public_key_bytes(public_key: str) -> bytes:
    """The raw 32 bytes of an NKey public key (the Ed25519 key it names)."""
    key, _ = _decode_public(public_key)
    return key.public_bytes_raw()


def creds_text(jwt: str, seed: str) -> str:
    """The credentials text NATS clients read: the user JWT, then the user's seed."""
    return (
        "-----BEGIN NATS USER JWT-----\n"
        f"{jwt}\n"
        "------END NATS USER JWT------\n\n"
        "************************* IMPORTANT *************************\n"
        "NKEY Seed printed below can be used to sign and prove identity.\n"
        "NKEYs are sensitive and should be treated as secrets.\n\n"
        "-----BEGIN USER NKEY SEED-----\n"
        f"{seed}\n"
        "------END USER NKEY SEED------\n"
    )
