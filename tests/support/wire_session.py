"""A real :class:`SessionRuntime` receiving over its real endpoint, and real senders talking to it.

* :func:`running_receiver` runs a runtime on a :class:`~tests.support.scripted_host.ScriptedHost`
  with a :class:`FakeClock` (admission time only moves when the test advances it; the endpoint's
  own deadlines stay on anyio's real clock) and yields a :class:`Receiver`.
* :class:`WireSender` is a sender with a published registration that speaks the wire byte by byte
  through :class:`~tests.support.raw_client.RawClient` (so every reply is shape-checked), with or
  without ``cancel-safe-queue-v1`` in its hello. Its ``sentAt`` follows the receiver's fake clock.
* :class:`Ledger` records every wire reply, and :func:`assert_accounted` checks the receiver's
  snapshot against it: exactly one row per admitted message, none for a refused one, every row in
  one known state consistent with its receipt, and the refusal counters equal to what the wire saw.
* :func:`headless_session` runs a second, real session (a headless host) as a peer.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final

import anyio

from pi_cross_session._internal.plugin.hosts.headless import HeadlessHost, serve_inbox
from pi_cross_session._internal.plugin.runtime import RuntimeOptions, SessionRuntime
from pi_cross_session._internal.protocol.codes import ROW_STATES, Code
from pi_cross_session._internal.protocol.frames import Response
from pi_cross_session._internal.protocol.io.exchange import ExchangeConfig
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import Registration
from pi_cross_session._internal.security.admission import Row, Snapshot
from tests.support import raw_client
from tests.support.bounds import MUST_HAPPEN_S
from tests.support.clocks import FakeClock
from tests.support.raw_client import RawClient
from tests.support.scripted_host import ScriptedHost, Turns
from tests.support.socket_peers import published_sender
from tests.support.waiting import eventually

#: How long a condition that must come true may take (polling; the runtime exposes no events).
#: Capabilities of a legacy hello: no capabilities field at all (an empty list is legacy too).
LEGACY: Final = None

#: Receipt → row states the message may be in afterwards (a row never goes back to pending).
_AFTER_RECEIPT: Final[dict[str, frozenset[str]]] = {
    Code.SUBMITTED: frozenset({Code.SUBMITTED}),
    Code.QUEUED: frozenset(
        {
            Code.QUEUED,
            Code.SUBMITTED,
            Code.EXPIRED,
            Code.DROPPED,
            Code.DROPPED_CANCELLED,
            Code.DROPPED_SHUTDOWN,
            Code.DROPPED_USER_RESET,
            # Its goal ended, or its sender was unbound, before its turn came (goal-scoped-v1 §2.3:
            # a queued scoped message is checked for membership again before it runs).
            Code.DROPPED_GOAL_REVOKED,
            Code.INJECTION_FAILED,
        }
    ),
    Code.INJECTION_FAILED: frozenset({Code.INJECTION_FAILED, Code.DROPPED}),
}


def on_disk(path: str) -> bool:
    """True when anything (even a dangling symlink) is at ``path``."""
    return os.path.lexists(path)


@dataclass(frozen=True, slots=True)
class Outcome:
    """One message frame and the receiver's answer to it."""

    sender_instance_id: str
    message_id: str
    status: str
    ok: bool


@dataclass
class Ledger:
    """Every message reply a test's senders received from one receiver incarnation."""

    outcomes: list[Outcome] = field(default_factory=list)

    def record(self, sender_instance_id: str, message_id: str, reply: Response) -> None:
        self.note(sender_instance_id, message_id, reply.status, ok=reply.ok)

    def note(self, sender_instance_id: str, message_id: str, status: str, *, ok: bool) -> None:
        """Record an answer a sender other than a :class:`WireSender` received."""
        self.outcomes.append(Outcome(sender_instance_id, message_id, status, ok))

    def admitted(self) -> dict[tuple[str, str], str]:
        """Committed admissions and their receipts (``injection_failed`` was committed too)."""
        return {
            (o.sender_instance_id, o.message_id): o.status
            for o in self.outcomes
            if o.ok or o.status == Code.INJECTION_FAILED
        }

    def refusals(self) -> Counter[str]:
        """Refusals as the receiver counts them: ``injection_failed`` was admitted, not refused."""
        return Counter(
            o.status for o in self.outcomes if not o.ok and o.status != Code.INJECTION_FAILED
        )

    def statuses(self) -> list[str]:
        return [o.status for o in self.outcomes]

    def clear(self) -> None:
        self.outcomes.clear()


class WireSender:
    """An authenticated sender speaking raw wire frames to a receiver it looks up each time."""

    def __init__(
        self,
        registration: Registration,
        target: Callable[[], Registration],
        *,
        ledger: Ledger,
        wall_ms: Callable[[], int],
        capabilities: Iterable[str] | None = raw_client.CAPABILITIES,
    ) -> None:
        self.registration = registration
        self._target = target
        self._ledger = ledger
        self._wall_ms = wall_ms
        self.capabilities = None if capabilities is None else list(capabilities)
        self._serial = 0

    @property
    def instance_id(self) -> str:
        return self.registration.instance_id

    def _next(self) -> int:
        self._serial += 1
        return self._serial

    def fresh_id(self) -> str:
        return f"{self.registration.name}-m{self._next()}"

    async def _exchange(self, second: dict[str, Any]) -> Response:
        target = self._target()
        hello_id = f"{self.registration.name}-h{self._next()}"
        hello = raw_client.hello(
            target,
            sender=self.registration,
            request_id=hello_id,
            capabilities=self.capabilities,
        )
        async with RawClient.connect(target.socket_path) as client:
            await client.send(raw_client.line(hello))
            ready = await client.read_reply()
            assert (ready.ok, ready.status, ready.request_id) == (True, "ready", hello_id), ready
            await client.send(raw_client.line(second))
            reply = await client.read_reply()
            assert reply.request_id == second["requestId"], reply
            assert await client.read_to_eof() == b""
        return reply

    async def send(
        self,
        text: str | None = None,
        *,
        message_id: str | None = None,
        age_ms: int = 0,
        summary: str = "a summary",
    ) -> Response:
        """One message frame (sent ``age_ms`` ago by the receiver's clock); returns the reply."""
        message_id = message_id or self.fresh_id()
        frame = raw_client.message_body(
            text=text if text is not None else f"text of {message_id}",
            request_id=f"{self.registration.name}-r{self._next()}",
            message_id=message_id,
            summary=summary,
            sent_at=self._wall_ms() - age_ms,
        )
        reply = await self._exchange(frame)
        self._ledger.record(self.instance_id, message_id, reply)
        return reply

    async def status(self, message_id: str) -> Response:
        """A wire status query for ``message_id``; the reply's ``status`` is the row state."""
        frame = raw_client.status_body(
            request_id=f"{self.registration.name}-s{self._next()}", message_id=message_id
        )
        reply = await self._exchange(frame)
        assert reply.ok, reply
        return reply


class SessionViews:
    """What every in-process session under test offers, from the attributes its dataclass holds:
    ``runtime``, ``clock``, ``locations`` and ``ledger``. :class:`Receiver` (a scripted host) and
    the MCP peer (tests/mcp/kit.py) share it."""

    runtime: SessionRuntime
    clock: FakeClock
    locations: Locations
    ledger: Ledger

    @property
    def registration(self) -> Registration:
        registration = self.runtime.registration()
        assert registration is not None, "the runtime is not running"
        return registration

    def snapshot(self) -> Snapshot:
        snapshot = self.runtime.snapshot()
        assert snapshot is not None
        return snapshot

    def sender(
        self, name: str, *, capabilities: Iterable[str] | None = raw_client.CAPABILITIES
    ) -> WireSender:
        """A new sender with its own published registration."""
        return WireSender(
            published_sender(self.locations, name),
            lambda: self.registration,
            ledger=self.ledger,
            wall_ms=self.clock.wall_ms,
            capabilities=capabilities,
        )

    def state(self, sender: WireSender, message_id: str) -> str | None:
        for row in self.snapshot().rows:
            if (row.sender_instance_id, row.message_id) == (sender.instance_id, message_id):
                return row.state
        return None

    async def endpoint_idle(self) -> None:
        """Wait until the endpoint serves no connection (see tests.support.socket_peers for why)."""
        current = self.runtime._current  # no public handle on the endpoint's counters
        if current is None:
            return
        endpoint = current.endpoint
        await eventually(lambda: endpoint.statistics().open_connections == 0)


@dataclass
class Receiver(SessionViews):
    """The session under test: its runtime, host, turns, fake clock and the wire ledger."""

    runtime: SessionRuntime
    host: ScriptedHost
    turns: Turns
    clock: FakeClock
    locations: Locations
    ledger: Ledger
    #: Every row change the runtime reported (``on_row``), across incarnations.
    row_events: list[Row]

    async def wait_state(self, sender: WireSender, message_id: str, state: str) -> None:
        await eventually(lambda: self.state(sender, message_id) == state)

    def advance(self, seconds: float) -> None:
        """Move admission time forward and wake the runtime's maintenance loop."""
        self.clock.advance(seconds)
        self.runtime.on_session_info_changed()

    def published_updated_at(self) -> int | None:
        """``updatedAt`` of the registration file as it is on disk now."""
        path = self.locations.registration_path(self.registration.instance_id)
        try:
            with open(path, encoding="utf-8") as file:
                return int(json.load(file)["updatedAt"])
        except (OSError, ValueError, KeyError):
            return None

    async def maintenance_pass(self) -> None:
        """Return once a whole pass of the runtime's maintenance loop (tick, flush, refresh) has
        run after this call began.

        Each round steps the fake *wall* clock by 1 ms (admission's deadlines use the monotonic
        clock, which does not move), wakes the loop and waits for the registration it rewrites at
        the end of its pass to carry that stamp. The pass that writes the second stamp started
        after the pass that wrote the first one had begun writing, so all of it ran after the
        call began; one round would not do, since a pass already running may write the stamp.
        """
        for _ in range(2):
            self.clock.step_wall(1)
            stamp = self.clock.wall_ms()
            self.runtime.on_session_info_changed()
            await eventually(lambda stamp=stamp: self.published_updated_at() == stamp)  # type: ignore[misc]


def runtime_options(clock: FakeClock | None = None, **overrides: Any) -> RuntimeOptions:
    fields: dict[str, Any] = {"with_git": False}
    if clock is not None:
        fields["clock"] = clock.clock
    fields.update(overrides)
    return RuntimeOptions(**fields)


@asynccontextmanager
async def running_receiver(
    locations: Locations,
    *,
    host: ScriptedHost | None = None,
    clock: FakeClock | None = None,
    **options: Any,
) -> AsyncIterator[Receiver]:
    """Run a :class:`SessionRuntime` on a scripted host until the block ends, then stop it."""
    host = host or ScriptedHost()
    clock = clock or FakeClock()
    row_events: list[Row] = []
    runtime = SessionRuntime(
        host,
        locations=locations,
        options=runtime_options(clock, **options),
        on_row=row_events.append,
    )
    receiver = Receiver(
        runtime=runtime,
        host=host,
        turns=Turns(host, runtime),
        clock=clock,
        locations=locations,
        ledger=Ledger(),
        row_events=row_events,
    )
    async with anyio.create_task_group() as group:
        await group.start(runtime.run)
        try:
            yield receiver
            await receiver.endpoint_idle()
        finally:
            with anyio.CancelScope(shield=True):
                await runtime.stop()
            group.cancel_scope.cancel()


def assert_accounted(receiver: Receiver, *, all_final: bool = False) -> Snapshot:
    """Every admitted message has exactly one row, in one state its receipt allows; refused
    messages have none; the refusal counters are exactly the wire's refusals."""
    snapshot = receiver.snapshot()
    keys = [(row.sender_instance_id, row.message_id) for row in snapshot.rows]
    assert len(keys) == len(set(keys)), "a message has more than one row"
    admitted = receiver.ledger.admitted()
    assert set(keys) == set(admitted), (sorted(keys), sorted(admitted))
    assert snapshot.admitted == len(admitted)
    for row in snapshot.rows:
        receipt = admitted[(row.sender_instance_id, row.message_id)]
        assert row.state in ROW_STATES, row
        assert row.state in _AFTER_RECEIPT[receipt], (receipt, row)
        if all_final:
            assert row.final, row
    assert snapshot.refusals == dict(receiver.ledger.refusals())
    return snapshot


@asynccontextmanager
async def headless_session(
    locations: Locations,
    name: str,
    *,
    clock: FakeClock | None = None,
    busy_s: float = 0.05,
    **options: Any,
) -> AsyncIterator[tuple[HeadlessHost, SessionRuntime]]:
    """A second real session (simulated turns) serving until the block ends.

    Its listings wait for a probe as long as for anything that must happen, unless ``exchange``
    says otherwise: on a loaded machine the contract's 350 ms can pass before a live receiver
    answers, and a send would find no target; tests of probe deadlines pass their own.
    """
    options.setdefault("exchange", ExchangeConfig(probe_deadline_s=MUST_HAPPEN_S))
    host = HeadlessHost(name=name, busy_s=busy_s)
    runtime = SessionRuntime(host, locations=locations, options=runtime_options(clock, **options))
    async with anyio.create_task_group() as group:
        await group.start(serve_inbox, host, runtime)
        try:
            yield host, runtime
            current = runtime._current
            if current is not None:
                endpoint = current.endpoint
                await eventually(lambda: endpoint.statistics().open_connections == 0)
        finally:
            group.cancel_scope.cancel()


def last_rows(receiver: Receiver) -> dict[tuple[str, str], Row]:
    """The last row the runtime reported for every message, over all its incarnations."""
    last: dict[tuple[str, str], Row] = {}
    for row in receiver.row_events:
        last[(row.sender_instance_id, row.message_id)] = row
    return last


def assert_accounted_bounded(receiver: Receiver, *, all_final: bool = False) -> Snapshot:
    """:func:`assert_accounted` for one incarnation whose status rows hit their bound.

    The snapshot keeps at most 512 rows, so after more admissions it lacks some. Then: every row
    left belongs to an admitted message and is in a state its receipt allows; the admitted
    messages without a row are exactly ``evicted_rows`` many, and each was in a final state
    (per the row events) when it was evicted — a pending row is never evicted.
    """
    snapshot = receiver.snapshot()
    keys = [(row.sender_instance_id, row.message_id) for row in snapshot.rows]
    assert len(keys) == len(set(keys)), "a message has more than one row"
    admitted = receiver.ledger.admitted()
    assert set(keys) <= set(admitted), sorted(set(keys) - set(admitted))
    assert snapshot.admitted == len(admitted)
    for row in snapshot.rows:
        receipt = admitted[(row.sender_instance_id, row.message_id)]
        assert row.state in _AFTER_RECEIPT[receipt], (receipt, row)
        if all_final:
            assert row.final, row
    evicted = set(admitted) - set(keys)
    assert len(evicted) == snapshot.evicted_rows, (len(evicted), snapshot.evicted_rows)
    last = last_rows(receiver)
    for key in evicted:
        row = last[key]
        assert row.final, row
        assert row.state in _AFTER_RECEIPT[admitted[key]], (admitted[key], row)
    assert snapshot.refusals == dict(receiver.ledger.refusals())
    return snapshot


def assert_accounted_across(receiver: Receiver, *, all_final: bool = False) -> dict[str, int]:
    """Accounting that survives a reload: the ledger spans incarnations, the snapshot does not.

    From the row events of every incarnation: each admitted message has rows, the last in a
    state its receipt allows; no refused message ever had a row. Returns the last states counted.
    """
    admitted = receiver.ledger.admitted()
    last = last_rows(receiver)
    assert set(last) == set(admitted), (sorted(last), sorted(admitted))
    for key, receipt in admitted.items():
        row = last[key]
        assert row.state in ROW_STATES, row
        assert row.state in _AFTER_RECEIPT[receipt], (receipt, row)
        if all_final:
            assert row.final, row
    return dict(Counter(row.state for row in last.values()))
