"""The socket file deleted under a running server.

The listener keeps running on its unlinked inode, but nobody can reach it by path any more. A
sender's vetting ``lstat`` fails first (spec §2), so an exchange ends at once with the errno name
``ENOENT`` and never connects, let alone hangs; a session that addresses it through a listing gets
``not_found``, since the probe fails while the pid is alive (hidden, never reaped). Shutdown still
works: the socket's ``rm -f`` finds nothing, the registration is removed, queued messages end
``dropped_shutdown``, and nothing is reported as an error.
"""

from __future__ import annotations

import os
import uuid

import anyio
import pytest

from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.frames import Message
from pi_cross_session._internal.protocol.io.discovery import list_peers
from pi_cross_session._internal.protocol.io.exchange import ExchangeError, Exchanger
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.security.io import fs
from tests.support.clocks import FakeClock
from tests.support.socket_peers import as_sender
from tests.support.wire_session import assert_accounted, headless_session, on_disk, running_receiver

pytestmark = [pytest.mark.anyio, pytest.mark.faults]


def message(wall_ms: int) -> Message:
    return Message(
        v=1,
        type="message",
        request_id=str(uuid.uuid4()),
        message_id=str(uuid.uuid4()),
        text="is anyone there?",
        summary="ping",
        sent_at=wall_ms,
    )


async def test_a_deleted_socket_makes_the_session_unreachable_at_once_and_shutdown_stays_clean(
    locations: Locations,
) -> None:
    clock = FakeClock()
    async with (
        running_receiver(locations, clock=clock) as rx,
        headless_session(locations, "observer", clock=clock) as (_, observer),
    ):
        alpha = rx.sender("alpha")
        assert (await alpha.send(message_id="done")).status == "submitted"
        rx.turns.settle_submissions()
        rx.turns.user_turn()
        assert (await alpha.send(message_id="waiting")).status == "queued"
        target = rx.registration
        await rx.endpoint_idle()

        os.unlink(target.socket_path)

        # A direct exchange: refused by the vetting lstat, before any connection.
        exchanger = Exchanger(locations, fs)
        with pytest.raises(ExchangeError) as probe:
            await exchanger.probe(target)
        with pytest.raises(ExchangeError) as send:
            await exchanger.send(
                target, sender=as_sender(alpha.registration), message=message(clock.wall_ms())
            )
        for failure in (probe.value, send.value):
            assert failure.code == "ENOENT"
            assert (failure.frames_written, failure.message_written) == (0, False)
            assert failure.verdict.state == "refused"
        with pytest.raises(FileNotFoundError):
            await anyio.connect_unix(target.socket_path)

        # Through a session: the listing hides it (probe failed, pid alive), so not_found.
        report = await observer.send(target.instance_id, "hello?")
        assert (report.ok, report.status, report.message_written) == (
            False,
            Code.NOT_FOUND,
            False,
        )
        listing = await list_peers(
            locations, fs, exchanger.is_live, self_instance_id=None, with_git=False
        )
        observer_id = observer.registration().instance_id  # type: ignore[union-attr]
        assert [peer.instance_id for peer in listing.peers] == [observer_id]
        # Hidden: the receiver, and alpha (a sender with no listener at all); both pids live.
        assert (listing.hidden, listing.reaped) == (2, 0)
        assert on_disk(locations.registration_path(target.instance_id))  # alive: not reaped

        # Nothing reached the receiver meanwhile.
        assert [row.message_id for row in rx.snapshot().rows] == ["done", "waiting"]
        assert_accounted(rx)

    # Shutdown (the end of the block) was clean: no error, no files, every message final.
    assert rx.runtime.last_error is None
    assert not on_disk(locations.registration_path(target.instance_id))
    assert not on_disk(target.socket_path)
    states = {row.message_id: row.state for row in rx.snapshot().rows}
    assert states == {"done": Code.SUBMITTED, "waiting": Code.DROPPED_SHUTDOWN}
    assert_accounted(rx, all_final=True)
