"""Spec §10 items 15 and 16: the runtime as a *sender*, against a scripted receiver on a socket.

The scripted receiver (:mod:`tests.support.fake_receiver`) is published like a live session, so
the runtime's ``send`` finds it by name through a real listing (whose probe is the script's first
step too), and it records every line it receives: a test counts the message frames exactly.

The sending session makes no listing of its own at start-up (``listing_at_start=False``): under
load it could land after a test's send and add a probe to the frames a fake receiver counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import pytest

from pi_cross_session._internal.plugin.reports import SendReport
from pi_cross_session._internal.protocol.capabilities import ADVERTISED
from pi_cross_session._internal.protocol.io.exchange import ExchangeConfig
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import Registration
from tests.support.fake_receiver import (
    ABSENT,
    CLOSE,
    SILENT,
    FakeReceiver,
    Reply,
    Step,
    ready,
    response_body,
    response_line,
    scripted_peer,
)
from tests.support.wire_session import assert_accounted, on_disk, running_receiver

pytestmark = pytest.mark.anyio

PEER = "scripted-peer"


def _messages(fake: FakeReceiver) -> list[dict[str, Any]]:
    return [item.body for item in fake.received if item.kind == "message"]


def _hellos(fake: FakeReceiver) -> list[dict[str, Any]]:
    return [item.body for item in fake.received if item.kind == "hello"]


def _check_one_message_written(fake: FakeReceiver, report: SendReport, sender_id: str) -> None:
    messages = _messages(fake)
    assert len(messages) == 1, messages
    assert messages[0]["messageId"] == report.message_id
    # One authenticated connection: no retry, not even on another connection.
    (send_hello,) = [hello for hello in _hellos(fake) if hello.get("from") is not None]
    assert send_hello["from"]["instanceId"] == sender_id
    assert send_hello["capabilities"] == list(ADVERTISED)


@pytest.mark.parametrize(
    "capabilities",
    [ABSENT, (), ("some-future-capability",)],
    ids=["no-capabilities-field", "empty-list", "other-capability"],
)
async def test_item15_a_receiver_without_the_capability_gets_unsupported_and_no_message(
    locations: Locations, capabilities: object
) -> None:
    def steps(registration: Registration) -> Sequence[Step]:
        return [ready(registration, capabilities=capabilities)]

    async with (
        running_receiver(locations, listing_at_start=False) as rx,
        scripted_peer(locations, PEER, steps) as fake,
    ):
        report = await rx.runtime.send(PEER, "hello, old peer")
        assert (report.ok, report.status, report.state, report.retryable) == (
            False,
            "unsupported",
            "refused",
            False,
        )
        assert not report.message_written
        assert fake.count("message") == 0
        assert fake.received  # it was reached: a probe and the send's hello
        assert [h.get("from") is not None for h in _hellos(fake)] == [False, True]
        assert rx.runtime.remaining_budget() == 255  # the attempt was paid for
        assert_accounted(rx)


async def test_item16_receipt_loss_is_connection_closed_receipt_unknown_one_message(
    locations: Locations,
) -> None:
    def steps(registration: Registration) -> Sequence[Step]:
        return [ready(registration), CLOSE]  # closes on reading the message, without a receipt

    async with (
        running_receiver(locations, listing_at_start=False) as rx,
        scripted_peer(locations, PEER, steps) as fake,
    ):
        report = await rx.runtime.send(PEER, "will the receipt arrive?")
        assert (report.ok, report.status, report.state, report.retryable) == (
            False,
            "connection_closed",
            "receipt_unknown",
            False,
        )
        assert report.message_written
        await fake.settled()
        _check_one_message_written(fake, report, rx.registration.instance_id)
        assert_accounted(rx)


async def test_item16_a_silent_peer_is_a_timeout_at_the_send_deadline_one_message(
    locations: Locations,
) -> None:
    def steps(registration: Registration) -> Sequence[Step]:
        return [ready(registration), SILENT]

    exchange = ExchangeConfig(send_deadline_s=0.5)
    async with (
        running_receiver(locations, exchange=exchange, listing_at_start=False) as rx,
        scripted_peer(locations, PEER, steps) as fake,
    ):
        await rx.runtime.list_peers()
        report = await rx.runtime.send(PEER, "anyone there?")
        assert (report.ok, report.status, report.state, report.retryable) == (
            False,
            "timeout",
            "receipt_unknown",
            False,
        )
        assert report.message_written
        await fake.settled()
        _check_one_message_written(fake, report, rx.registration.instance_id)
        assert_accounted(rx)


@pytest.mark.parametrize("how", ["stop", "reload"])
async def test_item16_shutdown_during_a_send_is_cancelled_receipt_unknown_one_message(
    locations: Locations, how: str
) -> None:
    def steps(registration: Registration) -> Sequence[Step]:
        return [ready(registration), SILENT]

    reports: list[SendReport] = []
    async with (
        running_receiver(locations, listing_at_start=False) as rx,
        scripted_peer(locations, PEER, steps) as fake,
    ):
        registration = rx.registration

        async def send() -> None:
            reports.append(await rx.runtime.send(PEER, "in flight at shutdown"))

        async with anyio.create_task_group() as group:
            group.start_soon(send)
            await fake.wait_for(lambda: fake.count("message") == 1)
            started = anyio.current_time()
            await (rx.runtime.stop() if how == "stop" else rx.runtime.reload())
        assert anyio.current_time() - started < 2  # cancelled, not waited out (5 s deadline)
        (report,) = reports
        assert (report.ok, report.status, report.state, report.retryable) == (
            False,
            "cancelled",
            "receipt_unknown",
            False,
        )
        assert report.message_written
        await fake.settled()
        _check_one_message_written(fake, report, registration.instance_id)
        # The incarnation that sent is gone from the agent dir.
        assert not on_disk(locations.registration_path(registration.instance_id))
        assert not on_disk(registration.socket_path)
        if how == "stop":
            after = await rx.runtime.send(PEER, "after the shutdown")
            assert (after.ok, after.status) == (False, "not_ready")
            assert fake.count("message") == 1
        else:  # a new incarnation, with its own fresh budget, took over
            assert rx.registration.instance_id != registration.instance_id
            assert rx.runtime.remaining_budget() == 256


def _ready_to_probes_only(registration: Registration) -> Sequence[Step]:
    """``ready`` to a probe; to an authenticated hello, nothing (the sender waits)."""

    def make(frame: Any) -> bytes:
        if isinstance(frame, dict) and frame.get("from") is None:
            body = response_body(frame, ok=True, status="ready", registration=registration)
            return response_line(body)
        return b""

    return [Reply(make)]


async def test_item16_shutdown_before_the_message_frame_reports_it_was_not_written(
    locations: Locations,
) -> None:
    reports: list[SendReport] = []
    async with (
        running_receiver(locations, listing_at_start=False) as rx,
        scripted_peer(locations, PEER, _ready_to_probes_only) as fake,
    ):

        async def send() -> None:
            reports.append(await rx.runtime.send(PEER, "never written"))

        async with anyio.create_task_group() as group:
            group.start_soon(send)
            await fake.wait_for(lambda: len(_hellos(fake)) == 2)  # the probe's, then the send's
            await rx.runtime.stop()
        await fake.settled()
        (report,) = reports
        assert (report.status, report.state) == ("cancelled", "receipt_unknown")
        assert fake.count("message") == 0
        assert not report.message_written


async def test_item13_an_oversized_outbound_message_costs_no_budget_unit(
    locations: Locations,
) -> None:
    # A deliberate deviation (docs/protocol.md): the reference spends the unit before it finds
    # the frame too large; we check the size first, so a message that can never be sent is free.
    def steps(registration: Registration) -> Sequence[Step]:
        return [ready(registration)]

    async with (
        running_receiver(locations, listing_at_start=False) as rx,
        scripted_peer(locations, PEER, steps) as fake,
    ):
        text = "界" * 400_000  # 400,000 UTF-16 units (allowed), 1.2 MB of UTF-8 (too large)
        report = await rx.runtime.send(PEER, text)
        assert (report.status, report.state, report.message_written) == (
            "message_too_large",
            "refused",
            False,
        )
        assert fake.count("message") == 0
        assert rx.runtime.remaining_budget() == 256
