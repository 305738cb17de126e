"""Delivery receipts (``delivery-receipts-v1``): ``delivered`` only when the host confirmed it.

What is pinned:

* a status query answers ``delivered`` for a submitted message the host showed entering its
  conversation — but only to a sender that advertised the capability; every other sender sees the
  v1 word ``submitted`` (and a message not yet confirmed is ``submitted`` for everyone);
* a sender waiting for delivery reports ``delivered``, ``not_confirmed`` when the wait ran out,
  ``unconfirmable`` when the receiver cannot say, or the final state the message ended in instead
  — never more than it knows; the wait is bounded and resends nothing;
* the status display shows the confirmed row as delivered;
* the command line's ``send --wait S`` and the tool's ``waitSeconds`` take 0 < S ≤ 30 only.
"""

from __future__ import annotations

import json
import math

import anyio
import pytest
from pydantic import ValidationError

from pi_cross_session._internal.cli import main
from pi_cross_session._internal.plugin import commands, reports
from pi_cross_session._internal.plugin.render import sending
from pi_cross_session._internal.plugin.tools import SendPiMessageParams
from pi_cross_session._internal.protocol.capabilities import (
    ADVERTISED,
    CANCEL_SAFE_QUEUE,
    DELIVERY_RECEIPTS,
    GOAL_SCOPED_PEER,
)
from pi_cross_session._internal.protocol.io.endpoint import EndpointConfig
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.security.provenance import Provenance
from pi_cross_session._internal.security.turns import OurMessageStarted, TurnStarted
from tests.support.clocks import FakeClock
from tests.support.socket_peers import running_peer
from tests.support.waiting import eventually
from tests.support.wire_session import assert_accounted, headless_session, running_receiver

pytestmark = pytest.mark.anyio

#: A sender of the reference's generation: it knows the queue but not delivery receipts.
V1_CAPABILITIES = [CANCEL_SAFE_QUEUE, GOAL_SCOPED_PEER]


def test_delivery_receipts_are_advertised_after_the_v1_capabilities() -> None:
    assert ADVERTISED == (CANCEL_SAFE_QUEUE, GOAL_SCOPED_PEER, DELIVERY_RECEIPTS)


async def test_a_confirmed_message_is_delivered_only_to_a_sender_that_asked(
    locations: Locations,
) -> None:
    async with running_receiver(locations) as rx:
        modern = rx.sender("modern")
        older = rx.sender("older", capabilities=V1_CAPABILITIES)
        for sender in (modern, older):
            assert (await sender.send("hello", message_id="m-1")).status == "submitted"
            # Submitted, not yet shown: nobody is told more than that.
            assert (await sender.status("m-1")).status == "submitted"
            rx.runtime.on_turn(TurnStarted(Provenance.PEER))
            rx.runtime.on_turn(OurMessageStarted("m-1", sender.instance_id))
            rx.turns.end()
        assert (await modern.status("m-1")).status == "delivered"
        answer = await older.status("m-1")
        assert answer.status == "submitted"  # the v1 vocabulary, confirmed or not
        assert answer.error is not None
        assert "confirmed" in answer.error
        assert_accounted(rx, all_final=True)
        rows = {row.sender_instance_id: row for row in rx.snapshot().rows}
        assert all(row.state == "submitted" and row.delivered for row in rows.values())
        text = commands.status(rx.runtime, "", commands.HostReport())
        assert text.count("delivered ") == 2
        data = commands.status_data(rx.runtime, commands.HostReport())
        assert [m["delivered"] for m in data["messages"]] == [True, True]


async def test_a_waiting_sender_learns_the_message_was_delivered(locations: Locations) -> None:
    async with (
        headless_session(locations, "alpha", busy_s=0.05) as (alpha_host, _),
        headless_session(locations, "beta") as (_, beta),
    ):
        report = await beta.send("alpha", "please look", wait_s=5)
        assert (report.ok, report.status, report.delivery) == (True, "submitted", "delivered")
        assert "confirmed it entered its conversation" in sending.send_result(report)
        assert sending.send_details(report)["delivery"] == "delivered"
        assert [d.text for d in alpha_host.delivered] == ["please look"]


async def test_without_confirmation_the_wait_ends_not_confirmed(locations: Locations) -> None:
    async with (
        running_receiver(locations, clock=(clock := FakeClock())) as rx,
        headless_session(locations, "beta", clock=clock) as (_, beta),
    ):
        # The scripted host takes the message but never shows it entering a conversation.
        report = await beta.send(rx.registration.instance_id, "hello?", wait_s=0.6)
        assert (report.status, report.delivery) == ("submitted", "not_confirmed")
        assert "not yet confirmed as delivered" in sending.send_result(report)
        assert len(rx.host.submitted) == 1  # asked about, never resent


async def test_a_receiver_without_receipts_is_unconfirmable_at_once(locations: Locations) -> None:
    older = EndpointConfig(capabilities=(CANCEL_SAFE_QUEUE, GOAL_SCOPED_PEER))
    async with (
        running_peer(locations, "legacy", config=older) as legacy,
        headless_session(locations, "beta") as (_, beta),
    ):
        # No polling at all (the receiver cannot say): done long before the 30 s wait would end.
        with anyio.fail_after(15):
            report = await beta.send("legacy", "hi", wait_s=30)
        assert (report.status, report.delivery) == ("submitted", "unconfirmable")
        assert len(legacy.inbox.entries) == 1


async def test_a_message_dropped_while_waiting_reports_how_it_ended(locations: Locations) -> None:
    clock = FakeClock()
    async with (
        running_receiver(locations, clock=clock) as rx,
        headless_session(locations, "beta", clock=clock) as (_, beta),
    ):
        rx.turns.user_turn()  # busy with a known turn: the message is queued
        reports: list[reports.SendReport] = []

        async def send() -> None:
            reports.append(await beta.send(rx.registration.instance_id, "x", wait_s=5))

        async with anyio.create_task_group() as group:
            group.start_soon(send)
            await eventually(lambda: rx.snapshot().queued == 1)
            rx.turns.abort()  # the latch drops it
        (report,) = reports
        assert (report.status, report.delivery) == ("queued", "dropped_cancelled")
        expected = "it will not be delivered: it ended dropped_cancelled"
        assert expected in sending.send_result(report)


async def test_the_command_line_waits_for_delivery(locations: Locations) -> None:
    async with headless_session(locations, "alpha", busy_s=0.05):
        code, out = await _cli("send", "alpha", "from the shell", "--wait", "5", "--json")
    assert code == 0
    report = json.loads(out)
    assert (report["status"], report["lastState"]) == ("submitted", "delivered")


@pytest.mark.parametrize("value", ["0", "-1", "30.5", "nan", "inf", "soon"])
def test_the_command_line_refuses_a_wait_outside_0_to_30_as_a_usage_error(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["send", "alpha", "text", "--wait", value])
    assert exited.value.code == 1  # a usage error, never 2 ("refused")
    assert "--wait" in capsys.readouterr().err


@pytest.mark.parametrize("value", [0, -1, 30.01, math.nan, math.inf])
def test_the_tool_refuses_a_wait_outside_0_to_30(value: float) -> None:
    with pytest.raises(ValidationError):
        SendPiMessageParams.model_validate({"target": "a", "message": "m", "waitSeconds": value})


def test_the_tool_takes_a_wait_up_to_30_seconds() -> None:
    params = SendPiMessageParams.model_validate({"target": "a", "message": "m", "waitSeconds": 30})
    assert params.wait_seconds == 30


async def _cli(*argv: str) -> tuple[int, str]:
    """Run the command line in a worker thread (it runs its own event loop)."""
    import contextlib
    import io

    buffer = io.StringIO()

    def run() -> int:
        with contextlib.redirect_stdout(buffer):
            return main(list(argv))

    code = await anyio.to_thread.run_sync(run)
    return code, buffer.getvalue()
