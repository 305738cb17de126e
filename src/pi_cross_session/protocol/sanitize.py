"""Deprecated name of :mod:`pi_cross_session.sanitize` (the same functions, with a warning)."""

from __future__ import annotations

import warnings

from pi_cross_session.sanitize import block, dumps, is_unsafe, line

__all__ = ["block", "dumps", "is_unsafe", "line"]

warnings.warn(
    "pi_cross_session.protocol.sanitize is deprecated; import pi_cross_session.sanitize instead",
    DeprecationWarning,
    stacklevel=2,
)
