"""What a listing left unread past its 512-entry window is said where the listing is shown.

A real session runtime lists a peers dir holding more registrations than a listing reads; the
model's ``list_pi``, the ``/peers`` command and their details must say how many were left unread
(spec §1.5 keeps the window; hiding that something was left out is what we refuse).
"""

from __future__ import annotations

import pytest

from pi_cross_session.plugin import commands, render, tools
from pi_cross_session.protocol.limits import MAX_LISTED_REGISTRATIONS
from pi_cross_session.protocol.paths import Locations
from tests.hostile import files
from tests.support.wire_session import running_receiver

pytestmark = pytest.mark.anyio

DECOYS = MAX_LISTED_REGISTRATIONS + 88


async def test_list_pi_and_peers_say_how_many_registrations_were_left_unread(
    locations: Locations,
) -> None:
    with files.unrelated_process() as pid:
        async with running_receiver(locations) as rx:
            files.write_decoys(locations, DECOYS, pid)
            # The session's own registration is one name more; it is never shown as a peer.
            unread = DECOYS + 1 - MAX_LISTED_REGISTRATIONS
            listed = await tools.run_list_pi(rx.runtime)
            shown = await commands.peers(rx.runtime)
    line = render.unread_line(unread)
    assert line is not None
    assert line.startswith(f"{unread} more registrations were left unread: ")
    assert not listed.is_error
    assert line in listed.text.splitlines()
    assert listed.details["unread"] == unread
    assert shown.splitlines()[-1] == line


def test_the_unread_line_counts_in_words() -> None:
    assert render.unread_line(0) is None
    one = render.unread_line(1)
    assert one is not None
    assert one.startswith("1 more registration was left unread: ")
    assert f"the first {MAX_LISTED_REGISTRATIONS} in the peers dir" in one
    assert render.peer_lines([], unread=0) == [render.NO_PEERS]
    assert render.peer_lines([], unread=3) == [render.NO_PEERS, render.unread_line(3)]
