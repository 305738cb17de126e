"""Faults of the remote plane, each with its defined outcome (docs/remote.md, "Faults"): a NATS
restart, a gateway frozen or killed mid-exchange, clock skew, replays across a restart, a flood
from one machine, an untrusted machine. Nothing lost silently, nothing admitted twice."""

from __future__ import annotations

import signal
import time
import uuid
from functools import partial
from pathlib import Path

import anyio

from pi_cross_session._internal.cli import exits
from pi_cross_session._internal.protocol.remote.envelope import request_subject
from pi_cross_session._internal.security.remote.pairing import MAC_BYTES
from tests.support.remote import Fleet, Machine, RawMachine, Tap, raw_request, reply_of


def ask(fleet: Fleet, raw: RawMachine, payload: bytes, timeout_s: float = 6.0) -> bytes | None:
    """``raw`` sends ``payload`` to buildbox, on its own subject, with its own credentials."""
    subject = request_subject("buildbox", raw.name)
    return anyio.run(partial(raw_request, who=raw), fleet.url, subject, payload, timeout_s)


def _target(machine: Machine, name: str) -> str:
    return next(r["instanceId"] for r in machine.registrations() if r["name"] == name)


def _received(inbox: object, message_id: str) -> int:
    return sum(
        1
        for e in inbox.events()  # type: ignore[attr-defined]
        if e.get("event") == "message" and e.get("messageId") == message_id
    )


def test_a_frozen_receiving_gateway_is_receipt_unknown_never_a_retry(fleet: Fleet) -> None:
    fleet.start_server()
    laptop, buildbox = fleet.pair("laptop", "buildbox")
    bob = buildbox.inbox("bob")
    laptop.start_gateway()
    remote_gateway = buildbox.start_gateway()
    laptop.wait_peer("bob@buildbox")
    subject = request_subject("buildbox", "laptop")
    with Tap(fleet.url, [subject], creds=fleet.admin_creds) as tap:
        remote_gateway.process.send_signal(signal.SIGSTOP)  # a partition, seen from laptop
        try:
            sent = laptop.cli("send", "bob@buildbox", "are you there?", "--json")
        finally:
            remote_gateway.process.send_signal(signal.SIGCONT)
        report = sent.json()
        bob.wait_event("message", messageId=report["messageId"])
        # Sent once, never again: the lost hop was not retried by anyone.
        assert tap.count(subject) == 1
    assert sent.returncode == exits.EXIT_UNKNOWN, sent
    assert (report["status"], report["state"]) == ("connection_closed", "receipt_unknown")
    assert report["retryable"] is False
    # Thawed, the gateway handles the one request that reached it (inside its window): the
    # message arrives once, and asking for its status tells what happened.
    bob.wait_event("message", messageId=report["messageId"])
    status = laptop.cli("status", "bob@buildbox", report["messageId"], "--json")
    assert status.json()["status"] in {"submitted", "delivered"}, status
    assert _received(bob, report["messageId"]) == 1


def test_a_killed_receiving_gateway_makes_sends_not_sent_and_its_proxies_go(
    fleet: Fleet,
) -> None:
    fleet.start_server()
    laptop, buildbox = fleet.pair("laptop", "buildbox")
    buildbox.inbox("bob")
    laptop.start_gateway("--record-ttl", "6")
    remote_gateway = buildbox.start_gateway("--record-ttl", "6")
    laptop.wait_peer("bob@buildbox")
    remote_gateway.kill()
    # Nobody serves buildbox's subject any more: NATS says so at once, and nothing was sent.
    # From laptop this looks as a machine that never trusted it looks (nobody takes its
    # requests while the records are fresh): the refusal names both causes.
    sent = laptop.cli("send", "bob@buildbox", "hello?", "--json")
    assert sent.returncode == exits.EXIT_REFUSED, sent
    assert (sent.json()["status"], sent.json()["state"]) == ("not_listening", "refused")
    # Its records expire from laptop's mirror within the TTL (6 s here): the proxy goes with them.
    laptop.wait_peer("bob@buildbox", present=False)


def test_a_nats_restart_refuses_meanwhile_and_recovers(fleet: Fleet) -> None:
    server = fleet.start_server()
    laptop, buildbox = fleet.pair("laptop", "buildbox")
    bob = buildbox.inbox("bob")
    laptop.start_gateway()
    buildbox.start_gateway()
    laptop.wait_peer("bob@buildbox")
    server.stop()
    during = laptop.cli("send", "bob@buildbox", "while NATS is down", "--json")
    # Not sent, and this side's fault: a local failure.
    assert during.returncode == exits.EXIT_LOCAL, during
    assert during.json()["status"] == "unreachable"
    server.start()
    # The gateways reconnect by themselves; the proxy survived a restart shorter than the TTL.
    for _ in range(100):
        after = laptop.cli("send", "bob@buildbox", f"after the restart {uuid.uuid4()}", "--json")
        if after.returncode == exits.EXIT_OK:
            break
        # Until buildbox's gateway is back on the server too, nobody takes laptop's requests.
        assert after.json()["status"] in ("unreachable", "not_listening"), after
        anyio.run(anyio.sleep, 0.2)
    else:
        raise AssertionError("the gateways never came back")
    bob.wait_event("message", messageId=after.json()["messageId"])
    assert _received(bob, during.json()["messageId"]) == 0
    assert _received(bob, after.json()["messageId"]) == 1


#: (how far the sending machine's clock is from ours, whether the message gets through)
SKEWS = [(0, True), (4_000, True), (-4_000, True), (-31_000, False), (6_000, False)]


def test_clock_skew_inside_the_window_passes_beyond_it_is_expired(fleet: Fleet) -> None:
    fleet.start_server()
    buildbox = fleet.machine("buildbox")
    raw = RawMachine("skewed", fleet=fleet)
    buildbox.trust(raw)
    bob = buildbox.inbox("bob", "--busy", "0")
    gateway = buildbox.start_gateway()
    # A gateway refuses what was signed before it started (its nonces are new), so a clock
    # behind ours is refused for that long after a start, by design: let that pass first.
    time.sleep(4.5)
    target = _target(buildbox, "bob")
    for index, (offset_ms, delivered) in enumerate(SKEWS):
        message_id = f"skew-{index}"
        payload, _ = raw.payload(
            "buildbox",
            target,
            f"what time is it? ({index})",
            message_id=message_id,
            at_ms=time.time_ns() // 1_000_000 + offset_ms,
        )
        reply = reply_of(ask(fleet, raw, payload))
        if delivered:
            assert reply == ("receipt", "submitted"), (offset_ms, reply)
            bob.wait_event("message", messageId=message_id)
        else:
            assert reply == ("refused", "expired"), (offset_ms, reply)
            assert _received(bob, message_id) == 0
    # The receiving gateway says why, with the fix, once for the machine (until its envelopes
    # pass again): the two refusals in a row are one line.
    said = [line for line in gateway.err_lines if "refused for its time" in line]
    assert len(said) == 1, gateway.output()
    assert "a message from skewed" in said[0], said
    assert "31 s behind" in said[0], said
    assert "NTP" in said[0], said


def test_a_replay_is_dropped_and_after_a_restart_is_expired_never_admitted_twice(
    fleet: Fleet,
) -> None:
    fleet.start_server()
    buildbox = fleet.machine("buildbox")
    raw = RawMachine("laptop", fleet=fleet)
    buildbox.trust(raw)
    bob = buildbox.inbox("bob")
    gateway = buildbox.start_gateway()
    payload, _ = raw.payload("buildbox", _target(buildbox, "bob"), "once", message_id="m-1")
    assert reply_of(ask(fleet, raw, payload)) == ("receipt", "submitted")
    # The same bytes again: the nonce is remembered, the envelope dropped without a word.
    assert ask(fleet, raw, payload, 2.0) is None
    gateway.stop()
    buildbox.start_gateway()
    # A restarted gateway forgot its nonces, so it refuses anything signed before it started.
    assert reply_of(ask(fleet, raw, payload)) == ("refused", "expired")
    bob.wait_event("message", messageId="m-1")
    assert _received(bob, "m-1") == 1


def test_an_untrusted_or_forged_machine_gets_no_answer_at_all(fleet: Fleet) -> None:
    fleet.start_server()
    buildbox = fleet.machine("buildbox")
    # The stranger holds laptop's NATS credentials (stolen), not laptop's machine key: NATS lets
    # it speak as laptop, our signatures do not.
    trusted = RawMachine("laptop", fleet=fleet)
    # It knows every public key (buildbox's too), so its MAC is the best a forger can make.
    stranger = RawMachine("laptop")
    stranger.fleet = fleet
    stranger.creds, stranger.nats = trusted.creds, trusted.nats
    buildbox.trust(trusted)
    bob = buildbox.inbox("bob")
    buildbox.start_gateway()
    target = _target(buildbox, "bob")
    forged, _ = stranger.payload("buildbox", target, "let me in", message_id="f-1")
    assert ask(fleet, stranger, forged, 2.0) is None
    other_account = RawMachine("laptop", account="elsewhere")
    other_account.key, other_account.creds = trusted.key, trusted.creds
    other_account.fleet = fleet
    wrong, _ = other_account.payload("buildbox", target, "wrong account", message_id="f-2")
    assert ask(fleet, other_account, wrong, 2.0) is None
    assert _received(bob, "f-1") == _received(bob, "f-2") == 0


def test_a_machine_that_signs_as_older_versions_did_is_told_to_update(fleet: Fleet) -> None:
    """Requests are MACed with the pair's key now; one signed with the machine's key, as before,
    is refused, and the gateway names the machine and the fix once, at default verbosity."""
    fleet.start_server()
    buildbox = fleet.machine("buildbox")
    older = RawMachine("laptop", fleet=fleet)
    buildbox.trust(older)
    bob = buildbox.inbox("bob")
    gateway = buildbox.start_gateway()
    target = _target(buildbox, "bob")
    maced, _ = older.payload("buildbox", target, "as before", message_id="o-1")
    signed = older.key.seal(maced[MAC_BYTES:])
    assert ask(fleet, older, signed, 2.0) is None
    gateway.wait_line(
        r"warning: .*a message from laptop was refused: it is signed the way versions",
        stderr=True,
    )
    # The same machine, MACing as it should, is heard.
    maced, _ = older.payload("buildbox", target, "as now", message_id="o-2")
    assert reply_of(ask(fleet, older, maced)) == ("receipt", "submitted")
    assert _received(bob, "o-1") == 0


def test_remote_inbound_off_refuses_and_delivers_nothing(fleet: Fleet) -> None:
    fleet.start_server()
    laptop, buildbox = fleet.pair("laptop", "buildbox")
    bob = buildbox.inbox("bob")
    laptop.start_gateway()
    buildbox.start_gateway("--inbound", "off")
    laptop.wait_peer("bob@buildbox")  # still published: laptop may see it, not reach it
    sent = laptop.cli("send", "bob@buildbox", "knock knock", "--json")
    assert sent.returncode == exits.EXIT_REFUSED, sent
    assert sent.json()["status"] == "remote_inbound_off"  # the machine refuses, not bob
    assert _received(bob, sent.json()["messageId"]) == 0


def test_a_flood_from_one_machine_is_bounded_and_another_machine_still_gets_through(
    fleet: Fleet,
) -> None:
    fleet.start_server()
    laptop, buildbox = fleet.pair("laptop", "buildbox")
    flooder = RawMachine("flooder", fleet=fleet)
    buildbox.trust(flooder)
    # bob refuses everything, so the flood costs the session nothing but refusals.
    buildbox.inbox("bob", "--refuse")
    buildbox.inbox("carol")
    laptop.start_gateway()
    buildbox.start_gateway()
    laptop.wait_peer("carol@buildbox")
    target = _target(buildbox, "bob")
    subject = request_subject("buildbox", flooder.name)

    async def flood() -> list[tuple[str, str] | None]:
        nc = await flooder.connect(fleet.url)
        replies: list[tuple[str, str] | None] = []
        try:

            async def one(index: int) -> None:
                payload, _ = flooder.payload(
                    "buildbox",
                    target,
                    f"flood {index}",
                    message_id=f"fl-{index}",
                    sender_id=f"{index:032x}",
                )
                try:
                    msg = await nc.request(subject, payload, timeout=10)
                    replies.append(reply_of(bytes(msg.data)))
                except Exception:
                    replies.append(None)

            async with anyio.create_task_group() as group:
                for index in range(300):
                    group.start_soon(one, index)
        finally:
            await nc.close()
        return replies

    replies = anyio.run(flood)
    statuses = [r[1] for r in replies if r is not None]
    assert len(statuses) == 300, replies  # every request answered: nothing lost silently
    # 16 deliveries in flight per machine at most: the rest of a burst is refused at once.
    assert statuses.count("rate_limited") >= 300 - 16 * 4
    assert set(statuses) <= {"refused", "rate_limited"}
    sent = laptop.cli("send", "carol@buildbox", "still here", "--json")
    assert sent.returncode == exits.EXIT_OK, sent


def test_no_machine_reaches_a_third_one_through_a_gateway(fleet: Fleet) -> None:
    fleet.start_server()
    laptop, buildbox = fleet.pair("laptop", "buildbox")
    third = RawMachine("third", fleet=fleet)
    buildbox.trust(third)
    alice = laptop.inbox("alice")
    laptop.start_gateway()
    buildbox.start_gateway()
    buildbox.wait_peer("alice@laptop")
    # "third" asks buildbox to deliver to buildbox's proxy of alice: not a session of buildbox.
    proxy = _target(buildbox, "alice@laptop")
    payload, _ = third.payload("buildbox", proxy, "pass this on", message_id="t-1")
    reply = reply_of(ask(fleet, third, payload))
    assert reply == ("refused", "not_found")
    assert _received(alice, "t-1") == 0


def test_a_killed_local_gateway_leaves_proxies_that_listings_reap_and_sends_call_gone(
    fleet: Fleet,
) -> None:
    """SIGKILL gives the gateway no chance to remove its proxies' files: they stay, naming a dead
    pid, with sockets nobody listens on. A listing must neither show them nor wait on them, and a
    send must end at once with an answer that says the peer is not there."""
    from pi_cross_session._internal.protocol.io.exchange import ExchangeError, Exchanger
    from pi_cross_session._internal.protocol.registration import parse_registration
    from pi_cross_session._internal.security.io import fs
    from tests.support.socket_peers import make_registration

    laptop, _buildbox, local_gateway, proxy = fleet.bob_behind_a_proxy()
    path = laptop.locations.registration_path(proxy["instanceId"])
    registration = parse_registration(
        fs.read_registration_bytes(path),
        file_stem=proxy["instanceId"],
        expected_socket_path=laptop.locations.socket_path(proxy["instanceId"]),
    )
    local_gateway.kill()
    assert any(r["name"] == "bob@buildbox" for r in laptop.registrations())  # left behind

    # A send straight to the left-over registration (as a session that listed it before):
    # refused at once, nothing sent — the socket has no listener.
    sender = make_registration(laptop.locations, "sender")

    async def send() -> ExchangeError:
        from pi_cross_session._internal.protocol.frames import Message, Sender

        message = Message.model_validate(
            {
                "v": 1,
                "type": "message",
                "request_id": str(uuid.uuid4()),
                "message_id": str(uuid.uuid4()),
                "text": "are you there?",
                "summary": "are you there?",
                "sent_at": time.time_ns() // 1_000_000,
            }
        )
        who = Sender(id=sender.id, instance_id=sender.instance_id, token=sender.token)
        with anyio.fail_after(2):  # not a hang: the answer is immediate
            try:
                await Exchanger(laptop.locations, fs).send(
                    registration, sender=who, message=message
                )
            except ExchangeError as exc:
                return exc
        raise AssertionError("a dead proxy took a message")

    # As for any local session that died: the connection is refused, and the error says the
    # message was never written (the contract files every transport_error as receipt unknown).
    failed = anyio.run(send)
    assert (failed.code, failed.message_written) == ("transport_error", False), failed
    assert "ECONNREFUSED" in failed.detail or "refused" in failed.detail.lower(), failed.detail

    # The listing shows none of the dead gateway's proxies and reaps their files (the pid is
    # dead); the command line's send by name then finds nobody by that name.
    started = time.monotonic()
    names = [p["name"] for p in laptop.peers()]
    assert "bob@buildbox" not in names
    assert not any(r["name"] == "bob@buildbox" for r in laptop.registrations())
    assert not Path(laptop.locations.socket_path(proxy["instanceId"])).exists()
    sent = laptop.cli("send", "bob@buildbox", "hello?", "--json")
    assert sent.returncode != exits.EXIT_OK, sent
    assert sent.json()["status"] == "not_found", sent
    assert time.monotonic() - started < 30  # generous: it must not wait on the dead proxy
