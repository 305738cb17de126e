"""The plain line (the fast path of a journal without text) is byte for byte the line the generic
encoder writes, whatever the names hold, and refuses what an event would refuse."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pi_cross_session._internal.protocol.codes import VOCABULARY
from pi_cross_session._internal.security.io.journal import (
    Direction,
    Event,
    EventKind,
    Party,
    encode_event,
    party_json,
    plain_lines,
)
from tests.hypothesis_profiles import scaled

INSTANCE_IDS = st.text("0123456789abcdef", min_size=32, max_size=32)
NAMES = st.text(
    st.characters(codec="utf-8") | st.sampled_from('\x1b\u202e\ud800\n"\\'), max_size=300
)
MESSAGE_IDS = st.from_regex(r"[A-Za-z0-9_-]{1,128}", fullmatch=True)
CODES = st.none() | st.sampled_from(sorted(VOCABULARY))


STEPS = st.lists(
    st.tuples(st.integers(0, 2**53 - 1), st.sampled_from(EventKind), CODES), min_size=1, max_size=3
)


@settings(max_examples=scaled(300))
@given(
    direction=st.sampled_from(Direction),
    message_id=MESSAGE_IDS,
    me=st.tuples(NAMES, INSTANCE_IDS),
    peer=st.tuples(NAMES, INSTANCE_IDS),
    steps=STEPS,
)
def test_the_plain_lines_are_the_generic_lines(
    direction: Direction,
    message_id: str,
    me: tuple[str, str],
    peer: tuple[str, str],
    steps: list[tuple[int, EventKind, str | None]],
) -> None:
    generic = b"".join(
        encode_event(
            Event(at, kind, message_id, Party(*me), Party(*peer), code=code, direction=direction)
        )
        or b"unfit"
        for at, kind, code in steps
    )
    plain = plain_lines(direction, message_id, party_json(*me), party_json(*peer), steps)
    assert plain == generic


@pytest.mark.parametrize(
    ("at", "message_id", "code"),
    [
        (-1, "m1", None),
        (True, "m1", None),
        (2**53, "m1", None),
        (1, "m 1", None),
        (1, "", None),
        (1, "m1", "exploded"),
        (1, 'm1","v":2', None),
    ],
)
def test_the_plain_line_refuses_what_an_event_refuses(
    at: int, message_id: str, code: str | None
) -> None:
    me = party_json("a", "a" * 32)
    steps = [(1, EventKind.SENT, None), (at, EventKind.REFUSED, code)]
    assert plain_lines(Direction.OUT, message_id, me, me, steps) is None


def test_a_party_with_a_bad_instance_id_has_no_json() -> None:
    with pytest.raises(ValueError, match="instance id"):
        party_json("a", "../../etc")
