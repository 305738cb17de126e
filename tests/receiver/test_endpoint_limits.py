"""The endpoint's bounds over a real socket: frame cap, deadlines and the connection cap.

Most bounds are injected small through :class:`EndpointConfig` so the suite stays fast; the 1 MiB
frame cap is also checked at its real value (spec §10 items 1–3), because that one is cheap.
Which bound cut a connection is read from the endpoint's counters; *when* each cut comes is
asserted exactly, at the contract's real values, on a virtual clock in
``tests/receiver/test_endpoint_driver.py``.
"""

from __future__ import annotations

import json
from contextlib import AsyncExitStack

import anyio
import pytest

from pi_cross_session._internal.protocol.io.endpoint import EndpointConfig
from pi_cross_session._internal.protocol.limits import MAX_CONNECTIONS, MAX_FRAME_BYTES
from pi_cross_session._internal.protocol.paths import Locations
from tests.support.raw_client import BOM, RawClient, exchange_raw, hello, line, message_body
from tests.support.socket_peers import assert_still_serving, published_sender, settled_peer

pytestmark = pytest.mark.anyio

#: A frame cap small enough to cross cheaply, large enough for an authenticated hello.
SMALL_CAP = 1024
#: Injected deadlines: long enough for a loaded machine to do the handshake, short enough to wait.
DEADLINE_S = 0.4
IDLE_S = 0.3
#: An injected request deadline: several idle bounds long, so only a trickle can reach it.
REQUEST_S = 0.9


def padded(frame: bytes, total: int) -> bytes:
    """``frame`` with spaces before its LF so that it is exactly ``total`` bytes (LF included)."""
    body = frame[:-1]
    assert frame.endswith(b"\n")
    assert len(body) + 1 <= total
    result = body + b" " * (total - len(body) - 1) + b"\n"
    assert len(result) == total
    return result


def cjk_message(total: int) -> bytes:
    """A message frame of exactly ``total`` bytes whose text is mostly 3-byte CJK characters."""
    base = line(message_body(text="", request_id="big-req", message_id="big-1", summary="big"))
    room = total - len(base)
    cjk, ascii_tail = divmod(room, 3)
    frame = line(
        message_body(
            text="字" * cjk + "a" * ascii_tail,
            request_id="big-req",
            message_id="big-1",
            summary="big",
        )
    )
    assert len(frame) == total
    return frame


async def probe_outcome(path: str, data: bytes) -> tuple[str, str]:
    """Send ``data`` as the start of a connection; the first reply's (status, requestId)."""
    async with RawClient.connect(path) as client:
        await client.send(data)
        reply = await client.read_reply()
        if reply.status != "ready":
            assert await client.read_to_eof() == b""
        return reply.status, reply.request_id


# -- frame cap, injected --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("total", "expected"),
    [
        (SMALL_CAP - 1, ("ready", "cap-hello")),
        (SMALL_CAP, ("ready", "cap-hello")),
        (SMALL_CAP + 1, ("message_too_large", "unknown")),
    ],
    ids=["limit-1", "limit", "limit+1"],
)
async def test_first_frame_at_the_injected_cap(
    locations: Locations, total: int, expected: tuple[str, str]
) -> None:
    config = EndpointConfig(max_frame_bytes=SMALL_CAP)
    async with settled_peer(locations, "beta", config=config) as beta:
        reg = beta.registration
        frame = padded(line(hello(reg, request_id="cap-hello")), total)
        assert await probe_outcome(reg.socket_path, frame) == expected
        await assert_still_serving(locations, reg)


@pytest.mark.parametrize(
    ("extra", "expected"),
    [(0, "ready"), (1, "message_too_large")],
    ids=["bom+limit", "bom+limit+1"],
)
async def test_item3_bom_counts_toward_the_injected_cap(
    locations: Locations, extra: int, expected: str
) -> None:
    config = EndpointConfig(max_frame_bytes=SMALL_CAP)
    async with settled_peer(locations, "beta", config=config) as beta:
        reg = beta.registration
        frame = BOM + padded(line(hello(reg)), SMALL_CAP - len(BOM) + extra)
        status, _ = await probe_outcome(reg.socket_path, frame)
        assert status == expected
        await assert_still_serving(locations, reg)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b" " * (SMALL_CAP + 1), id="ascii"),
        pytest.param(b" " * (SMALL_CAP - 1) + "字".encode()[:2], id="partial-multibyte-tail"),
        pytest.param(b" " * (SMALL_CAP - 1) + BOM, id="bom-inside"),
    ],
)
async def test_item2_unterminated_bytes_over_the_cap_are_message_too_large(
    locations: Locations, data: bytes
) -> None:
    config = EndpointConfig(max_frame_bytes=SMALL_CAP)
    async with settled_peer(locations, "beta", config=config) as beta:
        reg = beta.registration
        (reply,) = await exchange_raw(reg.socket_path, data)
        assert (reply.status, reply.request_id) == ("message_too_large", "unknown")
        await assert_still_serving(locations, reg)


@pytest.mark.parametrize(
    ("total", "expected"),
    [(SMALL_CAP, "submitted"), (SMALL_CAP + 1, "message_too_large")],
    ids=["limit", "limit+1"],
)
async def test_second_frame_at_the_injected_cap(
    locations: Locations, total: int, expected: str
) -> None:
    alpha = published_sender(locations)
    config = EndpointConfig(max_frame_bytes=SMALL_CAP)
    async with settled_peer(locations, "beta", config=config) as beta:
        reg = beta.registration
        frame = padded(line(message_body(text="padded", request_id="pad-req")), total)
        ready, reply = await exchange_raw(
            reg.socket_path, line(hello(reg, sender=alpha)), frame, replies=2
        )
        assert ready.status == "ready"
        assert reply.status == expected
        assert reply.request_id == ("pad-req" if reply.ok else "unknown")
        assert len(beta.inbox.entries) == int(reply.ok)
        await assert_still_serving(locations, reg)


# -- frame cap, real value -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bom", "extra", "expected"),
    [
        (b"", 0, ("ready", "mib-hello")),
        (b"", 1, ("message_too_large", "unknown")),
        (BOM, 0, ("ready", "mib-hello")),
        (BOM, 1, ("message_too_large", "unknown")),
    ],
    ids=["item1-exact", "item1-plus-one", "item3-bom-exact", "item3-bom-plus-one"],
)
async def test_items_1_and_3_one_mebibyte_hello_padded_with_spaces(
    locations: Locations, bom: bytes, extra: int, expected: tuple[str, str]
) -> None:
    async with settled_peer(locations, "beta") as beta:
        reg = beta.registration
        frame = bom + padded(
            line(hello(reg, request_id="mib-hello")), MAX_FRAME_BYTES - len(bom) + extra
        )
        assert len(frame) == 1_048_576 + extra
        assert await probe_outcome(reg.socket_path, frame) == expected
        await assert_still_serving(locations, reg)


@pytest.mark.parametrize(
    ("extra", "expected"),
    [(0, "submitted"), (1, "message_too_large")],
    ids=["exact", "plus-one"],
)
async def test_item1_one_mebibyte_cjk_message(
    locations: Locations, extra: int, expected: str
) -> None:
    alpha = published_sender(locations)
    async with settled_peer(locations, "beta") as beta:
        reg = beta.registration
        frame = cjk_message(MAX_FRAME_BYTES + extra)
        ready, reply = await exchange_raw(
            reg.socket_path, line(hello(reg, sender=alpha)), frame, replies=2
        )
        assert ready.status == "ready"
        assert reply.status == expected
        if reply.ok:
            (entry,) = beta.inbox.entries
            assert entry.text == json.loads(frame)["text"]
            assert entry.text.startswith("字字字")
        else:
            assert reply.request_id == "unknown"
            assert beta.inbox.entries == []
        await assert_still_serving(locations, reg)


# -- deadlines -------------------------------------------------------------------------------------


async def test_silent_connection_is_cut_at_the_connection_deadline_without_a_reply(
    locations: Locations,
) -> None:
    # The idle bound is shorter on purpose: before a hello only the absolute deadline applies.
    config = EndpointConfig(connection_deadline_s=DEADLINE_S, idle_after_hello_s=0.1)
    async with settled_peer(locations, "beta", config=config) as beta:
        async with RawClient.connect(beta.registration.socket_path) as client:
            assert await client.read_to_eof() == b""
        stats = beta.endpoint.statistics()
        assert (stats.deadline_cuts, stats.idle_cuts) == (1, 0)
        await assert_still_serving(locations, beta.registration)


async def test_partial_first_frame_is_cut_at_the_connection_deadline(
    locations: Locations,
) -> None:
    config = EndpointConfig(connection_deadline_s=DEADLINE_S)
    async with settled_peer(locations, "beta", config=config) as beta:
        reg = beta.registration
        async with RawClient.connect(reg.socket_path) as client:
            await client.send(line(hello(reg))[:40])
            assert await client.read_to_eof() == b""
        assert beta.endpoint.statistics().deadline_cuts == 1
        await assert_still_serving(locations, reg)


@pytest.mark.parametrize("authenticated", [False, True], ids=["probe", "authenticated"])
async def test_silent_client_after_hello_is_cut_after_the_idle_bound(
    locations: Locations, authenticated: bool
) -> None:
    alpha = published_sender(locations) if authenticated else None
    config = EndpointConfig(connection_deadline_s=10.0, idle_after_hello_s=IDLE_S)
    async with settled_peer(locations, "beta", config=config) as beta:
        reg = beta.registration
        async with RawClient.connect(reg.socket_path) as client:
            await client.send(line(hello(reg, sender=alpha)))
            assert (await client.read_reply()).status == "ready"
            assert await client.read_to_eof() == b""
        stats = beta.endpoint.statistics()
        assert (stats.idle_cuts, stats.deadline_cuts) == (1, 0)
        assert beta.inbox.entries == []
        await assert_still_serving(locations, reg)


async def test_idle_bound_is_inactivity_and_the_connection_deadline_is_absolute(
    locations: Locations,
) -> None:
    """A client trickling bytes after its hello is never idle, but still cut at the deadline."""
    deadline = 0.9
    config = EndpointConfig(connection_deadline_s=deadline, idle_after_hello_s=IDLE_S)
    async with settled_peer(locations, "beta", config=config) as beta:
        reg = beta.registration
        async with RawClient.connect(reg.socket_path) as client:
            await client.send(line(hello(reg)))
            assert (await client.read_reply()).status == "ready"

            async def trickle() -> None:
                # Pacing, not ordering: one byte per third of the idle bound keeps it from firing.
                try:
                    while True:
                        await anyio.sleep(IDLE_S / 3)
                        await client.send(b" ")
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    return

            async with anyio.create_task_group() as tg:
                tg.start_soon(trickle)
                client.limit_s = deadline + 3
                assert await client.read_to_eof() == b""
                tg.cancel_scope.cancel()
        stats = beta.endpoint.statistics()
        assert (stats.deadline_cuts, stats.idle_cuts) == (1, 0)
        await assert_still_serving(locations, reg)


async def test_a_request_trickled_after_ready_is_cut_at_the_request_deadline(
    locations: Locations,
) -> None:
    """Regression: one byte of a second frame every so often never lets the idle bound fire, and
    the connection deadline is 30 s away, so a slot was held as long as the client liked. Now
    the second frame must be complete ``request_deadline_s`` after ``ready``."""
    config = EndpointConfig(
        connection_deadline_s=30.0, idle_after_hello_s=IDLE_S, request_deadline_s=REQUEST_S
    )
    alpha = published_sender(locations)
    async with settled_peer(locations, "beta", config=config) as beta:
        reg = beta.registration
        async with RawClient.connect(reg.socket_path) as client:
            await client.send(line(hello(reg, sender=alpha)))
            assert (await client.read_reply()).status == "ready"
            frame = line(message_body())

            async def trickle() -> None:
                # Pacing, not ordering: one byte per third of the idle bound keeps it from firing.
                try:
                    for byte in frame[:-1]:
                        await anyio.sleep(IDLE_S / 3)
                        await client.send(bytes([byte]))
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    return

            async with anyio.create_task_group() as tg:
                tg.start_soon(trickle)
                client.limit_s = REQUEST_S + 3
                assert await client.read_to_eof() == b""
                tg.cancel_scope.cancel()
        stats = beta.endpoint.statistics()
        assert (stats.request_deadline_cuts, stats.idle_cuts, stats.deadline_cuts) == (1, 0, 0)
        assert beta.inbox.entries == []
        await assert_still_serving(locations, reg)


async def test_a_request_written_as_ready_arrives_is_untouched_by_the_request_deadline(
    locations: Locations,
) -> None:
    config = EndpointConfig(request_deadline_s=REQUEST_S)
    async with (
        settled_peer(locations, "beta", config=config) as beta,
        settled_peer(locations, "alpha") as alpha,
    ):
        receipt = await alpha.send(beta, "on time")
        assert receipt.status == "submitted"  # type: ignore[attr-defined]
        assert [entry.text for entry in beta.inbox.entries] == ["on time"]
        assert beta.endpoint.statistics().request_deadline_cuts == 0


async def test_silence_after_ready_is_an_idle_cut_when_both_bounds_meet(
    locations: Locations,
) -> None:
    """With the defaults both bounds are 5 s from ``ready``: a silent client is idle (the
    contract's rule), not late."""
    config = EndpointConfig(idle_after_hello_s=IDLE_S, request_deadline_s=IDLE_S)
    async with settled_peer(locations, "beta", config=config) as beta:
        reg = beta.registration
        async with RawClient.connect(reg.socket_path) as client:
            await client.send(line(hello(reg)))
            assert (await client.read_reply()).status == "ready"
            assert await client.read_to_eof() == b""
        stats = beta.endpoint.statistics()
        assert (stats.idle_cuts, stats.request_deadline_cuts) == (1, 0)


# -- connection cap --------------------------------------------------------------------------------


async def close_by_handshake(client: RawClient) -> None:
    """End a held connection so that, once this returns, the endpoint has released its slot.

    A bad first frame gets a fault reply and the endpoint closes; it releases the slot before it
    closes, so reading the EOF proves the slot is free (no waiting on a timer).
    """
    await client.send(b"x\n")
    assert (await client.read_reply()).status == "invalid_frame"
    assert await client.read_to_eof() == b""


@pytest.mark.parametrize(
    "cap", [MAX_CONNECTIONS, 3], ids=[f"default-{MAX_CONNECTIONS}", "injected-3"]
)
async def test_connection_over_the_cap_is_closed_at_once_without_a_byte(
    locations: Locations, cap: int
) -> None:
    config = None if cap == MAX_CONNECTIONS else EndpointConfig(max_connections=cap)
    async with settled_peer(locations, "beta", config=config) as beta:
        reg = beta.registration
        async with AsyncExitStack() as stack:
            held = [
                await stack.enter_async_context(RawClient.connect(reg.socket_path))
                for _ in range(cap)
            ]
            # The listener accepts in connection order, so by the time it reaches this one the
            # `cap` held connections are all open.
            async with RawClient.connect(reg.socket_path) as extra:
                started = anyio.current_time()
                assert await extra.read_to_eof() == b""
                assert anyio.current_time() - started < 1.0
            stats = beta.endpoint.statistics()
            assert stats.refused_over_capacity == 1
            assert stats.peak_connections == cap
            assert stats.open_connections == cap
            assert stats.accepted == cap

            # Free two slots; new connections are served again, up to the cap.
            for client in held[:2]:
                await close_by_handshake(client)
            await assert_still_serving(locations, reg)
            async with RawClient.connect(reg.socket_path) as again:
                await again.send(line(hello(reg, request_id="after-cap")))
                assert (await again.read_reply()).request_id == "after-cap"
            stats = beta.endpoint.statistics()
            assert stats.refused_over_capacity == 1
            assert stats.peak_connections == cap
        # Every held connection was served, never answered: none of them sent a byte.
        assert beta.inbox.entries == []
