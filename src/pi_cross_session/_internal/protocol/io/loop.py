"""The running event loop as the drivers use it: its clock, deadlines, and descriptor readiness.

The drivers are anyio code, and run on trio too (the tests drive them under trio's mock clock).
But anyio answers each of these by looking up the running backend first (sniffio's thread-local
and context variable, then the current task and its state): about 2 µs per clock read, 8 µs per
cancel scope with a deadline, a few µs per wait for a descriptor, measured; and a probe's whole
receiver side is a few hundred µs, with a clock read on every read of every connection. So when
asyncio runs the drivers they ask the loop itself, with the calls anyio's asyncio backend makes
after its lookup; under any other backend they go through anyio. Same meaning either way:

* :func:`now` is :func:`anyio.current_time` (on asyncio, ``loop.time()``);
* :func:`deadline_scope` is ``anyio.CancelScope(deadline=...)`` for what the drivers use of one
  (``deadline`` moved at will, ``cancel()``, ``cancelled_caught``); on asyncio it is one timer
  (``loop.call_at``) that cancels the task, undone on exit as :func:`asyncio.timeout` undoes its
  own, so a cancellation from outside (the endpoint stopping) still goes through;
* :class:`Readiness` waits for a descriptor as :func:`anyio.wait_readable` and
  :func:`anyio.wait_writable` do, and :meth:`Readiness.closing` wakes that wait with
  :class:`anyio.ClosedResourceError` as :func:`anyio.notify_closing` does;
* :class:`Wakeup` is a one-task :class:`anyio.Event` (on asyncio, one future of the loop).
"""

from __future__ import annotations

import asyncio
import math
from types import TracebackType
from typing import Protocol

import anyio

__all__ = ["DeadlineScope", "Readiness", "Wakeup", "asyncio_loop", "deadline_scope", "now"]


def asyncio_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio loop, or ``None`` under another backend."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def now() -> float:
    """The event loop's clock, as :func:`anyio.current_time` reads it."""
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


class Wakeup:
    """One wake-up for one waiting task, as :class:`anyio.Event` gives it (``set`` before or
    during ``wait``), on a plain future of the asyncio loop when asyncio runs (an
    :class:`anyio.Event` looks the backend up on creation and on each call, and the endpoint makes
    one for every connection a task waits for)."""

    __slots__ = ("_event", "_future")

    def __init__(self) -> None:
        loop = asyncio_loop()
        self._future: asyncio.Future[None] | None = None
        self._event: anyio.Event | None = None
        if loop is None:
            self._event = anyio.Event()
        else:
            self._future = loop.create_future()

    def set(self) -> None:
        """Wake the waiting task (or let its wait return at once); a second call does nothing."""
        future = self._future
        if future is None:
            assert self._event is not None
            self._event.set()
        elif not future.done():  # a wait cancelled meanwhile cancelled the future
            future.set_result(None)

    async def wait(self) -> None:
        """Until :meth:`set` is called (a cancellation point)."""
        if self._future is None:
            assert self._event is not None
            await self._event.wait()
        else:
            await self._future


class Readiness:
    """One descriptor's wait for readability, or for writability (one wait at a time; a stream
    keeps one of each), on the asyncio loop's own callbacks; under another backend, anyio's. The
    owner calls :meth:`closing` before it closes the descriptor, so the loop never watches a
    descriptor number the kernel may hand out again."""

    __slots__ = ("_elsewhere", "_fd", "_future", "_loop", "_writing")

    def __init__(self, fd: int, *, writing: bool) -> None:
        self._fd = fd
        self._writing = writing
        self._future: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Waits in progress through anyio (under another backend).
        self._elsewhere = 0

    async def wait(self) -> None:
        """Until the descriptor is readable (or writable); :class:`anyio.ClosedResourceError` if
        :meth:`closing` is called meanwhile."""
        loop = asyncio_loop()
        if loop is None:
            self._elsewhere += 1
            try:
                await (anyio.wait_writable if self._writing else anyio.wait_readable)(self._fd)
            finally:
                self._elsewhere -= 1
            return
        future: asyncio.Future[None] = loop.create_future()
        if self._writing:
            loop.add_writer(self._fd, self._ready, future)
        else:
            loop.add_reader(self._fd, self._ready, future)
        self._future, self._loop = future, loop
        try:
            await future
        finally:
            if self._future is future:
                self._release()

    def closing(self) -> None:
        """The descriptor is about to be closed: stop watching it, and wake the wait."""
        if self._elsewhere:
            anyio.notify_closing(self._fd)
        future = self._future
        if future is None:
            return
        self._release()
        if not future.done():
            future.set_exception(anyio.ClosedResourceError())

    def _ready(self, future: asyncio.Future[None]) -> None:
        # Level-triggered: stop watching at once, or the loop calls back until the task runs.
        if self._future is future:
            self._release()
        if not future.done():
            future.set_result(None)

    def _release(self) -> None:
        loop = self._loop
        self._future = None
        assert loop is not None
        if self._writing:
            loop.remove_writer(self._fd)
        else:
            loop.remove_reader(self._fd)
