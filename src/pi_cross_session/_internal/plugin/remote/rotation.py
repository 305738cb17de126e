"""``remote rotate``: replace this machine's keys, keeping its name, through its deployment's hub.

On the machine (:func:`rotate`), in the two steps of
:mod:`~pi_cross_session._internal.protocol.remote.rotate`:

1. new keys are made in ``rotation/`` beside the current ones (:mod:`.files`), which stay in
   place and in use;
2. over the current credentials, the current identity key signs the new card: the hub keeps it
   as pending and answers with a user JWT for the new NATS key, kept in ``rotation/``;
3. over the *new* credentials, the new identity key confirms: the hub switches the card, revokes
   the old NATS key on the servers, publishes the roster with the new identity key and answers
   with it;
4. the roster is checked against the deployment key, kept in ``rotation/`` with a ``confirmed``
   mark, and the new set is copied over the old one (:func:`.files.finish_rotation`).

A crash or a lost answer anywhere leaves a set the deployment takes (the old one until step 3,
the new one after), and ``remote rotate`` run again goes on from where it stopped: it reuses the
new keys of ``rotation/``, asks to confirm first when it has their JWT, and the hub answers a
confirmation it already took again. The old keys are not kept after step 4: the old NATS key is
revoked, and the old identity key is on no roster any more.

On the hub (:func:`answer_rotation`), beside the join asks: each ask is checked and applied under
the deployment's lock (:func:`apply`: :meth:`.deployment.Deployment.rotate`,
:meth:`~.deployment.Deployment.confirm_rotation`); an ask that revoked a key (the old one of a
confirmed rotation, a pending one replaced) is pushed to the servers (that key's connections
close), and a confirmation's roster published. A fault of the hub's own is answered
``hub_error`` at once. As the hub starts, :func:`settle_own_keys` finishes a rotation of its own
machine that it confirmed and the machine never heard of.

On the machine, one ``remote rotate`` at a time (a lock beside ``rotation/``).
"""

from __future__ import annotations

import base64
import binascii
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import anyio
import filelock
from nats.aio.msg import Msg

from pi_cross_session._internal.plugin.remote import files, upkeep
from pi_cross_session._internal.plugin.remote.deployment import Deployment, MachineCard
from pi_cross_session._internal.plugin.remote.link import (
    ConnectError,
    HopTimeoutError,
    Link,
    LinkConfig,
    NatsProblem,
    NoRespondersError,
    PermissionDeniedError,
    UnreachableError,
)
from pi_cross_session._internal.plugin.render import remote_plane
from pi_cross_session._internal.protocol.errors import CrossSessionError
from pi_cross_session._internal.protocol.paths import Locations, node_join
from pi_cross_session._internal.protocol.remote.join import ROSTER_SUBJECT, JoinError, Refusal
from pi_cross_session._internal.protocol.remote.rotate import (
    CONFIRM,
    ROTATE,
    RotateAnswer,
    RotateAsk,
    Step,
    read_rotate_answer,
    read_rotate_ask,
    rotate_origin,
    rotate_subject,
    signed_bytes,
)
from pi_cross_session._internal.protocol.remote.settings import ROTATE_STEP_TIMEOUT_S
from pi_cross_session._internal.security.remote import nats_jwt
from pi_cross_session._internal.security.remote.identity import PublicKey
from pi_cross_session._internal.security.remote.nats_jwt import CredentialsError
from pi_cross_session._internal.security.remote.roster import open_roster
from pi_cross_session._internal.security.remote.rotation import (
    HUB_ERROR,
    NO_ROTATION,
    RotationRefusedError,
)

logger = logging.getLogger(__name__)

#: Codes of :class:`RotateFailedError` said on this machine (the hub's refusals keep theirs).
NOT_JOINED: Final = "not_joined"
HUB_UNREACHABLE: Final = "hub_unreachable"
CREDENTIALS_REFUSED: Final = "credentials_refused"
BAD_ANSWER: Final = "bad_answer"
BUSY: Final = "busy"
#: … which are this machine's failures (its set-up, its reach), not the hub's refusals.
LOCAL_CODES: Final = frozenset({NOT_JOINED, HUB_UNREACHABLE, CREDENTIALS_REFUSED, BUSY})
#: … and those after which what the hub did is not known here (its answer could not be used, or
#: it failed itself): run ``remote rotate`` again to learn it, as after a lost answer.
UNKNOWN_CODES: Final = frozenset({BAD_ANSWER, HUB_ERROR})
#: Held (``flock``) by the one ``remote rotate`` of an agent dir, beside ``rotation/`` (a file in
#: it would keep the directory that a finished rotation removes).
ROTATION_LOCK_FILE: Final = "rotation.lock"


class RotateFailedError(CrossSessionError):
    """This machine's keys were not rotated (or not to the end); ``code`` says why: one of the
    hub's refusals, or ``not_joined``, ``hub_unreachable``, ``credentials_refused``,
    ``bad_answer``, ``busy`` (another ``remote rotate`` runs here)."""

    code = BAD_ANSWER


@dataclass(frozen=True, slots=True)
class Rotated:
    """What a rotation changed."""

    machine: str
    old_key: str
    new_key: str
    nats_key: str
    #: It finished a rotation begun earlier (cut short by a crash or a lost answer).
    resumed: bool = False


# -- on the machine ------------------------------------------------------------------------------


async def rotate(
    locations: Locations,
    *,
    progress: Callable[[str], None] = lambda text: None,
    not_joined: str = "this machine joined no deployment",
) -> Rotated:
    """Rotate this machine's keys through its deployment's hub; :class:`RotateFailedError` says
    why not (``not_joined``: what a machine set up by hand is told). One at a time: a second
    run while one runs is refused (``busy``), whose steps would otherwise interleave with its
    own and leave this machine with keys the hub does not take."""
    path = node_join(files.remote_dir(locations), ROTATION_LOCK_FILE)
    files.ensure_remote_dir(locations)
    lock = filelock.FileLock(path, timeout=0, mode=0o600)
    try:
        lock.acquire()
    except filelock.Timeout:
        raise RotateFailedError(remote_plane.rotate_busy(path), code=BUSY) from None
    try:
        return await _rotate(locations, progress, not_joined)
    finally:
        lock.release()


async def _rotate(
    locations: Locations, progress: Callable[[str], None], not_joined: str
) -> Rotated:
    identity = files.load_identity(locations)  # finishes a confirmed rotation cut short
    joined = files.load_joined(locations)
    current = files.load_nats_credentials(locations)
    if joined is None or current is None:
        raise RotateFailedError(not_joined, code=NOT_JOINED)
    deployment = PublicKey(nats_jwt.public_key_bytes(joined.deployment))
    new = files.rotation_identity(locations, identity.machine)
    if new is not None and new.key.public_key == identity.key.public_key:
        files.discard_rotation(locations)  # a finished rotation's leftover copy
        new = None
    resumed = new is not None
    if new is None:
        new = files.begin_rotation(locations, identity.machine)
    step = _Step(locations, joined, deployment, new)
    sealed = None
    pending = files.rotation_credentials(locations, new)
    if pending is not None:
        progress("finishing the key rotation begun earlier: confirming with the new keys")
        sealed = await step.confirm(pending, retry_on_refusal=True)
    if sealed is None:
        progress(f"asking the hub to rotate the keys of {identity.machine}")
        jwt = (await step.ask(ROTATE, identity, current)).jwt
        files.save_rotation_jwt(locations, jwt)
        progress("confirming with the new keys")
        sealed = await step.confirm(nats_jwt.creds_text(jwt, new.nats.seed))
    assert sealed is not None
    files.finish_rotation(locations, sealed)
    return Rotated(
        identity.machine,
        identity.key.public_text(),
        new.key.public_text(),
        new.nats.public_key,
        resumed,
    )


@dataclass(frozen=True, slots=True)
class _Step:
    locations: Locations
    joined: files.Joined
    deployment: PublicKey
    new: files.Identity

    async def confirm(self, creds: str, *, retry_on_refusal: bool = False) -> bytes | None:
        """Confirm with the new keys over ``creds``; the sealed roster that lists them. With
        ``retry_on_refusal``, ``None`` when the hub has no such rotation pending or the servers
        refuse the new credentials: the first step must be asked again."""
        try:
            answer = await self.ask(CONFIRM, self.new, creds)
        except RotateFailedError as exc:
            if retry_on_refusal and exc.code in (NO_ROTATION, CREDENTIALS_REFUSED):
                return None
            raise
        try:
            sealed = base64.b64decode(answer.roster or "", validate=True)
        except (binascii.Error, ValueError):
            sealed = b""
        roster = open_roster(sealed, self.deployment, self.joined.deployment)
        if roster is None or roster.machines.get(self.new.machine) != self.new.key.public_key:
            raise RotateFailedError(
                "the hub's roster does not verify or does not list the new key", code=BAD_ANSWER
            )
        return sealed

    async def ask(self, step: Step, signer: files.Identity, creds: str) -> RotateAnswer:
        """One step, signed by ``signer``, over ``creds``: the hub's answer, its JWT checked."""
        card = self.new.card()
        at = time.time_ns() // 1_000_000
        signature = signer.key.sign(signed_bytes(step, self.joined.deployment, card, at))
        ask = RotateAsk(
            ask=step,
            deployment=self.joined.deployment,
            card=card,
            at=at,
            signature=base64.b64encode(signature).decode(),
        )
        answer = await _request(self.locations, self.joined, signer.machine, creds, ask)
        if isinstance(answer, Refusal):
            raise RotateFailedError(answer.detail, code=answer.refused)
        if answer.step != step:
            raise RotateFailedError("the hub answered another step", code=BAD_ANSWER)
        try:
            token = nats_jwt.decode(answer.jwt)
        except CredentialsError as exc:
            raise RotateFailedError(
                f"the hub's JWT cannot be used: {exc}", code=BAD_ANSWER
            ) from None
        if token.issuer != self.joined.deployment or token.subject != self.new.nats.public_key:
            raise RotateFailedError(
                "the hub's JWT is not for the new NATS key in this deployment", code=BAD_ANSWER
            )
        return answer


async def _request(
    locations: Locations, joined: files.Joined, machine: str, creds: str, ask: RotateAsk
) -> RotateAnswer | Refusal:
    """Connect with ``creds``, send ``ask`` to the hub, and read its answer."""
    link = Link(
        LinkConfig(
            servers=joined.servers,
            machine=machine,
            tls_ca=files.ca_path(locations),
            tls_first=joined.tls_first,
            credentials=creds,
            name=f"pi-cross-session remote rotate {machine}",
        )
    )
    try:
        with anyio.fail_after(ROTATE_STEP_TIMEOUT_S * 2):
            await link.connect()
    except ConnectError as exc:
        if exc.problem is NatsProblem.AUTH:
            raise RotateFailedError(
                f"the servers refused this machine's {'new ' if ask.ask == CONFIRM else ''}"
                f"credentials ({exc.detail}): revoked, or for another deployment",
                code=CREDENTIALS_REFUSED,
            ) from None
        raise RotateFailedError(str(exc), code=HUB_UNREACHABLE) from None
    except TimeoutError:
        raise RotateFailedError("no server answered in time", code=HUB_UNREACHABLE) from None
    try:
        return await link.request(
            rotate_subject(machine),
            ask.model_dump_json().encode(),
            ROTATE_STEP_TIMEOUT_S,
            _readable,
        )
    except NoRespondersError:
        raise RotateFailedError(
            "the server answers, but no hub listens on it", code=HUB_UNREACHABLE
        ) from None
    except HopTimeoutError:
        raise RotateFailedError(
            f"the hub did not answer within {ROTATE_STEP_TIMEOUT_S:g} s", code=HUB_UNREACHABLE
        ) from None
    except (UnreachableError, PermissionDeniedError) as exc:
        raise RotateFailedError(str(exc), code=HUB_UNREACHABLE) from None
    finally:
        with anyio.CancelScope(shield=True):
            await link.close()


def _readable(data: bytes) -> RotateAnswer | Refusal | None:
    try:
        return read_rotate_answer(data)
    except JoinError:
        return None


# -- on the hub ----------------------------------------------------------------------------------


async def answer_rotation(
    directory: Path, link: Link, msg: Msg, *, now_ms: int
) -> tuple[str, str | None]:
    """Answer one rotation ask heard on the hub's admin connection ``link``: how it ended (a
    count's key) and the machine whose keys it rotated, if it did."""
    origin = rotate_origin(msg.subject)
    try:
        ask = read_rotate_ask(msg.data)
    except JoinError:
        return "unreadable", None
    if origin is None:
        return "unreadable", None
    try:
        applied = await anyio.to_thread.run_sync(apply, directory, origin, ask, now_ms)
    except RotationRefusedError as exc:
        refusal = Refusal(refused=exc.code, detail=str(exc))
        await link.respond(msg, refusal.model_dump_json().encode())
        return exc.code, None
    except Exception as exc:  # the hub's own fault (its lock held, its files): say so at once
        logger.warning("could not answer the rotation ask of %s", origin, exc_info=True)
        busy = isinstance(exc, filelock.Timeout)
        refusal = Refusal(refused=HUB_ERROR, detail=remote_plane.rotate_hub_error(busy=busy))
        await link.respond(msg, refusal.model_dump_json().encode())
        return HUB_ERROR, None
    deployment = applied.deployment
    roster = None
    if ask.ask == CONFIRM:
        roster = base64.b64encode(deployment.sealed_roster(seq=deployment.roster_seq)).decode()
    answer = RotateAnswer(step=ask.ask, jwt=applied.jwt, roster=roster)
    await link.respond(msg, answer.model_dump_json().encode())
    if not applied.confirmed and not applied.revoked:
        return ask.ask, None
    try:
        # A revocation (the old key of a confirmed rotation, or a pending one replaced) counts
        # only once the servers hold the account that lists it.
        await upkeep.push(deployment, now=now_ms // 1000, roster=False)
        if applied.confirmed:
            await link.put(ROSTER_SUBJECT, deployment.sealed_roster(seq=deployment.roster_seq))
    except Exception as exc:  # changed in the deployment; the servers learn of it at the next push
        logger.warning("rotating %s: could not update the servers yet: %s", origin, exc)
    return ("rotated", origin) if applied.confirmed else (ask.ask, None)


@dataclass(frozen=True, slots=True)
class Applied:
    """What one rotation ask changed in the deployment (:func:`apply`)."""

    deployment: Deployment
    #: The user JWT to answer with (for the new NATS key).
    jwt: str
    #: A confirmation that replaced the machine's card (the roster changed).
    confirmed: bool
    #: Keys revoked by this ask (the old one of a confirmed rotation, a replaced pending one):
    #: the account must be pushed to the servers.
    revoked: frozenset[str]


def apply(directory: Path, origin: str, ask: RotateAsk, now_ms: int) -> Applied:
    """Check and apply one rotation ask of ``origin`` to the deployment in ``directory``, under
    its lock (blocking); :class:`RotationRefusedError` says why not."""
    with upkeep.lock(directory):
        deployment = Deployment.open(directory)
        before = set(deployment.revoked)
        if ask.ask == ROTATE:
            jwt = deployment.rotate(origin, ask, now_ms=now_ms)
            confirmed = False
        else:
            confirmed = deployment.confirm_rotation(origin, ask, now_ms=now_ms)
            jwt = deployment.machine_jwt(origin, now=now_ms // 1000).decode().strip()
        deployment.save(now=now_ms // 1000)
    return Applied(deployment, jwt, confirmed, frozenset(set(deployment.revoked) - before))


# -- the hub's own machine, at the hub's start ---------------------------------------------------


def own_rotation_confirmed(deployment: Deployment, new: files.Identity | None) -> bool:
    """The deployment lists this machine with the new keys of its rotation under way (``new``,
    from ``rotation/``): the hub confirmed it, and this machine never heard so."""
    if new is None:
        return False
    listed = deployment.machines.get(new.machine)
    return listed is not None and listed == MachineCard.parse(new.card())


def settle_own_keys(
    locations: Locations, deployment: Deployment, identity: files.Identity, *, now: int
) -> files.Identity:
    """The hub's own machine as the hub starts (under the deployment's lock; the caller saves):
    a rotation of its keys that the deployment took and this machine did not hear of is
    finished here, from what the hub's answer would have held (the JWT, the roster); otherwise
    its card is admitted (nothing changes when the deployment has it already, the old keys of
    a rotation still pending included). The identity to run with; :class:`DeploymentError`
    when the deployment revoked these keys and ``rotation/`` holds none it took."""
    new = files.rotation_identity(locations, identity.machine)
    if own_rotation_confirmed(deployment, new):
        jwt = deployment.machine_jwt(identity.machine, now=now).decode()
        files.save_rotation_jwt(locations, jwt)
        files.finish_rotation(locations, deployment.sealed_roster(seq=deployment.roster_seq))
        return files.load_identity(locations)
    deployment.admit(MachineCard.parse(identity.card()), now=now)
    return identity


__all__ = [
    "BAD_ANSWER",
    "BUSY",
    "CREDENTIALS_REFUSED",
    "HUB_UNREACHABLE",
    "LOCAL_CODES",
    "NOT_JOINED",
    "ROTATION_LOCK_FILE",
    "UNKNOWN_CODES",
    "Applied",
    "RotateFailedError",
    "Rotated",
    "answer_rotation",
    "apply",
    "own_rotation_confirmed",
    "rotate",
    "settle_own_keys",
]
