"""The hub: the machine that runs a deployment's NATS server and admits machines by invitation.

``pi-cross-session remote hub`` (docs/remote.md, "Five minutes, two machines") keeps the
deployment in one private directory (:mod:`.deployment`), writes a private CA and the server's
certificate for the names it is reached by (:mod:`.pki`), starts the bundled ``nats-server``
with that configuration, makes the bucket, publishes the roster, and answers joiners:

* a **CA ask** (over a connection the joiner cannot verify yet): the CA certificate and the
  deployment key's signature of it;
* a **join ask** (over a verified connection): the machine's card, signed with the invitation's
  seed. The hub admits the machine, answers with its user JWT and the roster, then drops the
  invitation from the account (pushed to the servers) and publishes the new roster, which every
  gateway of the deployment follows: the new machine is trusted everywhere within seconds.
* a join ask **to serve** (by a server invitation, ``remote invite --server``): the same, and
  the machine's certificate request signed by the CA, with what its server needs (the JWTs of
  the operator and the accounts, the routes to the other servers). The hub's own server then
  runs clustered (restarted once, when the first server is added), and when there are three
  servers the bucket is kept by all three (docs/remote.md, "From one server to three").
* a machine's **rotation asks** (``remote rotate``, on ``pi-xs.v1.to._deployment.from.<M>``,
  which its credentials let it publish): a new card signed by its current identity key, then
  confirmed over the new credentials with the new key; the hub then replaces the card, revokes
  the old NATS key and publishes the roster (:mod:`.rotation`).

Every change to the deployment directory is made under its lock (``deployment.lock``), so the
hub and ``remote invite`` / ``remote revoke`` on the same machine never write over each other.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import anyio
import filelock
from nats.aio.msg import Msg

from pi_cross_session._internal.plugin.remote import pki
from pi_cross_session._internal.plugin.remote.bucket import BucketSpec
from pi_cross_session._internal.plugin.remote.deployment import (
    PKI_DIR,
    AdmissionRefusedError,
    Deployment,
    DeploymentError,
    host_of,
)
from pi_cross_session._internal.plugin.remote.link import BucketError, Link
from pi_cross_session._internal.plugin.remote.rotation import answer_rotation
from pi_cross_session._internal.plugin.remote.upkeep import (
    LOCK_FILE,
    admin_config,
    drop_bucket,
    local_url,
    local_url_of,
    lock,
    port_of,
    publish_roster,
    push,
    servers,
)
from pi_cross_session._internal.protocol.remote.join import (
    JOIN_SUBJECT,
    ROSTER_SUBJECT,
    CaAnswer,
    CaAsk,
    JoinAnswer,
    JoinAsk,
    JoinError,
    JoinLine,
    Refusal,
    ServeAsk,
    ServeGrant,
    ca_signed_bytes,
    read_ask,
)
from pi_cross_session._internal.protocol.remote.rotate import ROTATE_SUBJECTS

logger = logging.getLogger(__name__)

#: How long a join line stays good unless told otherwise: long enough to walk to the other
#: machine, short enough that a line left in a chat log is soon worthless.
DEFAULT_INVITATION_S: Final = 3600
#: Names every hub's certificate carries beside the ones it is reached by, so that the hub's own
#: connections (its gateway, ``remote invite``) verify on loopback.
LOOPBACK_NAMES: Final = ("127.0.0.1", "localhost")
#: Servers that keep every record once the deployment has this many: one may be lost.
REPLICATED_AT: Final = 3
#: How long the hub keeps asking for the bucket's replicas once the third server is admitted
#: (it must start and join the cluster first).
REPLICAS_WAIT_S: Final = 120.0


def prepare(
    directory: Path,
    *,
    hosts: list[str],
    listen: str | None,
    now: int,
    cluster_listen: str | None = None,
) -> Deployment:
    """Open (or create) the deployment in ``directory`` for a hub reached by ``hosts``: keys,
    the CA and the server's certificate (made again when a name is new), the configuration."""
    with lock(directory) if directory.exists() else _making(directory):
        deployment = Deployment.open(directory, create=True)
        deployment.tls_first = True
        if listen is not None:
            deployment.listen = listen
        if cluster_listen is not None:
            deployment.cluster_listen = cluster_listen
        names = list(dict.fromkeys([*deployment.hosts, *hosts]))
        if not names:
            raise DeploymentError(
                "the hub needs the name or address other machines reach it by (--host)"
            )
        pki_dir = directory / PKI_DIR
        if names != deployment.hosts or not (pki_dir / "server.pem").exists():
            pki.create(str(pki_dir), [*names, *LOOPBACK_NAMES], reuse_ca=True)
        deployment.hosts = names
        deployment.save(now=now)
        return deployment


def _making(directory: Path) -> filelock.FileLock:
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    return lock(directory)


def invite(
    directory: Path, *, now: int, valid_s: int, server: bool = False
) -> tuple[JoinLine, int]:
    """A new invitation in the deployment (saved; the running servers still need the account
    pushed, :func:`push`), its join line and the time it lapses; with ``server``, for a machine
    that joins as one more server."""
    with lock(directory):
        deployment = Deployment.open(directory)
        key = deployment.invite(now=now, valid_s=valid_s, server=server)
        deployment.save(now=now)
    line = JoinLine(
        servers=servers(deployment), deployment=deployment.account.public_key, seed=key.seed
    )
    return line, now + valid_s


async def raise_replicas(deployment: Deployment, replicas: int, *, wait_s: float) -> bool:
    """Have ``replicas`` servers keep the bucket (once they are in the cluster: asked again for
    up to ``wait_s``); False when the cluster did not take it in that time. Only the number of
    replicas changes: the records' TTL stays what the hub made the bucket with."""
    link = Link(admin_config(deployment))
    await link.connect()
    try:
        deadline = anyio.current_time() + wait_s
        while True:
            try:
                config = await link.bucket_config()
                if config is None or config.get("num_replicas", 1) >= replicas:
                    return config is not None
                ttl_s = int(config.get("max_age", 0)) / 1e9
                spec = BucketSpec(ttl_s=ttl_s, replicas=replicas)
                await link.make_bucket(update=True, spec=spec)
                return True
            except BucketError as exc:
                # Too few servers yet ("insufficient resources"): the new one is still starting.
                if anyio.current_time() >= deadline:
                    logger.warning("the bucket stays on fewer servers: %s", exc)
                    return False
                await anyio.sleep(2.0)
    finally:
        await link.close()


def _names_only(serve: ServeAsk, deployment: Deployment, machine: str) -> None:
    """A new server's certificate names the host it serves at and loopback, nothing else: not
    the hub's name or another server's, which would let it pass for that server with every
    machine."""
    allowed = {host_of(serve.client), host_of(serve.cluster), *LOOPBACK_NAMES}
    asked = set(pki.requested_hosts(serve.csr.encode("ascii")))
    if not asked <= allowed:
        raise pki.PkiError(
            f"it names {', '.join(sorted(asked - allowed))}, which is not where it serves"
        )
    others = asked & deployment.server_hosts(but=machine)
    if others:
        raise pki.PkiError(f"it names {', '.join(sorted(others))}, another server's host")


@dataclass(slots=True)
class Admissions:
    """Answers joiners on the admin connection ``link``; ``admitted`` hears each machine, and
    ``grown`` each server added (after the answer went out)."""

    directory: Path
    link: Link
    now: Callable[[], float] = time.time
    admitted: Callable[[str], None] = lambda name: None
    #: Hears each machine whose keys were rotated (``remote rotate``, :mod:`.rotation`).
    rotated: Callable[[str], None] = lambda name: None
    grown: Callable[[Deployment, str], Awaitable[None]] | None = None
    #: Asks answered, by outcome (for the hub's status and tests).
    counts: dict[str, int] = field(default_factory=dict)

    async def start(self) -> None:
        await self.link.serve(JOIN_SUBJECT, self._on_ask)
        await self.link.serve(ROTATE_SUBJECTS, self._on_rotate)

    async def _on_rotate(self, msg: Msg) -> None:
        outcome, machine = await answer_rotation(
            self.directory, self.link, msg, now_ms=int(self.now() * 1000)
        )
        self._count(outcome)
        if machine is not None:
            self.rotated(machine)

    async def _on_ask(self, msg: Msg) -> None:
        try:
            ask = read_ask(msg.data)
        except JoinError:
            self._count("unreadable")
            return
        if isinstance(ask, CaAsk):
            await self.link.respond(msg, self._ca_answer())
            self._count("ca")
            return
        now = int(self.now())
        try:
            deployment, name, grant = await anyio.to_thread.run_sync(self._admit, ask, now)
        except AdmissionRefusedError as exc:
            self._count(exc.code)
            refusal = Refusal(refused=exc.code, detail=str(exc))
            await self.link.respond(msg, refusal.model_dump_json().encode())
            return
        answer = JoinAnswer(
            jwt=deployment.machine_jwt(name, now=now).decode().strip(),
            deployment=deployment.account.public_key,
            account=deployment.roster(seq=0).account,
            servers=servers(deployment),
            roster=base64.b64encode(deployment.sealed_roster(seq=deployment.roster_seq)).decode(),
            grant=grant,
        )
        await self.link.respond(msg, answer.model_dump_json().encode())
        self._count("admitted")
        self.admitted(name)
        try:
            await push(deployment, now=now, roster=False)
            await self.link.put(ROSTER_SUBJECT, deployment.sealed_roster(seq=deployment.roster_seq))
        except Exception as exc:  # the machine is admitted; others learn of it at the next push
            logger.warning("admitted %s, but could not update the servers yet: %s", name, exc)
        if grant is not None and self.grown is not None:
            await self.grown(deployment, grant.name)

    def _admit(self, ask: JoinAsk, now: int) -> tuple[Deployment, str, ServeGrant | None]:
        with lock(self.directory):
            deployment = Deployment.open(self.directory)
            # The servers as they were: the new one's own places are not "another server's".
            before = Deployment.open(self.directory)
            card = deployment.admit_by_invitation(ask, now=now)
            grant = None
            if ask.serve is not None:
                # Signed before anything is saved: a request the CA will not sign admits nobody.
                try:
                    _names_only(ask.serve, before, card.name)
                    cert = pki.sign_request(
                        str(self.directory / PKI_DIR), ask.serve.csr.encode("ascii")
                    )
                except (pki.PkiError, UnicodeEncodeError) as exc:
                    detail = f"the certificate request: {exc}"
                    raise AdmissionRefusedError("bad_csr", detail) from None
                member = deployment.member_of(card.name)
                assert member is not None  # admit_by_invitation added it
                grant = deployment.grant(member[0], cert.decode("ascii"), now=now)
            deployment.save(now=now)
        return deployment, card.name, grant

    def _ca_answer(self) -> bytes:
        deployment = Deployment.open(self.directory)
        ca = deployment.ca
        assert ca is not None
        pem = ca.read_text()
        signature = deployment.account.sign(ca_signed_bytes(pem))
        answer = CaAnswer(ca=pem, signature=base64.b64encode(signature).decode())
        return answer.model_dump_json().encode()

    def _count(self, outcome: str) -> None:
        self.counts[outcome] = self.counts.get(outcome, 0) + 1


__all__ = [
    "DEFAULT_INVITATION_S",
    "LOCK_FILE",
    "Admissions",
    "admin_config",
    "drop_bucket",
    "invite",
    "local_url",
    "local_url_of",
    "lock",
    "port_of",
    "prepare",
    "publish_roster",
    "push",
    "raise_replicas",
    "servers",
]
