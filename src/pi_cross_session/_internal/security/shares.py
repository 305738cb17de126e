"""Bounded tables shared by many senders, in which no sender pushes out another sender's entries.

A receiver remembers some things per sender — admitted message ids, digests of admitted texts,
finished status rows — in tables with a fixed bound. With plain oldest-first eviction whoever
commits fastest decides whose entries go: throwaway identities committing refused messages could
push out another sender's text digest inside its 30 s window and get that sender's repeat admitted.

:class:`SenderShares` keeps a table's keys grouped by the sender that owns them, each sender's
oldest first, and answers one question — which key goes to make room — by one rule:

1. a sender that holds another key of the table gives up its own oldest one;
2. a sender that holds none takes the oldest key of the sender holding the most keys; among equal
   holders, of the one whose count has not changed for the longest (so equal holders take turns).

So once a sender holds a key, nothing it commits evicts anyone else's; and a newcomer evicts only
from a largest holder: a sender holding ``v`` of ``n`` keys loses one to a newcomer only while
every holder has at most ``v``, that is while at least ``n / v`` senders hold keys.

Senders are kept in *levels* by how many keys they hold, each level in the order its senders
reached it, so rule 2 looks at the first sender of the top level: a flood of newcomers costs a
constant time per eviction, not a scan of every holder. The class only records ownership and picks
victims; the table that uses it stores its own values and removes what it evicts (see
:class:`~pi_cross_session._internal.security.limits.TextDedup`).
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class SenderShares(Generic[K]):
    """The keys of one bounded table, grouped by owning sender, and the rule for evicting one."""

    def __init__(self) -> None:
        self._owner: dict[K, str] = {}
        # Per sender, its keys, oldest first (a key added again becomes the newest). Plain dicts
        # keep insertion order, and a key deleted and inserted again goes last.
        self._held: dict[str, dict[K, None]] = {}
        # Senders by how many keys they hold, each level in the order its senders entered it.
        self._levels: dict[int, dict[str, None]] = {}
        self._top = 0

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
        current = self._owner.get(key)
        if current == owner:
            mine = self._held[owner]
            del mine[key]
            mine[key] = None
            return
        if current is not None:
            self.remove(key)
        held = self._held.get(owner)
        if held is None:
            held = self._held[owner] = {}
        held[key] = None
        self._owner[key] = owner
        count = len(held)
        self._move(owner, count - 1, count)

    def remove(self, key: K) -> None:
        """Forget ``key`` (expired, evicted, or given up); a key not held is ignored."""
        owner = self._owner.pop(key, None)
        if owner is None:
            return
        held = self._held[owner]
        del held[key]
        self._move(owner, len(held) + 1, len(held))
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
        # Rule 2, from the top level down. A sender is passed over only when it is ``owner`` or
        # all its keys are spared, which only a handful of spared keys can cause.
        for count in range(self._top, 0, -1):
            for name in self._levels.get(count, ()):
                if name == owner:
                    continue
                candidate = _first_not_in(self._held[name], spare)
                if candidate is not None:
                    return candidate
        return None

    def make_room(self, bound: int, owner: str, *, spare: Collection[K] = ()) -> list[K]:
        """Evict by the rule, for ``owner``'s newest key, until at most ``bound`` keys are left
        (or only spared ones); returns what went, for the table to drop the values it keeps."""
        evicted: list[K] = []
        while len(self._owner) > bound:
            victim = self.victim(owner, spare=spare)
            if victim is None:
                break
            self.remove(victim)
            evicted.append(victim)
        return evicted

    def _move(self, owner: str, before: int, after: int) -> None:
        """``owner`` now holds ``after`` keys instead of ``before``: it leaves its level and
        enters the other one last."""
        levels = self._levels
        if before:
            level = levels[before]
            del level[owner]
            if not level:
                del levels[before]
        if after:
            entered = levels.get(after)
            if entered is None:
                entered = levels[after] = {}
            entered[owner] = None
            if after > self._top:
                self._top = after
        # Counts move by one, so an emptied top level leaves the next one down on top.
        while self._top and self._top not in levels:
            self._top -= 1


def _first_not_in(held: dict[K, None], spare: Collection[K]) -> K | None:
    for key in held:
        if key not in spare:
            return key
    return None


__all__ = ["SenderShares"]
