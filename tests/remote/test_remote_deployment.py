"""A deployment's NATS authorization on disk (plugin/remote/deployment.py): its keys, the files it
writes and their modes, each machine's JWT, revocation, and the machine cards it admits."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from pi_cross_session._internal.plugin.remote import pki
from pi_cross_session._internal.plugin.remote.deployment import (
    ACCOUNT_NAME,
    DEFAULT_CLUSTER_LISTEN,
    MAX_SERVERS,
    AdmissionRefusedError,
    Deployment,
    DeploymentError,
    MachineCard,
    MemberServer,
    host_port,
)
from pi_cross_session._internal.protocol.errors import CrossSessionError
from pi_cross_session._internal.protocol.remote.join import (
    JOIN_INBOX_PREFIX,
    JOIN_SUBJECT,
    JoinAsk,
    ServeAsk,
    proof_bytes,
)
from pi_cross_session._internal.security.remote import nats_jwt
from pi_cross_session._internal.security.remote.identity import MachineKey, PublicKey
from pi_cross_session._internal.security.remote.nats_jwt import Jwt, NKey, Role
from pi_cross_session._internal.security.remote.permissions import (
    join_permissions,
    machine_permissions,
)
from pi_cross_session._internal.security.remote.roster import open_roster
from tests.support.auth_part import auth_parts
from tests.support.file_state import mode_of

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
    assert mode_of(where) == 0o700
    assert mode_of(where / "machines") == 0o700
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
    assert {name: mode_of(where / name) for name in files} == dict.fromkeys(files, 0o600)


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
        {"serverInvitations": "A"},
        {"serverInvitations": {}},
        {"server": {"members": ["pi-xs-2"]}},
        {"server": {"members": {"pi-xs-2": "second"}}},
        {"server": {"members": {"pi-xs-2": None}}},
    ],
)
def test_a_damaged_invitation_list_roster_seq_or_server_list_is_refused(
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


# -- more servers: members -------------------------------------------------------------------------

HUB_HOST = "10.0.0.5"
CSR = "-----BEGIN CERTIFICATE REQUEST-----\nMIIB\n-----END CERTIFICATE REQUEST-----\n"


def serve(host: str, *, client_port: int = 4222, cluster_port: int = 6222) -> ServeAsk:
    """What a machine at ``host`` asks to serve as (its request is not read here: the hub
    signs it after admitting, plugin/remote/hub.py)."""
    return ServeAsk(csr=CSR, client=f"{host}:{client_port}", cluster=f"{host}:{cluster_port}")


def serving_ask(
    invitation: NKey, card_text: str, served: ServeAsk | None, *, proved: ServeAsk | None = None
) -> JoinAsk:
    """The ask of a joiner holding ``invitation``'s seed, to serve as ``served``, proving it over
    its card and ``served`` (or over ``proved``)."""
    signed = proof_bytes(card_text, proved if proved is not None else served)
    return JoinAsk(
        invitation=invitation.public_key,
        card=card_text,
        proof=base64.b64encode(invitation.sign(signed)).decode(),
        serve=served,
    )


@pytest.fixture
def hub(deployment: Deployment, where: Path) -> Deployment:
    """The deployment as a hub keeps it: reached at one address, with its CA in ``pki/``."""
    deployment.hosts = [HUB_HOST]
    pki.create(str(where / "pki"), [HUB_HOST])
    deployment.save(now=NOW)
    return deployment


def add_member(hub: Deployment, name: str, host: str) -> MachineCard:
    invitation = hub.invite(now=NOW, valid_s=WEEK_S, server=True)
    return hub.admit_by_invitation(
        serving_ask(invitation, identity_card(name), serve(host)), now=NOW + 1
    )


def places(host: str) -> tuple[str, str]:
    return f"{host}:4222", f"{host}:6222"


def cluster_line(config: str) -> str:
    (line,) = [line for line in config.splitlines() if line.startswith("cluster {")]
    return line


def test_a_server_invitation_is_kept_as_one_and_survives_a_reopen(
    deployment: Deployment, where: Path
) -> None:
    machine = deployment.invite(now=NOW, valid_s=WEEK_S)
    server = deployment.invite(now=NOW, valid_s=WEEK_S, server=True)
    assert server.role is Role.ACCOUNT
    assert set(deployment.invitations) == {machine.public_key, server.public_key}
    assert deployment.server_invitations == {server.public_key}
    # Both are the account's scoped signers: a server's joiner asks as a machine's does.
    assert set(scoped_signers(deployment)) == {machine.public_key, server.public_key}
    deployment.save(now=NOW + 1)
    body = json.loads((where / "deployment.json").read_text())
    assert body["serverInvitations"] == [server.public_key]
    again = Deployment.open(where)
    assert again.server_invitations == {server.public_key}
    assert again.invitations == deployment.invitations


def test_a_lapsed_server_invitation_is_dropped_as_both(deployment: Deployment, where: Path) -> None:
    server = deployment.invite(now=NOW, valid_s=60, server=True)
    kept = deployment.invite(now=NOW, valid_s=WEEK_S, server=True)
    assert deployment.drop_lapsed(now=NOW + 60) == [server.public_key]
    assert deployment.invitations == {kept.public_key: NOW + WEEK_S}
    assert deployment.server_invitations == {kept.public_key}
    deployment.save(now=NOW + 60)
    body = json.loads((where / "deployment.json").read_text())
    assert body["serverInvitations"] == [kept.public_key]
    assert Deployment.open(where).server_invitations == {kept.public_key}


def test_a_server_invitation_listed_without_its_invitation_is_not_one(
    deployment: Deployment, where: Path
) -> None:
    """``serverInvitations`` marks open invitations; a key it lists that is none admits no
    server."""
    kept = deployment.invite(now=NOW, valid_s=WEEK_S, server=True)
    deployment.save(now=NOW)
    body = json.loads((where / "deployment.json").read_text())
    stray = NKey.generate(Role.ACCOUNT).public_key
    body["serverInvitations"].append(stray)
    (where / "deployment.json").write_text(json.dumps(body))
    assert Deployment.open(where).server_invitations == {kept.public_key}


def test_a_deployment_written_before_servers_opens_with_none(
    deployment: Deployment, where: Path
) -> None:
    body = json.loads((where / "deployment.json").read_text())
    del body["serverInvitations"], body["server"]["members"], body["server"]["clusterListen"]
    (where / "deployment.json").write_text(json.dumps(body))
    again = Deployment.open(where)
    assert (again.members, again.server_invitations) == ({}, set())
    assert again.cluster_listen == DEFAULT_CLUSTER_LISTEN


def test_a_server_invitation_admits_no_plain_machine(deployment: Deployment) -> None:
    server = deployment.invite(now=NOW, valid_s=WEEK_S, server=True)
    text = identity_card("second")
    assert refusal_code(deployment, ask_with(server, text)) == "wrong_invitation"
    assert "second" not in deployment.machines
    assert deployment.server_invitations == {server.public_key}
    # Its holder still joins as a server with it.
    deployment.admit_by_invitation(serving_ask(server, text, serve("10.0.0.6")), now=NOW + 1)
    assert deployment.member_of("second") is not None


def test_a_machine_invitation_admits_no_server(deployment: Deployment) -> None:
    machine = deployment.invite(now=NOW, valid_s=WEEK_S)
    text = identity_card("second")
    ask = serving_ask(machine, text, serve("10.0.0.6"))
    assert refusal_code(deployment, ask) == "wrong_invitation"
    assert "second" not in deployment.machines
    assert deployment.members == {}
    assert list(deployment.invitations) == [machine.public_key]
    deployment.admit_by_invitation(ask_with(machine, text), now=NOW + 1)
    assert deployment.members == {}


def test_servers_are_named_in_turn_with_the_places_they_asked_for(hub: Deployment) -> None:
    first = hub.invite(now=NOW, valid_s=WEEK_S, server=True)
    second = hub.invite(now=NOW, valid_s=WEEK_S, server=True)
    text = identity_card("second")
    admitted = hub.admit_by_invitation(
        serving_ask(first, text, serve("10.0.0.6", client_port=4333, cluster_port=6333)),
        now=NOW + 1,
    )
    assert admitted == MachineCard.parse(text)
    assert hub.machines["second"] == admitted
    assert hub.members == {"pi-xs-2": MemberServer("second", "10.0.0.6:4333", "10.0.0.6:6333")}
    assert hub.invitations == {second.public_key: NOW + WEEK_S}
    assert hub.server_invitations == {second.public_key}
    assert refusal_code(hub, serving_ask(first, text, serve("10.0.0.9"))) == "invitation_unknown"
    hub.admit_by_invitation(
        serving_ask(second, identity_card("third"), serve("hub3.example.org")), now=NOW + 1
    )
    assert hub.members["pi-xs-3"] == MemberServer(
        "third", "hub3.example.org:4222", "hub3.example.org:6222"
    )
    assert (hub.invitations, hub.server_invitations) == ({}, set())
    assert hub.member_of("second") == ("pi-xs-2", hub.members["pi-xs-2"])
    assert hub.member_of("third") == ("pi-xs-3", hub.members["pi-xs-3"])
    assert hub.member_of("laptop") is None


#: Places a third server may not take once the hub is at HUB_HOST and a member at 10.0.0.6.
SERVED_ELSEWHERE = {
    "the hub's client address": serve(HUB_HOST, client_port=4222, cluster_port=6333),
    "the hub's route address": serve(HUB_HOST, client_port=4333, cluster_port=6222),
    "a member's client address": serve("10.0.0.6", client_port=4222, cluster_port=6333),
    "a member's route address": serve("10.0.0.6", client_port=4333, cluster_port=6222),
    "a member's route as its client address": ServeAsk(
        csr=CSR, client="10.0.0.6:6222", cluster="10.0.0.7:6222"
    ),
    "one address for both": serve("10.0.0.7", client_port=4222, cluster_port=4222),
    "the hub's host on other ports": serve(HUB_HOST, client_port=4999, cluster_port=6999),
    "a member's host on other ports": serve("10.0.0.6", client_port=4999, cluster_port=6999),
}


@pytest.mark.parametrize("case", sorted(SERVED_ELSEWHERE))
def test_a_server_reached_where_another_is_is_refused(hub: Deployment, case: str) -> None:
    add_member(hub, "second", "10.0.0.6")
    invitation = hub.invite(now=NOW, valid_s=WEEK_S, server=True)
    before = dict(hub.members)
    ask = serving_ask(invitation, identity_card("third"), SERVED_ELSEWHERE[case])
    assert refusal_code(hub, ask) == "address_taken"
    assert hub.members == before
    assert "third" not in hub.machines
    assert hub.server_invitations == {invitation.public_key}
    # Somewhere free, its holder still serves with it.
    hub.admit_by_invitation(
        serving_ask(invitation, identity_card("third"), serve("10.0.0.7")), now=NOW + 1
    )
    assert hub.member_of("third") == ("pi-xs-3", MemberServer("third", *places("10.0.0.7")))


def test_a_machine_serves_once(hub: Deployment) -> None:
    text = identity_card("second", identity=DESK_IDENTITY)
    first = hub.invite(now=NOW, valid_s=WEEK_S, server=True)
    hub.admit_by_invitation(serving_ask(first, text, serve("10.0.0.6")), now=NOW + 1)
    again = hub.invite(now=NOW, valid_s=WEEK_S, server=True)
    assert refusal_code(hub, serving_ask(again, text, serve("10.0.0.7"))) == "name_taken"
    assert list(hub.members) == ["pi-xs-2"]
    assert hub.server_invitations == {again.public_key}


def test_a_deployment_has_at_most_max_servers_counting_open_invitations(
    hub: Deployment,
) -> None:
    assert MAX_SERVERS == 5
    add_member(hub, "second", "10.0.0.6")
    open_ones = [hub.invite(now=NOW, valid_s=60, server=True) for _ in range(MAX_SERVERS - 2)]
    # The hub's server, one member and three open invitations: five.
    with pytest.raises(DeploymentError, match="at most"):
        hub.invite(now=NOW, valid_s=WEEK_S, server=True)
    assert len(hub.server_invitations) == MAX_SERVERS - 2
    # A machine's invitation is no server's.
    hub.invite(now=NOW, valid_s=WEEK_S)
    # Used, an invitation is a member instead: still five.
    hub.admit_by_invitation(
        serving_ask(open_ones[0], identity_card("third"), serve("10.0.0.7")), now=NOW + 1
    )
    with pytest.raises(DeploymentError, match="at most"):
        hub.invite(now=NOW + 1, valid_s=WEEK_S, server=True)
    # Lapsed, the others free their places.
    hub.invite(now=NOW + 60, valid_s=WEEK_S, server=True)
    assert len(hub.members) + len(hub.server_invitations) == 3


def test_members_survive_a_reopen(hub: Deployment, where: Path) -> None:
    add_member(hub, "second", "10.0.0.6")
    add_member(hub, "third", "hub3.example.org")
    hub.cluster_listen = "0.0.0.0:7222"
    hub.save(now=NOW + 1)
    body = json.loads((where / "deployment.json").read_text())
    assert body["server"]["members"] == {
        "pi-xs-2": {"machine": "second", "client": "10.0.0.6:4222", "cluster": "10.0.0.6:6222"},
        "pi-xs-3": {
            "machine": "third",
            "client": "hub3.example.org:4222",
            "cluster": "hub3.example.org:6222",
        },
    }
    again = Deployment.open(where)
    assert again.members == hub.members
    assert again.cluster_listen == "0.0.0.0:7222"
    assert again.routes() == hub.routes()
    assert again.server_config() == hub.server_config()


def test_the_hub_alone_has_no_cluster(hub: Deployment, where: Path) -> None:
    config = hub.server_config()
    assert "cluster" not in config
    assert "advertise" not in config
    assert (where / "server.conf").read_text() == config


def test_with_members_the_hubs_server_routes_to_theirs_over_verified_tls(
    hub: Deployment, where: Path
) -> None:
    add_member(hub, "second", "10.0.0.6")
    add_member(hub, "third", "hub3.example.org")
    hub.save(now=NOW + 1)
    config = (where / "server.conf").read_text()
    assert config == hub.server_config()
    assert "server_name: pi-xs-1" in config.splitlines()
    assert f'client_advertise: "{HUB_HOST}:4222"' in config.splitlines()
    cluster = cluster_line(config)
    assert cluster.startswith("cluster { name: pi-xs, listen: 0.0.0.0:6222, ")
    assert "routes: [ nats-route://10.0.0.6:6222, nats-route://hub3.example.org:6222 ]" in cluster
    assert f"nats-route://{HUB_HOST}" not in cluster  # not to itself
    assert f'advertise: "{HUB_HOST}:6222"' in cluster
    pki_dir = where / "pki"
    assert (
        f'tls {{ cert_file: "{pki_dir / "server.pem"}", key_file: "{pki_dir / "server-key.pem"}", '
        f'ca_file: "{pki_dir / "ca.pem"}", verify: true }}'
    ) in cluster


def test_without_a_ca_the_hub_opens_no_routes(deployment: Deployment) -> None:
    """Routes are verified with the deployment's CA: a deployment without one (``remote
    deploy`` without ``remote pki``) lists its members but routes to none of them in clear."""
    add_member(deployment, "second", "10.0.0.6")
    assert deployment.members
    config = deployment.server_config()
    assert "cluster" not in config
    assert "nats-route" not in config


def test_the_routes_list_the_hub_first(hub: Deployment) -> None:
    assert hub.routes() == [f"{HUB_HOST}:6222"]
    add_member(hub, "second", "10.0.0.6")
    add_member(hub, "third", "hub3.example.org")
    assert hub.routes() == [f"{HUB_HOST}:6222", "10.0.0.6:6222", "hub3.example.org:6222"]
    assert (hub.client_advertise, hub.cluster_advertise) == (f"{HUB_HOST}:4222", f"{HUB_HOST}:6222")


def test_a_hub_without_hosts_advertises_loopback(deployment: Deployment) -> None:
    deployment.listen, deployment.cluster_listen = "0.0.0.0:5222", "0.0.0.0:7222"
    assert (deployment.client_advertise, deployment.cluster_advertise) == (
        "127.0.0.1:5222",
        "127.0.0.1:7222",
    )


@pytest.mark.parametrize(
    ("host", "listen", "expected"),
    [
        ("10.0.0.5", "0.0.0.0:4222", "10.0.0.5:4222"),
        ("hub.example.org", "127.0.0.1:6222", "hub.example.org:6222"),
        ("::1", "0.0.0.0:4222", "[::1]:4222"),
        ("fd00::5", "[::]:6222", "[fd00::5]:6222"),
    ],
)
def test_host_port_names_a_server_as_nats_does(host: str, listen: str, expected: str) -> None:
    assert host_port(host, listen) == expected


def test_a_grant_holds_what_a_member_needs_and_no_seed(hub: Deployment) -> None:
    add_member(hub, "second", "10.0.0.6")
    cert = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    grant = hub.grant("pi-xs-2", cert, now=NOW + 1)
    assert (grant.name, grant.cert) == ("pi-xs-2", cert)
    assert grant.routes == (f"{HUB_HOST}:6222", "10.0.0.6:6222")
    account = nats_jwt.decode(grant.account_jwt)
    assert account.subject == hub.account.public_key
    assert account.issuer == hub.operator.public_key
    assert grant.account_jwt == hub.account_jwt(now=NOW + 1)
    assert grant.system_account == hub.system.public_key
    system = nats_jwt.decode(grant.system_jwt)
    assert (system.subject, system.issuer) == (hub.system.public_key, hub.operator.public_key)
    operator = nats_jwt.decode(grant.operator)
    assert operator.subject == hub.operator.public_key
    assert operator.nats["system_account"] == hub.system.public_key
    # The same authorization as the hub's own server's.
    operator_text, system_account, preload = auth_parts(hub.auth_config(now=NOW + 1))
    assert (grant.operator, grant.system_account) == (operator_text, system_account)
    assert preload == {
        hub.system.public_key: grant.system_jwt,
        hub.account.public_key: grant.account_jwt,
    }
    text = grant.model_dump_json()
    for key in (hub.operator, hub.account, hub.system):
        assert key.seed not in text


@pytest.mark.parametrize(
    "proved",
    [
        None,
        serve("10.0.0.6", client_port=4333),
        serve("10.0.0.6", cluster_port=6333),
        serve("10.0.0.7"),
        ServeAsk(csr=CSR.replace("MIIB", "MIIC"), client="10.0.0.6:4222", cluster="10.0.0.6:6222"),
    ],
    ids=["without-serve", "other-client", "other-cluster", "other-host", "other-csr"],
)
def test_the_proof_covers_what_is_served(hub: Deployment, proved: ServeAsk | None) -> None:
    """Whoever sees an ask on its way cannot send it again to serve elsewhere, or with their
    own key's request."""
    invitation = hub.invite(now=NOW, valid_s=WEEK_S, server=True)
    text = identity_card("second")
    served = serve("10.0.0.6")
    if proved is None:
        forged = ask_with(invitation, text).model_copy(update={"serve": served})
    else:
        forged = serving_ask(invitation, text, served, proved=proved)
    assert forged.serve == served
    assert refusal_code(hub, forged) == "bad_proof"
    assert hub.members == {}
    assert hub.server_invitations == {invitation.public_key}
    hub.admit_by_invitation(serving_ask(invitation, text, served), now=NOW + 1)
    member = MemberServer("second", served.client, served.cluster)
    assert hub.member_of("second") == ("pi-xs-2", member)
