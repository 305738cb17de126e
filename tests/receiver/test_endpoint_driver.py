"""The endpoint's connection driver over an in-memory stream, on a virtual clock.

Each test serves one connection with :meth:`Endpoint.serve_stream` and plays the client from the
other end of a memory stream pair, so the contract's real deadlines apply (30 s from accept, 5 s
idle and 5 s for the request after ``ready``) and the moment of each cut is asserted exactly.
The same bounds over real sockets, with small injected values, are in
``tests/receiver/test_endpoint_limits.py``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final

import anyio
import pytest

from pi_cross_session._internal.protocol.codes import Code, refusal_text
from pi_cross_session._internal.protocol.credentials import PeerCredentials
from pi_cross_session._internal.protocol.frames import (
    Hello,
    Message,
    PeerIdentity,
    Response,
    StatusQuery,
)
from pi_cross_session._internal.protocol.io.endpoint import Endpoint, EndpointConfig
from pi_cross_session._internal.protocol.limits import (
    CONNECTION_DEADLINE_S,
    IDLE_AFTER_HELLO_S,
    REQUEST_DEADLINE_AFTER_READY_S,
)
from pi_cross_session._internal.security.io import fs
from tests.support.memory_streams import (
    EXACT,
    MemoryByteStream,
    memory_stream_pair,
    read_line,
    read_to_eof,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, object]]:
    """This module runs on trio's virtual clock: when every task waits, the clock jumps to the
    next deadline, so the contract's real deadlines pass in no wall time."""
    from trio.testing import MockClock

    return ("trio", {"clock": MockClock(autojump_threshold=0)})


TOKEN: Final = "e" * 64
INSTANCE: Final = "0123456789abcdef0123456789abcdef"
SENDER: Final = "fedcba9876543210fedcba9876543210"
ME: Final = PeerIdentity(id="receiver", instance_id=INSTANCE, pid=4242)


def line(body: Any) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode() + b"\n"


def hello(*, authenticated: bool = False) -> bytes:
    body: dict[str, Any] = {
        "v": 1,
        "type": "hello",
        "requestId": "hello-1",
        "token": TOKEN,
        "target": {"id": "receiver", "instanceId": INSTANCE},
    }
    if authenticated:
        body["from"] = {"id": "sender", "instanceId": SENDER, "token": "f" * 64}
    return line(body)


MESSAGE: Final = line(
    {
        "v": 1,
        "type": "message",
        "requestId": "msg-req-1",
        "messageId": "msg-1",
        "text": "hello",
        "summary": "hello",
        "sentAt": 1_795_941_847_396,
    }
)


class Receiver:
    """A handler that takes our token, submits every message, and may take its time."""

    def __init__(self, *, hello_takes_s: float = 0.0) -> None:
        self.hello_takes_s = hello_takes_s
        self.requests: list[Message | StatusQuery] = []

    async def on_hello(
        self, hello: Hello, *, peer: PeerCredentials | None = None
    ) -> tuple[Response, str | None]:
        if self.hello_takes_s:
            await anyio.sleep(self.hello_takes_s)
        if hello.token != TOKEN:
            code = Code.AUTHENTICATION_FAILED
            refused = Response.build(
                request_id=hello.request_id, ok=False, status=code, error=refusal_text(code)
            )
            return refused, None
        ready = Response.build(request_id=hello.request_id, ok=True, status=Code.READY, peer=ME)
        return ready, "authenticated" if hello.sender is not None else "probe"

    def on_request(self, session: str, request: Message | StatusQuery) -> Response:
        self.requests.append(request)
        return Response.build(
            request_id=request.request_id, ok=True, status=Code.SUBMITTED, peer=ME
        )


@asynccontextmanager
async def serving(
    receiver: Receiver | None = None, **config: Any
) -> AsyncIterator[tuple[Endpoint[str], MemoryByteStream]]:
    """One connection served by a fresh endpoint; yields the endpoint and the client's end."""
    endpoint: Endpoint[str] = Endpoint(
        "/nowhere/endpoint.sock", receiver or Receiver(), files=fs, config=EndpointConfig(**config)
    )
    client, server = memory_stream_pair()
    async with client, anyio.create_task_group() as group:
        group.start_soon(endpoint.serve_stream, server)
        yield endpoint, client
    assert endpoint.statistics().open_connections == 0


def status_of(reply: bytes) -> str:
    return str(json.loads(reply)["status"])


# -- the connection deadline -------------------------------------------------------------------


async def test_a_silent_connection_is_cut_at_the_connection_deadline_without_a_reply() -> None:
    async with serving() as (endpoint, client):
        started = anyio.current_time()
        assert await read_to_eof(client) == b""
        assert anyio.current_time() - started == pytest.approx(CONNECTION_DEADLINE_S, abs=EXACT)
    stats = endpoint.statistics()
    assert (stats.deadline_cuts, stats.idle_cuts, stats.request_deadline_cuts) == (1, 0, 0)


async def test_a_partial_first_frame_is_cut_at_the_connection_deadline() -> None:
    async with serving() as (endpoint, client):
        started = anyio.current_time()
        await anyio.sleep(29)
        await client.send(hello()[:40])  # bytes before a hello reset nothing
        assert await read_to_eof(client) == b""
        assert anyio.current_time() - started == pytest.approx(CONNECTION_DEADLINE_S, abs=EXACT)
    assert endpoint.statistics().deadline_cuts == 1


async def test_the_connection_deadline_also_covers_authentication() -> None:
    async with serving(Receiver(hello_takes_s=60)) as (endpoint, client):
        started = anyio.current_time()
        await client.send(hello(authenticated=True))
        assert await read_to_eof(client) == b""
        assert anyio.current_time() - started == pytest.approx(CONNECTION_DEADLINE_S, abs=EXACT)
    assert endpoint.statistics().deadline_cuts == 1


async def test_the_connection_deadline_is_absolute_even_for_a_client_that_keeps_talking() -> None:
    async with serving(connection_deadline_s=3.0) as (endpoint, client):
        started = anyio.current_time()
        await client.send(hello())
        assert status_of(await read_line(client)) == "ready"

        async def trickle() -> None:
            with contextlib.suppress(anyio.BrokenResourceError):  # cut meanwhile
                for byte in MESSAGE[:-1]:
                    await anyio.sleep(IDLE_AFTER_HELLO_S / 3)  # never idle
                    await client.send(bytes([byte]))

        async with anyio.create_task_group() as group:
            group.start_soon(trickle)
            assert await read_to_eof(client) == b""
            assert anyio.current_time() - started == pytest.approx(3.0, abs=EXACT)
            group.cancel_scope.cancel()
    stats = endpoint.statistics()
    assert (stats.deadline_cuts, stats.idle_cuts, stats.request_deadline_cuts) == (1, 0, 0)


# -- after ready: idle, and the request deadline -------------------------------------------------


@pytest.mark.parametrize("authenticated", [False, True], ids=["probe", "authenticated"])
async def test_a_client_silent_after_ready_is_cut_after_the_idle_bound(
    authenticated: bool,
) -> None:
    async with serving() as (endpoint, client):
        await anyio.sleep(7)  # the idle bound runs from ready, not from accept
        await client.send(hello(authenticated=authenticated))
        assert status_of(await read_line(client)) == "ready"
        ready_at = anyio.current_time()
        assert await read_to_eof(client) == b""
        assert anyio.current_time() - ready_at == pytest.approx(IDLE_AFTER_HELLO_S, abs=EXACT)
    stats = endpoint.statistics()
    assert (stats.idle_cuts, stats.deadline_cuts, stats.request_deadline_cuts) == (1, 0, 0)


async def test_a_request_trickled_after_ready_is_cut_at_the_request_deadline() -> None:
    receiver = Receiver()
    async with serving(receiver) as (endpoint, client):
        await client.send(hello(authenticated=True))
        assert status_of(await read_line(client)) == "ready"
        ready_at = anyio.current_time()

        async def trickle() -> None:
            with contextlib.suppress(anyio.BrokenResourceError):  # cut meanwhile
                for byte in MESSAGE[:-1]:
                    await anyio.sleep(0.9)  # never idle for 5 s
                    await client.send(bytes([byte]))

        async with anyio.create_task_group() as group:
            group.start_soon(trickle)
            assert await read_to_eof(client) == b""
            cut_after = anyio.current_time() - ready_at
            group.cancel_scope.cancel()
        assert cut_after == pytest.approx(REQUEST_DEADLINE_AFTER_READY_S, abs=EXACT)
    stats = endpoint.statistics()
    assert (stats.request_deadline_cuts, stats.idle_cuts, stats.deadline_cuts) == (1, 0, 0)
    assert receiver.requests == []


async def test_a_request_completed_just_before_the_request_deadline_is_answered() -> None:
    receiver = Receiver()
    async with serving(receiver) as (endpoint, client):
        await client.send(hello(authenticated=True))
        assert status_of(await read_line(client)) == "ready"
        await anyio.sleep(4.0)
        await client.send(MESSAGE[:-1])
        await anyio.sleep(0.999)  # the idle bound moved with those bytes; the request's did not
        await client.send(b"\n")
        assert status_of(await read_line(client)) == "submitted"
        assert await read_to_eof(client) == b""  # half-closed after the receipt
    assert [r.request_id for r in receiver.requests] == ["msg-req-1"]
    assert endpoint.statistics().request_deadline_cuts == 0


# -- order, refusals, faults ---------------------------------------------------------------------


async def test_a_fault_after_the_hello_is_answered_after_ready() -> None:
    async with serving() as (endpoint, client):
        await client.send(hello() + b"\xff\n")
        assert status_of(await read_line(client)) == "ready"
        fault = json.loads(await read_line(client))
        assert (fault["status"], fault["requestId"]) == ("invalid_frame", "unknown")
        assert await read_to_eof(client) == b""
    assert endpoint.statistics().faults == 1


async def test_a_refused_hello_is_the_only_reply() -> None:
    async with serving() as (endpoint, client):
        await client.send(hello().replace(TOKEN.encode(), b"0" * 64) + MESSAGE)
        reply = json.loads(await read_line(client))
        assert (reply["status"], reply["requestId"]) == ("authentication_failed", "hello-1")
        assert await read_to_eof(client) == b""
    stats = endpoint.statistics()
    assert (stats.faults, stats.accepted) == (0, 1)


async def test_a_costly_first_frame_is_refused_unparsed_and_counted() -> None:
    async with serving() as (endpoint, client):
        await client.send(line([{}] * 100))
        reply = json.loads(await read_line(client))
        assert (reply["status"], reply["requestId"]) == ("authentication_failed", "unknown")
    stats = endpoint.statistics()
    assert (stats.costly_frames, stats.faults) == (1, 1)


# -- the read budget -------------------------------------------------------------------------------


async def test_a_process_over_its_read_budget_waits_exactly_its_debt() -> None:
    # 100 bytes at once, then 100 a second: 300 bytes put the process 200 bytes in debt, so its
    # next read waits 2 s, and the reply to the frame those bytes end comes then.
    async with serving(read_burst_bytes=100, read_bytes_per_s=100.0) as (endpoint, client):
        started = anyio.current_time()
        await client.send(b" " * 300)
        await client.send(b"x\n")
        reply = json.loads(await read_line(client))
        assert reply["status"] == "invalid_frame"
        assert anyio.current_time() - started == pytest.approx(2.0, abs=EXACT)
    assert endpoint.statistics().throttled_reads == 1


# -- an answer that comes later (a proxy's) ------------------------------------------------------


class Forwarder(Receiver):
    """A proxy-like handler: the answer to a request comes after ``answer_takes_s``; ``None`` when
    ``knows`` is False (nobody can say what became of it)."""

    def __init__(self, *, answer_takes_s: float, knows: bool = True) -> None:
        super().__init__()
        self.answer_takes_s = answer_takes_s
        self.knows = knows

    def on_request(  # type: ignore[override]
        self, session: str, request: Message | StatusQuery
    ) -> Any:
        self.requests.append(request)

        async def later() -> Response | None:
            await anyio.sleep(self.answer_takes_s)
            if not self.knows:
                return None
            return Response.build(
                request_id=request.request_id, ok=True, status=Code.ACCEPTED, peer=ME
            )

        return later()


async def test_an_answer_that_comes_later_is_written_and_the_connection_half_closed() -> None:
    forwarder = Forwarder(answer_takes_s=12.0)  # past the idle and request bounds: answering
    async with serving(forwarder) as (endpoint, client):
        await client.send(hello(authenticated=True))
        assert status_of(await read_line(client)) == "ready"
        await client.send(MESSAGE)
        asked_at = anyio.current_time()
        assert status_of(await read_to_eof(client)) == "accepted"
        assert anyio.current_time() - asked_at == pytest.approx(12.0, abs=EXACT)
    stats = endpoint.statistics()
    assert (stats.unanswered, stats.idle_cuts, stats.request_deadline_cuts) == (0, 0, 0)


async def test_no_answer_closes_the_connection_without_a_reply() -> None:
    async with serving(Forwarder(answer_takes_s=1.0, knows=False)) as (endpoint, client):
        await client.send(hello(authenticated=True))
        assert status_of(await read_line(client)) == "ready"
        await client.send(MESSAGE)
        assert await read_to_eof(client) == b""
    assert endpoint.statistics().unanswered == 1


async def test_an_answer_later_than_the_connection_deadline_is_cut_there() -> None:
    async with serving(Forwarder(answer_takes_s=60.0)) as (endpoint, client):
        started = anyio.current_time()
        await client.send(hello(authenticated=True))
        assert status_of(await read_line(client)) == "ready"
        await client.send(MESSAGE)
        assert await read_to_eof(client) == b""
        assert anyio.current_time() - started == pytest.approx(CONNECTION_DEADLINE_S, abs=EXACT)
    stats = endpoint.statistics()
    assert (stats.deadline_cuts, stats.unanswered) == (1, 0)
