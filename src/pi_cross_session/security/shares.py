"""Bounded tables shared by many senders, in which no sender pushes out another sender's entries.

A receiver remembers some things per sender — admitted message ids, digests of admitted texts,
finished status rows — in tables with a fixed bound. With plain oldest-first eviction whoever
commits fastest decides whose entries go: throwaway identities committing refused messages could
push out another sender's text digest inside its 30 s window and get that sender's repeat admitted.

:class:`SenderShares` keeps a table's keys grouped by the sender that owns them, each sender's
oldest first, and answers one question — which key goes to make room — by one rule:

1. a sender that holds another key of the table gives up its own oldest one;
2. a sender that holds none takes the oldest key of the sender holding the most keys (among equal
   holders, the one whose oldest key is oldest).

So once a sender holds a key, nothing it commits evicts anyone else's; and a newcomer evicts only
from the largest holder: a sender holding ``v`` of ``n`` keys loses one to a newcomer only while
every holder has at most ``v``, that is while at least ``n / v`` senders hold keys.

The class only records ownership and picks victims; the table that uses it stores its own values
and removes what it evicts (see :class:`~pi_cross_session.security.limits.TextDedup`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Hashable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class SenderShares(Generic[K]):
    """The keys of one bounded table, grouped by owning sender, and the rule for evicting one."""

    def __init__(self) -> None:
        self._owner: dict[K, str] = {}
        # Per sender, its keys oldest first, each with the serial of its last ``add``: the serial
        # orders the oldest keys of different senders for the tie-break.
        self._held: dict[str, OrderedDict[K, int]] = {}
        self._serial = 0

    def __len__(self) -> int:
        return len(self._owner)

    def __contains__(self, key: object) -> bool:
        return key in self._owner

    def __iter__(self) -> Iterator[K]:
        return iter(self._owner)

    def held_by(self, owner: str) -> int:
        """How many keys ``owner`` holds."""
        held = self._held.get(owner)
        return 0 if held is None else len(held)

    def owner_of(self, key: K) -> str | None:
        """The sender holding ``key``, if it is in the table."""
        return self._owner.get(key)

    def add(self, owner: str, key: K) -> None:
        """Record ``key`` as ``owner``'s newest (a key already held becomes its newest again)."""
        if self._owner.get(key, owner) != owner:
            self.remove(key)
        self._serial += 1
        held = self._held.setdefault(owner, OrderedDict())
        held[key] = self._serial
        held.move_to_end(key)
        self._owner[key] = owner

    def remove(self, key: K) -> None:
        """Forget ``key`` (expired, evicted, or given up); a key not held is ignored."""
        owner = self._owner.pop(key, None)
        if owner is None:
            return
        held = self._held[owner]
        del held[key]
        if not held:
            del self._held[owner]

    def victim(self, owner: str, *, spare: Collection[K] = ()) -> K | None:
        """The key to evict so that ``owner`` can keep its newest; ``spare`` keys are never picked
        (the key just added, a row still in use). ``None`` when every key is spared."""
        own = self._held.get(owner)
        if own is not None:
            mine = _first_not_in(own, spare)
            if mine is not None:
                return mine
        largest: tuple[int, int] | None = None
        chosen: K | None = None
        for name, held in self._held.items():
            if name == owner:
                continue  # it holds nothing it may give up (rule 2)
            candidate = _first_not_in(held, spare)
            if candidate is None:
                continue
            # More keys first; among equals, the older oldest key (a smaller serial) first.
            rank = (len(held), -held[candidate])
            if largest is None or rank > largest:
                largest, chosen = rank, candidate
        return chosen


def _first_not_in(held: OrderedDict[K, int], spare: Collection[K]) -> K | None:
    for key in held:
        if key not in spare:
            return key
    return None


__all__ = ["SenderShares"]
