"""The frame shape guard: what a frame's JSON would cost, measured without parsing it.

For any JSON document the measure must equal what the parsed tree holds (strings, containers,
separators), whatever the strings contain (escaped quotes, backslashes, structural characters);
for any other text it is still defined (an unterminated string runs to the end). The bounds are
tested at limit - 1, limit and limit + 1, and the frames the contract pins at 1 MiB pass.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pi_cross_session._internal.protocol import limits
from pi_cross_session._internal.protocol.shape import (
    RECEIVER_BOUNDS,
    FrameShape,
    ShapeBounds,
    affordable,
    measure,
)


def tree_shape(value: Any) -> FrameShape:
    """The shape of a parsed JSON value, counted on the tree (not on the text)."""
    strings = containers = separators = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            strings += 1
        elif isinstance(item, list):
            containers += 1
            separators += max(0, len(item) - 1)
            stack.extend(item)
        elif isinstance(item, dict):
            containers += 1
            separators += max(0, len(item) - 1) + len(item)  # commas, then one colon per member
            strings += len(item)
            stack.extend(item.values())
    return FrameShape(strings=strings, containers=containers, separators=separators)


#: Strings full of what the measure must not be fooled by.
TRICKY_TEXT = st.text(alphabet='"\\{}[],: a\u00e9\u5b57\U0001f600\n\t', max_size=12)
JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), TRICKY_TEXT),
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(TRICKY_TEXT, children, max_size=4)
    ),
    max_leaves=20,
)


@given(value=JSON_VALUES, ascii_only=st.booleans(), spaced=st.booleans())
def test_on_json_the_measure_is_what_the_tree_holds(
    value: Any, ascii_only: bool, spaced: bool
) -> None:
    separators = (", ", ": ") if spaced else (",", ":")
    text = json.dumps(value, ensure_ascii=ascii_only, separators=separators)
    assert measure(text) == tree_shape(value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("", (0, 0, 0), id="empty"),
        pytest.param('{"a":[1,2]}', (1, 2, 2), id="plain"),
        pytest.param('"a\\"b{,"', (1, 0, 0), id="escaped-quote-inside"),
        pytest.param('"a\\\\"{,', (1, 1, 1), id="escaped-backslash-then-real-quote"),
        pytest.param('"a\\\\\\"{,"', (1, 0, 0), id="three-backslashes-escape-the-quote"),
        pytest.param('"unterminated {[,:', (1, 0, 0), id="unterminated-runs-to-the-end"),
        pytest.param('"a" "b', (2, 0, 0), id="odd-quotes-round-up"),
        pytest.param("{[,:\\{", (0, 3, 2), id="outside-a-string-backslash-is-a-character"),
        pytest.param('\\"{', (0, 1, 0), id="escape-pairs-dropped-everywhere"),
    ],
)
def test_the_measure_on_any_text(text: str, expected: tuple[int, int, int]) -> None:
    assert measure(text) == FrameShape(*expected)


def test_with_too_many_strings_the_text_is_not_cut() -> None:
    text = '"",' * 10 + "{" * 5
    assert measure(text, max_strings=9) == FrameShape(strings=10, containers=0, separators=0)
    assert measure(text, max_strings=10) == FrameShape(strings=10, containers=5, separators=10)


def hello_frame(capabilities: int = 8) -> str:
    return json.dumps(
        {
            "v": 1,
            "type": "hello",
            "capabilities": [f"cap-{n}" for n in range(capabilities)],
            "requestId": "r",
            "token": "0" * 64,
            "target": {"id": "s", "instanceId": "0" * 32},
            "from": {"id": "s", "instanceId": "0" * 32, "token": "0" * 64},
        },
        separators=(",", ":"),
    )


def test_the_documented_shapes_of_a_full_hello_and_a_message() -> None:
    assert measure(hello_frame()) == FrameShape(strings=28, containers=4, separators=28)
    message = {
        "v": 1,
        "type": "message",
        "requestId": "r",
        "messageId": "m",
        "text": "t, {with} [json]: inside",
        "summary": "s",
        "sentAt": 1,
        "goalId": "g",
    }
    assert measure(json.dumps(message)) == FrameShape(strings=14, containers=1, separators=15)
    bounds = RECEIVER_BOUNDS
    assert (bounds.max_strings, bounds.max_containers, bounds.max_separators) == (
        limits.MAX_FRAME_STRINGS,
        limits.MAX_FRAME_CONTAINERS,
        limits.MAX_FRAME_SEPARATORS,
    )


@pytest.mark.parametrize(
    ("field", "bound"),
    [
        ("max_strings", limits.MAX_FRAME_STRINGS),
        ("max_containers", limits.MAX_FRAME_CONTAINERS),
        ("max_separators", limits.MAX_FRAME_SEPARATORS),
    ],
)
@pytest.mark.parametrize("delta", [-1, 0, 1], ids=["limit-1", "limit", "limit+1"])
def test_each_bound_at_its_limit(field: str, bound: int, delta: int) -> None:
    count = bound + delta
    text = {
        "max_strings": '""' * count,
        "max_containers": "[" * count,
        "max_separators": "," * count,
    }[field]
    assert affordable(text) is (delta <= 0)
    small = ShapeBounds(**{field: 3})
    assert affordable(text, small) is (count <= 3)


def test_the_pinned_one_mebibyte_frames_pass() -> None:
    padded_hello = hello_frame()
    padded_hello += " " * (limits.MAX_FRAME_BYTES - 1 - len(padded_hello))
    assert affordable(padded_hello)
    cjk = json.dumps({"v": 1, "type": "message", "text": "字" * 349_000}, ensure_ascii=False)
    assert affordable(cjk)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("[" + ",".join(["{}"] * 300_000) + "]", id="many-objects"),
        pytest.param("[" + ",".join(["0"] * 500_000) + "]", id="many-numbers"),
        pytest.param('""' * 500_000, id="many-strings"),
        pytest.param("[" * 10_000 + "]" * 10_000, id="deep"),
    ],
)
def test_expensive_frames_are_refused(text: str) -> None:
    assert not affordable(text)
