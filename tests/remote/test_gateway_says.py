"""A gateway says what is wrong at the default verbosity (docs/remote.md, "When something is
wrong"): one line per failure, with its fix and when it tries again, never a silent loop.

Every gateway here is started as a person starts it (no ``-v``) against a real nats-server that
lacks something: JetStream, a listener on the port, the CA the gateway was given, this machine's
credentials.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pi_cross_session._internal.plugin.remote import pki
from pi_cross_session._internal.plugin.remote.natsd import TlsFiles, free_port
from tests.support.bounds import MUST_HAPPEN_S
from tests.support.remote import READY_LINE, Fleet, GatewayProcess, fleet_at


@pytest.fixture
def open_fleet(tmp_path: Path) -> Iterator[Fleet]:
    with fleet_at(tmp_path / "fleet", open_deployment=True) as made:
        yield made


def test_a_server_without_jetstream_is_named_at_once_with_what_to_add(open_fleet: Fleet) -> None:
    server = open_fleet.server(jetstream=False).start()
    laptop = open_fleet.machine("laptop")
    gateway = laptop.spawn_gateway(server.url)
    said = gateway.wait_line("no JetStream", stderr=True).string
    assert server.url in said, said
    assert "jetstream {}" in said, said
    assert "-js" in said, said
    assert "remote hub" in said, said
    assert re.search(r"checking again every \d+ s", said), said
    # It says so before it calls itself ready, not after a silent wait for a leader.
    gateway.wait_line(READY_LINE)
    assert not any("JetStream not ready" in line for line in gateway.err_lines), gateway.output()


def test_an_unreachable_server_is_named_with_its_url_and_tried_again_on_a_schedule(
    open_fleet: Fleet,
) -> None:
    port = free_port()
    url = f"nats://127.0.0.1:{port}"
    laptop = open_fleet.machine("laptop")
    gateway = laptop.spawn_gateway(url)
    first = gateway.wait_line(r"cannot reach NATS", stderr=True).string
    assert url in first, first
    assert "retrying in 1 s" in first, first
    gateway.wait_line(rf"cannot reach NATS at {re.escape(url)}.*retrying in 2 s", stderr=True)
    # The server comes up where it was looked for: the gateway connects by itself.
    open_fleet.server(port=port).start()
    gateway.wait_line(READY_LINE)


def test_a_server_certificate_from_another_ca_is_a_tls_refusal_with_its_fix(
    open_fleet: Fleet, tmp_path: Path
) -> None:
    pki.create(str(tmp_path / "ours"), ["127.0.0.1"])
    pki.create(str(tmp_path / "theirs"), ["127.0.0.1"])
    ours = tmp_path / "ours"
    server = open_fleet.server(
        tls=TlsFiles(cert=str(ours / "server.pem"), key=str(ours / "server-key.pem"))
    ).start()
    laptop = open_fleet.machine("laptop")
    wrong_ca = laptop.spawn_gateway(server.url, args=("--tls-ca", str(tmp_path / "theirs/ca.pem")))
    said = wrong_ca.wait_line("TLS", stderr=True).string
    assert server.url in said, said
    assert "certificate" in said, said
    assert "--tls-ca" in said, said
    assert "retrying in 1 s" in said, said
    wrong_ca.stop()

    plain = open_fleet.server().start()
    told_tls = laptop.spawn_gateway(
        plain.url.replace("nats://", "tls://"), args=("--tls-ca", str(ours / "ca.pem"))
    )
    said = told_tls.wait_line("TLS", stderr=True).string
    assert "does not use TLS" in said, said
    assert "retrying in 1 s" in said, said


def test_credentials_the_server_refuses_are_named_with_how_to_get_good_ones(fleet: Fleet) -> None:
    fleet.start_server()
    laptop = fleet.machine("laptop")
    (laptop.agent_dir / "cross-session" / "remote" / "nats-user.jwt").unlink()
    gateway = laptop.spawn_gateway(fleet.url)
    said = gateway.wait_line("credentials", stderr=True).string
    assert fleet.url in said, said
    assert "remote credentials" in said, said
    assert "retrying in 1 s" in said, said


def test_sighup_while_it_cannot_connect_neither_ends_it_nor_keeps_it_from_stopping(
    open_fleet: Fleet,
) -> None:
    """SIGHUP (what ``remote rotate`` sends) before the gateway ever connected: it starts the
    connecting again from the files, where Python's default would have ended the process (rc
    129, skipping every clean-up: under ``remote hub``, the NATS server left running alone)."""
    url = f"nats://127.0.0.1:{free_port()}"
    laptop = open_fleet.machine("laptop")
    gateway = laptop.spawn_gateway(url)
    gateway.wait_line(r"cannot reach NATS", stderr=True)
    gateway.process.send_signal(signal.SIGHUP)
    gateway.wait_line(r"gateway laptop starting again \(SIGHUP\)")
    # It goes on trying, from the first delay again.
    wait_count(gateway, r"cannot reach NATS.*retrying in 1 s", 2)
    gateway.process.send_signal(signal.SIGHUP)
    wait_count(gateway, r"starting again \(SIGHUP\)", 2, stdout=True)
    assert gateway.process.poll() is None, gateway.output()
    assert gateway.stop(signal.SIGTERM) == 0, gateway.output()
    assert "gateway laptop stopped" in gateway.output()


def wait_count(gateway: GatewayProcess, pattern: str, count: int, *, stdout: bool = False) -> None:
    lines = gateway.lines if stdout else gateway.err_lines
    deadline = time.monotonic() + MUST_HAPPEN_S
    while sum(1 for line in list(lines) if re.search(pattern, line)) < count:
        assert time.monotonic() < deadline, gateway.output()
        assert gateway.process.poll() is None, gateway.output()
        time.sleep(0.05)
