"""A deadline for a task, on the asyncio loop's own timer. With the sockets' readiness
(:mod:`~pi_cross_session._internal.protocol.io.sockets`), it is all the waiting machinery the
drivers keep of their own, because anyio's costs measurably more CPU per exchange.

:func:`deadline_scope` is ``anyio.CancelScope(deadline=...)`` for what the drivers use of one
(``deadline`` moved at will, ``cancel()``, ``cancelled_caught``). Under asyncio it is one timer
(``loop.call_at``) that cancels the task and is undone on exit as :func:`asyncio.timeout` undoes
its own, so a cancellation from outside (the endpoint stopping) still goes through; under any
other backend it *is* anyio's scope. :func:`now` is the same for the clock those deadlines run
on. Everything else the drivers wait on is anyio's own: its events, its task groups.

Why it stays (``bench/exchange.py``, CPU per probe and per send, medians of alternated runs
against the tree that kept all of ``loop.py``; docs/performance.md, "Waits given back to anyio"):
with anyio's clock and events and this scope, the receiver's CPU per probe was 1.044× and the
sender's 1.008× (18 runs each); with anyio's cancel scope as well, 1.091× and 1.045× (20 runs),
over the 1.05× the project allows itself for giving machinery back. anyio looks the running
backend up on every scope it makes (about 5 µs a scope entered and left, against 2.3 µs here,
timeit), and each connection takes one on each side.
"""

from __future__ import annotations

import asyncio
import math
from types import TracebackType
from typing import Protocol

import anyio

__all__ = ["DeadlineScope", "asyncio_loop", "deadline_scope", "now"]


def asyncio_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio loop, or ``None`` under another backend."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def now() -> float:
    """The clock the deadlines run on: :func:`anyio.current_time`, read from the asyncio loop
    itself when asyncio runs (0.06 µs against 0.54 µs, timeit; a receiver reads it four times a
    probe, and the whole issue's changes together measured 1.060× the receiver's CPU per probe
    with anyio's clock against the 1.05× allowed)."""
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:
        return anyio.current_time()


class DeadlineScope(Protocol):
    """What the drivers use of a cancel scope (``anyio.CancelScope`` is one)."""

    #: When the scope cancels its task, on :func:`now`'s clock (``math.inf``: never).
    deadline: float

    @property
    def cancelled_caught(self) -> bool:
        """The scope ended by swallowing its own cancellation (its deadline, or ``cancel()``)."""
        ...

    def cancel(self) -> None:
        """Cancel the scope's task now (or as soon as it is entered)."""

    def __enter__(self) -> DeadlineScope: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None: ...


def deadline_scope(deadline: float) -> DeadlineScope:
    """A cancel scope that cancels its task at ``deadline`` (see the module docstring)."""
    loop = asyncio_loop()
    if loop is None:
        return anyio.CancelScope(deadline=deadline)
    return _TimerScope(loop, deadline)


class _TimerScope:
    """A deadline on the asyncio loop's timer: ``task.cancel()`` when it passes, undone on exit.

    A deadline moved later is not rescheduled at once: the timer, when it fires, finds the
    deadline moved and sets itself again (the receiver moves it on every read of a request).
    """

    __slots__ = (
        "_cancelling",
        "_deadline",
        "_delivered",
        "_entered",
        "_handle",
        "_loop",
        "_scheduled",
        "_task",
        "cancel_called",
        "cancelled_caught",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop, deadline: float) -> None:
        self._loop = loop
        self._deadline = deadline
        self._handle: asyncio.Handle | None = None
        self._scheduled = math.inf
        self._task: asyncio.Task[object] | None = None
        self._cancelling = 0
        self._entered = False
        self._delivered = False
        self.cancel_called = False
        self.cancelled_caught = False

    @property
    def deadline(self) -> float:
        return self._deadline

    @deadline.setter
    def deadline(self, value: float) -> None:
        self._deadline = value
        if self._entered and not self.cancel_called and value < self._scheduled:
            self._schedule()

    def cancel(self) -> None:
        if self.cancel_called:
            return
        self.cancel_called = True
        if self._entered:
            self._deliver_soon()

    def __enter__(self) -> _TimerScope:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a deadline scope needs a task")
        self._task = task
        self._cancelling = task.cancelling()
        self._entered = True
        if self.cancel_called:
            self._deliver_soon()
        else:
            self._schedule()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        self._entered = False
        self._unschedule()
        if self._delivered:
            assert self._task is not None
            # Ours to swallow only if no other cancellation is pending (asyncio.timeout's rule).
            if self._task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
                self.cancelled_caught = True
                return True
        return None

    def _schedule(self) -> None:
        self._unschedule()
        self._scheduled = self._deadline
        if self._deadline != math.inf:
            self._handle = self._loop.call_at(self._deadline, self._on_timer)

    def _unschedule(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._scheduled = math.inf

    def _on_timer(self) -> None:
        self._handle = None
        if self._deadline > self._scheduled:
            self._schedule()  # moved later meanwhile
            return
        self.cancel_called = True
        self._deliver()

    def _deliver_soon(self) -> None:
        # From the loop, never from inside the task: a task cancelled while it runs stays
        # cancelled until its next wait, even one after this scope (Python 3.11's uncancel()
        # does not clear that), where nothing would catch it.
        self._unschedule()
        self._handle = self._loop.call_soon(self._deliver)

    def _deliver(self) -> None:
        # Only ever called by the loop (a timer or call_soon): the task is waiting, so the
        # cancellation lands on that wait, inside this scope.
        self._handle = None
        if self._entered and not self._delivered:
            assert self._task is not None
            self._delivered = True
            self._task.cancel()
