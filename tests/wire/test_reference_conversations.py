"""The recorded reference conversations, replayed against our peers.

Receiving side (``py->ts`` transcripts: a Python client talked to the TS receiver). The client's
frames are replayed, byte for byte except identities, against OUR receiver — a real endpoint,
authentication and admission in a :class:`SessionRuntime`, on a host the test drives. Recorded
session ids, instance ids and the redacted token placeholders are mapped onto the live receiver's
and onto a published sender registration's (so authentication really runs); the receiver's wall
clock is pinned to the recording's time, so the recorded ``sentAt`` values are current. Each of
our replies must agree with the recorded one on ``ok``, ``status``, ``code``, ``state``,
``retryable``, ``capabilities``, the keys and their order (so ``error`` is present exactly where the
reference has it, ``peer`` too), the requestId echo rule, and the ``peer`` identity. The wording of
``next`` and ``error`` is ours and only its presence is compared. Who closes when is checked where
the recording noted it (idle close after a probe's ready, immediate close after a receipt).

Scenario 12 (a Python client to a TS host with its RPC bus on, no listener) is replayed too: our
receiver has no RPC bus, and the wire outcome is the same ``submitted``.

Sending side (``ts->py`` transcripts: the TS sender talked to a Python listener). A fake listener
plays the recorded listener's replies; OUR sender (listing probe, then the send, through
:func:`outbound.send` and the :class:`Exchanger`) must write frames of the same shape as the
reference sender's — same keys in the same order, same capabilities, no ``from`` on probes, ids
that match the ID rule, an integer ``sentAt``, the same summary for the same text — the same
number of message frames, and end in the same classification as the recorded tool result.
Scenario 11 (sending through the host RPC topic) is not replayed: we have no RPC bus.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

import pytest

from pi_cross_session._internal.plugin import outbound
from pi_cross_session._internal.plugin.render import sending
from pi_cross_session._internal.plugin.reports import SendReport
from pi_cross_session._internal.protocol.capabilities import DELIVERY_RECEIPTS, GOAL_SCOPED_PEER
from pi_cross_session._internal.protocol.frames import Sender
from pi_cross_session._internal.protocol.io import discovery
from pi_cross_session._internal.protocol.io.exchange import ExchangeConfig, Exchanger
from pi_cross_session._internal.protocol.limits import SEND_DEADLINE_S
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import Registration
from pi_cross_session._internal.security.io import fs
from tests.support import raw_client
from tests.support.fake_receiver import SILENT, FakeReceiver, Reply, Step, fake_receiver
from tests.support.raw_client import RawClient
from tests.support.replay import (
    INSTANCE_ID_RE,
    TOKEN_RE,
    Identities,
    LiveReceiver,
    Transcript,
    compact,
    fresh_session_id,
    live_receiver,
    normalized,
    reply_shape,
    request_id_rule,
    sent_at_values,
    transcript_stems,
)
from tests.support.socket_peers import make_registration, publish
from tests.support.waiting import eventually

pytestmark = pytest.mark.anyio

#: The receiver's idle cut after a hello, shortened from 5 s (scenario 01 waits for it).
IDLE_AFTER_HELLO_S: Final = 0.5
#: Our sender's deadline for the silent-receiver scenario (the contract's is 5 s).
SHORT_SEND_DEADLINE_S: Final = 0.3
#: What our sender advertises in its hello: the reference's capability, then goal scope and
#: delivery receipts (the reference 2.2.1 has neither; a receiver ignores capabilities it does not
#: know).
CAPABILITIES: Final = ["cancel-safe-queue-v1", "goal-scoped-peer-v1", "delivery-receipts-v1"]
#: What we add after the reference's list.
OURS_BEYOND_REFERENCE: Final = [GOAL_SCOPED_PEER, DELIVERY_RECEIPTS]
HELLO_KEYS: Final = ["v", "type", "capabilities", "requestId", "token", "target"]
MESSAGE_KEYS: Final = ["v", "type", "requestId", "messageId", "text", "summary", "sentAt"]


@dataclass(frozen=True)
class Scenario:
    key: str
    stem: str
    #: Scenarios replayed first on the same receiver (their state is what this one reads).
    requires: tuple[str, ...] = ()


RECEIVING: Final = {
    s.key: s
    for s in (
        Scenario("01", "01-probe-hello-no-from"),
        Scenario("01b", "01b-probe-hello-no-caps"),
        Scenario("03", "03-auth-hello-message-receipt"),
        Scenario("04", "04-status-query", requires=("03",)),
        Scenario("05", "05-status-unknown-message"),
        Scenario("06", "06-duplicate-messageId", requires=("03",)),
        Scenario("07", "07-message-without-from"),
        Scenario("08", "08-wrong-token"),
        Scenario("09", "09-invalid-json"),
        Scenario("12", "12-py-to-ts-rpc-enabled-host"),
        Scenario("13", "13-busy-receiver-queued-vs-legacy-busy"),
    )
}
#: The order the reference recorded its default phase in, all against one receiver.
DEFAULT_PHASE: Final = ("01", "01b", "03", "04", "05", "06", "07", "08", "09")
SENDING: Final = (
    "10-ts-to-py-via-tool",
    "14-ts-to-py-receiver-says-queued",
    "15-ts-to-py-receiver-lacks-capability",
    "16-ts-to-py-receiver-silent-timeout",
    "17-ts-to-py-receiver-refuses-busy",
)
NOT_REPLAYED: Final = {"11-ts-to-py-via-rpc-bus": "sends through the host RPC topic"}


def test_every_transcript_is_replayed_or_explained() -> None:
    stems = set(transcript_stems())
    receiving = {s.stem for s in RECEIVING.values()}
    covered = receiving | set(SENDING) | set(NOT_REPLAYED)
    assert stems == covered
    for stem in stems:
        direction = Transcript.load(stem).client_dir()
        assert direction == ("py->ts" if stem in receiving else "ts->py"), stem


# -- receiving: the reference client's frames against our receiver -------------------------------


def identities_for(
    transcripts: list[Transcript], receiver: LiveReceiver, sender: Registration
) -> Identities:
    """Recorded receiver → our live receiver; recorded sender → the published sender."""
    me = receiver.runtime.identity
    assert me is not None
    ids = Identities()
    for transcript in transcripts:
        for hello in transcript.hellos():
            ids.add(hello["target"]["id"], me.session_id)
            ids.add(hello["target"]["instanceId"], me.instance_id)
            if hello["token"].startswith("<redacted:"):
                ids.add(hello["token"], me.token)
            claim = hello.get("from")
            if claim is not None:
                ids.add(claim["id"], sender.id)
                ids.add(claim["instanceId"], sender.instance_id)
                ids.add(claim["token"], sender.token)
        for body in transcript.frames("ts->py"):
            if isinstance(body, dict) and isinstance(body.get("peer"), dict):
                ids.add_pid(body["peer"]["pid"], me.pid)
    return ids


async def replay_connection(
    transcript: Transcript, conn: str, receiver: LiveReceiver, ids: Identities
) -> None:
    """Play the client's frames of ``conn``; check each of our replies against the recorded one,
    then that our receiver closes the connection (and when, where the recording says)."""
    client_dir = transcript.client_dir()
    recorded_request: Any = None
    sent_request: Any = None
    async with RawClient.connect(receiver.registration.socket_path) as client:
        for record in transcript.of(conn):
            if record.dir == client_dir:
                line = ids.rewrite_line(record.raw)
                # Live identities have the recorded lengths: the frame is the recorded size.
                assert len(line) == record.nbytes, (record.seq, line)
                await client.send(line)
                recorded_request = record.body
                sent_request = json.loads(line) if record.body is not None else None
                continue
            raw = await client.read_line()
            assert raw is not None, f"{transcript.name} seq {record.seq}: closed without a reply"
            raw_client.parse_reply(raw)  # the contract's shape, independently of the recording
            ours = json.loads(raw)
            expected = ids.map(record.body)
            where = f"{transcript.name} seq {record.seq}"
            if "capabilities" in expected:
                # We advertise goal scope after the reference's list; nothing else may differ.
                assert ours["capabilities"] == [*expected["capabilities"], *OURS_BEYOND_REFERENCE]
                expected = {**expected, "capabilities": ours["capabilities"]}
            assert reply_shape(ours) == reply_shape(expected), where
            assert request_id_rule(ours, sent_request) == request_id_rule(
                record.body, recorded_request
            ), where
            if "peer" in expected:
                assert ours["peer"] == expected["peer"], where
            for text in ("next", "error"):
                if text in ours:
                    assert isinstance(ours[text], str), where
                    assert ours[text], where
        closed_after = await time_to_eof(client)
    if conn == transcript.connections[-1]:
        check_close_note(transcript, closed_after)


async def time_to_eof(client: RawClient) -> float:
    started = time.monotonic()
    rest = await client.read_to_eof()
    assert rest == b"", rest
    return time.monotonic() - started


def check_close_note(transcript: Transcript, closed_after_s: float) -> None:
    after_ready = transcript.note("server closed after ready")
    if after_ready is not None:
        # The reference cut the silent connection at its 5 s idle limit; ours at its own limit.
        assert after_ready["after_ms"] >= 4_000
        assert closed_after_s >= IDLE_AFTER_HELLO_S * 0.8, closed_after_s
    after_receipt = transcript.note("server closed after receipt")
    if after_receipt is not None:
        assert after_receipt["after_ms"] < 100
        assert closed_after_s < IDLE_AFTER_HELLO_S, closed_after_s


async def release(receiver: LiveReceiver) -> None:
    """The held user turn ends cleanly; the queue flushes its first message (as in the reference,
    where the host released the turn and the queued message was submitted)."""
    receiver.end_turn()
    await eventually(lambda: receiver.snapshot().queued == 0)


async def replay(transcript: Transcript, receiver: LiveReceiver, ids: Identities) -> None:
    """Every connection of ``transcript`` in order, with the recorded host events between them."""
    pending_events = sorted(
        (n for n in transcript.notes if n.get("event", "").startswith("host ")),
        key=lambda n: n["t_ms"],
    )
    for conn in transcript.connections:
        while pending_events and pending_events[0]["t_ms"] < transcript.first_t_ms(conn):
            await host_event(pending_events.pop(0), receiver)
        await replay_connection(transcript, conn, receiver, ids)
        # The reference host ran the turn a submission started (its model answered) before the
        # next connection; ours does the same.
        receiver.settle_submissions()
    for note in pending_events:
        await host_event(note, receiver)


async def host_event(note: dict[str, Any], receiver: LiveReceiver) -> None:
    event = note["event"]
    if event == "host prompt_hold":
        assert note["result"] == {"ok": True, "busy": True}
        receiver.user_turn()
    elif event == "host release":
        await release(receiver)
        receiver.settle_submissions()
    else:  # pragma: no cover - a new kind of note in the recording
        raise AssertionError(f"unknown host event {event!r}")


async def replay_against_one_receiver(locations: Locations, keys: list[str]) -> LiveReceiver:
    transcripts = [Transcript.load(RECEIVING[key].stem) for key in keys]
    sender = make_registration(locations, "py-ref", session_id=fresh_session_id())
    publish(locations, sender)
    wall_start = min(sent_at_values(transcripts), default=int(time.time() * 1000))
    async with live_receiver(
        locations,
        session_id=fresh_session_id(),
        wall_start_ms=wall_start,
        idle_after_hello_s=IDLE_AFTER_HELLO_S,
    ) as receiver:
        ids = identities_for(transcripts, receiver, sender)
        for transcript in transcripts:
            await replay(transcript, receiver, ids)
    return receiver


def with_prerequisites(key: str) -> list[str]:
    keys: list[str] = []
    for required in RECEIVING[key].requires:
        keys += with_prerequisites(required)
    return [*keys, key]


@pytest.mark.parametrize("key", list(RECEIVING))
async def test_our_receiver_answers_the_reference_client_as_the_reference_did(
    locations: Locations, key: str
) -> None:
    await replay_against_one_receiver(locations, with_prerequisites(key))


async def test_the_default_phase_in_recorded_order_on_one_receiver(locations: Locations) -> None:
    receiver = await replay_against_one_receiver(locations, list(DEFAULT_PHASE))
    snapshot = receiver.runtime.snapshot()
    assert snapshot is not None
    # One admission (03); 06's duplicate and 07's unauthenticated message admitted nothing.
    assert snapshot.admitted == 1
    assert snapshot.refusals == {"duplicate": 1, "authentication_failed": 1}
    assert len(receiver.host.submitted) == 1


async def test_busy_scenario_ends_with_the_queued_message_delivered(locations: Locations) -> None:
    receiver = await replay_against_one_receiver(locations, ["13"])
    transcript = Transcript.load(RECEIVING["13"].stem)
    messages = [b for b in transcript.frames("py->ts") if b and b.get("type") == "message"]
    queued, legacy = messages
    # The capable sender's message was queued and later submitted; the legacy one never was.
    assert [d.message_id for d in receiver.host.submitted] == [queued["messageId"]]
    assert [d.text for d in receiver.host.submitted] == [queued["text"]]
    snapshot = receiver.runtime.snapshot()
    assert snapshot is not None
    assert snapshot.refusals == {"busy": 1}
    assert legacy["messageId"] not in {row.message_id for row in snapshot.rows}


# -- sending: our sender against the reference listener's replies ---------------------------------


@dataclass
class SendCase:
    transcript: Transcript
    #: Recorded client frames per connection, in order (ts->py).
    connections: list[list[dict[str, Any]]]
    #: The recorded listener's replies on the sending connection, in order.
    replies: list[dict[str, Any]]
    outcome: dict[str, Any]
    #: How long the reference's tool call took, when the recording says.
    elapsed_ms: float | None

    @classmethod
    def load(cls, stem: str) -> SendCase:
        transcript = Transcript.load(stem)
        connections = [
            [r.body for r in transcript.of(conn) if r.dir == "ts->py"]
            for conn in transcript.connections
        ]
        replies = [r.body for r in transcript.of(transcript.connections[-1]) if r.dir == "py->ts"]
        note = transcript.note("host tool result")
        assert note is not None
        return cls(transcript, connections, replies, note["result"], note.get("elapsed_ms"))

    @property
    def message(self) -> dict[str, Any] | None:
        return next((f for f in self.connections[-1] if f.get("type") == "message"), None)

    @property
    def target_name(self) -> str:
        details = self.outcome.get("result", {}).get("details", {})
        return str(details.get("target", {}).get("name", "py-ref-extra"))


def replaying(reply: dict[str, Any]) -> Reply:
    """Answer with the recorded reply, its requestId replaced by the frame's being answered."""

    def make(frame: Any) -> bytes:
        return compact({**reply, "requestId": frame["requestId"]})

    return Reply(make)


def sender_identities(
    case: SendCase, target: Registration, sender: Registration, fake_pid: int
) -> Identities:
    ids = Identities()
    for hello in case.transcript.hellos():
        ids.add(hello["target"]["id"], target.id)
        ids.add(hello["target"]["instanceId"], target.instance_id)
        claim = hello.get("from")
        if claim is not None:
            ids.add(claim["id"], sender.id)
            ids.add(claim["instanceId"], sender.instance_id)
    for reply in case.replies:
        if "peer" in reply:
            ids.add_pid(reply["peer"]["pid"], fake_pid)
    return ids


async def send_like_the_reference(
    locations: Locations, case: SendCase
) -> tuple[SendReport, FakeReceiver, Identities, Registration, Registration, float]:
    target = make_registration(locations, case.target_name, session_id=fresh_session_id())
    sender = make_registration(locations, "ts-ref", session_id=fresh_session_id())
    publish(locations, target)
    publish(locations, sender)
    ids = sender_identities(case, target, sender, fake_pid=4242)
    script: list[Step] = [replaying(ids.map(reply)) for reply in case.replies]
    if case.message is not None and len(case.replies) < 2:
        script.append(SILENT)  # the recorded listener never answered the message
    silent = case.outcome.get("code") == "timeout"
    config = ExchangeConfig(send_deadline_s=SHORT_SEND_DEADLINE_S) if silent else None
    exchanger = Exchanger(locations, fs, config=config)
    outbox = outbound.Outbox(
        sender=Sender(id=sender.id, instance_id=sender.instance_id, token=sender.token),
        exchanger=exchanger,
        list_peers=partial(
            discovery.list_peers,
            locations,
            fs,
            exchanger.is_live,
            self_instance_id=sender.instance_id,
            with_git=False,
        ),
        wall_ms=lambda: time.time_ns() // 1_000_000,
    )
    recorded = case.message
    text = recorded["text"] if recorded else f"TS -> Python ({case.transcript.name})"
    first_line = text.splitlines()[0]
    summary = None if recorded is None or recorded["summary"] == first_line else recorded["summary"]
    async with fake_receiver(locations, script, registration=target) as fake:
        before = time.monotonic()
        report = await outbound.send(outbox, case.target_name, text, summary=summary)
        elapsed = time.monotonic() - before
    return report, fake, ids, target, sender, elapsed


@pytest.mark.parametrize("stem", SENDING)
async def test_our_sender_writes_what_the_reference_sender_writes(
    locations: Locations, stem: str
) -> None:
    case = SendCase.load(stem)
    report, fake, ids, target, sender, _ = await send_like_the_reference(locations, case)
    ours: dict[int, list[dict[str, Any]]] = {}
    for item in fake.received:
        ours.setdefault(item.connection, []).append(item.body)
    connections = [ours[number] for number in sorted(ours)]
    # A listing probe, then the send: the reference's two connections, frame for frame.
    assert len(connections) == len(case.connections)
    for our_frames, recorded_frames in zip(connections, case.connections, strict=True):
        assert len(our_frames) == len(recorded_frames)
        for mine, theirs in zip(our_frames, recorded_frames, strict=True):
            if theirs.get("type") == "hello":
                # Our hello lists goal scope after the reference's capabilities.
                caps = [*theirs["capabilities"], *OURS_BEYOND_REFERENCE]
                theirs = {**theirs, "capabilities": caps}
            assert json.dumps(normalized(mine, ids)) == json.dumps(normalized(theirs, ids))
    probe, send = connections
    now_ms = time.time_ns() // 1_000_000
    for index, hello in enumerate([probe[0], send[0]]):
        keys = HELLO_KEYS + (["from"] if index else [])
        assert list(hello) == keys
        assert hello["capabilities"] == CAPABILITIES
        assert hello["token"] == target.token
        assert list(hello["target"]) == ["id", "instanceId"]
        assert INSTANCE_ID_RE.fullmatch(hello["target"]["instanceId"])
    assert "from" not in probe[0]
    claim = send[0]["from"]
    assert list(claim) == ["id", "instanceId", "token"]
    assert (claim["id"], claim["instanceId"]) == (sender.id, sender.instance_id)
    assert TOKEN_RE.fullmatch(claim["token"])
    assert claim["token"] == sender.token
    ids_used = [probe[0]["requestId"], send[0]["requestId"]]
    if case.message is None:
        assert len(send) == 1  # nothing after the ready: no message frame at all
    else:
        message = send[1]
        assert list(message) == MESSAGE_KEYS
        assert type(message["sentAt"]) is int
        assert abs(message["sentAt"] - now_ms) < 10_000
        # Same text, same summary (given, or derived from the first line as the reference does).
        assert (message["text"], message["summary"]) == (
            case.message["text"],
            case.message["summary"],
        )
        ids_used += [message["requestId"], message["messageId"]]
        assert message["messageId"] == report.message_id
    assert len(set(ids_used)) == len(ids_used)
    assert fake.count("message") == sum(f.get("type") == "message" for f in case.connections[-1])


@pytest.mark.parametrize("stem", SENDING)
async def test_our_sender_classifies_the_ending_as_the_reference_did(
    locations: Locations, stem: str
) -> None:
    case = SendCase.load(stem)
    report, fake, _, _, _, elapsed = await send_like_the_reference(locations, case)
    expected = case.outcome
    assert report.ok is expected["ok"], report
    if expected["ok"]:
        assert report.status == expected["result"]["details"]["status"]
        assert report.state is None  # nothing to classify: the receipt is the answer
    else:
        assert (report.status, report.state, report.retryable) == (
            expected["code"],
            expected["state"],
            expected["retryable"],
        ), report
        # Refused after ready (unsupported): certainly not delivered. Otherwise the message
        # frame was written once and never again (no automatic retry).
        assert report.message_written is (case.message is not None)
    assert fake.count("message") == (1 if case.message is not None else 0)
    if expected.get("code") == "timeout":
        # Our own (shortened) deadline ended it, as the reference's 5 s one did.
        assert case.elapsed_ms is not None
        assert case.elapsed_ms >= 4_900
        # Ours, not the contract's 5 s: the only load-proof bound that tells the two apart.
        assert SHORT_SEND_DEADLINE_S * 0.9 <= elapsed < SEND_DEADLINE_S


async def test_live_identities_are_not_the_recorded_ones(locations: Locations) -> None:
    """The replays would prove nothing if the recorded ids slipped through unmapped."""
    transcripts = [Transcript.load(RECEIVING[key].stem) for key in DEFAULT_PHASE]
    sender = make_registration(locations, "py-ref", session_id=fresh_session_id())
    async with live_receiver(
        locations,
        session_id=fresh_session_id(),
        wall_start_ms=int(time.time() * 1000),
        idle_after_hello_s=IDLE_AFTER_HELLO_S,
    ) as receiver:
        ids = identities_for(transcripts, receiver, sender)
        me = receiver.runtime.identity
        assert me is not None
        recorded = set(ids.strings)
        assert not recorded & {me.session_id, me.instance_id, me.token, sender.id, sender.token}
        assert ids.pids == dict.fromkeys(ids.pids, os.getpid())
        rewritten = ids.rewrite_line(transcripts[2].records[0].raw)
        assert not any(value.encode() in rewritten for value in recorded)


async def test_a_successful_send_reports_its_message_as_written(locations: Locations) -> None:
    case = SendCase.load("14-ts-to-py-receiver-says-queued")
    report, fake, *_ = await send_like_the_reference(locations, case)
    assert (report.ok, report.status, fake.count("message")) == (True, "queued", 1)
    assert sending.send_details(report)["messageWritten"] is True
