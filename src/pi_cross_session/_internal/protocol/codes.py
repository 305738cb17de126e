"""The whole status vocabulary: receiver answers, message row states, and a sender's own codes.

Four kinds of word share one namespace, because on the wire ``status``, ``code`` and ``state`` are
the same string:

* :class:`Code` — every status or code either side can produce (receiver ``ok`` statuses, receiver
  refusals, message row states, and codes a sender produces locally);
* :class:`SenderState` — the sender's own verdict on an exchange (spec §4.3);
* the sets :data:`RETRYABLE`, :data:`RECEIPT_UNKNOWN`, :data:`OK_RECEIPTS`, :data:`ROW_STATES`;
* :func:`classify` — the sender-side classification of any ending.

Errno names (``ENOENT`` …) are codes too, produced when vetting an endpoint; they are plain strings,
so every function here accepts ``str``.

A receiver's reply words are the one part of this namespace a peer writes. :func:`sender_code`
and :func:`status_answer` read them against the vocabulary, so that nothing but one of our own words
ever becomes a sender's code: a word we do not know is :attr:`Code.UNRECOGNIZED_STATUS` (or an
``invalid_receipt`` where a receipt was due), and the raw word survives only as a diagnostic.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from enum import StrEnum
from typing import Final


class Code(StrEnum):
    """Every status word of the contract, plus the local codes of a sender."""

    # receiver, ok:true
    READY = "ready"
    SUBMITTED = "submitted"
    QUEUED = "queued"
    ACCEPTED = "accepted"
    UNKNOWN = "unknown"
    #: A status-query answer, with ``delivery-receipts-v1`` only: the row is ``submitted`` and the
    #: host confirmed the message entered its conversation (never a receipt of a message frame).
    DELIVERED = "delivered"
    # message row states (status-query answers) that are not also ok statuses above
    EXPIRED = "expired"
    DROPPED = "dropped"
    DROPPED_CANCELLED = "dropped_cancelled"
    DROPPED_SHUTDOWN = "dropped_shutdown"
    DROPPED_USER_RESET = "dropped_user_reset"
    DROPPED_GOAL_REVOKED = "dropped_goal_revoked"
    INJECTION_FAILED = "injection_failed"
    # receiver, ok:false (in the order a message frame is checked)
    INVALID_FRAME = "invalid_frame"
    MESSAGE_TOO_LARGE = "message_too_large"
    AUTHENTICATION_FAILED = "authentication_failed"
    INVALID_MESSAGE = "invalid_message"
    REFUSED = "refused"
    STOPPED = "stopped"
    INVALID_BRIDGE = "invalid_bridge"
    INVALID_GOAL = "invalid_goal"
    UNSUPPORTED = "unsupported"
    BUSY = "busy"
    QUEUE_FULL = "queue_full"
    BUDGET_EXHAUSTED = "budget_exhausted"
    DUPLICATE = "duplicate"
    RATE_LIMITED = "rate_limited"
    GOAL_NOT_AUTHORIZED = "goal_not_authorized"
    NO_HANDLER = "no_handler"
    # sender, local
    INVALID_TARGET = "invalid_target"
    NOT_READY = "not_ready"
    NOT_FOUND = "not_found"
    AMBIGUOUS = "ambiguous"
    UNSAFE_ENDPOINT = "unsafe_endpoint"
    MISSING_ENDPOINT = "missing_endpoint"
    WRONG_ENDPOINT = "wrong_endpoint"
    SEND_FAILED = "send_failed"
    TRANSPORT_ERROR = "transport_error"
    TIMEOUT = "timeout"
    CONNECTION_CLOSED = "connection_closed"
    CANCELLED = "cancelled"
    INVALID_RESPONSE = "invalid_response"
    INVALID_RECEIPT = "invalid_receipt"
    GOAL_REVOKED = "goal_revoked"
    #: A proxy of the remote plane (docs/remote.md) could not hand the frame to NATS at all: this
    #: machine's gateway has no connection to the NATS server. Certainly not delivered, and a
    #: fault on this side, not the receiver's.
    UNREACHABLE = "unreachable"
    #: A proxy handed the frame to NATS and no gateway of the remote machine takes requests from
    #: this machine (NATS's "no responders"): that machine has not trusted this one, or its
    #: gateway stopped or lost NATS within a record's lifetime. Certainly not delivered.
    NOT_LISTENING = "not_listening"
    #: The remote machine's gateway refused the frame because it runs with remote inbound off:
    #: the machine takes no messages from other machines, whatever its sessions accept.
    REMOTE_INBOUND_OFF = "remote_inbound_off"
    #: A proxy's NATS server refused this machine the subject of the remote machine (its
    #: credentials do not allow it): certainly not delivered.
    PERMISSION_DENIED = "permission_denied"
    #: A receiver refused (``ok:false``) with a ``status`` that is no word of the contract. Filed
    #: as a refusal, as spec §4.3 files every code outside the receipt-unknown list; the word
    #: itself is a peer's string and is kept only as an escaped diagnostic.
    UNRECOGNIZED_STATUS = "unrecognized_status"


class SenderState(StrEnum):
    """How a sender files an exchange that did not end in a good receipt."""

    REFUSED = "refused"
    RECEIPT_UNKNOWN = "receipt_unknown"


#: Receipts a sender accepts as "the receiver took the message" (spec §3.7 step 4).
OK_RECEIPTS: Final = frozenset({Code.SUBMITTED, Code.QUEUED, Code.ACCEPTED})

#: Refusals worth an explicit, later retry: they describe the receiver's load, not the message.
RETRYABLE: Final = frozenset({Code.BUSY, Code.QUEUE_FULL, Code.RATE_LIMITED})

#: Endings after which nobody knows whether the receiver admitted the message.
RECEIPT_UNKNOWN: Final = frozenset(
    {
        Code.TIMEOUT,
        Code.CONNECTION_CLOSED,
        Code.CANCELLED,
        Code.TRANSPORT_ERROR,
        Code.INVALID_RESPONSE,
        Code.INVALID_RECEIPT,
    }
)

#: Every state a receiver's message row can hold (answers to a status query, besides ``unknown``).
ROW_STATES: Final = frozenset(
    {
        Code.ACCEPTED,
        Code.QUEUED,
        Code.SUBMITTED,
        Code.EXPIRED,
        Code.DROPPED,
        Code.DROPPED_CANCELLED,
        Code.DROPPED_SHUTDOWN,
        Code.DROPPED_USER_RESET,
        Code.DROPPED_GOAL_REVOKED,
        Code.INJECTION_FAILED,
    }
)

#: Row states from which a message can still move (everything else is final).
PENDING_ROW_STATES: Final = frozenset({Code.ACCEPTED, Code.QUEUED})

#: Row states a message can end in; a row never leaves one of these.
FINAL_ROW_STATES: Final = ROW_STATES - PENDING_ROW_STATES

#: What a status query may answer with ``ok:true``: a row state, ``unknown`` (no row), or
#: ``delivered`` (a submitted row the host confirmed, with ``delivery-receipts-v1``).
STATUS_ANSWERS: Final = ROW_STATES | {Code.UNKNOWN, Code.DELIVERED}

#: Every word of the vocabulary: our codes, and the errno names an endpoint check produces.
VOCABULARY: Final = frozenset(Code) | frozenset(errno.errorcode.values())

#: Remote-plane endings after which the message certainly never reached the other machine:
#: the proxy says so, and people are told "not sent" rather than "refused by" the session.
REMOTE_NOT_SENT: Final = frozenset({Code.UNREACHABLE, Code.NOT_LISTENING, Code.PERMISSION_DENIED})

#: Refusals a receiver may put on the wire in reply to a message or status frame.
RECEIVER_REFUSALS: Final = frozenset(
    {
        Code.INVALID_FRAME,
        Code.MESSAGE_TOO_LARGE,
        Code.AUTHENTICATION_FAILED,
        Code.INVALID_MESSAGE,
        Code.REFUSED,
        Code.STOPPED,
        Code.EXPIRED,
        Code.INVALID_BRIDGE,
        Code.INVALID_GOAL,
        Code.UNSUPPORTED,
        Code.BUSY,
        Code.QUEUE_FULL,
        Code.BUDGET_EXHAUSTED,
        Code.DUPLICATE,
        Code.RATE_LIMITED,
        Code.GOAL_NOT_AUTHORIZED,
        Code.NO_HANDLER,
        Code.INJECTION_FAILED,
    }
)

# -- guidance: short texts for the ``next`` field, ours ---------------------------------------

#: On the wire with ``ok:true``: what a receipt does and does not promise.
NEXT_AFTER_OK: Final = (
    "Admission is not reading or completion; ask this same incarnation for the message status later"
)
#: On the wire and locally, for a retryable refusal.
NEXT_RETRY_LATER: Final = (
    "The receiver is occupied; wait until it is idle, then retry explicitly if still needed"
)
#: On the wire and locally, for a final refusal.
NEXT_INSPECT: Final = (
    "Not retryable as is; check the target, its inbound policy and status, or upgrade an old peer"
)
#: Locally, when the outcome of an exchange is not known.
NEXT_RECEIPT_UNKNOWN: Final = (
    "Outcome unknown; ask this receiver incarnation for the message status, never resend blindly"
)


def is_retryable(code: str) -> bool:
    """True only for the load refusals a caller may retry later, by an explicit decision."""
    return code in RETRYABLE


def is_receipt_unknown(code: str) -> bool:
    """True when the code means "we cannot know whether the receiver admitted the message"."""
    return code in RECEIPT_UNKNOWN


def is_code(word: str) -> bool:
    """True when ``word`` is a word of our vocabulary (a :class:`Code` or an errno name)."""
    return word in VOCABULARY


def sender_code(remote_status: str) -> str:
    """The code a sender files a receiver's refusal under: its ``status`` when that is a word of
    the vocabulary (spec §4.3 uses the remote status as the code), else
    :attr:`Code.UNRECOGNIZED_STATUS`."""
    return remote_status if is_code(remote_status) else Code.UNRECOGNIZED_STATUS


def status_answer(word: str) -> str | None:
    """A status query's ``ok:true`` answer as one of our words, or ``None`` when it is no state
    a message can be in (the caller files that as ``invalid_receipt``)."""
    return word if word in STATUS_ANSWERS else None


def wire_next(*, ok: bool, status: str) -> str:
    """The ``next`` guidance a receiver puts in a response with this ``ok`` and ``status``."""
    if ok:
        return NEXT_AFTER_OK
    return NEXT_RETRY_LATER if is_retryable(status) else NEXT_INSPECT


@dataclass(frozen=True, slots=True)
class Classification:
    """A sender's verdict on an ending: code, state, whether to retry, and what to do next."""

    code: str
    state: SenderState
    retryable: bool
    next: str


def classify(code: str) -> Classification:
    """Classify any non-success ending of an exchange (spec §4.3).

    The code is the receiver's ``status`` for a refusal, or a local code. A receiver's own
    ``code``/``state``/``retryable``/``next`` fields are diagnostics and are never consulted.
    """
    if is_receipt_unknown(code):
        return Classification(code, SenderState.RECEIPT_UNKNOWN, False, NEXT_RECEIPT_UNKNOWN)
    if is_retryable(code):
        return Classification(code, SenderState.REFUSED, True, NEXT_RETRY_LATER)
    return Classification(code, SenderState.REFUSED, False, NEXT_INSPECT)


# -- refusal texts: the ``error`` of a receiver's refusal, ours -------------------------------

#: One short explanation per refusal a receiver writes. A reply is built from its code alone, never
#: from the input that caused it, so nothing a peer sent is ever echoed back.
REFUSAL_TEXTS: Final[dict[str, str]] = {
    Code.INVALID_FRAME: "The frame is not valid UTF-8 JSON of the expected kind",
    Code.MESSAGE_TOO_LARGE: "The frame exceeds 1,048,576 bytes",
    Code.AUTHENTICATION_FAILED: "Authentication failed, or the frame needs an authenticated sender",
    Code.INVALID_MESSAGE: "The message text is blank",
    Code.REFUSED: "This session does not accept messages from other sessions",
    Code.STOPPED: "This session's inbox is closed until its user resumes it",
    Code.EXPIRED: "The message is older than 30 s or dated more than 5 s ahead",
    Code.INVALID_BRIDGE: "The bridge envelope is malformed or expired",
    Code.INVALID_GOAL: "The goal id cannot be used with this message",
    Code.UNSUPPORTED: "This receiver does not handle bridge envelopes",
    Code.BUSY: "The session is busy and cannot safely queue this message; retry once it is idle",
    Code.QUEUE_FULL: "The queue of this session is full; retry once it is idle",
    Code.BUDGET_EXHAUSTED: "This session incarnation has used its whole message budget",
    Code.DUPLICATE: "Already admitted: same message id, or same text within 30 s",
    Code.RATE_LIMITED: "Too many messages from this sender; wait before sending again",
    Code.GOAL_NOT_AUTHORIZED: "This sender is not a member of that goal",
    Code.NO_HANDLER: "No handler claimed this bridge envelope",
    Code.INJECTION_FAILED: "The session could not take the message into its conversation",
    Code.UNREACHABLE: "This machine's gateway is not connected to NATS; the message was not sent",
    Code.NOT_LISTENING: (
        "No gateway of the remote machine takes messages from this machine: it has not trusted "
        "this machine, or its gateway stopped; the message was not sent"
    ),
    Code.REMOTE_INBOUND_OFF: (
        "The remote machine takes no messages from other machines (its gateway runs with remote "
        "inbound off); nothing was delivered"
    ),
    Code.PERMISSION_DENIED: (
        "The NATS deployment does not let this machine send to that machine; the message was not "
        "sent"
    ),
}


def refusal_text(code: str) -> str:
    """The ``error`` text for a refusal ``code`` (a generic one for codes we never write)."""
    return REFUSAL_TEXTS.get(code, "The receiver refused the frame")
