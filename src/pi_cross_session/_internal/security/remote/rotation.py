"""The hub's checks of a key rotation's ask (docs/remote.md, "Rotating a machine's keys").

A rotation ask (:class:`~pi_cross_session._internal.protocol.remote.rotate.RotateAsk`) arrives on a
subject that names the asking machine, as the deployment's servers vouch for it. Before the hub
changes anything it checks, in this order: the ask is for this deployment; its signature verifies
with the key that must have made it (the machine's current identity key to ``rotate``, the new one
it named to ``confirm``) over exactly
:func:`~pi_cross_session._internal.protocol.remote.rotate.signed_bytes`; the card it carries names
the machine the subject names; and it was made inside the time window and after the ask the hub took
last for that machine. Each refusal has a code that travels back to the machine, with a sentence for
its person.

Pure: the caller passes the keys and the time.
"""

from __future__ import annotations

import base64
import binascii
from typing import Final

from pi_cross_session._internal.protocol.errors import CrossSessionError
from pi_cross_session._internal.protocol.remote.rotate import RotateAsk
from pi_cross_session._internal.protocol.remote.settings import (
    ROTATE_ASK_MAX_AGE_S,
    ROTATE_ASK_MAX_AHEAD_S,
)
from pi_cross_session._internal.security.remote.identity import PublicKey

#: The refusals, by code (each travels back to the machine in a ``Refusal``).
UNKNOWN_MACHINE: Final = "unknown_machine"
WRONG_DEPLOYMENT: Final = "wrong_deployment"
BAD_SIGNATURE: Final = "bad_signature"
BAD_CARD: Final = "bad_card"
STALE_ASK: Final = "stale_ask"
NO_ROTATION: Final = "no_rotation"
#: The machine had its share of new keys for now (``ROTATE_KEYS_PER_WINDOW``); the sentence says
#: when it may ask again.
TOO_SOON: Final = "too_soon"
#: The hub could not take the ask for a fault of its own (its lock held, its files); it logged why.
HUB_ERROR: Final = "hub_error"


class RotationRefusedError(CrossSessionError):
    """The hub does not take a rotation ask; ``code`` says why (it travels back)."""

    code = BAD_SIGNATURE


def check_ask(
    ask: RotateAsk,
    *,
    origin: str,
    deployment: str,
    signer: PublicKey,
    now_ms: int,
    after_ms: int | None = None,
    max_age_ms: int = int(ROTATE_ASK_MAX_AGE_S * 1000),
    max_ahead_ms: int = int(ROTATE_ASK_MAX_AHEAD_S * 1000),
) -> None:
    """Pass ``ask`` from ``origin`` (the machine the subject names) when ``signer`` made it for
    ``deployment`` within the window around ``now_ms`` and after ``after_ms`` (the time of the
    last ask taken from that machine, if any); :class:`RotationRefusedError` says why not."""
    if ask.deployment != deployment:
        raise RotationRefusedError(
            "this ask is for another deployment: is this machine's joined.json the hub's?",
            code=WRONG_DEPLOYMENT,
        )
    try:
        signature = base64.b64decode(ask.signature, validate=True)
    except (binascii.Error, ValueError):
        signature = b""
    if not signer.verifies(signature, ask.signed):
        raise RotationRefusedError(
            f"the ask is not signed by the key the deployment has for {origin}"
            + (" (its new one)" if ask.ask == "confirm" else ""),
            code=BAD_SIGNATURE,
        )
    if ask.machine != origin:
        raise RotationRefusedError(
            f"the new card names {ask.machine!r}, not {origin}: a machine keeps its name",
            code=BAD_CARD,
        )
    if not now_ms - max_age_ms <= ask.at <= now_ms + max_ahead_ms:
        raise RotationRefusedError(
            f"the ask was made {(now_ms - ask.at) / 1000:.0f} s before the hub's now, outside "
            f"{max_age_ms / 1000:g} s back and {max_ahead_ms / 1000:g} s ahead: a copy played "
            "back, or a clock that is off (keep both in sync with NTP); run it again",
            code=STALE_ASK,
        )
    if after_ms is not None and ask.at <= after_ms:
        raise RotationRefusedError(
            "an ask made no later than one the hub already took: a copy played back; run it again",
            code=STALE_ASK,
        )


__all__ = [
    "BAD_CARD",
    "BAD_SIGNATURE",
    "HUB_ERROR",
    "NO_ROTATION",
    "STALE_ASK",
    "TOO_SOON",
    "UNKNOWN_MACHINE",
    "WRONG_DEPLOYMENT",
    "RotationRefusedError",
    "check_ask",
]
