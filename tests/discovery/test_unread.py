"""What a listing left unread past its 512-entry window is said where the listing is shown.

A real session runtime lists a peers dir holding more registrations than a listing reads; the
model's ``list_pi``, the ``/peers`` command and their details must say how many were left unread
(spec §1.5 keeps the window; hiding that something was left out is what we refuse).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pi_cross_session._internal.plugin import commands, tools
from pi_cross_session._internal.plugin.render import listings
from pi_cross_session._internal.protocol.io.discovery import Listing, list_peers
from pi_cross_session._internal.protocol.io.exchange import Exchanger
from pi_cross_session._internal.protocol.limits import MAX_LISTED_REGISTRATIONS
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.security.io import fs
from tests.files import files
from tests.support.processes import run_cli
from tests.support.wire_session import running_receiver

pytestmark = pytest.mark.anyio

DECOYS = MAX_LISTED_REGISTRATIONS + 88


async def discovery_listing(locations: Locations) -> Listing:
    """A listing as a session makes it (real probes), without git."""
    return await list_peers(
        locations, fs, Exchanger(locations, fs).is_live, self_instance_id=None, with_git=False
    )


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
    line = listings.unread_line(unread)
    assert line is not None
    assert line.startswith(f"{unread} more registrations were left unread: ")
    assert not listed.is_error
    assert line in listed.text.splitlines()
    assert listed.details["unread"] == unread
    assert shown.splitlines()[-1] == line


def test_the_unread_line_counts_in_words() -> None:
    assert listings.unread_line(0) is None
    one = listings.unread_line(1)
    assert one is not None
    assert one.startswith("1 more registration was left unread: ")
    assert f"the first {MAX_LISTED_REGISTRATIONS} in the peers dir" in one
    assert listings.peer_lines([], unread=0) == [listings.NO_PEERS]
    assert listings.peer_lines([], unread=3) == [listings.NO_PEERS, listings.unread_line(3)]


async def test_once_the_decoys_process_is_gone_each_listing_reaps_what_it_reads(
    locations: Locations,
) -> None:
    """What doctor advises for decoys: stop their process; each listing then reaps the ones it
    reads (its window), and the next one the next ones."""
    with files.unrelated_process() as pid:
        files.write_decoys(locations, DECOYS, pid)
        before = await discovery_listing(locations)
    assert (before.reaped, before.hidden, before.unread) == (0, MAX_LISTED_REGISTRATIONS, 88)
    first = await discovery_listing(locations)  # the process is gone now
    assert first.reaped == MAX_LISTED_REGISTRATIONS
    assert first.unread == 88
    second = await discovery_listing(locations)
    assert (second.reaped, second.unread) == (88, 0)
    assert [n for n in os.listdir(locations.peers_dir) if n.endswith(".json")] == []


def test_the_peers_help_mentions_what_was_left_unread(private_agent_dir: Path) -> None:
    shown = run_cli(private_agent_dir, "peers", "--help")
    assert shown.returncode == 0, shown
    text = " ".join(shown.stdout.split())
    assert "reads at most the first 512 registrations" in text
    assert "'unread' in --json" in text
