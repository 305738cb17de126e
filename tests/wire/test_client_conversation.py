"""The client conversation without sockets: its table; every reply judged in the contract's order.

Replies are written with the stdlib ``json`` here. The exchange that drives this machine is
tested over real sockets in ``tests/sending``, and over an in-memory stream on a virtual clock in
``tests/sending/test_exchange_driver.py``.
"""

from __future__ import annotations

import json
from typing import Any, Final

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pi_cross_session._internal.protocol.client_conversation import (
    CLIENT_TRANSITIONS,
    ClientConversation,
    ClientInput,
    ClientState,
    Failed,
    ReadyReceived,
    Settled,
    client_transition,
)
from pi_cross_session._internal.protocol.conversation import NEED_DATA, PAUSED
from pi_cross_session._internal.protocol.errors import FrameTooLargeError, LocalProtocolError
from pi_cross_session._internal.protocol.frames import Hello, Message, StatusQuery
from tests.hypothesis_profiles import scaled

TOKEN: Final = "a" * 64
INSTANCE: Final = "0123456789abcdef0123456789abcdef"
OTHER: Final = "fedcba9876543210fedcba9876543210"
SAFE_QUEUE: Final = "cancel-safe-queue-v1"
GOAL_SCOPED: Final = "goal-scoped-peer-v1"
T0: Final = 50.0
TERMINAL: Final = (ClientState.SETTLED, ClientState.FAILED, ClientState.ERROR)


def line(body: Any) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def hello() -> Hello:
    return Hello.model_validate(
        {
            "v": 1,
            "type": "hello",
            "capabilities": [SAFE_QUEUE],
            "requestId": "hello-1",
            "token": TOKEN,
            "target": {"id": "receiver", "instanceId": INSTANCE},
        },
        by_alias=True,
    )


def message(*, goal_id: str | None = None, text: str = "hi") -> Message:
    body: dict[str, Any] = {
        "v": 1,
        "type": "message",
        "requestId": "msg-req-1",
        "messageId": "msg-1",
        "text": text,
        "summary": "hi",
        "sentAt": 1_795_941_847_396,
    }
    if goal_id is not None:
        body["goalId"] = goal_id
    return Message.model_validate(body, by_alias=True)


def status_query() -> StatusQuery:
    return StatusQuery.model_validate(
        {"v": 1, "type": "status", "requestId": "st-req-1", "messageId": "msg-1"}, by_alias=True
    )


def reply(request_id: str, status: str, *, ok: bool = True, **fields: Any) -> bytes:
    body: dict[str, Any] = {
        "v": 1,
        "type": "response",
        "requestId": request_id,
        "ok": ok,
        "status": status,
        "capabilities": [SAFE_QUEUE, GOAL_SCOPED],
    }
    if ok:
        body["peer"] = {"id": "receiver", "instanceId": INSTANCE, "pid": 4242}
    body.update(fields)
    return line({key: value for key, value in body.items() if value is not ABSENT})


ABSENT: Final = object()
READY: Final = reply("hello-1", "ready")


def conversation(
    request: Message | StatusQuery | None = None, *, deadline_s: float = 5.0
) -> ClientConversation:
    return ClientConversation(
        hello(),
        request,
        peer_id="receiver",
        peer_instance_id=INSTANCE,
        started_at=T0,
        deadline_s=deadline_s,
    )


def run(conv: ClientConversation, *replies: bytes) -> Settled | Failed:
    """Drive ``conv`` as the exchange does, the peer answering ``replies`` then closing."""
    written = [conv.send_hello()]
    queue = list(replies)
    while True:
        event = conv.next_event()
        if event is NEED_DATA:
            conv.receive_data(queue.pop(0) if queue else b"")
        elif isinstance(event, ReadyReceived):
            written.append(conv.send_request())
        else:
            assert isinstance(event, (Settled, Failed))
            return event


# -- the table -----------------------------------------------------------------------------------


@given(st.sampled_from(list(ClientState)), st.sampled_from(list(ClientInput)))
@settings(max_examples=scaled(200))
def test_the_table_is_a_total_function(state: ClientState, event: ClientInput) -> None:
    expected = CLIENT_TRANSITIONS.get((state, event), ClientState.ERROR)
    assert client_transition(state, event) is expected


def test_terminal_states_accept_nothing_and_live_ones_can_expire() -> None:
    assert not [pair for pair in CLIENT_TRANSITIONS if pair[0] in TERMINAL]
    for state in ClientState:
        if state not in TERMINAL:
            assert client_transition(state, ClientInput.EXPIRE) is ClientState.FAILED


# -- good endings ----------------------------------------------------------------------------------


def test_a_probe_settles_on_ready_and_writes_nothing_more() -> None:
    conv = conversation()
    assert conv.next_event() is PAUSED  # the hello is owed first
    assert json.loads(conv.send_hello())["requestId"] == "hello-1"
    assert conv.next_event() is NEED_DATA
    conv.receive_data(READY + b"anything after is never judged\n")
    event = conv.next_event()
    assert isinstance(event, Settled)
    assert event.reply is None
    assert event.ready.status == "ready"
    assert conv.state is ClientState.SETTLED
    assert conv.next_event() is event  # sticky
    with pytest.raises(LocalProtocolError):
        conv.send_request()


@pytest.mark.parametrize("status", ["submitted", "queued", "accepted"])
def test_a_message_settles_on_a_receipt(status: str) -> None:
    conv = conversation(message())
    assert conv.sends_message
    conv.send_hello()
    conv.receive_data(READY)
    ready = conv.next_event()
    assert isinstance(ready, ReadyReceived)
    assert conv.next_event() is PAUSED  # the request is owed
    assert json.loads(conv.send_request())["messageId"] == "msg-1"
    conv.receive_data(reply("msg-req-1", status))
    settled = conv.next_event()
    assert isinstance(settled, Settled)
    assert settled.reply is not None
    assert (settled.ready, settled.reply.status) == (ready.ready, status)


def test_a_status_query_settles_on_any_answer() -> None:
    ending = run(conversation(status_query()), READY, reply("st-req-1", "unknown"))
    assert isinstance(ending, Settled)
    assert ending.reply is not None
    assert ending.reply.status == "unknown"


def test_a_goal_scoped_message_to_a_goal_capable_receiver_is_written() -> None:
    ending = run(conversation(message(goal_id="g-1")), READY, reply("msg-req-1", "queued"))
    assert isinstance(ending, Settled)


# -- every failure, in the contract's order ------------------------------------------------------


def failure(request: Message | StatusQuery | None, *replies: bytes) -> Failed:
    ending = run(conversation(request), *replies)
    assert isinstance(ending, Failed), ending
    return ending


@pytest.mark.parametrize(
    ("replies", "code"),
    [
        pytest.param([b"not json\n"], "invalid_response", id="not-json"),
        pytest.param([b"\xff\n"], "invalid_response", id="not-utf8"),
        pytest.param([line({"v": 1, "type": "response"})], "invalid_response", id="not-response"),
        pytest.param([reply("hello-1", "ready", next={})], "invalid_response", id="bad-next"),
        pytest.param([], "connection_closed", id="closed-before-ready"),
        pytest.param([READY[:20]], "connection_closed", id="closed-mid-ready"),
        pytest.param([reply("other", "busy", ok=False)], "invalid_receipt", id="stale-refusal"),
        pytest.param([reply("unknown", "busy", ok=False)], "invalid_receipt", id="unknown-id"),
        pytest.param([reply("hello-1", "submitted")], "wrong_endpoint", id="not-ready"),
        pytest.param(
            [reply("hello-1", "ready", peer={"id": "x", "instanceId": INSTANCE, "pid": 1})],
            "wrong_endpoint",
            id="other-peer",
        ),
        pytest.param([reply("hello-1", "ready", peer=ABSENT)], "wrong_endpoint", id="no-peer"),
        pytest.param(
            [reply("hello-1", "ready", capabilities=[])], "unsupported", id="no-safe-queue"
        ),
        pytest.param([READY], "connection_closed", id="closed-before-receipt"),
        pytest.param([READY, reply("hello-1", "submitted")], "invalid_receipt", id="ready-id"),
        pytest.param([READY, reply("msg-req-1", "unknown")], "invalid_receipt", id="not-receipt"),
        pytest.param(
            [READY, reply("msg-req-1", "queued", peer={"id": "receiver", "instanceId": OTHER})],
            "invalid_receipt",
            id="receipt-other-peer",
        ),
    ],
)
def test_a_message_exchange_that_goes_wrong(replies: list[bytes], code: str) -> None:
    ending = failure(message(), *replies)
    assert ending.code == code
    assert ending.remote_error is None


def test_a_refusal_carries_the_receivers_status_and_text() -> None:
    refused = reply("hello-1", "authentication_failed", ok=False, error="nope")
    assert (failure(None, refused).code, failure(None, refused).remote_error) == (
        "authentication_failed",
        "nope",
    )
    busy = reply("msg-req-1", "busy", ok=False)
    assert failure(message(), READY, busy).code == "busy"


def test_a_goal_scoped_message_needs_the_goal_capability() -> None:
    old = reply("hello-1", "ready", capabilities=[SAFE_QUEUE])
    assert failure(message(goal_id="g-1"), old).code == "unsupported"


def test_a_probe_of_an_old_receiver_is_fine() -> None:
    old = reply("hello-1", "ready", capabilities=[])
    assert isinstance(run(conversation(), old), Settled)


# -- deadline, sizes, splits -----------------------------------------------------------------------


def test_the_deadline_is_one_value_from_the_start() -> None:
    conv = conversation(message(), deadline_s=0.35)
    assert conv.deadline == T0 + 0.35
    expired = conv.expire()  # before anything was written: vetting or connecting ran late
    assert (expired.code, expired.detail) == ("timeout", "no complete answer within 0.35 s")
    assert conv.state is ClientState.FAILED
    assert conv.next_event() is expired


def test_a_settled_exchange_cannot_expire() -> None:
    conv = conversation()
    assert isinstance(run(conv, READY), Settled)
    with pytest.raises(LocalProtocolError):
        conv.expire()


def test_frames_are_encoded_before_anything_happens() -> None:
    with pytest.raises(FrameTooLargeError):
        ClientConversation(
            hello(),
            message(text="x" * 600),
            peer_id="receiver",
            peer_instance_id=INSTANCE,
            started_at=T0,
            deadline_s=5.0,
            max_frame_bytes=512,
        )


def test_a_reply_over_the_cap_is_an_invalid_response() -> None:
    conv = ClientConversation(
        hello(),
        None,
        peer_id="receiver",
        peer_instance_id=INSTANCE,
        started_at=T0,
        deadline_s=5.0,
        max_frame_bytes=400,
    )
    ending = run(conv, b" " * 401)
    assert isinstance(ending, Failed)
    assert ending.code == "invalid_response"


def test_every_split_point_of_the_replies_gives_the_same_ending() -> None:
    data = READY + reply("msg-req-1", "queued")
    whole = run(conversation(message()), data)
    assert isinstance(whole, Settled)
    for cut in range(1, len(data)):
        assert run(conversation(message()), data[:cut], data[cut:]) == whole, cut
