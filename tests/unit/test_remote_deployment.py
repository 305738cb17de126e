"""A deployment's NATS authorization on disk (plugin/remote/deployment.py): its keys, the files it
writes and their modes, each machine's JWT, revocation, and the machine cards it admits."""

from __future__ import annotations

import base64
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from pi_cross_session.plugin.remote.deployment import (
    ACCOUNT_NAME,
    AdmissionRefusedError,
    Deployment,
    DeploymentError,
    MachineCard,
)
from pi_cross_session.protocol.errors import CrossSessionError
from pi_cross_session.protocol.remote.join import (
    JOIN_INBOX_PREFIX,
    JOIN_SUBJECT,
    JoinAsk,
    proof_bytes,
)
from pi_cross_session.security.remote import nats_jwt
from pi_cross_session.security.remote.identity import MachineKey, PublicKey
from pi_cross_session.security.remote.nats_jwt import Jwt, NKey, Role
from pi_cross_session.security.remote.permissions import join_permissions, machine_permissions
from pi_cross_session.security.remote.roster import open_roster

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


# -- joining by invitation -------------------------------------------------------------------------

WEEK_S = 7 * 24 * 3600
DESK_IDENTITY = MachineKey.generate()


def identity_card(
    name: str = "server",
    nats: NKey | None = None,
    identity: MachineKey | None = None,
) -> str:
    """A machine card as ``remote show`` prints it (with its identity key)."""
    nats_key = nats if nats is not None else NKey.generate(Role.USER)
    key = identity if identity is not None else MachineKey.generate()
    return f"{name} {key.public_text()} nats:{nats_key.public_key}"


def ask_with(
    invitation: NKey,
    card_text: str,
    *,
    signer: NKey | None = None,
    proved: str | None = None,
) -> JoinAsk:
    """The ask of a joiner holding ``invitation``'s seed (or, to forge one, ``signer``'s),
    proving it over ``card_text`` (or over ``proved``)."""
    key = signer if signer is not None else invitation
    signed = proof_bytes(proved if proved is not None else card_text)
    return JoinAsk(
        invitation=invitation.public_key,
        card=card_text,
        proof=base64.b64encode(key.sign(signed)).decode(),
    )


def refusal_code(deployment: Deployment, ask: JoinAsk, *, now: int = NOW + 1) -> str:
    with pytest.raises(AdmissionRefusedError) as refused:
        deployment.admit_by_invitation(ask, now=now)
    return refused.value.code


def scoped_signers(deployment: Deployment, *, now: int = NOW) -> dict[str, dict[str, object]]:
    account = nats_jwt.decode(deployment.account_jwt(now=now))
    return {entry["key"]: entry for entry in account.nats.get("signing_keys", [])}


def test_an_invitation_is_a_scoped_signer_of_the_account_that_may_only_ask_to_join(
    deployment: Deployment, where: Path
) -> None:
    assert scoped_signers(deployment) == {}
    invitation = deployment.invite(now=NOW, valid_s=WEEK_S)
    assert invitation.role is Role.ACCOUNT
    assert invitation.public_key != deployment.account.public_key
    assert deployment.invitations == {invitation.public_key: NOW + WEEK_S}
    signer = scoped_signers(deployment)[invitation.public_key]
    assert (signer["kind"], signer["role"]) == ("user_scope", "join")
    template = signer["template"]
    assert isinstance(template, dict)
    assert {k: template[k] for k in ("pub", "sub")} == join_permissions().claims()
    assert template["pub"] == {"allow": [JOIN_SUBJECT]}
    assert template["sub"] == {"allow": [f"{JOIN_INBOX_PREFIX}.{{{{subject()}}}}.>"]}
    assert "resp" not in template
    # The servers learn of it from the saved account JWT.
    deployment.save(now=NOW + 1)
    _, _, preload = auth_parts((where / "auth.conf").read_text())
    served = nats_jwt.decode(preload[deployment.account.public_key])
    assert [entry["key"] for entry in served.nats["signing_keys"]] == [invitation.public_key]
    # Its seed is printed once and kept nowhere.
    kept = b"".join(p.read_bytes() for p in where.rglob("*") if p.is_file())
    assert invitation.seed.encode() not in kept


def test_an_invitation_admits_one_machine_once(deployment: Deployment, where: Path) -> None:
    invitation = deployment.invite(now=NOW, valid_s=WEEK_S)
    text = identity_card("server")
    admitted = deployment.admit_by_invitation(ask_with(invitation, text), now=NOW + 1)
    assert admitted == MachineCard.parse(text)
    assert deployment.machines["server"] == admitted
    assert deployment.invitations == {}
    assert invitation.public_key not in scoped_signers(deployment, now=NOW + 1)
    assert refusal_code(deployment, ask_with(invitation, text)) == "invitation_unknown"
    other = identity_card("nas")
    assert refusal_code(deployment, ask_with(invitation, other)) == "invitation_unknown"
    assert "nas" not in deployment.machines
    # Used up on disk as well.
    deployment.save(now=NOW + 1)
    reopened = Deployment.open(where)
    assert reopened.invitations == {}
    assert refusal_code(reopened, ask_with(invitation, other)) == "invitation_unknown"


def test_each_invitation_admits_its_own_machine(deployment: Deployment) -> None:
    first = deployment.invite(now=NOW, valid_s=WEEK_S)
    second = deployment.invite(now=NOW, valid_s=WEEK_S)
    assert len(deployment.invitations) == 2
    deployment.admit_by_invitation(ask_with(second, identity_card("nas")), now=NOW + 1)
    assert list(deployment.invitations) == [first.public_key]
    deployment.admit_by_invitation(ask_with(first, identity_card("server")), now=NOW + 1)
    assert {"nas", "server"} <= set(deployment.machines)


def test_another_hubs_invitation_is_unknown(deployment: Deployment, tmp_path: Path) -> None:
    other = Deployment.open(tmp_path / "other", create=True)
    invitation = other.invite(now=NOW, valid_s=WEEK_S)
    assert refusal_code(deployment, ask_with(invitation, identity_card())) == "invitation_unknown"
    forged = NKey.generate(Role.ACCOUNT)
    assert refusal_code(deployment, ask_with(forged, identity_card())) == "invitation_unknown"


def test_a_lapsed_invitation_is_refused_and_dropped(deployment: Deployment) -> None:
    invitation = deployment.invite(now=NOW, valid_s=60)
    ask = ask_with(invitation, identity_card("server"))
    assert refusal_code(deployment, ask, now=NOW + 60) == "invitation_unknown"
    assert refusal_code(deployment, ask, now=NOW + 3600) == "invitation_unknown"
    assert "server" not in deployment.machines
    assert deployment.drop_lapsed(now=NOW + 59) == []
    assert deployment.drop_lapsed(now=NOW + 60) == [invitation.public_key]
    assert deployment.invitations == {}
    assert scoped_signers(deployment) == {}


def test_an_invitation_is_good_until_its_last_second(deployment: Deployment) -> None:
    invitation = deployment.invite(now=NOW, valid_s=60)
    card_text = identity_card("server")
    assert deployment.admit_by_invitation(ask_with(invitation, card_text), now=NOW + 59).name == (
        "server"
    )


def test_a_new_invitation_drops_the_lapsed_ones(deployment: Deployment) -> None:
    old = deployment.invite(now=NOW, valid_s=60)
    kept = deployment.invite(now=NOW, valid_s=WEEK_S)
    new = deployment.invite(now=NOW + 60, valid_s=60)
    assert set(deployment.invitations) == {kept.public_key, new.public_key}
    assert old.public_key not in scoped_signers(deployment, now=NOW + 60)


def raw_proof(key: NKey, data: bytes) -> str:
    return base64.b64encode(key.sign(data)).decode()


#: Asks whose proof does not hold, from the invitation, the card and the deployment.
FORGED_PROOFS: dict[str, Callable[[NKey, str, Deployment], JoinAsk]] = {
    "signed by another key": lambda invitation, text, _: ask_with(
        invitation, text, signer=NKey.generate(Role.ACCOUNT)
    ),
    "signed by the deployment's account key": lambda invitation, text, deployment: ask_with(
        invitation, text, signer=deployment.account
    ),
    "over another card": lambda invitation, text, _: ask_with(
        invitation, text, proved=identity_card("nas")
    ),
    "over the card renamed": lambda invitation, text, _: ask_with(
        invitation, text, proved=text.replace("server", "servers", 1)
    ),
    "over the card without its context": lambda invitation, text, _: JoinAsk(
        invitation=invitation.public_key, card=text, proof=raw_proof(invitation, text.encode())
    ),
    "not base64": lambda invitation, text, _: JoinAsk(
        invitation=invitation.public_key, card=text, proof="not base64!"
    ),
    "empty": lambda invitation, text, _: JoinAsk(
        invitation=invitation.public_key, card=text, proof=""
    ),
    "truncated": lambda invitation, text, _: JoinAsk(
        invitation=invitation.public_key,
        card=text,
        proof=raw_proof(invitation, proof_bytes(text))[:40],
    ),
}


@pytest.mark.parametrize("case", sorted(FORGED_PROOFS))
def test_a_proof_that_does_not_hold_is_refused_and_uses_nothing_up(
    deployment: Deployment, case: str
) -> None:
    invitation = deployment.invite(now=NOW, valid_s=WEEK_S)
    text = identity_card("server")
    assert refusal_code(deployment, FORGED_PROOFS[case](invitation, text, deployment)) == (
        "bad_proof"
    )
    assert "server" not in deployment.machines
    # A stranger cannot spend the invitation: its holder still joins with it.
    assert deployment.admit_by_invitation(ask_with(invitation, text), now=NOW + 1).name == "server"


BAD_JOIN_CARDS = {
    "no identity key": lambda: f"server nats:{NKey.generate(Role.USER).public_key}",
    "no nats key": lambda: f"server {MachineKey.generate().public_text()}",
    "not a machine name": lambda: identity_card("Server"),
    "an account key for nats": lambda: (
        f"server {MachineKey.generate().public_text()} "
        f"nats:{NKey.generate(Role.ACCOUNT).public_key}"
    ),
    "a damaged identity key": lambda: (
        f"server ed25519:AAAA nats:{NKey.generate(Role.USER).public_key}"
    ),
    "empty": lambda: "",
}


@pytest.mark.parametrize("case", sorted(BAD_JOIN_CARDS))
def test_a_card_that_cannot_be_admitted_is_refused_with_a_proof_that_holds(
    deployment: Deployment, case: str
) -> None:
    invitation = deployment.invite(now=NOW, valid_s=WEEK_S)
    before = dict(deployment.machines)
    assert refusal_code(deployment, ask_with(invitation, BAD_JOIN_CARDS[case]())) == "bad_card"
    assert deployment.machines == before
    assert list(deployment.invitations) == [invitation.public_key]


def test_a_name_taken_by_another_machine_is_refused(deployment: Deployment) -> None:
    """``laptop`` is admitted: another card of that name is refused, whatever keys it has."""
    invitation = deployment.invite(now=NOW, valid_s=WEEK_S)
    laptop = deployment.machines["laptop"]
    for text in (
        identity_card("laptop"),
        identity_card("laptop", nats=LAPTOP_NATS),  # its NATS key, another identity
        identity_card("laptop", identity=LAPTOP_IDENTITY),  # its identity, another NATS key
    ):
        assert refusal_code(deployment, ask_with(invitation, text)) == "name_taken"
    assert deployment.machines["laptop"] == laptop
    assert deployment.revoked == {}
    assert list(deployment.invitations) == [invitation.public_key]


def test_a_machine_that_joined_may_ask_again_with_a_new_invitation(
    deployment: Deployment,
) -> None:
    """The same card again is no other machine: it is refused only while its invitation is
    used up, and admitted (changing nothing) with a new one."""
    first = deployment.invite(now=NOW, valid_s=WEEK_S)
    text = identity_card("server", identity=DESK_IDENTITY)
    admitted = deployment.admit_by_invitation(ask_with(first, text), now=NOW + 1)
    assert refusal_code(deployment, ask_with(first, text)) == "invitation_unknown"
    second = deployment.invite(now=NOW + 2, valid_s=WEEK_S)
    assert deployment.admit_by_invitation(ask_with(second, text), now=NOW + 3) == admitted
    assert deployment.machines["server"] == admitted
    assert deployment.revoked == {}
    assert deployment.invitations == {}


def test_a_machine_with_a_revoked_nats_key_is_refused_as_an_admission(
    deployment: Deployment,
) -> None:
    """The hub answers a refusal only for :class:`AdmissionRefusedError`; anything else from
    ``admit_by_invitation`` leaves the joiner without an answer."""
    deployment.revoke("desk", now=NOW)
    invitation = deployment.invite(now=NOW, valid_s=WEEK_S)
    text = identity_card("desk", nats=DESK_NATS)
    with pytest.raises(AdmissionRefusedError):
        deployment.admit_by_invitation(ask_with(invitation, text), now=NOW + 1)
    assert "desk" not in deployment.machines
    assert list(deployment.invitations) == [invitation.public_key]


def test_a_nats_key_of_another_machine_is_not_admitted_under_a_new_name(
    deployment: Deployment,
) -> None:
    """One NATS user key is one machine: were the laptop's key admitted again as ``nas`` (a card
    anyone may copy from ``remote show``), revoking ``nas`` would revoke the laptop too, and
    the laptop's seed would hold the JWTs of two machines."""
    invitation = deployment.invite(now=NOW, valid_s=WEEK_S)
    text = identity_card("nas", nats=LAPTOP_NATS)
    with pytest.raises(AdmissionRefusedError):
        deployment.admit_by_invitation(ask_with(invitation, text), now=NOW + 1)
    assert "nas" not in deployment.machines


def test_invitations_and_the_roster_seq_survive_a_reopen(
    deployment: Deployment, where: Path
) -> None:
    first = deployment.invite(now=NOW, valid_s=60)
    second = deployment.invite(now=NOW, valid_s=WEEK_S)
    deployment.save(now=NOW + 1)
    body = json.loads((where / "deployment.json").read_text())
    assert body["invitations"] == {first.public_key: NOW + 60, second.public_key: NOW + WEEK_S}
    assert body["rosterSeq"] == deployment.roster_seq
    again = Deployment.open(where)
    assert again.invitations == deployment.invitations
    assert again.roster_seq == deployment.roster_seq
    assert set(scoped_signers(again)) == {first.public_key, second.public_key}
    again.admit_by_invitation(ask_with(second, identity_card("server")), now=NOW + 2)
    assert "server" in again.machines


def test_a_deployment_written_before_invitations_opens_with_none(
    deployment: Deployment, where: Path
) -> None:
    body = json.loads((where / "deployment.json").read_text())
    del body["invitations"], body["rosterSeq"]
    (where / "deployment.json").write_text(json.dumps(body))
    again = Deployment.open(where)
    assert (again.invitations, again.roster_seq) == ({}, 0)


@pytest.mark.parametrize(
    "change",
    [
        {"invitations": []},
        {"invitations": {"A": "soon"}},
        {"invitations": {"A": 1.5}},
        {"rosterSeq": -1},
        {"rosterSeq": "1"},
        {"rosterSeq": 1.5},
    ],
)
def test_a_damaged_invitation_list_or_roster_seq_is_refused(
    deployment: Deployment, where: Path, change: dict[str, object]
) -> None:
    body = json.loads((where / "deployment.json").read_text())
    (where / "deployment.json").write_text(json.dumps(body | change))
    with pytest.raises(DeploymentError):
        Deployment.open(where)


def test_every_save_makes_a_newer_roster_even_when_the_clock_goes_back(
    deployment: Deployment, where: Path
) -> None:
    seqs = [deployment.roster_seq]
    assert seqs[0] == NOW * 1000
    for now in (NOW, NOW - 3600, NOW + 1, 0):
        deployment.save(now=now)
        seqs.append(deployment.roster_seq)
    assert seqs == [
        NOW * 1000,
        NOW * 1000 + 1,
        NOW * 1000 + 2,
        NOW * 1000 + 1000,
        NOW * 1000 + 1001,
    ]
    reopened = Deployment.open(where)
    assert reopened.roster_seq == seqs[-1]
    reopened.save(now=NOW - 10)
    assert reopened.roster_seq == seqs[-1] + 1


def test_the_roster_lists_the_machines_with_an_identity_key(deployment: Deployment) -> None:
    roster = deployment.roster(seq=42)
    assert (roster.deployment, roster.account, roster.seq) == (
        deployment.account.public_key,
        ACCOUNT_NAME,
        42,
    )
    # The desk was admitted by hand, without an identity key: the roster cannot vouch for it.
    assert dict(roster.machines) == {"laptop": LAPTOP_IDENTITY.public_key}


def test_the_sealed_roster_opens_with_the_deployment_key(deployment: Deployment) -> None:
    invitation = deployment.invite(now=NOW, valid_s=WEEK_S)
    text = identity_card("server", identity=DESK_IDENTITY)
    deployment.admit_by_invitation(ask_with(invitation, text), now=NOW + 1)
    deployment.save(now=NOW + 1)
    key = PublicKey(nats_jwt.public_key_bytes(deployment.account.public_key))
    sealed = deployment.sealed_roster(seq=deployment.roster_seq)
    opened = open_roster(sealed, key, deployment.account.public_key)
    assert opened == deployment.roster(seq=deployment.roster_seq)
    assert opened is not None
    assert dict(opened.machines) == {
        "laptop": LAPTOP_IDENTITY.public_key,
        "server": DESK_IDENTITY.public_key,
    }
    # Only the deployment's own account key opens it, and only for this deployment.
    for other in (deployment.system, deployment.operator):
        other_key = PublicKey(nats_jwt.public_key_bytes(other.public_key))
        assert open_roster(sealed, other_key, deployment.account.public_key) is None
    assert open_roster(sealed, key, deployment.system.public_key) is None


def test_a_revoked_machine_leaves_the_roster(deployment: Deployment) -> None:
    deployment.revoke("laptop", now=NOW + 1)
    assert dict(deployment.roster(seq=1).machines) == {}
