"""Trust changes reach a running gateway within seconds, and the command says when they did:
``remote trust`` on a machine whose gateway runs lets the other machine's sessions in (and its
proxies appear) without a restart, ``untrust`` removes them, ``inbound`` turns delivery off, and
with no gateway running the command says it takes effect at the next start. A machine trusted
under a new key (it rotated its keys) is trusted under that key alone at once: what its old key
vouched for goes then, not when its records' TTL runs out."""

from __future__ import annotations

import time

from pi_cross_session._internal.plugin.remote import files
from pi_cross_session._internal.protocol.remote.settings import REMOTE_RECORD_TTL_S
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


def test_a_new_key_for_a_trusted_machine_replaces_the_old_one_at_once(fleet: Fleet) -> None:
    fleet.start_server()
    laptop, buildbox = fleet.pair("laptop", "buildbox")
    gateway = laptop.start_gateway()
    old_gateway = buildbox.start_gateway()
    buildbox.inbox("bob")
    laptop.wait_peer("bob@buildbox")
    # buildbox's gateway dies: its records, signed by its old key, stay in the bucket and are
    # laptop's for up to a TTL. buildbox gets new keys, and laptop trusts the new one.
    old_gateway.kill()
    identity = files.init_identity(buildbox.locations, "buildbox", replace=True)
    files.install_nats_jwt(buildbox.locations, fleet.admit(identity.card(), "buildbox"))
    changed = laptop.cli("remote", "trust", "buildbox", identity.key.public_text())
    assert "the running gateway took it" in changed.stdout, changed
    took = time.monotonic()
    gateway.wait_line(r"trust changed: .*new key for buildbox", timeout=MUST_HAPPEN_S)
    # What the old key vouched for goes at once: its records are re-read and none verifies.
    laptop.wait_peer("bob@buildbox", present=False, timeout=REMOTE_RECORD_TTL_S / 3)
    assert time.monotonic() - took < REMOTE_RECORD_TTL_S / 3
    # buildbox's gateway with its new keys: bob is back, and a message arrives, its receipt
    # verified with the new key.
    buildbox.start_gateway()
    laptop.wait_peer("bob@buildbox")
    sent = laptop.cli("send", "bob@buildbox", "to the new key", "--wait", "10")
    assert sent.returncode == 0, sent
    assert "delivered" in sent.stdout, sent
