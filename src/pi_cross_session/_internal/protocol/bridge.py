"""Recognising the reference's bridge envelope in message text (spec §8.4).

A message whose text starts with ``cross-session:bridge:v1`` and a newline is not meant for a model:
it carries a JSON envelope for an in-process listener of the receiving host. We do not run that
host bus, so a valid envelope is refused as ``unsupported`` and an invalid one as
``invalid_bridge``; either way such text never reaches a conversation. This module only classifies.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from pi_cross_session._internal.protocol import jsonwire
from pi_cross_session._internal.protocol.errors import FrameError
from pi_cross_session._internal.protocol.frames import ID_RE
from pi_cross_session._internal.protocol.limits import (
    BRIDGE_MAX_BUDGET,
    BRIDGE_MAX_HOPS,
    BRIDGE_MAX_TTL_MS,
    MAX_SAFE_INTEGER,
)

BRIDGE_PREFIX: Final = "cross-session:bridge:v1\n"


class BridgeKind(StrEnum):
    """What a message text is, as far as the bridge is concerned."""

    NOT_BRIDGE = "not_bridge"
    VALID = "valid"
    INVALID = "invalid"


def _is_int(value: object, low: int, high: int) -> bool:
    return type(value) is int and low <= value <= high


def classify_bridge(text: str, *, now_ms: int) -> BridgeKind:
    """Classify ``text``: not an envelope, a valid one, or an invalid or expired one."""
    if not text.startswith(BRIDGE_PREFIX):
        return BridgeKind.NOT_BRIDGE
    try:
        envelope = jsonwire.loads(text[len(BRIDGE_PREFIX) :])
    except FrameError:
        return BridgeKind.INVALID
    if not isinstance(envelope, dict):
        return BridgeKind.INVALID
    origin = envelope.get("origin")
    correlation = envelope.get("correlationId")
    expires_at = envelope.get("expiresAt")
    valid = (
        envelope.get("version") == 1
        and type(envelope.get("version")) is int
        and isinstance(origin, str)
        and ID_RE.fullmatch(origin) is not None
        and isinstance(correlation, str)
        and ID_RE.fullmatch(correlation) is not None
        and _is_int(expires_at, -MAX_SAFE_INTEGER, MAX_SAFE_INTEGER)
        and now_ms < expires_at <= now_ms + BRIDGE_MAX_TTL_MS  # type: ignore[operator]
        and _is_int(envelope.get("hops"), 0, BRIDGE_MAX_HOPS)
        and _is_int(envelope.get("budget"), 1, BRIDGE_MAX_BUDGET)
        and "payload" in envelope
    )
    return BridgeKind.VALID if valid else BridgeKind.INVALID
