"""How much a goal-scoped grant may hold (docs/security.md "Goal-scoped grants",
docs/spec/goal-grants.md): its objective, its members, the sender's confirmations, the task
evidence and the ended ids it remembers. The goals' own room (the wire's and the receiver's bounds
are in :mod:`pi_cross_session._internal.protocol.limits`)."""

from typing import Final

from pi_cross_session._internal.protocol.limits import MAX_CACHE_ENTRIES

#: Objective of a goal, utf16: the reference's tool schema (``maxLength`` on a JS string).
MAX_GOAL_OBJECTIVE_UNITS: Final = 4096
#: Peers bound to one goal at once, and items in one bind/unbind list (goal-scoped-v1 §1.7); 64
#: is allowed.
MAX_GOAL_PEERS: Final = 64
#: Sender-side ``<receiver instanceId>:<goalId>`` confirmations kept, oldest evicted
#: (goal-scoped-v1 §2.4).
MAX_GOAL_CONFIRMATIONS: Final = 64
#: Task-ownership evidence kept in memory. The reference keeps it unbounded in the journal; we cap
#: the in-memory copy like every other cache and count what is evicted, so a consumer can fail
#: closed once evidence was lost.
MAX_GOAL_EVIDENCE: Final = MAX_CACHE_ENTRIES
#: Ids of ended goals remembered so an id can never be reused for a new grant; same cap.
MAX_ENDED_GOALS: Final = MAX_CACHE_ENTRIES
#: Longest tool call id a goal journal note may carry (host ids are far shorter).
MAX_CALL_ID_CHARS: Final = 512
