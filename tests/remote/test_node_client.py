"""A Node-shaped v1 client reaches a session on another machine through a proxy socket, with
exactly the frames the reference sends (tests/vectors/reference-v2.2.1): it never learns the peer
is remote. Frames are built with the stdlib here, never with the package's encoder."""

from __future__ import annotations

import json
import uuid
from typing import Any

import anyio

from pi_cross_session._internal.protocol import frames
from pi_cross_session._internal.protocol.io.exchange import ExchangeError, Exchanger
from pi_cross_session._internal.protocol.registration import Registration, parse_registration
from pi_cross_session._internal.security.io import fs
from tests.support import raw_client
from tests.support.raw_client import REPLY_KEYS, RawClient, line
from tests.support.remote import Fleet, Machine
from tests.support.socket_peers import as_sender, make_message, published_sender

#: What the reference 2.2.1 advertises in a hello (and all it advertises).
NODE_CAPABILITIES = ["cancel-safe-queue-v1"]


def proxy_of(machine: Machine, name: str) -> Registration:
    for path in (machine.agent_dir / "peers").glob("*.json"):
        raw = path.read_bytes()
        body = json.loads(raw)
        if body["name"] == name:
            return parse_registration(
                raw,
                file_stem=body["instanceId"],
                expected_socket_path=machine.locations.socket_path(body["instanceId"]),
            )
    raise AssertionError(f"no registration named {name}")


def check_reply(raw: bytes) -> frames.Response:
    """One reply line shaped as the contract says (keys in the reference's order, code == state
    == status, peer only when ok), advertising what a proxy carries and never goal scope."""
    assert raw.endswith(b"\n"), raw
    assert raw.count(b"\n") == 1, raw
    body = json.loads(raw)
    keys = list(body)
    assert tuple(keys[: len(REPLY_KEYS)]) == REPLY_KEYS, keys
    assert keys[len(REPLY_KEYS) :] == [k for k in ("error", "peer") if k in body], keys
    assert body["code"] == body["state"] == body["status"]
    assert ("peer" in body) == body["ok"]
    assert set(body["capabilities"]) <= {"cancel-safe-queue-v1", "delivery-receipts-v1"}
    return frames.parse_response(body)


async def exchange(path: str, *frames: dict[str, Any]) -> list[Any]:
    """Write the frames one by one, each after the previous reply, and read every reply."""
    replies = []
    async with RawClient.connect(path) as client:
        for frame in frames:
            await client.send(line(frame))
            replies.append(check_reply(await client.read_line() or b""))
    return replies


def test_a_node_shaped_client_sends_and_asks_through_the_proxy(fleet: Fleet) -> None:
    fleet.start_server()
    laptop, buildbox = fleet.pair("laptop", "buildbox")
    bob = buildbox.inbox("bob", "--busy", "0")
    laptop.start_gateway()
    buildbox.start_gateway()
    laptop.wait_peer("bob@buildbox")
    proxy = proxy_of(laptop, "bob@buildbox")
    node = published_sender(laptop.locations, "node-session")
    path = proxy.socket_path

    async def scenario() -> None:
        # The listing probe every Node listing makes: answered at once, by the proxy itself.
        (ready,) = await exchange(
            path, raw_client.hello(proxy, request_id="probe-1", capabilities=NODE_CAPABILITIES)
        )
        assert (ready.ok, ready.status) == (True, "ready")
        assert ready.peer_identity() is not None
        assert ready.peer_identity().instance_id == proxy.instance_id  # type: ignore[union-attr]
        assert "goal-scoped-peer-v1" not in (ready.capabilities or ())
        assert "cancel-safe-queue-v1" in (ready.capabilities or ())

        # An authenticated hello, then a message: the real receipt of the real session.
        message_id = str(uuid.uuid4())
        hello = raw_client.hello(
            proxy, sender=node, request_id=str(uuid.uuid4()), capabilities=NODE_CAPABILITIES
        )
        message = raw_client.message_body(
            text="Hello from a Node-shaped client.\nSecond line.",
            summary="node hello",
            request_id=str(uuid.uuid4()),
            message_id=message_id,
        )
        ready, receipt = await exchange(path, hello, message)
        assert (ready.status, receipt.ok, receipt.status) == ("ready", True, "submitted")
        assert receipt.request_id == message["requestId"]
        assert receipt.peer_identity().instance_id == proxy.instance_id  # type: ignore[union-attr]

        # The status query asks as the same sender and finds the row on the other machine. A
        # sender without delivery-receipts-v1 never hears "delivered".
        query = raw_client.status_body(request_id=str(uuid.uuid4()), message_id=message_id)
        hello = raw_client.hello(
            proxy, sender=node, request_id=str(uuid.uuid4()), capabilities=NODE_CAPABILITIES
        )
        _, answer = await exchange(path, hello, query)
        assert (answer.ok, answer.status) == (True, "submitted")

        # A goal id does not cross machines: refused, nothing sent.
        scoped = raw_client.message_body(
            request_id=str(uuid.uuid4()), message_id=str(uuid.uuid4()), goalId="goal-1"
        )
        hello = raw_client.hello(proxy, sender=node, request_id=str(uuid.uuid4()))
        _, refused = await exchange(path, hello, scoped)
        assert (refused.ok, refused.status) == (False, "unsupported")

        # A message on a probe-only connection, and a hello with a stolen identity, are refused
        # at the proxy's door as at any session's.
        probe = raw_client.hello(proxy, request_id="probe-2")
        _, unauthenticated = await exchange(path, probe, raw_client.message_body(request_id="m-x"))
        assert (unauthenticated.ok, unauthenticated.status) == (False, "authentication_failed")
        forged = raw_client.hello(proxy, sender=node, request_id="forged")
        forged["from"]["token"] = "0" * 64
        (wrong,) = await exchange(path, forged)
        assert (wrong.ok, wrong.status) == (False, "authentication_failed")

        bob.wait_event("message", messageId=message_id)

    anyio.run(scenario)


def test_a_goal_scoped_send_to_a_proxy_is_unsupported_with_nothing_sent(fleet: Fleet) -> None:
    fleet.start_server()
    laptop, buildbox = fleet.pair("laptop", "buildbox")
    buildbox.inbox("bob")
    laptop.start_gateway()
    buildbox.start_gateway()
    laptop.wait_peer("bob@buildbox")
    proxy = proxy_of(laptop, "bob@buildbox")
    sender = as_sender(published_sender(laptop.locations, "python-session"))

    async def scoped() -> ExchangeError:
        try:
            await Exchanger(laptop.locations, fs).send(
                proxy, sender=sender, message=make_message("for the goal", goalId="goal-1")
            )
        except ExchangeError as exc:
            return exc
        raise AssertionError("a scoped send to a proxy went through")

    failure = anyio.run(scoped)
    assert failure.code == "unsupported"
    assert failure.message_written is False
