"""What both conversations share: the answers of ``next_event`` that are not events.

A conversation (:mod:`~pi_cross_session._internal.protocol.server_conversation`,
:mod:`~pi_cross_session._internal.protocol.client_conversation`) hands its driver either an event to
act on or one of three answers that say why there is none: :data:`NEED_DATA` (read more bytes, or
EOF),
:data:`PAUSED` (the driver owes a frame first) and :data:`ENDED` (nothing more will happen).
"""

from __future__ import annotations

from enum import Enum
from typing import Final

from pi_cross_session._internal.protocol.codec import NEED_DATA, NeedData

__all__ = ["ENDED", "NEED_DATA", "PAUSED", "Idle", "NeedData"]


class Idle(Enum):
    """Why a conversation has no event, besides :data:`NEED_DATA`."""

    #: The driver owes a frame (a reply, or the next request); nothing is read meanwhile.
    PAUSED = "PAUSED"
    #: The conversation is over.
    ENDED = "ENDED"

    def __repr__(self) -> str:
        return self.value


PAUSED: Final = Idle.PAUSED
ENDED: Final = Idle.ENDED
