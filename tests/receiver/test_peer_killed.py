"""A sender process SIGKILLed in the middle of an exchange.

A real OS process (:mod:`tests.receiver.sender_process`) publishes its registration, opens a
connection to a live receiver, is answered ``ready`` to its authenticated hello, and then is
killed — either right there, or after writing 600,000 bytes of a message frame of almost 1 MiB.

The receiver sees the connection end (the kernel closes it with the process), keeps serving,
admits nothing from the half exchange (no row, no budget, no host submission), and the sender's
registration — left behind, since SIGKILL runs no cleanup — is hidden by listings while its pid is
taken (even as a zombie) and reaped only once ``kill(pid, 0)`` proves it gone (spec §1.5).

The receiver's idle and connection deadlines are raised for these tests, so that the only thing
that can end the victim's connection is its death.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import anyio
import pytest

from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.io.endpoint import EndpointConfig
from pi_cross_session._internal.protocol.limits import LIFETIME_BUDGET
from pi_cross_session._internal.protocol.paths import Locations
from tests.support.processes import WatchedProcess
from tests.support.waiting import eventually
from tests.support.wire_session import Receiver, assert_accounted, running_receiver

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.faults,
    pytest.mark.skipif(not hasattr(os, "waitid"), reason="needs waitid(WNOWAIT)"),
]

SCRIPT = str(Path(__file__).with_name("sender_process.py"))
#: Deadlines no test reaches: only the victim's death may end its connection.
PATIENT = EndpointConfig(connection_deadline_s=600.0, idle_after_hello_s=600.0)


def start_victim(rx: Receiver, mode: str) -> WatchedProcess:
    target = rx.registration
    spec = {
        "id": target.id,
        "instanceId": target.instance_id,
        "token": target.token,
        "socketPath": target.socket_path,
    }
    env = dict(os.environ)
    env["PI_CODING_AGENT_DIR"] = rx.locations.agent_dir
    env["PYTHONUNBUFFERED"] = "1"
    argv = [sys.executable, SCRIPT, "--target", json.dumps(spec), "--mode", mode]
    return WatchedProcess(argv, env=env, label=f"victim ({mode})")


def end(process: WatchedProcess) -> None:
    if process.process.poll() is None:
        process.process.kill()
    process.process.wait()
    process._join()


def exists(path: str) -> bool:
    return os.path.lexists(path)


def wait_dead_unreaped(pid: int) -> None:
    """Block until ``pid`` has exited, leaving it a zombie (its pid still taken)."""
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)


@pytest.mark.parametrize("mode", ["hello", "mid-frame"])
async def test_a_sender_killed_mid_exchange_leaves_nothing_admitted_and_is_reaped_once_dead(
    locations: Locations, mode: str
) -> None:
    async with running_receiver(locations, endpoint=PATIENT) as rx:
        current = rx.runtime._current  # the endpoint's counters have no public handle
        assert current is not None
        endpoint = current.endpoint
        victim = start_victim(rx, mode)
        try:
            answered = await anyio.to_thread.run_sync(victim.wait_event, "answered")
            assert answered["reply"]["ok"] is True
            assert answered["reply"]["status"] == "ready"
            if mode == "mid-frame":
                partial = await anyio.to_thread.run_sync(victim.wait_event, "partial")
                assert partial["bytes"] < partial["frameBytes"] <= 1_048_576
            registration_path = answered["registrationPath"]
            assert endpoint.statistics().open_connections == 1  # the victim's, held open

            # Alive: its registration (which has no listener) is hidden, never reaped.
            listing = await rx.runtime.list_peers()
            assert (listing.peers, listing.hidden, listing.reaped) == ([], 1, 0)

            os.kill(victim.pid, signal.SIGKILL)
            await anyio.to_thread.run_sync(wait_dead_unreaped, victim.pid)
            await eventually(lambda: endpoint.statistics().open_connections == 0)

            # Dead but not yet waited for: the pid is still taken, so still only hidden.
            listing = await rx.runtime.list_peers()
            assert (listing.peers, listing.hidden, listing.reaped) == ([], 1, 0)
            assert exists(registration_path)

            assert await anyio.to_thread.run_sync(victim.process.wait) == -signal.SIGKILL
            # Now kill(pid, 0) fails with ESRCH: the next listing reaps it.
            listing = await rx.runtime.list_peers()
            assert (listing.peers, listing.hidden, listing.reaped) == ([], 0, 1)
            assert not exists(registration_path)
        finally:
            end(victim)

        # The connection ended by the peer's death, not by one of the receiver's timers.
        stats = endpoint.statistics()
        assert (stats.idle_cuts, stats.deadline_cuts) == (0, 0)
        # Nothing of the half exchange was admitted.
        snapshot = rx.snapshot()
        assert (snapshot.admitted, snapshot.rows) == (0, ())
        assert snapshot.remaining_budget == LIFETIME_BUDGET
        assert rx.host.calls == []

        # And the receiver serves on.
        alpha = rx.sender("alpha")
        assert (await alpha.send(message_id="after")).status == Code.SUBMITTED
        rx.turns.settle_submissions()
        assert rx.state(alpha, "after") == Code.SUBMITTED
        assert (await alpha.status("doomed-message")).status == Code.UNKNOWN  # alpha's view
        assert_accounted(rx, all_final=True)
