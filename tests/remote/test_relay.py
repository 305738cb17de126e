"""Two machines, two gateways, one real NATS server: sessions message each other through proxies
without knowing the peer is remote (docs/remote.md)."""

from __future__ import annotations

import json
import time

from pi_cross_session._internal.cli import exits
from tests.support.bounds import MUST_HAPPEN_S
from tests.support.remote import Fleet


def test_a_session_sends_to_a_session_on_another_machine_and_gets_its_receipt(
    fleet: Fleet,
) -> None:
    fleet.start_server()
    laptop, buildbox = fleet.pair("laptop", "buildbox")
    bob = buildbox.inbox("bob")
    alice = laptop.inbox("alice")
    laptop.start_gateway()
    buildbox.start_gateway()
    laptop.wait_peer("bob@buildbox", listing=True)
    buildbox.wait_peer("alice@laptop", listing=True)

    # A plain send on laptop, to the proxy: the ordinary exchange, the real receipt.
    sent = laptop.cli("send", "bob@buildbox", "hello from the laptop", "--json")
    assert sent.returncode == exits.EXIT_OK, sent
    report = sent.json()
    assert report["status"] == "submitted"
    message = bob.wait_event("message", messageId=report["messageId"])
    assert message["text"] == "hello from the laptop"
    # The receiving session sees a sender marked by its machine, never a local name.
    assert message["sender"]["name"] == "pi-cross-session-cli@laptop", message
    assert message["sender"]["sessionId"].endswith("@laptop"), message

    # A status query travels the same way and finds the row, asked as the same sender.
    status = laptop.cli("status", "bob@buildbox", report["messageId"], "--json")
    assert status.json()["status"] in {"submitted", "delivered"}, status

    # The other way round, from a session that never heard of laptop.
    back = buildbox.cli("send", "alice@laptop", "hello back", "--json")
    assert back.returncode == exits.EXIT_OK, back
    alice.wait_event("message", messageId=back.json()["messageId"])


def test_a_proxy_registration_looks_local_and_names_its_machine(fleet: Fleet) -> None:
    laptop, buildbox, gateway, proxy = fleet.bob_behind_a_proxy()
    assert proxy["pid"] == gateway.pid
    assert proxy["cwd"].startswith("buildbox:")
    assert proxy["id"].endswith("@buildbox")
    assert proxy["remote"] == {"machine": "buildbox", "via": "gateway"}
    assert proxy["socketPath"] == laptop.locations.socket_path(proxy["instanceId"])
    # Nothing secret of buildbox crossed: the proxy's token is laptop's own.
    real = next(r for r in buildbox.registrations() if r["name"] == "bob")
    assert proxy["token"] != real["token"]
    assert proxy["instanceId"] != real["instanceId"]
    # The gateway's snapshot for ``peers --remote`` follows within a second or so.
    deadline = time.monotonic() + MUST_HAPPEN_S
    while True:
        remote = laptop.cli("peers", "--remote", "--json").json()
        if remote["peers"] or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert remote["gateway"] is True
    (seen,) = remote["peers"]
    assert (seen["machine"], seen["name"]) == ("buildbox", "bob")
    assert "token" not in json.dumps(remote)


def test_a_refresh_that_changes_nothing_leaves_the_proxy_file_alone(fleet: Fleet) -> None:
    # At the shortest record TTL a record is put again every 2 s and the mirror forgets one not
    # refreshed for 6 s: a proxy still there after 7 s has seen several refreshes.
    fleet.start_server()
    laptop, buildbox = fleet.pair("laptop", "buildbox")
    buildbox.inbox("bob")
    laptop.start_gateway("--record-ttl", "6")
    buildbox.start_gateway("--record-ttl", "6")
    laptop.wait_peer("bob@buildbox")
    proxy = next(r for r in laptop.registrations() if r["name"] == "bob@buildbox")
    path = laptop.agent_dir / "peers" / f"{proxy['instanceId']}.json"
    before = path.stat()
    time.sleep(7.0)
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
