"""Bearer tokens and incarnation ids: format, freshness and the constant-time comparison."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pi_cross_session._internal.security.tokens import new_instance_id, new_token, tokens_match

TOKEN = "0123456789abcdef" * 4
HEX64 = re.compile(r"[0-9a-f]{64}")
HEX32 = re.compile(r"[0-9a-f]{32}")


def test_new_token_is_64_lowercase_hex() -> None:
    for _ in range(50):
        assert HEX64.fullmatch(new_token())


def test_new_instance_id_is_32_lowercase_hex() -> None:
    for _ in range(50):
        assert HEX32.fullmatch(new_instance_id())


def test_fresh_values_do_not_repeat() -> None:
    assert len({new_token() for _ in range(1000)}) == 1000
    assert len({new_instance_id() for _ in range(1000)}) == 1000


def test_a_token_matches_itself_and_an_equal_copy() -> None:
    token = new_token()
    assert tokens_match(token, token)
    assert tokens_match("".join(list(token)), token)
    assert tokens_match(TOKEN, TOKEN)


def test_different_tokens_do_not_match() -> None:
    assert not tokens_match(new_token(), new_token())
    # Same length, a single differing character at either end.
    assert not tokens_match("1" + TOKEN[1:], TOKEN)
    assert not tokens_match(TOKEN[:-1] + "0", TOKEN)


@pytest.mark.parametrize(
    "presented",
    [
        TOKEN.upper(),
        TOKEN[:-1] + "F",
        TOKEN[:-1],
        TOKEN + "0",
        TOKEN + "\n",
        " " + TOKEN[1:],
        "",
        "g" * 64,
        "٠" * 64,  # Arabic-Indic zeros are decimal digits, but not hex as the contract means it
        "\ud800" + TOKEN[1:],
        TOKEN * 10_000,
    ],
)
def test_malformed_presented_tokens_never_match(presented: str) -> None:
    assert not tokens_match(presented, TOKEN)


def test_uppercase_fails_even_when_both_sides_agree() -> None:
    assert not tokens_match(TOKEN.upper(), TOKEN.upper())


def test_a_malformed_expected_token_authenticates_nobody() -> None:
    for expected in ("", TOKEN[:-1], TOKEN.upper(), TOKEN + "\n"):
        assert not tokens_match(expected, expected)
        assert not tokens_match(TOKEN, expected)


@pytest.mark.parametrize(
    "presented",
    [
        None,
        0,
        1.5,
        True,
        TOKEN.encode(),
        bytearray(TOKEN.encode()),
        [TOKEN],
        {"t": TOKEN},
        object(),
    ],
)
def test_wrong_types_are_refused_without_raising(presented: object) -> None:
    assert not tokens_match(presented, TOKEN)


def test_a_wrong_type_for_expected_is_refused_without_raising() -> None:
    assert not tokens_match(TOKEN, TOKEN.encode())  # type: ignore[arg-type]
    assert not tokens_match(TOKEN, None)  # type: ignore[arg-type]


def test_str_subclass_overrides_take_no_part() -> None:
    class Sneaky(str):
        def __eq__(self, other: object) -> bool:
            return True

        def __hash__(self) -> int:
            return 0

        def encode(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
            return TOKEN.encode()

        def __len__(self) -> int:
            return 64

    assert not tokens_match(Sneaky("f" * 64), TOKEN)
    assert not tokens_match(Sneaky("short"), TOKEN)
    assert tokens_match(Sneaky(TOKEN), TOKEN)


@given(st.from_regex(HEX64, fullmatch=True), st.from_regex(HEX64, fullmatch=True))
def test_match_is_string_equality_on_wellformed_tokens(a: str, b: str) -> None:
    assert tokens_match(a, b) == (a == b)
    assert tokens_match(a, a)


@given(st.one_of(st.text(), st.binary(), st.integers(), st.none(), st.floats()))
def test_never_raises_for_any_input(presented: object) -> None:
    assert tokens_match(presented, TOKEN) == (presented == TOKEN)
