"""``remote rotate`` as a person types it (docs/remote.md, "Rotating a machine's keys"): a hub, a
machine joined to it with its gateway running, then the machine's keys replaced while everything
runs. Its gateway starts again with the new keys, the hub's gateway takes the new identity key
from the roster, messages go both ways, the old identity key's ask is refused and the server
refuses the old NATS credentials; the hub's own machine rotates the same way. With the hub
stopped, a rotation changes nothing and says so; a rotation whose last answer was lost is
finished by running it again; a machine set up by hand is told what to do instead.

Real processes on 127.0.0.1: a nats-server started by the hub, TLS, credentials, permissions.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pi_cross_session._internal.plugin.remote import files
from pi_cross_session._internal.plugin.remote.link import NatsProblem
from pi_cross_session._internal.plugin.remote.natsd import free_port
from pi_cross_session._internal.protocol.io import environment
from pi_cross_session._internal.protocol.remote.join import Refusal
from pi_cross_session._internal.protocol.remote.rotate import ROTATE, RotateAsk, signed_bytes
from tests.support.bounds import MUST_HAPPEN_S
from tests.support.hub_hosts import HubHost, hub_hosts, join_words, wait_listed
from tests.support.key_rotation import credentials_refusal, hub_answer, wait_printed

#: A machine's key files, as ``remote rotate`` replaces them.
KEY_FILES = ("machine.key", "machine.json", "nats-user.nk", "nats-user.jwt")


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[dict[str, HubHost]]:
    with hub_hosts(tmp_path, "alpha", "beta", "gamma") as made:
        yield made


def card_of(host: HubHost) -> str:
    shown = host.cli("remote", "show")
    assert shown.returncode == 0, shown
    return shown.stdout.splitlines()[0]


def test_a_joined_machine_rotates_its_keys_while_everything_runs(
    hosts: dict[str, HubHost],
) -> None:
    alpha, beta = hosts["alpha"], hosts["beta"]
    port = free_port()
    url = f"tls://127.0.0.1:{port}"
    hub = alpha.start(
        "remote", "hub", "--machine", "alpha", "--host", "127.0.0.1",
        "--listen", f"127.0.0.1:{port}",
    )  # fmt: skip
    line = join_words(hub)
    hub.wait_line(r"gateway alpha ready", timeout=MUST_HAPPEN_S)
    joined = beta.start("remote", "join", *line, "--machine", "beta")
    joined.wait_line(r"gateway beta ready: .*trusting alpha", timeout=MUST_HAPPEN_S)
    beta.inbox("bob").wait_event("ready")
    alpha.inbox("ann").wait_event("ready")
    wait_listed(alpha, "bob@beta")
    wait_listed(beta, "ann@alpha")

    beta_files = environment.resolve(env={"PI_CODING_AGENT_DIR": str(beta.agent_dir)})
    old_card = card_of(beta)
    old_creds = files.load_nats_credentials(beta_files)
    assert old_creds is not None
    old_key = files.load_identity(beta_files).key

    rotated = beta.cli("remote", "rotate")
    assert rotated.returncode == 0, rotated
    new_card = card_of(beta)
    assert new_card.split()[0] == "beta"
    assert set(new_card.split()[1:]).isdisjoint(old_card.split()[1:]), (old_card, new_card)
    assert f"is now {new_card.split()[1]}" in rotated.stdout, rotated
    # The running gateway here started again with the new keys, and said so.
    assert "the running gateway started again with the new keys" in rotated.stdout, rotated
    joined.wait_line(r"gateway beta starting again \(SIGHUP\)", timeout=MUST_HAPPEN_S)
    wait_printed(joined, r"gateway beta ready", 2, timeout=MUST_HAPPEN_S)
    # The hub rotated it, and its own gateway takes beta's new identity key from the roster.
    hub.wait_line(r"^rotated the keys of beta$", timeout=MUST_HAPPEN_S)
    hub.wait_line(r"trust changed: .*new key for beta", timeout=MUST_HAPPEN_S)
    assert not (beta.agent_dir / "cross-session" / "remote" / "rotation").exists()

    # Messages go both ways, signed with the new key and verified with it.
    wait_listed(alpha, "bob@beta")
    sent = alpha.cli("send", "bob@beta", "hello after the rotation", "--wait", "10")
    assert sent.returncode == 0, sent
    assert "delivered" in sent.stdout, sent
    back = beta.cli("send", "ann@alpha", "and back", "--wait", "10")
    assert back.returncode == 0, back
    assert "delivered" in back.stdout, back

    # The hub's own machine rotates the same way: the hub answers it, and the gateway the hub
    # runs starts again with the new keys while the hub goes on answering.
    alpha_card = card_of(alpha)
    hub_rotated = alpha.cli("remote", "rotate")
    assert hub_rotated.returncode == 0, hub_rotated
    assert "the running gateway started again with the new keys" in hub_rotated.stdout
    assert card_of(alpha) != alpha_card
    hub.wait_line(r"^rotated the keys of alpha$", timeout=MUST_HAPPEN_S)
    joined.wait_line(r"trust changed: .*new key for alpha", timeout=MUST_HAPPEN_S)
    wait_printed(hub, r"gateway alpha ready", 2, timeout=MUST_HAPPEN_S)
    wait_listed(beta, "ann@alpha")
    again = beta.cli("send", "ann@alpha", "to the hub's new keys", "--wait", "10")
    assert again.returncode == 0, again
    assert "delivered" in again.stdout, again

    # The server refuses the old NATS credentials, and takes the new ones.
    ca = Path(files.ca_path(beta_files))
    assert credentials_refusal(url, ca, old_creds, "beta") is NatsProblem.AUTH
    new_creds = files.load_nats_credentials(beta_files)
    assert new_creds is not None
    assert credentials_refusal(url, ca, new_creds, "beta") is None

    # The old identity key no longer speaks for beta: an ask it signs is refused, with a code.
    deployment, at = line[1].split("-")[1], time.time_ns() // 1_000_000
    forged = RotateAsk(
        ask=ROTATE,
        deployment=deployment,
        card=new_card,
        at=at,
        signature=base64.b64encode(
            old_key.sign(signed_bytes(ROTATE, deployment, new_card, at))
        ).decode(),
    )
    refusal = hub_answer(url, ca, new_creds, "beta", forged)
    assert isinstance(refusal, Refusal), refusal
    assert refusal.refused == "bad_signature", refusal

    # With the hub stopped, a rotation changes nothing here and says that no hub answered.
    hub.process.terminate()
    hub.process.wait(timeout=MUST_HAPPEN_S)
    refused = beta.cli("remote", "rotate")
    assert refused.returncode == 1, refused
    assert "no hub answered (hub_unreachable)" in refused.stderr, refused
    assert "run 'pi-cross-session remote rotate' again" in refused.stderr, refused
    assert card_of(beta) == new_card


def test_a_machine_set_up_by_hand_hears_what_to_do_instead(hosts: dict[str, HubHost]) -> None:
    gamma = hosts["gamma"]
    assert gamma.cli("remote", "init", "--machine", "gamma").returncode == 0
    card = card_of(gamma)
    refused = gamma.cli("remote", "rotate")
    assert refused.returncode == 1, refused
    assert "joined no deployment" in refused.stderr, refused
    assert "remote init --replace" in refused.stderr, refused
    assert "remote deploy --out DIR --machine CARD --push URL" in refused.stderr, refused
    assert card_of(gamma) == card


def test_a_rotation_whose_last_answer_was_lost_is_finished_by_running_it_again(
    hosts: dict[str, HubHost],
) -> None:
    """The hub confirmed (the old NATS key is revoked) but the answer never arrived: the machine
    still has its old keys in place, now useless, and the new set in ``rotation/`` without the
    hub's roster. ``remote rotate`` again confirms once more; the hub, which took it already,
    answers again, and the new set is put in place."""
    alpha, beta = hosts["alpha"], hosts["beta"]
    port = free_port()
    url = f"tls://127.0.0.1:{port}"
    hub = alpha.start(
        "remote", "hub", "--machine", "alpha", "--host", "127.0.0.1",
        "--listen", f"127.0.0.1:{port}", "--no-gateway",
    )  # fmt: skip
    line = join_words(hub)
    assert beta.cli("remote", "join", *line, "--machine", "beta", "--no-gateway").returncode == 0
    remote = beta.agent_dir / "cross-session" / "remote"
    before = {name: (remote / name).read_bytes() for name in KEY_FILES}
    assert beta.cli("remote", "rotate").returncode == 0
    after = {name: (remote / name).read_bytes() for name in KEY_FILES}
    # As the machine was when the confirmation's answer was lost: the old set in place, the new
    # one (keys and JWT) in rotation/, no roster and no mark of a confirmation there.
    (remote / "rotation").mkdir(mode=0o700)
    for name in ("machine.key", "nats-user.nk", "nats-user.jwt"):
        (remote / "rotation" / name).write_bytes(after[name])
        (remote / "rotation" / name).chmod(0o600)
    for name, data in before.items():
        (remote / name).write_bytes(data)
    beta_files = environment.resolve(env={"PI_CODING_AGENT_DIR": str(beta.agent_dir)})
    old_creds = files.load_nats_credentials(beta_files)
    assert old_creds is not None
    ca = Path(files.ca_path(beta_files))
    assert credentials_refusal(url, ca, old_creds, "beta") is NatsProblem.AUTH

    again = beta.cli("remote", "rotate")
    assert again.returncode == 0, again
    assert "finished the key rotation begun earlier" in again.stdout, again
    assert {name: (remote / name).read_bytes() for name in KEY_FILES} == after
    assert not (remote / "rotation").exists()
