"""Fair shares of a gateway's proxy slots between the machines it trusts (docs/remote.md).

A gateway keeps at most ``cap`` proxies. Each trusted machine is guaranteed ``cap // machines``
of them (its share); slots nobody's share needs are anyone's, first come first kept. When the cap
is reached, a machine below its share takes a slot back from the machine furthest above its own
(its newest proxy closes); a machine at or above its share gets no proxy, and its session is
listed as having none because of the cap. So one machine's surplus never evicts another machine's
share, and a machine with many sessions, honest or not, cannot keep a third machine out.

Pure: the caller says how many proxies each machine holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum


class Verdict(Enum):
    """What a new session of a machine gets."""

    #: A free slot: open its proxy.
    OPEN = "open"
    #: The cap is reached but the machine is below its share: close one proxy of ``victim``.
    EVICT = "evict"
    #: The cap is reached and the machine has its share: no proxy (listed as such).
    FULL = "full"


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    victim: str | None = None


@dataclass(frozen=True, slots=True)
class ProxyShares:
    """The cap and the number of machines it is shared between."""

    cap: int
    machines: int

    def __post_init__(self) -> None:
        if self.cap < 0:
            raise ValueError("the cap is never negative")

    @property
    def share(self) -> int:
        """The proxies each trusted machine is guaranteed."""
        return self.cap // max(1, self.machines)

    def decide(self, machine: str, held: Mapping[str, int]) -> Decision:
        """Whether a new session of ``machine`` gets a proxy, given the proxies each machine
        holds now."""
        if sum(held.values()) < self.cap:
            return Decision(Verdict.OPEN)
        if held.get(machine, 0) >= self.share:
            return Decision(Verdict.FULL)
        # The cap is full and this machine is below its share, so some machine is above its own
        # (the shares add up to at most the cap): the one furthest above gives a slot back.
        victim = max(
            (m for m in held if m != machine and held[m] > self.share),
            key=lambda m: (held[m], m),
            default=None,
        )
        if victim is None:  # pragma: no cover - impossible while the shares fit in the cap
            return Decision(Verdict.FULL)
        return Decision(Verdict.EVICT, victim)
