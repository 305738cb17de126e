"""Trust changes reach a running gateway within seconds, and the command says when they did:
``remote trust`` on a machine whose gateway runs lets the other machine's sessions in (and its
proxies appear) without a restart, ``untrust`` removes them, ``inbound`` turns delivery off, and
with no gateway running the command says it takes effect at the next start."""

from __future__ import annotations

from tests.support.bounds import MUST_HAPPEN_S
from tests.support.remote import Fleet


def test_trust_untrust_and_inbound_reach_a_running_gateway(fleet: Fleet) -> None:
    fleet.start_server()
    laptop, buildbox = fleet.machine("laptop"), fleet.machine("buildbox")
    buildbox.trust(laptop)
    quiet = laptop.cli("remote", "trust", buildbox.name, buildbox.public_key)
    assert "no gateway runs here" in quiet.stdout, quiet
    laptop.cli("remote", "untrust", buildbox.name)
    gateway = laptop.start_gateway()
    buildbox.start_gateway()
    buildbox.inbox("bob")

    trusted = laptop.cli("remote", "trust", buildbox.name, buildbox.public_key)
    assert trusted.returncode == 0, trusted
    assert "the running gateway took it" in trusted.stdout, trusted
    gateway.wait_line(r"trust changed: .*added buildbox", timeout=MUST_HAPPEN_S)
    laptop.wait_peer("bob@buildbox")

    untrusted = laptop.cli("remote", "untrust", buildbox.name)
    assert "the running gateway took it" in untrusted.stdout, untrusted
    gateway.wait_line(r"trust changed: .*removed buildbox", timeout=MUST_HAPPEN_S)
    laptop.wait_peer("bob@buildbox", present=False)

    off = laptop.cli("remote", "inbound", "off")
    assert "the running gateway took it" in off.stdout, off
    gateway.wait_line(r"trust changed: .*remote inbound off", timeout=MUST_HAPPEN_S)
