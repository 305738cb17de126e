"""What hello authentication reads about a sender, from the real peers and runtime dirs.

Both reads go through the file layer's checks (:mod:`~pi_cross_session._internal.security.io.fs`),
on the event loop where the dirs are on a local filesystem and in a worker thread otherwise
(:class:`~pi_cross_session._internal.protocol.io.offload.Offload`), so a stalled filesystem cannot
hold the loop.
"""

from __future__ import annotations

from typing import Protocol

from pi_cross_session._internal.protocol.io.offload import Offload
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.security.io import fs


class _Files(Protocol):
    def read_registration_bytes(self, path: str) -> bytes: ...

    def vet_socket(self, path: str) -> str | None: ...


class PeersDirFiles:
    """:class:`~pi_cross_session._internal.security.auth.SenderFiles` over the peers dir of
    ``locations``.

    ``files`` is the file layer (tests inject one that fails or swaps files on demand).
    """

    def __init__(self, locations: Locations, files: _Files = fs) -> None:
        self._locations = locations
        self._files = files
        self._registrations = Offload(files, locations.peers_dir)
        self._sockets = Offload(files, locations.runtime_dir)

    async def registration_bytes(self, instance_id: str) -> bytes:
        """The sender's registration, read with every check of the file layer."""
        path = self._locations.registration_path(instance_id)
        return await self._registrations.run(self._files.read_registration_bytes, path)

    async def has_endpoint(self, instance_id: str) -> bool:
        """Anything at the sender's socket path but a plain "no such file"."""
        path = self._locations.socket_path(instance_id)
        return await self._sockets.run(self._files.vet_socket, path) != "ENOENT"
