"""Running short of kernel resources: which failures say so, and how long to wait after one.

A process that runs out of file descriptors (``EMFILE``, or ``ENFILE`` for the whole system),
socket buffers (``ENOBUFS``) or kernel memory (``ENOMEM``) is under *pressure*: the failure says
nothing about the peer, the file or the request, and the same call succeeds once something is
given back. Every part of the session treats such a failure alike: it is counted and shown, it never
tears the session down, and the operation is tried again after a pause (the endpoint sheds a
connection first, see :mod:`~pi_cross_session._internal.protocol.fairness`).

The errors reach us in several wrappings: a bare :class:`OSError`; anyio's
``BrokenResourceError`` raised *from* it (a failed ``accept``); the file layer's
:class:`~pi_cross_session._internal.protocol.errors.CrossSessionError` whose ``code`` is the errno
name.
:func:`shortage` sees through all three. This module is pure: no clock, no I/O.
"""

from __future__ import annotations

import errno
from typing import Final

#: The errnos that mean "a kernel resource ran out", not "this operation is wrong".
RESOURCE_ERRNOS: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
#: Their names, which is how the file layer's errors carry them (``code``).
RESOURCE_CODES: Final = frozenset(errno.errorcode[number] for number in RESOURCE_ERRNOS)

#: Causes followed from an exception before giving up (a chain is never this long in practice).
_MAX_CHAIN: Final = 8


def _chain(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(chain) < _MAX_CHAIN and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def shortage(exc: BaseException) -> str | None:
    """The errno name (``"EMFILE"`` …) when ``exc``, or an error that caused it, says a kernel
    resource ran out; ``None`` for any other failure."""
    for link in _chain(exc):
        if isinstance(link, OSError) and link.errno in RESOURCE_ERRNOS:
            return errno.errorcode[link.errno]
        code = getattr(link, "code", None)
        if isinstance(code, str) and code in RESOURCE_CODES:
            return code
    return None


def failure_name(exc: BaseException) -> str:
    """A short, stable name for any failure: the errno name of the first :class:`OSError` in its
    chain, else the exception's class name (never text from the peer or the OS message)."""
    for link in _chain(exc):
        if isinstance(link, OSError) and link.errno is not None:
            return errno.errorcode.get(link.errno, f"errno {link.errno}")
    return type(exc).__name__


class Headroom:
    """How many connections may stay open once file descriptors ran short (pure).

    Unbounded (``cap is None``) until ``accept`` fails for lack of descriptors with ``open``
    connections; from then on at most ``open - reserve`` (never less than 1), so ``reserve``
    descriptors stay free for the rest of the session. Each later count of the free descriptors
    moves the cap to what they allow (``open + free - reserve``), and lifts it once that reaches
    ``max_connections``.
    """

    def __init__(self, *, reserve: int, max_connections: int) -> None:
        if reserve < 0 or max_connections < 1:
            raise ValueError("need reserve >= 0 and max_connections >= 1")
        self.reserve = reserve
        self.max_connections = max_connections
        self.cap: int | None = None

    @property
    def capacity(self) -> int:
        """Connections allowed now."""
        return self.max_connections if self.cap is None else self.cap

    def on_shortage(self, open_now: int) -> int:
        """``accept`` failed for lack of descriptors with ``open_now`` connections; the new cap."""
        cap = max(1, open_now - self.reserve)
        self.cap = cap if self.cap is None else min(self.cap, cap)
        return self.cap

    def wanted(self, open_now: int) -> int:
        """How many free descriptors a count should look for: enough to lift the cap."""
        return max(0, self.max_connections - open_now) + self.reserve

    def on_count(self, open_now: int, free: int) -> None:
        """``free`` descriptors were found free (at most :meth:`wanted`) with ``open_now`` open."""
        allowed = open_now + free - self.reserve
        self.cap = None if allowed >= self.max_connections else max(1, allowed)


class Backoff:
    """Growing, bounded pauses after failures in a row: ``first_s``, then twice as long each time
    up to ``max_s``; :meth:`reset` after a success starts again from ``first_s``."""

    def __init__(self, first_s: float, max_s: float) -> None:
        if not 0 < first_s <= max_s:
            raise ValueError("need 0 < first_s <= max_s")
        self._first_s = first_s
        self._max_s = max_s
        self._next_s = first_s
        #: Failures since the last success.
        self.in_a_row = 0

    def next_delay(self) -> float:
        """The pause after one more failure."""
        delay = self._next_s
        self._next_s = min(self._max_s, self._next_s * 2)
        self.in_a_row += 1
        return delay

    def reset(self) -> None:
        """A success: the next failure pauses ``first_s`` again."""
        self._next_s = self._first_s
        self.in_a_row = 0


__all__ = [
    "RESOURCE_CODES",
    "RESOURCE_ERRNOS",
    "Backoff",
    "Headroom",
    "failure_name",
    "shortage",
]
