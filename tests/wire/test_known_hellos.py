"""A receiver takes a hello it accepted before, with a new id, without judging its shape or parsing
it again (``ServerMemo.known_hello``, used by the server conversation): every hello of one sender to
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
import string
from collections.abc import Callable
from typing import Any, Final

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.errors import FrameError, FrameValidationError
from pi_cross_session._internal.protocol.frames import (
    Hello,
    PeerIdentity,
    Response,
    ServerMemo,
    parse_hello,
)
from pi_cross_session._internal.protocol.limits import MAX_KNOWN_FRAME_CHARS, MAX_KNOWN_HELLOS
from pi_cross_session._internal.protocol.server_conversation import (
    HelloReceived,
    Rejected,
    ServerBounds,
    ServerConversation,
)
from pi_cross_session._internal.protocol.shape import ShapeBounds, affordable
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


#: The receiver's memo every conversation of a test shares, as an endpoint's connections do.
MEMO: list[ServerMemo] = [ServerMemo()]


@pytest.fixture(autouse=True)
def memo() -> ServerMemo:
    """A new receiver for each test: its known hellos start empty."""
    MEMO[0] = ServerMemo()
    return MEMO[0]


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The texts parsed as JSON from here on."""
    return count_parses(monkeypatch)


def ready(request_id: str) -> Response:
    return Response.build(request_id=request_id, ok=True, status=Code.READY, peer=IDENTITY)


def receive(text: str, *, accept: bool = True) -> Hello:
    """A connection that receives ``text`` as its first frame, and accepts (or refuses) it."""
    conversation = ServerConversation(opened_at=0.0, memo=MEMO[0])
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
    assert len(MEMO[0]) == 0


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
    assert len(MEMO[0]) == 0


def test_long_hellos_are_not_kept(parses: list[str]) -> None:
    padding = "x" * MAX_KNOWN_FRAME_CHARS
    receive(hello_text(new_id(), note=padding))
    count = len(parses)
    receive(hello_text(new_id(), note=padding))
    assert len(parses) > count
    assert len(MEMO[0]) == 0


def test_an_id_that_is_not_valid_is_judged_by_a_parse(parses: list[str]) -> None:
    receive(hello_text(new_id()))
    conversation = ServerConversation(opened_at=0.0, memo=MEMO[0])
    conversation.receive_data(hello_text("not valid!").encode() + b"\n", 0.0)
    event = conversation.next_event()
    assert not isinstance(event, HelloReceived)  # refused as not a hello
    assert parses[-1] == hello_text("not valid!")


def test_the_table_keeps_the_newest_hellos(parses: list[str]) -> None:
    tokens = [f"{n:064x}" for n in range(MAX_KNOWN_HELLOS + 1)]
    for token in tokens:
        receive(hello_text(new_id(), token=token))
    assert len(MEMO[0]) == MAX_KNOWN_HELLOS
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
        opened_at=0.0,
        bounds=ServerBounds(shape_bounds=ShapeBounds(max_containers=1)),
        memo=MEMO[0],
    )
    tight.receive_data(hello_text(new_id()).encode() + b"\n", 0.0)
    event = tight.next_event()
    assert isinstance(event, Rejected)
    assert event.costly


# -- the property: whatever was accepted, a hello taken as known is what a parse gives ---------

ID_ALPHABET: Final = string.ascii_letters + string.digits + "_-"
ids = st.text(alphabet=ID_ALPHABET, min_size=1, max_size=128)
#: What every hello needs, in any order, and what it may also hold.
REQUIRED: Final = (
    '"v":1',
    '"type":"hello"',
    f'"token":"{TOKEN}"',
    f'"target":{{"id":"{SESSION}","instanceId":"{INSTANCE}"}}',
)
OPTIONAL: Final = (
    '"capabilities":["cancel-safe-queue-v1"]',
    f'"from":{{"id":"s","instanceId":"{"f" * 32}","token":"{"d" * 64}"}}',
    '"note":"\u00e9\U0001f600 \\u00e9"',
    '"n":[1,2,{"a":null}]',
)
#: Where an id may stand: the top-level member itself, or spellings and places that look like it
#: (the key escaped, a nested member, inside a string, a key with a quote in it, spaced).
ID_PLACES: Final = (
    '"requestId":"{id}"',
    '"request\\u0049d":"{id}"',
    f'"target":{{{{"id":"{SESSION}","instanceId":"{INSTANCE}","requestId":"{{id}}"}}}}',
    '"x":"\\"requestId\\":\\"{id}\\""',
    '"\\"requestId":"{id}"',
    '"requestId" : "{id}"',
)


def judged(text: str) -> Hello | None:
    """What the receiver's conversation makes of ``text`` as a first frame: the hello (then
    accepted), or ``None`` when it refuses it."""
    conversation = ServerConversation(opened_at=0.0, memo=MEMO[0])
    conversation.receive_data(text.encode() + b"\n", 0.0)
    event = conversation.next_event()
    if not isinstance(event, HelloReceived):
        return None
    conversation.accept_hello(ready(event.hello.request_id), 0.0)
    return event.hello


def parsed(text: str) -> Hello | None:
    """What a plain shape check and parse make of ``text``."""
    if not affordable(text):
        return None
    try:
        return parse_hello(json.loads(text))
    except (ValueError, FrameError, FrameValidationError):
        return None


@given(data=st.data())
def test_a_hello_taken_as_known_is_what_a_parse_of_its_text_gives(data: st.DataObject) -> None:
    """A hello is accepted, then the same text is sent with its literal id (or every copy of it)
    changed: the receiver must make of it exactly what a parse does, known or not."""
    first = data.draw(ids, label="first id")
    members = list(data.draw(st.permutations(REQUIRED)))
    members += data.draw(st.lists(st.sampled_from(OPTIONAL), unique=True, max_size=2))
    members.insert(data.draw(st.integers(0, len(members))), f'"requestId":"{first}"')
    for _ in range(data.draw(st.integers(0, 2), label="more id places")):
        place = data.draw(st.sampled_from(ID_PLACES))
        members.insert(data.draw(st.integers(0, len(members))), place.format(id=first))
    separator = data.draw(st.sampled_from([",", ", ", " ,\t"]))  # a frame is one line
    text = "{" + separator.join(members) + "}"
    second = data.draw(ids, label="second id")
    if data.draw(st.booleans(), label="every copy"):
        again = text.replace(first, second)
    else:
        again = text.replace(f'"requestId":"{first}"', f'"requestId":"{second}"', 1)
    MEMO[0] = ServerMemo()  # each example a new receiver
    judged(text)
    expected = parsed(again)
    got = judged(again)
    assert got == expected
    if got is not None and expected is not None:
        assert got.model_fields_set == expected.model_fields_set
