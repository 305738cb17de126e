"""The goal view of a turn: from what opened it to the authority :mod:`.goals` and the gate use.

:class:`~pi_cross_session._internal.security.turns.TurnTracker` learns what opened the running turn
(the peer messages admission submitted, the notifications of this session's own extensions and the
task handles they name). This module turns those facts into

* the :class:`~pi_cross_session._internal.security.goals.Authority` a ``peer_goal`` action is judged
by, and
* the :class:`~pi_cross_session._internal.security.gate.GoalGrant` a goal-scoped turn holds at the
gate —
  computed afresh for every call, so a goal that ended mid-turn leaves that turn without a grant
  at once.

**Failing closed on lost evidence.** Ownership evidence is bounded (512 handles). Once any was
evicted, a notification naming a handle with no known owner may be about an old goal's task, so it
is treated as naming an unknown goal (restricted, no grant) rather than as an unscoped
notification with the user's trust.
"""

from __future__ import annotations

from typing import Final

from pi_cross_session._internal.security.gate import GoalGrant
from pi_cross_session._internal.security.goals import (
    Authority,
    AuthorityClass,
    AuthorityKind,
    Goals,
)
from pi_cross_session._internal.security.provenance import Provenance, TurnFacts

#: Stands for "a goal we cannot name": never a valid goal id, so it never matches the active goal.
UNKNOWN_GOAL: Final = ""


def authority_of(
    facts: TurnFacts | None, goals: Goals | None, *, aborted: bool = False
) -> Authority:
    """The authority of the running turn (``facts``) for goal actions; ``aborted`` adds what
    the host knows beyond the tracker (the tool call's own abort signal)."""
    if facts is None:
        return Authority(AuthorityKind.UNKNOWN, cancelled=aborted)
    cancelled = facts.cancelled or aborted
    provenance = facts.provenance
    if provenance is Provenance.USER:
        return Authority(AuthorityKind.USER_TURN, cancelled=cancelled)
    if provenance is Provenance.NOTIFICATION:
        owners: set[str] = set()
        for handle in facts.handles:
            owner = None if goals is None else goals.owner_of(handle)
            if owner is not None:
                owners.add(owner)
            elif goals is not None and goals.evicted_evidence:
                owners.add(UNKNOWN_GOAL)
        return Authority(
            AuthorityKind.NOTIFICATION, cancelled=cancelled, notification_goals=frozenset(owners)
        )
    if provenance is Provenance.PEER:
        claims = facts.claims
        if len(claims) == 1:
            (claim,) = claims
            return Authority(
                AuthorityKind.PEER_TURN,
                cancelled=cancelled,
                goal_id=claim.goal_id,
                sender=claim.sender,
            )
        # Several peer messages opened the turn (a race the host allows): it is scoped to no
        # goal, but if any of them was scoped it still names one, and stays restricted as such.
        scoped = any(claim.goal_id is not None for claim in claims)
        return Authority(
            AuthorityKind.PEER_TURN,
            cancelled=cancelled,
            goal_id=UNKNOWN_GOAL if scoped else None,
        )
    return Authority(AuthorityKind.UNKNOWN, cancelled=cancelled)


def names_goal(authority: Authority) -> bool:
    """True when the turn acts for some goal (a scoped peer message, goal-owned notifications),
    whether or not that goal is still active."""
    return authority.goal_id is not None or bool(authority.notification_goals)


def grant_for(authority: Authority, goals: Goals | None) -> GoalGrant | None:
    """The grant of a turn scoped to the *current* goal, else ``None``."""
    if goals is None:
        return None
    goal_id = goals.active_id
    if goal_id is None or goals.classify(authority) is not AuthorityClass.GOAL_SCOPED:
        return None
    return GoalGrant(goal_id, goals.owner_of)


__all__ = ["UNKNOWN_GOAL", "authority_of", "grant_for", "names_goal"]
