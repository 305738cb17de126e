"""A deployment's NATS authorization on disk (plugin/remote/deployment.py): its keys, the files it
writes and their modes, each machine's JWT, revocation, and the machine cards it admits."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from pi_cross_session.plugin.remote.deployment import (
    ACCOUNT_NAME,
    Deployment,
    DeploymentError,
    MachineCard,
)
from pi_cross_session.protocol.errors import CrossSessionError
from pi_cross_session.security.remote import nats_jwt
from pi_cross_session.security.remote.identity import MachineKey
from pi_cross_session.security.remote.nats_jwt import Jwt, NKey, Role
from pi_cross_session.security.remote.permissions import machine_permissions

NOW = 1_700_000_000
LAPTOP_NATS = NKey.generate(Role.USER)
DESK_NATS = NKey.generate(Role.USER)
LAPTOP_IDENTITY = MachineKey.generate()


def card(name: str = "laptop", key: NKey = LAPTOP_NATS) -> MachineCard:
    return MachineCard.parse(f"{name} nats:{key.public_key}")


@pytest.fixture
def where(tmp_path: Path) -> Path:
    return tmp_path / "deployment"


@pytest.fixture
def deployment(where: Path) -> Deployment:
    made = Deployment.open(where, create=True)
    made.admit(
        MachineCard.parse(f"laptop {LAPTOP_IDENTITY.public_text()} nats:{LAPTOP_NATS.public_key}"),
        now=NOW,
    )
    made.admit(card("desk", DESK_NATS), now=NOW)
    made.save(now=NOW)
    return made


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def auth_parts(text: str) -> tuple[str, str, dict[str, str]]:
    """The operator JWT, the system account and the preloaded account JWTs of an auth part."""
    lines = text.splitlines()
    values = dict(
        line.split(": ", 1) for line in lines if not line.startswith(" ") and ": " in line
    )
    start = lines.index("resolver_preload: {")
    end = lines.index("}", start)
    preload = dict(line.strip().split(": ", 1) for line in lines[start + 1 : end])
    return values["operator"], values["system_account"], preload


def creds_jwt(path: Path) -> Jwt:
    lines = path.read_text().splitlines()
    return nats_jwt.decode(lines[lines.index("-----BEGIN NATS USER JWT-----") + 1])


# -- keys and files --------------------------------------------------------------------------------


def test_a_new_deployment_makes_its_keys(where: Path) -> None:
    made = Deployment.open(where, create=True)
    assert (made.operator.role, made.account.role, made.system.role) == (
        Role.OPERATOR,
        Role.ACCOUNT,
        Role.ACCOUNT,
    )
    assert made.account.public_key != made.system.public_key
    assert (made.machines, made.revoked) == ({}, {})
    for stem, key in (
        ("operator", made.operator),
        ("account", made.account),
        ("system", made.system),
    ):
        assert NKey((where / f"{stem}.nk").read_text().strip()).public_key == key.public_key


def test_no_deployment_is_made_unless_asked(where: Path) -> None:
    with pytest.raises(DeploymentError):
        Deployment.open(where)


def test_every_file_is_private_in_a_private_dir(where: Path) -> None:
    where.mkdir(mode=0o755)
    made = Deployment.open(where, create=True)
    made.admit(card(), now=NOW)
    made.save(now=NOW)
    assert mode(where) == 0o700
    assert mode(where / "machines") == 0o700
    files = sorted(p.relative_to(where).as_posix() for p in where.rglob("*") if p.is_file())
    assert files == [
        "account.nk",
        "admin.creds",
        "auth.conf",
        "deployment.json",
        "machines/laptop.jwt",
        "operator.nk",
        "server.conf",
        "system.creds",
        "system.nk",
    ]
    assert {name: mode(where / name) for name in files} == dict.fromkeys(files, 0o600)


def test_a_damaged_seed_is_refused_rather_than_replaced(
    deployment: Deployment, where: Path
) -> None:
    seed = (where / "account.nk").read_text().strip()
    damaged = seed[:20] + ("A" if seed[20] != "A" else "B") + seed[21:]
    (where / "account.nk").write_text(damaged)
    with pytest.raises(CrossSessionError):
        Deployment.open(where, create=True)
    assert (where / "account.nk").read_text() == damaged


def test_a_seed_of_the_wrong_role_is_refused(deployment: Deployment, where: Path) -> None:
    (where / "operator.nk").write_text(NKey.generate(Role.ACCOUNT).seed)
    with pytest.raises(DeploymentError, match="operator"):
        Deployment.open(where)


def test_reopening_keeps_the_keys_and_the_machines(deployment: Deployment, where: Path) -> None:
    deployment.revoke("desk", now=NOW + 1)
    deployment.save(now=NOW + 1)
    again = Deployment.open(where)
    assert [k.public_key for k in (again.operator, again.account, again.system)] == [
        k.public_key for k in (deployment.operator, deployment.account, deployment.system)
    ]
    assert again.machines == deployment.machines
    assert again.machines["laptop"].identity_key == LAPTOP_IDENTITY.public_text()
    assert again.revoked == {DESK_NATS.public_key: NOW + 1}
    assert (again.listen, again.hosts) == (deployment.listen, deployment.hosts)


# -- machines --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["laptop", "desk"])
def test_each_machine_jwt_is_the_accounts_and_carries_exactly_its_permissions(
    deployment: Deployment, where: Path, name: str
) -> None:
    jwt = nats_jwt.decode((where / "machines" / f"{name}.jwt").read_text())
    assert jwt.issuer == deployment.account.public_key
    assert jwt.subject == deployment.machines[name].nats_key
    assert jwt.name == name
    granted = {field: jwt.nats[field] for field in ("pub", "sub", "resp") if field in jwt.nats}
    assert granted == machine_permissions(name).claims()
    assert deployment.machine_jwt_path(name) == where / "machines" / f"{name}.jwt"


def test_a_revoked_machine_is_listed_by_the_account_and_loses_its_jwt(
    deployment: Deployment, where: Path
) -> None:
    assert "revocations" not in nats_jwt.decode(deployment.account_jwt(now=NOW)).nats
    returned = deployment.revoke("laptop", now=NOW + 5)
    assert returned.nats_key == LAPTOP_NATS.public_key
    deployment.save(now=NOW + 5)
    account = nats_jwt.decode(deployment.account_jwt(now=NOW + 5))
    assert account.nats["revocations"] == {LAPTOP_NATS.public_key: NOW + 5}
    _, _, preload = auth_parts((where / "auth.conf").read_text())
    served = nats_jwt.decode(preload[deployment.account.public_key])
    assert served.nats["revocations"] == {LAPTOP_NATS.public_key: NOW + 5}
    assert not (where / "machines" / "laptop.jwt").exists()
    assert (where / "machines" / "desk.jwt").exists()
    with pytest.raises(DeploymentError):
        deployment.revoke("laptop", now=NOW + 6)


def test_a_revoked_key_cannot_be_admitted_again(deployment: Deployment, where: Path) -> None:
    deployment.revoke("laptop", now=NOW + 5)
    deployment.save(now=NOW + 5)
    for again in (deployment, Deployment.open(where)):
        with pytest.raises(DeploymentError, match="revoked"):
            again.admit(card(), now=NOW + 6)
        with pytest.raises(DeploymentError, match="revoked"):
            again.admit(card("renamed"), now=NOW + 6)
        assert "laptop" not in again.machines
        assert "renamed" not in again.machines


def test_a_machine_admitted_with_a_new_key_has_its_old_one_revoked(
    deployment: Deployment,
) -> None:
    replacement = NKey.generate(Role.USER)
    deployment.admit(card("laptop", replacement), now=NOW + 7)
    assert deployment.machines["laptop"].nats_key == replacement.public_key
    assert deployment.revoked == {LAPTOP_NATS.public_key: NOW + 7}
    # The same card again changes nothing.
    deployment.admit(card("laptop", replacement), now=NOW + 8)
    assert deployment.revoked == {LAPTOP_NATS.public_key: NOW + 7}


def test_a_machine_card_reads_its_name_and_keys() -> None:
    line = f"laptop {LAPTOP_IDENTITY.public_text()} nats:{LAPTOP_NATS.public_key}"
    parsed = MachineCard.parse(line)
    assert parsed == MachineCard("laptop", LAPTOP_NATS.public_key, LAPTOP_IDENTITY.public_text())
    assert MachineCard.parse(f"  desk nats:{DESK_NATS.public_key} ") == MachineCard(
        "desk", DESK_NATS.public_key
    )


BAD_CARDS = {
    "empty": "",
    "no-nats-key": f"laptop {LAPTOP_IDENTITY.public_text()}",
    "account-key": f"laptop nats:{NKey.generate(Role.ACCOUNT).public_key}",
    "operator-key": f"laptop nats:{NKey.generate(Role.OPERATOR).public_key}",
    "a-seed": f"laptop nats:{LAPTOP_NATS.seed}",
    "bad-checksum": f"laptop nats:{LAPTOP_NATS.public_key[:-1]}"
    + ("A" if LAPTOP_NATS.public_key[-1] != "A" else "B"),
    "not-a-machine-name": f"Laptop nats:{LAPTOP_NATS.public_key}",
    "bad-identity": f"laptop ed25519:AAAA nats:{LAPTOP_NATS.public_key}",
}


@pytest.mark.parametrize("case", sorted(BAD_CARDS))
def test_a_bad_machine_card_is_refused(case: str) -> None:
    with pytest.raises(DeploymentError):
        MachineCard.parse(BAD_CARDS[case])


# -- the server's part -----------------------------------------------------------------------------


def test_the_auth_part_names_the_operator_the_system_account_and_both_accounts(
    deployment: Deployment, where: Path
) -> None:
    text = (where / "auth.conf").read_text()
    assert text == deployment.auth_config(now=NOW)
    operator_text, system_account, preload = auth_parts(text)
    operator = nats_jwt.decode(operator_text)
    assert operator.issuer == operator.subject == deployment.operator.public_key
    assert operator.nats["system_account"] == system_account == deployment.system.public_key
    assert set(preload) == {deployment.system.public_key, deployment.account.public_key}
    system = nats_jwt.decode(preload[deployment.system.public_key])
    account = nats_jwt.decode(preload[deployment.account.public_key])
    assert system.issuer == account.issuer == deployment.operator.public_key
    assert (system.subject, account.subject) == (
        deployment.system.public_key,
        deployment.account.public_key,
    )
    assert account.name == ACCOUNT_NAME
    # Only the machines' account keeps the bucket.
    assert "disk_storage" in account.nats["limits"]
    assert "disk_storage" not in system.nats["limits"]
    assert f'dir: "{where / "jwt"}"' in text
    assert 'include "auth.conf"' in (where / "server.conf").read_text()


def test_the_admin_and_system_credentials_belong_to_their_accounts(
    deployment: Deployment, where: Path
) -> None:
    admin = creds_jwt(deployment.admin_creds)
    assert admin.issuer == deployment.account.public_key
    assert not {"pub", "sub"} & set(admin.nats)
    assert creds_jwt(deployment.system_creds).issuer == deployment.system.public_key
    assert admin.subject not in {card.nats_key for card in deployment.machines.values()}
