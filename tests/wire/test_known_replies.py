"""A sender takes a reply it has judged before, with a new id, without parsing it again
(``frames.response_from_text``): every ``ready`` of a peer differs only in its ``requestId``.

What must hold is that nothing is taken that a parse would not give: the text around the id has to
be a reply the model judged valid, and the spot of the id has to *be* its top-level ``requestId``.
A receiver that writes the same characters as a nested member (with the real id escaped, or
spaced, or repeated later) gets every reply parsed, and judged as the contract says.
"""

from __future__ import annotations

import json
import os
from typing import Any, Final

import pytest

from pi_cross_session._internal.protocol.client_conversation import (
    ClientConversation,
    Failed,
    Settled,
)
from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.frames import (
    HelloTemplate,
    KnownReplies,
    response_from_text,
)
from pi_cross_session._internal.protocol.limits import MAX_KNOWN_FRAME_CHARS
from tests.support.known_frames import count_parses

SESSION: Final = "receiver"
INSTANCE: Final = "0123456789abcdef0123456789abcdef"
TOKEN: Final = "a" * 64
PEER: Final = {"id": SESSION, "instanceId": INSTANCE, "pid": 4242}


def new_id() -> str:
    return os.urandom(16).hex()


def ready_text(request_id: str, **extra: Any) -> str:
    body = {
        "v": 1,
        "type": "response",
        "requestId": request_id,
        "ok": True,
        "status": "ready",
        "capabilities": ["cancel-safe-queue-v1"],
        "peer": PEER,
        **extra,
    }
    return json.dumps(body, separators=(",", ":"))


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The texts parsed as JSON from here on."""
    return count_parses(monkeypatch)


@pytest.fixture
def known() -> KnownReplies:
    """The replies one sender judged before (they start empty)."""
    return KnownReplies()


def probe(request_id: str, reply: str, known: KnownReplies) -> Settled | Failed:
    """A probe conversation with hello ``request_id``, fed ``reply``: its ending."""
    hello = HelloTemplate(
        token=TOKEN,
        target_id=SESSION,
        target_instance_id=INSTANCE,
        sender=None,
        capabilities=("cancel-safe-queue-v1",),
    ).encode(request_id)
    conversation = ClientConversation(
        hello,
        None,
        peer_id=SESSION,
        peer_instance_id=INSTANCE,
        started_at=0.0,
        deadline_s=1.0,
        known=known,
    )
    conversation.send_hello()
    conversation.receive_data(reply.encode() + b"\n")
    ending = conversation.next_event()
    assert isinstance(ending, (Settled, Failed))
    return ending


def test_the_same_ready_with_a_new_id_is_not_parsed_again(
    parses: list[str], known: KnownReplies
) -> None:
    first, second = new_id(), new_id()
    assert response_from_text(ready_text(first), first, known).request_id == first
    count = len(parses)
    again = response_from_text(ready_text(second), second, known)
    assert len(parses) == count  # taken as known
    assert again.request_id == second
    assert again.status == "ready"
    assert again.names_peer(SESSION, INSTANCE)
    assert again.model().request_id == second
    assert again == response_from_text(ready_text(second))  # what a parse gives


def test_a_reply_judged_valid_is_known_whatever_its_text(
    parses: list[str], known: KnownReplies
) -> None:
    """Known means judged by the model before, not judged by simpler rules: a reply with
    non-ASCII text, and one with astral characters counted in UTF-16 units, is known too."""
    first, second = new_id(), new_id()
    extra = {"error": "déjà vu 😀", "next": "é" * 200}
    assert response_from_text(ready_text(first, **extra), first, known).error == "déjà vu 😀"
    count = len(parses)
    again = response_from_text(ready_text(second, **extra), second, known)
    assert len(parses) == count
    assert again == response_from_text(ready_text(second, **extra))
    assert again.model().next == "é" * 200


def test_a_known_ready_settles_a_probe_as_a_parsed_one_does(
    parses: list[str], known: KnownReplies
) -> None:
    first, second = new_id(), new_id()
    assert isinstance(probe(first, ready_text(first), known), Settled)
    count = len(parses)
    settled = probe(second, ready_text(second), known)
    assert len(parses) == count
    assert isinstance(settled, Settled)
    assert settled.ready.request_id == second


def test_a_reply_that_differs_elsewhere_is_parsed(parses: list[str], known: KnownReplies) -> None:
    first, second = new_id(), new_id()
    response_from_text(ready_text(first), first, known)
    count = len(parses)
    response_from_text(ready_text(second, next="query later"), second, known)
    assert len(parses) > count


@pytest.mark.parametrize(
    "top_level",
    [
        pytest.param(lambda rid: '"requestId":"\\u00' + f'{ord(rid[0]):x}{rid[1:]}"', id="escaped"),
        pytest.param(lambda rid: f'"requestId" : "{rid}"', id="spaced"),
    ],
)
def test_the_id_written_as_a_nested_member_is_never_taken_for_the_reply_id(
    parses: list[str], top_level: Any, known: KnownReplies
) -> None:
    """The hostile receiver: its top-level id is the first hello's, written so that the only
    literal ``"requestId":"<id>"`` is a member of ``peer``; for the second hello it puts the new
    id there and keeps the old one at the top."""
    first, second = new_id(), new_id()

    def hostile(nested_id: str) -> str:
        peer = json.dumps({**PEER, "requestId": nested_id}, separators=(",", ":"))
        return (
            '{"v":1,"type":"response",' + top_level(first) + ',"ok":true,"status":"ready",'
            '"capabilities":["cancel-safe-queue-v1"],"peer":' + peer + "}"
        )

    assert isinstance(probe(first, hostile(first), known), Settled)  # a valid ready for the first
    count = len(parses)
    ending = probe(second, hostile(second), known)
    assert len(parses) > count  # judged by a parse ...
    assert isinstance(ending, Failed)
    assert ending.code == Code.INVALID_RECEIPT  # ... which finds the first hello's id


def test_the_id_repeated_later_is_never_taken(parses: list[str], known: KnownReplies) -> None:
    """JSON keeps the last of duplicate keys: a second ``requestId`` after ours decides."""
    first, second = new_id(), new_id()
    base = ready_text(first)
    hostile = base[:-1] + f',"requestId":"{first}"' + "}"
    assert isinstance(probe(first, hostile, known), Settled)
    ending = probe(
        second, hostile.replace(f'"requestId":"{first}"', f'"requestId":"{second}"', 1), known
    )
    assert isinstance(ending, Failed)
    assert ending.code == Code.INVALID_RECEIPT


def test_long_replies_are_not_kept(parses: list[str], known: KnownReplies) -> None:
    first, second = new_id(), new_id()
    padding = "x" * MAX_KNOWN_FRAME_CHARS
    response_from_text(ready_text(first, note=padding), first, known)
    count = len(parses)
    response_from_text(ready_text(second, note=padding), second, known)
    assert len(parses) > count
    assert len(known) == 0


def test_an_invalid_reply_is_never_kept(parses: list[str], known: KnownReplies) -> None:
    first = new_id()
    bad = ready_text(first).replace('"ok":true', '"ok":"yes"')
    with pytest.raises(Exception):  # noqa: B017,PT011 - whichever error the model raises
        response_from_text(bad, first, known)
    assert len(known) == 0
