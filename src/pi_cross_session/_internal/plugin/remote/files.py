"""The gateway's private files, all under ``<agentDir>/cross-session/remote/`` (0700):

* ``machine.json`` — this machine's name (and its public key, for people to read);
* ``machine.key`` — its Ed25519 private key, PKCS#8 PEM, 0600 (it signs envelopes and records);
* ``nats-user.nk`` — its NATS user seed, 0600: a key of its own, so that the machine key never
  signs what a NATS server hands it to sign (the connection's nonce);
* ``nats-user.jwt`` — its user JWT from the deployment (``remote credentials``), when there is one;
* ``trust.json`` — the account, remote inbound on/off and the allow-list, 0600;
* ``joined.json`` — the deployment this machine joined (``remote join``): its servers, its account
  key (which signs the roster) and the account name; ``ca.pem`` — the deployment's CA, as the
  join line's digest vouched for it; ``roster.bin`` — the newest verified roster, as signed;
* ``rotation/`` — while ``remote rotate`` runs (or was interrupted): the new ``machine.key``,
  ``nats-user.nk``, the deployment's ``nats-user.jwt`` for it, then the roster and ``confirmed``
  once the hub confirmed (:func:`finish_rotation`);
* ``gateway.lock`` — held (``flock``) by the one gateway of this agent dir;
* ``remote-peers.json`` — the gateway's snapshot of verified remote sessions (``peers --remote``).

Every file is written atomically at 0600 and read with the registration checks of
:mod:`pi_cross_session._internal.security.io.fs` (ours, a regular file, no group/other bits, bounded
size): a key file another user could read is refused, never used.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from typing import Any, Final

from pi_cross_session._internal.plugin.capped import MAX_SNAPSHOT_BYTES, SNAPSHOT_FILE

# The names of the files are read without the extra too (``remote status``, ``doctor``): one
# definition, there.
from pi_cross_session._internal.plugin.remote_state import (
    JOINED_FILE,
    KEY_FILE,
    LOCK_FILE,
    MACHINE_FILE,
    NATS_JWT_FILE,
    NATS_SEED_FILE,
    REMOTE_DIR,
    TRUST_FILE,
)
from pi_cross_session._internal.protocol.errors import CrossSessionError
from pi_cross_session._internal.protocol.limits import (
    MAX_REGISTRATION_BYTES,
)
from pi_cross_session._internal.protocol.paths import Locations, node_join
from pi_cross_session._internal.protocol.remote.envelope import is_machine_name
from pi_cross_session._internal.security.io import fs
from pi_cross_session._internal.security.io.fs import NotedLock
from pi_cross_session._internal.security.remote import nats_jwt
from pi_cross_session._internal.security.remote.identity import MachineKey
from pi_cross_session._internal.security.remote.nats_jwt import CredentialsError, Jwt, NKey, Role
from pi_cross_session._internal.security.remote.trust import TrustConfig, parse_trust

CA_FILE: Final = "ca.pem"
ROSTER_FILE: Final = "roster.bin"
#: Where a key rotation keeps the new set until it replaces the current one.
ROTATION_DIR: Final = "rotation"
#: In it, once the hub confirmed: the new set is the one to use (:func:`finish_rotation`).
CONFIRMED_FILE: Final = "confirmed"


class RemoteSetupError(CrossSessionError):
    """The remote plane is not set up here (or its files cannot be used)."""

    code = "not_set_up"


def remote_dir(locations: Locations) -> str:
    """``<agentDir>/cross-session/remote``."""
    return node_join(locations.agent_dir, "cross-session", REMOTE_DIR)


def _ensure_dirs(locations: Locations) -> str:
    fs.ensure_private_dir(node_join(locations.agent_dir, "cross-session"))
    directory = remote_dir(locations)
    fs.ensure_private_dir(directory)
    return directory


def ensure_remote_dir(locations: Locations) -> str:
    """Make ``<agentDir>/cross-session/remote`` (0700) if it is not there; its path."""
    return _ensure_dirs(locations)


def _read(locations: Locations, name: str, max_bytes: int = MAX_REGISTRATION_BYTES) -> bytes:
    return fs.read_registration_bytes(node_join(remote_dir(locations), name), max_bytes=max_bytes)


@dataclass(frozen=True, slots=True)
class Identity:
    """This machine: its name, its key, and its NATS user key."""

    machine: str
    key: MachineKey
    nats: NKey

    def card(self) -> str:
        """The line other machines and a deployment read: name, identity key, NATS user key."""
        return f"{self.machine} {self.key.public_text()} nats:{self.nats.public_key}"


def init_identity(locations: Locations, machine: str, *, replace: bool = False) -> Identity:
    """Create this machine's identity (blocking). An existing one is kept unless ``replace``."""
    if not is_machine_name(machine):
        raise RemoteSetupError(
            "a machine name is 1-32 characters of a-z, 0-9 and -, starting and ending with a "
            "letter or digit"
        )
    directory = _ensure_dirs(locations)
    if replace:
        discard_rotation(locations)  # a rotation begun for the identity replaced now
    else:
        try:
            existing = load_identity(locations)
        except RemoteSetupError:
            existing = None
        if existing is not None:
            if existing.machine != machine:
                raise RemoteSetupError(
                    f"this agent dir is already machine {existing.machine!r}; pass --replace to "
                    "make a new identity (every allow-list naming the old key must change)"
                )
            return existing
    key = MachineKey.generate()
    fs.write_private_file(directory, KEY_FILE, key.to_pem())
    _write_machine_file(directory, machine, key)
    nats = _make_nats_key(directory)
    fs.remove_file(node_join(directory, NATS_JWT_FILE))  # it names the old NATS key
    return Identity(machine, key, nats)


def _write_machine_file(directory: str, machine: str, key: MachineKey) -> None:
    body = {"version": 1, "machine": machine, "publicKey": key.public_text()}
    fs.write_private_file(directory, MACHINE_FILE, (json.dumps(body, indent=2) + "\n").encode())


def _make_nats_key(directory: str) -> NKey:
    nats = NKey.generate(Role.USER)
    fs.write_private_file(directory, NATS_SEED_FILE, nats.seed.encode())
    return nats


def _load_nats_key(locations: Locations) -> NKey:
    try:
        seed = _read(locations, NATS_SEED_FILE)
    except fs.FileOperationError as exc:
        if exc.code == "ENOENT":
            # An identity made before machines had NATS keys of their own: make it now.
            return _make_nats_key(_ensure_dirs(locations))
        raise
    try:
        nats = NKey(seed.decode("ascii").strip())
    except (UnicodeDecodeError, CredentialsError):
        raise RemoteSetupError(f"{NATS_SEED_FILE} is not an NKey seed") from None
    if nats.role is not Role.USER:
        raise RemoteSetupError(f"{NATS_SEED_FILE} is not a user seed")
    return nats


def install_nats_jwt(locations: Locations, text: str) -> Jwt:
    """Keep the deployment's user JWT for this machine, once it proves to be for this machine's
    NATS key (blocking)."""
    identity = load_identity(locations)
    try:
        token = nats_jwt.decode(text)
    except CredentialsError as exc:
        raise RemoteSetupError(f"not a NATS user JWT: {exc}") from None
    if token.nats.get("type") != "user":
        raise RemoteSetupError("not a NATS user JWT")
    if token.subject != identity.nats.public_key:
        raise RemoteSetupError(
            f"this JWT is for another NATS key; this machine's is {identity.nats.public_key}"
        )
    fs.write_private_file(_ensure_dirs(locations), NATS_JWT_FILE, (token.text + "\n").encode())
    return token


def load_nats_credentials(locations: Locations) -> str | None:
    """This machine's NATS credentials (the JWT and its seed), or ``None`` when no deployment
    JWT was installed (blocking)."""
    try:
        text = _read(locations, NATS_JWT_FILE).decode("ascii").strip()
    except fs.FileOperationError as exc:
        if exc.code == "ENOENT":
            return None
        raise
    except UnicodeDecodeError:
        raise RemoteSetupError(f"{NATS_JWT_FILE} is not a JWT") from None
    return nats_jwt.creds_text(text, load_identity(locations).nats.seed)


def load_identity(locations: Locations) -> Identity:
    """This machine's identity (blocking); :class:`RemoteSetupError` when there is none. A key
    rotation the hub confirmed and that was cut short here is finished first."""
    if os.path.exists(node_join(rotation_dir(locations), CONFIRMED_FILE)):
        _install_rotation(locations)
    try:
        meta: Any = json.loads(_read(locations, MACHINE_FILE))
        key = MachineKey.from_pem(_read(locations, KEY_FILE))
    except (CrossSessionError, ValueError) as exc:
        raise RemoteSetupError(
            f"no usable machine identity here ({exc}); run 'pi-cross-session remote init'"
        ) from None
    machine = meta.get("machine") if isinstance(meta, dict) else None
    if not isinstance(machine, str) or not is_machine_name(machine):
        raise RemoteSetupError("machine.json does not name a machine")
    return Identity(machine, key, _load_nats_key(locations))


# -- a key rotation (``remote rotate``, :mod:`.rotation`) ------------------------------------------
#
# The current set (machine.key, nats-user.nk, nats-user.jwt) is never touched until the hub has
# confirmed the new one; the new set is complete in rotation/ before ``confirmed`` is written
# there, and whoever loads the identity next finishes copying it into place. So a crash at any
# point leaves a usable set: the old one (not confirmed yet: the hub still takes it) or the new
# one (confirmed: in place, or in rotation/ with ``confirmed`` until the next load copies it).


def rotation_dir(locations: Locations) -> str:
    """``<agentDir>/cross-session/remote/rotation``."""
    return node_join(remote_dir(locations), ROTATION_DIR)


def _rotation_read(locations: Locations, name: str) -> bytes:
    return fs.read_registration_bytes(
        node_join(rotation_dir(locations), name), max_bytes=MAX_REGISTRATION_BYTES
    )


def rotation_identity(locations: Locations, machine: str) -> Identity | None:
    """The new keys of a rotation under way (not confirmed), or ``None`` (blocking)."""
    try:
        key = MachineKey.from_pem(_rotation_read(locations, KEY_FILE))
        nats = NKey(_rotation_read(locations, NATS_SEED_FILE).decode("ascii").strip())
    except fs.FileOperationError as exc:
        if exc.code == "ENOENT":
            return None
        raise
    except (CrossSessionError, UnicodeDecodeError) as exc:
        raise RemoteSetupError(
            f"the new keys of a key rotation cannot be read ({exc}); remove "
            f"{rotation_dir(locations)} and run 'pi-cross-session remote rotate' again"
        ) from None
    if nats.role is not Role.USER:
        raise RemoteSetupError(f"{ROTATION_DIR}/{NATS_SEED_FILE} is not a user seed")
    return Identity(machine, key, nats)


def begin_rotation(locations: Locations, machine: str) -> Identity:
    """New keys for a rotation, kept beside the current ones (blocking)."""
    _ensure_dirs(locations)
    directory = rotation_dir(locations)
    fs.ensure_private_dir(directory)
    fs.remove_file(node_join(directory, NATS_JWT_FILE))  # it names an earlier new key
    key = MachineKey.generate()
    nats = NKey.generate(Role.USER)
    fs.write_private_file(directory, KEY_FILE, key.to_pem())
    fs.write_private_file(directory, NATS_SEED_FILE, nats.seed.encode())
    return Identity(machine, key, nats)


def save_rotation_jwt(locations: Locations, text: str) -> None:
    """Keep the deployment's user JWT for the new NATS key (blocking; the caller checked it)."""
    fs.write_private_file(rotation_dir(locations), NATS_JWT_FILE, (text.strip() + "\n").encode())


def rotation_credentials(locations: Locations, identity: Identity) -> str | None:
    """The new set's NATS credentials, when the hub gave a JWT for them (blocking)."""
    try:
        text = _rotation_read(locations, NATS_JWT_FILE).decode("ascii").strip()
    except fs.FileOperationError as exc:
        if exc.code == "ENOENT":
            return None
        raise
    except UnicodeDecodeError:
        return None
    return nats_jwt.creds_text(text, identity.nats.seed)


def finish_rotation(locations: Locations, sealed_roster: bytes) -> None:
    """The hub confirmed the new set: mark it so, then put it in place (blocking)."""
    directory = rotation_dir(locations)
    fs.write_private_file(directory, ROSTER_FILE, sealed_roster)
    fs.write_private_file(directory, CONFIRMED_FILE, b"confirmed\n")
    _install_rotation(locations)


def _install_rotation(locations: Locations) -> None:
    """Copy a confirmed new set over the current one, then forget it; each copy is atomic and
    the whole may be done again, so an interrupted one is finished by the next."""
    directory = remote_dir(locations)
    try:
        meta: Any = json.loads(_read(locations, MACHINE_FILE))
        machine = meta["machine"]
        key_pem = _rotation_read(locations, KEY_FILE)
        key = MachineKey.from_pem(key_pem)
        seed = _rotation_read(locations, NATS_SEED_FILE)
        jwt = _rotation_read(locations, NATS_JWT_FILE)
        roster = _rotation_read(locations, ROSTER_FILE)
    except (CrossSessionError, ValueError, KeyError, TypeError) as exc:
        raise RemoteSetupError(
            f"a confirmed key rotation cannot be finished ({exc}); see docs/remote.md, "
            "'Rotating a machine's keys'"
        ) from None
    fs.write_private_file(directory, KEY_FILE, key_pem)
    fs.write_private_file(directory, NATS_SEED_FILE, seed)
    fs.write_private_file(directory, NATS_JWT_FILE, jwt)
    _write_machine_file(directory, machine, key)
    fs.write_private_file(directory, ROSTER_FILE, roster)
    # ``confirmed`` first: left without it, the rest is a finished rotation's copy, which the
    # next ``remote rotate`` recognises (its key is the current one) and removes.
    discard_rotation(locations)


def discard_rotation(locations: Locations) -> None:
    """Forget a rotation's files (blocking; none is fine)."""
    directory = rotation_dir(locations)
    if not os.path.isdir(directory):
        return
    for name in (CONFIRMED_FILE, NATS_JWT_FILE, KEY_FILE, NATS_SEED_FILE, ROSTER_FILE):
        fs.remove_file(node_join(directory, name))
    # Something else in it (a temporary file of a write cut short) keeps it: harmless.
    with contextlib.suppress(OSError):
        os.rmdir(directory)


def load_trust(locations: Locations) -> TrustConfig:
    """The trust file, or the default (nobody trusted, inbound off) when there is none."""
    try:
        data = _read(locations, TRUST_FILE)
    except fs.FileOperationError as exc:
        if exc.code == "ENOENT":
            return TrustConfig()
        raise
    return parse_trust(data)


def save_trust(locations: Locations, trust: TrustConfig) -> None:
    """Write the trust file (0600)."""
    fs.write_private_file(_ensure_dirs(locations), TRUST_FILE, trust.to_bytes())


@dataclass(frozen=True, slots=True)
class Joined:
    """The deployment this machine joined: where its servers are, and whose roster to follow."""

    servers: tuple[str, ...]
    deployment: str
    account: str
    #: The servers want the TLS handshake first (a hub's do).
    tls_first: bool = True

    def to_bytes(self) -> bytes:
        body = {
            "version": 1,
            "servers": list(self.servers),
            "deployment": self.deployment,
            "account": self.account,
            "tlsFirst": self.tls_first,
        }
        return (json.dumps(body, indent=2) + "\n").encode()


def save_joined(locations: Locations, joined: Joined, ca_pem: bytes | None) -> None:
    """Keep what ``remote join`` learnt (blocking): the deployment and its CA (``None``: the
    CA kept already)."""
    directory = _ensure_dirs(locations)
    if ca_pem is not None:
        fs.write_private_file(directory, CA_FILE, ca_pem)
    fs.write_private_file(directory, JOINED_FILE, joined.to_bytes())


def load_joined(locations: Locations) -> Joined | None:
    """The deployment this machine joined, or ``None`` when it joined none (blocking)."""
    try:
        body: Any = json.loads(_read(locations, JOINED_FILE))
    except fs.FileOperationError as exc:
        if exc.code == "ENOENT":
            return None
        raise
    except ValueError:
        raise RemoteSetupError(f"{JOINED_FILE} is not JSON") from None
    servers = body.get("servers") if isinstance(body, dict) else None
    deployment, account = (body.get(k) for k in ("deployment", "account"))
    if (
        not isinstance(servers, list)
        or not all(isinstance(url, str) for url in servers)
        or not isinstance(deployment, str)
        or not isinstance(account, str)
    ):
        raise RemoteSetupError(f"{JOINED_FILE} lacks the servers, deployment or account")
    return Joined(tuple(servers), deployment, account, body.get("tlsFirst") is True)


def ca_path(locations: Locations) -> str:
    """Where ``remote join`` keeps the deployment's CA."""
    return node_join(remote_dir(locations), CA_FILE)


def save_roster(locations: Locations, sealed: bytes) -> None:
    """Keep the newest verified roster, as signed (blocking)."""
    fs.write_private_file(_ensure_dirs(locations), ROSTER_FILE, sealed)


def load_roster(locations: Locations, max_bytes: int) -> bytes | None:
    """The roster kept here, as signed (the caller verifies it), or ``None`` (blocking)."""
    try:
        return _read(locations, ROSTER_FILE, max_bytes)
    except fs.FileOperationError as exc:
        if exc.code == "ENOENT":
            return None
        raise


def gateway_lock(locations: Locations) -> NotedLock:
    """The one-gateway-per-agent-dir lock (its holder notes its pid in it: ``remote status``
    reads it)."""
    return NotedLock(node_join(remote_dir(locations), LOCK_FILE))


def write_snapshot(locations: Locations, body: dict[str, Any]) -> None:
    """Replace the remote-sessions snapshot (0600, atomic)."""
    fs.write_private_file(_ensure_dirs(locations), SNAPSHOT_FILE, json.dumps(body).encode())


def read_snapshot(locations: Locations) -> dict[str, Any] | None:
    """The snapshot, or ``None`` when there is none (no gateway ran here)."""
    try:
        data = _read(locations, SNAPSHOT_FILE, MAX_SNAPSHOT_BYTES)
    except fs.FileOperationError as exc:
        if exc.code == "ENOENT":
            return None
        raise
    try:
        body: Any = json.loads(data)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def remove_snapshot(locations: Locations) -> None:
    fs.remove_file(node_join(remote_dir(locations), SNAPSHOT_FILE))
