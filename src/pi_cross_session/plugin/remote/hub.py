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

Every change to the deployment directory is made under its lock (``deployment.lock``), so the
hub and ``remote invite`` / ``remote revoke`` on the same machine never write over each other.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import anyio
import filelock
from nats.aio.msg import Msg

from pi_cross_session.plugin.remote import pki
from pi_cross_session.plugin.remote.deployment import (
    PKI_DIR,
    AdmissionRefusedError,
    Deployment,
    DeploymentError,
)
from pi_cross_session.plugin.remote.link import Link, LinkConfig
from pi_cross_session.protocol.remote.join import (
    JOIN_SUBJECT,
    ROSTER_SUBJECT,
    CaAnswer,
    CaAsk,
    JoinAnswer,
    JoinAsk,
    JoinError,
    JoinLine,
    Refusal,
    ca_signed_bytes,
    read_ask,
)

logger = logging.getLogger(__name__)

LOCK_FILE: Final = "deployment.lock"
#: How long a join line stays good unless told otherwise: long enough to walk to the other
#: machine, short enough that a line left in a chat log is soon worthless.
DEFAULT_INVITATION_S: Final = 3600
#: Names every hub's certificate carries beside the ones it is reached by, so that the hub's own
#: connections (its gateway, ``remote invite``) verify on loopback.
LOOPBACK_NAMES: Final = ("127.0.0.1", "localhost")


def lock(directory: Path) -> filelock.FileLock:
    """The lock every change to the deployment in ``directory`` is made under."""
    return filelock.FileLock(str(directory / LOCK_FILE), timeout=30)


def port_of(listen: str) -> int:
    return int(listen.rsplit(":", 1)[1])


def servers(deployment: Deployment) -> tuple[str, ...]:
    """The URLs machines reach the deployment's server by (one per name it was given)."""
    port = port_of(deployment.listen)
    return tuple(
        f"tls://{f'[{host}]' if ':' in host else host}:{port}" for host in deployment.hosts
    )


def local_url(deployment: Deployment) -> str:
    """How this machine reaches its own server."""
    host = deployment.listen.rsplit(":", 1)[0]
    if host in ("", "0.0.0.0", "::", "[::]"):
        host = "127.0.0.1"
    return f"tls://{host}:{port_of(deployment.listen)}"


def prepare(directory: Path, *, hosts: list[str], listen: str | None, now: int) -> Deployment:
    """Open (or create) the deployment in ``directory`` for a hub reached by ``hosts``: keys,
    the CA and the server's certificate (made again when a name is new), the configuration."""
    with lock(directory) if directory.exists() else _making(directory):
        deployment = Deployment.open(directory, create=True)
        deployment.tls_first = True
        if listen is not None:
            deployment.listen = listen
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


def invite(directory: Path, *, now: int, valid_s: int) -> tuple[JoinLine, int]:
    """A new invitation in the deployment (saved; the running servers still need the account
    pushed, :func:`push`), its join line and the time it lapses."""
    with lock(directory):
        deployment = Deployment.open(directory)
        key = deployment.invite(now=now, valid_s=valid_s)
        deployment.save(now=now)
    line = JoinLine(
        servers=servers(deployment), deployment=deployment.account.public_key, seed=key.seed
    )
    return line, now + valid_s


def admin_config(deployment: Deployment, *, system: bool = False) -> LinkConfig:
    """How this machine connects to its own server as the administrator (or the system user)."""
    creds = deployment.system_creds if system else deployment.admin_creds
    ca = deployment.ca
    return LinkConfig(
        servers=(local_url(deployment),),
        machine=None,
        tls_ca=None if ca is None else str(ca),
        credentials=creds.read_text(),
        name="pi-cross-session hub",
        tls_first=deployment.tls_first,
    )


async def push(deployment: Deployment, *, now: int, roster: bool = True) -> None:
    """Hand the account's current JWT to the running servers (invitations, revocations) and,
    with ``roster``, publish the current roster."""
    system = Link(admin_config(deployment, system=True))
    await system.connect()
    try:
        await system.push_account(deployment.account_jwt(now=now))
    finally:
        await system.close()
    if roster:
        admin = Link(admin_config(deployment))
        await admin.connect()
        try:
            await publish_roster(admin, deployment)
        finally:
            await admin.close()


async def publish_roster(link: Link, deployment: Deployment) -> None:
    """Put the deployment's roster (a newer ``seq`` than any before) into the bucket."""
    await link.put(ROSTER_SUBJECT, deployment.sealed_roster(seq=deployment.roster_seq))


@dataclass(slots=True)
class Admissions:
    """Answers joiners on the admin connection ``link``; ``admitted`` hears each machine."""

    directory: Path
    link: Link
    now: Callable[[], float] = time.time
    admitted: Callable[[str], None] = lambda name: None
    #: Asks answered, by outcome (for the hub's status and tests).
    counts: dict[str, int] = field(default_factory=dict)

    async def start(self) -> None:
        await self.link.serve(JOIN_SUBJECT, self._on_ask)

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
            deployment, name = await anyio.to_thread.run_sync(self._admit, ask, now)
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
        )
        await self.link.respond(msg, answer.model_dump_json().encode())
        self._count("admitted")
        self.admitted(name)
        try:
            await push(deployment, now=now, roster=False)
            await self.link.put(ROSTER_SUBJECT, deployment.sealed_roster(seq=deployment.roster_seq))
        except Exception as exc:  # the machine is admitted; others learn of it at the next push
            logger.warning("admitted %s, but could not update the servers yet: %s", name, exc)

    def _admit(self, ask: JoinAsk, now: int) -> tuple[Deployment, str]:
        with lock(self.directory):
            deployment = Deployment.open(self.directory)
            card = deployment.admit_by_invitation(ask, now=now)
            deployment.save(now=now)
        return deployment, card.name

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
    "Admissions",
    "admin_config",
    "invite",
    "local_url",
    "prepare",
    "publish_roster",
    "push",
    "servers",
]
