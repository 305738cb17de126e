"""A live receiving session for hypothesis, driven from synchronous test code.

Hypothesis runs examples synchronously, thousands per test, so the receiver runs in an event loop
of its own (an anyio blocking portal in a thread): a real :class:`SessionRuntime` on a scripted
host, serving its real endpoint on a real Unix socket, started with
:func:`tests.support.wire_session.running_receiver` exactly as the wire tests start one. The
examples talk to it with a blocking socket that writes exact bytes, half-closes, and reads every
byte until the receiver closes.

:meth:`LiveReceiver.check` runs one example: it asks :class:`~tests.receiver.model.ReceiverModel`
what the receiver must answer, sends the bytes, checks every reply line with the repo's own reply
checker (which parses it with ``frames.parse_response``), compares the replies with the model's, and
checks the receiver's counters moved only for an admission the model expected. Then a legitimate
probe must still get ``ready``.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

from anyio.from_thread import BlockingPortal, start_blocking_portal

from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.frames import Response
from pi_cross_session._internal.protocol.io.endpoint import EndpointStatistics
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import Registration
from pi_cross_session._internal.security.limits import MessageIdLedger
from tests.files import files
from tests.receiver.model import Identity, Outcome, ReceiverModel
from tests.receiver.strategies import encode, hello_obj
from tests.support.raw_client import READ_TIMEOUT_S, parse_reply
from tests.support.socket_peers import published_sender
from tests.support.wire_session import Receiver, running_receiver

#: Fake time moved after every example: past the 30 s text-dedup window, so that every example
#: starts from the same admission state except for the message ids already used.
STEP_S: Final = 31.0
#: Caches large enough that nothing the fuzzer admits is ever evicted, so the model stays exact.
UNBOUNDED: Final = 10**7
KNOWN_STATUSES: Final = frozenset(code.value for code in Code)


def identity(registration: Registration) -> Identity:
    return Identity(registration.id, registration.instance_id, registration.token)


def converse(path: str, chunks: Sequence[bytes]) -> bytes:
    """Write each chunk, half-close, and return every byte until the receiver closes.

    A receiver may close before reading everything (after a fault, or once it has answered);
    the write side then breaks, and what it had already answered is still read.
    """
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(READ_TIMEOUT_S)
        sock.connect(path)
        try:
            for chunk in chunks:
                sock.sendall(chunk)
            sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass
        received = bytearray()
        while True:
            try:
                data = sock.recv(65_536)
            except ConnectionResetError:
                break  # Linux resets a peer that closed with unread data; replies came first
            if not data:
                break
            received += data
    return bytes(received)


def trickle(path: str, first: bytes, pieces: Sequence[bytes], pause_s: float) -> tuple[bytes, bool]:
    """Write ``first``, then each piece ``pause_s`` after the last, never half-closing; return
    every byte received and whether the receiver closed first (it cut the connection)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(READ_TIMEOUT_S)
        sock.connect(path)
        received = bytearray()
        try:
            sock.sendall(first)
            for piece in pieces:
                time.sleep(pause_s)
                sock.sendall(piece)
        except (BrokenPipeError, ConnectionResetError):
            pass
        sock.settimeout(READ_TIMEOUT_S + pause_s * len(pieces))
        cut = False
        while True:
            try:
                data = sock.recv(65_536)
            except (ConnectionResetError, TimeoutError):
                break
            if not data:
                cut = True
                break
            received += data
    return bytes(received), cut


def parse_replies(raw: bytes) -> list[Response]:
    """Every reply line, each checked with the repo's reply checker; no partial line allowed."""
    assert raw == b"" or raw.endswith(b"\n"), raw[-200:]
    replies = [parse_reply(line + b"\n") for line in raw.split(b"\n")[:-1]]
    for reply in replies:
        assert reply.status in KNOWN_STATUSES, reply
    return replies


@dataclass(frozen=True, slots=True)
class Counters:
    """What moves when a message is admitted."""

    budget: int
    host_calls: int
    row_events: int


@dataclass
class LiveReceiver:
    """The receiver under attack, its model, and the registrations a hello can name."""

    portal: BlockingPortal
    receiver: Receiver
    target: Registration
    model: ReceiverModel
    #: Published, valid senders the receiver can authenticate.
    senders: list[Registration]
    #: Sender claims that must fail: hostile registrations, another session's id, ourselves.
    impostors: list[Identity]
    #: A valid registration of another session, whose hello is replayed to this receiver.
    other: Identity
    #: Examples checked so far.
    examples: int = 0
    _serial: int = 0

    @property
    def path(self) -> str:
        return self.target.socket_path

    @property
    def valid_senders(self) -> list[Identity]:
        """Every sender the receiver can authenticate."""
        return list(self.model.senders.values())

    def fresh(self, prefix: str) -> str:
        """An id never used before in this receiver's life (only mutations make ids collide)."""
        self._serial += 1
        return f"{prefix}{self._serial}"

    def now_ms(self) -> int:
        return self.receiver.clock.wall_ms()

    def counters(self) -> Counters:
        """Read without a trip through the portal: between examples no connection is open, and
        these are single reads of values the event loop only changes while serving one."""
        budget = self.receiver.runtime.remaining_budget()
        assert budget is not None
        return Counters(budget, len(self.receiver.host.calls), len(self.receiver.row_events))

    def check(self, stream: bytes, chunks: Sequence[bytes]) -> Outcome:
        """Run one example (``chunks`` must join to ``stream``) and check everything about it."""
        assert b"".join(chunks) == stream
        self.examples += 1
        model = self.model
        model.now_ms = self.now_ms()
        expected = model.conversation(stream)
        before = self.counters()
        got = parse_replies(converse(self.path, chunks))
        shown = [(r.ok, r.status, r.request_id) for r in got]
        assert len(got) == len(expected.replies), (shown, expected.replies)
        for reply, want in zip(got, expected.replies, strict=True):
            assert (reply.ok, reply.request_id) == (want.ok, want.request_id), (shown, want)
            assert reply.status in want.statuses, (shown, want)
        after = self.counters()
        admitted = expected.admitted
        if admitted is None:
            assert after == before, "something was admitted that the contract refuses"
        else:
            assert expected.sender is not None
            assert (after.budget, after.host_calls) == (before.budget - 1, before.host_calls + 1)
            assert after.row_events > before.row_events
            key = (expected.sender, admitted["messageId"])
            new_rows = self.receiver.row_events[before.row_events : after.row_events]
            assert {(row.sender_instance_id, row.message_id) for row in new_rows} == {key}
            model.commit(expected.sender, admitted)
        if expected.refused_commit is not None:
            # Refused after its commit: nothing above moved, but its id and text are taken.
            assert expected.sender is not None
            model.commit(expected.sender, expected.refused_commit)
        self.probe()
        if admitted is not None:
            self.portal.call(self.receiver.turns.settle_submissions)
        self.receiver.clock.advance(STEP_S)
        return expected

    def endpoint_counters(self) -> EndpointStatistics:
        """The endpoint's counters (read without the portal, like :meth:`counters`)."""
        current = self.receiver.runtime._current  # no public handle on the endpoint
        assert current is not None
        return current.endpoint.statistics()

    def check_late(self, first: bytes, rest: Sequence[bytes], pause_s: float) -> Outcome:
        """A first frame, then the pieces of a second one that never ends, ``pause_s`` apart
        (more in all than the receiver's request deadline, each far less than its idle bound).

        The receiver must answer the first frame as the model says and then, if it went on,
        close the connection with nothing more: a second frame must be complete by its deadline
        after ``ready``, however the bytes are paced. Nothing is admitted.
        """
        self.examples += 1
        model = self.model
        model.now_ms = self.now_ms()
        partial = b"".join(rest)
        assert not partial.endswith(b"\n")
        expected = model.conversation(first + partial)
        before, cuts = self.counters(), self.endpoint_counters().request_deadline_cuts
        raw, closed = trickle(self.path, first, rest, pause_s)
        got = parse_replies(raw)
        shown = [(r.ok, r.status, r.request_id) for r in got]
        assert len(got) == len(expected.replies), (shown, expected.replies)
        for reply, want in zip(got, expected.replies, strict=True):
            assert (reply.ok, reply.request_id) == (want.ok, want.request_id), (shown, want)
            assert reply.status in want.statuses, (shown, want)
        assert self.counters() == before, "something was admitted from an unfinished frame"
        # Still waiting for its second frame after ``ready`` (no fault in the bytes so far).
        went_on = len(expected.replies) == 1 and expected.replies[0].ok
        if went_on and rest:
            assert closed, "the receiver let a trickled request run past its deadline"
            assert self.endpoint_counters().request_deadline_cuts == cuts + 1
        self.probe()
        self.receiver.clock.advance(STEP_S)
        return expected

    def probe(self) -> None:
        """A legitimate probe still gets ``ready`` from this very receiver."""
        line = encode(hello_obj(identity(self.target), request_id="probe-1")) + b"\n"
        replies = parse_replies(converse(self.path, [line]))
        assert [(r.ok, r.status, r.request_id) for r in replies] == [(True, "ready", "probe-1")]
        peer = replies[0].peer_identity()
        assert peer is not None
        assert (peer.id, peer.instance_id) == (self.target.id, self.target.instance_id)

    def final_accounting(self) -> None:
        """Every admitted message has exactly one row and one host submission; nothing else."""
        snapshot = self.portal.call(self.receiver.runtime.snapshot)
        assert snapshot is not None
        keys = [(row.sender_instance_id, row.message_id) for row in snapshot.rows]
        assert len(keys) == len(set(keys)), "a message has more than one row"
        assert sorted(keys) == sorted(self.model.admitted)
        assert snapshot.admitted == len(self.model.admitted)
        assert snapshot.evicted_rows == 0
        assert all(row.state == Code.SUBMITTED for row in snapshot.rows)
        calls = self.receiver.host.calls
        assert [(c.delivery.sender.instance_id, c.delivery.message_id) for c in calls] == list(
            self.model.admitted
        )
        assert all(call.taken for call in calls)


def _hostile_registrations(locations: Locations) -> tuple[list[Identity], list[Identity]]:
    """Registrations on disk that look right but must never authenticate (spec §1.5), and one
    valid registration whose token a hello will present under another session's id."""
    impostors: list[Identity] = []
    loose = files.record(locations, "loose")
    files.write_record(locations, loose, mode=0o644)
    outside = files.record(locations, "outside", socketPath="/tmp/elsewhere.sock")
    files.write_record(locations, outside)
    big = files.record(locations, "big")
    files.write_raw(locations, big["instanceId"], files.padded(files.record_bytes(big), 65_537))
    linked = files.record(locations, "linked")
    files.write_symlinked(locations, linked)
    impostors += [files.identity_of(body) for body in (loose, outside, big, linked)]
    # A valid record filed under another instance id: the hello names the file, not the record.
    misfiled = files.record(locations, "misfiled")
    stem = os.urandom(16).hex()
    files.write_raw(locations, stem, files.record_bytes(misfiled))
    impostors.append(Identity(misfiled["id"], stem, misfiled["token"]))
    gamma = files.record(locations, "gamma")
    files.write_record(locations, gamma)
    impostors.append(Identity("not-" + gamma["id"], gamma["instanceId"], gamma["token"]))
    return impostors, [files.identity_of(gamma)]


@contextmanager
def live_receiver(locations: Locations, **options: Any) -> Iterator[LiveReceiver]:
    """Run a receiving session in a portal thread until the block ends."""
    admission: dict[str, Any] = {
        "message_ids": MessageIdLedger(max_entries=UNBOUNDED),
        "max_rows": UNBOUNDED,
    }
    with (
        start_blocking_portal("asyncio") as portal,
        portal.wrap_async_context_manager(
            running_receiver(locations, budget=UNBOUNDED, admission=admission, **options)
        ) as receiver,
    ):
        target = receiver.registration
        senders = [published_sender(locations, name) for name in ("alpha", "beta")]
        impostors, also_valid = _hostile_registrations(locations)
        impostors.append(identity(target))  # a hello naming the receiver itself as its sender
        valid = [*(identity(sender) for sender in senders), *also_valid]
        model = ReceiverModel(
            me=identity(target),
            senders={known.instance_id: known for known in valid},
            now_ms=receiver.clock.wall_ms(),
        )
        live = LiveReceiver(portal, receiver, target, model, senders, impostors, also_valid[0])
        yield live
        # Let the last connections be seen closed before the runtime stops (see tests.support).
        portal.call(receiver.endpoint_idle)
