"""The exception tree of the wire layer.

::

    CrossSessionError             every error this package raises on purpose; carries a code
    ├── FrameError                 bytes that are not a frame (framing, UTF-8, JSON)
    │   └── FrameTooLargeError          a frame over the byte cap (code ``message_too_large``)
    ├── FrameValidationError       JSON that is not the frame the contract expects
    └── LocalProtocolError         we were about to break the contract ourselves

"The peer broke the protocol" (:class:`FrameError`, :class:`FrameValidationError`) and "we broke it"
(:class:`LocalProtocolError`) are different classes so that a caller never confuses a hostile input
with a bug of ours.
"""

from __future__ import annotations

from pi_cross_session.protocol.codes import Code


class CrossSessionError(Exception):
    """Root of every deliberate error; ``code`` is the wire or local status it maps to."""

    code: str = Code.INVALID_FRAME

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class FrameError(CrossSessionError):
    """The peer sent bytes that do not form a frame: bad UTF-8, an empty line, not JSON."""

    code = Code.INVALID_FRAME


class FrameTooLargeError(FrameError):
    """One frame passed the raw byte cap before its LF arrived (or would, when encoding)."""

    code = Code.MESSAGE_TOO_LARGE


class FrameValidationError(CrossSessionError):
    """Well-formed JSON whose shape or values break the contract for the expected frame."""

    code = Code.INVALID_FRAME


class LocalProtocolError(CrossSessionError):
    """This side was about to send something the contract forbids; nothing was sent."""
