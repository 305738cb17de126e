"""The five attacks on the remote plane that once succeeded, each tried again over a real
nats-server (docs/security.md, "The remote plane"): a delete nobody signed, a captured record
written back, the bucket deleted or shrunk, a request subject's queue hijacked, costly junk parsed
before its origin was known, and one machine taking every proxy slot.

Most are tried on a server **without permissions** (someone else's NATS, where any client may
publish anything): what holds there is our second wall, the signatures, sequences and checks of
the gateways. The permission rows themselves, NATS's first wall, are ``test_permissions.py``.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from pi_cross_session._internal.cli import exits
from pi_cross_session._internal.plugin.remote import files
from pi_cross_session._internal.protocol.codes import OK_RECEIPTS
from pi_cross_session._internal.protocol.remote import envelope as env
from pi_cross_session._internal.security.remote.pairing import MAC_BYTES
from tests.support.bounds import MUST_HAPPEN_S
from tests.support.remote import Fleet, Machine, RawMachine, Tap, connect_as, fleet_at
from tests.support.waiting import eventually

pytestmark = pytest.mark.hostile


@pytest.fixture
def open_fleet(tmp_path: Path) -> Iterator[Fleet]:
    with fleet_at(tmp_path / "fleet", open_deployment=True) as made:
        yield made


def _snapshot(machine: Machine) -> dict[str, Any]:
    found = files.read_snapshot(machine.locations)
    return found or {}


def _wait(condition: Any, what: str) -> None:
    """Poll what only exposes state (a snapshot file, a stream's configuration) until it holds."""
    deadline = time.monotonic() + MUST_HAPPEN_S
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)


def _remote_id(buildbox: Machine, name: str) -> str:
    return next(r["instanceId"] for r in buildbox.registrations() if r["name"] == name)


async def _publish(url: str, creds: str | None, subject: str, data: bytes, **kw: Any) -> None:
    nc = await connect_as(url, creds)
    try:
        await nc.publish(subject, data, **kw)
        await nc.flush()
    finally:
        await nc.close()


def test_a_delete_nobody_signed_never_removes_a_remote_session(open_fleet: Fleet) -> None:
    fleet = open_fleet
    laptop, buildbox, _gateway, _proxy = fleet.bob_behind_a_proxy()
    subject = env.record_subject("buildbox", _remote_id(buildbox, "bob"))
    before = _snapshot(laptop).get("unsignedDeletes", 0)
    # A stranger deletes (and purges) bob's key, again and again, as `nats kv del` would.
    for operation in ("DEL", "PURGE", "DEL"):
        anyio.run(
            lambda op=operation: _publish(
                fleet.url, None, subject, b"", headers={"KV-Operation": op}
            )
        )
    # laptop's gateway saw every one of them (and read the key again each time) …
    _wait(
        lambda: _snapshot(laptop).get("unsignedDeletes", 0) >= before + 3,
        "laptop's gateway counted the deletes",
    )
    # … and bob@buildbox is still listed and still reachable.
    assert "bob@buildbox" in [r["name"] for r in laptop.registrations()]
    sent = laptop.cli("send", "bob@buildbox", "still there?", "--json")
    assert sent.returncode == exits.EXIT_OK, sent


def test_a_captured_record_written_back_cannot_revive_an_ended_session(open_fleet: Fleet) -> None:
    fleet = open_fleet
    fleet.start_server()
    laptop, buildbox = fleet.pair("laptop", "buildbox")
    with Tap(fleet.url, [env.records_of("buildbox")]) as tap:
        bob = buildbox.inbox("bob")
        laptop.start_gateway()
        buildbox.start_gateway()
        laptop.wait_peer("bob@buildbox")
        subject = env.record_subject("buildbox", _remote_id(buildbox, "bob"))
        captured = next(data for seen, data in tap.seen() if seen == subject and data)
    # bob ends: buildbox signs a tombstone, and laptop's proxy goes at once.
    bob.close()
    laptop.wait_peer("bob@buildbox", present=False)
    before = _snapshot(laptop).get("staleRecords", 0)
    # The captured record, still inside its validity, is written back by a stranger.
    anyio.run(lambda: _publish(fleet.url, None, subject, captured))
    _wait(
        lambda: _snapshot(laptop).get("staleRecords", 0) > before,
        "laptop's gateway judged the replayed record",
    )
    assert "bob@buildbox" not in [r["name"] for r in laptop.registrations()]


def test_a_deleted_or_shrunk_bucket_is_put_back_and_said_out_loud(open_fleet: Fleet) -> None:
    fleet = open_fleet
    fleet.start_server()
    laptop, buildbox = fleet.pair("laptop", "buildbox")
    buildbox.inbox("bob")
    # A short TTL: records are re-put every 2 s, so a broken bucket is noticed within that.
    laptop_gateway = laptop.start_gateway("--record-ttl", "6")
    buildbox_gateway = buildbox.start_gateway("--record-ttl", "6")
    laptop.wait_peer("bob@buildbox")

    async def js_call(action: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        nc = await connect_as(fleet.url, None)
        try:
            data = b"" if body is None else json.dumps(body).encode()
            msg = await nc.request(f"$JS.API.STREAM.{action}.{env.KV_STREAM}", data, timeout=5)
            answer: dict[str, Any] = json.loads(msg.data)
            return answer
        finally:
            await nc.close()

    assert anyio.run(js_call, "DELETE").get("success") is True
    # Both gateways say so at the default verbosity (a warning), and one of them puts it back.
    for gateway in (laptop_gateway, buildbox_gateway):
        gateway.wait_line(
            r"warning: .*remote discovery: the bucket did not exist", stderr=True, timeout=30
        )
    _wait(lambda: "error" not in anyio.run(js_call, "INFO"), "the bucket was created again")
    assert "bob@buildbox" in [r["name"] for r in laptop.registrations()]  # never went away
    # Shrunk below a record's size: the next put fails, and the configuration is put back.
    config = anyio.run(js_call, "INFO")["config"]
    assert "error" not in anyio.run(js_call, "UPDATE", {**config, "max_msg_size": 64})
    # buildbox is the one publishing (laptop has no session of its own): its put fails first.
    buildbox_gateway.wait_line(
        r"warning: .*remote discovery: the bucket was altered: its max message size",
        stderr=True,
        timeout=30,
    )
    _wait(
        lambda: anyio.run(js_call, "INFO")["config"]["max_msg_size"] > 64,
        "the bucket's configuration was put back",
    )
    # A machine that starts now still finds bob: discovery is on.
    third = fleet.machine("third")
    third.trust(buildbox)
    third.start_gateway("--record-ttl", "6")
    third.wait_peer("bob@buildbox")


def test_a_missing_bucket_that_a_machine_may_not_create_is_reported(fleet: Fleet) -> None:
    fleet.start_server()
    laptop, buildbox = fleet.pair("laptop", "buildbox")
    buildbox.inbox("bob")
    laptop_gateway = laptop.start_gateway()
    buildbox_gateway = buildbox.start_gateway()
    laptop.wait_peer("bob@buildbox")

    async def delete() -> None:
        nc = await connect_as(fleet.url, fleet.admin_creds)  # only the administrator may
        try:
            await nc.jetstream().delete_stream(env.KV_STREAM)
        finally:
            await nc.close()

    anyio.run(delete)
    # buildbox's next put (within a third of the TTL) finds no bucket; laptop's gateway, which
    # publishes nothing, learns it when it reads the bucket again.
    buildbox_gateway.wait_line(
        r"warning: .*the bucket did not exist, and this machine may not create it",
        stderr=True,
        timeout=30,
    )
    _wait(lambda: _snapshot(buildbox).get("bucket", {}).get("state") == "missing", "reported")
    del laptop_gateway
    # Records still flow between the live gateways meanwhile.
    assert "bob@buildbox" in [r["name"] for r in laptop.registrations()]


def test_a_stranger_on_a_request_subject_neither_swallows_nor_spoils_a_receipt(
    open_fleet: Fleet,
) -> None:
    fleet = open_fleet
    fleet.start_server()
    laptop, buildbox = fleet.pair("laptop", "buildbox")
    bob = buildbox.inbox("bob", "--busy", "0")
    laptop.start_gateway()
    buildbox.start_gateway()
    laptop.wait_peer("bob@buildbox")
    taken: list[bytes] = []

    async def stranger_and_sends() -> list[dict[str, Any]]:
        # In the gateways' old queue group, answering every request at once with junk.
        nc = await connect_as(fleet.url, None)

        async def hijack(msg: Any) -> None:
            taken.append(bytes(msg.data))
            await msg.respond(b"\x00" * 64 + b'{"junk":true}')

        await nc.subscribe(env.request_subject("buildbox", "laptop"), queue="gw", cb=hijack)
        await nc.flush()
        reports: list[dict[str, Any]] = []
        try:

            async def send(index: int) -> None:
                result = await anyio.to_thread.run_sync(
                    lambda: laptop.cli("send", "bob@buildbox", f"concurrent {index}", "--json")
                )
                reports.append(result.json())

            async with anyio.create_task_group() as group:
                for index in range(12):
                    group.start_soon(send, index)
        finally:
            await nc.close()
        return reports

    reports = anyio.run(stranger_and_sends)
    # The stranger saw the requests (no permissions here: nothing is private), but every one of
    # them reached buildbox too, and every sender heard what became of its message: a receipt,
    # or a refusal bob gave (twelve at once may find it busy), never "unknown".
    assert len(taken) == 12
    assert [r["state"] for r in reports if r["state"] == "receipt_unknown"] == [], reports
    delivered = [r["messageId"] for r in reports if r["status"] in OK_RECEIPTS]
    assert delivered, reports
    for message_id in delivered:
        bob.wait_event("message", messageId=message_id)


def test_nothing_from_nats_is_parsed_before_its_origin_is_verified(
    open_fleet: Fleet, tmp_path: Path
) -> None:
    """The gateway runs in this process so its parses can be counted: junk on a request subject
    of an unknown origin, junk with a forged signature under a trusted origin, on request and on
    record subjects, costly-shaped or not, is never parsed; the one signed request is."""
    from pi_cross_session._internal.plugin.remote.gateway import Gateway, GatewayOptions
    from pi_cross_session._internal.plugin.remote.link import Link, LinkConfig
    from pi_cross_session._internal.protocol.remote import envelope as envelope_module

    fleet = open_fleet
    fleet.start_server()
    buildbox = fleet.machine("buildbox")
    laptop = RawMachine("laptop", fleet=fleet)
    buildbox.trust(laptop)
    bob = buildbox.inbox("bob", "--busy", "0")
    target = _remote_id(buildbox, "bob")
    parsed: list[bytes] = []
    real = envelope_module.loads_object

    def counting(data: bytes) -> dict[str, Any]:
        parsed.append(data)
        return real(data)

    costly = b"[" * 20_000 + b"]" * 20_000
    junk = [
        (env.request_subject("buildbox", "stranger"), b"\x00" * 64 + costly),
        (env.request_subject("buildbox", "laptop"), b"\x01" * 64 + costly),
        (env.request_subject("buildbox", "laptop"), b"\x02" * 64 + b'{"v":1}'),
        (env.record_subject("stranger", "a" * 32), b"\x03" * 64 + costly),
        (env.record_subject("laptop", "b" * 32), b"\x04" * 64 + costly),
    ]

    async def main() -> bytes:
        identity = files.load_identity(buildbox.locations)
        link = Link(LinkConfig(servers=(fleet.url,), machine="buildbox"))
        await link.connect()
        options = GatewayOptions(
            machine="buildbox",
            key=identity.key,
            trust=files.load_trust(buildbox.locations),
            inbound=True,
            write_snapshot=False,
        )
        gateway = Gateway(buildbox.locations, options, link)
        try:
            async with anyio.create_task_group() as group:
                await group.start(gateway.run)
                parsed.clear()
                nc = await connect_as(fleet.url, None)
                try:
                    for subject, data in junk:
                        await nc.publish(subject, data)
                    payload, _ = laptop.payload("buildbox", target, "signed", message_id="ok-1")
                    # After the junk on laptop's own subject: answered means the junk was judged.
                    reply = await nc.request(
                        env.request_subject("buildbox", "laptop"), payload, timeout=10
                    )
                    # A record subject's junk is judged in its own queue: one signed record of
                    # laptop's after it, and the gateway's mirror holding it, says it was.
                    seq = secrets.randbits(40)
                    record = laptop.record("c" * 32, "carol", seq=seq)
                    await nc.publish(env.record_subject("laptop", "b" * 32), b"\x05" * 64 + costly)
                    await nc.publish(env.record_subject("laptop", "c" * 32), record)
                    await eventually(lambda: gateway._book.get(("laptop", "c" * 32)))
                finally:
                    await nc.close()
                group.cancel_scope.cancel()
        finally:
            await link.close()
        return bytes(reply.data)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(envelope_module, "loads_object", counting)
        reply = anyio.run(main)
    assert json.loads(reply[MAC_BYTES:])["body"]["status"] == "submitted"
    bob.wait_event("message", messageId="ok-1")
    # Exactly the two signed payloads were parsed, nothing of the junk.
    assert len(parsed) == 2, [data[:40] for data in parsed]
    assert all(re.match(rb'\{"v":1,"kind":"(send|peer)"', data) for data in parsed), parsed


def test_one_machine_with_many_sessions_cannot_take_every_proxy_slot(fleet: Fleet) -> None:
    fleet.start_server()
    laptop, buildbox = fleet.pair("laptop", "buildbox")
    crowd = RawMachine("crowd", fleet=fleet)
    laptop.trust(crowd)
    # laptop keeps 4 proxies at most: 2 guaranteed to each of the two machines it trusts.
    laptop.start_gateway("--max-proxies", "4")
    ids = [f"{index + 1:032x}" for index in range(8)]

    async def crowd_publishes() -> None:
        nc = await crowd.connect(fleet.url)
        try:
            js = nc.jetstream()
            for index, instance_id in enumerate(ids):
                record = crowd.record(instance_id, f"busy{index}", seq=index + 1)
                await js.publish(env.record_subject("crowd", instance_id), record)
        finally:
            await nc.close()

    anyio.run(crowd_publishes)
    _wait(
        lambda: sum(1 for r in laptop.registrations() if r["name"].endswith("@crowd")) == 4,
        "crowd's sessions filled laptop's free slots",
    )
    # buildbox comes later, with one session: it still gets a proxy (its share), taken back
    # from crowd's surplus.
    buildbox.inbox("bob")
    buildbox.start_gateway()
    laptop.wait_peer("bob@buildbox")
    crowd_proxies = [r for r in laptop.registrations() if r["name"].endswith("@crowd")]
    assert len(crowd_proxies) == 3
    sent = laptop.cli("send", "bob@buildbox", "a slot for me too", "--json")
    assert sent.returncode == exits.EXIT_OK, sent
    # Every listing says which sessions have no proxy, and why; a send to one says so too.
    _wait(lambda: len(_snapshot(laptop).get("records", [])) == 9, "the snapshot lists all")
    listed = laptop.cli("peers")
    assert "5 sessions of other machines have no proxy here" in listed.stdout, listed
    capped = laptop.cli("peers", "--json").json()["capped"]
    assert len(capped) == 5, capped
    assert all(name.endswith("@crowd") for name in capped), capped
    refused = laptop.cli("send", capped[0], "hello?", "--json")
    assert refused.returncode == exits.EXIT_NO_TARGET, refused
    assert "keeps no proxy for" in refused.json()["error"], refused.json()


def test_a_machine_whose_requests_and_records_keep_failing_is_paused_then_heard_again(
    fleet: Fleet, caplog: pytest.LogCaptureFixture
) -> None:
    """On a deployment that vouches for the origin, a burst of false MACs and signatures under
    laptop's name can only come from laptop's credentials without laptop's key: the gateway
    stops listening to laptop (NATS then delivers none of its requests or records, junk or not),
    says why, shows it in its status, keeps laptop's sessions listed as they were although no
    record refreshes them, and when the pause ends listens again and reads them afresh."""
    from nats.errors import NoRespondersError
    from nats.errors import TimeoutError as NatsTimeout

    from pi_cross_session._internal.plugin.remote.gateway import Gateway, GatewayOptions
    from pi_cross_session._internal.plugin.remote.link import Link, LinkConfig
    from pi_cross_session._internal.security.remote.pauses import MachinePauses

    caplog.set_level(logging.INFO, logger="pi_cross_session._internal.plugin.remote.gateway")
    fleet.start_server()
    buildbox = fleet.machine("buildbox")
    laptop = RawMachine("laptop", fleet=fleet)
    # The rogue holds laptop's NATS credentials (stolen), not its machine key.
    rogue = RawMachine("laptop")
    rogue.fleet, rogue.creds, rogue.nats = fleet, laptop.creds, laptop.nats
    buildbox.trust(laptop)
    bob = buildbox.inbox("bob", "--busy", "0")
    target = _remote_id(buildbox, "bob")
    subject = env.request_subject("buildbox", "laptop")
    carol = ("laptop", "c" * 32)
    # A record unrefreshed for longer than its TTL is ended; the pause outlasts the TTL.
    ttl_s, pause_s = 2.0, 6.0

    async def ask(message_id: str, timeout_s: float = 3.0) -> bytes:
        # Texts differ: the same text within 30 s is a duplicate.
        payload, _ = laptop.payload("buildbox", target, f"hi ({message_id})", message_id=message_id)
        nc = await laptop.connect(fleet.url)
        try:
            return bytes((await nc.request(subject, payload, timeout=timeout_s)).data)
        finally:
            await nc.close()

    async def put_carol(seq: int) -> None:
        nc = await laptop.connect(fleet.url)
        try:
            await nc.publish(env.record_subject(*carol), laptop.record(carol[1], "carol", seq=seq))
            await nc.flush()
        finally:
            await nc.close()

    async def main() -> dict[str, Any]:
        link = Link(
            LinkConfig(
                servers=(fleet.url,),
                machine="buildbox",
                credentials=files.load_nats_credentials(buildbox.locations),
            )
        )
        await link.connect()
        options = GatewayOptions(
            machine="buildbox",
            key=files.load_identity(buildbox.locations).key,
            trust=files.load_trust(buildbox.locations),
            inbound=True,
            write_snapshot=False,
            record_ttl_s=ttl_s,
        )
        pauses = MachinePauses(first_s=pause_s)
        gateway = Gateway(buildbox.locations, options, link, pauses=pauses)
        seq = secrets.randbits(40)
        try:
            async with anyio.create_task_group() as group:
                await group.start(gateway.run)
                assert gateway.permissions_enforced is True
                await ask("before")  # heard as it should be
                await put_carol(seq)
                await eventually(lambda: gateway._book.get(carol))
                # Half the burst on laptop's request subject, half on its record keys.
                nc = await rogue.connect(fleet.url)
                try:
                    for index in range(pauses.after // 2):
                        forged, _ = rogue.payload("buildbox", target, "x", message_id=f"j-{index}")
                        await nc.publish(subject, forged)
                        junk = rogue.record(carol[1], "mallory", seq=seq + 100 + index)
                        await nc.publish(env.record_subject(*carol), junk)
                    await nc.flush()
                finally:
                    await nc.close()

                async def refused() -> bool:
                    try:
                        await ask("during", 1.0)
                    except NoRespondersError:
                        return True
                    except NatsTimeout:
                        # Taken by the subscription as it went: never answered (the sender's
                        # gateway says receipt_unknown), never delivered.
                        pass
                    return False

                began = time.monotonic()
                while not await refused():
                    assert time.monotonic() - began < MUST_HAPPEN_S, "never paused"
                    await anyio.sleep(0.05)
                (entry,) = gateway.snapshot()["machines"]
                seen = gateway._book.seen(carol)

                async def refresh_carol() -> None:
                    # As laptop's gateway does (every third of the TTL, here more often).
                    for index in range(1, 1_000):
                        await put_carol(seq + 1_000 + index)
                        await anyio.sleep(0.3)

                # Nothing laptop puts reaches the paused gateway, and carol stays listed past
                # her TTL.
                group.start_soon(refresh_carol)
                await anyio.sleep(ttl_s + 1.0)
                await gateway._mirror.expire()
                held = (gateway._book.get(carol), gateway._book.seen(carol) == seen)
                assert gateway.snapshot()["machines"][0]["pausedForS"] > 0  # measured within
                while True:
                    try:
                        after = await ask("after")
                        break
                    except NoRespondersError:
                        assert time.monotonic() - began < pause_s + MUST_HAPPEN_S
                        await anyio.sleep(0.1)
                # Read afresh at the end of the pause: refreshed, not ended.
                await eventually(lambda: gateway._book.seen(carol) != seen)
                still = gateway._book.get(carol)
                group.cancel_scope.cancel()
        finally:
            await link.close()
        return {"entry": entry, "after": after, "held": held, "still": still}

    seen = anyio.run(main)
    entry = seen["entry"]
    assert entry["machine"] == "laptop"
    assert 0 < entry["pausedForS"] <= pause_s, entry
    record, unchanged = seen["held"]
    assert record is not None
    assert record.name == "carol"
    assert unchanged
    assert seen["still"] is not None
    assert seen["still"].name == "carol"
    assert json.loads(seen["after"][MAC_BYTES:])["body"]["status"] == "submitted"
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("not listening to laptop for 6 s" in line for line in said), said
    assert any("listening to laptop again" in r.getMessage() for r in caplog.records)
    # The forged requests never reached bob; the good ones did.
    bob.wait_event("message", messageId="after")
    assert not [e for e in bob.events() if str(e.get("messageId", "")).startswith("j-")]
