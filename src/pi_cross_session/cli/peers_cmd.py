"""``pi-cross-session peers``: the live sessions, read-only.

A listing needs no ``from`` (a liveness probe is an exchange without a sender), so ``peers`` uses
no command-line identity: it never waits for one, never publishes a registration, and never
creates a file or directory. A missing peers dir (a mistyped ``PI_CODING_AGENT_DIR``, say) is an
empty listing, not a tree created on the spot. Like every lister it still reaps the registration
of a session whose process is proven dead (spec §1.5) and repairs the mode of a peers dir of ours.

Fast when there is nothing to list: an empty or missing peers dir is answered without the probe,
the exchange or the registration models (docs/performance.md, ``bench/cli_start.py``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from pi_cross_session.cli import exits, words
from pi_cross_session.cli.console import Console
from pi_cross_session.protocol import paths
from pi_cross_session.protocol.limits import MAX_LISTED_REGISTRATIONS, MAX_REGISTRATION_BYTES
from pi_cross_session.security import fs

if TYPE_CHECKING:
    from pi_cross_session.protocol.registration import PublicPeer


class ReadOnlyFiles:
    """The file layer of :mod:`..security.fs` for a listing that must create nothing.

    Only :meth:`ensure_private_dir` differs: a missing dir stays missing (there is nothing to
    list), while an existing one is judged, and its mode repaired, as every lister does.
    """

    def ensure_private_dir(self, path: str, *, uid: int | None = None) -> None:
        """Judge an existing dir as :func:`fs.ensure_private_dir` does; create nothing."""
        if fs.inspect_private_dir(path, uid=uid) == "missing":
            return
        fs.ensure_private_dir(path, uid=uid)

    def list_registration_names(
        self, peers_dir: str, *, limit: int = MAX_LISTED_REGISTRATIONS
    ) -> list[str]:
        """See :func:`fs.list_registration_names` (a missing dir gives no names)."""
        return fs.list_registration_names(peers_dir, limit=limit)

    def read_registration_bytes(
        self, path: str, *, uid: int | None = None, max_bytes: int = MAX_REGISTRATION_BYTES
    ) -> bytes:
        """See :func:`fs.read_registration_bytes`."""
        return fs.read_registration_bytes(path, uid=uid, max_bytes=max_bytes)

    def write_registration(
        self,
        peers_dir: str,
        instance_id: str,
        data: bytes,
        *,
        still_current: Callable[[], bool],
    ) -> bool:
        """A listing never writes a registration."""
        raise RuntimeError("a read-only listing writes no registration")

    def remove_file(self, path: str) -> None:
        """Reaping a dead peer (spec §1.5): see :func:`fs.remove_file`."""
        fs.remove_file(path)

    def pid_is_dead(self, pid: int) -> bool:
        """See :func:`fs.pid_is_dead`."""
        return fs.pid_is_dead(pid)


def _anything_to_list(locations: paths.Locations) -> bool:
    """False when the peers dir is missing, or is a private dir of ours without a registration
    file; anything else (registrations, or a dir to judge) needs the full listing."""
    problem = fs.inspect_private_dir(locations.peers_dir)
    if problem == "missing":
        return False
    if problem is not None:
        return True  # the full listing repairs a loose mode, or refuses the dir and says why
    return bool(fs.list_registration_names(locations.peers_dir, limit=1))


async def list_live(locations: paths.Locations) -> list[PublicPeer]:
    """The live peers, newest first, with git metadata; nothing is created."""
    from pi_cross_session.protocol import discovery
    from pi_cross_session.protocol.exchange import Exchanger

    listing = await discovery.list_peers(
        locations, ReadOnlyFiles(), Exchanger(locations, fs).is_live, self_instance_id=None
    )
    return listing.peers


def peers_of(locations: paths.Locations) -> Sequence[PublicPeer]:
    """The live peers (blocking: runs its own event loop only when there is something to probe)."""
    if not _anything_to_list(locations):
        return ()
    import anyio

    return anyio.run(list_live, locations)


def run(args: argparse.Namespace, console: Console) -> int:
    """List the live sessions, as a table or as JSON."""
    peers = peers_of(paths.resolve())
    if args.json:
        console.json({"peers": [peer.to_dict() for peer in peers]})
    else:
        console.result(words.peer_table(peers))
    return exits.EXIT_OK
