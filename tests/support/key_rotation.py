"""What the key-rotation tests look at: lines a long-running command printed more than once,
whether a deployment's server still takes a set of NATS credentials, and what its hub answers an
ask a test makes itself."""

from __future__ import annotations

import re
import time
from pathlib import Path

import anyio

from pi_cross_session._internal.plugin.remote.link import (
    ConnectError,
    Link,
    LinkConfig,
    NatsProblem,
)
from pi_cross_session._internal.protocol.remote.join import Refusal
from pi_cross_session._internal.protocol.remote.rotate import (
    RotateAnswer,
    RotateAsk,
    read_rotate_answer,
    rotate_subject,
)
from tests.support.processes import WatchedProcess


def wait_printed(process: WatchedProcess, pattern: str, count: int, *, timeout: float) -> None:
    """Wait until ``process`` printed ``count`` lines matching ``pattern`` on stdout."""
    regex = re.compile(pattern)
    deadline = time.monotonic() + timeout
    while sum(1 for line in list(process.lines) if regex.search(line)) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"fewer than {count} lines {pattern!r}:\n{process.output()}")
        if process.process.poll() is not None:
            raise AssertionError(f"{process.label} ended:\n{process.output()}")
        time.sleep(0.05)


def credentials_refusal(url: str, ca: Path, creds: str, machine: str) -> NatsProblem | None:
    """Why the hub's server at ``url`` refuses ``creds``, as a gateway connects with them
    (:attr:`NatsProblem.AUTH`: an authorization violation); ``None`` when it takes them."""

    async def attempt() -> NatsProblem | None:
        link = Link(
            LinkConfig(
                servers=(url,), machine=machine, tls_ca=str(ca), tls_first=True, credentials=creds
            )
        )
        try:
            await link.connect()
        except ConnectError as exc:
            return exc.problem
        await link.close()
        return None

    return anyio.run(attempt)


def hub_answer(
    url: str, ca: Path, creds: str, machine: str, ask: RotateAsk
) -> RotateAnswer | Refusal:
    """What the hub answers ``ask``, sent as ``machine`` with ``creds``."""

    async def attempt() -> RotateAnswer | Refusal:
        link = Link(
            LinkConfig(
                servers=(url,), machine=machine, tls_ca=str(ca), tls_first=True, credentials=creds
            )
        )
        await link.connect()
        try:
            return await link.request(
                rotate_subject(machine), ask.model_dump_json().encode(), 10.0, read_rotate_answer
            )
        finally:
            await link.close()

    return anyio.run(attempt)
