"""``pi-cross-session peers``: the live sessions, read-only.

It lists as the library's ``list_peers`` does
(:func:`pi_cross_session._internal.plugin.peer_listing.list_live`): no command-line identity, so it
never waits for one and never publishes a registration, and it creates no file or directory. A
missing peers dir (a mistyped ``PI_CODING_AGENT_DIR``, say) is an empty listing, not a tree created
on the spot. Like every lister it still reaps the registration of a session whose process is proven
dead (spec §1.5) and repairs the mode of a peers dir of ours.

Fast when there is nothing to list: a missing or empty peers dir is answered without the probe,
the exchange or the event loop (see docs/performance.md and ``bench/cli_start.py``). An empty
listing names the agent dir it looked in and how to look in another
(:func:`~pi_cross_session._internal.plugin.render.listings.no_peers`).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pi_cross_session._internal.cli import exits
from pi_cross_session._internal.cli.console import Console
from pi_cross_session._internal.protocol import paths
from pi_cross_session._internal.protocol.io import environment

if TYPE_CHECKING:
    from pi_cross_session._internal.protocol.registration import PublicPeer


def anything_to_list(locations: paths.Locations) -> bool:
    """False when there is no peers dir, or a private one of ours holds no registration file;
    anything else needs the full listing (which repairs a loose mode, or refuses the dir)."""
    from pi_cross_session._internal.security.io import fs

    state = fs.inspect_private_dir(locations.peers_dir).state
    if state is fs.DirState.MISSING:
        return False
    if state is not fs.DirState.PRIVATE:
        return True
    window = fs.list_registration_names(locations.peers_dir, limit=1)
    return bool(window.names)


@dataclass(frozen=True, slots=True)
class Found:
    """What ``peers`` shows: the live peers, the registrations left unread past the listing
    window, and the sessions the listing could not check (out of descriptors)."""

    peers: Sequence[PublicPeer] = ()
    unread: int = 0
    unchecked: int = 0


def peers_of(locations: paths.Locations, console: Console) -> Found:
    """The live peers (blocking: runs an event loop only when there is something to probe)."""
    if not os.path.lexists(locations.peers_dir):
        return Found()  # nothing there to judge or to list
    console.enable_logging()  # from here on, the file layer and the probes may log
    if not anything_to_list(locations):
        return Found()
    import anyio

    from pi_cross_session._internal.plugin.peer_listing import list_live

    listing = anyio.run(list_live, locations)
    return Found(listing.peers, listing.unread, listing.unchecked)


def run(args: argparse.Namespace, console: Console) -> int:
    """List the live sessions, as a table or as JSON."""
    if getattr(args, "remote", False):
        from pi_cross_session._internal.cli.remote_peers import show_remote

        return show_remote(environment.resolve(), console, as_json=args.json)
    locations = environment.resolve()
    found = peers_of(locations, console)
    from pi_cross_session._internal.plugin.capped import capped_sessions

    if args.json:
        peers = [peer.to_dict() for peer in found.peers]
        capped = capped_sessions(locations)
        console.json(
            {
                "peers": peers,
                "unread": found.unread,
                "unchecked": found.unchecked,
                "capped": [] if capped is None else list(capped.names),
            }
        )
        return exits.EXIT_OK
    if not found.peers and not found.unchecked:
        # An empty listing says where it looked, and how to look elsewhere.
        from pi_cross_session._internal.plugin.render.listings import no_peers

        console.result(no_peers(locations.agent_dir))
    else:
        from pi_cross_session._internal.cli import words

        table = words.peer_table(found.peers, unchecked=bool(found.unchecked))
        if table:
            console.result(table)
    capped = capped_sessions(locations)
    if found.unread or found.unchecked or capped is not None:
        from pi_cross_session._internal.plugin.render.listings import (
            capped_line,
            unchecked_line,
            unread_line,
        )

        notes = [
            unread_line(found.unread),
            found.unchecked and unchecked_line(found.unchecked),
            capped and capped_line(capped),
        ]
        console.result("\n".join(note for note in notes if note))
    return exits.EXIT_OK
