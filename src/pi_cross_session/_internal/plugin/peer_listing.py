"""The listing a person or a tool reads: live sessions with git metadata, creating nothing.

``pi-cross-session peers`` and the library's :func:`pi_cross_session.list_peers` list through
:func:`list_live`. A listing needs no sender identity (a liveness probe is an exchange without a
``from``), so it publishes nothing, and :class:`ReadOnlyFiles` keeps it from creating a file or a
directory: a missing peers dir (a mistyped ``PI_CODING_AGENT_DIR``) is an empty listing, not a tree
created on the spot. Like every lister it still reaps the registration of a session whose process
is proven dead (spec §1.5) and repairs the mode of a peers dir of ours.
"""

from __future__ import annotations

from collections.abc import Callable

from pi_cross_session._internal.protocol.io import discovery
from pi_cross_session._internal.protocol.io.discovery import Listing, NameWindow
from pi_cross_session._internal.protocol.io.exchange import Exchanger
from pi_cross_session._internal.protocol.limits import (
    MAX_LISTED_REGISTRATIONS,
    MAX_REGISTRATION_BYTES,
)
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.security.io import fs


class ReadOnlyFiles:
    """:mod:`pi_cross_session._internal.security.io.fs` for discovery, except that nothing is
    created.

    Only :meth:`ensure_private_dir` differs: a missing dir stays missing (there is nothing to
    list), while an existing one is judged, and its mode repaired, as every lister does.
    """

    def ensure_private_dir(self, path: str, *, uid: int | None = None) -> None:
        """Judge an existing dir as :func:`fs.ensure_private_dir` does; create nothing."""
        if fs.inspect_private_dir(path, uid=uid).state is fs.DirState.MISSING:
            return
        fs.ensure_private_dir(path, uid=uid)

    def list_registration_names(
        self, peers_dir: str, *, limit: int = MAX_LISTED_REGISTRATIONS
    ) -> NameWindow:
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
        """A read-only listing writes no registration."""
        raise RuntimeError("a read-only listing writes no registration")

    def remove_file(self, path: str) -> None:
        """Reaping a peer whose process is proven dead (spec §1.5): see :func:`fs.remove_file`."""
        fs.remove_file(path)

    def pid_is_dead(self, pid: int) -> bool:
        """See :func:`fs.pid_is_dead`."""
        return fs.pid_is_dead(pid)


async def list_live(locations: Locations, *, with_git: bool = True) -> Listing:
    """The live sessions of ``locations``, newest first, with git metadata unless ``with_git``
    is false, and what the listing could not read or check; nothing is created."""
    exchanger = Exchanger(locations, fs)
    return await discovery.list_peers(
        locations,
        ReadOnlyFiles(),
        exchanger.is_live,
        self_instance_id=None,
        with_git=with_git,
        probe_guard_s=exchanger.listing_guard_s,
    )


__all__ = ["ReadOnlyFiles", "list_live"]
