"""What sends and status checks come to, as data: no texts here, no I/O.

:mod:`.outbound` fills a :class:`SendReport`, the runtime fills :class:`PeerChecks` and
:class:`GoalView`, and :mod:`.render` (the model's and the user's words) and the command line's
``cli/words`` turn them into texts and JSON. Keeping the data apart from the words is what lets
``outbound``, ``render`` and ``runtime`` import one another in one direction only.

The words a report carries are enums whose values are the words scripts read in ``--json`` and in
tool details (``submitted``, ``receipt_unknown``, ``not_confirmed`` …), so typing them changed no
byte of output.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Final

from pi_cross_session._internal.protocol.codes import (
    FINAL_ROW_STATES,
    OK_RECEIPTS,
    Code,
    SenderState,
)
from pi_cross_session._internal.protocol.registration import PublicPeer

if TYPE_CHECKING:  # annotations only: a send's report needs none of them (start-up time)
    from pi_cross_session._internal.security.auth import AuthDiagnostics
    from pi_cross_session._internal.security.goals import GoalEnd, GoalStatus


class SendOutcome(StrEnum):
    """How a send ended, in the one word its details call ``state``.

    A receipt names how the receiver took the message; without one, the sender files the ending
    as ``refused`` (certainly not admitted) or ``receipt_unknown`` (nobody knows; spec §4.3).
    """

    SUBMITTED = Code.SUBMITTED.value
    QUEUED = Code.QUEUED.value
    ACCEPTED = Code.ACCEPTED.value
    REFUSED = SenderState.REFUSED.value
    RECEIPT_UNKNOWN = SenderState.RECEIPT_UNKNOWN.value

    @property
    def admitted(self) -> bool:
        """True for a receipt: the receiver took the message (which is not "read")."""
        return self.value in OK_RECEIPTS


class DeliveryOutcome(StrEnum):
    """What a bounded wait for a delivery receipt learnt (``SendReport.delivery``)."""

    #: The receiving session confirmed the message entered its conversation.
    DELIVERED = Code.DELIVERED.value
    #: Still only submitted (or queued) when the wait ended.
    NOT_CONFIRMED = "not_confirmed"
    #: The receiver does not advertise delivery receipts: the receipt is all that is known.
    UNCONFIRMABLE = "unconfirmable"
    #: The receiver no longer knows the message (it may have restarted).
    UNKNOWN = Code.UNKNOWN.value
    #: The receiver answered with a word that is no state of the contract.
    INVALID_RECEIPT = Code.INVALID_RECEIPT.value
    # The message ended in a final row state other than ``submitted``: it will not be delivered.
    EXPIRED = Code.EXPIRED.value
    DROPPED = Code.DROPPED.value
    DROPPED_CANCELLED = Code.DROPPED_CANCELLED.value
    DROPPED_SHUTDOWN = Code.DROPPED_SHUTDOWN.value
    DROPPED_USER_RESET = Code.DROPPED_USER_RESET.value
    DROPPED_GOAL_REVOKED = Code.DROPPED_GOAL_REVOKED.value
    INJECTION_FAILED = Code.INJECTION_FAILED.value

    @property
    def ended_undelivered(self) -> bool:
        """True when the message reached a final state other than delivery."""
        return self.value in ENDED_UNDELIVERED


#: The final row states a waited-for message can end in instead of being delivered.
ENDED_UNDELIVERED: Final = frozenset(FINAL_ROW_STATES - {Code.SUBMITTED})


@dataclass(frozen=True, slots=True)
class SendReport:
    """What a send (or a status question) ended as, in the terms the tool result and the CLI
    print.

    ``status`` is a word of our vocabulary
    (:class:`~pi_cross_session._internal.protocol.codes.Code`, or an errno name from vetting a
    socket), never a receiver's unknown word. For a send that got a receipt it is the receipt
    (``submitted``, ``queued``, ``accepted``); for a status question that was answered it is the
    message's state at the receiver.
    """

    ok: bool
    status: str
    message_id: str | None
    target: PublicPeer | None
    #: How the sender files an ending without a good receipt; ``None`` when ``ok``.
    state: SenderState | None = None
    retryable: bool = False
    next: str | None = None
    detail: str | None = None
    message_written: bool = False
    #: After a bounded wait for a delivery receipt, what it learnt; ``None`` when the sender did
    #: not wait (or the send got no receipt).
    delivery: DeliveryOutcome | None = None

    @property
    def outcome(self) -> SendOutcome | None:
        """How a send ended (see :class:`SendOutcome`); ``None`` for an answered status
        question, whose ``status`` is a message state rather than a receipt."""
        if not self.ok:
            return SendOutcome(self.state or SenderState.REFUSED)
        if self.status in OK_RECEIPTS:
            return SendOutcome(self.status)
        return None


@dataclass(frozen=True, slots=True)
class GoalView:
    """The goal part of a status display."""

    status: GoalStatus
    last_end: GoalEnd | None
    confirmations: int
    evidence: int


@dataclass(frozen=True, slots=True)
class Pressure:
    """What the session did to keep serving under load: a snapshot for the status.

    All zero (and ``descriptor_cap`` ``None``) for a session nobody pressed.
    """

    #: Failed ``accept`` calls by errno name; none ended the endpoint.
    accept_failures: Mapping[str, int] = field(default_factory=dict)
    last_accept_failure: str | None = None
    last_accept_failure_age_s: float | None = None
    #: Connections allowed while file descriptors are short (``None``: not short).
    descriptor_cap: int | None = None
    #: Connections closed to free descriptors (part of ``PeerChecks.shed``).
    shed_for_descriptors: int = 0
    #: Second frames not complete in time after ``ready`` (a trickle), cut.
    request_deadline_cuts: int = 0
    #: Frames refused unparsed because their JSON would cost more than any valid frame's.
    costly_frames: int = 0
    #: Reads delayed because the connecting process had used its byte budget.
    throttled_reads: int = 0
    #: Registration writes that failed for lack of resources and were retried, by errno name.
    registration_retries: Mapping[str, int] = field(default_factory=dict)
    last_registration_retry_age_s: float | None = None

    @property
    def pressed(self) -> bool:
        """True when anything here happened at all."""
        return bool(
            self.accept_failures
            or self.descriptor_cap is not None
            or self.request_deadline_cuts
            or self.costly_frames
            or self.throttled_reads
            or self.registration_retries
        )


@dataclass(frozen=True, slots=True)
class PeerChecks:
    """Who the receiver turned away before admission: by kernel credentials, by hello; and what
    it did to keep serving under load."""

    #: How peer credentials are read here (``SO_PEERCRED``, ``LOCAL_PEERCRED``, ``unavailable``).
    source: str
    auth: AuthDiagnostics
    foreign_uid_closed: int
    credentials_unreadable: int
    unverified: int
    #: Connections closed (without a byte) for a newcomer, at capacity or out of descriptors.
    shed: int = 0
    pressure: Pressure = field(default_factory=Pressure)


__all__ = [
    "ENDED_UNDELIVERED",
    "DeliveryOutcome",
    "GoalView",
    "PeerChecks",
    "Pressure",
    "SendOutcome",
    "SendReport",
]
