"""Joining a deployment (protocol/remote/join.py): the join line a hub prints and a joiner reads
back, and the asks and answers both sides exchange, read strictly and within their bounds."""

from __future__ import annotations

import base64
import json
from typing import Any

import nkeys  # type: ignore[import-untyped]
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from pi_cross_session._internal.protocol.remote.envelope import is_machine_name
from pi_cross_session._internal.protocol.remote.join import (
    CA_CONTEXT,
    JOIN_INBOX_PREFIX,
    JOIN_SUBJECT,
    MAX_JOIN_MESSAGE_BYTES,
    PROOF_CONTEXT,
    ROSTER_KEY,
    ROSTER_SUBJECT,
    TOKEN_PREFIX,
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
    join_inbox,
    proof_bytes,
    read_answer,
    read_ask,
)
from pi_cross_session._internal.security.remote.nats_jwt import NKey, Role
from tests.hypothesis_profiles import scaled

INVITATION = NKey.generate(Role.ACCOUNT)
DEPLOYMENT = NKey.generate(Role.ACCOUNT).public_key
SERVERS = ("tls://10.0.0.5:4222", "nats://hub.example.org:4222")
LINE = JoinLine(servers=SERVERS, deployment=DEPLOYMENT, seed=INVITATION.seed)
TOKEN = LINE.token


def words_of(line: JoinLine) -> tuple[str, str]:
    """The two words after ``remote join`` in the line a hub prints."""
    words = line.command().split(" ")
    assert words[:3] == ["pi-cross-session", "remote", "join"]
    assert len(words) == 5
    return words[3], words[4]


def account_seed(raw: bytes) -> str:
    return bytes(nkeys.encode_seed(raw, nkeys.PREFIX_BYTE_ACCOUNT)).decode("ascii")


# -- the join line ---------------------------------------------------------------------------------


def test_a_join_line_reads_back_as_itself() -> None:
    servers, token = words_of(LINE)
    assert servers == ",".join(SERVERS)
    assert token == f"{TOKEN_PREFIX}-{DEPLOYMENT}-{INVITATION.seed}"
    assert JoinLine.parse(servers, token) == LINE


def test_one_server_is_enough() -> None:
    line = JoinLine.parse("tls://[::1]:4222", TOKEN)
    assert line.servers == ("tls://[::1]:4222",)
    assert (line.deployment, line.seed) == (DEPLOYMENT, INVITATION.seed)


URL_CHARS = st.sampled_from("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-[]:")
URLS = st.builds(
    lambda scheme, rest: f"{scheme}://{rest}",
    st.sampled_from(["tls", "nats"]),
    st.text(URL_CHARS, min_size=1, max_size=255),
)


@settings(max_examples=scaled(200))
@given(
    servers=st.lists(URLS, min_size=1, max_size=4),
    deployment_raw=st.binary(min_size=32, max_size=32),
    invitation_raw=st.binary(min_size=32, max_size=32),
)
def test_any_join_line_reads_back_as_itself(
    servers: list[str], deployment_raw: bytes, invitation_raw: bytes
) -> None:
    deployment = NKey(account_seed(deployment_raw)).public_key
    line = JoinLine(
        servers=tuple(servers), deployment=deployment, seed=account_seed(invitation_raw)
    )
    assert JoinLine.parse(*words_of(line)) == line


OTHER_SEED = NKey.generate(Role.ACCOUNT).seed
BAD_TOKENS = {
    "empty": "",
    "prefix only": TOKEN_PREFIX,
    "another version": f"PIXS2-{DEPLOYMENT}-{INVITATION.seed}",
    "lowercase prefix": f"pixs1-{DEPLOYMENT}-{INVITATION.seed}",
    "no prefix": f"{DEPLOYMENT}-{INVITATION.seed}",
    "truncated seed": TOKEN[:-1],
    "truncated by half": TOKEN[: len(TOKEN) // 2],
    "no seed": f"{TOKEN_PREFIX}-{DEPLOYMENT}",
    "no seed after the dash": f"{TOKEN_PREFIX}-{DEPLOYMENT}-",
    "truncated deployment": f"{TOKEN_PREFIX}-{DEPLOYMENT[:-1]}-{INVITATION.seed}",
    "seed lowercased": f"{TOKEN_PREFIX}-{DEPLOYMENT}-{INVITATION.seed.lower()}",
    "seed with a 1": f"{TOKEN_PREFIX}-{DEPLOYMENT}-{INVITATION.seed[:-1]}1",
    "seed with an 8": TOKEN[:-10] + "8" + TOKEN[-9:],
    "seed with a space": TOKEN[:-10] + " " + TOKEN[-9:],
    "seed with a newline": f"{TOKEN}\n",
    "a user seed": f"{TOKEN_PREFIX}-{DEPLOYMENT}-{NKey.generate(Role.USER).seed}",
    "an operator seed": f"{TOKEN_PREFIX}-{DEPLOYMENT}-{NKey.generate(Role.OPERATOR).seed}",
    "the deployment key twice": f"{TOKEN_PREFIX}-{DEPLOYMENT}-{DEPLOYMENT}",
    "seed and key swapped": f"{TOKEN_PREFIX}-{INVITATION.seed}-{DEPLOYMENT}",
    "a user key for the deployment": (
        f"{TOKEN_PREFIX}-{NKey.generate(Role.USER).public_key}-{INVITATION.seed}"
    ),
    "something after the seed": f"{TOKEN}-{OTHER_SEED}",
    "two tokens": f"{TOKEN},{TOKEN}",
    "space before": f" {TOKEN}",
}


@pytest.mark.parametrize("case", sorted(BAD_TOKENS))
def test_a_damaged_token_is_refused(case: str) -> None:
    with pytest.raises(JoinError):
        JoinLine.parse(",".join(SERVERS), BAD_TOKENS[case])


BAD_SERVERS = {
    "empty": "",
    "only commas": ",,",
    "no scheme": "10.0.0.5:4222",
    "https": "https://10.0.0.5:4222",
    "ws": "ws://10.0.0.5:4222",
    "uppercase scheme": "TLS://10.0.0.5:4222",
    "scheme only": "tls://",
    "a space inside": "tls://10.0.0.5 :4222",
    "a space before": " tls://10.0.0.5:4222",
    "a trailing newline": "tls://10.0.0.5:4222\n",
    "a path": "tls://10.0.0.5:4222/x",
    "user info": "tls://user:pass@10.0.0.5:4222",
    "a query": "tls://10.0.0.5:4222?x=1",
    "one good one bad": "tls://10.0.0.5:4222,https://10.0.0.6:4222",
    "one good one not a url": "tls://10.0.0.5:4222,10.0.0.6",
    "the token in place of the servers": TOKEN,
    "non-ascii host": "tls://hüb:4222",
    "a shell word": "tls://a;rm",
    "too long": "tls://" + "a" * 256,
}


@pytest.mark.parametrize("case", sorted(BAD_SERVERS))
def test_what_is_no_server_url_is_refused(case: str) -> None:
    with pytest.raises(JoinError, match="server URL"):
        JoinLine.parse(BAD_SERVERS[case], TOKEN)


def test_the_longest_host_part_is_still_a_url() -> None:
    """The bound above is the URL's, not an accident of the case: 255 characters pass."""
    assert JoinLine.parse("tls://" + "a" * 255, TOKEN).servers == ("tls://" + "a" * 255,)


@settings(max_examples=scaled(200))
@given(
    url=URLS,
    at=st.integers(min_value=0),
    bad=st.sampled_from([" ", "\t", "\n", "/", "@", "?", "#", ";", "é", "\x00"]),
)
def test_a_url_with_any_character_of_no_host_is_refused(url: str, at: int, bad: str) -> None:
    host = url.index("://") + 3
    where = host + at % (len(url) - host + 1)
    with pytest.raises(JoinError):
        JoinLine.parse(url[:where] + bad + url[where:], TOKEN)


@settings(max_examples=scaled(200))
@given(text=st.text(max_size=120), token=st.text(max_size=200))
def test_any_two_words_either_read_or_are_refused_with_a_join_error(text: str, token: str) -> None:
    """Nothing but a :class:`JoinError` comes out of reading what a person typed."""
    try:
        line = JoinLine.parse(text, token)
    except JoinError:
        return
    assert JoinLine.parse(*words_of(line)) == line


# -- subjects and signed bytes ---------------------------------------------------------------------


def test_the_join_subjects_and_the_roster_key_are_out_of_every_machines_reach() -> None:
    assert JOIN_SUBJECT == "pi-xs.v1.join.ask"
    assert join_inbox("UABC") == f"{JOIN_INBOX_PREFIX}.UABC" == "pi-xs.v1.join.in.UABC"
    assert ROSTER_SUBJECT == "$KV.pi-xs-peers._deployment.roster"
    # Machine names never start with "_": no machine's record permission reaches the roster.
    assert ROSTER_KEY.startswith("_")
    assert not is_machine_name(ROSTER_KEY.split(".")[0])


def test_a_proof_and_a_ca_signature_cannot_pass_for_one_another() -> None:
    card = "laptop nats:UABC"
    assert proof_bytes(card) == PROOF_CONTEXT + card.encode()
    assert ca_signed_bytes("-----BEGIN") == CA_CONTEXT + b"-----BEGIN"
    assert not proof_bytes(card).startswith(CA_CONTEXT)
    assert not ca_signed_bytes(card).startswith(PROOF_CONTEXT)
    # A roster (JSON) starts with neither.
    assert not PROOF_CONTEXT.startswith(b"{")
    assert not CA_CONTEXT.startswith(b"{")


# -- asks ------------------------------------------------------------------------------------------


def join_ask(**changes: Any) -> dict[str, Any]:
    card = "laptop nats:UABC"
    body: dict[str, Any] = {
        "v": 1,
        "ask": "join",
        "invitation": INVITATION.public_key,
        "card": card,
        "proof": base64.b64encode(INVITATION.sign(proof_bytes(card))).decode(),
    }
    body.update(changes)
    return {k: v for k, v in body.items() if v is not ...}


def encoded(body: Any) -> bytes:
    return json.dumps(body).encode()


def test_both_asks_read_back_as_themselves() -> None:
    assert read_ask(CaAsk().model_dump_json().encode()) == CaAsk()
    ask = JoinAsk(**join_ask())
    assert read_ask(ask.model_dump_json().encode()) == ask
    assert read_ask(encoded(join_ask())) == ask


BAD_ASKS: dict[str, Any] = {
    "ca ask with an extra field": {"v": 1, "ask": "ca", "card": "laptop"},
    "ca ask of another version": {"v": 2, "ask": "ca"},
    "another ask": {"v": 1, "ask": "leave"},
    "join ask with an extra field": join_ask(admin=True),
    "join ask of another version": join_ask(v=2),
    "join ask without a card": join_ask(card=...),
    "join ask without a proof": join_ask(proof=...),
    "join ask without an invitation": join_ask(invitation=...),
    "invitation of a user": join_ask(invitation=NKey.generate(Role.USER).public_key),
    "invitation as a seed": join_ask(invitation=INVITATION.seed),
    "invitation with a newline": join_ask(invitation=INVITATION.public_key + "\n"),
    "invitation truncated": join_ask(invitation=INVITATION.public_key[:-1]),
    "invitation a number": join_ask(invitation=7),
    "card a number": join_ask(card=7),
    "card a list": join_ask(card=["laptop"]),
    "card null": join_ask(card=None),
    "proof a list": join_ask(proof=[1, 2]),
    "card too long": join_ask(card="a" * 4097),
    "proof too long": join_ask(proof="A" * 129),
    "a list": [join_ask()],
    "a string": "join",
    "null": None,
}


@pytest.mark.parametrize("case", sorted(BAD_ASKS))
def test_what_is_no_ask_is_refused(case: str) -> None:
    with pytest.raises(JoinError, match="not an ask"):
        read_ask(encoded(BAD_ASKS[case]))


@pytest.mark.parametrize("data", [b"", b"{", b"\xff\xfe", b"{}}", b"nats"])
def test_bytes_that_are_no_json_are_no_ask(data: bytes) -> None:
    with pytest.raises(JoinError):
        read_ask(data)


def test_the_longest_fields_still_make_an_ask() -> None:
    assert read_ask(encoded(join_ask(card="a" * 4096, proof="A" * 128)))


def test_an_ask_over_the_bound_is_refused_before_it_is_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    body = encoded({"v": 1, "ask": "ca"})
    padded = body + b" " * (MAX_JOIN_MESSAGE_BYTES - len(body))
    assert read_ask(padded) == CaAsk()
    read: list[bytes] = []
    real = CaAsk.model_validate_json

    def counted(data: bytes) -> CaAsk:
        read.append(data)
        return real(data)

    monkeypatch.setattr(CaAsk, "model_validate_json", counted)
    with pytest.raises(JoinError, match="size"):
        read_ask(padded + b" ")
    assert read == []


# -- answers ---------------------------------------------------------------------------------------


def ca_answer(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"v": 1, "ca": "-----BEGIN CERTIFICATE-----\n", "signature": "c2ln"}
    body.update(changes)
    return {k: v for k, v in body.items() if v is not ...}


def join_answer(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "v": 1,
        "jwt": "a.b.c",
        "deployment": DEPLOYMENT,
        "account": "pi-xs",
        "servers": SERVERS,
        "roster": "cm9zdGVy",
    }
    body.update(changes)
    return {k: v for k, v in body.items() if v is not ...}


def refusal(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"v": 1, "refused": "name_taken", "detail": "choose another name"}
    body.update(changes)
    return {k: v for k, v in body.items() if v is not ...}


def test_every_answer_reads_back_as_itself() -> None:
    assert read_answer(encoded(ca_answer()), ca=True) == CaAnswer(**ca_answer())
    assert read_answer(encoded(join_answer()), ca=False) == JoinAnswer(**join_answer())
    for ca in (True, False):
        assert read_answer(encoded(refusal()), ca=ca) == Refusal(**refusal())
    for model in (CaAnswer(**ca_answer()), JoinAnswer(**join_answer()), Refusal(**refusal())):
        again = read_answer(model.model_dump_json().encode(), ca=isinstance(model, CaAnswer))
        assert again == model


def test_an_answer_to_one_ask_is_no_answer_to_the_other() -> None:
    with pytest.raises(JoinError):
        read_answer(encoded(ca_answer()), ca=False)
    with pytest.raises(JoinError):
        read_answer(encoded(join_answer()), ca=True)


BAD_CA_ANSWERS: dict[str, Any] = {
    "extra field": ca_answer(roster="x"),
    "another version": ca_answer(v=2),
    "no signature": ca_answer(signature=...),
    "no ca": ca_answer(ca=...),
    "ca a number": ca_answer(ca=1),
    "signature a list": ca_answer(signature=["c2ln"]),
    "ca too long": ca_answer(ca="a" * 16_385),
    "signature too long": ca_answer(signature="A" * 129),
}

BAD_JOIN_ANSWERS: dict[str, Any] = {
    "extra field": join_answer(admin=True),
    "another version": join_answer(v=2),
    "no jwt": join_answer(jwt=...),
    "no roster": join_answer(roster=...),
    "jwt a number": join_answer(jwt=1),
    "jwt too long": join_answer(jwt="a" * 16_385),
    "deployment of a user": join_answer(deployment=NKey.generate(Role.USER).public_key),
    "deployment with a newline": join_answer(deployment=DEPLOYMENT + "\n"),
    "account with a space": join_answer(account="pi xs"),
    "account too long": join_answer(account="a" * 65),
    "account empty": join_answer(account=""),
    "servers a string": join_answer(servers=SERVERS[0]),
    "server a number": join_answer(servers=[4222]),
    "server of no scheme": join_answer(servers=["10.0.0.5:4222"]),
    "roster a list": join_answer(roster=[]),
}

BAD_REFUSALS: dict[str, Any] = {
    "extra field": refusal(jwt="a.b.c"),
    "no detail": refusal(detail=...),
    "code with capitals": refusal(refused="Name_Taken"),
    "code with a newline": refusal(refused="name_taken\n"),
    "code too long": refusal(refused="a" * 41),
    "code empty": refusal(refused=""),
    "code a number": refusal(refused=3),
    "detail too long": refusal(detail="a" * 4097),
}


@pytest.mark.parametrize("case", sorted(BAD_CA_ANSWERS))
def test_what_is_no_ca_answer_is_refused(case: str) -> None:
    with pytest.raises(JoinError, match="not one this version reads"):
        read_answer(encoded(BAD_CA_ANSWERS[case]), ca=True)


@pytest.mark.parametrize("case", sorted(BAD_JOIN_ANSWERS))
def test_what_is_no_join_answer_is_refused(case: str) -> None:
    with pytest.raises(JoinError, match="not one this version reads"):
        read_answer(encoded(BAD_JOIN_ANSWERS[case]), ca=False)


@pytest.mark.parametrize("case", sorted(BAD_REFUSALS))
@pytest.mark.parametrize("ca", [True, False])
def test_what_is_no_refusal_is_refused(case: str, ca: bool) -> None:
    with pytest.raises(JoinError, match="not one this version reads"):
        read_answer(encoded(BAD_REFUSALS[case]), ca=ca)


@pytest.mark.parametrize(
    "server",
    [
        "https://10.0.0.5:4222",
        "xtls://10.0.0.5:4222",
        "tls://10.0.0.5:4222 --and-more",
        "tls://10.0.0.5:4222/path with spaces",
        "tls://10.0.0.5:4222\n",
    ],
)
def test_an_answer_names_servers_as_a_join_line_does(server: str) -> None:
    """The servers a hub answers with are held to the join line's own rule: whole URLs of the
    two schemes, nothing before or after."""
    with pytest.raises(JoinError):
        JoinLine.parse(server, TOKEN)
    with pytest.raises(JoinError):
        read_answer(encoded(join_answer(servers=[server])), ca=False)


@pytest.mark.parametrize("ca", [True, False])
def test_an_answer_over_the_bound_is_refused(ca: bool) -> None:
    body = encoded(refusal())
    padded = body + b" " * (MAX_JOIN_MESSAGE_BYTES - len(body))
    assert read_answer(padded, ca=ca) == Refusal(**refusal())
    with pytest.raises(JoinError, match="size"):
        read_answer(padded + b" ", ca=ca)


def test_models_built_in_python_take_no_lax_types() -> None:
    """Strict: what a hub builds is held to the same types as what a joiner reads."""
    with pytest.raises(ValueError, match="string"):
        JoinAsk(**join_ask(card=b"laptop nats:UABC"))
    with pytest.raises(ValueError, match="tuple"):
        JoinAnswer(**join_answer(servers=list(SERVERS)))
    with pytest.raises(ValueError, match="string"):
        Refusal(**refusal(detail=b"no"))


def test_models_are_frozen() -> None:
    with pytest.raises(ValueError, match="frozen"):
        LINE.seed = OTHER_SEED  # type: ignore[misc]
    with pytest.raises(ValueError, match="frozen"):
        Refusal(**refusal()).refused = "admitted"  # type: ignore[misc]


# -- joining as one more server --------------------------------------------------------------------

CSR = "-----BEGIN CERTIFICATE REQUEST-----\nMIIB\n-----END CERTIFICATE REQUEST-----\n"


def serve_ask(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"csr": CSR, "client": "10.0.0.6:4222", "cluster": "10.0.0.6:6222"}
    body.update(changes)
    return {k: v for k, v in body.items() if v is not ...}


def serving_ask(serve: ServeAsk) -> JoinAsk:
    card = "second nats:UABC"
    proof = INVITATION.sign(proof_bytes(card, serve))
    return JoinAsk(
        invitation=INVITATION.public_key,
        card=card,
        proof=base64.b64encode(proof).decode(),
        serve=serve,
    )


def serve_grant(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "pi-xs-2",
        "cert": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
        "operator": "o.p.q",
        "system_account": NKey.generate(Role.ACCOUNT).public_key,
        "system_jwt": "s.y.s",
        "account_jwt": "a.c.c",
        "routes": ("10.0.0.5:6222", "10.0.0.6:6222", "[::1]:6222"),
    }
    body.update(changes)
    return {k: v for k, v in body.items() if v is not ...}


def test_a_server_line_runs_the_hub_with_join_and_a_host_to_fill_in() -> None:
    assert LINE.command(server=True) == (
        f"pi-cross-session remote hub --join {','.join(SERVERS)} {TOKEN} --host HOST"
    )
    words = LINE.command(server=True).split(" ")
    assert JoinLine.parse(words[4], words[5]) == LINE
    # A machine's line is still the plain join.
    assert LINE.command(server=False) == LINE.command()
    assert "--host" not in LINE.command()


def test_a_serving_join_ask_reads_back_as_itself() -> None:
    ask = serving_ask(ServeAsk(**serve_ask()))
    assert ask.serve is not None
    again = read_ask(ask.model_dump_json().encode())
    assert again == ask
    assert isinstance(again, JoinAsk)
    assert again.serve == ServeAsk(**serve_ask())
    # A plain ask still reads as one without serve.
    plain = read_ask(encoded(join_ask()))
    assert isinstance(plain, JoinAsk)
    assert plain.serve is None


@pytest.mark.parametrize(
    "address", ["10.0.0.6:4222", "hub2.example.org:4222", "[::1]:4222", "a:1", "h:65535"]
)
def test_a_host_and_port_is_an_address(address: str) -> None:
    assert ServeAsk(**serve_ask(client=address)).client == address
    assert ServeAsk(**serve_ask(cluster=address)).cluster == address


BAD_ADDRESSES = {
    "no port": "10.0.0.6",
    "a name without port": "hub2.example.org",
    "empty port": "10.0.0.6:",
    "a letter for port": "10.0.0.6:42a",
    "a port too long": "10.0.0.6:422222",
    "a space inside": "10.0.0.6 :4222",
    "a space before": " 10.0.0.6:4222",
    "a space after": "10.0.0.6:4222 ",
    "a trailing newline": "10.0.0.6:4222\n",
    "a url": "nats://10.0.0.6:4222",
    "a path": "10.0.0.6:4222/x",
    "two addresses": "10.0.0.6:4222,10.0.0.7:4222",
    "a quote": '10.0.0.6:4222"',
    "empty": "",
    "a number": 4222,
}


@pytest.mark.parametrize("case", sorted(BAD_ADDRESSES))
@pytest.mark.parametrize("field", ["client", "cluster"])
def test_what_is_no_host_and_port_is_refused(case: str, field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        ServeAsk(**serve_ask(**{field: BAD_ADDRESSES[case]}))
    # Read off the wire, the ask is no ask at all.
    body = join_ask(serve=serve_ask(**{field: BAD_ADDRESSES[case]}))
    with pytest.raises(JoinError, match="not an ask"):
        read_ask(encoded(body))


@pytest.mark.parametrize(
    "serve",
    [
        serve_ask(extra=True),
        serve_ask(csr=...),
        serve_ask(client=...),
        serve_ask(cluster=...),
        serve_ask(csr="a" * 8193),
        serve_ask(csr=7),
        "yes",
        [serve_ask()],
    ],
)
def test_a_damaged_serve_makes_no_ask(serve: Any) -> None:
    with pytest.raises(JoinError, match="not an ask"):
        read_ask(encoded(join_ask(serve=serve)))


def test_a_serving_proof_covers_what_is_served() -> None:
    card = "second nats:UABC"
    serve = ServeAsk(**serve_ask())
    signed = proof_bytes(card, serve)
    assert signed.startswith(PROOF_CONTEXT)
    assert signed != proof_bytes(card)
    assert proof_bytes(card, None) == proof_bytes(card)
    for change in (
        {"client": "10.0.0.7:4222"},
        {"cluster": "10.0.0.6:6223"},
        {"csr": CSR.replace("MIIB", "MIIC")},
    ):
        assert proof_bytes(card, ServeAsk(**serve_ask(**change))) != signed
    assert proof_bytes("third nats:UABC", serve) != signed


def test_an_answer_with_a_grant_reads_back_as_itself() -> None:
    grant = ServeGrant(**serve_grant())
    answer = JoinAnswer(**join_answer(grant=grant))
    again = read_answer(answer.model_dump_json().encode(), ca=False)
    assert again == answer
    assert isinstance(again, JoinAnswer)
    assert again.grant == grant
    assert again.grant is not None
    assert again.grant.routes == ("10.0.0.5:6222", "10.0.0.6:6222", "[::1]:6222")
    assert read_answer(encoded(join_answer()), ca=False).grant is None  # type: ignore[union-attr]


BAD_GRANTS: dict[str, Any] = {
    "extra field": serve_grant(seed="SA…"),
    "no cert": serve_grant(cert=...),
    "no routes": serve_grant(routes=...),
    "name with capitals": serve_grant(name="PI-XS-2"),
    "name with a space": serve_grant(name="pi xs"),
    "name too long": serve_grant(name="a" * 33),
    "system account of a user": serve_grant(system_account=NKey.generate(Role.USER).public_key),
    "a route without port": serve_grant(routes=["10.0.0.5"]),
    "a route as a url": serve_grant(routes=["nats-route://10.0.0.5:6222"]),
    "routes a string": serve_grant(routes="10.0.0.5:6222"),
    "cert too long": serve_grant(cert="a" * 16_385),
}


@pytest.mark.parametrize("case", sorted(BAD_GRANTS))
def test_an_answer_with_a_damaged_grant_is_refused(case: str) -> None:
    with pytest.raises(JoinError, match="not one this version reads"):
        read_answer(encoded(join_answer(grant=BAD_GRANTS[case])), ca=False)
