"""The receiving endpoint over a real socket, driven with exact client bytes (spec §3.1–3.6).

Every reply line is checked with :func:`check_reply` (key order, ``code == state == status``,
``retryable`` only for load refusals, ``peer`` exactly when ``ok``), and every test ends by proving
the endpoint still answers a fresh probe.
"""

from __future__ import annotations

import json
import os

import anyio
import anyio.lowlevel
import pytest

from pi_cross_session._internal.protocol.capabilities import ADVERTISED
from pi_cross_session._internal.protocol.paths import Locations
from tests.data_paths import REFERENCE
from tests.support.raw_client import (
    BOM,
    REPLY_KEYS,
    RawClient,
    exchange_raw,
    hello,
    line,
    message_body,
    status_body,
)
from tests.support.socket_peers import assert_still_serving, published_sender, settled_peer

pytestmark = pytest.mark.anyio


def reference_reply(scenario: str, index: int) -> dict[str, object]:
    """The ``index``-th receiver line (0-based) of a recorded reference transcript."""
    lines = (REFERENCE / f"{scenario}.wire.jsonl").read_bytes().split(b"\n")[:-1]
    replies = [json.loads(raw) for raw in lines if raw.startswith(b'{"v":1,"type":"response"')]
    return replies[index]


async def test_probe_without_from_gets_ready_with_peer_and_capabilities(
    locations: Locations,
) -> None:
    async with settled_peer(locations, "beta") as beta:
        reg = beta.registration
        async with RawClient.connect(reg.socket_path) as client:
            await client.send(line(hello(reg, request_id="probe-1")))
            reply = await client.read_reply()
            assert (reply.ok, reply.status, reply.request_id) == (True, "ready", "probe-1")
            assert reply.capabilities == ADVERTISED
            assert reply.peer == {"id": reg.id, "instanceId": reg.instance_id, "pid": os.getpid()}
            assert reply.error is None
            # A probe-only connection waits for an optional second frame; EOF ends it quietly.
            await client.send_eof()
            assert await client.read_to_eof() == b""
        assert beta.inbox.entries == []
        await assert_still_serving(locations, reg)


async def test_probe_hello_without_capabilities_is_ready_like_reference_01b(
    locations: Locations,
) -> None:
    async with settled_peer(locations, "beta") as beta:
        reg = beta.registration
        async with RawClient.connect(reg.socket_path) as client:
            await client.send(line(hello(reg, request_id="probe-2", capabilities=None)))
            reply = await client.read_reply()
        recorded = reference_reply("01b-probe-hello-no-caps", 0)
        assert list(reply.to_wire()) == list(recorded)
        assert (reply.ok, reply.status) == (recorded["ok"], recorded["status"]) == (True, "ready")


async def test_message_on_probe_connection_is_authentication_failed_with_message_request_id(
    locations: Locations,
) -> None:
    async with settled_peer(locations, "beta") as beta:
        reg = beta.registration
        ready, refusal = await exchange_raw(
            reg.socket_path,
            line(hello(reg, request_id="probe-3")),
            line(message_body(request_id="the-message-request")),
            replies=2,
        )
        assert ready.status == "ready"
        assert (refusal.ok, refusal.status) == (False, "authentication_failed")
        assert refusal.request_id == "the-message-request"
        recorded = reference_reply("07-message-without-from", 1)
        assert list(refusal.to_wire()) == list(recorded)
        assert recorded["status"] == refusal.status
        assert beta.inbox.entries == []
        await assert_still_serving(locations, reg)


async def test_status_on_probe_connection_is_invalid_frame_unknown(locations: Locations) -> None:
    async with settled_peer(locations, "beta") as beta:
        reg = beta.registration
        ready, refusal = await exchange_raw(
            reg.socket_path,
            line(hello(reg, request_id="probe-4")),
            line(status_body(request_id="st-probe")),
            replies=2,
        )
        assert ready.status == "ready"
        assert (refusal.ok, refusal.status, refusal.request_id) == (
            False,
            "invalid_frame",
            "unknown",
        )
        await assert_still_serving(locations, reg)


async def test_first_frame_not_json_is_invalid_frame_shaped_like_reference_09(
    locations: Locations,
) -> None:
    async with settled_peer(locations, "beta") as beta:
        (reply,) = await exchange_raw(beta.registration.socket_path, b"this is not json\n")
        ours = reply.to_wire()
        recorded = reference_reply("09-invalid-json", 0)
        assert list(ours) == list(recorded)
        for key in REPLY_KEYS:
            if key == "capabilities":  # we list goal scope after the reference's capabilities
                assert ours[key] == [*recorded[key], *ADVERTISED[1:]]
            elif key != "next":  # guidance wording is ours
                assert ours[key] == recorded[key], key
        assert beta.endpoint.statistics().faults == 1
        await assert_still_serving(locations, beta.registration)


FIRST_FRAME_FAULTS = [
    pytest.param(b"this is not json\n", "invalid_frame", id="not-json"),
    pytest.param(b"\n", "invalid_frame", id="empty-line"),
    pytest.param(b"\xff\n", "invalid_frame", id="invalid-utf8"),
    pytest.param(b"{\xc3\n", "invalid_frame", id="incomplete-utf8-before-lf"),
    pytest.param(b"{}\n", "authentication_failed", id="empty-object"),
    pytest.param(b"[]\n", "authentication_failed", id="array"),
    pytest.param(b"null\n", "authentication_failed", id="null"),
    pytest.param(b'"hello"\n', "authentication_failed", id="string"),
    pytest.param(line(message_body()), "authentication_failed", id="message-first"),
    pytest.param(line(status_body()), "authentication_failed", id="status-first"),
]


@pytest.mark.parametrize(("data", "code"), FIRST_FRAME_FAULTS)
async def test_first_frame_that_is_not_a_hello(
    locations: Locations, data: bytes, code: str
) -> None:
    async with settled_peer(locations, "beta") as beta:
        (reply,) = await exchange_raw(beta.registration.socket_path, data)
        assert (reply.ok, reply.status, reply.request_id) == (False, code, "unknown")
        await assert_still_serving(locations, beta.registration)


async def test_hello_version_two_is_not_a_hello(locations: Locations) -> None:
    async with settled_peer(locations, "beta") as beta:
        body = hello(beta.registration) | {"v": 2}
        (reply,) = await exchange_raw(beta.registration.socket_path, line(body))
        assert (reply.status, reply.request_id) == ("authentication_failed", "unknown")
        await assert_still_serving(locations, beta.registration)


async def test_hello_with_wrong_token_echoes_hello_id_and_closes(locations: Locations) -> None:
    async with settled_peer(locations, "beta") as beta:
        body = hello(beta.registration, request_id="bad-token-hello") | {"token": "0" * 64}
        (reply,) = await exchange_raw(beta.registration.socket_path, line(body))
        assert (reply.status, reply.request_id) == ("authentication_failed", "bad-token-hello")
        await assert_still_serving(locations, beta.registration)


async def test_hello_from_the_receiver_itself_is_authentication_failed(
    locations: Locations,
) -> None:
    async with settled_peer(locations, "beta") as beta:
        reg = beta.registration  # published by the peer, with its real token
        body = hello(reg, sender=reg, request_id="self-hello")
        (reply,) = await exchange_raw(reg.socket_path, line(body))
        assert (reply.status, reply.request_id) == ("authentication_failed", "self-hello")
        await assert_still_serving(locations, reg)


async def test_authenticated_message_is_submitted_and_status_is_source_qualified(
    locations: Locations,
) -> None:
    alpha = published_sender(locations, "alpha")
    gamma = published_sender(locations, "gamma")
    async with settled_peer(locations, "beta") as beta:
        reg = beta.registration
        text = "line one\nline two — ünïcödé 日本語 😀"
        ready, receipt = await exchange_raw(
            reg.socket_path,
            line(hello(reg, sender=alpha, request_id="auth-hello")),
            line(message_body(text=text, request_id="m-req", message_id="m-1", summary="line one")),
            replies=2,
        )
        assert (ready.status, ready.request_id) == ("ready", "auth-hello")
        assert (receipt.ok, receipt.status, receipt.request_id) == (True, "submitted", "m-req")
        assert receipt.peer == ready.peer
        (entry,) = beta.inbox.entries
        assert (entry.text, entry.summary, entry.message_id) == (text, "line one", "m-1")
        assert (entry.sender_instance_id, entry.sender_session_id) == (alpha.instance_id, alpha.id)
        assert entry.goal_id is None

        _, mine = await exchange_raw(
            reg.socket_path,
            line(hello(reg, sender=alpha)),
            line(status_body(request_id="st-mine", message_id="m-1")),
            replies=2,
        )
        assert (mine.ok, mine.status, mine.request_id) == (True, "submitted", "st-mine")
        _, theirs = await exchange_raw(
            reg.socket_path,
            line(hello(reg, sender=gamma)),
            line(status_body(request_id="st-theirs", message_id="m-1")),
            replies=2,
        )
        assert (theirs.ok, theirs.status, theirs.request_id) == (True, "unknown", "st-theirs")
        assert len(beta.inbox.entries) == 1
        await assert_still_serving(locations, reg)


async def test_goal_id_passes_through_as_an_extra_field(locations: Locations) -> None:
    alpha = published_sender(locations)
    async with settled_peer(locations, "beta") as beta:
        reg = beta.registration
        _, receipt = await exchange_raw(
            reg.socket_path,
            line(hello(reg, sender=alpha)),
            line(message_body(goalId="goal-7", futureField={"x": 1})),
            replies=2,
        )
        assert receipt.status == "submitted"
        assert [e.goal_id for e in beta.inbox.entries] == ["goal-7"]


@pytest.mark.parametrize("text", [" ", " \t\r\n ", "\u3000\ufeff\u00a0"])
async def test_blank_text_is_invalid_message(locations: Locations, text: str) -> None:
    alpha = published_sender(locations)
    async with settled_peer(locations, "beta") as beta:
        reg = beta.registration
        _, refusal = await exchange_raw(
            reg.socket_path,
            line(hello(reg, sender=alpha)),
            line(message_body(text=text, request_id="blank-req")),
            replies=2,
        )
        assert (refusal.ok, refusal.status, refusal.request_id) == (
            False,
            "invalid_message",
            "blank-req",
        )
        assert beta.inbox.entries == []
        await assert_still_serving(locations, reg)


async def test_duplicate_message_id_is_duplicate(locations: Locations) -> None:
    alpha = published_sender(locations)
    async with settled_peer(locations, "beta") as beta:
        reg = beta.registration
        _, first = await exchange_raw(
            reg.socket_path,
            line(hello(reg, sender=alpha)),
            line(message_body(text="first", request_id="r1", message_id="same-id")),
            replies=2,
        )
        _, second = await exchange_raw(
            reg.socket_path,
            line(hello(reg, sender=alpha)),
            line(message_body(text="different text", request_id="r2", message_id="same-id")),
            replies=2,
        )
        assert first.status == "submitted"
        assert (second.ok, second.status, second.request_id) == (False, "duplicate", "r2")
        recorded = reference_reply("06-duplicate-messageId", 1)
        assert list(second.to_wire()) == list(recorded)
        assert [e.text for e in beta.inbox.entries] == ["first"]
        await assert_still_serving(locations, reg)


TRAILING_FAULTS = [
    pytest.param(b"\xff\n", id="invalid-utf8"),
    pytest.param(b"\xff", id="invalid-utf8-unterminated"),
    pytest.param(b"{}\n", id="third-frame"),
    pytest.param(b"{}\n{}\n", id="third-and-fourth-frames"),
    pytest.param(b"\n", id="empty-line"),
    pytest.param(b"x" * 70_000, id="long-unterminated-tail"),
]


@pytest.mark.parametrize("tail", TRAILING_FAULTS)
@pytest.mark.parametrize("one_write", [True, False], ids=["one-write", "after-ready"])
async def test_item4_fault_after_a_message_does_not_undo_its_admission(
    locations: Locations, tail: bytes, one_write: bool
) -> None:
    alpha = published_sender(locations)
    async with settled_peer(locations, "beta") as beta:
        reg = beta.registration
        hello_bytes = line(hello(reg, sender=alpha, request_id="h"))
        message_bytes = line(message_body(text="kept", request_id="m"))
        async with RawClient.connect(reg.socket_path) as client:
            if one_write:
                await client.send(hello_bytes + message_bytes + tail)
                ready = await client.read_reply()
            else:
                await client.send(hello_bytes)
                ready = await client.read_reply()
                await client.send(message_bytes + tail)
            receipt = await client.read_reply()
            # Nothing after the receipt: no fault reply for the trailing bytes.
            assert await client.read_to_eof() == b""
        assert (ready.status, receipt.status, receipt.request_id) == ("ready", "submitted", "m")
        assert [e.text for e in beta.inbox.entries] == ["kept"]
        await assert_still_serving(locations, reg)


async def test_item5_three_empty_objects_after_hello_is_invalid_frame(
    locations: Locations,
) -> None:
    alpha = published_sender(locations)
    async with settled_peer(locations, "beta") as beta:
        reg = beta.registration
        ready, fault = await exchange_raw(
            reg.socket_path, line(hello(reg, sender=alpha)), b"{}\n{}\n{}\n", replies=2
        )
        assert ready.status == "ready"
        assert (fault.ok, fault.status, fault.request_id) == (False, "invalid_frame", "unknown")
        assert beta.inbox.entries == []
        await assert_still_serving(locations, reg)


async def test_item5_byte_at_a_time_multibyte_text_is_reassembled_and_submitted(
    locations: Locations,
) -> None:
    alpha = published_sender(locations)
    text = "日本語のテキスト — 😀🎉 𝄞 ünïcödé"
    async with settled_peer(locations, "beta") as beta:
        reg = beta.registration
        data = line(hello(reg, sender=alpha)) + line(message_body(text=text, summary="日本語 😀"))
        async with RawClient.connect(reg.socket_path) as client:
            for index in range(len(data)):
                await client.send(data[index : index + 1])
                # Let the receiver read this byte before the next one is written, so multi-byte
                # characters really arrive split across reads (best effort; the result holds
                # however the kernel coalesces).
                await anyio.lowlevel.checkpoint()
                await anyio.lowlevel.checkpoint()
            ready = await client.read_reply()
            receipt = await client.read_reply()
        assert (ready.status, receipt.status) == ("ready", "submitted")
        (entry,) = beta.inbox.entries
        assert (entry.text, entry.summary) == (text, "日本語 😀")
        await assert_still_serving(locations, reg)


async def test_bom_before_the_hello_is_accepted(locations: Locations) -> None:
    alpha = published_sender(locations)
    async with settled_peer(locations, "beta") as beta:
        reg = beta.registration
        ready, receipt = await exchange_raw(
            reg.socket_path,
            BOM + line(hello(reg, sender=alpha)),
            line(message_body()),
            replies=2,
        )
        assert (ready.status, receipt.status) == ("ready", "submitted")


async def test_bom_split_across_writes_before_the_hello_is_accepted(locations: Locations) -> None:
    async with settled_peer(locations, "beta") as beta:
        reg = beta.registration
        async with RawClient.connect(reg.socket_path) as client:
            for piece in (BOM[:1], BOM[1:2], BOM[2:] + line(hello(reg))):
                await client.send(piece)
                await anyio.lowlevel.checkpoint()
            assert (await client.read_reply()).status == "ready"


async def test_bom_before_the_second_frame_is_invalid_frame(locations: Locations) -> None:
    alpha = published_sender(locations)
    async with settled_peer(locations, "beta") as beta:
        reg = beta.registration
        ready, fault = await exchange_raw(
            reg.socket_path,
            line(hello(reg, sender=alpha)),
            BOM + line(message_body()),
            replies=2,
        )
        assert ready.status == "ready"
        assert (fault.status, fault.request_id) == ("invalid_frame", "unknown")
        assert beta.inbox.entries == []


async def test_crlf_framing_is_tolerated(locations: Locations) -> None:
    alpha = published_sender(locations)
    async with settled_peer(locations, "beta") as beta:
        reg = beta.registration
        ready, receipt = await exchange_raw(
            reg.socket_path,
            line(hello(reg, sender=alpha))[:-1] + b"\r\n",
            line(message_body(text="crlf"))[:-1] + b"  \r\n",
            replies=2,
        )
        assert (ready.status, receipt.status) == ("ready", "submitted")
        assert [e.text for e in beta.inbox.entries] == ["crlf"]


SECOND_FRAME_FAULTS = [
    pytest.param(b"not json\n", id="not-json"),
    pytest.param(b"\n", id="empty-line"),
    pytest.param(b"\xc3\x28\n", id="invalid-utf8"),
    pytest.param(line({"v": 1, "type": "hello", "requestId": "again"}), id="hello"),
    pytest.param(line({"v": 1, "type": "response"}), id="response"),
    pytest.param(b"[1,2]\n", id="array"),
    pytest.param(line(message_body() | {"v": 2}), id="message-v2"),
    pytest.param(line(message_body() | {"sentAt": 2**53}), id="unsafe-sentAt"),
    pytest.param(line(message_body() | {"sentAt": True}), id="bool-sentAt"),
    pytest.param(line(message_body() | {"goalId": None}), id="null-goalId"),
    pytest.param(
        json.dumps(message_body(text="bad \ud800 escape"), separators=(",", ":")).encode() + b"\n",
        id="lone-surrogate-escape",
    ),
]


@pytest.mark.parametrize("data", SECOND_FRAME_FAULTS)
async def test_second_frame_that_is_neither_message_nor_status(
    locations: Locations, data: bytes
) -> None:
    alpha = published_sender(locations)
    async with settled_peer(locations, "beta") as beta:
        reg = beta.registration
        ready, fault = await exchange_raw(
            reg.socket_path, line(hello(reg, sender=alpha)), data, replies=2
        )
        assert ready.status == "ready"
        assert (fault.ok, fault.status, fault.request_id) == (False, "invalid_frame", "unknown")
        assert beta.inbox.entries == []
        await assert_still_serving(locations, reg)
