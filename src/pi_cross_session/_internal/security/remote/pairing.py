"""Pairwise keys: what authenticates a request or a reply between two machines.

A record goes to every machine, so it is signed (:mod:`.identity`). A request or a reply goes to one
machine, so it carries a MAC instead: an HMAC-SHA256 under a key that only its two machines can
compute. Each machine's Ed25519 identity key, already trusted, is also an X25519 key (libsodium's
conversion), so no new key is published or trusted: the pair's Diffie-Hellman secret, through
HKDF over the account and both machines' names and keys, gives one key per direction. A MAC costs
about a microsecond where a signature and its verification cost about 65 µs, and every remote send
made two of each (docs/performance.md, "Remote plane", has the figures side by side).

What it does not give, and why that is enough: a MAC proves its origin only to the other machine of
the pair, never to a third; nothing here is shown to a third machine. And, as with any MAC the
receiver can check, the receiver can make it too: a holder of machine B's identity key can make
MACs B takes as coming from any machine B trusts (with signatures it could only speak as B). To
use them it must also publish on that machine's request subject, which a deployment's permissions
allow only that machine's NATS credentials; ``remote rotate`` on B ends it (docs/security.md).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from typing import Final

import nacl.bindings
import nacl.exceptions
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from pi_cross_session._internal.security.remote.identity import MachineKey, PublicKey

#: Length of a MAC, and so of a request's or a reply's prefix on NATS.
MAC_BYTES: Final = 32
#: What the derivation is for; a key made for anything else never equals one of these.
_SALT: Final = b"pi-xs.v1 pairwise request and reply keys"


class MacKey:
    """One direction's key: makes or checks the MAC of the bytes as sent."""

    __slots__ = ("_key",)

    def __init__(self, key: bytes) -> None:
        self._key = key

    def mac(self, data: bytes) -> bytes:
        """The MAC of ``data``."""
        return hmac.digest(self._key, data, hashlib.sha256)

    def seal(self, data: bytes) -> bytes:
        """The payload that travels: the MAC of ``data``, then ``data``."""
        return self.mac(data) + data

    def verifies(self, tag: bytes, data: bytes) -> bool:
        """True when ``tag`` is this key's MAC of exactly ``data`` (compared in constant time)."""
        return hmac.compare_digest(self.mac(data), tag)


class Pair:
    """The two keys between this machine and one other: to send with, and to check with."""

    __slots__ = ("receiving", "sending")

    def __init__(self, sending: MacKey, receiving: MacKey) -> None:
        self.sending = sending
        self.receiving = receiving


def _field(value: bytes) -> bytes:
    return len(value).to_bytes(2, "big") + value


def _direction_key(
    secret: bytes, account: str, sender: str, sender_key: PublicKey, to: str, to_key: PublicKey
) -> MacKey:
    info = b"".join(
        _field(part)
        for part in (
            account.encode(),
            sender.encode(),
            sender_key.raw,
            to.encode(),
            to_key.raw,
        )
    )
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=_SALT, info=info).derive(secret)
    return MacKey(derived)


def derive_pair(
    *, account: str, me: str, key: MachineKey, other: str, other_key: PublicKey
) -> Pair | None:
    """The keys between ``me`` (holding ``key``) and ``other``; ``None`` when ``other_key`` is no
    usable key (a point of small order, whose shared secret an attacker would know), or when
    ``other`` is ``me`` (both directions would share one key)."""
    if other == me:
        return None
    try:
        their_x25519 = nacl.bindings.crypto_sign_ed25519_pk_to_curve25519(other_key.raw)
        secret = nacl.bindings.crypto_scalarmult(key.exchange_private(), their_x25519)
    except (nacl.exceptions.CryptoError, ValueError):
        return None
    if not any(secret):
        return None
    mine = key.public_key
    return Pair(
        sending=_direction_key(secret, account, me, mine, other, other_key),
        receiving=_direction_key(secret, account, other, other_key, me, mine),
    )


class Pairs:
    """This machine's pairs, each derived once for a machine and its current key (a Diffie-Hellman
    costs about 100 µs, a send about 3 ms). Holds one pair per trusted machine at most: call
    :meth:`keep` when the trusted set changes."""

    def __init__(self, *, account: str, me: str, key: MachineKey) -> None:
        self._account = account
        self._me = me
        self._key = key
        self._pairs: dict[str, tuple[PublicKey, Pair | None]] = {}

    def pair(self, other: str, other_key: PublicKey) -> Pair | None:
        """The pair with ``other`` under ``other_key`` (``None``: that key cannot pair)."""
        known = self._pairs.get(other)
        if known is not None and known[0] == other_key:
            return known[1]
        pair = derive_pair(
            account=self._account, me=self._me, key=self._key, other=other, other_key=other_key
        )
        self._pairs[other] = (other_key, pair)
        return pair

    def seal(self, other: str, other_key: PublicKey | None, data: bytes) -> bytes | None:
        """``data`` as it travels to ``other``: behind the MAC ``other`` checks it by. ``None``
        when ``other`` is not trusted (``other_key`` is ``None``) or its key cannot pair."""
        pair = None if other_key is None else self.pair(other, other_key)
        return None if pair is None else pair.sending.seal(data)

    def keep(self, account: str, machines: Mapping[str, PublicKey]) -> None:
        """Forget the pairs of machines no longer trusted, or trusted under another key; all of
        them when the account changed."""
        if account != self._account:
            self._account = account
            self._pairs.clear()
            return
        for other in [o for o, (k, _) in self._pairs.items() if machines.get(o) != k]:
            del self._pairs[other]
