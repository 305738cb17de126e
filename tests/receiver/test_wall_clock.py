"""The wall clock stepping back an hour under a busy receiver (NTP, a suspended VM, a user).

Admission reads two clocks (:class:`~pi_cross_session._internal.security.admission.Clock`): the wall
clock only to judge a message's ``sentAt`` (spec §5 step 6: older than 30 s or more than 5 s ahead
is ``expired``), the monotonic clock for everything that measures time — queue TTLs, the token
bucket, the text-dedup window, the turn-start grace. So after the step:

* a message stamped by a sender whose clock did not step is an hour "in the future": ``expired``;
  the 5 s skew rule holds at its edges (5,000 ms ahead admitted, 5,001 ms refused);
* queued messages expire 30 s of *monotonic* time after they were queued, not an hour later;
* the token bucket neither refills nor drains by the step; the lifetime budget counts on;
* nothing is admitted twice: the message-id ledger and the text window still refuse repeats;
* the accounting invariant holds throughout.
"""

from __future__ import annotations

import pytest

from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.limits import (
    LIFETIME_BUDGET,
    MESSAGE_MAX_FUTURE_SKEW_S,
    QUEUE_TTL_S,
    RATE_CAPACITY,
    RATE_REFILL_PER_S,
)
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.security.turns import TurnEnding
from tests.support.clocks import FakeClock
from tests.support.wire_session import WireSender, assert_accounted, running_receiver

pytestmark = [pytest.mark.anyio, pytest.mark.faults]

HOUR_MS = 3_600_000
SKEW_MS = int(MESSAGE_MAX_FUTURE_SKEW_S * 1000)


async def send_ok(sender: WireSender, message_id: str, **kwargs: object) -> None:
    reply = await sender.send(message_id=message_id, **kwargs)  # type: ignore[arg-type]
    assert (reply.ok, reply.status) == (True, Code.QUEUED), (message_id, reply)


async def test_stepping_the_wall_clock_back_an_hour_moves_only_the_sent_at_window(
    locations: Locations,
) -> None:
    clock = FakeClock()
    async with running_receiver(locations, clock=clock) as rx:
        alpha = rx.sender("alpha")
        beta = rx.sender("beta")
        rx.turns.user_turn()  # busy with a known turn: capable senders' messages queue
        early = [f"early-{n}" for n in range(10)]
        for message_id in early:
            await send_ok(alpha, message_id)

        clock.step_wall(-HOUR_MS)

        # Stamped by a clock that did not step: an hour ahead of ours, so expired (no row).
        reply = await beta.send(message_id="unstepped", age_ms=-HOUR_MS)
        assert (reply.ok, reply.status) == (False, Code.EXPIRED)
        # The 5 s skew rule, at its edges, on the stepped clock.
        await send_ok(beta, "ahead-by-the-limit", age_ms=-SKEW_MS)
        reply = await beta.send(message_id="ahead-past-the-limit", age_ms=-(SKEW_MS + 1))
        assert (reply.ok, reply.status) == (False, Code.EXPIRED)

        # Nothing twice: the same id, or the same text within 30 s of monotonic time.
        reply = await alpha.send(message_id="early-0")
        assert (reply.ok, reply.status) == (False, Code.DUPLICATE)
        reply = await alpha.send("text of early-1", message_id="early-1-again")
        assert (reply.ok, reply.status) == (False, Code.DUPLICATE)

        # The bucket is exactly as the monotonic clock left it: 10 of 30 tokens spent.
        late = [f"late-{n}" for n in range(RATE_CAPACITY - len(early))]
        for message_id in late:
            await send_ok(alpha, message_id)
        reply = await alpha.send(message_id="one-too-many")
        assert (reply.ok, reply.status) == (False, Code.RATE_LIMITED)
        rx.advance(1 / RATE_REFILL_PER_S)  # one token's worth of monotonic time
        await send_ok(alpha, "refilled")
        reply = await alpha.send(message_id="one-too-many-again")
        assert (reply.ok, reply.status) == (False, Code.RATE_LIMITED)
        assert_accounted(rx)

        # Queue TTLs run on monotonic time: everything queued at the start expires 30 s later
        # (not an hour later); "refilled", queued after the advance, is not due yet.
        rx.advance(QUEUE_TTL_S - 1 / RATE_REFILL_PER_S - 0.5)
        await rx.maintenance_pass()
        assert rx.state(alpha, "early-0") == Code.QUEUED
        rx.advance(1.0)
        for message_id in [*early, *late]:
            await rx.wait_state(alpha, message_id, Code.EXPIRED)
        await rx.wait_state(beta, "ahead-by-the-limit", Code.EXPIRED)
        assert rx.state(alpha, "refilled") == Code.QUEUED

        # The turn ends: the survivor is delivered, once.
        rx.turns.end(TurnEnding.STOP)
        await rx.wait_state(alpha, "refilled", Code.SUBMITTED)
        rx.turns.settle_submissions()
        assert [call.delivery.message_id for call in rx.host.calls] == ["refilled"]

        snapshot = assert_accounted(rx, all_final=True)
        admitted = len(early) + len(late) + 2  # alpha's "refilled" and beta's edge case
        assert snapshot.admitted == admitted
        assert snapshot.remaining_budget == LIFETIME_BUDGET - admitted
        assert snapshot.refusals == {
            Code.EXPIRED: 2,
            Code.DUPLICATE: 2,
            Code.RATE_LIMITED: 2,
        }
