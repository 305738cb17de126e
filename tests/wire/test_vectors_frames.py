"""Spec §10 items 6–7 as byte-level vectors, checked at the frame-model level.

The same manifest is replayed against a live receiver by the endpoint tests, which can also decide
the identity checks (token, target, sender registration) that need more than the frame.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from pi_cross_session._internal.protocol import frames as wire
from pi_cross_session._internal.protocol.errors import FrameValidationError
from tests.data_paths import VECTORS

MANIFEST = VECTORS / "frames" / "manifest.json"
DATA: dict[str, Any] = json.loads(MANIFEST.read_text(encoding="utf-8"))
CASES: list[dict[str, Any]] = DATA["cases"]


def test_items_six_and_seven_are_covered() -> None:
    assert {case["item"] for case in CASES} == {6, 7}
    assert sum(case["item"] == 6 and case["receiver"] != "ready" for case in CASES) >= 7


@pytest.mark.parametrize("case", CASES, ids=[f"{c['item']}-{c['name']}" for c in CASES])
def test_frame_level_verdict(case: dict[str, Any]) -> None:
    parse = wire.parse_hello if case["kind"] == "hello" else wire.parse_request
    obj = wire.loads_frame(case["line"])
    if case["frame"] == "valid":
        parsed = parse(obj)
        assert wire.dumps_frame(parsed) == case["line"]
        return
    with pytest.raises(FrameValidationError) as caught:
        parse(obj)
    assert caught.value.code == case["frame"]
    assert case["requestId"] == "unknown"
