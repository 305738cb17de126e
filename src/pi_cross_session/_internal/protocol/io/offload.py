"""Run a blocking file check on the event loop when that is safe, else in a worker thread.

The checks of a send and of a hello (``lstat`` of a peer's socket, reading a sender's registration)
run in a worker thread so that a stalled filesystem cannot block the event loop past a deadline
(spec §10 item 18). On a local filesystem they take microseconds, while the hop to a worker thread
and back costs far more (it is most of a send's overhead, see ``docs/performance.md``). So the
first call asks, once and itself in a worker thread, whether the directory is on a local
filesystem; from then on calls run inline when it is, and in a worker thread otherwise.

The question is asked of the file-judging object, if it can answer (``on_local_filesystem(path)``,
as :mod:`pi_cross_session._internal.security.io.fs` does); an object that cannot — a test's stalled
double — is always run in a worker thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import anyio

T = TypeVar("T")


class Offload:
    """Where the blocking calls about one directory run: inline, or in a worker thread."""

    def __init__(self, files: object, directory: str) -> None:
        self._probe = getattr(files, "on_local_filesystem", None)
        self._directory = directory
        self._inline: bool | None = None if callable(self._probe) else False

    @property
    def inline(self) -> bool | None:
        """Whether calls run on the loop; ``None`` until the first call has found out."""
        return self._inline

    async def run(self, call: Callable[[str], T], path: str) -> T:
        """``call(path)``, on the loop when the directory is known to be local, else in a worker
        thread that is abandoned (never waited for) if the caller is cancelled."""
        if self._inline is None:
            probe = self._probe
            assert callable(probe)
            try:
                local = await anyio.to_thread.run_sync(
                    probe, self._directory, abandon_on_cancel=True
                )
            except OSError:
                # Short of a resource, it could not tell: this call goes to a thread, and the
                # next one asks again rather than keeping a guess for the life of the process.
                return await anyio.to_thread.run_sync(call, path, abandon_on_cancel=True)
            self._inline = bool(local)
        if self._inline:
            return call(path)
        return await anyio.to_thread.run_sync(call, path, abandon_on_cancel=True)


__all__ = ["Offload"]
