"""How long a test waits for something that must happen.

A bound on a reply, an EOF, an event or a process start only runs out when the test is failing
anyway, so it costs nothing to make it generous; a tight one fails a passing test whenever the
machine is busy (several suites on two cores turn milliseconds into seconds). Waits whose length
*is* the point — a deadline under test, a window in which nothing may happen — use their own
figures, not this one.
"""

from __future__ import annotations

from typing import Final

#: The suite-wide bound on waiting for something that must come (well under pytest's timeout).
MUST_HAPPEN_S: Final = 30.0
