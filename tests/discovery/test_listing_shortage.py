"""A listing and a send in a process that runs out of file descriptors (or buffers, or memory).

Nothing learned while short says anything about a peer: a registration that could not be read,
or a probe that could not even open its socket, leaves that peer *unchecked* — not listed, not
hidden, never reaped — and the listing says it is incomplete. A send whose target was not found
among the sessions checked, while some could not be checked, ends ``transport_error`` with
nothing written, never ``not_found``; a send whose connection could not be made says nothing was
sent. Regression: a probe failing with ``EMFILE`` counted as a failed probe, so a peer whose pid
was gone was reaped on no evidence, and a listing with every probe failing read "no peers".
"""

from __future__ import annotations

import errno
import os
import socket
from typing import Any

import anyio
import pytest

from pi_cross_session._internal.plugin import outbound
from pi_cross_session._internal.plugin.outbound import Outbox
from pi_cross_session._internal.plugin.render import listings, sending
from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.frames import Sender
from pi_cross_session._internal.protocol.io.discovery import Listing, list_peers
from pi_cross_session._internal.protocol.io.exchange import ExchangeError, Exchanger
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import PublicPeer, Registration
from pi_cross_session._internal.security.io import fs
from tests.discovery.conftest import dead_pid, make_registration, now_ms, publish
from tests.support.socket_peers import make_message, running_peer

pytestmark = pytest.mark.anyio


def emfile() -> OSError:
    return OSError(errno.EMFILE, os.strerror(errno.EMFILE))


async def refuse_sockets(path: str) -> anyio.abc.ByteStream:
    """A connector in a process out of descriptors: ``socket()`` itself fails."""
    raise emfile()


def leave_socket(path: str) -> None:
    """A socket file that passes the sender's vetting (ours, 0600), as a killed peer leaves it."""
    fs.ensure_private_dir(os.path.dirname(path))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
    finally:
        sock.close()
    fs.make_socket_private(path)


class UnreadableFiles:
    """The file layer, with every registration read failing as it does out of descriptors."""

    def __getattr__(self, name: str) -> Any:
        return getattr(fs, name)

    def read_registration_bytes(self, path: str) -> bytes:
        cause = emfile()
        raise fs.FileOperationError(path, "open", cause) from cause


async def test_a_probe_out_of_descriptors_leaves_the_peer_unchecked_and_never_reaps(
    locations: Locations,
) -> None:
    dead = make_registration(locations, pid=dead_pid())
    path = publish(locations, dead)
    leave_socket(dead.socket_path)
    exchanger = Exchanger(locations, fs, connect=refuse_sockets)
    result = await list_peers(
        locations, fs, exchanger.is_live, self_instance_id=None, with_git=False
    )
    assert result.peers == []
    assert (result.unchecked, result.hidden, result.reaped, result.probe_faults) == (1, 0, 0, 0)
    assert path.exists()  # its pid is gone, but we learned nothing from our own shortage


async def test_a_registration_unreadable_for_lack_of_descriptors_is_unchecked(
    locations: Locations,
) -> None:
    publish(locations, make_registration(locations))
    result = await list_peers(
        locations, UnreadableFiles(), lambda r: _live(r), self_instance_id=None, with_git=False
    )
    assert (result.unchecked, result.unreadable, result.peers) == (1, 0, [])


async def _live(registration: Registration) -> bool:
    await anyio.lowlevel.checkpoint()
    return True


def test_an_incomplete_listing_never_reads_no_peers() -> None:
    assert listings.peer_lines([]) == [listings.NO_PEERS]
    lines = listings.peer_lines([], unchecked=2)
    assert listings.NO_PEERS not in lines
    assert lines == [listings.unchecked_line(2)]
    assert "could not be checked" in listings.listing(None, [], unchecked=2)


async def test_is_live_raises_a_shortage_and_answers_false_for_anything_else(
    locations: Locations,
) -> None:
    target = make_registration(locations)
    leave_socket(target.socket_path)
    with pytest.raises(ExchangeError) as caught:
        await Exchanger(locations, fs, connect=refuse_sockets).is_live(target)
    assert caught.value.code == Code.TRANSPORT_ERROR

    async def refused(path: str) -> anyio.abc.ByteStream:
        raise ConnectionRefusedError(errno.ECONNREFUSED, "refused")

    assert await Exchanger(locations, fs, connect=refused).is_live(target) is False


def outbox_for(
    locations: Locations, listing: Listing, exchanger: Exchanger | None = None
) -> Outbox:
    me = make_registration(locations, name="me")

    async def list_them() -> Listing:
        await anyio.lowlevel.checkpoint()
        return listing

    return Outbox(
        sender=Sender(id=me.id, instance_id=me.instance_id, token=me.token),
        exchanger=exchanger or Exchanger(locations, fs),
        list_peers=list_them,
        wall_ms=now_ms,
    )


async def test_a_target_not_found_among_unchecked_sessions_is_not_not_found(
    locations: Locations,
) -> None:
    report = await outbound.send(
        outbox_for(locations, Listing(peers=[], unchecked=3)), "somebody", "hello"
    )
    assert (report.ok, report.status, report.message_written) == (
        False,
        Code.TRANSPORT_ERROR,
        False,
    )
    assert report.next == sending.NEXT_SHORT_OF_RESOURCES
    assert "3 could not be checked" in (report.detail or "")
    assert "it was not delivered" in sending.send_result(report)
    # Found among the checked ones, or none unchecked: the usual answers.
    plain = await outbound.send(outbox_for(locations, Listing(peers=[])), "somebody", "hi")
    assert plain.status == Code.NOT_FOUND


async def test_a_listing_that_fails_for_lack_of_descriptors_is_a_coded_not_sent(
    locations: Locations,
) -> None:
    me = make_registration(locations, name="me")

    async def failing() -> Listing:
        cause = emfile()
        raise fs.FileOperationError(locations.peers_dir, "list", cause) from cause

    outbox = Outbox(
        sender=Sender(id=me.id, instance_id=me.instance_id, token=me.token),
        exchanger=Exchanger(locations, fs),
        list_peers=failing,
        wall_ms=now_ms,
    )
    report = await outbound.send(outbox, "somebody", "hello")
    assert (report.status, report.message_written) == (Code.TRANSPORT_ERROR, False)
    assert report.detail == sending.listing_short("EMFILE")
    assert report.next == sending.NEXT_SHORT_OF_RESOURCES

    async def broken() -> Listing:
        raise fs.FileOperationError(locations.peers_dir, "list", OSError(errno.EIO, "io"))

    with pytest.raises(fs.FileOperationError):
        await outbound.send(
            Outbox(outbox.sender, outbox.exchanger, broken, now_ms), "somebody", "hello"
        )


async def test_a_send_whose_socket_cannot_be_opened_says_nothing_was_sent(
    locations: Locations,
) -> None:
    async with running_peer(locations, "beta") as beta:
        exchanger = Exchanger(locations, fs, connect=refuse_sockets)
        with pytest.raises(ExchangeError) as caught:
            await exchanger.send(beta.registration, sender=beta.sender, message=make_message("x"))
        error = caught.value
        assert (error.code, error.message_written, error.frames_written) == (
            Code.TRANSPORT_ERROR,
            False,
            0,
        )
        assert "EMFILE" in error.detail
        listing = Listing(
            peers=[PublicPeer.from_registration(beta.registration)],
            registrations={beta.registration.instance_id: beta.registration},
        )
        report = await outbound.send(
            outbox_for(locations, listing, exchanger), beta.registration.instance_id, "hi"
        )
        assert (report.status, report.message_written) == (Code.TRANSPORT_ERROR, False)
        assert report.next == sending.NEXT_SHORT_OF_RESOURCES
        assert "it was not delivered" in sending.send_result(report)
        assert beta.inbox.entries == []
        assert beta.endpoint.statistics().accepted == 0
