"""A server added to a deployment: ``remote hub --join LINE --host HOST`` on a second or third
machine (docs/remote.md, "From one server to three").

The machine makes its server's key here and sends only a certificate request; the hub answers
with the certificate its CA signed and what the server's configuration needs (the operator's and
the accounts' JWTs, the routes to the servers there already: no seed leaves the hub). This
module keeps that in the server's directory (0700, the key 0600) and writes the configuration:

* ``member.json`` — the server's name in the deployment, where it listens, where clients and the
  other servers reach it, and the routes it was given;
* ``pki/`` — the deployment's CA, this server's certificate and key (which also secure its
  routes: the servers verify each other with the CA);
* ``auth.conf`` and ``server.conf`` — as the hub's (:mod:`.deployment`), clustered.

A member does not admit machines: only the hub holds the deployment's keys. It serves clients
and keeps a replica of the bucket, so the deployment outlives one server (docs/remote.md says
what a hub outage stops).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pi_cross_session._internal.plugin.remote import pki
from pi_cross_session._internal.plugin.remote.deployment import (
    AUTH_FILE,
    PKI_DIR,
    SERVER_FILE,
    DeploymentError,
    authorization_part,
    deployment_server_config,
)
from pi_cross_session._internal.protocol.remote.join import ServeGrant
from pi_cross_session._internal.security.io import fs
from pi_cross_session._internal.security.remote import nats_jwt

MEMBER_FILE: Final = "member.json"
_MAX_FILE_BYTES: Final = 65_536


@dataclass(frozen=True, slots=True)
class Member:
    """One member server's directory, loaded."""

    directory: Path
    name: str
    listen: str
    cluster_listen: str
    client: str
    cluster: str
    routes: tuple[str, ...]

    @property
    def port(self) -> int:
        return int(self.listen.rsplit(":", 1)[1])

    @property
    def config_file(self) -> Path:
        return self.directory / SERVER_FILE

    def server_config(self) -> str:
        return deployment_server_config(
            name=self.name,
            directory=self.directory,
            listen=self.listen,
            cluster_listen=self.cluster_listen,
            tls_first=True,
            advertise=(self.client, self.cluster),
            routes=[route for route in self.routes if route != self.cluster],
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "name": self.name,
            "listen": self.listen,
            "clusterListen": self.cluster_listen,
            "client": self.client,
            "cluster": self.cluster,
            "routes": list(self.routes),
        }


def is_member(directory: Path) -> bool:
    """Whether ``directory`` holds a member server (rather than a hub, or nothing)."""
    return (directory / MEMBER_FILE).exists()


def request(directory: Path, hosts: list[str]) -> str:
    """Make this server's key (kept in ``directory``) and its certificate request for
    ``hosts`` (PEM), to send with the ask."""
    pki_dir = directory / PKI_DIR
    pki_dir.mkdir(parents=True, exist_ok=True)
    fs.ensure_private_dir(str(directory))
    fs.ensure_private_dir(str(pki_dir))
    key_pem, csr_pem = pki.request(hosts)
    fs.write_private_file(str(pki_dir), "server-key.pem", key_pem)
    return csr_pem.decode("ascii")


def install(
    directory: Path,
    grant: ServeGrant,
    ca_pem: str,
    *,
    deployment: str,
    listen: str,
    cluster_listen: str,
    client: str,
    cluster: str,
) -> Member:
    """Keep what the hub granted (the certificate checked against the CA and this server's key)
    and write the server's configuration (``deployment``: the deployment key of the join
    line, which the granted account must be)."""
    pki_dir = directory / PKI_DIR
    key_pem = fs.read_registration_bytes(str(pki_dir / "server-key.pem"), max_bytes=_MAX_FILE_BYTES)
    pki.check_issued(ca_pem.encode("ascii"), grant.cert.encode("ascii"), key_pem)
    account = _account_of(grant, deployment)  # checked before anything is written
    fs.write_private_file(str(pki_dir), "ca.pem", ca_pem.encode("ascii"))
    fs.write_private_file(str(pki_dir), "server.pem", grant.cert.encode("ascii"))
    auth = authorization_part(
        operator=grant.operator,
        system_account=grant.system_account,
        preload={
            grant.system_account: grant.system_jwt,
            account: grant.account_jwt,
        },
        resolver_dir=directory / "jwt",
    )
    fs.write_private_file(str(directory), AUTH_FILE, auth.encode())
    member = Member(directory, grant.name, listen, cluster_listen, client, cluster, grant.routes)
    fs.write_private_file(str(directory), SERVER_FILE, member.server_config().encode())
    body = (json.dumps(member.to_json(), indent=2) + "\n").encode()
    fs.write_private_file(str(directory), MEMBER_FILE, body)
    return member


def open_member(directory: Path) -> Member:
    """The member server kept in ``directory``; :class:`DeploymentError` when there is none."""
    try:
        body = json.loads(
            fs.read_registration_bytes(str(directory / MEMBER_FILE), max_bytes=_MAX_FILE_BYTES)
        )
        member = Member(
            directory,
            body["name"],
            body["listen"],
            body["clusterListen"],
            body["client"],
            body["cluster"],
            tuple(body["routes"]),
        )
    except (fs.FileOperationError, ValueError, KeyError, TypeError) as exc:
        raise DeploymentError(f"no member server in {directory}: {exc}") from None
    words = (member.name, member.listen, member.cluster_listen, member.client, member.cluster)
    if not all(isinstance(v, str) for v in (*words, *member.routes)) or not isinstance(
        body["routes"], list
    ):
        raise DeploymentError(f"{MEMBER_FILE} in {directory} is damaged")
    return member


def _account_of(grant: ServeGrant, deployment: str) -> str:
    """The deployment account's key, once its granted JWT verifies and is that account's."""
    try:
        subject = nats_jwt.decode(grant.account_jwt).subject
    except nats_jwt.CredentialsError as exc:
        raise DeploymentError(f"the hub's account JWT cannot be read: {exc}") from None
    if subject != deployment:
        raise DeploymentError("the hub granted the JWT of another account")
    return subject


__all__ = ["MEMBER_FILE", "Member", "install", "is_member", "open_member", "request"]
