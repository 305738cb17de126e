"""Keeping a deployment's servers up to date, from the machine that holds it (the hub's, or
``remote invite`` / ``revoke`` / a rotation there): the lock every change is made under, where
the servers are, and the connections that push the account to them and publish the roster.

Below :mod:`.hub` (which answers joiners) and :mod:`.rotation` (which answers rotations): both
change the deployment and hand the change on the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import filelock

from pi_cross_session._internal.plugin.remote.deployment import Deployment
from pi_cross_session._internal.plugin.remote.link import Link, LinkConfig
from pi_cross_session._internal.protocol.remote.join import ROSTER_SUBJECT

LOCK_FILE: Final = "deployment.lock"


def lock(directory: Path) -> filelock.FileLock:
    """The lock every change to the deployment in ``directory`` is made under."""
    return filelock.FileLock(str(directory / LOCK_FILE), timeout=30)


def port_of(listen: str) -> int:
    return int(listen.rsplit(":", 1)[1])


def servers(deployment: Deployment) -> tuple[str, ...]:
    """The URLs machines reach the deployment's servers by: the hub's (one per name it was
    given), then each server added since."""
    port = port_of(deployment.listen)
    hub = [f"tls://{f'[{host}]' if ':' in host else host}:{port}" for host in deployment.hosts]
    return (*hub, *(f"tls://{m.client}" for _, m in sorted(deployment.members.items())))


def local_url(deployment: Deployment) -> str:
    """How this machine reaches its own server."""
    return local_url_of(deployment.listen)


def local_url_of(listen: str) -> str:
    """How this machine reaches a server of its own that listens at ``listen``."""
    host = listen.rsplit(":", 1)[0]
    if host in ("", "0.0.0.0", "::", "[::]"):
        host = "127.0.0.1"
    return f"tls://{host}:{port_of(listen)}"


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


async def drop_bucket(deployment: Deployment) -> None:
    """Delete the bucket before the hub's server, alone so far, starts again clustered (the
    records come back at the gateways' next publication; the roster the hub puts back)."""
    link = Link(admin_config(deployment))
    await link.connect()
    try:
        await link.drop_bucket()
    finally:
        await link.close()


async def publish_roster(link: Link, deployment: Deployment) -> None:
    """Put the deployment's roster (a newer ``seq`` than any before) into the bucket."""
    await link.put(ROSTER_SUBJECT, deployment.sealed_roster(seq=deployment.roster_seq))


__all__ = [
    "LOCK_FILE",
    "admin_config",
    "drop_bucket",
    "local_url",
    "local_url_of",
    "lock",
    "port_of",
    "publish_roster",
    "push",
    "servers",
]
