"""Warnings a gateway says once per machine, until that machine is heard from properly again.

A cause that repeats with every envelope (a machine that does not listen to us, a clock that is
off) is one line at the default verbosity when it starts, not one per send or record; once the
machine's envelopes pass again, the next time it happens is said again.
"""

from __future__ import annotations


class SaidOnce:
    """Which (kind, machine) warnings were said and not yet cleared."""

    def __init__(self) -> None:
        self._said: set[tuple[str, str]] = set()

    def first(self, kind: str, machine: str) -> bool:
        """True the first time ``kind`` is said of ``machine`` since it was last cleared."""
        key = (kind, machine)
        if key in self._said:
            return False
        self._said.add(key)
        return True

    def clear(self, machine: str) -> None:
        """``machine`` was heard from as it should be: say anything of it again next time."""
        self._said = {key for key in self._said if key[1] != machine}
