"""Setting a machine up from the command line, and TLS to the NATS server with the private CA
``remote pki`` writes (docs/remote.md, "Machine identity and trust")."""

from __future__ import annotations

import stat
from pathlib import Path

from pi_cross_session._internal.cli import exits
from pi_cross_session._internal.plugin.remote.natsd import TlsFiles
from tests.support.remote import Fleet


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_remote_commands_make_a_private_identity_and_an_allow_list(fleet: Fleet) -> None:
    machine = fleet.machine("first")
    other = fleet.machine("second")
    again = machine.cli("remote", "init", "--machine", "first")
    assert again.returncode == 0, again
    assert again.stdout.split() == machine.card.split()  # kept, not replaced
    assert machine.card.split()[:2] == ["first", machine.public_key]
    renamed = machine.cli("remote", "init", "--machine", "renamed")
    assert renamed.returncode == exits.EXIT_LOCAL, renamed
    bad = machine.cli("remote", "init", "--machine", "Not_A_Name")
    assert bad.returncode == exits.EXIT_LOCAL, bad
    trusted = machine.cli("remote", "trust", "second", other.public_key)
    assert trusted.returncode == 0, trusted
    forged = machine.cli("remote", "trust", "third", "ed25519:AAAA")
    assert forged.returncode == exits.EXIT_LOCAL, forged
    shown = machine.cli("remote", "show", "--json").json()
    assert shown == {
        "machine": "first",
        "publicKey": machine.public_key,
        "natsKey": machine.card.split()[2].removeprefix("nats:"),
        "card": machine.card,
        "account": "pi-xs",
        "inbound": "on",
        "trusted": ["second"],
    }
    assert machine.cli("remote", "inbound", "off").returncode == 0
    assert machine.cli("remote", "show", "--json").json()["inbound"] == "off"
    remote_dir = machine.agent_dir / "cross-session" / "remote"
    assert _mode(remote_dir) == 0o700
    for name in ("machine.key", "machine.json", "trust.json", "nats-user.nk", "nats-user.jwt"):
        assert _mode(remote_dir / name) == 0o600
    # A key file others could read is refused, never used.
    (remote_dir / "machine.key").chmod(0o644)
    refused = machine.cli("remote", "show")
    assert refused.returncode == exits.EXIT_LOCAL, refused
    assert "remote init" in refused.stderr


def test_gateways_reach_a_tls_server_through_the_private_ca(fleet: Fleet, tmp_path: Path) -> None:
    laptop, buildbox = fleet.pair("laptop", "buildbox")
    pki_dir = tmp_path / "pki"
    made = laptop.cli("remote", "pki", "--out", str(pki_dir), "--host", "127.0.0.1")
    assert made.returncode == 0, made
    for name in ("ca-key.pem", "server-key.pem", "client-key.pem"):
        assert _mode(pki_dir / name) == 0o600
    fleet.start_server(
        tls=TlsFiles(
            cert=str(pki_dir / "server.pem"),
            key=str(pki_dir / "server-key.pem"),
            ca=str(pki_dir / "ca.pem"),
            verify_clients=True,
        ),
        client_cert=(str(pki_dir / "client.pem"), str(pki_dir / "client-key.pem")),
    )
    assert fleet.url.startswith("tls://")
    bob = buildbox.inbox("bob")
    client = (
        "--tls-cert",
        str(pki_dir / "client.pem"),
        "--tls-key",
        str(pki_dir / "client-key.pem"),
    )
    ca = ("--tls-ca", str(pki_dir / "ca.pem"))
    laptop.start_gateway(*ca, *client)
    buildbox.start_gateway(*ca, *client)
    laptop.wait_peer("bob@buildbox")
    sent = laptop.cli("send", "bob@buildbox", "over TLS", "--json")
    assert sent.returncode == 0, sent
    bob.wait_event("message", messageId=sent.json()["messageId"])
    # One gateway per agent dir: a second one is refused before it connects anywhere.
    second = buildbox.cli("gateway", "--nats", fleet.url, *ca, *client, timeout=60)
    assert second.returncode == exits.EXIT_LOCAL, second
    assert "another gateway already serves this agent dir" in second.stderr
    # Without the CA the server's certificate is not trusted: the gateway does not start, says
    # so with the fix, and tries again (test_gateway_says.py has the other failures).
    stranger = fleet.machine("stranger").spawn_gateway(fleet.url)
    said = stranger.wait_line("TLS to NATS", stderr=True).string
    assert "--tls-ca" in said, said
    assert "retrying in" in said, said
    assert not any("ready" in line for line in stranger.lines), stranger.output()
