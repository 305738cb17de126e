"""Incarnations at the wire (spec §5.6, spec §5.7):
reload, stop, and the latches a host can trigger.

A reload must give a new instance id, token and socket with a fresh budget, dedup and status
table, and the old registration and socket must be gone; a stop removes both and ends every
queued message as ``dropped_shutdown``. A host that throws from ``submit`` gets
``injection_failed`` and latches the inbox.
"""

from __future__ import annotations

import anyio
import pytest

from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.security.admission import Phase
from pi_cross_session._internal.security.turns import TurnEnding
from tests.support import raw_client
from tests.support.bounds import MUST_HAPPEN_S
from tests.support.scripted_host import ScriptedHost
from tests.support.wire_session import assert_accounted, on_disk, running_receiver

pytestmark = pytest.mark.anyio


async def test_reload_mints_a_new_incarnation_with_fresh_state_and_removes_the_old_one(
    locations: Locations,
) -> None:
    async with running_receiver(locations, budget=10) as rx:
        alpha = rx.sender("alpha")
        assert (await alpha.send("settled text", message_id="m-1")).status == "submitted"
        rx.turns.settle_submissions()
        rx.turns.user_turn()
        assert (await alpha.send(message_id="m-2")).status == "queued"
        assert (await alpha.send("settled text", message_id="m-3")).status == "duplicate"
        assert rx.runtime.remaining_budget() == 8
        assert_accounted(rx)
        old = rx.registration
        await rx.endpoint_idle()

        await rx.runtime.reload()

        new = rx.registration
        assert rx.runtime.incarnations == 2
        assert new.id == old.id  # the host session is the same
        assert new.instance_id != old.instance_id
        assert new.token != old.token
        assert new.socket_path != old.socket_path
        # The old incarnation's queued message ended with it.
        assert [(e.message_id, e.state) for e in rx.row_events if e.message_id == "m-2"][-1] == (
            "m-2",
            "dropped_shutdown",
        )
        # Its registration and socket are gone: nobody can reach it any more.
        assert not on_disk(locations.registration_path(old.instance_id))
        assert not on_disk(old.socket_path)
        with pytest.raises(FileNotFoundError):
            await anyio.connect_unix(old.socket_path)
        # The old identity and token are refused at the new socket.
        stale_hello = raw_client.hello(old, sender=alpha.registration, request_id="stale")
        with anyio.fail_after(MUST_HAPPEN_S):
            (refusal,) = await raw_client.exchange_raw(
                new.socket_path, raw_client.line(stale_hello)
            )
        assert (refusal.ok, refusal.status, refusal.request_id) == (
            False,
            "authentication_failed",
            "stale",
        )

        # Fresh budget, rows, dedup and counters.
        snapshot = rx.snapshot()
        assert (snapshot.remaining_budget, snapshot.total_budget) == (10, 10)
        assert (snapshot.rows, snapshot.admitted, snapshot.refusals) == ((), 0, {})
        assert (snapshot.phase, snapshot.stopped, snapshot.shut_down) == (Phase.IDLE, False, False)
        rx.ledger.clear()
        rx.turns.end(TurnEnding.STOP)  # the user turn of before ends in the new incarnation
        assert (await alpha.status("m-2")).status == "unknown"  # the old table is gone
        assert (await alpha.send("settled text", message_id="m-1")).status == "submitted"
        rx.turns.settle_submissions()
        assert rx.runtime.remaining_budget() == 9
        assert_accounted(rx, all_final=True)


async def test_stop_removes_registration_and_socket_and_drops_queued_as_shutdown(
    locations: Locations,
) -> None:
    async with running_receiver(locations) as rx:
        alpha = rx.sender("alpha")
        assert (await alpha.send(message_id="m-1")).status == "submitted"
        rx.turns.settle_submissions()
        rx.turns.user_turn()
        assert (await alpha.send(message_id="m-2")).status == "queued"
        assert (await alpha.send(message_id="m-3")).status == "queued"
        registration = rx.registration
        await rx.endpoint_idle()

        await rx.runtime.stop()

        assert not on_disk(locations.registration_path(registration.instance_id))
        assert not on_disk(registration.socket_path)
        with pytest.raises(FileNotFoundError):
            await anyio.connect_unix(registration.socket_path)
        snapshot = assert_accounted(rx, all_final=True)  # the last incarnation's, as it stopped
        assert snapshot.shut_down
        assert snapshot.queued == 0
        assert {row.message_id: row.state for row in snapshot.rows} == {
            "m-1": "submitted",
            "m-2": "dropped_shutdown",
            "m-3": "dropped_shutdown",
        }
        assert [len(rx.host.calls)] == [1]
        assert rx.runtime.registration() is None
        assert rx.runtime.remaining_budget() is None
        assert not rx.runtime.resume().reopened
        assert (await rx.runtime.send("anyone", "hello")).status == "not_ready"
        await rx.runtime.stop()  # idempotent


async def test_a_host_that_raises_in_submit_gives_injection_failed_and_latches(
    locations: Locations,
) -> None:
    host = ScriptedHost(failure=RuntimeError("the host is full"))
    async with running_receiver(locations, host=host) as rx:
        alpha = rx.sender("alpha")
        reply = await alpha.send(message_id="m-1")
        assert (reply.ok, reply.status, reply.retryable) == (False, "injection_failed", False)
        assert [(c.delivery.message_id, c.taken) for c in host.calls] == [("m-1", False)]
        status = await alpha.status("m-1")
        assert status.status == "injection_failed"
        assert status.error is not None
        assert "the host is full" in status.error
        assert rx.snapshot().stopped
        assert (await alpha.send(message_id="m-2")).status == "stopped"
        assert rx.runtime.remaining_budget() == 255  # committed before the failure: not refunded
        host.failure = None
        assert rx.runtime.resume().reopened
        assert (await alpha.send(message_id="m-3")).status == "submitted"
        rx.turns.settle_submissions()
        assert_accounted(rx, all_final=True)


async def test_a_submission_that_starts_no_turn_within_5_s_latches(locations: Locations) -> None:
    async with running_receiver(locations) as rx:
        alpha = rx.sender("alpha")
        assert (await alpha.send(message_id="m-1")).status == "submitted"
        rx.clock.advance(4.5)
        await rx.maintenance_pass()
        assert not rx.snapshot().stopped
        assert (await alpha.send()).status == "busy"  # still waiting for its turn: preflight
        rx.clock.advance(0.5)
        await rx.maintenance_pass()
        snapshot = rx.snapshot()
        assert (snapshot.stopped, snapshot.phase) == (True, Phase.IDLE)
        assert (await alpha.send()).status == "stopped"
        assert (await alpha.status("m-1")).status == "submitted"  # a row never goes back
        assert rx.runtime.resume().reopened
        assert_accounted(rx, all_final=True)
