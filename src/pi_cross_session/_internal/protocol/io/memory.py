"""Giving freed heap memory back to the operating system after large frames.

Frames up to 1 MiB are read in 64 KiB pieces and joined; glibc serves allocations that size from
its heap (it raises its mmap threshold after the first large free), and a heap that is mostly
free is still counted in the process's RSS until it is trimmed. A flood of large frames therefore
left the receiver tens of MiB larger after the flood than before, though Python had freed every
object. ``malloc_trim(0)`` hands those free pages back; the endpoint calls :func:`give_back` once
a connection that read more than a read's worth has closed, at most once a second and once more a
second after the last such close.

Only glibc has ``malloc_trim``; elsewhere (musl, macOS) :func:`give_back` does nothing and
reports so. It never raises.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable
from typing import Final


def _find_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_TRIM: Final = _find_trim()
#: Whether this process's allocator can give memory back on request (glibc).
AVAILABLE: Final = _TRIM is not None


def give_back() -> bool:
    """Ask the allocator to return free heap memory to the OS; True if it could be asked."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True


__all__ = ["AVAILABLE", "give_back"]
