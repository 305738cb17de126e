"""Two machines in two commands: ``remote hub`` on one, ``remote join LINE`` on the other, as a
person types them (real processes, a real nats-server started by the hub, TLS, credentials and
permissions), then a third machine by one more line, trusted everywhere without a ``trust``
command, a used line refused, and a revocation that reaches every gateway while it runs."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from pi_cross_session._internal.plugin.remote.natsd import free_port
from pi_cross_session._internal.security.remote.nats_jwt import NKey, Role
from tests.support.bounds import MUST_HAPPEN_S
from tests.support.hub_hosts import JOIN_LINE, Host, hub_hosts, join_words, wait_listed


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[dict[str, Host]]:
    with hub_hosts(tmp_path, "alpha", "beta", "gamma", "delta") as made:
        yield made


def test_two_machines_two_commands_then_a_third_and_a_revocation(hosts: dict[str, Host]) -> None:
    alpha, beta, gamma, delta = (hosts[n] for n in ("alpha", "beta", "gamma", "delta"))
    port = free_port()
    hub = alpha.start(
        "remote", "hub", "--machine", "alpha", "--host", "127.0.0.1",
        "--listen", f"127.0.0.1:{port}",
    )  # fmt: skip
    line = join_words(hub)
    assert line[0] == f"tls://127.0.0.1:{port}"
    hub.wait_line(r"gateway alpha ready", timeout=MUST_HAPPEN_S)

    # The second machine: one command. It trusts the hub's machine and the hub's trusts it,
    # without a 'remote trust' on either.
    joined_beta = beta.start("remote", "join", *line, "--machine", "beta")
    joined_beta.wait_line(r"joined as beta; the deployment has alpha", timeout=MUST_HAPPEN_S)
    joined_beta.wait_line(r"gateway beta ready: .*trusting alpha", timeout=MUST_HAPPEN_S)
    hub.wait_line(r"^admitted beta$", timeout=MUST_HAPPEN_S)
    hub.wait_line(r"trust changed: .*added beta", timeout=MUST_HAPPEN_S)
    beta.inbox("bob").wait_event("ready")
    wait_listed(alpha, "bob@beta")
    sent = alpha.cli("send", "bob@beta", "hello from alpha", "--wait", "10")
    assert sent.returncode == 0, sent
    assert "delivered" in sent.stdout, sent

    # The same line again: used up, refused by the server itself, and said so.
    again = delta.cli("remote", "join", *line, "--machine", "delta", "--no-gateway")
    assert again.returncode != 0
    assert "used already" in again.stderr, again

    # A third machine: one more line, and the running gateways take it at once.
    invited = alpha.cli("remote", "invite")
    assert invited.returncode == 0, invited
    match = JOIN_LINE.search(invited.stdout)
    assert match is not None, invited
    joined_gamma = gamma.start(
        "remote", "join", match.group(1), match.group(2), "--machine", "gamma"
    )
    joined_gamma.wait_line(r"gateway gamma ready: .*trusting alpha, beta", timeout=MUST_HAPPEN_S)
    joined_beta.wait_line(r"trust changed: .*added gamma", timeout=MUST_HAPPEN_S)
    wait_listed(gamma, "bob@beta")
    from_gamma = gamma.cli("send", "bob@beta", "hello from gamma", "--wait", "10")
    assert from_gamma.returncode == 0, from_gamma

    # Revoked: every gateway forgets gamma while running, and gamma's sends no longer arrive.
    revoked = alpha.cli("remote", "revoke", "gamma")
    assert revoked.returncode == 0, revoked
    assert "revoked gamma" in revoked.stdout
    joined_beta.wait_line(r"trust changed: .*removed gamma", timeout=MUST_HAPPEN_S)
    hub.wait_line(r"trust changed: .*removed gamma", timeout=MUST_HAPPEN_S)
    after = gamma.cli("send", "bob@beta", "after the revocation", "--wait", "5")
    assert after.returncode != 0, after


def test_a_line_with_another_deployment_key_is_refused(hosts: dict[str, Host]) -> None:
    """A line whose deployment key is not the server's: the server itself refuses the
    invitation (it signs for an account it does not know), and the person hears what to do."""
    alpha, beta = hosts["alpha"], hosts["beta"]
    port = free_port()
    hub = alpha.start(
        "remote", "hub", "--machine", "alpha", "--host", "127.0.0.1",
        "--listen", f"127.0.0.1:{port}", "--no-gateway",
    )  # fmt: skip
    servers, token = join_words(hub)
    prefix, _deployment, seed = token.split("-")
    other = NKey.generate(Role.ACCOUNT).public_key
    refused = beta.cli("remote", "join", servers, f"{prefix}-{other}-{seed}", "--no-gateway")
    assert refused.returncode != 0
    assert "refused the invitation" in refused.stderr, refused
    assert "remote invite" in refused.stderr


def test_a_gateway_pointed_at_a_hub_by_hand_hears_to_join_it(hosts: dict[str, Host]) -> None:
    """A hub's server opens with the TLS handshake (nothing in the clear for someone in the
    middle to edit): a gateway configured by hand, which does not, is told what to do."""
    alpha, beta = hosts["alpha"], hosts["beta"]
    port = free_port()
    hub = alpha.start(
        "remote", "hub", "--machine", "alpha", "--host", "127.0.0.1",
        "--listen", f"127.0.0.1:{port}", "--no-gateway",
    )  # fmt: skip
    join_words(hub)
    assert beta.cli("remote", "init", "--machine", "beta").returncode == 0
    ca = alpha.agent_dir / "cross-session" / "remote" / "hub" / "pki" / "ca.pem"
    by_hand = beta.start("gateway", "--nats", f"tls://127.0.0.1:{port}", "--tls-ca", str(ca))
    by_hand.wait_line(
        r"expects the TLS handshake first .*remote join.*without --nats",
        timeout=MUST_HAPPEN_S,
        stderr=True,
    )


def test_the_service_unit_runs_the_same_hub(hosts: dict[str, Host]) -> None:
    """``--write-service`` writes a unit whose command is this hub with every setting given
    (a restart from it keeps the record lifetime the bucket was made with)."""
    alpha = hosts["alpha"]
    unit = alpha.work / "pi-xs-hub.service"
    written = alpha.cli(
        "remote", "hub", "--host", "10.0.0.5", "--record-ttl", "6", "--no-gateway",
        "--write-service", str(unit),
    )  # fmt: skip
    assert written.returncode == 0, written
    (command,) = [line for line in unit.read_text().splitlines() if line.startswith("ExecStart=")]
    words = shlex.split(command.removeprefix("ExecStart="))
    assert words[1:5] == ["-m", "pi_cross_session", "remote", "hub"]
    assert words[words.index("--host") : words.index("--host") + 2] == ["--host", "10.0.0.5"]
    assert words[words.index("--record-ttl") + 1] == "6"
    assert "--no-gateway" in words
