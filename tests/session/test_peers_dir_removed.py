"""The peers dir removed (``rm -rf``) under a running session.

What the code does, precisely:

* A registration write never creates the peers dir: only :meth:`Registrar.register` (at start-up)
  and every listing make it (``ensure_private_dir``, 0700). A heartbeat or refresh after the dir
  vanished fails with ``ENOENT`` creating its temp file.
* A **heartbeat** that fails tears the incarnation down (spec §1.4): ``last_error`` is the
  ``ENOENT``, queued messages end ``dropped_shutdown``, the socket is removed, and the dir is not
  recreated by the session.
* A **refresh** (a status change) that fails is logged and survived: the session keeps serving,
  unpublished, until a write succeeds. If a listing — by any session of this agent dir —
  recreated the dir meanwhile (0700), the next write republishes and the session is visible again.
* A listing from another session never crashes on the missing dir: it recreates it and lists.

The session under test makes no listing of its own at start-up (``listing_at_start=False``):
that listing runs in the background and, landing after the removal, would recreate the dir
before the write these tests watch.
"""

from __future__ import annotations

import os
import shutil
import stat

import anyio
import pytest

from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.io.discovery import list_peers
from pi_cross_session._internal.protocol.io.exchange import Exchanger
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.security.io import fs
from tests.session.injection import FaultyFiles, temp_files
from tests.support.bounds import MUST_HAPPEN_S
from tests.support.clocks import FakeClock
from tests.support.waiting import eventually
from tests.support.wire_session import assert_accounted, headless_session, on_disk, running_receiver

pytestmark = [pytest.mark.anyio, pytest.mark.faults]

FAST_HEARTBEAT_S = 0.1
NO_HEARTBEAT_S = 3600.0
TEARDOWN_LIMIT_S = MUST_HAPPEN_S


def dir_mode(path: str) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def remove_peers_dir(locations: Locations) -> None:
    shutil.rmtree(locations.peers_dir)
    assert not on_disk(locations.peers_dir)


async def another_listing(locations: Locations) -> list[str]:
    """A listing as another session makes it (this process, probing for real); the ids."""
    listing = await list_peers(
        locations, fs, Exchanger(locations, fs).is_live, self_instance_id=None, with_git=False
    )
    return [peer.instance_id for peer in listing.peers]


async def test_the_next_heartbeat_fails_and_tears_the_session_down_without_recreating_the_dir(
    locations: Locations, faulty_files: FaultyFiles
) -> None:
    async with running_receiver(
        locations, heartbeat_interval_s=FAST_HEARTBEAT_S, listing_at_start=False
    ) as rx:
        alpha = rx.sender("alpha")
        rx.turns.user_turn()
        assert (await alpha.send(message_id="waiting")).status == "queued"
        registration = rx.registration
        await rx.endpoint_idle()

        remove_peers_dir(locations)
        with anyio.fail_after(TEARDOWN_LIMIT_S):
            await rx.runtime.wait_finished()

        error = rx.runtime.last_error
        assert isinstance(error, fs.FileOperationError), error
        assert error.code == "ENOENT"
        assert faulty_files.outcomes()[-1] == "ENOENT"
        assert not on_disk(locations.peers_dir)  # a write never creates the dir
        assert not on_disk(registration.socket_path)
        assert [row.state for row in rx.snapshot().rows] == [Code.DROPPED_SHUTDOWN]
        assert_accounted(rx, all_final=True)

    # Another session's listing does not crash: it recreates the dir, private, and finds nobody.
    assert await another_listing(locations) == []
    assert dir_mode(locations.peers_dir) == 0o700
    assert os.listdir(locations.peers_dir) == []


async def test_a_failed_refresh_is_survived_and_a_listing_lets_the_next_write_republish(
    locations: Locations, faulty_files: FaultyFiles
) -> None:
    async with running_receiver(
        locations, heartbeat_interval_s=NO_HEARTBEAT_S, listing_at_start=False
    ) as rx:
        registration = rx.registration
        path = locations.registration_path(registration.instance_id)
        assert await another_listing(locations) == [registration.instance_id]

        remove_peers_dir(locations)
        failures = faulty_files.outcomes().count("ENOENT")
        rx.runtime.on_session_info_changed()  # a refresh
        await eventually(lambda: faulty_files.outcomes().count("ENOENT") > failures)

        # Survived, serving on its socket, but unpublished: nobody can find it.
        assert rx.runtime.last_error is None
        assert not on_disk(locations.peers_dir)
        assert on_disk(registration.socket_path)
        assert await another_listing(locations) == []  # this listing recreates the dir
        assert dir_mode(locations.peers_dir) == 0o700

        # The next write finds the dir again and republishes.
        rx.runtime.on_session_info_changed()
        await eventually(lambda: faulty_files.outcomes()[-1] == "ok" and on_disk(path))
        assert await another_listing(locations) == [registration.instance_id]
        assert temp_files(locations) == []

        # Senders must publish again too (their files went with the dir); then all is as before.
        alpha = rx.sender("alpha")
        assert (await alpha.send(message_id="after")).status == "submitted"
        rx.turns.settle_submissions()
        assert_accounted(rx, all_final=True)


async def test_a_session_listing_after_the_removal_recreates_the_dir_and_sends_still_work(
    locations: Locations,
) -> None:
    """Two real sessions; the dir vanishes; the observer's own send lists (recreating the dir),
    does not find the receiver until it republishes, then reaches it."""
    clock = FakeClock()  # one clock for both, so the observer's sentAt is the receiver's now
    async with (
        running_receiver(locations, clock=clock, heartbeat_interval_s=NO_HEARTBEAT_S) as rx,
        headless_session(
            locations, "observer", clock=clock, heartbeat_interval_s=NO_HEARTBEAT_S
        ) as (_, obs),
    ):
        target = rx.registration.instance_id
        remove_peers_dir(locations)

        report = await obs.send(target, "are you there?")
        assert (report.ok, report.status) == (False, Code.NOT_FOUND)
        assert dir_mode(locations.peers_dir) == 0o700

        observer = obs.registration()
        assert observer is not None
        files = [locations.registration_path(i) for i in (target, observer.instance_id)]
        rx.runtime.on_session_info_changed()
        obs.on_session_info_changed()  # the observer republishes too, so it can authenticate
        await eventually(lambda: all(on_disk(path) for path in files))
        report = await obs.send(target, "now?")
        assert (report.ok, report.status) == (True, Code.SUBMITTED)
        rx.turns.settle_submissions()
        rows = rx.snapshot().rows
        assert [(row.message_id, row.state) for row in rows] == [
            (report.message_id, Code.SUBMITTED)
        ]
        rx.ledger.note(rows[0].sender_instance_id, rows[0].message_id, report.status, ok=True)
        assert_accounted(rx, all_final=True)
