"""The MCP adapter's turn model (plugin/hosts/mcp_seat.py): what it reports to the runtime, and
what a failed hand-over does to a real receiver."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp.shared.message import SessionMessage

from pi_cross_session._internal.plugin.hosts.mcp import McpHost, McpOptions
from pi_cross_session._internal.plugin.hosts.mcp_seat import DeliveryMode, Seat, SeatBusyError
from pi_cross_session._internal.plugin.runtime import SessionRuntime
from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.security.admission import Delivery
from pi_cross_session._internal.security.turns import (
    ModelReplied,
    OurMessageStarted,
    TurnEnded,
    TurnEvent,
    TurnStarted,
)
from tests.mcp.kit import receipt_of
from tests.support.clocks import FakeClock
from tests.support.socket_peers import make_registration, published_sender
from tests.support.waiting import eventually
from tests.support.wire_session import Ledger, WireSender, runtime_options


class Reports:
    """Records what the seat tells the runtime, in order."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def on_turn(self, event: TurnEvent) -> None:
        if isinstance(event, TurnStarted):
            self.events.append(f"start {event.by}")
        elif isinstance(event, TurnEnded):
            self.events.append(f"end {event.ending}")
        elif isinstance(event, OurMessageStarted):
            self.events.append(f"delivered {event.message_id}")
        elif isinstance(event, ModelReplied):
            self.events.append("opening over")
        else:
            raise AssertionError(f"the seat reported {event!r}")


def delivery(locations: Locations, message_id: str = "m1") -> Delivery:
    sender = make_registration(locations, "alice")
    return Delivery(message_id, sender, "hi", summary="hi", sent_at=0, goal_id=None)


def test_pull_is_busy_with_its_own_work_except_while_a_reader_takes_messages(
    locations: Locations,
) -> None:
    reports = Reports()
    seat = Seat(DeliveryMode.PULL, reports)
    seat.open()
    seat.host_ready()
    assert not seat.is_idle()
    seat.reader_arrived()
    assert seat.is_idle()
    message = delivery(locations)
    seat.take(message)
    assert not seat.is_idle()
    assert seat.handed() is message
    assert seat.is_idle()  # the reader is still here
    seat.reader_left()
    seat.delivered(message)
    assert not seat.is_idle()
    assert reports.events == [
        "start user",  # the host's own work, from the start
        "opening over",
        "end stop",  # a reader arrived
        "start peer",  # a message handed over
        "end stop",  # it is in the result
        "start user",  # the reader left
        "opening over",
        "delivered m1",  # the result is complete
    ]


def test_push_is_idle_once_initialized_except_while_a_notification_is_written(
    locations: Locations,
) -> None:
    reports = Reports()
    seat = Seat(DeliveryMode.PUSH, reports)
    seat.open()
    assert not seat.is_idle()  # not before the host finished its handshake
    seat.host_ready()
    assert seat.is_idle()
    seat.take(delivery(locations))
    assert not seat.is_idle()
    with pytest.raises(SeatBusyError):
        seat.take(delivery(locations, "m2"))
    seat.handed(ok=False)
    assert reports.events == ["start user", "opening over", "end stop", "start peer", "end error"]
    seat.close()
    assert not seat.is_idle()
    with pytest.raises(SeatBusyError):
        seat.take(delivery(locations, "m3"))


def test_a_hand_over_without_a_message_reports_nothing() -> None:
    reports = Reports()
    seat = Seat(DeliveryMode.PUSH, reports)
    assert seat.handed() is None
    assert reports.events == []


class BrokenPipe:
    """A transport whose host is gone: every write fails as the SDK's stream does."""

    async def send(self, item: SessionMessage, /) -> None:
        raise anyio.BrokenResourceError


@pytest.mark.anyio
async def test_a_failed_push_closes_the_inbox_until_the_local_user_resumes(
    locations: Locations, tmp_path: Path
) -> None:
    clock = FakeClock()
    host = McpHost(McpOptions(name="pushy", cwd=str(tmp_path), delivery=DeliveryMode.PUSH))
    runtime = SessionRuntime(
        host, locations=locations, options=runtime_options(clock), on_row=host.observe_row
    )
    seat = host.attach(runtime)
    async with anyio.create_task_group() as group:
        await group.start(runtime.run)
        seat.open()
        seat.host_ready()
        await group.start(host.run_pushes, BrokenPipe())

        def target():  # type: ignore[no-untyped-def]
            registration = runtime.registration()
            assert registration is not None
            return registration

        alice = WireSender(
            published_sender(locations, "alice"), target, ledger=Ledger(), wall_ms=clock.wall_ms
        )
        # The notification never reached the host: no receipt claims it was submitted.
        first = await receipt_of(
            alice.registration, target(), "first", message_id="m1", sent_at=clock.wall_ms()
        )
        assert first is None
        assert (await alice.status("m1")).status == Code.SUBMITTED  # handed over, then failed
        await eventually(lambda: bool(runtime.snapshot() and runtime.snapshot().stopped))  # type: ignore[union-attr]
        snapshot = runtime.snapshot()
        assert snapshot is not None
        assert snapshot.latch_reason == "a turn ended without a clean stop"
        assert (await alice.send("second")).status == Code.STOPPED
        assert host.resume_text().startswith("Inbox reopened")
        assert seat.is_idle()
        # Reopened, it takes the next message again (its write fails too: the host is gone).
        third = await receipt_of(
            alice.registration, target(), "third", message_id="m3", sent_at=clock.wall_ms()
        )
        assert third is None
        assert (await alice.status("m3")).status == Code.SUBMITTED
        host.close()
        with anyio.CancelScope(shield=True):
            await runtime.stop()
        group.cancel_scope.cancel()
