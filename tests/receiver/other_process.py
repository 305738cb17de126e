"""Driving :mod:`tests.receiver.connect_client` from a test without blocking the event loop.

The receiver under test runs in the test's own event loop, so the other process must be driven
asynchronously: :func:`other_process` starts it and yields an :class:`OtherProcess` once it has
announced its pid; :meth:`OtherProcess.exchange` tells it what to send and returns what it read.
The process is killed on the way out if it is still running.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

from pi_cross_session._internal.protocol import frames
from tests.support.raw_client import parse_reply

SCRIPT: Final = str(Path(__file__).with_name("connect_client.py"))
#: How long the other process may take to start, or to finish its exchange (a hang guard).
PROCESS_LIMIT_S: Final = 20.0
MAX_OUTPUT_LINE: Final = 4 * 1_048_576


@dataclass(frozen=True)
class Outcome:
    """What the other process read: every reply line, and how the connection ended."""

    replies: tuple[str, ...]
    end: str
    complete_lines: bool

    def parsed(self) -> list[frames.Response]:
        """Each reply, shape-checked against the contract."""
        return [parse_reply(line.encode("utf-8") + b"\n") for line in self.replies]


class OtherProcess:
    """A running ``connect_client.py`` that has announced its pid."""

    def __init__(
        self, process: anyio.abc.Process, stdout: BufferedByteReceiveStream, pid: int
    ) -> None:
        self._process = process
        self._stdout = stdout
        self.pid = pid

    async def exchange(self, socket_path: str, lines: Sequence[dict[str, Any]]) -> Outcome:
        """Connect to ``socket_path``, send ``lines``, read to the end; what came back."""
        assert self._process.stdin is not None
        order = json.dumps({"socket": socket_path, "lines": list(lines)}) + "\n"
        with anyio.fail_after(PROCESS_LIMIT_S):
            await self._process.stdin.send(order.encode("utf-8"))
            raw = await self._stdout.receive_until(b"\n", MAX_OUTPUT_LINE)
            await self._process.wait()
        result = json.loads(raw)
        assert self._process.returncode == 0, result
        return Outcome(tuple(result["replies"]), result["end"], result["tail"])


@asynccontextmanager
async def other_process() -> AsyncIterator[OtherProcess]:
    """A client process of the same user, ready to be told what to send."""
    process = await anyio.open_process([sys.executable, SCRIPT])
    try:
        assert process.stdout is not None
        stdout = BufferedByteReceiveStream(process.stdout)
        with anyio.fail_after(PROCESS_LIMIT_S):
            announced = json.loads(await stdout.receive_until(b"\n", MAX_OUTPUT_LINE))
        yield OtherProcess(process, stdout, announced["pid"])
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.wait()
            await process.aclose()
