"""``pi-cross-session peers``: the live sessions, read-only.

A listing needs no ``from`` (a liveness probe is an exchange without a sender), so ``peers`` uses
no command-line identity: it never waits for one, never publishes a registration, and never
creates a file or directory (:class:`~.readonly_files.ReadOnlyFiles`). A missing peers dir (a
mistyped ``PI_CODING_AGENT_DIR``, say) is an empty listing, not a tree created on the spot. Like
every lister it still reaps the registration of a session whose process is proven dead (spec
§1.5) and repairs the mode of a peers dir of ours.

Fast when there is nothing to list: a missing or empty peers dir is answered without the probe,
the exchange, the event loop or the registration models (see docs/performance.md and
``bench/cli_start.py``).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pi_cross_session.cli import exits
from pi_cross_session.cli.console import Console
from pi_cross_session.protocol import paths

if TYPE_CHECKING:
    from pi_cross_session.protocol.discovery import Listing
    from pi_cross_session.protocol.registration import PublicPeer


def _anything_to_list(locations: paths.Locations) -> bool:
    """False when there is no peers dir, or a private one of ours holds no registration file;
    anything else needs the full listing (which repairs a loose mode, or refuses the dir)."""
    from pi_cross_session.security import fs

    state = fs.inspect_private_dir(locations.peers_dir).state
    if state is fs.DirState.MISSING:
        return False
    if state is not fs.DirState.PRIVATE:
        return True
    window = fs.list_registration_names(locations.peers_dir, limit=1)
    return bool(window.names)


async def list_live(locations: paths.Locations) -> Listing:
    """The live peers, newest first, with git metadata, and how many registrations were left
    unread past the listing window; nothing is created."""
    from pi_cross_session.cli.readonly_files import ReadOnlyFiles
    from pi_cross_session.protocol import discovery
    from pi_cross_session.protocol.exchange import Exchanger
    from pi_cross_session.security import fs

    exchanger = Exchanger(locations, fs)
    return await discovery.list_peers(
        locations,
        ReadOnlyFiles(),
        exchanger.is_live,
        self_instance_id=None,
        probe_guard_s=exchanger.listing_guard_s,
    )


def peers_of(locations: paths.Locations, console: Console) -> tuple[Sequence[PublicPeer], int]:
    """The live peers and the count of registrations left unread (blocking: runs an event loop
    only when there is something to probe)."""
    if not os.path.lexists(locations.peers_dir):
        return (), 0  # nothing there to judge or to list
    console.enable_logging()  # from here on, the file layer and the probes may log
    if not _anything_to_list(locations):
        return (), 0
    import anyio

    listing = anyio.run(list_live, locations)
    return listing.peers, listing.unread


def run(args: argparse.Namespace, console: Console) -> int:
    """List the live sessions, as a table or as JSON."""
    peers, unread = peers_of(paths.resolve(), console)
    if args.json:
        console.json({"peers": [peer.to_dict() for peer in peers], "unread": unread})
    else:
        from pi_cross_session.cli import words

        console.result(words.peer_table(peers))
        if unread:
            from pi_cross_session.plugin.render import unread_line

            console.result(str(unread_line(unread)))
    return exits.EXIT_OK
