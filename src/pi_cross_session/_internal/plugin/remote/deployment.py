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
  (:mod:`~pi_cross_session._internal.security.remote.permissions`); not a secret: it is useless
  without the machine's seed, which never leaves the machine;
* ``admin.creds`` — a user allowed everything in the account (it creates the bucket);
  ``system.creds`` — a system-account user (it pushes a changed account JWT to running servers,
  which is how a revocation takes effect within seconds, on every server of a cluster).

Nothing here names a machine's secret: a machine's credentials are built on the machine, from its
own seed and the JWT this writes from its public key.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pi_cross_session._internal.plugin.remote.natsd import TlsFiles, server_config
from pi_cross_session._internal.plugin.render import remote_plane
from pi_cross_session._internal.protocol.errors import CrossSessionError
from pi_cross_session._internal.protocol.remote.envelope import is_machine_name
from pi_cross_session._internal.protocol.remote.join import (
    JoinAsk,
    ServeAsk,
    ServeGrant,
    proof_bytes,
)
from pi_cross_session._internal.protocol.remote.rotate import RotateAsk
from pi_cross_session._internal.protocol.remote.settings import (
    ROTATE_KEYS_PER_WINDOW,
    ROTATE_WINDOW_S,
)
from pi_cross_session._internal.security.io import fs
from pi_cross_session._internal.security.remote import nats_jwt
from pi_cross_session._internal.security.remote.identity import (
    MachineKeyError,
    PublicKey,
    parse_public_key,
)
from pi_cross_session._internal.security.remote.nats_jwt import NKey, Role
from pi_cross_session._internal.security.remote.permissions import (
    join_permissions,
    machine_permissions,
)
from pi_cross_session._internal.security.remote.roster import Roster
from pi_cross_session._internal.security.remote.rotation import (
    BAD_CARD,
    NO_ROTATION,
    TOO_SOON,
    UNKNOWN_MACHINE,
    RotationRefusedError,
    check_ask,
)

DEPLOYMENT_FILE: Final = "deployment.json"
AUTH_FILE: Final = "auth.conf"
SERVER_FILE: Final = "server.conf"
PKI_DIR: Final = "pki"
#: Where a deployment's server listens unless told otherwise.
DEFAULT_LISTEN: Final = "0.0.0.0:4222"
#: Where a deployment's server listens for the routes of its other servers (once it has any).
DEFAULT_CLUSTER_LISTEN: Final = "0.0.0.0:6222"
#: The name of the hub's own server; servers added later are ``pi-xs-2``, ``pi-xs-3``, ….
FIRST_SERVER: Final = "pi-xs-1"
#: Servers in one deployment at most: NATS clusters of three or five are the usual; more
#: servers than that is a supercluster's job (docs/remote.md, "How far it carries").
MAX_SERVERS: Final = 5
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


@dataclass(frozen=True, slots=True)
class MemberServer:
    """A server added to the deployment after the hub's own: the machine it runs on, and the
    ``host:port`` clients and the other servers reach it by."""

    machine: str
    client: str
    cluster: str

    def to_json(self) -> dict[str, str]:
        return {"machine": self.machine, "client": self.client, "cluster": self.cluster}


@dataclass(frozen=True, slots=True)
class Rotating:
    """A machine's new card, asked for and not confirmed yet, and when it was asked (epoch ms,
    the machine's clock): an ask made no later is stale."""

    card: MachineCard
    at: int

    def to_json(self) -> dict[str, Any]:
        return {**self.card.to_json(), "at": self.at}


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
    #: Where the hub's server listens for routes, and the servers added after it, by name.
    cluster_listen: str = DEFAULT_CLUSTER_LISTEN
    members: dict[str, MemberServer] = field(default_factory=dict)
    #: The open invitations (keys of :attr:`invitations`) that admit a server, not a machine.
    server_invitations: set[str] = field(default_factory=set)
    #: How many servers were ever added (names are never reused).
    servers_named: int = 0
    #: Key rotations asked for and not confirmed yet, by machine (:meth:`rotate`).
    rotating: dict[str, Rotating] = field(default_factory=dict)
    #: When (epoch s, this hub's clock) :meth:`rotate` gave each machine a new key, within the
    #: last ``ROTATE_WINDOW_S``: at most ``ROTATE_KEYS_PER_WINDOW`` each.
    rotation_keys: dict[str, list[int]] = field(default_factory=dict)

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
        cluster_listen = server.get("clusterListen")
        if isinstance(cluster_listen, str):
            self.cluster_listen = cluster_listen
        members = server.get("members", {})
        try:
            self.members = {
                name: MemberServer(m["machine"], m["client"], m["cluster"])
                for name, m in members.items()
            }
        except (AttributeError, KeyError, TypeError):
            raise DeploymentError(f"{DEPLOYMENT_FILE}: a server is not described") from None
        if not all(
            isinstance(name, str) and all(isinstance(v, str) for v in m.to_json().values())
            for name, m in self.members.items()
        ):
            raise DeploymentError(f"{DEPLOYMENT_FILE}: a server is not described")
        invitations = body.get("invitations", {})
        if not isinstance(invitations, dict) or not all(
            isinstance(k, str) and isinstance(v, int) for k, v in invitations.items()
        ):
            raise DeploymentError(f"{DEPLOYMENT_FILE}: an invitation is not a key and a time")
        self.invitations = dict(invitations)
        server_invitations = body.get("serverInvitations", [])
        if not isinstance(server_invitations, list):
            raise DeploymentError(f"{DEPLOYMENT_FILE}: serverInvitations is not a list")
        self.server_invitations = {k for k in server_invitations if k in self.invitations}
        named = body.get("serversNamed", 0)
        if not isinstance(named, int) or named < 0:
            raise DeploymentError(f"{DEPLOYMENT_FILE}: serversNamed is not a count")
        self.servers_named = max(named, len(self.members))
        roster_seq = body.get("rosterSeq", 0)
        if not isinstance(roster_seq, int) or roster_seq < 0:
            raise DeploymentError(f"{DEPLOYMENT_FILE}: rosterSeq is not a count")
        self.roster_seq = roster_seq
        self.rotating = _read_rotating(body.get("rotating", {}))
        keys = body.get("rotationKeys", {})
        if not isinstance(keys, dict) or not all(
            isinstance(times, list) and all(type(t) is int for t in times)
            for times in keys.values()
        ):
            raise DeploymentError(f"{DEPLOYMENT_FILE}: rotationKeys is not lists of times")
        self.rotation_keys = {name: list(times) for name, times in keys.items()}

    def save(self, *, now: int) -> None:
        """Write every file from the current state (``now``: epoch seconds, the JWTs' time)."""
        directory = str(self.directory)
        self.roster_seq = max(self.roster_seq + 1, now * 1000)
        body = {
            "version": 1,
            "account": self.account.public_key,
            "machines": {name: card.to_json() for name, card in sorted(self.machines.items())},
            "revoked": dict(sorted(self.revoked.items())),
            "server": {
                "listen": self.listen,
                "hosts": self.hosts,
                "tlsFirst": self.tls_first,
                "clusterListen": self.cluster_listen,
                "members": {name: m.to_json() for name, m in sorted(self.members.items())},
            },
            "invitations": dict(sorted(self.invitations.items())),
            "serverInvitations": sorted(self.server_invitations),
            "serversNamed": self.servers_named,
            "rosterSeq": self.roster_seq,
            "rotating": {name: r.to_json() for name, r in sorted(self.rotating.items())},
            "rotationKeys": {
                name: recent
                for name, given in sorted(self.rotation_keys.items())
                if name in self.machines
                and (recent := [t for t in given if t > now - ROTATE_WINDOW_S])
            },
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
        pending = self.rotating.pop(name, None)
        if pending is not None:  # its JWT was handed out: it goes too
            self.revoked[pending.card.nats_key] = now
        # A server it ran is no longer routed to (its certificate stays good: docs/security.md).
        for server in [n for n, m in self.members.items() if m.machine == name]:
            del self.members[server]
        return card

    # -- rotating a machine's keys (docs/remote.md, "Rotating a machine's keys") -----------------

    def rotate(self, origin: str, ask: RotateAsk, *, now_ms: int) -> str:
        """The first step: ``origin`` (the machine the subject names), signing with its current
        identity key, names its new card. The card is kept as pending (a pending one before is
        replaced, and its NATS key revoked) and nothing else changes; the user JWT of the new
        NATS key, which the machine confirms with. :class:`RotationRefusedError` says why not:
        among others ``too_soon``, once the machine was given ``ROTATE_KEYS_PER_WINDOW`` new keys
        within ``ROTATE_WINDOW_S`` (each is revoked for good later, and revocations stay in the
        account JWT); the same card asked for again costs nothing."""
        current = self._rotating_machine(origin)
        earlier = self.rotating.get(origin)
        check_ask(
            ask,
            origin=origin,
            deployment=self.account.public_key,
            signer=parse_public_key(current.identity_key or ""),
            now_ms=now_ms,
            after_ms=None if earlier is None else earlier.at,
        )
        card = self._new_card(origin, ask.card, current)
        now = now_ms // 1000
        if earlier is None or earlier.card.nats_key != card.nats_key:
            # A new key, revoked for good later (this one or the machine's old one): a few a day.
            given = [t for t in self.rotation_keys.get(origin, []) if t > now - ROTATE_WINDOW_S]
            if len(given) >= ROTATE_KEYS_PER_WINDOW:
                raise RotationRefusedError(
                    remote_plane.rotate_too_soon(
                        origin,
                        len(given),
                        ROTATE_WINDOW_S,
                        until=min(given) + ROTATE_WINDOW_S,
                        now=now,
                    ),
                    code=TOO_SOON,
                )
            self.rotation_keys[origin] = [*given, now]
        if earlier is not None and earlier.card.nats_key != card.nats_key:
            self.revoked[earlier.card.nats_key] = now
        self.rotating[origin] = Rotating(card, ask.at)
        return self._user_jwt(card, now=now)

    def confirm_rotation(self, origin: str, ask: RotateAsk, *, now_ms: int) -> bool:
        """The second step: ``origin``, signing with the new identity key of its pending card,
        confirms it. The card replaces the machine's, whose NATS key is revoked (push the
        account) and whose identity key leaves the roster. True when this changed the
        deployment; False when it was confirmed already (the answer was lost: answer again)."""
        current = self._rotating_machine(origin)
        pending = self.rotating.get(origin)
        target = pending.card if pending is not None else current
        if not _same_card(ask.card, target):
            raise RotationRefusedError(
                f"no rotation of {origin}'s keys to this card is pending (the hub took another, "
                "or none): run 'pi-cross-session remote rotate' again",
                code=NO_ROTATION,
            )
        check_ask(
            ask,
            origin=origin,
            deployment=self.account.public_key,
            signer=parse_public_key(target.identity_key or ""),
            now_ms=now_ms,
            after_ms=None if pending is None else pending.at - 1,
        )
        if pending is None:
            return False
        del self.rotating[origin]
        self.admit(pending.card, now=now_ms // 1000)  # the old NATS key is revoked there
        return True

    def _rotating_machine(self, origin: str) -> MachineCard:
        current = self.machines.get(origin)
        if current is None or current.identity_key is None:
            raise RotationRefusedError(
                f"{origin} is not a machine of this deployment (revoked, or never admitted): "
                "join it again with a new line ('pi-cross-session remote invite' on the hub)",
                code=UNKNOWN_MACHINE,
            )
        return current

    def _new_card(self, origin: str, text: str, current: MachineCard) -> MachineCard:
        try:
            card = MachineCard.parse(text)
        except DeploymentError as exc:
            raise RotationRefusedError(str(exc), code=BAD_CARD) from None
        if card.identity_key is None:
            raise RotationRefusedError(
                f"the new card of {origin} has no identity key", code=BAD_CARD
            )
        if card.nats_key == current.nats_key or card.identity_key == current.identity_key:
            raise RotationRefusedError(
                f"the new card of {origin} keeps a key of the old one: both keys must be new",
                code=BAD_CARD,
            )
        others = [c for n, c in self.machines.items() if n != origin]
        others += [r.card for n, r in self.rotating.items() if n != origin]
        if card.nats_key in self.revoked or any(c.nats_key == card.nats_key for c in others):
            raise RotationRefusedError(
                f"the new NATS key of {origin} was revoked or is another machine's: run "
                "'pi-cross-session remote rotate' again (it makes new keys)",
                code=BAD_CARD,
            )
        return card

    def _user_jwt(self, card: MachineCard, *, now: int) -> str:
        return nats_jwt.user_jwt(
            self.account,
            card.nats_key,
            name=card.name,
            issued_at=now,
            permissions=machine_permissions(card.name),
        )

    # -- joining by invitation -------------------------------------------------------------------

    def invite(self, *, now: int, valid_s: int, server: bool = False) -> NKey:
        """A new invitation, valid ``valid_s`` seconds from ``now``: its seed goes into one join
        line (:class:`~pi_cross_session._internal.protocol.remote.join.JoinLine`); the account lists
        its public key as a scoped signing key once saved and pushed. With ``server``, it admits a
        machine that also serves (one more server of the deployment)."""
        self.drop_lapsed(now=now)
        if server and 1 + len(self.members) + len(self.server_invitations) >= MAX_SERVERS:
            raise DeploymentError(
                f"a deployment has at most {MAX_SERVERS} servers (with the open invitations)"
            )
        key = NKey.generate(Role.ACCOUNT)
        self.invitations[key.public_key] = now + valid_s
        if server:
            self.server_invitations.add(key.public_key)
        return key

    def drop_lapsed(self, *, now: int) -> list[str]:
        """Forget the invitations whose time is up; their keys."""
        lapsed = [key for key, until in self.invitations.items() if until <= now]
        for key in lapsed:
            del self.invitations[key]
            self.server_invitations.discard(key)
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
        signed = proof_bytes(ask.card, ask.serve)
        if invitation is None or not invitation.verifies(proof, signed):
            raise AdmissionRefusedError(
                "bad_proof", "the join token does not prove this invitation"
            )
        serving = ask.invitation in self.server_invitations
        if serving != (ask.serve is not None):
            raise AdmissionRefusedError(
                "wrong_invitation",
                "this line adds a server: run it as 'pi-cross-session remote hub --join …'"
                if serving
                else "this line joins a machine, not a server: ask the hub for a server's line "
                "('pi-cross-session remote invite --server')",
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
        if ask.serve is not None:
            self._check_member(card.name, ask.serve)
        try:
            self.admit(card, now=now)
        except DeploymentError as exc:  # its NATS key was revoked
            raise AdmissionRefusedError("revoked", str(exc)) from None
        del self.invitations[ask.invitation]
        self.server_invitations.discard(ask.invitation)
        if ask.serve is not None and self.member_of(card.name) is None:
            # Never a name a server had before: a revoked server's certificate still names it.
            self.servers_named += 1
            name = f"pi-xs-{self.servers_named + 1}"
            self.members[name] = MemberServer(card.name, ask.serve.client, ask.serve.cluster)
        return card

    def _check_member(self, machine: str, serve: ServeAsk) -> None:
        """Refuse a server at an address another server of the deployment has (by host, unless
        on loopback, where servers of one host differ by port). The same machine asking again
        for the same places (its first answer was lost, or installing it failed) is let in."""
        ours = self.member_of(machine)
        if ours is not None:
            if (ours[1].client, ours[1].cluster) == (serve.client, serve.cluster):
                return
            raise AdmissionRefusedError(
                "name_taken", f"{machine} already serves in this deployment"
            )
        places = [self.client_advertise, self.cluster_advertise]
        places += [where for _, m in self.members.items() for where in (m.client, m.cluster)]
        taken = {_place(where) for where in places}
        taken |= {host for host in self.hosts if not _loopback(host)}  # every name of the hub
        if serve.client == serve.cluster or {_place(serve.client), _place(serve.cluster)} & taken:
            raise AdmissionRefusedError(
                "address_taken",
                "another server of this deployment is reached at that address: give this one "
                "its own --host",
            )

    def server_hosts(self, *, but: str | None = None) -> set[str]:
        """The hosts (names and addresses) of every server of the deployment, loopback aside
        and but the one machine ``but`` runs: a new server's certificate may name none."""
        hosts = set(self.hosts)
        hosts |= {
            host_of(where)
            for _, m in self.members.items()
            if m.machine != but
            for where in (m.client, m.cluster)
        }
        return {h for h in hosts if not _loopback(h)}

    def member_of(self, machine: str) -> tuple[str, MemberServer] | None:
        """The server ``machine`` runs for the deployment (its name and places), if any."""
        return next(((n, m) for n, m in self.members.items() if m.machine == machine), None)

    def grant(self, name: str, cert_pem: str, *, now: int) -> ServeGrant:
        """What member server ``name`` needs to run (its certificate signed already)."""
        operator, system_jwt = self._operator_parts(now=now)
        return ServeGrant(
            name=name,
            cert=cert_pem,
            operator=operator,
            system_account=self.system.public_key,
            system_jwt=system_jwt,
            account_jwt=self.account_jwt(now=now),
            routes=tuple(self.routes()),
        )

    # -- the servers -----------------------------------------------------------------------------

    @property
    def client_advertise(self) -> str:
        """Where clients reach the hub's own server: its first name and its port."""
        return host_port(self.hosts[0] if self.hosts else "127.0.0.1", self.listen)

    @property
    def cluster_advertise(self) -> str:
        """Where the other servers reach the hub's own server's routes."""
        return host_port(self.hosts[0] if self.hosts else "127.0.0.1", self.cluster_listen)

    def routes(self) -> list[str]:
        """The route of every server of the deployment, the hub's first."""
        return [self.cluster_advertise, *(m.cluster for _, m in sorted(self.members.items()))]

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

    def _operator_parts(self, *, now: int) -> tuple[str, str]:
        """The operator's JWT and the system account's (public: any server may hold them)."""
        system_jwt = nats_jwt.account_jwt(
            self.operator, self.system.public_key, name="SYS", issued_at=now, jetstream=False
        )
        operator = nats_jwt.operator_jwt(
            self.operator, name=ACCOUNT_NAME, system_account=self.system.public_key, issued_at=now
        )
        return operator, system_jwt

    def auth_config(self, *, now: int, resolver_dir: Path | None = None) -> str:
        """The server configuration's authorization part (``resolver_dir`` defaults to ``jwt``
        beside it)."""
        operator, system_jwt = self._operator_parts(now=now)
        where = resolver_dir if resolver_dir is not None else self.directory / "jwt"
        return authorization_part(
            operator=operator,
            system_account=self.system.public_key,
            preload={
                self.system.public_key: system_jwt,
                self.account.public_key: self.account_jwt(now=now),
            },
            resolver_dir=where,
        )

    def server_config(self) -> str:
        """The server's configuration: JetStream, TLS from the deployment's CA when it has one,
        routes to the other servers once there are any, and the authorization part (included,
        so admitting a machine rewrites only that)."""
        return deployment_server_config(
            name=FIRST_SERVER,
            directory=self.directory,
            listen=self.listen,
            cluster_listen=self.cluster_listen,
            tls_first=self.tls_first,
            advertise=(self.client_advertise, self.cluster_advertise),
            routes=[m.cluster for _, m in sorted(self.members.items())],
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


def authorization_part(
    *, operator: str, system_account: str, preload: dict[str, str], resolver_dir: Path
) -> str:
    """A server configuration's authorization part: the operator, the system account, and a
    full resolver (servers of a cluster pass account changes to each other) preloaded with the
    account JWTs."""
    lines = [
        f"operator: {operator}",
        f"system_account: {system_account}",
        f'resolver: {{ type: full, dir: "{resolver_dir}", allow_delete: false, interval: "2m", '
        'timeout: "1.9s" }',
        "resolver_preload: {",
        *(f"  {key}: {token}" for key, token in preload.items()),
        "}",
    ]
    return "\n".join(lines) + "\n"


def deployment_server_config(
    *,
    name: str,
    directory: Path,
    listen: str,
    cluster_listen: str,
    tls_first: bool,
    advertise: tuple[str, str],
    routes: list[str],
) -> str:
    """The configuration of one server of a deployment kept in ``directory`` (the hub's or a
    member's): TLS from ``pki/`` when there, routes secured by the CA once there are other
    servers (``routes``: theirs), and ``auth.conf`` included."""
    pki_dir = directory / PKI_DIR
    tls = None
    if (pki_dir / "server.pem").exists():
        tls = TlsFiles(cert=str(pki_dir / "server.pem"), key=str(pki_dir / "server-key.pem"))
    clustered = bool(routes) and tls is not None
    return server_config(
        name=name,
        listen=listen,
        store_dir=directory / "jetstream",
        tls=tls,
        tls_first=tls_first and tls is not None,
        auth=f'include "{AUTH_FILE}"',
        cluster_listen=cluster_listen if clustered else None,
        routes=routes,
        cluster_tls=(
            TlsFiles(tls.cert, tls.key, ca=str(pki_dir / "ca.pem"), verify_clients=True)
            if clustered and tls is not None
            else None
        ),
        advertise=advertise if clustered else None,
    )


def host_of(where: str) -> str:
    """The host of ``host:port`` (an IPv6 address without its brackets)."""
    return where.rsplit(":", 1)[0].strip("[]")


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _place(where: str) -> str:
    """What two servers may not share: the host, or on loopback the host and port."""
    return where if _loopback(host_of(where)) else host_of(where)


def host_port(host: str, listen: str) -> str:
    """``host`` with the port of ``listen`` (``ADDR:PORT``), as NATS names a server."""
    port = listen.rsplit(":", 1)[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _same_card(text: str, card: MachineCard) -> bool:
    try:
        return MachineCard.parse(text) == card
    except DeploymentError:
        return False


def _read_rotating(body: Any) -> dict[str, Rotating]:
    if not isinstance(body, dict):
        raise DeploymentError(f"{DEPLOYMENT_FILE}: rotating is not an object")
    rotating = {}
    for name, entry in body.items():
        if not isinstance(entry, dict) or not all(
            isinstance(entry.get(k), str) for k in ("natsKey", "identityKey")
        ):
            raise DeploymentError(f"{DEPLOYMENT_FILE}: the rotation of {name!r} has no keys")
        if type(entry.get("at")) is not int:
            raise DeploymentError(f"{DEPLOYMENT_FILE}: the rotation of {name!r} has no time")
        words = f"{name} {entry['identityKey']} {NATS_KEY_PREFIX}{entry['natsKey']}"
        rotating[name] = Rotating(MachineCard.parse(words), entry["at"])
    return rotating


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
