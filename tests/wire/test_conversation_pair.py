"""A client conversation and a server conversation joined in memory (h11's ``ConnectionPair``).

No socket and no driver: the bytes one side writes are handed to the other in chunks cut where
hypothesis likes, and a small receiver stands in for the handler. Whatever the cuts, both sides
must end as the contract says: a probe settles on ``ready`` and the server sees the close; a
message or status query settles on its answer and the server ends having answered it; a refused
hello is a refusal on both sides.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Final

from hypothesis import given, settings
from hypothesis import strategies as st

from pi_cross_session._internal.protocol.client_conversation import (
    ClientConversation,
    Failed,
    ReadyReceived,
    Settled,
)
from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.conversation import ENDED, NEED_DATA, PAUSED
from pi_cross_session._internal.protocol.frames import (
    Hello,
    Message,
    PeerIdentity,
    Response,
    StatusQuery,
)
from pi_cross_session._internal.protocol.server_conversation import (
    Ending,
    HelloReceived,
    RequestReceived,
    ServerConversation,
)
from tests.hypothesis_profiles import scaled

TOKEN: Final = "c" * 64
INSTANCE: Final = "0123456789abcdef0123456789abcdef"
ME: Final = PeerIdentity(id="receiver", instance_id=INSTANCE, pid=7)


def make_hello(token: str) -> Hello:
    return Hello.model_validate(
        {
            "v": 1,
            "type": "hello",
            "capabilities": ["cancel-safe-queue-v1"],
            "requestId": "hello-1",
            "token": token,
            "target": {"id": "receiver", "instanceId": INSTANCE},
        },
        by_alias=True,
    )


def make_request(kind: str) -> Message | StatusQuery | None:
    if kind == "probe":
        return None
    if kind == "status":
        return StatusQuery(v=1, type="status", request_id="st-1", message_id="m-1")
    return Message(
        v=1,
        type="message",
        request_id="msg-1",
        message_id="m-1",
        text="über die Leitung 🙂\n" * 3,
        summary="hi",
        sent_at=1_795_941_847_396,
    )


@dataclass
class Link:
    """One direction: bytes written and not yet delivered, handed over in chosen cuts."""

    pending: bytearray = field(default_factory=bytearray)
    closed: bool = False

    def take(self, cut: int) -> bytes | None:
        """The next chunk (at most ``cut`` bytes), ``b""`` once closed and drained, or ``None``
        when nothing is there yet."""
        if self.pending:
            chunk = bytes(self.pending[:cut])
            del self.pending[:cut]
            return chunk
        return b"" if self.closed else None


def receiver_reply(event: HelloReceived | RequestReceived) -> Response:
    """What a receiver would decide: our token is ``TOKEN``; messages are submitted."""
    if isinstance(event, HelloReceived):
        ok = event.hello.token == TOKEN
        status = Code.READY if ok else Code.AUTHENTICATION_FAILED
        return Response.build(request_id=event.hello.request_id, ok=ok, status=status, peer=ME)
    request = event.request
    status = Code.SUBMITTED if isinstance(request, Message) else Code.UNKNOWN
    return Response.build(request_id=request.request_id, ok=True, status=status, peer=ME)


def converse(kind: str, token: str, cuts: list[int]) -> tuple[Settled | Failed, Ending | None]:
    """Run the pair to its end, the links handing bytes over in ``cuts`` (cycled) sizes."""
    sizes = itertools.cycle(cuts)
    client = ClientConversation(
        make_hello(token),
        make_request(kind),
        peer_id="receiver",
        peer_instance_id=INSTANCE,
        started_at=0.0,
        deadline_s=5.0,
    )
    server = ServerConversation(opened_at=0.0)
    up, down = Link(), Link()
    up.pending += client.send_hello()
    ending: Settled | Failed | None = None
    for _ in range(10_000):
        # The server's turn.
        event = server.next_event()
        if event is NEED_DATA:
            chunk = up.take(next(sizes))
            if chunk is not None:
                server.receive_data(chunk, 0.0)
        elif isinstance(event, HelloReceived):
            reply = receiver_reply(event)
            if reply.ok:
                down.pending += server.accept_hello(reply, 0.0)
            else:
                down.pending += server.refuse_hello(reply)
                down.closed = True
        elif isinstance(event, RequestReceived):
            down.pending += server.answer(receiver_reply(event))
            down.closed = True  # half-close after the answer
        elif event is ENDED:
            down.closed = True
        # The client's turn.
        if ending is None:
            got = client.next_event()
            if got is NEED_DATA:
                chunk = down.take(next(sizes))
                if chunk is not None:
                    client.receive_data(chunk)
            elif isinstance(got, ReadyReceived):
                up.pending += client.send_request()
            elif got is not PAUSED:
                assert isinstance(got, (Settled, Failed))
                ending = got
                up.closed = True  # the exchange closes without waiting
        if ending is not None and server.ending is not None:
            return ending, server.ending
    raise AssertionError("the pair never finished")


CUTS: Final = st.lists(st.integers(1, 128), min_size=1, max_size=16)


@given(st.sampled_from(["probe", "message", "status"]), CUTS)
@settings(max_examples=scaled(200))
def test_whatever_the_cuts_both_sides_end_as_the_contract_says(kind: str, cuts: list[int]) -> None:
    ending, server_ending = converse(kind, TOKEN, cuts)
    assert isinstance(ending, Settled), ending
    assert ending.ready.status == "ready"
    if kind == "probe":
        assert ending.reply is None
        assert server_ending is Ending.PEER_CLOSED
    else:
        assert ending.reply is not None
        assert ending.reply.status == ("submitted" if kind == "message" else "unknown")
        assert server_ending is Ending.ANSWERED


@given(st.sampled_from(["probe", "message", "status"]), CUTS)
@settings(max_examples=scaled(50))
def test_a_refused_hello_is_a_refusal_on_both_sides(kind: str, cuts: list[int]) -> None:
    ending, server_ending = converse(kind, "d" * 64, cuts)
    assert isinstance(ending, Failed)
    assert ending.code == "authentication_failed"
    assert server_ending is Ending.HELLO_REFUSED
