"""A receiver takes a hello it accepted before, with a new id, without judging its shape or parsing
it again (``frames.known_hello``, used by the server conversation): every hello of one sender to
one receiver differs only in its ``requestId``.

What must hold is that nothing is taken that a parse would not give, and that only an accepted
hello gets in: the text around the id has to be that of a hello the handler accepted, and the
spot of the id has to *be* its top-level ``requestId``. A refused hello, a hello that differs
anywhere else, one whose literal ``"requestId":"…"`` is not the id JSON reads (a nested member,
the real key escaped, a key repeated later) and a long one are always judged and parsed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any, Final

import pytest

from pi_cross_session.protocol import frames
from pi_cross_session.protocol.codes import Code
from pi_cross_session.protocol.frames import Hello, PeerIdentity, Response, parse_hello
from pi_cross_session.protocol.limits import MAX_KNOWN_FRAME_CHARS, MAX_KNOWN_HELLOS
from pi_cross_session.protocol.server_conversation import (
    HelloReceived,
    Rejected,
    ServerBounds,
    ServerConversation,
)
from pi_cross_session.protocol.shape import ShapeBounds
from tests.support.known_frames import count_parses

SESSION: Final = "receiver"
INSTANCE: Final = "0123456789abcdef0123456789abcdef"
TOKEN: Final = "a" * 64
IDENTITY: Final = PeerIdentity.model_validate({"id": SESSION, "instanceId": INSTANCE, "pid": 7})


def new_id() -> str:
    return os.urandom(16).hex()


def hello_text(request_id: str, *, token: str = TOKEN, **extra: Any) -> str:
    body = {
        "v": 1,
        "type": "hello",
        "capabilities": ["cancel-safe-queue-v1"],
        "requestId": request_id,
        "token": token,
        "target": {"id": SESSION, "instanceId": INSTANCE},
        **extra,
    }
    return json.dumps(body, separators=(",", ":"))


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The texts parsed as JSON from here on (the known hellos start empty)."""
    return count_parses(monkeypatch, "_KNOWN_HELLOS")


def ready(request_id: str) -> Response:
    return Response.build(request_id=request_id, ok=True, status=Code.READY, peer=IDENTITY)


def receive(text: str, *, accept: bool = True) -> Hello:
    """A connection that receives ``text`` as its first frame, and accepts (or refuses) it."""
    conversation = ServerConversation(opened_at=0.0)
    conversation.receive_data(text.encode() + b"\n", 0.0)
    event = conversation.next_event()
    assert isinstance(event, HelloReceived), event
    hello = event.hello
    if accept:
        conversation.accept_hello(ready(hello.request_id), 0.0)
    else:
        conversation.refuse_hello(ready(hello.request_id))
    return hello


def test_an_accepted_hello_is_known_again_with_a_new_id(parses: list[str]) -> None:
    first, second = new_id(), new_id()
    assert receive(hello_text(first)).request_id == first
    count = len(parses)
    again = receive(hello_text(second))
    assert len(parses) == count  # taken as known
    assert again == parse_hello(json.loads(hello_text(second)))  # what a parse gives
    assert again.request_id == second
    assert again.model_fields_set == parse_hello(json.loads(hello_text(second))).model_fields_set


def test_a_refused_hello_is_never_known(parses: list[str]) -> None:
    receive(hello_text(new_id(), token="b" * 64), accept=False)
    count = len(parses)
    receive(hello_text(new_id(), token="b" * 64), accept=False)
    assert len(parses) > count
    assert frames._KNOWN_HELLOS == {}


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"token": "c" * 64}, id="token"),
        pytest.param({"capabilities": []}, id="capabilities"),
        pytest.param({"from": {"id": "s", "instanceId": "f" * 32, "token": "d" * 64}}, id="from"),
    ],
)
def test_a_hello_that_differs_elsewhere_is_parsed(
    parses: list[str], change: dict[str, Any]
) -> None:
    receive(hello_text(new_id()))
    count = len(parses)
    other = receive(hello_text(new_id(), **change))
    assert len(parses) > count
    assert other == parse_hello(json.loads(hello_text(other.request_id, **change)))


def nested(request_id: str, top: str) -> str:
    """A hello whose only literal ``"requestId":"…"`` is a member of ``target`` (extra members
    are ignored), while its real id is written with the key escaped."""
    target = json.dumps(
        {"id": SESSION, "instanceId": INSTANCE, "requestId": request_id}, separators=(",", ":")
    )
    return (
        '{"v":1,"type":"hello","request\\u0049d":"' + top + f'","token":"{TOKEN}",'
        '"target":' + target + "}"
    )


def repeated(request_id: str, top: str) -> str:
    """JSON keeps the last of duplicate keys: a second ``requestId`` after the literal one."""
    return hello_text(request_id)[:-1] + f',"requestId":"{top}"' + "}"


@pytest.mark.parametrize("hostile", [nested, repeated])
def test_a_literal_id_that_is_not_the_hello_id_is_never_taken_for_it(
    parses: list[str], hostile: Callable[[str, str], str]
) -> None:
    """The first hello's literal member holds its real id; in the second only the literal member
    changes, and the id JSON reads stays: the second hello must keep it."""
    top = new_id()
    assert receive(hostile(top, top)).request_id == top  # accepted, and its id is ``top``
    count = len(parses)
    again = receive(hostile(new_id(), top))
    assert len(parses) > count  # judged by a parse ...
    assert again.request_id == top  # ... which finds the id JSON reads
    assert frames._KNOWN_HELLOS == {}


def test_long_hellos_are_not_kept(parses: list[str]) -> None:
    padding = "x" * MAX_KNOWN_FRAME_CHARS
    receive(hello_text(new_id(), note=padding))
    count = len(parses)
    receive(hello_text(new_id(), note=padding))
    assert len(parses) > count
    assert frames._KNOWN_HELLOS == {}


def test_an_id_that_is_not_valid_is_judged_by_a_parse(parses: list[str]) -> None:
    receive(hello_text(new_id()))
    conversation = ServerConversation(opened_at=0.0)
    conversation.receive_data(hello_text("not valid!").encode() + b"\n", 0.0)
    event = conversation.next_event()
    assert not isinstance(event, HelloReceived)  # refused as not a hello
    assert parses[-1] == hello_text("not valid!")


def test_the_table_keeps_the_newest_hellos(parses: list[str]) -> None:
    tokens = [f"{n:064x}" for n in range(MAX_KNOWN_HELLOS + 1)]
    for token in tokens:
        receive(hello_text(new_id(), token=token))
    assert len(frames._KNOWN_HELLOS) == MAX_KNOWN_HELLOS
    count = len(parses)
    receive(hello_text(new_id(), token=tokens[-1]))  # the newest: known
    assert len(parses) == count
    receive(hello_text(new_id(), token=tokens[0]))  # the oldest: dropped, parsed again
    assert len(parses) > count


def test_a_hello_is_known_only_under_the_bounds_it_was_judged_by(parses: list[str]) -> None:
    """Another endpoint may judge the shape more tightly: there, the same hello is judged again
    (and refused as too costly)."""
    receive(hello_text(new_id()))
    tight = ServerConversation(
        opened_at=0.0, bounds=ServerBounds(shape_bounds=ShapeBounds(max_containers=1))
    )
    tight.receive_data(hello_text(new_id()).encode() + b"\n", 0.0)
    event = tight.next_event()
    assert isinstance(event, Rejected)
    assert event.costly


@pytest.mark.parametrize("frame", ["hello", "response"])
def test_a_copy_with_a_new_id_is_what_model_copy_gives(frame: str) -> None:
    original: Hello | Response = (
        parse_hello(json.loads(hello_text(new_id()))) if frame == "hello" else ready(new_id())
    )
    fast = frames._with_request_id(original, "other-id")
    slow = original.model_copy(update={"request_id": "other-id"})
    assert fast == slow
    assert fast.model_fields_set == slow.model_fields_set
    assert fast.to_wire() == slow.to_wire()
    assert original.request_id != "other-id"  # the original is untouched
    with pytest.raises(Exception):  # noqa: B017,PT011 - frozen, whichever error pydantic raises
        fast.request_id = "x"  # type: ignore[misc]
