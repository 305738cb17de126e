"""Every way a test waits for something that must happen, bounded by ``MUST_HAPPEN_S``.

Prefer an event (a line a process prints, a reply, an ``anyio.Event``); these helpers are for
what only exposes state — counters, files, a runtime's fields — so polling is the one way to see
it change. The bound only runs out when the test is failing anyway (see ``bounds.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import anyio

from pi_cross_session._internal.protocol.io.endpoint import Endpoint
from tests.support.bounds import MUST_HAPPEN_S

#: How often a condition is looked at again.
POLL_S: Final = 0.005


async def eventually(condition: Callable[[], object], *, limit_s: float = MUST_HAPPEN_S) -> None:
    """Poll ``condition()`` until it is true; fail after ``limit_s``."""
    with anyio.fail_after(limit_s):
        while not condition():  # noqa: ASYNC110 (no event exists to wait on)
            await anyio.sleep(POLL_S)


async def wait_until_idle(endpoint: Endpoint[object]) -> None:
    """Wait until ``endpoint`` has no open connection.

    Polling is the only way: the endpoint exposes counters, not events, and the client side has
    already closed, so no handshake is left to wait on.
    """
    await eventually(lambda: not endpoint.statistics().open_connections)
