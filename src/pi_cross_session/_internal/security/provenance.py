"""Who started a turn, as far as we can tell: the values the turn tracker hands to the gate.

:class:`~pi_cross_session._internal.security.turns.TurnTracker` learns a turn's :class:`Provenance`
from the host's events; the tool-call gate (:mod:`.gate`) judges calls by the resulting
:class:`TurnAuthority`, and the goal view (:mod:`.goal_turns`) reads the opening's
:class:`TurnFacts`. The gate's verdicts by provenance are drawn in :mod:`.gate`; a
*notification* turn is one another extension of this very session started with a message of its
own (a workflow reporting back, say): code the local user chose to load, so trusted like the user.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from pi_cross_session._internal.security.goals import TaskHandle


class Provenance(StrEnum):
    """Who started a turn, as far as the host's events tell."""

    USER = "user"
    PEER = "peer"
    NOTIFICATION = "notification"
    UNKNOWN = "unknown"

    @property
    def known(self) -> bool:
        """True for every provenance but ``unknown`` (admission queues only behind these)."""
        return self is not Provenance.UNKNOWN


#: Which opening message says most about a turn. A peer message among the opening messages makes
#: a peer turn whatever else opened it (a user prompt that raced our submission, spec §7.3: while
#: a submission of ours is in flight, user input does not claim the turn). Never downgraded.
RANK: Final = {
    Provenance.UNKNOWN: 0,
    Provenance.NOTIFICATION: 1,
    Provenance.USER: 2,
    Provenance.PEER: 3,
}


@dataclass(frozen=True, slots=True)
class TurnAuthority:
    """What the gate knows of the running turn: who started it, whether it was cancelled, and
    whether it names a goal (a bound peer's goal id, or notifications of goal-owned tasks)."""

    provenance: Provenance
    cancelled: bool = False
    goal_bound: bool = False

    @property
    def restricted(self) -> bool:
        """True when gated tools are refused: peer, unknown, any cancelled turn, and any
        notification turn that names goal-owned tasks (it gets the goal's grant at most)."""
        if self.cancelled:
            return True
        if self.provenance is Provenance.NOTIFICATION and self.goal_bound:
            return True
        return self.provenance in (Provenance.PEER, Provenance.UNKNOWN)


#: Outside any turn (a call made by a background sub-agent while the session is idle, say) there
#: is no provenance to vouch for: such calls are judged as an unknown turn.
NO_TURN: Final = TurnAuthority(Provenance.UNKNOWN)


@dataclass(frozen=True, slots=True)
class PeerClaim:
    """A peer message that opened a turn, as admission submitted it: its goal id (if scoped)
    and the sender's (instance id, session id)."""

    goal_id: str | None
    sender: tuple[str, str]


@dataclass(frozen=True, slots=True)
class TurnFacts:
    """What the opening of the running turn said, for goal decisions (see :mod:`.goal_turns`)."""

    provenance: Provenance
    cancelled: bool
    #: The peer messages that opened it (a peer turn has at least one, unless it was forged).
    claims: frozenset[PeerClaim]
    #: Task handles named by the notifications that opened it.
    handles: frozenset[TaskHandle]


__all__ = [
    "NO_TURN",
    "RANK",
    "PeerClaim",
    "Provenance",
    "TurnAuthority",
    "TurnFacts",
]
