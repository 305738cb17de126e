"""A server added to a deployment (plugin/remote/member.py): its key stays with it, and what the
hub grants it (a certificate and JWTs, checked) becomes its clustered configuration."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any, cast

import pytest

from pi_cross_session._internal.plugin.remote import member, pki
from pi_cross_session._internal.plugin.remote.deployment import (
    AdmissionRefusedError,
    Deployment,
    DeploymentError,
)
from pi_cross_session._internal.plugin.remote.hub import Admissions
from pi_cross_session._internal.protocol.remote.join import (
    JoinAsk,
    ServeAsk,
    ServeGrant,
    proof_bytes,
)
from pi_cross_session._internal.security.io import fs
from pi_cross_session._internal.security.remote import nats_jwt
from pi_cross_session._internal.security.remote.identity import MachineKey
from pi_cross_session._internal.security.remote.nats_jwt import NKey, Role
from tests.support.auth_part import auth_parts
from tests.support.file_state import mode_of

NOW = 1_700_000_000
WEEK_S = 7 * 24 * 3600
HUB_HOST = "127.0.0.1"
MEMBER_HOST = "127.0.0.2"
CLIENT = f"{MEMBER_HOST}:4222"
CLUSTER = f"{MEMBER_HOST}:6222"


def make_hub(directory: Path) -> Deployment:
    """A hub's deployment with its CA (reached at loopback), saved."""
    hub = Deployment.open(directory, create=True)
    hub.hosts = [HUB_HOST]
    pki.create(str(directory / "pki"), [HUB_HOST])
    hub.save(now=NOW)
    return hub


def ask_to_serve(
    hub: Deployment,
    csr: str,
    *,
    name: str = "second",
    card: str | None = None,
    serve: ServeAsk | None = None,
) -> JoinAsk:
    """``name``'s ask to serve (its ``card``, else a new one), by a new server invitation
    (saved), its server's request ``csr``, at ``serve``'s places (else CLIENT and CLUSTER)."""
    invitation = hub.invite(now=NOW, valid_s=WEEK_S, server=True)
    hub.save(now=NOW)
    if card is None:
        machine_key = MachineKey.generate().public_text()
        card = f"{name} {machine_key} nats:{NKey.generate(Role.USER).public_key}"
    serve = serve or ServeAsk(csr=csr, client=CLIENT, cluster=CLUSTER)
    proof = invitation.sign(proof_bytes(card, serve))
    return JoinAsk(
        invitation=invitation.public_key,
        card=card,
        proof=base64.b64encode(proof).decode(),
        serve=serve,
    )


def admit_server(hub: Deployment, csr: str, *, name: str = "second") -> str:
    """Admit ``name`` as a server by a server invitation, as the hub does; its server's name."""
    hub.admit_by_invitation(ask_to_serve(hub, csr, name=name), now=NOW + 1)
    found = hub.member_of(name)
    assert found is not None
    return found[0]


def granted(hub: Deployment, csr: str) -> ServeGrant:
    """What the hub answers a server whose request is ``csr``: its CA signs it first."""
    name = admit_server(hub, csr)
    cert = pki.sign_request(str(hub.directory / "pki"), csr.encode("ascii"))
    return hub.grant(name, cert.decode("ascii"), now=NOW + 1)


def install(
    directory: Path, grant: ServeGrant, hub: Deployment, *, deployment: str | None = None
) -> member.Member:
    return member.install(
        directory,
        grant,
        (hub.directory / "pki" / "ca.pem").read_text(),
        deployment=deployment if deployment is not None else hub.account.public_key,
        listen="0.0.0.0:4222",
        cluster_listen="0.0.0.0:6222",
        client=CLIENT,
        cluster=CLUSTER,
    )


@pytest.fixture
def hub(tmp_path: Path) -> Deployment:
    return make_hub(tmp_path / "hub")


@pytest.fixture
def served(tmp_path: Path) -> Path:
    return tmp_path / "member"


# -- the request -----------------------------------------------------------------------------------


def test_the_request_keeps_the_key_private_and_asks_for_the_hosts(served: Path) -> None:
    csr = member.request(served, [MEMBER_HOST, "hub2.example.org"])
    assert csr.startswith("-----BEGIN CERTIFICATE REQUEST-----")
    assert sorted(pki.requested_hosts(csr.encode())) == [MEMBER_HOST, "hub2.example.org"]
    key = served / "pki" / "server-key.pem"
    assert mode_of(key) == 0o600
    assert mode_of(served) == mode_of(served / "pki") == 0o700
    assert "PRIVATE KEY" in key.read_text()
    assert "PRIVATE KEY" not in csr
    # The request is for the key kept: the hub's certificate of it checks out against it.
    ca_dir = served.parent / "ca"
    made = pki.create(str(ca_dir), ["127.0.0.1"])
    cert = pki.sign_request(str(ca_dir), csr.encode())
    pki.check_issued(Path(made.ca).read_bytes(), cert, key.read_bytes())
    assert not member.is_member(served)


# -- installing what the hub granted ---------------------------------------------------------------


def test_an_installed_member_is_configured_to_serve_in_the_cluster(
    hub: Deployment, served: Path
) -> None:
    csr = member.request(served, [MEMBER_HOST])
    grant = granted(hub, csr)
    assert grant.name == "pi-xs-2"
    assert grant.routes == (f"{HUB_HOST}:6222", CLUSTER)
    installed = install(served, grant, hub)
    assert installed == member.Member(
        served, "pi-xs-2", "0.0.0.0:4222", "0.0.0.0:6222", CLIENT, CLUSTER, grant.routes
    )
    assert member.is_member(served)
    assert not member.is_member(hub.directory)
    files = sorted(p.relative_to(served).as_posix() for p in served.rglob("*") if p.is_file())
    assert files == [
        "auth.conf",
        "member.json",
        "pki/ca.pem",
        "pki/server-key.pem",
        "pki/server.pem",
        "server.conf",
    ]
    assert {name: mode_of(served / name) for name in files} == dict.fromkeys(files, 0o600)
    assert (served / "pki" / "server.pem").read_text() == grant.cert
    assert (served / "pki" / "ca.pem").read_bytes() == (
        hub.directory / "pki" / "ca.pem"
    ).read_bytes()
    # No seed of the deployment's reached the member.
    kept = b"".join(p.read_bytes() for p in served.rglob("*") if p.is_file())
    for key in (hub.operator, hub.account, hub.system):
        assert key.seed.encode() not in kept


def test_the_members_auth_part_preloads_both_accounts(hub: Deployment, served: Path) -> None:
    grant = granted(hub, member.request(served, [MEMBER_HOST]))
    install(served, grant, hub)
    text = (served / "auth.conf").read_text()
    operator, system_account, preload = auth_parts(text)
    assert (operator, system_account) == (grant.operator, hub.system.public_key)
    assert preload == {
        hub.system.public_key: grant.system_jwt,
        hub.account.public_key: grant.account_jwt,
    }
    assert nats_jwt.decode(preload[hub.account.public_key]).subject == hub.account.public_key
    assert f'dir: "{served / "jwt"}"' in text
    # As the hub's own server has it, but for the resolver's directory.
    hub_operator, hub_system, hub_preload = auth_parts(hub.auth_config(now=NOW + 1))
    assert (hub_operator, hub_system, hub_preload) == (operator, system_account, preload)


def test_the_members_server_routes_to_the_others_and_not_to_itself(
    hub: Deployment, served: Path
) -> None:
    grant = granted(hub, member.request(served, [MEMBER_HOST]))
    installed = install(served, grant, hub)
    config = (served / "server.conf").read_text()
    assert config == installed.server_config()
    assert installed.config_file == served / "server.conf"
    assert installed.port == 4222
    lines = config.splitlines()
    assert "server_name: pi-xs-2" in lines
    assert "listen: 0.0.0.0:4222" in lines
    assert f'client_advertise: "{CLIENT}"' in lines
    assert 'include "auth.conf"' in lines
    assert "  handshake_first: true" in lines
    (cluster,) = [line for line in lines if line.startswith("cluster {")]
    assert f"routes: [ nats-route://{HUB_HOST}:6222 ]" in cluster
    assert f"nats-route://{CLUSTER}" not in cluster
    assert f'advertise: "{CLUSTER}"' in cluster
    assert "listen: 0.0.0.0:6222" in cluster
    pki_dir = served / "pki"
    assert (
        f'tls {{ cert_file: "{pki_dir / "server.pem"}", key_file: "{pki_dir / "server-key.pem"}", '
        f'ca_file: "{pki_dir / "ca.pem"}", verify: true }}'
    ) in cluster
    assert str(hub.directory) not in config


def test_a_member_reads_back_as_installed(hub: Deployment, served: Path) -> None:
    grant = granted(hub, member.request(served, [MEMBER_HOST]))
    installed = install(served, grant, hub)
    again = member.open_member(served)
    assert again == installed
    assert again.server_config() == (served / "server.conf").read_text()
    body = json.loads((served / "member.json").read_text())
    assert body == {
        "version": 1,
        "name": "pi-xs-2",
        "listen": "0.0.0.0:4222",
        "clusterListen": "0.0.0.0:6222",
        "client": CLIENT,
        "cluster": CLUSTER,
        "routes": [f"{HUB_HOST}:6222", CLUSTER],
    }


# -- what is not installed -------------------------------------------------------------------------


def test_a_certificate_for_another_key_is_not_installed(hub: Deployment, served: Path) -> None:
    """The hub answered with a certificate for someone else's request: this server's key could
    not use it."""
    member.request(served, [MEMBER_HOST])
    other = member.request(served.parent / "other", [MEMBER_HOST])
    grant = granted(hub, other)
    with pytest.raises(pki.PkiError):
        install(served, grant, hub)
    assert not member.is_member(served)
    assert not (served / "server.conf").exists()


def test_a_certificate_from_another_ca_is_not_installed(
    hub: Deployment, served: Path, tmp_path: Path
) -> None:
    csr = member.request(served, [MEMBER_HOST])
    grant = granted(hub, csr)
    other = pki.create(str(tmp_path / "other-ca"), [HUB_HOST])
    foreign = pki.sign_request(str(Path(other.ca).parent), csr.encode()).decode()
    with pytest.raises(pki.PkiError):
        install(served, grant.model_copy(update={"cert": foreign}), hub)
    assert not member.is_member(served)


def test_the_jwt_of_another_account_is_not_installed(
    hub: Deployment, served: Path, tmp_path: Path
) -> None:
    grant = granted(hub, member.request(served, [MEMBER_HOST]))
    # The join line named another deployment than the one that answered.
    elsewhere = NKey.generate(Role.ACCOUNT).public_key
    with pytest.raises(DeploymentError, match="another account"):
        install(served, grant, hub, deployment=elsewhere)
    assert not member.is_member(served)
    # The answer carries another deployment's account JWT.
    other = Deployment.open(tmp_path / "other", create=True)
    swapped = grant.model_copy(update={"account_jwt": other.account_jwt(now=NOW)})
    with pytest.raises(DeploymentError, match="another account"):
        install(served, swapped, hub)
    # Or the system account's, which is no deployment's.
    with pytest.raises(DeploymentError, match="another account"):
        install(served, grant.model_copy(update={"account_jwt": grant.system_jwt}), hub)
    assert not member.is_member(served)
    assert not (served / "server.conf").exists()


@pytest.mark.parametrize("jwt", ["", "a.b.c", "not a jwt"])
def test_an_account_jwt_that_cannot_be_read_is_not_installed(
    hub: Deployment, served: Path, jwt: str
) -> None:
    grant = granted(hub, member.request(served, [MEMBER_HOST]))
    with pytest.raises(DeploymentError):
        install(served, grant.model_copy(update={"account_jwt": jwt}), hub)
    assert not member.is_member(served)


def test_without_its_key_nothing_is_installed(hub: Deployment, served: Path) -> None:
    grant = granted(hub, pki.request([MEMBER_HOST])[1].decode())
    with pytest.raises(fs.FileOperationError) as missing:
        install(served, grant, hub)
    assert missing.value.code == "ENOENT"
    assert not member.is_member(served)


# -- reading a member back -------------------------------------------------------------------------


def test_no_member_where_there_is_none(served: Path) -> None:
    with pytest.raises(DeploymentError):
        member.open_member(served)
    assert not member.is_member(served)


DAMAGED_MEMBERS = {
    "not json": b"{",
    "empty": b"",
    "a list": b"[]",
    "a string": b'"pi-xs-2"',
    "no name": {"name": ...},
    "no routes": {"routes": ...},
    "no listen": {"listen": ...},
    "name a number": {"name": 2},
    "listen a number": {"listen": 4222},
    "client null": {"client": None},
    "routes a number": {"routes": 6222},
    "routes null": {"routes": None},
    "routes a string": {"routes": "abc"},
    "a route a number": {"routes": [6222]},
    "cluster null": {"cluster": None},
    "cluster listen a number": {"clusterListen": 7},
}


@pytest.mark.parametrize("case", sorted(DAMAGED_MEMBERS))
def test_a_damaged_member_file_is_refused(hub: Deployment, served: Path, case: str) -> None:
    install(served, granted(hub, member.request(served, [MEMBER_HOST])), hub)
    damage = DAMAGED_MEMBERS[case]
    if isinstance(damage, bytes):
        data = damage
    else:
        body = json.loads((served / "member.json").read_text()) | damage
        data = json.dumps({k: v for k, v in body.items() if v is not ...}).encode()
    (served / "member.json").write_bytes(data)
    with pytest.raises(DeploymentError):
        member.open_member(served)


# -- what the hub signs, and what revoking a server leaves -----------------------------------------


def test_the_hub_signs_only_the_names_a_server_serves_at(hub: Deployment, served: Path) -> None:
    """A server invitation does not buy a certificate for the hub's name (with which the new
    server could pass for the hub with every machine)."""
    admissions = Admissions(hub.directory, cast(Any, None))
    greedy = ask_to_serve(hub, member.request(served, [MEMBER_HOST, "hub.example"]))
    with pytest.raises(AdmissionRefusedError) as refused:
        admissions._admit(greedy, NOW + 1)
    assert refused.value.code == "bad_csr"
    assert "hub.example" in str(refused.value)
    assert Deployment.open(hub.directory).members == {}  # nothing saved

    fair = ask_to_serve(hub, member.request(served, [MEMBER_HOST, "localhost"]))
    _, name, grant = admissions._admit(fair, NOW + 1)
    assert grant is not None
    assert (name, grant.name) == ("second", "pi-xs-2")


def test_a_revoked_machine_is_no_longer_routed_to(hub: Deployment, served: Path) -> None:
    admit_server(hub, member.request(served, [MEMBER_HOST]))
    assert hub.routes() == [f"{HUB_HOST}:6222", CLUSTER]
    hub.revoke("second", now=NOW + 2)
    assert hub.members == {}
    assert hub.routes() == [f"{HUB_HOST}:6222"]
    assert "cluster" not in hub.server_config()


def test_no_certificate_for_a_name_of_the_hub_even_on_another_port(
    hub: Deployment, served: Path
) -> None:
    """The hub's second name, asked for as the new server's own host on a port of its own."""
    hub.hosts = [HUB_HOST, "hub.example"]
    hub.save(now=NOW)
    csr = member.request(served, ["hub.example"])
    serve = ServeAsk(csr=csr, client="hub.example:4999", cluster="hub.example:6999")
    with pytest.raises(AdmissionRefusedError) as refused:
        Admissions(hub.directory, cast(Any, None))._admit(
            ask_to_serve(hub, csr, serve=serve), NOW + 1
        )
    assert refused.value.code == "address_taken"
    assert Deployment.open(hub.directory).members == {}


def test_a_server_asking_again_keeps_its_name(hub: Deployment, served: Path) -> None:
    """Its first answer lost, or its install failed: the same machine asking again for the same
    places, with a new line, is granted again under the same name."""
    csr = member.request(served, [MEMBER_HOST])
    admissions = Admissions(hub.directory, cast(Any, None))
    first = ask_to_serve(hub, csr)
    _, _, granted_first = admissions._admit(first, NOW + 1)
    reopened = Deployment.open(hub.directory)
    _, _, granted_again = admissions._admit(ask_to_serve(reopened, csr, card=first.card), NOW + 2)
    assert granted_first is not None
    assert granted_again is not None
    assert granted_again.name == granted_first.name == "pi-xs-2"
    assert list(Deployment.open(hub.directory).members) == ["pi-xs-2"]


def test_server_names_are_never_given_twice(hub: Deployment, served: Path) -> None:
    admit_server(hub, member.request(served, [MEMBER_HOST]))
    hub.revoke("second", now=NOW + 2)
    hub.save(now=NOW + 2)
    reopened = Deployment.open(hub.directory)
    admit_server(reopened, member.request(served, [MEMBER_HOST]), name="third")
    assert reopened.member_of("third") == ("pi-xs-3", reopened.members["pi-xs-3"])
