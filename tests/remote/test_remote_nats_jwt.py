"""NKeys and NATS JWTs (security/remote/nats_jwt.py): keys of the right roles, JWTs that verify
and carry what the server enforces, and credentials a NATS client reads as its own."""

from __future__ import annotations

import base64
import json
import secrets
from typing import Any

import nkeys  # type: ignore[import-untyped]
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from nats.aio.client import Client, RawCredentials

from pi_cross_session._internal.security.remote import nats_jwt
from pi_cross_session._internal.security.remote.identity import PublicKey
from pi_cross_session._internal.security.remote.nats_jwt import (
    CLAIMS_VERSION,
    CredentialsError,
    NKey,
    Permissions,
    Role,
    public_key_role,
)

OPERATOR = NKey.generate(Role.OPERATOR)
ACCOUNT = NKey.generate(Role.ACCOUNT)
USER = NKey.generate(Role.USER)
PERMISSIONS = Permissions(
    publish=("pi-xs.v1.to.*.from.laptop", "$KV.pi-xs-peers.laptop.>"),
    subscribe=("pi-xs.v1.to.laptop.from.*", "pi-xs.v1.in.laptop.>"),
    responses=1,
)
BASE32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"


def user_token(permissions: Permissions | None = PERMISSIONS) -> str:
    return nats_jwt.user_jwt(
        ACCOUNT, USER.public_key, name="laptop", issued_at=1_700_000_000, permissions=permissions
    )


def parts(token: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    head, body, signature = token.split(".")
    return json.loads(unb64(head)), json.loads(unb64(body)), signature


def unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def b64(value: Any) -> str:
    raw = json.dumps(value, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def ed25519_of(public_key: str) -> Ed25519PublicKey:
    """The Ed25519 key inside an NKey public key (prefix byte, 32 bytes, checksum)."""
    raw = base64.b32decode(public_key + "=" * (-len(public_key) % 8))
    return Ed25519PublicKey.from_public_bytes(raw[1:33])


def other_letter(text: str, index: int) -> str:
    """``text`` with the base32 letter at ``index`` replaced by another one."""
    letter = text[index]
    replacement = BASE32[(BASE32.index(letter) + 1) % len(BASE32)]
    return text[:index] + replacement + text[index + 1 :]


# -- keys ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "letter"), [(Role.OPERATOR, "O"), (Role.ACCOUNT, "A"), (Role.USER, "U")]
)
def test_a_new_key_has_its_roles_letters(role: Role, letter: str) -> None:
    key = NKey.generate(role)
    assert key.role is role
    assert role.letter == letter
    assert key.public_key.startswith(letter)
    assert len(key.public_key) == 56
    assert key.seed.startswith("S" + letter)
    assert public_key_role(key.public_key) is role
    # The seed is the whole key: read back, it is the same key.
    again = NKey(key.seed)
    assert (again.role, again.public_key) == (role, key.public_key)
    data = b"nonce from the server"
    ed25519_of(key.public_key).verify(again.sign(data), data)


def test_new_keys_differ() -> None:
    assert len({NKey.generate(Role.USER).public_key for _ in range(8)}) == 8


def test_a_seed_of_a_role_we_do_not_use_is_refused() -> None:
    server_seed = nkeys.encode_seed(secrets.token_bytes(32), nkeys.PREFIX_BYTE_SERVER)
    with pytest.raises(CredentialsError, match="role"):
        NKey(bytes(server_seed).decode())


@pytest.mark.parametrize("seed", ["", "SU", "not a seed", "S" + "A" * 57, "SUé"])
def test_what_is_no_seed_is_refused(seed: str) -> None:
    with pytest.raises(CredentialsError):
        NKey(seed)


@pytest.mark.parametrize("index", [2, 20, 55, 56])
def test_a_seed_with_a_bad_checksum_is_refused(index: int) -> None:
    """A damaged seed file must not quietly become another key."""
    with pytest.raises(CredentialsError, match="checksum"):
        NKey(other_letter(USER.seed, index))


@pytest.mark.parametrize("index", [1, 20, 53, 55])
def test_a_public_key_with_a_bad_checksum_is_refused(index: int) -> None:
    with pytest.raises(CredentialsError, match="checksum"):
        public_key_role(other_letter(USER.public_key, index))


def test_what_is_no_public_key_is_refused() -> None:
    server = nkeys.from_seed(
        nkeys.encode_seed(secrets.token_bytes(32), nkeys.PREFIX_BYTE_SERVER)
    ).public_key.decode()
    for text in ("", USER.seed, USER.public_key[:-1], USER.public_key.lower(), "U" + "!" * 55):
        with pytest.raises(CredentialsError):
            public_key_role(text)
    with pytest.raises(CredentialsError, match="role"):
        public_key_role(server)


# -- JWTs ------------------------------------------------------------------------------------------


def test_the_operator_signs_itself_and_names_the_system_account() -> None:
    system = NKey.generate(Role.ACCOUNT)
    token = nats_jwt.operator_jwt(
        OPERATOR, name="pi-xs", system_account=system.public_key, issued_at=5
    )
    jwt = nats_jwt.decode(token)
    assert (jwt.issuer, jwt.subject, jwt.name, jwt.issued_at) == (
        OPERATOR.public_key,
        OPERATOR.public_key,
        "pi-xs",
        5,
    )
    assert jwt.nats["type"] == "operator"
    assert jwt.nats["system_account"] == system.public_key
    assert jwt.nats["version"] == CLAIMS_VERSION
    assert jwt.text == token


def test_an_account_jwt_is_the_operators_and_lists_revocations() -> None:
    plain = nats_jwt.decode(
        nats_jwt.account_jwt(
            OPERATOR, ACCOUNT.public_key, name="pi-xs", issued_at=5, jetstream=False
        )
    )
    assert (plain.issuer, plain.subject) == (OPERATOR.public_key, ACCOUNT.public_key)
    assert plain.nats["type"] == "account"
    assert "revocations" not in plain.nats
    assert "disk_storage" not in plain.nats["limits"]
    revoked = nats_jwt.decode(
        nats_jwt.account_jwt(
            OPERATOR,
            ACCOUNT.public_key,
            name="pi-xs",
            issued_at=6,
            jetstream=True,
            revocations={USER.public_key: 6},
        )
    )
    assert revoked.nats["revocations"] == {USER.public_key: 6}
    assert revoked.nats["limits"]["disk_storage"] == nats_jwt.UNLIMITED


def test_a_user_jwt_is_the_accounts_and_carries_its_permissions() -> None:
    jwt = nats_jwt.decode(user_token())
    assert (jwt.issuer, jwt.subject, jwt.name) == (ACCOUNT.public_key, USER.public_key, "laptop")
    assert jwt.nats["type"] == "user"
    assert jwt.nats["pub"] == {"allow": list(PERMISSIONS.publish)}
    assert jwt.nats["sub"] == {"allow": list(PERMISSIONS.subscribe)}
    assert jwt.nats["resp"] == {"max": 1, "ttl": 0}
    ed25519_of(jwt.issuer)  # the issuer is a key, not a name


def test_a_user_without_permissions_may_do_anything_in_its_account() -> None:
    everything = nats_jwt.decode(user_token(None)).nats
    assert not {"pub", "sub", "resp"} & set(everything)
    no_replies = nats_jwt.decode(user_token(Permissions(("a",), ("b",)))).nats
    assert "resp" not in no_replies


def test_a_user_jwt_is_only_for_a_user_key() -> None:
    with pytest.raises(CredentialsError, match="user"):
        nats_jwt.user_jwt(
            ACCOUNT, ACCOUNT.public_key, name="x", issued_at=1, permissions=PERMISSIONS
        )


def test_the_id_of_a_jwt_follows_its_claims() -> None:
    first, second = parts(user_token())[1], parts(user_token(None))[1]
    assert first["jti"]
    assert first["jti"] != second["jti"]
    assert parts(user_token())[1]["jti"] == first["jti"]


def forged_claims() -> str:
    head, claims, signature = user_token().split(".")
    body = json.loads(unb64(claims))
    body["nats"]["pub"]["allow"].append(">")
    return f"{head}.{b64(body)}.{signature}"


def claimed_by_another_issuer() -> str:
    head, claims, signature = user_token().split(".")
    body = json.loads(unb64(claims))
    body["iss"] = NKey.generate(Role.ACCOUNT).public_key
    return f"{head}.{b64(body)}.{signature}"


def signature_of_another() -> str:
    head, claims, _ = user_token().split(".")
    other = nats_jwt.account_jwt(
        OPERATOR, ACCOUNT.public_key, name="x", issued_at=1, jetstream=True
    )
    return f"{head}.{claims}.{other.split('.')[2]}"


def flipped_signature() -> str:
    head, claims, signature = user_token().split(".")
    middle = len(signature) // 2
    flipped = (
        signature[:middle] + ("A" if signature[middle] != "A" else "B") + signature[middle + 1 :]
    )
    return f"{head}.{claims}.{flipped}"


def other_header() -> str:
    """Signed by its issuer, but not in NATS's own form: refused for its header alone."""
    _, claims, _ = user_token().split(".")
    head = b64({"typ": "JWT", "alg": "EdDSA"})
    signature = base64.urlsafe_b64encode(ACCOUNT.sign(f"{head}.{claims}".encode()))
    return f"{head}.{claims}.{signature.rstrip(b'=').decode()}"


def claims_without(field: str) -> str:
    head, claims, signature = user_token().split(".")
    body = json.loads(unb64(claims))
    del body[field]
    return f"{head}.{b64(body)}.{signature}"


TAMPERED = {
    "claims": forged_claims,
    "issuer": claimed_by_another_issuer,
    "signature-of-another": signature_of_another,
    "flipped-signature": flipped_signature,
    "header": other_header,
    "no-issuer": lambda: claims_without("iss"),
    "no-time": lambda: claims_without("iat"),
    "two-parts": lambda: ".".join(user_token().split(".")[:2]),
    "not-base64": lambda: "!!." + user_token(),
    "claims-not-an-object": lambda: f"{user_token().split('.')[0]}.{b64([])}.x",
}


@pytest.mark.parametrize("case", sorted(TAMPERED))
def test_a_tampered_jwt_is_refused(case: str) -> None:
    assert nats_jwt.decode(user_token()).subject == USER.public_key
    with pytest.raises(CredentialsError):
        nats_jwt.decode(TAMPERED[case]())


def test_scoped_signers_are_listed_with_the_permissions_of_their_users() -> None:
    """Each scoped signing key comes with a template: the server gives every user it signs
    exactly those permissions (and the limits), whatever that user's JWT says."""
    first, second = sorted(NKey.generate(Role.ACCOUNT).public_key for _ in range(2))
    join = Permissions(publish=("pi-xs.v1.join.ask",), subscribe=("pi-xs.v1.join.in.x.>",))
    token = nats_jwt.account_jwt(
        OPERATOR,
        ACCOUNT.public_key,
        name="pi-xs",
        issued_at=7,
        jetstream=True,
        scoped_signers={second: PERMISSIONS, first: join},
    )
    account = nats_jwt.decode(token)
    assert account.issuer == OPERATOR.public_key
    limits = {"subs": nats_jwt.UNLIMITED, "data": nats_jwt.UNLIMITED, "payload": -1}
    assert account.nats["signing_keys"] == [
        {"kind": "user_scope", "key": first, "role": "join", "template": join.claims() | limits},
        {
            "kind": "user_scope",
            "key": second,
            "role": "join",
            "template": PERMISSIONS.claims() | limits,
        },
    ]
    assert account.nats["signing_keys"][0]["template"]["pub"] == {"allow": ["pi-xs.v1.join.ask"]}


@pytest.mark.parametrize("signers", [None, {}])
def test_an_account_without_scoped_signers_lists_no_signing_keys(
    signers: dict[str, Permissions] | None,
) -> None:
    token = nats_jwt.account_jwt(
        OPERATOR,
        ACCOUNT.public_key,
        name="pi-xs",
        issued_at=7,
        jetstream=True,
        scoped_signers=signers,
    )
    assert "signing_keys" not in nats_jwt.decode(token).nats


def test_a_scoped_users_jwt_names_its_account_and_carries_no_permissions() -> None:
    """The server refuses a scoped user's JWT that carries permissions or limits of its own."""
    signer = NKey.generate(Role.ACCOUNT)
    token = nats_jwt.scoped_user_jwt(
        signer, ACCOUNT.public_key, USER.public_key, name="joining", issued_at=9
    )
    jwt = nats_jwt.decode(token)
    assert (jwt.issuer, jwt.subject, jwt.name, jwt.issued_at) == (
        signer.public_key,
        USER.public_key,
        "joining",
        9,
    )
    assert dict(jwt.nats) == {
        "type": "user",
        "issuer_account": ACCOUNT.public_key,
        "version": CLAIMS_VERSION,
    }
    ed25519_of(signer.public_key).verify(
        unb64(token.split(".")[2]), ".".join(token.split(".")[:2]).encode()
    )


@pytest.mark.parametrize("role", [Role.ACCOUNT, Role.OPERATOR])
def test_a_scoped_user_jwt_is_only_for_a_user_key(role: Role) -> None:
    signer = NKey.generate(Role.ACCOUNT)
    with pytest.raises(CredentialsError, match="user"):
        nats_jwt.scoped_user_jwt(
            signer, ACCOUNT.public_key, NKey.generate(role).public_key, name="x", issued_at=1
        )


@pytest.mark.parametrize("role", list(Role))
def test_the_raw_bytes_of_a_public_key_verify_what_its_seed_signs(role: Role) -> None:
    key = NKey.generate(role)
    raw = nats_jwt.public_key_bytes(key.public_key)
    assert len(raw) == 32
    assert raw == ed25519_of(key.public_key).public_bytes_raw()
    identity = PublicKey(raw)
    assert identity.verifies(key.sign(b"a roster"), b"a roster")
    assert not identity.verifies(key.sign(b"a roster"), b"another roster")
    assert not identity.verifies(NKey.generate(role).sign(b"a roster"), b"a roster")


def test_what_is_no_public_key_has_no_raw_bytes() -> None:
    for text in ("", USER.seed, USER.public_key[:-1], other_letter(USER.public_key, 20)):
        with pytest.raises(CredentialsError):
            nats_jwt.public_key_bytes(text)


# -- credentials -----------------------------------------------------------------------------------


def test_credentials_read_by_the_nats_client_as_its_own() -> None:
    """The client sends the JWT and signs the server's nonce with the seed, as it would on
    connecting with these credentials."""
    token = user_token()
    creds = RawCredentials(nats_jwt.creds_text(token, USER.seed))
    client = Client()
    assert bytes(client._read_creds_user_jwt(creds)).decode() == token
    assert bytes(client._read_creds_user_nkey(creds)).decode() == USER.seed
    client._user_credentials = creds
    client._setup_nkeys_jwt_connect()
    assert client._user_jwt_cb is not None
    assert client._signature_cb is not None
    assert bytes(client._user_jwt_cb()).decode() == token
    signature = base64.b64decode(client._signature_cb("server-nonce"))
    ed25519_of(nats_jwt.decode(token).subject).verify(signature, b"server-nonce")
