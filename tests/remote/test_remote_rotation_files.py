"""A key rotation's files on the machine (plugin/remote/files.py): wherever it is cut short, the
machine has a set of keys the deployment takes — the old one until the hub confirmed, the new one
after — and the next load or ``remote rotate`` goes on from there."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

import pytest

from pi_cross_session._internal.cli import words
from pi_cross_session._internal.plugin.remote import files, rotation
from pi_cross_session._internal.plugin.remote.deployment import (
    Deployment,
    DeploymentError,
    MachineCard,
)
from pi_cross_session._internal.protocol.io import environment
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.remote.rotate import (
    CONFIRM,
    ROTATE,
    RotateAsk,
    Step,
    signed_bytes,
)
from pi_cross_session._internal.security.remote import nats_jwt
from pi_cross_session._internal.security.remote.identity import MachineKey
from pi_cross_session._internal.security.remote.nats_jwt import NKey, Role

ACCOUNT = NKey.generate(Role.ACCOUNT)
KEY_FILES = ("machine.key", "machine.json", "nats-user.nk", "nats-user.jwt")
NOW_MS = 1_700_000_000_000


@pytest.fixture
def here(tmp_path: Path) -> Locations:
    locations = environment.resolve(env={"PI_CODING_AGENT_DIR": str(tmp_path / "agent")})
    identity = files.init_identity(locations, "buildbox")
    files.install_nats_jwt(locations, jwt_for(identity))
    return locations


def jwt_for(identity: files.Identity) -> str:
    return nats_jwt.user_jwt(
        ACCOUNT, identity.nats.public_key, name=identity.machine, issued_at=1, permissions=None
    )


def key_files(locations: Locations) -> dict[str, bytes]:
    remote = Path(files.remote_dir(locations))
    return {name: (remote / name).read_bytes() for name in KEY_FILES}


def test_until_confirmed_the_current_set_stays_in_place_and_in_use(here: Locations) -> None:
    before = key_files(here)
    old = files.load_identity(here)
    new = files.begin_rotation(here, "buildbox")
    assert files.rotation_credentials(here, new) is None
    files.save_rotation_jwt(here, jwt_for(new))
    # Cut short here: the current set is untouched, and loads as before.
    assert key_files(here) == before
    assert files.load_identity(here).key.public_key == old.key.public_key
    # The new set is kept for the next 'remote rotate', private.
    kept = files.rotation_identity(here, "buildbox")
    assert kept is not None
    assert kept.key.public_key == new.key.public_key
    assert kept.nats.public_key == new.nats.public_key
    creds = files.rotation_credentials(here, new)
    assert creds is not None
    assert new.nats.seed in creds
    directory = Path(files.rotation_dir(here))
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
    for path in directory.iterdir():
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path


def test_once_confirmed_the_new_set_replaces_the_old_and_the_rotation_is_forgotten(
    here: Locations,
) -> None:
    new = files.begin_rotation(here, "buildbox")
    files.save_rotation_jwt(here, jwt_for(new))
    files.finish_rotation(here, b"the roster")
    loaded = files.load_identity(here)
    assert loaded.machine == "buildbox"
    assert loaded.key.public_key == new.key.public_key
    assert loaded.nats.public_key == new.nats.public_key
    assert new.key.public_text() in (Path(files.remote_dir(here)) / "machine.json").read_text()
    creds = files.load_nats_credentials(here)
    assert creds is not None
    assert jwt_for(new) in creds
    assert files.load_roster(here, 1024) == b"the roster"
    assert not os.path.exists(files.rotation_dir(here))


def test_a_confirmed_rotation_cut_short_mid_copy_is_finished_by_the_next_load(
    here: Locations,
) -> None:
    new = files.begin_rotation(here, "buildbox")
    files.save_rotation_jwt(here, jwt_for(new))
    rotation = Path(files.rotation_dir(here))
    remote = Path(files.remote_dir(here))
    # The hub confirmed; the mark is written, and only the key was copied before the crash.
    (rotation / "roster.bin").write_bytes(b"the roster")
    (rotation / "confirmed").write_bytes(b"confirmed\n")
    for path in rotation.iterdir():
        path.chmod(0o600)
    (remote / "machine.key").write_bytes((rotation / "machine.key").read_bytes())
    loaded = files.load_identity(here)
    assert loaded.key.public_key == new.key.public_key
    assert loaded.nats.public_key == new.nats.public_key
    creds = files.load_nats_credentials(here)
    assert creds is not None
    assert jwt_for(new) in creds
    assert not rotation.exists()


def test_a_new_identity_forgets_a_rotation_under_way(here: Locations) -> None:
    files.begin_rotation(here, "buildbox")
    files.init_identity(here, "buildbox", replace=True)
    assert files.rotation_identity(here, "buildbox") is None
    assert not os.path.exists(files.rotation_dir(here))


# -- the hub's own machine, when the hub starts (cli/remote_hub.py, run_hub) ---------------------


def _ask(step: Step, deployment: Deployment, card: str, signer: MachineKey, at: int) -> RotateAsk:
    signature = signer.sign(signed_bytes(step, deployment.account.public_key, card, at))
    return RotateAsk(
        ask=step,
        deployment=deployment.account.public_key,
        card=card,
        at=at,
        signature=base64.b64encode(signature).decode(),
    )


@pytest.fixture
def hub_deployment(here: Locations, tmp_path: Path) -> Deployment:
    """The deployment of the hub this machine runs, which admitted it."""
    deployment = Deployment.open(tmp_path / "hub", create=True)
    deployment.admit(MachineCard.parse(files.load_identity(here).card()), now=NOW_MS // 1000)
    deployment.save(now=NOW_MS // 1000)
    return deployment


def _rotate_at_hub(here: Locations, deployment: Deployment, *, confirm: bool) -> files.Identity:
    """This machine asks its hub to rotate its keys (and confirms), as ``remote rotate`` does,
    the answer to its confirmation lost: ``rotation/`` has the new keys and their JWT, and no
    ``confirmed`` mark."""
    old = files.load_identity(here)
    new = files.begin_rotation(here, old.machine)
    jwt = deployment.rotate("buildbox", _ask(ROTATE, deployment, new.card(), old.key, NOW_MS),
                            now_ms=NOW_MS)  # fmt: skip
    files.save_rotation_jwt(here, jwt)
    if confirm:
        ask = _ask(CONFIRM, deployment, new.card(), new.key, NOW_MS + 1)
        assert deployment.confirm_rotation("buildbox", ask, now_ms=NOW_MS + 1)
    deployment.save(now=NOW_MS // 1000)
    return new


def test_the_hub_finishes_a_rotation_of_its_own_machine_it_confirmed_unheard(
    here: Locations, hub_deployment: Deployment
) -> None:
    old = files.load_identity(here)
    new = _rotate_at_hub(here, hub_deployment, confirm=True)
    # What 'remote hub' met before: the old card admitted again, its key revoked.
    with pytest.raises(DeploymentError):
        Deployment.open(hub_deployment.directory).admit(
            MachineCard.parse(old.card()), now=NOW_MS // 1000
        )
    deployment = Deployment.open(hub_deployment.directory)
    assert rotation.own_rotation_confirmed(deployment, files.rotation_identity(here, "buildbox"))
    settled = rotation.settle_own_keys(here, deployment, old, now=NOW_MS // 1000)
    assert settled.key.public_key == new.key.public_key
    loaded = files.load_identity(here)
    assert (loaded.key.public_key, loaded.nats.public_key) == (
        new.key.public_key,
        new.nats.public_key,
    )
    creds = files.load_nats_credentials(here)
    assert creds is not None
    assert nats_jwt.decode(creds.split("\n")[1]).subject == new.nats.public_key
    assert not os.path.exists(files.rotation_dir(here))
    assert deployment.machines["buildbox"] == MachineCard.parse(new.card())


def test_the_hub_keeps_its_machines_old_keys_while_their_rotation_is_pending(
    here: Locations, hub_deployment: Deployment
) -> None:
    old = files.load_identity(here)
    new = _rotate_at_hub(here, hub_deployment, confirm=False)
    deployment = Deployment.open(hub_deployment.directory)
    assert not rotation.own_rotation_confirmed(deployment, new)
    assert not rotation.own_rotation_confirmed(deployment, None)
    settled = rotation.settle_own_keys(here, deployment, old, now=NOW_MS // 1000)
    assert settled.key.public_key == old.key.public_key
    assert deployment.machines["buildbox"] == MachineCard.parse(old.card())
    assert deployment.rotating["buildbox"].card == MachineCard.parse(new.card())
    assert files.rotation_identity(here, "buildbox") is not None  # 'remote rotate' goes on


def test_keys_revoked_with_nothing_to_finish_are_refused(
    here: Locations, hub_deployment: Deployment
) -> None:
    old = files.load_identity(here)
    _rotate_at_hub(here, hub_deployment, confirm=True)
    files.discard_rotation(here)  # the new keys lost
    deployment = Deployment.open(hub_deployment.directory)
    with pytest.raises(DeploymentError):
        rotation.settle_own_keys(here, deployment, old, now=NOW_MS // 1000)
    said = words.hub_machine_keys_revoked("buildbox", "the NATS key of buildbox was revoked")
    assert "remote init --replace" in said
    assert "rotation/" in said
