"""Bridge envelope recognition (spec §8.4): every field at its boundaries; what is no bridge."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pi_cross_session._internal.protocol.bridge import BRIDGE_PREFIX, BridgeKind, classify_bridge
from pi_cross_session._internal.protocol.limits import (
    BRIDGE_MAX_BUDGET,
    BRIDGE_MAX_HOPS,
    BRIDGE_MAX_TTL_MS,
    MAX_SAFE_INTEGER,
)

NOW = 1_700_000_000_000


class _Omitted:
    """Marks a field left out; its repr is a stable test id (xdist workers must agree on ids)."""

    def __repr__(self) -> str:
        return "OMIT"


OMIT = _Omitted()


def envelope(**overrides: Any) -> str:
    body: dict[str, Any] = {
        "version": 1,
        "origin": "origin_A-1",
        "correlationId": "corr-1",
        "expiresAt": NOW + 10_000,
        "hops": 0,
        "budget": 8,
        "payload": {"kind": "ping"},
    }
    for key, value in overrides.items():
        if value is OMIT:
            del body[key]
        else:
            body[key] = value
    return BRIDGE_PREFIX + json.dumps(body)


def kind(text: str) -> BridgeKind:
    return classify_bridge(text, now_ms=NOW)


def test_the_constants_are_the_contract_values() -> None:
    assert BRIDGE_PREFIX == "cross-session:bridge:v1\n"
    assert (BRIDGE_MAX_TTL_MS, BRIDGE_MAX_HOPS, BRIDGE_MAX_BUDGET) == (30_000, 4, 256)


def test_a_valid_envelope() -> None:
    assert kind(envelope()) is BridgeKind.VALID


def test_surrounding_json_whitespace_and_extra_fields_are_fine() -> None:
    body = json.loads(envelope()[len(BRIDGE_PREFIX) :])
    body["extra"] = [1, 2, 3]
    assert kind(BRIDGE_PREFIX + " \r\n\t" + json.dumps(body, indent=2) + "\n ") is BridgeKind.VALID


# -- not a bridge ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "hello",
        "",
        "cross-session:bridge:v1",
        "cross-session:bridge:v1 {}",
        "cross-session:bridge:v1\r\n{}",
        "cross-session:bridge:v2\n{}",
        "Cross-session:bridge:v1\n{}",
        " cross-session:bridge:v1\n{}",
        "\ufeffcross-session:bridge:v1\n{}",
    ],
)
def test_text_without_the_exact_prefix_is_not_a_bridge(text: str) -> None:
    assert kind(text) is BridgeKind.NOT_BRIDGE


@given(st.text())
def test_ordinary_text_is_never_a_bridge(text: str) -> None:
    if not text.startswith(BRIDGE_PREFIX):
        assert kind(text) is BridgeKind.NOT_BRIDGE
    else:
        assert kind(text) in (BridgeKind.VALID, BridgeKind.INVALID)


# -- the body --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    ["", "not json", "{", "[]", '["version", 1]', '"text"', "null", "1", "true", "{}", "{} {}"],
)
def test_a_body_that_is_not_an_envelope_object_is_invalid(body: str) -> None:
    assert kind(BRIDGE_PREFIX + body) is BridgeKind.INVALID


def test_a_leading_bom_in_the_body_is_invalid() -> None:
    assert kind(BRIDGE_PREFIX + "\ufeff" + envelope()[len(BRIDGE_PREFIX) :]) is BridgeKind.INVALID


def test_deep_nesting_is_invalid_not_a_crash() -> None:
    assert kind(BRIDGE_PREFIX + "[" * 100_000 + "]" * 100_000) is BridgeKind.INVALID


# -- version ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 2, "1", 1.0, 1.5, True, None, [1], OMIT])
def test_version_must_be_the_integer_1(version: object) -> None:
    assert kind(envelope(version=version)) is BridgeKind.INVALID


# -- origin and correlationId ----------------------------------------------------------------------


@pytest.mark.parametrize("field", ["origin", "correlationId"])
@pytest.mark.parametrize(
    "value", ["", "a b", "a.b", "é", "a\n", "x" * 129, 1, None, ["a"], OMIT], ids=repr
)
def test_ids_must_match_the_id_pattern(field: str, value: object) -> None:
    assert kind(envelope(**{field: value})) is BridgeKind.INVALID


@pytest.mark.parametrize("field", ["origin", "correlationId"])
@pytest.mark.parametrize("value", ["a", "x" * 128, "A-z_0-9", "-", "_"])
def test_ids_within_the_pattern_are_valid(field: str, value: str) -> None:
    assert kind(envelope(**{field: value})) is BridgeKind.VALID


# -- expiresAt -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("offset", "expected"),
    [
        (-1_000, BridgeKind.INVALID),
        (-1, BridgeKind.INVALID),
        (0, BridgeKind.INVALID),  # expiresAt == now: already expired
        (1, BridgeKind.VALID),
        (BRIDGE_MAX_TTL_MS - 1, BridgeKind.VALID),
        (BRIDGE_MAX_TTL_MS, BridgeKind.VALID),
        (BRIDGE_MAX_TTL_MS + 1, BridgeKind.INVALID),
    ],
)
def test_expires_at_window(offset: int, expected: BridgeKind) -> None:
    assert kind(envelope(expiresAt=NOW + offset)) is expected


@pytest.mark.parametrize(
    "value",
    [NOW + 1_000.5, float(NOW + 1_000), str(NOW + 1_000), True, None, MAX_SAFE_INTEGER + 1, OMIT],
    ids=repr,
)
def test_expires_at_must_be_a_safe_integer(value: object) -> None:
    # A zero-fraction float (JS would read it as an integer) is refused too: see the report.
    assert kind(envelope(expiresAt=value)) is BridgeKind.INVALID


def test_expires_at_is_judged_against_the_given_now() -> None:
    text = envelope(expiresAt=NOW + 1_000)
    assert classify_bridge(text, now_ms=NOW + 999) is BridgeKind.VALID
    assert classify_bridge(text, now_ms=NOW + 1_000) is BridgeKind.INVALID
    assert classify_bridge(text, now_ms=NOW - 29_000) is BridgeKind.VALID
    assert classify_bridge(text, now_ms=NOW - 29_001) is BridgeKind.INVALID


# -- hops and budget -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("hops", "expected"),
    [
        (-1, BridgeKind.INVALID),
        (0, BridgeKind.VALID),
        (1, BridgeKind.VALID),
        (4, BridgeKind.VALID),
        (5, BridgeKind.INVALID),
    ],
)
def test_hops_range(hops: int, expected: BridgeKind) -> None:
    assert kind(envelope(hops=hops)) is expected


@pytest.mark.parametrize(
    ("budget", "expected"),
    [
        (0, BridgeKind.INVALID),
        (1, BridgeKind.VALID),
        (255, BridgeKind.VALID),
        (256, BridgeKind.VALID),
        (257, BridgeKind.INVALID),
        (-1, BridgeKind.INVALID),
    ],
)
def test_budget_range(budget: int, expected: BridgeKind) -> None:
    assert kind(envelope(budget=budget)) is expected


@pytest.mark.parametrize("field", ["hops", "budget"])
@pytest.mark.parametrize("value", [1.0, 1.5, "1", True, False, None, [1], OMIT], ids=repr)
def test_hops_and_budget_must_be_integers(field: str, value: object) -> None:
    assert kind(envelope(**{field: value})) is BridgeKind.INVALID


# -- payload ---------------------------------------------------------------------------------------


def test_a_missing_payload_is_invalid() -> None:
    assert kind(envelope(payload=OMIT)) is BridgeKind.INVALID


@pytest.mark.parametrize(
    "payload", [None, 0, "", [], {}, False, "text", [1, {"a": None}]], ids=repr
)
def test_any_payload_value_is_valid(payload: object) -> None:
    assert kind(envelope(payload=payload)) is BridgeKind.VALID


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_non_json_constants_are_invalid(constant: str) -> None:
    text = envelope()[:-1] + f', "extra": {constant}}}'
    assert json.loads(text[len(BRIDGE_PREFIX) :])["extra"] is not None  # Python reads it
    assert kind(text) is BridgeKind.INVALID


def test_a_huge_integer_payload_is_still_a_valid_envelope() -> None:
    text = envelope()[:-1] + ', "extra": ' + "9" * 5_000 + "}"
    assert kind(text) is BridgeKind.VALID


def test_duplicate_keys_keep_the_last_like_json_parse() -> None:
    body = envelope()[len(BRIDGE_PREFIX) : -1]
    assert kind(BRIDGE_PREFIX + body + ', "hops": 5}') is BridgeKind.INVALID
    bad_first = envelope(hops=5)[len(BRIDGE_PREFIX) : -1]
    assert kind(BRIDGE_PREFIX + bad_first + ', "hops": 4}') is BridgeKind.VALID
