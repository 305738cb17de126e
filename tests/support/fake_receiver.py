"""A scripted receiver for client-side (exchange) tests, on a real Unix socket.

It listens where a registered session would, reads lines, and for the n-th line of a connection
plays the n-th step of its script: reply with bytes computed from that line, stay silent, or close.
Lines past the end of the script are read and recorded, and answered with silence. Every line it
receives is recorded, so a test can count exactly how many message frames reached the socket.

It shares no code with the package's endpoint or codec: a line is whatever ends in LF.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import anyio.abc

from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import Registration
from pi_cross_session._internal.security.io import fs
from tests.support.bounds import MUST_HAPPEN_S
from tests.support.socket_peers import make_registration, publish

#: What a step computes its reply from: the received line's JSON (None if it is not JSON).
Responder = Callable[[Any], bytes]
SAFE_QUEUE: Final = "cancel-safe-queue-v1"
GOAL_SCOPED: Final = "goal-scoped-peer-v1"
#: Stand-in for "the requestId of the line being answered".
ECHO: Final = object()
#: An override value that removes the key from a reply.
ABSENT: Final = object()


@dataclass(frozen=True)
class Reply:
    """Write ``make(frame)``; then close the connection if ``close`` is set."""

    make: Responder
    close: bool = False


@dataclass(frozen=True)
class Silent:
    """Say nothing; keep the connection open and keep reading."""


@dataclass(frozen=True)
class Close:
    """Close the connection at once, without a reply."""


Step = Reply | Silent | Close
SILENT: Final = Silent()
CLOSE: Final = Close()


@dataclass(frozen=True)
class Received:
    """One line the fake received: on which connection, its index there, its bytes and JSON."""

    connection: int
    index: int
    raw: bytes
    body: Any

    @property
    def kind(self) -> str | None:
        return self.body.get("type") if isinstance(self.body, dict) else None


def response_line(body: Mapping[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n"


def response_body(
    frame: Any,
    *,
    ok: bool,
    status: str,
    registration: Registration | None = None,
    request_id: object = ECHO,
    capabilities: Iterable[str] | object = (SAFE_QUEUE,),
    **overrides: Any,
) -> dict[str, Any]:
    """A reply shaped like the reference's, answering ``frame``; ``overrides`` replace or add
    fields (a replaced key keeps its place; :data:`ABSENT` removes it)."""
    if request_id is ECHO:
        request_id = frame["requestId"]
    body: dict[str, Any] = {
        "v": 1,
        "type": "response",
        "requestId": request_id,
        "ok": ok,
        "status": status,
        "capabilities": capabilities if capabilities is ABSENT else list(capabilities),
        "code": status,
        "state": status,
        "retryable": (not ok) and status in {"busy", "queue_full", "rate_limited"},
        "next": "guidance from a scripted receiver",
    }
    if not ok:
        body["error"] = f"scripted {status}"
    if ok and registration is not None:
        body["peer"] = {"id": registration.id, "instanceId": registration.instance_id, "pid": 4242}
    body.update(overrides)
    return {key: value for key, value in body.items() if value is not ABSENT}


def respond(
    *,
    ok: bool,
    status: str,
    registration: Registration | None = None,
    request_id: object = ECHO,
    capabilities: Iterable[str] | object = (SAFE_QUEUE,),
    close: bool = False,
    **overrides: Any,
) -> Reply:
    """A step replying with :func:`response_body` for the line received."""
    caps = capabilities if capabilities is ABSENT else tuple(capabilities)  # type: ignore[arg-type]

    def make(frame: Any) -> bytes:
        return response_line(
            response_body(
                frame,
                ok=ok,
                status=status,
                registration=registration,
                request_id=request_id,
                capabilities=caps,
                **overrides,
            )
        )

    return Reply(make, close=close)


def ready(
    registration: Registration,
    *,
    status: str = "ready",
    capabilities: Iterable[str] | object = (SAFE_QUEUE,),
    **overrides: Any,
) -> Reply:
    """``ready`` for the hello, from ``registration``'s identity (``capabilities`` may be
    :data:`ABSENT`)."""
    return respond(
        ok=True,
        status=status,
        registration=registration,
        capabilities=capabilities,
        **overrides,
    )


def receipt(registration: Registration, status: str = "submitted", **overrides: Any) -> Reply:
    """An ``ok`` receipt for the message, from ``registration``'s identity."""
    return respond(ok=True, status=status, registration=registration, **overrides)


def raw_reply(data: bytes, *, close: bool = False) -> Reply:
    """Write exactly ``data``, whatever was received."""
    return Reply(lambda _frame: data, close=close)


@dataclass
class FakeReceiver:
    """A listener at ``path`` playing ``script`` on every connection."""

    path: str
    registration: Registration
    script: Sequence[Step]
    received: list[Received] = field(default_factory=list)
    connections: int = 0
    open: int = 0
    #: How long :meth:`wait_for` may wait before the test fails.
    wait_limit_s: float = MUST_HAPPEN_S
    _changed: anyio.Event = field(default_factory=anyio.Event)

    def count(self, kind: str) -> int:
        """Lines of this ``type`` received, over all connections."""
        return sum(item.kind == kind for item in self.received)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_for(self, condition: Callable[[], bool]) -> None:
        """Wait until ``condition()`` holds; it is re-checked whenever the fake's state changes."""
        with anyio.fail_after(self.wait_limit_s):
            while not condition():
                await self._changed.wait()

    async def settled(self) -> None:
        """Wait until every accepted connection has ended (the client closed, or we did)."""
        await self.wait_for(lambda: self.open == 0)

    async def serve(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        listener = await anyio.create_unix_listener(self.path)
        try:
            os.chmod(self.path, 0o600)
            async with anyio.create_task_group() as tg:
                task_status.started()
                while True:
                    stream = await listener.accept()
                    self.connections += 1
                    self.open += 1
                    self._notify()
                    tg.start_soon(self._play, stream, self.connections)
        finally:
            with anyio.CancelScope(shield=True):
                await listener.aclose()

    async def _play(self, stream: anyio.abc.SocketStream, number: int) -> None:
        buffer = b""
        index = 0
        try:
            while True:
                try:
                    chunk = await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    return
                buffer += chunk
                while b"\n" in buffer:
                    raw, buffer = buffer.split(b"\n", 1)
                    body = _json_or_none(raw)
                    self.received.append(Received(number, index, raw + b"\n", body))
                    self._notify()
                    step = self.script[index] if index < len(self.script) else SILENT
                    index += 1
                    if isinstance(step, Close):
                        return
                    if isinstance(step, Reply):
                        await stream.send(step.make(body))
                        if step.close:
                            return
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            return
        finally:
            await anyio.aclose_forcefully(stream)
            self.open -= 1
            self._notify()


def _json_or_none(raw: bytes) -> Any:
    try:
        return json.loads(raw.decode("utf-8"))
    except ValueError:
        return None


@asynccontextmanager
async def fake_receiver(
    locations: Locations,
    script: Sequence[Step],
    *,
    registration: Registration | None = None,
    name: str = "fake",
    published: bool = False,
) -> AsyncIterator[FakeReceiver]:
    """Serve ``script`` at the socket path of ``registration`` (a fresh one by default).

    The registration is returned on the fake; with ``published`` it is also written to the peers
    dir once the socket listens (so listings find the fake by name) and removed at the end.
    Otherwise nothing reads the file: the exchange side needs only the registration object.
    """
    registration = registration or make_registration(locations, name)
    fs.ensure_private_dir(locations.runtime_dir)
    fake = FakeReceiver(registration.socket_path, registration, script)
    async with anyio.create_task_group() as tg:
        await tg.start(fake.serve)
        try:
            if published:
                publish(locations, registration)
            try:
                yield fake
            finally:
                if published:
                    fs.remove_file(locations.registration_path(registration.instance_id))
            # Let the fake see every client close before it is cancelled (see
            # tests.support.socket_peers for the race this avoids).
            await fake.settled()
        finally:
            tg.cancel_scope.cancel()
            fs.remove_file(fake.path)


#: A fake's script, written once its registration (and so its identity) exists.
Script = Callable[[Registration], Sequence[Step]]


def scripted_peer(
    locations: Locations, name: str, script: Script
) -> contextlib.AbstractAsyncContextManager[FakeReceiver]:
    """A published fake receiver named ``name``, answering with ``script`` of its registration."""
    registration = make_registration(locations, name)
    return fake_receiver(locations, script(registration), registration=registration, published=True)
