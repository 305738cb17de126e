"""The receiver's status rows: what a status query answers, bounded so no sender evicts another's.

A row is kept for every admitted message of the incarnation, in admission order, until the table
is full. The bound applies to *final* rows only: a pending row (``accepted``, ``queued``) is never
evicted and is already bounded by the queue (50) plus the one message being admitted. When a row
becomes final and more than ``max_final`` final rows are kept, one final row goes, chosen by
:class:`~pi_cross_session.security.shares.SenderShares`: its sender's own oldest other final row,
or, when it holds none, the oldest of the sender holding the most final rows. The caller names a
row that must stay whatever happens (the submitted row whose turn is still due).

An evicted row turns its sender's status query into ``unknown``; under this rule one sender's
admissions — even a goal member's, which the lifetime budget does not bound — never do that to a
sender it shares the table with while it holds final rows of its own.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import Generic, Protocol, TypeVar

from pi_cross_session.protocol.limits import MAX_CACHE_ENTRIES
from pi_cross_session.security.shares import SenderShares

RowKey = tuple[str, str]


class _RowLike(Protocol):
    @property
    def sender_instance_id(self) -> str: ...

    @property
    def message_id(self) -> str: ...

    @property
    def final(self) -> bool: ...


R = TypeVar("R", bound=_RowLike)


class RowTable(Generic[R]):
    """Rows by (sender instance id, message id), in admission order; at most ``max_final`` final
    rows, every pending row."""

    def __init__(self, *, max_final: int = MAX_CACHE_ENTRIES) -> None:
        self._max_final = max_final
        self._rows: OrderedDict[RowKey, R] = OrderedDict()
        self._final: SenderShares[RowKey] = SenderShares()
        self._evicted = 0

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, key: object) -> bool:
        return key in self._rows

    def __iter__(self) -> Iterator[RowKey]:
        return iter(self._rows)

    def get(self, key: RowKey) -> R | None:
        """The row of ``key``, unless it was never made or has been evicted."""
        return self._rows.get(key)

    def values(self) -> tuple[R, ...]:
        """Every row kept, oldest admission first."""
        return tuple(self._rows.values())

    @property
    def evicted(self) -> int:
        """Final rows evicted so far in this incarnation."""
        return self._evicted

    def put(self, row: R, *, keep: RowKey | None = None) -> None:
        """Store a new row (last) or a row's new version (in place). When it has just become
        final and too many final rows are kept, evict one, never ``keep`` nor this one."""
        key = (row.sender_instance_id, row.message_id)
        self._rows[key] = row
        if not row.final or key in self._final:
            return
        self._final.add(row.sender_instance_id, key)
        spare = (key,) if keep is None else (key, keep)
        # Over the bound only if nothing but spared rows is left (at most those two).
        for gone in self._final.make_room(self._max_final, row.sender_instance_id, spare=spare):
            del self._rows[gone]
            self._evicted += 1


__all__ = ["RowKey", "RowTable"]
