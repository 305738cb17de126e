"""A fake clock for tests: wall time and monotonic time that move only when the test says so.

The package takes its time from an injected
:class:`~pi_cross_session._internal.security.admission.Clock`; tests hand it
:attr:`FakeClock.clock`, so every deadline and window is crossed by
:meth:`FakeClock.advance`, never by sleeping.
"""

from __future__ import annotations

from typing import Final

from pi_cross_session._internal.security.admission import Clock

#: An arbitrary, fixed epoch (2023-11-14) so replies and rows are reproducible.
START_WALL_MS: Final = 1_700_000_000_000
#: Monotonic seconds at the start; whole, so sums of the binary fractions tests use stay exact.
START_MONOTONIC: Final = 1_000.0


class FakeClock:
    """Wall time (epoch ms) and monotonic time (s) that move together, only on :meth:`advance`."""

    def __init__(self, *, wall_ms: int = START_WALL_MS, monotonic: float = START_MONOTONIC) -> None:
        self._wall_ms = wall_ms
        self._monotonic = monotonic

    def wall_ms(self) -> int:
        return self._wall_ms

    def monotonic(self) -> float:
        return self._monotonic

    def advance(self, seconds: float) -> None:
        """Move both clocks forward by ``seconds`` (wall time rounded to whole ms)."""
        if seconds < 0:
            raise ValueError("time only moves forward here; use step_wall for a wall jump")
        self._monotonic += seconds
        self._wall_ms += round(seconds * 1000)

    def advance_ms(self, ms: int) -> None:
        """Move both clocks forward by whole milliseconds."""
        self.advance(ms / 1000)

    def step_wall(self, ms: int) -> None:
        """Jump the wall clock alone (NTP correction); the monotonic clock is untouched."""
        self._wall_ms += ms

    @property
    def clock(self) -> Clock:
        return Clock(wall_ms=self.wall_ms, monotonic=self.monotonic)
