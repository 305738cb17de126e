"""What the identifiers a goal deals in look like: goal and task ids, runtime ids, session ids.

One place for the three checks, shared by the state machine, the evidence journal and the sender's
confirmations, so that they can never disagree on what a valid id is.
"""

from __future__ import annotations

from pi_cross_session._internal.protocol.frames import ID_RE, INSTANCE_ID_RE
from pi_cross_session._internal.protocol.limits import MAX_SESSION_ID_UNITS
from pi_cross_session._internal.protocol.text import is_well_formed, utf16_length


def valid_id(value: object) -> bool:
    """A goal id or a task handle id: ``[A-Za-z0-9_-]{1,128}``."""
    return isinstance(value, str) and ID_RE.fullmatch(value) is not None


def valid_instance_id(value: object) -> bool:
    """A runtime instance id: 32 lowercase hex digits."""
    return isinstance(value, str) and INSTANCE_ID_RE.fullmatch(value) is not None


def valid_session_id(value: object) -> bool:
    """A host session id: non-empty, well-formed text within the registration's bound."""
    return (
        isinstance(value, str)
        and bool(value)
        and is_well_formed(value)
        and utf16_length(value) <= MAX_SESSION_ID_UNITS
    )


__all__ = ["valid_id", "valid_instance_id", "valid_session_id"]
