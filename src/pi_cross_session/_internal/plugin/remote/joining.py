"""``remote join``: this machine joins a deployment with the hub's join line.

1. It connects as a throwaway user signed by the invitation (which only lets it ask to join),
   with TLS it cannot verify yet, and asks for the deployment's CA; it keeps the CA only when
   the deployment key of the join line signed it.
2. It connects again, verifying the server with that CA, and asks to join: its machine card,
   signed with the invitation's seed (the seed itself never leaves the machine).
3. The hub's answer (the machine's user JWT, the servers, the roster) is checked against the
   deployment key and this machine's own keys, then kept: the JWT, the CA, ``joined.json`` and
   the roster (:mod:`.files`). The gateway then starts from those files alone.

A machine that joins as one more server (``remote hub --join``) adds to its ask what it would
serve as (:class:`~pi_cross_session._internal.protocol.remote.join.ServeAsk`), and the answer
carries its grant; :mod:`.member` installs that.
"""

from __future__ import annotations

import base64
import binascii
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import nats
import nats.errors
from nats.aio.client import RawCredentials

# The link module quiets asyncio's warning about a TLS connection's end, which a join's two
# short connections would otherwise print at default verbosity.
from pi_cross_session._internal.plugin.remote import files, link  # noqa: F401
from pi_cross_session._internal.protocol.errors import CrossSessionError
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.remote.join import (
    JOIN_SUBJECT,
    CaAnswer,
    CaAsk,
    JoinAnswer,
    JoinAsk,
    JoinLine,
    Refusal,
    ServeAsk,
    ServeGrant,
    ca_signed_bytes,
    join_inbox,
    proof_bytes,
    read_answer,
)
from pi_cross_session._internal.security.remote import nats_jwt
from pi_cross_session._internal.security.remote.identity import MachineKeyError, PublicKey
from pi_cross_session._internal.security.remote.nats_jwt import CredentialsError, NKey, Role
from pi_cross_session._internal.security.remote.roster import open_roster

#: How long each step may take: a hub a person just started answers in milliseconds; a server
#: that does not answer in this long will not, and the person wants to hear so.
STEP_TIMEOUT_S: Final = 10.0


class JoinFailedError(CrossSessionError):
    """The machine did not join; the message says why and what to do."""

    code = "join_failed"


@dataclass(frozen=True, slots=True)
class Joined:
    """What joining gave this machine."""

    machine: str
    servers: tuple[str, ...]
    deployment: str
    machines: tuple[str, ...]
    #: The deployment's CA (PEM), and what this machine serves as when it joined to serve.
    ca: str = ""
    grant: ServeGrant | None = None


async def join(
    locations: Locations,
    line: JoinLine,
    identity: files.Identity,
    *,
    progress: Callable[[str], None] = lambda text: None,
    serve: ServeAsk | None = None,
) -> Joined:
    """Join the deployment of ``line`` as ``identity`` (with ``serve``, as one more server too);
    :class:`JoinFailedError` says why not."""
    try:
        deployment_key = PublicKey(nats_jwt.public_key_bytes(line.deployment))
        invitation = NKey(line.seed)
    except (CredentialsError, MachineKeyError):
        raise JoinFailedError("the join token is damaged: copy it again, whole") from None
    if invitation.role is not Role.ACCOUNT:
        raise JoinFailedError("the join token is damaged: copy it again, whole")
    enrolment = NKey.generate(Role.USER)
    now = int(time.time())
    token = nats_jwt.scoped_user_jwt(
        invitation, line.deployment, enrolment.public_key, name="joining", issued_at=now
    )
    creds = nats_jwt.creds_text(token, enrolment.seed)

    progress(f"asking {', '.join(line.servers)} for the deployment's certificate")
    unverified = ssl.create_default_context()
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE
    ca_answer = await _ask(line, creds, enrolment, unverified, CaAsk().model_dump_json(), ca=True)
    assert isinstance(ca_answer, CaAnswer)
    try:
        signature = base64.b64decode(ca_answer.signature, validate=True)
    except (binascii.Error, ValueError):
        signature = b""
    if not deployment_key.verifies(signature, ca_signed_bytes(ca_answer.ca)):
        raise JoinFailedError(
            "the server's certificate is not the deployment's (its signature does not verify "
            "with the deployment key of the join line): someone may be in the middle, or the "
            "line is for another hub"
        )
    try:
        verified = ssl.create_default_context(cadata=ca_answer.ca)
    except (ssl.SSLError, ValueError):
        raise JoinFailedError("the deployment's CA certificate cannot be read") from None

    card = identity.card()
    ask = JoinAsk(
        invitation=invitation.public_key,
        card=card,
        proof=base64.b64encode(invitation.sign(proof_bytes(card, serve))).decode(),
        serve=serve,
    )
    progress(f"asking to join as {identity.machine}")
    answer = await _ask(line, creds, enrolment, verified, ask.model_dump_json(), ca=False)
    assert isinstance(answer, JoinAnswer)
    if answer.deployment != line.deployment:
        raise JoinFailedError("the hub answered for another deployment")
    try:
        user = nats_jwt.decode(answer.jwt)
    except CredentialsError as exc:
        raise JoinFailedError(f"the hub's JWT for this machine cannot be used: {exc}") from None
    if user.issuer != line.deployment or user.subject != identity.nats.public_key:
        raise JoinFailedError("the hub's JWT is not for this machine in this deployment")
    try:
        sealed = base64.b64decode(answer.roster, validate=True)
    except (binascii.Error, ValueError):
        sealed = b""
    roster = open_roster(sealed, deployment_key, line.deployment)
    if roster is None or identity.machine not in roster.machines:
        raise JoinFailedError("the hub's roster does not verify or does not list this machine")
    if (serve is None) != (answer.grant is None):
        raise JoinFailedError("the hub did not answer what was asked (to serve, or not)")
    files.install_nats_jwt(locations, answer.jwt)
    servers = tuple(dict.fromkeys([*answer.servers, *line.servers]))
    files.save_joined(
        locations,
        files.Joined(servers, line.deployment, answer.account),
        ca_answer.ca.encode("ascii"),
    )
    files.save_roster(locations, sealed)
    trust = files.load_trust(locations).with_account(answer.account).with_inbound(True)
    files.save_trust(locations, trust)
    others = tuple(sorted(m for m in roster.machines if m != identity.machine))
    return Joined(identity.machine, servers, line.deployment, others, ca_answer.ca, answer.grant)


async def _ask(
    line: JoinLine,
    creds: str,
    enrolment: NKey,
    tls: ssl.SSLContext,
    body: str,
    *,
    ca: bool,
) -> CaAnswer | JoinAnswer:
    errors: list[Exception] = []

    async def on_error(exc: Exception) -> None:
        errors.append(exc)

    options: dict[str, Any] = {
        "servers": list(line.servers),
        "user_credentials": RawCredentials(creds),
        "tls": tls,
        # A hub's server wants the TLS handshake before anything else (nothing in the clear).
        "tls_handshake_first": True,
        "inbox_prefix": join_inbox(enrolment.public_key).encode(),
        "allow_reconnect": False,
        "connect_timeout": STEP_TIMEOUT_S,
        "max_reconnect_attempts": 0,
        "error_cb": on_error,
        "name": "pi-cross-session remote join",
    }
    try:
        client = await nats.connect(**options)
    except Exception as exc:
        raise JoinFailedError(_connect_failure(line, errors or [exc])) from None
    try:
        reply = await client.request(JOIN_SUBJECT, body.encode(), timeout=STEP_TIMEOUT_S)
    except nats.errors.NoRespondersError:
        raise JoinFailedError(
            "the server answers but no hub admits machines on it: is 'pi-cross-session remote "
            "hub' running there?"
        ) from None
    except nats.errors.TimeoutError:
        raise JoinFailedError(f"the hub did not answer within {STEP_TIMEOUT_S:g} s") from None
    finally:
        await client.close()
    answer = read_answer(reply.data, ca=ca)
    if isinstance(answer, Refusal):
        raise JoinFailedError(f"the hub refused ({answer.refused}): {answer.detail}")
    return answer


def _connect_failure(line: JoinLine, errors: list[Exception]) -> str:
    text = "; ".join(str(e) for e in errors).lower()
    where = ", ".join(line.servers)
    if "authorization" in text or "authentication" in text:
        return (
            f"{where} refused the invitation: the join line was used already, has lapsed, or is "
            "for another deployment; print a new one on the hub ('pi-cross-session remote invite')"
        )
    if "ssl" in text or "tls" in text or "certificate" in text:
        return f"TLS with {where} failed ({text}): is the URL the hub printed, with tls://?"
    return f"cannot reach {where} ({text or 'no answer'}): is the hub running, and this port open?"


__all__ = ["STEP_TIMEOUT_S", "JoinFailedError", "Joined", "join"]
