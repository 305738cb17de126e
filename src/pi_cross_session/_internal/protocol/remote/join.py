"""Joining a deployment: the join line, the subjects, and what a joiner and the hub say.

``pi-cross-session remote hub`` prints one **join line**::

    pi-cross-session remote join tls://10.0.0.5:4222 PIXS1-<deployment key>-<invitation seed>

* the server URLs (comma-separated) a joiner first connects to;
* the **deployment key**: the public key of the deployment's NATS account (``A…``). It is the
  deployment's identity: the server knows the account by it, the roster is signed with it, and
  it signs the deployment's CA certificate. The joiner learns the CA over a connection it cannot
  verify yet and keeps it only when that signature verifies, so a server in the middle is found
  out before anything secret is said; the line carries one key rather than a key and a CA
  fingerprint;
* the seed of an **invitation**: a scoped signing key of the deployment's account. Users it signs
  may only ask to join
  (:func:`~pi_cross_session._internal.security.remote.permissions.join_permissions`), and the joiner
  proves it holds the seed by signing its machine card with it. The hub admits one machine per
  invitation, then drops the key from the account; it lapses at its expiry.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
from typing import Annotated, Final, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pi_cross_session._internal.protocol.errors import CrossSessionError
from pi_cross_session._internal.protocol.remote.envelope import RECORD_PREFIX, SUBJECT_PREFIX

#: Where a joiner asks (only invitations' users may publish here; the hub listens).
JOIN_SUBJECT: Final = f"{SUBJECT_PREFIX}.join.ask"
#: A joiner's replies arrive under here, followed by its own NATS user key (the invitation's
#: scope lets a user subscribe under its own key only).
JOIN_INBOX_PREFIX: Final = f"{SUBJECT_PREFIX}.join.in"
#: The bucket key of the deployment's roster: machine names never start with ``_``, so no
#: machine's record permissions reach it; only the hub (the account's administrator) puts it.
ROSTER_KEY: Final = "_deployment.roster"
ROSTER_SUBJECT: Final = f"{RECORD_PREFIX}.{ROSTER_KEY}"
#: What a join token starts with (the version of this format).
TOKEN_PREFIX: Final = "PIXS1"
#: The proof a joiner signs with the invitation's seed starts with this, so that no other
#: signature made with that key can pass for a proof.
PROOF_CONTEXT: Final = b"pi-cross-session join v1\n"
#: What the deployment key signs of its CA certificate starts with this (the same key signs
#: rosters, which start otherwise).
CA_CONTEXT: Final = b"pi-cross-session deployment CA v1\n"
#: An ask or an answer, at most (an answer holds a JWT, a CA and the roster of a deployment of
#: hundreds of machines).
MAX_JOIN_MESSAGE_BYTES: Final = 1_048_576
_SEED_RE: Final = re.compile(r"SA[A-Z2-7]{56}")
_ACCOUNT_KEY_RE: Final = re.compile(r"A[A-Z2-7]{55}")
_URL_RE: Final = re.compile(r"(?:tls|nats)://[A-Za-z0-9._\-\[\]:]{1,255}")


class JoinError(CrossSessionError):
    """A join line, ask or answer that cannot be used."""

    code = "bad_join"


def join_inbox(user_key: str) -> str:
    """The inbox prefix of a joiner whose NATS user key is ``user_key``."""
    return f"{JOIN_INBOX_PREFIX}.{user_key}"


def ca_signed_bytes(ca_pem: str) -> bytes:
    """What the deployment key signs of its CA certificate (PEM text)."""
    return CA_CONTEXT + ca_pem.encode("ascii")


class JoinLine(BaseModel):
    """What a join line says: where the servers are, the deployment key, the invitation."""

    model_config = ConfigDict(frozen=True)

    servers: tuple[str, ...]
    deployment: str
    seed: str

    @property
    def token(self) -> str:
        return f"{TOKEN_PREFIX}-{self.deployment}-{self.seed}"

    def command(self, *, server: bool = False) -> str:
        """The line to run on the joining machine (``server``: one that joins as one more
        server of the deployment, and names the host others reach it by)."""
        where = ",".join(self.servers)
        if server:
            return f"pi-cross-session remote hub --join {where} {self.token} --host HOST"
        return f"pi-cross-session remote join {where} {self.token}"

    @classmethod
    def parse(cls, servers: str, token: str) -> JoinLine:
        """Read the two words after ``remote join``; :class:`JoinError` says what is wrong."""
        urls = tuple(url for url in servers.split(",") if url)
        if not urls or any(_URL_RE.fullmatch(url) is None for url in urls):
            raise JoinError("the first word is the server URL(s), e.g. tls://10.0.0.5:4222")
        head, _, rest = token.partition("-")
        deployment, _, seed = rest.partition("-")
        if head != TOKEN_PREFIX:
            raise JoinError(f"the second word is the join token ({TOKEN_PREFIX}-…), whole")
        if _ACCOUNT_KEY_RE.fullmatch(deployment) is None or _SEED_RE.fullmatch(seed) is None:
            raise JoinError("the join token is damaged: copy it again, whole")
        return cls(servers=urls, deployment=deployment, seed=seed)


_Text = Annotated[str, Field(max_length=4096)]
_M = TypeVar("_M", bound=BaseModel)
UNKNOWN_ANSWER: Final = "the hub's answer is not one this version reads"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class CaAsk(_Strict):
    """Asked first, over a connection not yet verified: the deployment's CA certificate."""

    v: Literal[1] = 1
    ask: Literal["ca"] = "ca"


_HostPort = Annotated[str, Field(pattern=r"^[A-Za-z0-9._\-\[\]:]{1,255}:[0-9]{1,5}$")]


class ServeAsk(_Strict):
    """What a machine joining as one more server adds to its ask: its certificate request (for
    the names it is reached by) and where clients and the other servers reach it."""

    csr: Annotated[str, Field(max_length=8192)]
    client: _HostPort
    cluster: _HostPort


class JoinAsk(_Strict):
    """Asked over a verified connection: admit this machine (its card), by this invitation;
    with ``serve``, as one more server (only a server invitation admits that)."""

    v: Literal[1] = 1
    ask: Literal["join"] = "join"
    invitation: Annotated[str, Field(pattern=r"^A[A-Z2-7]{55}$")]
    card: _Text
    #: base64 of the invitation key's signature of :func:`proof_bytes` of the card.
    proof: Annotated[str, Field(max_length=128)]
    serve: ServeAsk | None = None


def proof_bytes(card: str, serve: ServeAsk | None = None) -> bytes:
    """What a joiner signs with the invitation's seed: its card (and, joining as a server, what
    it asks to serve as), in its context."""
    signed = PROOF_CONTEXT + card.encode("utf-8")
    if serve is not None:
        signed += b"\nserve " + serve.model_dump_json().encode("utf-8")
    return signed


_Jwt = Annotated[str, Field(max_length=MAX_JOIN_MESSAGE_BYTES // 4)]


class ServeGrant(_Strict):
    """What a new server of the deployment needs: its name, its certificate, what its
    configuration's authorization part holds (JWTs only: no seed leaves the hub), and the
    routes to the servers there already."""

    name: Annotated[str, Field(pattern=r"^[a-z0-9-]{1,32}$")]
    cert: Annotated[str, Field(max_length=16_384)]
    operator: _Jwt
    system_account: Annotated[str, Field(pattern=r"^A[A-Z2-7]{55}$")]
    system_jwt: _Jwt
    account_jwt: _Jwt
    routes: tuple[_HostPort, ...]


class CaAnswer(_Strict):
    """The deployment's CA certificate (PEM) and the deployment key's signature of it (base64,
    over :func:`ca_signed_bytes`)."""

    v: Literal[1] = 1
    ca: Annotated[str, Field(max_length=16_384)]
    signature: Annotated[str, Field(max_length=128)]


class JoinAnswer(_Strict):
    """Admitted: the machine's user JWT, the deployment (its account key and name), the servers,
    and the roster (base64 of its sealed bytes) so the new gateway trusts the others at once."""

    v: Literal[1] = 1
    jwt: Annotated[str, Field(max_length=16_384)]
    deployment: Annotated[str, Field(pattern=r"^A[A-Z2-7]{55}$")]
    account: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
    servers: tuple[Annotated[str, Field(pattern=rf"^{_URL_RE.pattern}$")], ...]
    roster: Annotated[str, Field(max_length=MAX_JOIN_MESSAGE_BYTES)]
    #: Present when the ask was to serve.
    grant: ServeGrant | None = None


class Refusal(_Strict):
    """Not admitted: a code and a sentence for the person joining."""

    v: Literal[1] = 1
    refused: Annotated[str, Field(pattern=r"^[a-z_]{1,40}$")]
    detail: _Text


def read_one_of(data: bytes, models: tuple[type[_M], ...], *, what: str, unknown: str) -> _M:
    """``data`` as the first of ``models`` it validates as; :class:`JoinError` saying ``what``
    is over the size limit, or ``unknown`` when it is none of them."""
    if len(data) > MAX_JOIN_MESSAGE_BYTES:
        raise JoinError(f"{what} is over the size limit")
    for model in models:
        try:
            return model.model_validate_json(data)
        except ValidationError:
            continue
    raise JoinError(unknown)


def read_ask(data: bytes) -> CaAsk | JoinAsk:
    """An ask as the hub reads it; :class:`JoinError` when it is none."""
    models: tuple[type[CaAsk | JoinAsk], ...] = (CaAsk, JoinAsk)
    return read_one_of(data, models, what="an ask", unknown="not an ask")


def read_answer(data: bytes, *, ca: bool) -> CaAnswer | JoinAnswer | Refusal:
    """An answer as a joiner reads it (``ca``: the answer to a :class:`CaAsk`)."""
    models: tuple[type[CaAnswer | JoinAnswer | Refusal], ...] = (
        (CaAnswer, Refusal) if ca else (JoinAnswer, Refusal)
    )
    return read_one_of(data, models, what="the hub's answer", unknown=UNKNOWN_ANSWER)


__all__ = [
    "JOIN_INBOX_PREFIX",
    "JOIN_SUBJECT",
    "ROSTER_KEY",
    "ROSTER_SUBJECT",
    "CaAnswer",
    "CaAsk",
    "JoinAnswer",
    "JoinAsk",
    "JoinError",
    "JoinLine",
    "Refusal",
    "ServeAsk",
    "ServeGrant",
    "ca_signed_bytes",
    "join_inbox",
    "proof_bytes",
    "read_answer",
    "read_ask",
    "read_one_of",
]
