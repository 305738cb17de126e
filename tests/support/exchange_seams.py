"""Seams for exchange tests: a connector that counts, and a vetting step that can stall."""

from __future__ import annotations

import threading

import anyio
import anyio.abc

from pi_cross_session._internal.security.io import fs
from tests.support.bounds import MUST_HAPPEN_S

#: How long :meth:`StalledVetting.finish` waits for the released call to return.
FINISH_LIMIT_S = MUST_HAPPEN_S


class CountingConnect:
    """The real ``connect_unix``, counting every attempt (a stronger "never connected" than any
    receiver-side counter, since it also covers paths nobody listens on)."""

    def __init__(self) -> None:
        self.attempts: list[str] = []

    async def __call__(self, path: str) -> anyio.abc.ByteStream:
        self.attempts.append(path)
        return await anyio.connect_unix(path)


class StalledVetting:
    """:func:`fs.vet_socket` behind a stall of up to ``max_stall_s`` in the worker thread.

    The stall ends early when the test sets :attr:`release` (so a test need not wait the whole
    stall once it has seen the exchange give up); :attr:`returned` is set once the call has
    returned its (late) answer, whatever it was.
    """

    def __init__(self, max_stall_s: float = 3.0) -> None:
        self.max_stall_s = max_stall_s
        self.release = threading.Event()
        self.returned = threading.Event()
        self.answers: list[str | None] = []

    def vet_socket(self, path: str) -> str | None:
        try:
            self.release.wait(self.max_stall_s)
            answer = fs.vet_socket(path)
            self.answers.append(answer)
            return answer
        finally:
            self.returned.set()

    async def finish(self) -> None:
        """Release the stall and wait (a few seconds at most) for the late answer."""
        self.release.set()
        finished = await anyio.to_thread.run_sync(self.returned.wait, FINISH_LIMIT_S)
        assert finished, "the stalled vetting call never returned"


class RecordingVetting:
    """:func:`fs.vet_socket`, recording each path and answer."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None]] = []

    def vet_socket(self, path: str) -> str | None:
        answer = fs.vet_socket(path)
        self.calls.append((path, answer))
        return answer
