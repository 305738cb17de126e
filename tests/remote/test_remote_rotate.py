"""A machine's key rotation, the pure parts (docs/remote.md, "Rotating a machine's keys"): the
ask and its signed bytes (protocol/remote/rotate.py), the hub's checks of it
(security/remote/rotation.py), and the deployment's two steps (``Deployment.rotate`` and
``confirm_rotation``): what each refuses, with which code, and what each changes."""

from __future__ import annotations

import argparse
import base64
import time
from pathlib import Path

import filelock
import pytest

from pi_cross_session._internal.cli import exits, remote_rotate
from pi_cross_session._internal.cli.console import Console
from pi_cross_session._internal.plugin.remote import files, rotation, upkeep
from pi_cross_session._internal.plugin.remote.deployment import Deployment, MachineCard
from pi_cross_session._internal.plugin.remote.link import ConnectError, NatsProblem
from pi_cross_session._internal.protocol.io import environment
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.remote.join import ROSTER_SUBJECT, JoinError, Refusal
from pi_cross_session._internal.protocol.remote.rotate import (
    CONFIRM,
    ROTATE,
    ROTATE_CONTEXT,
    ROTATE_SUBJECTS,
    RotateAnswer,
    RotateAsk,
    Step,
    read_rotate_answer,
    read_rotate_ask,
    rotate_origin,
    rotate_subject,
    signed_bytes,
)
from pi_cross_session._internal.protocol.remote.settings import (
    ROTATE_KEYS_PER_WINDOW,
    ROTATE_WINDOW_S,
)
from pi_cross_session._internal.security.remote import nats_jwt
from pi_cross_session._internal.security.remote.identity import MachineKey, PublicKey
from pi_cross_session._internal.security.remote.nats_jwt import NKey, Role
from pi_cross_session._internal.security.remote.permissions import machine_permissions
from pi_cross_session._internal.security.remote.roster import open_roster
from pi_cross_session._internal.security.remote.rotation import (
    BAD_CARD,
    BAD_SIGNATURE,
    HUB_ERROR,
    NO_ROTATION,
    STALE_ASK,
    TOO_SOON,
    UNKNOWN_MACHINE,
    WRONG_DEPLOYMENT,
    RotationRefusedError,
    check_ask,
)
from tests.support.nats_subjects import subject_matches

NOW_MS = 1_700_000_000_000
DEPLOYMENT = NKey.generate(Role.ACCOUNT).public_key


def card_of(name: str, key: MachineKey, nats: NKey) -> str:
    return f"{name} {key.public_text()} nats:{nats.public_key}"


def ask_of(
    step: Step,
    card: str,
    signer: MachineKey,
    *,
    at: int = NOW_MS,
    deployment: str = DEPLOYMENT,
) -> RotateAsk:
    signature = signer.sign(signed_bytes(step, deployment, card, at))
    return RotateAsk(
        ask=step,
        deployment=deployment,
        card=card,
        at=at,
        signature=base64.b64encode(signature).decode(),
    )


# -- the ask -------------------------------------------------------------------------------------


def test_the_subject_names_the_asking_machine_within_its_request_right() -> None:
    subject = rotate_subject("buildbox")
    assert subject == "pi-xs.v1.to._deployment.from.buildbox"
    assert rotate_origin(subject) == "buildbox"
    assert subject_matches(ROTATE_SUBJECTS, subject)
    # No new right: a machine's own request permission already covers it, and only as itself.
    (requests,) = [s for s in machine_permissions("buildbox").publish if ".to.*." in s]
    assert subject_matches(requests, subject)
    assert not any(subject_matches(s, subject) for s in machine_permissions("laptop").publish)
    assert rotate_origin("pi-xs.v1.to._deployment.from._x") is None
    assert rotate_origin("pi-xs.v1.to.laptop.from.buildbox") is None
    with pytest.raises(JoinError):
        rotate_subject("_deployment")


def test_the_signed_bytes_bind_the_step_the_deployment_the_card_and_the_time() -> None:
    card = card_of("buildbox", MachineKey.generate(), NKey.generate(Role.USER))
    signed = signed_bytes(ROTATE, DEPLOYMENT, card, NOW_MS)
    assert signed.startswith(ROTATE_CONTEXT)
    others = {
        signed_bytes(CONFIRM, DEPLOYMENT, card, NOW_MS),
        signed_bytes(ROTATE, NKey.generate(Role.ACCOUNT).public_key, card, NOW_MS),
        signed_bytes(ROTATE, DEPLOYMENT, card.replace("buildbox", "laptop"), NOW_MS),
        signed_bytes(ROTATE, DEPLOYMENT, card, NOW_MS + 1),
    }
    assert signed not in others
    assert len(others) == 4


def test_an_ask_and_an_answer_read_back_and_junk_is_refused() -> None:
    key, nats = MachineKey.generate(), NKey.generate(Role.USER)
    ask = ask_of(ROTATE, card_of("buildbox", key, nats), key)
    assert read_rotate_ask(ask.model_dump_json().encode()) == ask
    assert ask.machine == "buildbox"
    for junk in (b"", b"{}", b'{"v":1,"ask":"join"}', b"x" * 2_000_000):
        with pytest.raises(JoinError):
            read_rotate_ask(junk)
    line_break = ask.model_dump_json().replace("buildbox ", "buildbox\\n")
    with pytest.raises(JoinError):
        read_rotate_ask(line_break.encode())
    answer = RotateAnswer(step=CONFIRM, jwt="a.b.c", roster="AAAA")
    assert read_rotate_answer(answer.model_dump_json().encode()) == answer
    refusal = Refusal(refused=STALE_ASK, detail="too old")
    assert read_rotate_answer(refusal.model_dump_json().encode()) == refusal
    with pytest.raises(JoinError):
        read_rotate_answer(b'{"v":1}')


# -- the hub's checks ----------------------------------------------------------------------------


def refusal_code(ask: RotateAsk, signer: MachineKey, **kw: object) -> str | None:
    arguments: dict[str, object] = {
        "origin": "buildbox",
        "deployment": DEPLOYMENT,
        "signer": signer.public_key,
        "now_ms": NOW_MS,
        **kw,
    }
    try:
        check_ask(ask, **arguments)  # type: ignore[arg-type]
    except RotationRefusedError as exc:
        return exc.code
    return None


def test_the_checks_pass_a_good_ask_and_refuse_each_fault_with_its_code() -> None:
    key, new_key, nats = MachineKey.generate(), MachineKey.generate(), NKey.generate(Role.USER)
    card = card_of("buildbox", new_key, nats)
    good = ask_of(ROTATE, card, key)
    assert refusal_code(good, key) is None
    other = NKey.generate(Role.ACCOUNT).public_key
    assert refusal_code(good, key, deployment=other) == WRONG_DEPLOYMENT
    # Signed by another key (the new one, to rotate; a stranger's), or for other bytes.
    assert refusal_code(good, new_key) == BAD_SIGNATURE
    assert refusal_code(good.model_copy(update={"at": NOW_MS + 1}), key) == BAD_SIGNATURE
    assert refusal_code(good.model_copy(update={"signature": "!!"}), key) == BAD_SIGNATURE
    # A card naming another machine than the subject does, signed as it should be.
    assert refusal_code(good, key, origin="laptop") == BAD_CARD
    # Out of the window, either way; or no later than the last one taken.
    assert refusal_code(ask_of(ROTATE, card, key, at=NOW_MS - 30_001), key) == STALE_ASK
    assert refusal_code(ask_of(ROTATE, card, key, at=NOW_MS - 30_000), key) is None
    assert refusal_code(ask_of(ROTATE, card, key, at=NOW_MS + 5_001), key) == STALE_ASK
    assert refusal_code(good, key, after_ms=NOW_MS) == STALE_ASK
    assert refusal_code(good, key, after_ms=NOW_MS - 1) is None


# -- the deployment's two steps ------------------------------------------------------------------


class Machine:
    """A machine's keys as the tests hand them to the deployment."""

    def __init__(self, name: str = "buildbox") -> None:
        self.name = name
        self.key, self.nats = MachineKey.generate(), NKey.generate(Role.USER)

    @property
    def card(self) -> str:
        return card_of(self.name, self.key, self.nats)


@pytest.fixture
def deployment(tmp_path: Path) -> Deployment:
    made = Deployment.open(tmp_path / "deployment", create=True)
    made.save(now=NOW_MS // 1000)
    return made


def admitted(deployment: Deployment, machine: Machine) -> None:
    deployment.admit(MachineCard.parse(machine.card), now=NOW_MS // 1000 - 60)


def step(
    deployment: Deployment,
    which: Step,
    card: str,
    signer: MachineKey,
    *,
    at: int = NOW_MS,
    origin: str = "buildbox",
) -> str | bool:
    ask = ask_of(which, card, signer, at=at, deployment=deployment.account.public_key)
    if which == ROTATE:
        return deployment.rotate(origin, ask, now_ms=NOW_MS)
    return deployment.confirm_rotation(origin, ask, now_ms=NOW_MS)


def code_of(call: object, *args: object, **kw: object) -> str:
    with pytest.raises(RotationRefusedError) as caught:
        call(*args, **kw)  # type: ignore[operator]
    return caught.value.code


def test_a_rotation_keeps_the_old_keys_until_confirmed_then_replaces_them(
    deployment: Deployment,
) -> None:
    old, new = Machine(), Machine()
    admitted(deployment, old)
    jwt = step(deployment, ROTATE, new.card, old.key)
    assert isinstance(jwt, str)
    token = nats_jwt.decode(jwt)
    assert token.issuer == deployment.account.public_key
    assert token.subject == new.nats.public_key
    assert token.name == "buildbox"
    # Pending, kept across a save: nothing else changed; the old keys still count.
    deployment.save(now=NOW_MS // 1000)
    deployment = Deployment.open(deployment.directory)
    assert deployment.rotating["buildbox"].card == MachineCard.parse(new.card)
    assert deployment.machines["buildbox"] == MachineCard.parse(old.card)
    assert old.nats.public_key not in deployment.revoked
    before = open_roster(
        deployment.sealed_roster(seq=1), deployment_key(deployment), deployment.account.public_key
    )
    assert before is not None
    assert before.machines["buildbox"] == old.key.public_key

    assert step(deployment, CONFIRM, new.card, new.key, at=NOW_MS + 1) is True
    assert deployment.machines["buildbox"] == MachineCard.parse(new.card)
    assert "buildbox" not in deployment.rotating
    assert old.nats.public_key in deployment.revoked
    assert new.nats.public_key not in deployment.revoked
    after = open_roster(
        deployment.sealed_roster(seq=2), deployment_key(deployment), deployment.account.public_key
    )
    assert after is not None
    assert after.machines["buildbox"] == new.key.public_key
    # Asked again (its answer was lost): answered again, nothing changes.
    assert step(deployment, CONFIRM, new.card, new.key, at=NOW_MS + 2) is False
    # The old identity key can no longer rotate this machine.
    third = Machine()
    assert code_of(step, deployment, ROTATE, third.card, old.key) == BAD_SIGNATURE


def deployment_key(deployment: Deployment) -> PublicKey:
    return PublicKey(nats_jwt.public_key_bytes(deployment.account.public_key))


def test_each_refusal_of_the_deployment_has_its_code(deployment: Deployment) -> None:
    old, new = Machine(), Machine()
    admitted(deployment, old)
    assert code_of(step, deployment, ROTATE, card_of("nobody", new.key, new.nats), old.key,
                   origin="nobody") == UNKNOWN_MACHINE  # fmt: skip
    # Signed by the new key instead of the current one.
    assert code_of(step, deployment, ROTATE, new.card, new.key) == BAD_SIGNATURE
    # The new card keeps a key of the old one.
    same_nats = card_of("buildbox", new.key, old.nats)
    assert code_of(step, deployment, ROTATE, same_nats, old.key) == BAD_CARD
    same_key = card_of("buildbox", old.key, new.nats)
    assert code_of(step, deployment, ROTATE, same_key, old.key) == BAD_CARD
    # Another machine's NATS key.
    laptop = Machine("laptop")
    admitted(deployment, laptop)
    taken = card_of("buildbox", new.key, laptop.nats)
    assert code_of(step, deployment, ROTATE, taken, old.key) == BAD_CARD
    # A confirmation with nothing pending, or signed by the old key.
    assert code_of(step, deployment, CONFIRM, new.card, new.key) == NO_ROTATION
    step(deployment, ROTATE, new.card, old.key)
    assert code_of(step, deployment, CONFIRM, new.card, old.key, at=NOW_MS + 1) == BAD_SIGNATURE
    # A copy of the first step played back while it is pending.
    assert code_of(step, deployment, ROTATE, new.card, old.key) == STALE_ASK
    assert deployment.machines["buildbox"] == MachineCard.parse(old.card)


def test_a_second_rotation_replaces_the_pending_one_and_revokes_its_key(
    deployment: Deployment,
) -> None:
    old, first, second = Machine(), Machine(), Machine()
    admitted(deployment, old)
    step(deployment, ROTATE, first.card, old.key)
    # The same card again (a machine that asks once more after a crash): nothing revoked.
    step(deployment, ROTATE, first.card, old.key, at=NOW_MS + 1)
    assert first.nats.public_key not in deployment.revoked
    step(deployment, ROTATE, second.card, old.key, at=NOW_MS + 2)
    assert first.nats.public_key in deployment.revoked
    assert code_of(step, deployment, CONFIRM, first.card, first.key, at=NOW_MS + 3) == NO_ROTATION
    assert step(deployment, CONFIRM, second.card, second.key, at=NOW_MS + 3) is True


def test_revoking_a_machine_revokes_the_key_of_its_pending_rotation(
    deployment: Deployment,
) -> None:
    old, new = Machine(), Machine()
    admitted(deployment, old)
    step(deployment, ROTATE, new.card, old.key)
    deployment.revoke("buildbox", now=NOW_MS // 1000)
    assert {old.nats.public_key, new.nats.public_key} <= set(deployment.revoked)
    assert deployment.rotating == {}


# -- the hub's answer: what it pushes, what it bounds, how it fails ------------------------------


class _Msg:
    """A rotation ask as the hub's connection hands it over."""

    def __init__(self, origin: str, ask: RotateAsk) -> None:
        self.subject = rotate_subject(origin)
        self.data = ask.model_dump_json().encode()


class _Link:
    """The hub's admin connection: what it answered and published."""

    def __init__(self) -> None:
        self.answers: list[RotateAnswer | Refusal] = []
        self.published: list[str] = []

    async def respond(self, msg: object, data: bytes) -> None:
        self.answers.append(read_rotate_answer(data))

    async def put(self, subject: str, data: bytes) -> None:
        self.published.append(subject)


@pytest.fixture
def pushes(monkeypatch: pytest.MonkeyPatch) -> list[set[str]]:
    """Every account push the hub makes: the revoked keys it carried."""
    made: list[set[str]] = []

    async def push(deployment: Deployment, *, now: int, roster: bool = True) -> None:
        assert roster is False
        made.append(set(deployment.revoked))

    monkeypatch.setattr(upkeep, "push", push)
    return made


async def answer(deployment: Deployment, which: Step, card: str, signer: MachineKey, at: int,
                 *, now_ms: int = NOW_MS) -> tuple[str, _Link]:  # fmt: skip
    ask = ask_of(which, card, signer, at=at, deployment=deployment.account.public_key)
    link = _Link()
    outcome, _ = await rotation.answer_rotation(
        deployment.directory,
        link,  # type: ignore[arg-type]
        _Msg("buildbox", ask),  # type: ignore[arg-type]
        now_ms=now_ms,
    )
    return outcome, link


@pytest.mark.anyio
async def test_a_replaced_pending_key_is_revoked_on_the_servers_at_once(
    deployment: Deployment, pushes: list[set[str]]
) -> None:
    old, first, second = Machine(), Machine(), Machine()
    admitted(deployment, old)
    deployment.save(now=NOW_MS // 1000)
    # The first step alone revokes nothing: no push.
    outcome, link = await answer(deployment, ROTATE, first.card, old.key, NOW_MS)
    assert outcome == ROTATE
    assert isinstance(link.answers[0], RotateAnswer)
    assert pushes == []
    # Asked again with another card: the first pending key is revoked, and pushed (its JWT
    # was handed out, and would work on the servers until they hear of it).
    outcome, link = await answer(deployment, ROTATE, second.card, old.key, NOW_MS + 1)
    assert outcome == ROTATE
    assert len(pushes) == 1
    assert first.nats.public_key in pushes[0]
    assert link.published == []  # the roster did not change
    # Confirmed: the old key revoked and pushed, the roster published.
    outcome, link = await answer(deployment, CONFIRM, second.card, second.key, NOW_MS + 2)
    assert outcome == "rotated"
    assert old.nats.public_key in pushes[-1]
    assert link.published == [ROSTER_SUBJECT]


def test_apply_says_which_keys_an_ask_revoked(deployment: Deployment) -> None:
    old, first, second = Machine(), Machine(), Machine()
    admitted(deployment, old)
    deployment.save(now=NOW_MS // 1000)

    def apply(which: Step, card: str, signer: MachineKey, at: int) -> rotation.Applied:
        ask = ask_of(which, card, signer, at=at, deployment=deployment.account.public_key)
        return rotation.apply(deployment.directory, "buildbox", ask, NOW_MS)

    assert apply(ROTATE, first.card, old.key, NOW_MS).revoked == frozenset()
    assert apply(ROTATE, first.card, old.key, NOW_MS + 1).revoked == frozenset()
    replaced = apply(ROTATE, second.card, old.key, NOW_MS + 2)
    assert replaced.revoked == {first.nats.public_key}
    assert not replaced.confirmed
    confirmed = apply(CONFIRM, second.card, second.key, NOW_MS + 3)
    assert confirmed.revoked == {old.nats.public_key}
    assert confirmed.confirmed
    again = apply(CONFIRM, second.card, second.key, NOW_MS + 4)
    assert (again.revoked, again.confirmed) == (frozenset(), False)


def test_a_machine_gets_a_bounded_number_of_new_keys_a_window_even_across_restarts(
    deployment: Deployment,
) -> None:
    """Each new key the hub signs ends up revoked, and revocations stay in the account JWT
    for good: a machine asking again and again with fresh cards must not grow it without end."""
    old = Machine()
    admitted(deployment, old)
    cards = [Machine() for _ in range(ROTATE_KEYS_PER_WINDOW + 1)]
    for n, new in enumerate(cards[:-1]):
        step(deployment, ROTATE, new.card, old.key, at=NOW_MS + n)
    # The same card again costs nothing (a machine asking once more after a lost answer).
    step(deployment, ROTATE, cards[-2].card, old.key, at=NOW_MS + 10)
    deployment.save(now=NOW_MS // 1000)
    deployment = Deployment.open(deployment.directory)  # a hub started again keeps the count
    refused = Machine()
    with pytest.raises(RotationRefusedError) as caught:
        step(deployment, ROTATE, refused.card, old.key, at=NOW_MS + 20)
    assert caught.value.code == TOO_SOON
    # It says when the machine may try again: a window after the first key it was given.
    after = time.strftime("%Y-%m-%d %H:%M", time.gmtime(NOW_MS // 1000 + ROTATE_WINDOW_S))
    assert f"try again after {after} UTC (in {ROTATE_WINDOW_S // 60} min)" in str(caught.value)
    assert refused.nats.public_key not in deployment.revoked
    revoked_before = len(deployment.revoked)
    # A confirmation is never refused for it; and once the window has passed, a new key again.
    assert step(deployment, CONFIRM, cards[-2].card, cards[-2].key, at=NOW_MS + 30) is True
    later = NOW_MS + ROTATE_WINDOW_S * 1000
    ask = ask_of(ROTATE, refused.card, cards[-2].key, at=later,
                 deployment=deployment.account.public_key)  # fmt: skip
    assert isinstance(deployment.rotate("buildbox", ask, now_ms=later), str)
    assert len(deployment.revoked) == revoked_before + 1  # the old key, by the confirmation
    # What the file keeps is pruned to the window and to the machines still admitted.
    deployment.save(now=later // 1000)
    assert Deployment.open(deployment.directory).rotation_keys == {"buildbox": [later // 1000]}
    deployment.revoke("buildbox", now=later // 1000)
    deployment.save(now=later // 1000)
    assert Deployment.open(deployment.directory).rotation_keys == {}


@pytest.mark.anyio
@pytest.mark.parametrize("fault", ["lock", "no_deployment"])
async def test_a_fault_of_the_hub_is_answered_at_once_not_left_to_time_out(
    deployment: Deployment,
    pushes: list[set[str]],
    fault: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The deployment's lock held by another change (filelock.Timeout), or its files gone
    (DeploymentError): the machine hears ``hub_error`` now, not ``hub_unreachable`` later."""
    old, new = Machine(), Machine()
    admitted(deployment, old)
    deployment.save(now=NOW_MS // 1000)
    lock_path = str(deployment.directory / upkeep.LOCK_FILE)
    held = filelock.FileLock(lock_path, timeout=0)
    if fault == "lock":
        held.acquire()
        monkeypatch.setattr(upkeep, "lock", lambda d: filelock.FileLock(lock_path, timeout=0))
    else:
        (deployment.directory / "deployment.json").unlink()
    try:
        outcome, link = await answer(deployment, ROTATE, new.card, old.key, NOW_MS)
    finally:
        if fault == "lock":
            held.release()
    assert outcome == HUB_ERROR
    (refusal,) = link.answers
    assert isinstance(refusal, Refusal)
    assert refusal.refused == HUB_ERROR
    assert str(deployment.directory) not in refusal.detail  # nothing of the hub's paths
    assert ("busy" in refusal.detail) == (fault == "lock")
    assert "could not answer the rotation ask of buildbox" in caplog.text
    assert pushes == []


# -- the machine's side: one at a time, and what it says -----------------------------------------


@pytest.fixture
def here(tmp_path: Path) -> Locations:
    locations = environment.resolve(env={"PI_CODING_AGENT_DIR": str(tmp_path / "agent")})
    files.init_identity(locations, "buildbox")
    return locations


@pytest.mark.anyio
async def test_a_second_rotation_on_one_machine_is_told_another_runs(here: Locations) -> None:
    path = Path(files.remote_dir(here)) / rotation.ROTATION_LOCK_FILE
    with (
        filelock.FileLock(str(path), timeout=0),
        pytest.raises(rotation.RotateFailedError) as caught,
    ):
        await rotation.rotate(here)
    assert caught.value.code == rotation.BUSY
    assert "another 'pi-cross-session remote rotate' is running" in str(caught.value)
    assert files.rotation_identity(here, "buildbox") is None  # it began nothing
    # Once it is free, the next run goes on (here: to what a machine that joined nothing hears).
    with pytest.raises(rotation.RotateFailedError) as caught:
        await rotation.rotate(here)
    assert caught.value.code == rotation.NOT_JOINED


@pytest.mark.anyio
@pytest.mark.parametrize("which", [ROTATE, CONFIRM])
async def test_refused_credentials_are_said_in_one_clean_sentence(
    here: Locations, monkeypatch: pytest.MonkeyPatch, which: Step
) -> None:
    async def refuse(self: object) -> None:
        raise ConnectError(NatsProblem.AUTH, "tls://hub:4222", "Authorization Violation")

    monkeypatch.setattr(rotation.Link, "connect", refuse)
    joined = files.Joined(("tls://hub:4222",), DEPLOYMENT, "pi-xs")
    key = MachineKey.generate()
    ask = ask_of(which, card_of("buildbox", key, NKey.generate(Role.USER)), key)
    with pytest.raises(rotation.RotateFailedError) as caught:
        await rotation._request(here, joined, "buildbox", "creds", ask)
    text = str(caught.value)
    assert "  " not in text, text
    assert f"this machine's {'new ' if which == CONFIRM else ''}credentials (" in text, text


@pytest.mark.parametrize(
    ("code", "exit_code"),
    [
        (rotation.BAD_ANSWER, exits.EXIT_UNKNOWN),
        (HUB_ERROR, exits.EXIT_UNKNOWN),
        (rotation.HUB_UNREACHABLE, exits.EXIT_LOCAL),
        (rotation.BUSY, exits.EXIT_LOCAL),
        (TOO_SOON, exits.EXIT_REFUSED),
        (BAD_SIGNATURE, exits.EXIT_REFUSED),
    ],
)
def test_each_failure_exits_with_what_it_says_of_the_hub(
    here: Locations,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    code: str,
    exit_code: int,
) -> None:
    """1: nothing happened at the hub (or only here); 2: the hub refused; 3: what the hub did
    is not known here (its answer could not be used, or it failed): run it again to learn."""

    async def fails(locations: Locations, **kw: object) -> rotation.Rotated:
        raise rotation.RotateFailedError("why", code=code)

    monkeypatch.setattr(rotation, "rotate", fails)
    assert remote_rotate.run(argparse.Namespace(), Console()) == exit_code
    assert f"({code})" in capsys.readouterr().err
