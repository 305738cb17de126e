"""Machine identities: Ed25519 keys, their text form, and signing the bytes as sent.

A machine's private key is kept as PKCS#8 PEM (the file layer writes it 0600); its public key is
shared as ``ed25519:<base64 of the 32 raw bytes>``, one line a user can paste into another
machine's allow-list. On NATS a record's payload is the 64-byte signature followed by its
envelope's exact bytes: the signature covers what travels, so no canonical form is needed.

``cryptography`` reads and writes the key files; signatures are made and checked with libsodium
(PyNaCl, already here for NATS's own keys): ``bench/remote.py``'s note in docs/performance.md has
the figures (a verification takes about half the time). Requests and replies carry MACs from
pairwise keys instead (:mod:`.pairing`); records and tombstones are signed.
"""

from __future__ import annotations

import base64
import binascii
from typing import Final

import nacl.exceptions
import nacl.signing
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from pi_cross_session._internal.protocol.errors import CrossSessionError

#: Length of an Ed25519 signature, and so of the payload's prefix.
SIGNATURE_BYTES: Final = 64
#: Length of a raw Ed25519 public key.
PUBLIC_KEY_BYTES: Final = 32
#: How a public key's text form starts.
PUBLIC_KEY_PREFIX: Final = "ed25519:"


class MachineKeyError(CrossSessionError):
    """A key that cannot be read (wrong format or type)."""


class PublicKey:
    """A machine's public key: checks what it signed. Equal when the raw keys are."""

    __slots__ = ("_verify", "raw")

    def __init__(self, raw: bytes) -> None:
        if len(raw) != PUBLIC_KEY_BYTES:
            raise MachineKeyError(f"a public key is {PUBLIC_KEY_BYTES} bytes")
        self.raw = raw
        self._verify = nacl.signing.VerifyKey(raw)

    def verifies(self, signature: bytes, data: bytes) -> bool:
        """True when ``signature`` is this key's over exactly ``data``."""
        try:
            self._verify.verify(data, signature)
        except (nacl.exceptions.BadSignatureError, ValueError):
            return False
        return True

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PublicKey) and other.raw == self.raw

    def __hash__(self) -> int:
        return hash(self.raw)

    def __repr__(self) -> str:
        return f"PublicKey({public_key_text(self)!r})"


class MachineKey:
    """A machine's private key: signs what its gateway sends."""

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self._key = key
        raw = key.private_bytes(
            serialization.Encoding.Raw,
            serialization.PrivateFormat.Raw,
            serialization.NoEncryption(),
        )
        self._signing = nacl.signing.SigningKey(raw)

    @classmethod
    def generate(cls) -> MachineKey:
        """A new key from the OS's random source."""
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_pem(cls, data: bytes) -> MachineKey:
        """Read a PKCS#8 PEM private key (unencrypted: its file's mode guards it)."""
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError):
            raise MachineKeyError("the machine key file is not a PEM private key") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise MachineKeyError("the machine key is not an Ed25519 key")
        return cls(key)

    def to_pem(self) -> bytes:
        """The private key as PKCS#8 PEM."""
        return self._key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    @property
    def public_key(self) -> PublicKey:
        """The key others verify with."""
        return PublicKey(bytes(self._signing.verify_key))

    def public_text(self) -> str:
        """The public key's text form, for another machine's allow-list."""
        return public_key_text(self.public_key)

    def seal(self, data: bytes) -> bytes:
        """The payload that travels: the signature of ``data``, then ``data``."""
        return self._signing.sign(data).signature + data

    def sign(self, data: bytes) -> bytes:
        """The signature of ``data`` alone (a key rotation's ask carries it apart)."""
        return bytes(self._signing.sign(data).signature)

    def exchange_private(self) -> bytes:
        """The same key as an X25519 private key, for the pairwise keys (:mod:`.pairing`)."""
        return bytes(self._signing.to_curve25519_private_key().encode())


def public_key_text(key: PublicKey) -> str:
    """``ed25519:<base64>`` of a public key."""
    return PUBLIC_KEY_PREFIX + base64.b64encode(key.raw).decode("ascii")


def parse_public_key(text: str) -> PublicKey:
    """A public key from its text form; :class:`MachineKeyError` when it is not one."""
    if not text.startswith(PUBLIC_KEY_PREFIX):
        raise MachineKeyError(f"a public key starts with {PUBLIC_KEY_PREFIX!r}")
    try:
        raw = base64.b64decode(text[len(PUBLIC_KEY_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        raise MachineKeyError("the public key is not base64") from None
    return PublicKey(raw)


def split(payload: bytes, prefix: int = SIGNATURE_BYTES) -> tuple[bytes, bytes] | None:
    """``(signature, signed bytes)`` of a payload whose signature (or MAC) is ``prefix`` bytes,
    or ``None`` when it is too short to hold both."""
    if len(payload) <= prefix:
        return None
    return payload[:prefix], payload[prefix:]
