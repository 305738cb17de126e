"""The server conversation without sockets: its table, its events, its fixed replies, its deadlines.

Frames are written with the stdlib ``json`` here, and replies read back with it, so nothing
assumes the package's own encoder. The endpoint that drives this machine is tested over real
sockets in ``tests/receiver``; over an in-memory stream on a virtual clock in
``tests/receiver/test_endpoint_driver.py``.
"""

from __future__ import annotations

import json
from typing import Any, Final

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pi_cross_session._internal.protocol.codes import Code, refusal_text
from pi_cross_session._internal.protocol.conversation import ENDED, NEED_DATA, PAUSED
from pi_cross_session._internal.protocol.errors import LocalProtocolError
from pi_cross_session._internal.protocol.frames import PeerIdentity, Response
from pi_cross_session._internal.protocol.server_conversation import (
    SERVER_TRANSITIONS,
    Ending,
    HelloReceived,
    PeerClosed,
    Rejected,
    RequestReceived,
    ServerBounds,
    ServerConversation,
    ServerInput,
    ServerState,
    server_transition,
)
from pi_cross_session._internal.protocol.shape import ShapeBounds
from tests.hypothesis_profiles import scaled

TOKEN: Final = "a" * 64
INSTANCE: Final = "0123456789abcdef0123456789abcdef"
SENDER: Final = "fedcba9876543210fedcba9876543210"
T0: Final = 1_000.0
BOUNDS: Final = ServerBounds(
    connection_deadline_s=30.0, idle_after_hello_s=5.0, request_deadline_s=5.0
)
TERMINAL: Final = (ServerState.CLOSED, ServerState.ERROR)


def line(body: Any) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def hello(request_id: str = "hello-1", *, authenticated: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {
        "v": 1,
        "type": "hello",
        "capabilities": ["cancel-safe-queue-v1"],
        "requestId": request_id,
        "token": TOKEN,
        "target": {"id": "receiver", "instanceId": INSTANCE},
    }
    if authenticated:
        body["from"] = {"id": "sender", "instanceId": SENDER, "token": "b" * 64}
    return body


def message(request_id: str = "msg-req-1") -> dict[str, Any]:
    return {
        "v": 1,
        "type": "message",
        "requestId": request_id,
        "messageId": "msg-1",
        "text": "hello",
        "summary": "hello",
        "sentAt": 1_795_941_847_396,
    }


def ready(request_id: str = "hello-1") -> Response:
    peer = PeerIdentity(id="receiver", instance_id=INSTANCE, pid=4242)
    return Response.build(request_id=request_id, ok=True, status=Code.READY, peer=peer)


def refusal(request_id: str, code: Code) -> Response:
    return Response.build(request_id=request_id, ok=False, status=code, error=refusal_text(code))


def conversation(bounds: ServerBounds = BOUNDS) -> ServerConversation:
    return ServerConversation(opened_at=T0, bounds=bounds)


def fed(data: bytes, now: float = T0) -> ServerConversation:
    conv = conversation()
    conv.receive_data(data, now)
    return conv


def reply_of(data: bytes) -> dict[str, Any]:
    assert data.endswith(b"\n")
    assert data.count(b"\n") == 1
    body = json.loads(data)
    assert isinstance(body, dict)
    return body


# -- the table -----------------------------------------------------------------------------------


@given(st.sampled_from(list(ServerState)), st.sampled_from(list(ServerInput)))
@settings(max_examples=scaled(200))
def test_the_table_is_a_total_function(state: ServerState, event: ServerInput) -> None:
    after, ending = server_transition(state, event)
    if (state, event) in SERVER_TRANSITIONS:
        assert (after, ending) == SERVER_TRANSITIONS[(state, event)]
    else:
        assert (after, ending) == (ServerState.ERROR, None)
    # Only a closing step says how the conversation ended.
    assert ending is None or after is ServerState.CLOSED


def test_terminal_states_accept_nothing() -> None:
    assert not [pair for pair in SERVER_TRANSITIONS if pair[0] in TERMINAL]


def test_every_live_state_can_expire_into_closed() -> None:
    for state in ServerState:
        if state not in TERMINAL:
            assert server_transition(state, ServerInput.EXPIRE) == (ServerState.CLOSED, None)


def test_every_state_is_reachable_from_the_start() -> None:
    seen = {ServerState.AWAIT_HELLO}
    frontier = [ServerState.AWAIT_HELLO]
    while frontier:
        state = frontier.pop()
        for (src, _), (dst, _) in SERVER_TRANSITIONS.items():
            if src is state and dst not in seen:
                seen.add(dst)
                frontier.append(dst)
    assert seen == set(ServerState) - {ServerState.ERROR}


# -- conversations ---------------------------------------------------------------------------------


def test_a_probe_gets_ready_and_ends_when_the_peer_closes() -> None:
    conv = conversation()
    assert conv.next_event() is NEED_DATA
    conv.receive_data(line(hello()), T0 + 1)
    event = conv.next_event()
    assert isinstance(event, HelloReceived)
    assert event.hello.request_id == "hello-1"
    assert event.hello.sender is None
    assert conv.next_event() is PAUSED  # the driver owes the reply
    assert reply_of(conv.accept_hello(ready(), T0 + 1))["status"] == "ready"
    assert conv.state is ServerState.AWAIT_REQUEST
    assert conv.next_event() is NEED_DATA
    conv.receive_data(b"", T0 + 2)
    assert conv.next_event() == PeerClosed(partial=False)
    assert (conv.state, conv.ending) == (ServerState.CLOSED, Ending.PEER_CLOSED)
    assert conv.next_event() is ENDED


def test_an_authenticated_message_is_answered_and_ends_the_conversation() -> None:
    conv = fed(line(hello(authenticated=True)) + line(message()))
    event = conv.next_event()
    assert isinstance(event, HelloReceived)
    assert event.hello.sender is not None
    # The message is already buffered, but it waits until the hello is answered.
    assert conv.next_event() is PAUSED
    conv.accept_hello(ready(), T0)
    request = conv.next_event()
    assert isinstance(request, RequestReceived)
    assert request.request.request_id == "msg-req-1"
    assert conv.state is ServerState.ANSWERING
    receipt = Response.build(request_id="msg-req-1", ok=True, status=Code.SUBMITTED)
    assert reply_of(conv.answer(receipt))["status"] == "submitted"
    assert (conv.state, conv.ending) == (ServerState.CLOSED, Ending.ANSWERED)
    assert conv.next_event() is ENDED


def test_frames_after_the_request_are_never_read() -> None:
    conv = fed(line(hello(authenticated=True)) + line(message()) + b"garbage\n")
    assert isinstance(conv.next_event(), HelloReceived)
    conv.accept_hello(ready(), T0)
    assert isinstance(conv.next_event(), RequestReceived)
    conv.answer(Response.build(request_id="msg-req-1", ok=True, status=Code.SUBMITTED))
    assert conv.next_event() is ENDED  # the third frame is never judged
    assert conv.ending is Ending.ANSWERED


def test_a_refused_hello_is_the_last_reply() -> None:
    conv = fed(line(hello()) + line(message()))
    assert isinstance(conv.next_event(), HelloReceived)
    body = reply_of(conv.refuse_hello(refusal("hello-1", Code.AUTHENTICATION_FAILED)))
    assert (body["status"], body["requestId"]) == ("authentication_failed", "hello-1")
    assert (conv.state, conv.ending) == (ServerState.CLOSED, Ending.HELLO_REFUSED)
    assert conv.next_event() is ENDED


def test_a_fault_after_the_hello_comes_after_its_reply() -> None:
    conv = fed(line(hello()) + b"\xff\n")
    assert isinstance(conv.next_event(), HelloReceived)
    assert conv.next_event() is PAUSED
    conv.accept_hello(ready(), T0)
    event = conv.next_event()
    assert isinstance(event, Rejected)
    assert event.code is Code.INVALID_FRAME
    assert conv.ending is Ending.FAULT


# -- frames of the wrong kind: the fixed replies -------------------------------------------------


@pytest.mark.parametrize(
    ("first", "code", "costly"),
    [
        pytest.param(b"not json\n", Code.INVALID_FRAME, False, id="not-json"),
        pytest.param(b"\n", Code.INVALID_FRAME, False, id="empty-line"),
        pytest.param(b"\xc3\x28\n", Code.INVALID_FRAME, False, id="bad-utf8"),
        pytest.param(line(message()), Code.AUTHENTICATION_FAILED, False, id="a-message-first"),
        pytest.param(line({**hello(), "from": None}), Code.AUTHENTICATION_FAILED, False, id="null"),
        pytest.param(line([{}] * 40), Code.AUTHENTICATION_FAILED, True, id="too-costly"),
        pytest.param(b"[" * 40 + b'"x\n', Code.AUTHENTICATION_FAILED, True, id="costly-bad"),
    ],
)
def test_a_first_frame_that_is_not_a_hello(first: bytes, code: Code, costly: bool) -> None:
    conv = fed(first)
    event = conv.next_event()
    assert isinstance(event, Rejected)
    assert (event.code, event.costly) == (code, costly)
    body = reply_of(event.reply)
    assert (body["ok"], body["status"], body["requestId"]) == (False, code, "unknown")
    assert body["error"] == refusal_text(code)
    assert (conv.state, conv.ending) == (ServerState.CLOSED, Ending.FAULT)
    assert conv.next_event() is ENDED


@pytest.mark.parametrize(
    ("second", "code", "costly"),
    [
        pytest.param(b"{}\n", Code.INVALID_FRAME, False, id="no-type"),
        pytest.param(line(hello()), Code.INVALID_FRAME, False, id="a-second-hello"),
        pytest.param(line({**message(), "sentAt": 1.5}), Code.INVALID_FRAME, False, id="float"),
        pytest.param(line([{}] * 40), Code.INVALID_FRAME, True, id="too-costly"),
    ],
)
def test_a_second_frame_that_is_not_a_request(second: bytes, code: Code, costly: bool) -> None:
    conv = fed(line(hello(authenticated=True)) + second)
    assert isinstance(conv.next_event(), HelloReceived)
    conv.accept_hello(ready(), T0)
    event = conv.next_event()
    assert isinstance(event, Rejected)
    assert (event.code, event.costly) == (code, costly)
    assert reply_of(event.reply)["requestId"] == "unknown"


def test_an_oversized_frame_is_message_too_large_whatever_comes_first() -> None:
    bounds = ServerBounds(max_frame_bytes=64)
    conv = ServerConversation(opened_at=T0, bounds=bounds)
    conv.receive_data(b" " * 65, T0)
    event = conv.next_event()
    assert isinstance(event, Rejected)
    assert event.code is Code.MESSAGE_TOO_LARGE


@given(st.binary(min_size=1, max_size=200))
@settings(max_examples=scaled(300))
def test_a_fixed_reply_never_depends_on_the_frame(garbage: bytes) -> None:
    conv = fed(garbage.replace(b"\n", b" ") + b"\n")
    event = conv.next_event()
    if isinstance(event, Rejected):
        assert event.reply == BOUNDS.fault_replies[event.code]
    else:  # random bytes that happen to be a hello are vanishingly rare; never a request
        assert isinstance(event, HelloReceived)


def test_the_costly_bound_is_the_endpoints() -> None:
    tight = ServerBounds(shape_bounds=ShapeBounds(max_containers=1))
    conv = ServerConversation(opened_at=T0, bounds=tight)
    conv.receive_data(line(hello()), T0)  # a hello has two containers
    event = conv.next_event()
    assert isinstance(event, Rejected)
    assert event.costly


# -- any split of the same bytes -----------------------------------------------------------------


def events_of(chunks: list[bytes]) -> list[Any]:
    """Every event of a conversation fed ``chunks``, answering as a receiver would."""
    conv = conversation()
    out: list[Any] = []
    queue = list(chunks)
    while True:
        event = conv.next_event()
        if event is NEED_DATA:
            conv.receive_data(queue.pop(0) if queue else b"", T0)
            continue
        if event is ENDED:
            return out
        out.append(event)
        if isinstance(event, HelloReceived):
            conv.accept_hello(ready(event.hello.request_id), T0)
        elif isinstance(event, RequestReceived):
            conv.answer(Response.build(request_id="msg-req-1", ok=True, status=Code.SUBMITTED))


STREAMS: Final = [
    line(hello(authenticated=True)) + line(message()),
    line(hello()) + b'{"v":1,"type":"status"',
    b"\xef\xbb\xbf" + line(hello()) + b"\n",
    line(hello()) + b"\xed\xa0\x80\n",
]


@pytest.mark.parametrize("data", STREAMS, ids=["message", "cut-short", "bom", "surrogate"])
def test_every_split_point_gives_the_same_events(data: bytes) -> None:
    whole = events_of([data])
    for cut in range(1, len(data)):
        assert events_of([data[:cut], data[cut:]]) == whole, cut
    assert events_of([bytes([b]) for b in data]) == whole


# -- deadlines -------------------------------------------------------------------------------------


def test_before_ready_only_the_connection_deadline_runs() -> None:
    conv = conversation()
    assert (conv.deadline.at, conv.deadline.ending) == (T0 + 30, Ending.CUT_AT_DEADLINE)
    conv.receive_data(line(hello())[:10], T0 + 20)
    assert conv.deadline.at == T0 + 30  # bytes before the hello move nothing
    conv.receive_data(line(hello())[10:], T0 + 21)
    assert isinstance(conv.next_event(), HelloReceived)
    assert conv.deadline.at == T0 + 30  # nor does judging the hello


def test_after_ready_the_idle_bound_follows_the_bytes_and_the_request_bound_does_not() -> None:
    conv = fed(line(hello(authenticated=True)))
    assert isinstance(conv.next_event(), HelloReceived)
    conv.accept_hello(ready(), T0 + 1)
    assert (conv.deadline.at, conv.deadline.ending) == (T0 + 6, Ending.CUT_IDLE)  # idle wins a tie
    conv.receive_data(b"{", T0 + 3)
    assert (conv.deadline.at, conv.deadline.ending) == (T0 + 6, Ending.CUT_REQUEST)
    assert conv.next_event() is NEED_DATA
    assert conv.expire() is Ending.CUT_REQUEST
    assert (conv.state, conv.ending) == (ServerState.CLOSED, Ending.CUT_REQUEST)


def test_the_connection_deadline_wins_when_it_comes_first() -> None:
    conv = fed(line(hello()), T0 + 28)
    assert isinstance(conv.next_event(), HelloReceived)
    conv.accept_hello(ready(), T0 + 28)
    assert (conv.deadline.at, conv.deadline.ending) == (T0 + 30, Ending.CUT_AT_DEADLINE)
    assert conv.expire() is Ending.CUT_AT_DEADLINE


def test_a_silent_client_after_ready_is_idle() -> None:
    conv = fed(line(hello()))
    assert isinstance(conv.next_event(), HelloReceived)
    conv.accept_hello(ready(), T0 + 2)
    assert conv.next_event() is NEED_DATA
    assert conv.expire() is Ending.CUT_IDLE


def test_while_a_request_is_answered_only_the_connection_deadline_runs() -> None:
    conv = fed(line(hello(authenticated=True)))
    assert isinstance(conv.next_event(), HelloReceived)
    conv.accept_hello(ready(), T0 + 1)
    conv.receive_data(line(message()), T0 + 5.9)
    assert isinstance(conv.next_event(), RequestReceived)
    # The reply must not be cut by the request bound that its own arrival nearly met.
    assert (conv.deadline.at, conv.deadline.ending) == (T0 + 30, Ending.CUT_AT_DEADLINE)


# -- this side breaking the table ----------------------------------------------------------------


def test_replying_out_of_turn_is_a_local_error_for_good() -> None:
    conv = conversation()
    with pytest.raises(LocalProtocolError):
        conv.accept_hello(ready(), T0)
    assert conv.state is ServerState.ERROR
    with pytest.raises(LocalProtocolError):
        conv.refuse_hello(refusal("x", Code.AUTHENTICATION_FAILED))
    assert conv.next_event() is ENDED


def test_answering_twice_is_a_local_error() -> None:
    conv = fed(line(hello(authenticated=True)) + line(message()))
    assert isinstance(conv.next_event(), HelloReceived)
    conv.accept_hello(ready(), T0)
    assert isinstance(conv.next_event(), RequestReceived)
    receipt = Response.build(request_id="msg-req-1", ok=True, status=Code.SUBMITTED)
    conv.answer(receipt)
    with pytest.raises(LocalProtocolError):
        conv.answer(receipt)
