"""plugin/tools.py parameter models: the contract's limits, in its units (UTF-16 code units)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from pi_cross_session._internal.plugin.tools import ListPiParams, SendPiMessageParams

ASTRAL = "\U0001f600"  # one code point, two UTF-16 units


@pytest.mark.parametrize(
    ("field", "limit", "code"),
    [("target", 512, "invalid_target"), ("message", 1_000_000, "invalid_message")],
)
def test_limits_at_the_edge(field: str, limit: int, code: str) -> None:
    base = {"target": "beta", "message": "hi"}
    assert SendPiMessageParams.model_validate({**base, field: "a" * limit})
    assert SendPiMessageParams.model_validate({**base, field: ASTRAL * (limit // 2)})
    for too_long in ("a" * (limit + 1), ASTRAL * (limit // 2) + "a"):
        with pytest.raises(ValidationError, match=code):
            SendPiMessageParams.model_validate({**base, field: too_long})
    with pytest.raises(ValidationError, match=code):
        SendPiMessageParams.model_validate({**base, field: ""})


def test_summary_is_optional_and_bounded() -> None:
    base = {"target": "beta", "message": "hi"}
    assert SendPiMessageParams.model_validate(base).summary is None
    assert SendPiMessageParams.model_validate({**base, "summary": ASTRAL * 200}).summary
    with pytest.raises(ValidationError, match="invalid_message"):
        SendPiMessageParams.model_validate({**base, "summary": ASTRAL * 200 + "x"})
    with pytest.raises(ValidationError, match="invalid_message"):
        SendPiMessageParams.model_validate({**base, "summary": ""})


def test_schemas_advertise_the_limits_and_reject_extras() -> None:
    schema = SendPiMessageParams.model_json_schema()
    assert schema["required"] == ["target", "message"]
    assert schema["properties"]["target"]["maxLength"] == 512
    assert schema["properties"]["message"]["maxLength"] == 1_000_000
    assert schema["properties"]["summary"]["anyOf"][0]["maxLength"] == 400
    assert all(prop.get("description") for prop in schema["properties"].values())
    with pytest.raises(ValidationError):
        SendPiMessageParams.model_validate({"target": "b", "message": "m", "urgent": True})
    assert ListPiParams.model_json_schema()["properties"] == {}
    with pytest.raises(ValidationError):
        ListPiParams.model_validate({"verbose": True})
