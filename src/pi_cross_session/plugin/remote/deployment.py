"""A deployment's NATS authorization: its keys, its server configuration, each machine's JWT.

``pi-cross-session remote deploy`` (and, later, the hub) keeps everything here, in one private
directory (0700, every secret 0600):

* ``operator.nk``, ``account.nk``, ``system.nk`` — the deployment's seeds: the operator signs the
  two accounts, the account key signs each machine's user (**the keys a thief would want**:
  docs/security.md says what each can do);
* ``deployment.json`` — the machines admitted (name, NATS user key, identity key) and the revoked;
* ``auth.conf`` — the server configuration's authorization part: the operator JWT, the system
  account, and a resolver preloaded with both account JWTs; ``server.conf`` includes it;
* ``server.conf`` — the server's configuration: where it listens, JetStream, ``max_payload`` for
  a full frame, TLS from ``pki/`` (a private CA, ``remote pki``), and ``auth.conf``;
* ``machines/<name>.jwt`` — each machine's user JWT with its permissions
  (:mod:`~pi_cross_session.security.remote.permissions`); not a secret: it is useless without the
  machine's seed, which never leaves the machine;
* ``admin.creds`` — a user allowed everything in the account (it creates the bucket);
  ``system.creds`` — a system-account user (it pushes a changed account JWT to running servers,
  which is how a revocation takes effect within seconds, on every server of a cluster).

Nothing here names a machine's secret: a machine's credentials are built on the machine, from its
own seed and the JWT this writes from its public key.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pi_cross_session.plugin.remote.natsd import TlsFiles, server_config
from pi_cross_session.protocol.errors import CrossSessionError
from pi_cross_session.protocol.remote.envelope import is_machine_name
from pi_cross_session.protocol.remote.join import JoinAsk, proof_bytes
from pi_cross_session.security.io import fs
from pi_cross_session.security.remote import nats_jwt
from pi_cross_session.security.remote.identity import MachineKeyError, PublicKey, parse_public_key
from pi_cross_session.security.remote.nats_jwt import NKey, Role
from pi_cross_session.security.remote.permissions import join_permissions, machine_permissions
from pi_cross_session.security.remote.roster import Roster

DEPLOYMENT_FILE: Final = "deployment.json"
AUTH_FILE: Final = "auth.conf"
SERVER_FILE: Final = "server.conf"
PKI_DIR: Final = "pki"
#: Where a deployment's server listens unless told otherwise.
DEFAULT_LISTEN: Final = "0.0.0.0:4222"
MACHINES_DIR: Final = "machines"
ADMIN_CREDS: Final = "admin.creds"
SYSTEM_CREDS: Final = "system.creds"
#: The account every machine's user belongs to (also the name bound into every signature).
ACCOUNT_NAME: Final = "pi-xs"
#: How a machine card names its NATS user key.
NATS_KEY_PREFIX: Final = "nats:"
_SEEDS: Final = {"operator": Role.OPERATOR, "account": Role.ACCOUNT, "system": Role.ACCOUNT}
#: The largest file of a deployment (the auth part holds two account JWTs and the operator's; a
#: revocation list of thousands of machines stays far below).
_MAX_FILE_BYTES: Final = 4 * 1024 * 1024


class DeploymentError(CrossSessionError):
    """A deployment directory or machine card that cannot be used."""

    code = "bad_deployment"


class AdmissionRefusedError(DeploymentError):
    """A machine the hub does not admit: ``code`` says why (it travels back to the joiner)."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code


@dataclass(frozen=True, slots=True)
class MachineCard:
    """What a machine says of itself: its name, its NATS user key, and its identity key."""

    name: str
    nats_key: str
    identity_key: str | None = None

    @classmethod
    def parse(cls, line: str) -> MachineCard:
        """Read ``<name> [ed25519:…] nats:U…`` (what ``remote show`` prints)."""
        words = line.split()
        if not words or not is_machine_name(words[0]):
            raise DeploymentError("a machine card starts with the machine's name")
        nats_key = identity = None
        for word in words[1:]:
            if word.startswith(NATS_KEY_PREFIX):
                nats_key = word[len(NATS_KEY_PREFIX) :]
            else:
                identity = word
        if nats_key is None:
            raise DeploymentError(
                f"the card of {words[0]} has no NATS key (nats:U…); print it with "
                "'pi-cross-session remote show' on that machine"
            )
        try:
            if nats_jwt.public_key_role(nats_key) is not Role.USER:
                raise DeploymentError(f"the NATS key of {words[0]} is not a user key (U…)")
            if identity is not None:
                parse_public_key(identity)
        except (nats_jwt.CredentialsError, MachineKeyError) as exc:
            raise DeploymentError(f"the card of {words[0]}: {exc}") from None
        return cls(words[0], nats_key, identity)

    def to_json(self) -> dict[str, Any]:
        return {"natsKey": self.nats_key, "identityKey": self.identity_key}


@dataclass(slots=True)
class Deployment:
    """One deployment directory, loaded; change it, then :meth:`save`."""

    directory: Path
    operator: NKey
    account: NKey
    system: NKey
    machines: dict[str, MachineCard] = field(default_factory=dict)
    #: Revoked user keys and the time (epoch s) before which their JWTs no longer count.
    revoked: dict[str, int] = field(default_factory=dict)
    #: Where the server listens, and the names or addresses machines reach it by.
    listen: str = DEFAULT_LISTEN
    hosts: list[str] = field(default_factory=list)
    #: Open invitations: each one's public key (a scoped signing key of the account) and the
    #: time (epoch s) it lapses. Its seed is printed once, in the join line, and kept nowhere.
    invitations: dict[str, int] = field(default_factory=dict)
    #: The ``seq`` of the roster as of the last save: every save makes a newer one (epoch ms, or
    #: one more than the last when the clock went back), so gateways take it over the older.
    roster_seq: int = 0
    #: Clients must open with the TLS handshake (a hub's deployment: every machine that joined
    #: knows to); ``remote deploy``'s leave it off for clients configured by hand.
    tls_first: bool = False

    # -- loading and saving ----------------------------------------------------------------------

    @classmethod
    def open(cls, directory: str | Path, *, create: bool = False) -> Deployment:
        """Load the deployment in ``directory``; with ``create``, make its keys if it has none."""
        path = Path(directory)
        if create:
            path.mkdir(parents=True, exist_ok=True)
        fs.ensure_private_dir(str(path))
        seeds: dict[str, NKey] = {}
        for stem, role in _SEEDS.items():
            seeds[stem] = _load_or_make_seed(path, f"{stem}.nk", role, create=create)
        deployment = cls(path, seeds["operator"], seeds["account"], seeds["system"])
        try:
            body: Any = json.loads(_read(path / DEPLOYMENT_FILE))
        except fs.FileOperationError as exc:
            if exc.code != "ENOENT" or not create:
                raise DeploymentError(f"no deployment in {path}: {exc}") from None
            return deployment
        except ValueError:
            raise DeploymentError(f"{DEPLOYMENT_FILE} is not JSON") from None
        deployment._read_body(body)
        return deployment

    def _read_body(self, body: Any) -> None:
        if not isinstance(body, dict) or body.get("version") != 1:
            raise DeploymentError(f"{DEPLOYMENT_FILE} is not version 1")
        machines, revoked = body.get("machines"), body.get("revoked")
        if not isinstance(machines, dict) or not isinstance(revoked, dict):
            raise DeploymentError(f"{DEPLOYMENT_FILE} lacks its machines or revocations")
        for name, entry in machines.items():
            if not isinstance(entry, dict) or not isinstance(entry.get("natsKey"), str):
                raise DeploymentError(f"{DEPLOYMENT_FILE}: machine {name!r} has no NATS key")
            identity = entry.get("identityKey")
            words = [name, *([identity] if isinstance(identity, str) else [])]
            self.machines[name] = MachineCard.parse(" ".join([*words, "nats:" + entry["natsKey"]]))
        for key, when in revoked.items():
            if not isinstance(key, str) or not isinstance(when, int):
                raise DeploymentError(f"{DEPLOYMENT_FILE}: a revocation is not a key and a time")
            self.revoked[key] = when
        server = body.get("server", {})
        listen, hosts = server.get("listen"), server.get("hosts")
        if isinstance(listen, str):
            self.listen = listen
        if isinstance(hosts, list) and all(isinstance(h, str) for h in hosts):
            self.hosts = list(hosts)
        self.tls_first = server.get("tlsFirst") is True
        invitations = body.get("invitations", {})
        if not isinstance(invitations, dict) or not all(
            isinstance(k, str) and isinstance(v, int) for k, v in invitations.items()
        ):
            raise DeploymentError(f"{DEPLOYMENT_FILE}: an invitation is not a key and a time")
        self.invitations = dict(invitations)
        roster_seq = body.get("rosterSeq", 0)
        if not isinstance(roster_seq, int) or roster_seq < 0:
            raise DeploymentError(f"{DEPLOYMENT_FILE}: rosterSeq is not a count")
        self.roster_seq = roster_seq

    def save(self, *, now: int) -> None:
        """Write every file from the current state (``now``: epoch seconds, the JWTs' time)."""
        directory = str(self.directory)
        self.roster_seq = max(self.roster_seq + 1, now * 1000)
        body = {
            "version": 1,
            "account": self.account.public_key,
            "machines": {name: card.to_json() for name, card in sorted(self.machines.items())},
            "revoked": dict(sorted(self.revoked.items())),
            "server": {"listen": self.listen, "hosts": self.hosts, "tlsFirst": self.tls_first},
            "invitations": dict(sorted(self.invitations.items())),
            "rosterSeq": self.roster_seq,
        }
        fs.write_private_file(directory, DEPLOYMENT_FILE, _json(body))
        fs.write_private_file(directory, AUTH_FILE, self.auth_config(now=now).encode())
        fs.write_private_file(directory, SERVER_FILE, self.server_config().encode())
        machines_dir = self.directory / MACHINES_DIR
        machines_dir.mkdir(exist_ok=True)
        fs.ensure_private_dir(str(machines_dir))
        for name in list(self.machines):
            fs.write_private_file(str(machines_dir), f"{name}.jwt", self.machine_jwt(name, now=now))
        for stale in machines_dir.glob("*.jwt"):
            if stale.stem not in self.machines:
                fs.remove_file(str(stale))
        admin = NKey.generate(Role.USER)
        fs.write_private_file(
            directory, ADMIN_CREDS, self._creds(self.account, admin, "admin", now)
        )
        system = NKey.generate(Role.USER)
        fs.write_private_file(
            directory, SYSTEM_CREDS, self._creds(self.system, system, "system", now)
        )

    # -- machines --------------------------------------------------------------------------------

    def admit(self, card: MachineCard, *, now: int) -> None:
        """Add (or update) a machine. A key revoked earlier stays revoked; a machine that comes
        with a new NATS key has its old one revoked (whoever holds it is no longer that
        machine)."""
        if card.nats_key in self.revoked:
            raise DeploymentError(
                f"the NATS key of {card.name} was revoked; that machine needs a new identity "
                "('pi-cross-session remote init --replace')"
            )
        earlier = self.machines.get(card.name)
        if earlier is not None and earlier.nats_key != card.nats_key:
            self.revoked[earlier.nats_key] = now
        self.machines[card.name] = card

    def revoke(self, name: str, *, now: int) -> MachineCard:
        """Remove ``name`` and revoke every JWT of its user key issued up to ``now``."""
        card = self.machines.pop(name, None)
        if card is None:
            raise DeploymentError(f"no machine named {name} in this deployment")
        self.revoked[card.nats_key] = now
        return card

    # -- joining by invitation -------------------------------------------------------------------

    def invite(self, *, now: int, valid_s: int) -> NKey:
        """A new invitation, valid ``valid_s`` seconds from ``now``: its seed goes into one join
        line (:class:`~pi_cross_session.protocol.remote.join.JoinLine`); the account lists its
        public key as a scoped signing key once saved and pushed."""
        self.drop_lapsed(now=now)
        key = NKey.generate(Role.ACCOUNT)
        self.invitations[key.public_key] = now + valid_s
        return key

    def drop_lapsed(self, *, now: int) -> list[str]:
        """Forget the invitations whose time is up; their keys."""
        lapsed = [key for key, until in self.invitations.items() if until <= now]
        for key in lapsed:
            del self.invitations[key]
        return lapsed

    def admit_by_invitation(self, ask: JoinAsk, *, now: int) -> MachineCard:
        """Admit the machine of ``ask`` when its invitation is open and its proof holds; the
        invitation is used up (a second ask with it is refused). :class:`AdmissionRefusedError`
        says why not."""
        until = self.invitations.get(ask.invitation)
        if until is None or until <= now:
            raise AdmissionRefusedError(
                "invitation_unknown",
                "this join line was used already, has lapsed or is not this hub's: print a new "
                "one on the hub ('pi-cross-session remote invite')",
            )
        try:
            proof = base64.b64decode(ask.proof, validate=True)
            invitation = PublicKey(nats_jwt.public_key_bytes(ask.invitation))
        except (binascii.Error, ValueError, nats_jwt.CredentialsError, MachineKeyError):
            proof, invitation = b"", None
        if invitation is None or not invitation.verifies(proof, proof_bytes(ask.card)):
            raise AdmissionRefusedError(
                "bad_proof", "the join token does not prove this invitation"
            )
        try:
            card = MachineCard.parse(ask.card)
        except DeploymentError as exc:
            raise AdmissionRefusedError("bad_card", str(exc)) from None
        if card.identity_key is None:
            raise AdmissionRefusedError("bad_card", f"the card of {card.name} has no identity key")
        if any(
            other.nats_key == card.nats_key and name != card.name
            for name, other in self.machines.items()
        ):
            raise AdmissionRefusedError(
                "bad_card", f"the NATS key of {card.name} belongs to another machine here"
            )
        earlier = self.machines.get(card.name)
        if earlier is not None and earlier != card:
            raise AdmissionRefusedError(
                "name_taken",
                f"another machine is already {card.name} in this deployment: choose another "
                "name, or on the hub revoke it first "
                f"('pi-cross-session remote revoke {card.name}')",
            )
        try:
            self.admit(card, now=now)
        except DeploymentError as exc:  # its NATS key was revoked
            raise AdmissionRefusedError("revoked", str(exc)) from None
        del self.invitations[ask.invitation]
        return card

    def roster(self, *, seq: int) -> Roster:
        """The machines this deployment vouches for (those admitted with an identity key)."""
        machines = {
            name: parse_public_key(card.identity_key)
            for name, card in self.machines.items()
            if card.identity_key is not None
        }
        return Roster(self.account.public_key, ACCOUNT_NAME, seq, machines)

    def sealed_roster(self, *, seq: int) -> bytes:
        """The roster as it travels: the account key's signature, then the roster."""
        data = self.roster(seq=seq).to_bytes()
        return self.account.sign(data) + data

    # -- what the files hold ---------------------------------------------------------------------

    def account_jwt(self, *, now: int) -> str:
        return nats_jwt.account_jwt(
            self.operator,
            self.account.public_key,
            name=ACCOUNT_NAME,
            issued_at=now,
            jetstream=True,
            revocations=self.revoked,
            scoped_signers={key: join_permissions() for key in self.invitations},
        )

    def machine_jwt(self, name: str, *, now: int) -> bytes:
        card = self.machines[name]
        token = nats_jwt.user_jwt(
            self.account,
            card.nats_key,
            name=name,
            issued_at=now,
            permissions=machine_permissions(name),
        )
        return (token + "\n").encode()

    def auth_config(self, *, now: int, resolver_dir: Path | None = None) -> str:
        """The server configuration's authorization part (``resolver_dir`` defaults to ``jwt``
        beside it)."""
        system_jwt = nats_jwt.account_jwt(
            self.operator, self.system.public_key, name="SYS", issued_at=now, jetstream=False
        )
        operator = nats_jwt.operator_jwt(
            self.operator, name=ACCOUNT_NAME, system_account=self.system.public_key, issued_at=now
        )
        where = resolver_dir if resolver_dir is not None else self.directory / "jwt"
        return (
            f"operator: {operator}\n"
            f"system_account: {self.system.public_key}\n"
            f'resolver: {{ type: full, dir: "{where}", allow_delete: false, interval: "2m", '
            'timeout: "1.9s" }\n'
            "resolver_preload: {\n"
            f"  {self.system.public_key}: {system_jwt}\n"
            f"  {self.account.public_key}: {self.account_jwt(now=now)}\n"
            "}\n"
        )

    def server_config(self) -> str:
        """The server's configuration: JetStream, TLS from the deployment's CA when it has one,
        and the authorization part (included, so admitting a machine rewrites only that)."""
        pki_dir = self.directory / PKI_DIR
        tls = None
        if (pki_dir / "server.pem").exists():
            tls = TlsFiles(cert=str(pki_dir / "server.pem"), key=str(pki_dir / "server-key.pem"))
        return server_config(
            name="pi-xs-1",
            listen=self.listen,
            store_dir=self.directory / "jetstream",
            tls=tls,
            tls_first=self.tls_first and tls is not None,
            auth=f'include "{AUTH_FILE}"',
        )

    @property
    def ca(self) -> Path | None:
        """The CA machines verify the server with, when the deployment has one."""
        path = self.directory / PKI_DIR / "ca.pem"
        return path if path.exists() else None

    @staticmethod
    def _creds(account: NKey, user: NKey, name: str, now: int) -> bytes:
        token = nats_jwt.user_jwt(
            account, user.public_key, name=name, issued_at=now, permissions=None
        )
        return nats_jwt.creds_text(token, user.seed).encode()

    @property
    def admin_creds(self) -> Path:
        return self.directory / ADMIN_CREDS

    @property
    def system_creds(self) -> Path:
        return self.directory / SYSTEM_CREDS

    def machine_jwt_path(self, name: str) -> Path:
        return self.directory / MACHINES_DIR / f"{name}.jwt"


def _json(body: dict[str, Any]) -> bytes:
    return (json.dumps(body, indent=2) + "\n").encode()


def _read(path: Path) -> bytes:
    return fs.read_registration_bytes(str(path), max_bytes=_MAX_FILE_BYTES)


def _load_or_make_seed(directory: Path, name: str, role: Role, *, create: bool) -> NKey:
    try:
        key = NKey(_read(directory / name).decode("ascii").strip())
    except fs.FileOperationError as exc:
        if exc.code != "ENOENT" or not create:
            raise DeploymentError(f"cannot read {name}: {exc}") from None
        key = NKey.generate(role)
        fs.write_private_file(str(directory), name, key.seed.encode())
        return key
    except (UnicodeDecodeError, nats_jwt.CredentialsError):
        raise DeploymentError(f"{name} is not an NKey seed") from None
    if key.role is not role:
        raise DeploymentError(f"{name} is not an {role.name.lower()} seed")
    return key
