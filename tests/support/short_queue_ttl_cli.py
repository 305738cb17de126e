"""The ``pi-cross-session`` command line with a short queue time to live, for tests of the rule.

Run as a script (``python short_queue_ttl_cli.py ARGS``), it is the real command line in every
respect but one: ``QUEUE_TTL_S`` is :data:`SHORT_QUEUE_TTL_S` instead of 30 s, for the inbox's
queue and for ``send --wait``'s bound alike, as both read the one constant. A test of what happens
when a queued message expires then waits seconds, not half a minute. The 30 s figure itself is
pinned by ``tests/receiver/test_limits.py``, and the rules at that figure are tested in-process
under a fake clock (``tests/cli/test_follow.py``, ``tests/receiver/test_wall_clock.py``).

The constant is replaced before any module that reads it is imported (the package imports its
layers lazily), so every ``from ... import QUEUE_TTL_S`` sees the short value.
"""

from __future__ import annotations

import sys
from typing import Final

#: Long enough for a process start and a send to land in the queue first, under load too.
SHORT_QUEUE_TTL_S: Final = 4.0


def main() -> int:
    from pi_cross_session._internal.protocol import limits

    limits.QUEUE_TTL_S = SHORT_QUEUE_TTL_S  # type: ignore[misc]
    from pi_cross_session._internal.cli import main as cli_main

    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
