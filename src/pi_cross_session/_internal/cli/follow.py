"""When ``send --wait S`` stops following a message: a pure rule, with the time passed in.

The wait and the receiver's queue share one clock, so the rule is stated against the queue's time
to live (``QUEUE_TTL_S``, 30 s) and the two cannot race:

* the wait ends as soon as the message reached a state it never leaves: ``delivered``, ``unknown``
  (the receiver forgot it), ``expired``, any ``dropped*``, ``injection_failed``; or ``submitted``
  at a receiver that cannot confirm delivery (it will never say more);
* otherwise it ends ``S`` seconds after the receipt, unless the message is still queued (or being
  admitted) then: a queued message is followed until it leaves the queue, which it does by the
  TTL, so at most ``QUEUE_TTL_S + QUEUE_FATE_MARGIN_S`` after the receipt;
* that bound also ends the wait whatever the state (queries that keep failing, say).

The result is the last state the receiver actually reported, never a guess: a message still
queued at the end is reported ``queued``, not "submitted, not yet confirmed".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from pi_cross_session._internal.cli.settings import QUEUE_FATE_MARGIN_S
from pi_cross_session._internal.protocol.codes import FINAL_ROW_STATES, PENDING_ROW_STATES, Code
from pi_cross_session._internal.protocol.limits import QUEUE_TTL_S

#: States after which nothing more will be learnt: every final row state except ``submitted``
#: (which may still become ``delivered``), ``delivered`` itself, and ``unknown``.
_FINAL: Final = (FINAL_ROW_STATES - {Code.SUBMITTED}) | {Code.DELIVERED, Code.UNKNOWN}
#: States from which a message still moves on its own.
_PENDING: Final = PENDING_ROW_STATES


@dataclass(frozen=True, slots=True)
class FollowResult:
    """What following a message learnt."""

    #: Every state seen, in order, starting with the receipt's; each change once.
    states: tuple[str, ...]
    #: Whether the receiver can confirm delivery (``None``: no status answer came).
    confirmable: bool | None
    elapsed_s: float
    #: Status questions that failed (they say nothing about the message).
    failed_queries: int

    @property
    def last_state(self) -> str:
        """The last state the receiver reported (or the receipt, if it reported none)."""
        return self.states[-1]


class Follow:
    """Decides, from the receiver's answers and the time, when a wait is over."""

    def __init__(
        self,
        receipt: str,
        *,
        started: float,
        wait_s: float,
        ttl_s: float = QUEUE_TTL_S,
        margin_s: float = QUEUE_FATE_MARGIN_S,
    ) -> None:
        self._states = [receipt]
        self._started = started
        self._wait_s = wait_s
        self._bound_s = max(wait_s, ttl_s + margin_s)
        self._confirmable: bool | None = None
        self._failed = 0

    @property
    def last_state(self) -> str:
        """The last state known."""
        return self._states[-1]

    def observe(self, state: str, *, confirmable: bool) -> bool:
        """Take one status answer; True when the state changed."""
        self._confirmable = confirmable
        if state == self._states[-1]:
            return False
        self._states.append(state)
        return True

    def failed_query(self) -> None:
        """A status question failed; the state stays what it was."""
        self._failed += 1

    def finished(self, now: float) -> bool:
        """True once following longer cannot be worth it (see the module's rule)."""
        state = self.last_state
        if state in _FINAL:
            return True
        if state == Code.SUBMITTED and self._confirmable is False:
            return True
        elapsed = now - self._started
        if elapsed >= self._bound_s:
            return True
        return elapsed >= self._wait_s and state not in _PENDING

    def remaining(self, now: float) -> float:
        """Seconds until the wait ends at the latest."""
        limit = self._bound_s if self.last_state in _PENDING else self._wait_s
        return max(0.0, self._started + limit - now)

    @property
    def started(self) -> float:
        """When the receipt came (the clock the rule is given)."""
        return self._started

    @property
    def bound_s(self) -> float:
        """The longest the wait can last, from the receipt."""
        return self._bound_s

    def result(self, now: float) -> FollowResult:
        """What was learnt, as of ``now``."""
        return FollowResult(
            states=tuple(self._states),
            confirmable=self._confirmable,
            elapsed_s=max(0.0, now - self._started),
            failed_queries=self._failed,
        )
