"""Machine identities: Ed25519 keys, their text form, and signing the bytes as sent.

A machine's private key is kept as PKCS#8 PEM (the file layer writes it 0600); its public key is
shared as ``ed25519:<base64 of the 32 raw bytes>``, one line a user can paste into another
machine's allow-list. On NATS a payload is the 64-byte signature followed by the envelope's exact
bytes: the signature covers what travels, so no canonical form is needed.
"""

from __future__ import annotations

import base64
import binascii
from typing import Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from pi_cross_session.protocol.errors import CrossSessionError

#: Length of an Ed25519 signature, and so of the payload's prefix.
SIGNATURE_BYTES: Final = 64
#: Length of a raw Ed25519 public key.
PUBLIC_KEY_BYTES: Final = 32
#: How a public key's text form starts.
PUBLIC_KEY_PREFIX: Final = "ed25519:"


class MachineKeyError(CrossSessionError):
    """A key that cannot be read (wrong format or type)."""


class MachineKey:
    """A machine's private key: signs what its gateway sends."""

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self._key = key

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
    def public_key(self) -> Ed25519PublicKey:
        """The key others verify with."""
        return self._key.public_key()

    def public_text(self) -> str:
        """The public key's text form, for another machine's allow-list."""
        return public_key_text(self.public_key)

    def seal(self, data: bytes) -> bytes:
        """The payload that travels: the signature of ``data``, then ``data``."""
        return self._key.sign(data) + data


def public_key_text(key: Ed25519PublicKey) -> str:
    """``ed25519:<base64>`` of a public key."""
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return PUBLIC_KEY_PREFIX + base64.b64encode(raw).decode("ascii")


def parse_public_key(text: str) -> Ed25519PublicKey:
    """A public key from its text form; :class:`MachineKeyError` when it is not one."""
    if not text.startswith(PUBLIC_KEY_PREFIX):
        raise MachineKeyError(f"a public key starts with {PUBLIC_KEY_PREFIX!r}")
    try:
        raw = base64.b64decode(text[len(PUBLIC_KEY_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        raise MachineKeyError("the public key is not base64") from None
    if len(raw) != PUBLIC_KEY_BYTES:
        raise MachineKeyError(f"a public key is {PUBLIC_KEY_BYTES} bytes")
    return Ed25519PublicKey.from_public_bytes(raw)


def split(payload: bytes) -> tuple[bytes, bytes] | None:
    """``(signature, signed bytes)`` of a payload, or ``None`` when it is too short to hold both."""
    if len(payload) <= SIGNATURE_BYTES:
        return None
    return payload[:SIGNATURE_BYTES], payload[SIGNATURE_BYTES:]


def verifies(key: Ed25519PublicKey, signature: bytes, data: bytes) -> bool:
    """True when ``signature`` is ``key``'s over exactly ``data``."""
    try:
        key.verify(signature, data)
    except InvalidSignature:
        return False
    return True
