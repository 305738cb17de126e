"""Sending one message, from a target string to an honest report.

Shared by the session runtime (the model's ``send_pi_message``) and the command line's ``send``:

1. check the caller's input (target, text, summary) — ``invalid_target`` / ``invalid_message``;
2. list the live peers and resolve the target among them — ``not_found`` / ``ambiguous`` /
   ``invalid_target`` for a self-send;
3. build the frame and check its size *before* spending anything — ``message_too_large``;
4. reserve the attempt against the lifetime budget, if the sender has one — ``budget_exhausted``;
5. exchange, under the caller's cancel scope, and classify the ending;
6. optionally wait (bounded) for a delivery receipt, asking the receiver's status until it says
   ``delivered`` — only of a receiver that advertises ``delivery-receipts-v1``;
7. settle a goal-scoped reservation: a ``submitted``/``queued`` receipt refunds the unit and
   confirms the (receiver, goal) pair; any other ending keeps the charge and forgets the pair
   (goal-scoped-v1 §2.4, :class:`~pi_cross_session._internal.security.goals.GoalConfirmations`).

A goal-scoped send (``goal_id``) is never downgraded: a malformed goal id or a bridge envelope
with a goal id is ``invalid_goal`` before anything happens, and a receiver that did not advertise
goal scope ends it as ``unsupported`` before the message frame is written.

Nothing is retried. The report says whether the message frame was ever written, so "certainly not
delivered" is never confused with "unknown".

A receiver's words are a peer's strings. The report carries only words of our vocabulary as its
``status``, ``state``, ``next`` and ``delivery`` (a refusal with an unknown ``status`` is
``unrecognized_status``; an ``ok`` answer with an unknown word is ``invalid_receipt``), and its
``detail`` holds the receiver's texts only as
:func:`~pi_cross_session._internal.protocol.sanitize.line` made them: escaped, folded to one line,
cut.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import anyio

from pi_cross_session._internal.plugin.capped import capped_sessions
from pi_cross_session._internal.plugin.render import listings, remote_plane
from pi_cross_session._internal.plugin.render.sending import (
    NEXT_SHORT_OF_RESOURCES,
    listing_short,
    target_unchecked,
)
from pi_cross_session._internal.plugin.reports import ENDED_UNDELIVERED, DeliveryOutcome, SendReport
from pi_cross_session._internal.protocol import sanitize
from pi_cross_session._internal.protocol.addressing import AddressError, resolve_target
from pi_cross_session._internal.protocol.bridge import BRIDGE_PREFIX
from pi_cross_session._internal.protocol.capabilities import can_report_delivery
from pi_cross_session._internal.protocol.codes import Code, classify, sender_code, status_answer
from pi_cross_session._internal.protocol.errors import CrossSessionError, FrameTooLargeError
from pi_cross_session._internal.protocol.frames import (
    ID_RE,
    WIRE_VERSION,
    Message,
    Sender,
    frame_to_bytes,
)
from pi_cross_session._internal.protocol.io.discovery import Listing
from pi_cross_session._internal.protocol.io.exchange import (
    ExchangeError,
    Exchanger,
    Progress,
    Receipt,
)
from pi_cross_session._internal.protocol.limits import (
    DELIVERY_POLL_S,
    DISPLAY_DIAGNOSTIC_CODE_POINTS,
    MAX_DELIVERY_WAIT_S,
    MAX_FRAME_BYTES,
    MAX_STATUS_UNITS,
    MAX_SUMMARY_CODE_POINTS,
    MAX_TARGET_UNITS,
    MAX_TEXT_UNITS,
    MAX_TOOL_SUMMARY_UNITS,
)
from pi_cross_session._internal.protocol.pressure import shortage
from pi_cross_session._internal.protocol.registration import PublicPeer, Registration
from pi_cross_session._internal.protocol.text import (
    clean_line,
    is_blank,
    is_well_formed,
    utf16_length,
)

if TYPE_CHECKING:  # annotations only: a command-line send has neither budget nor goals
    from pi_cross_session._internal.plugin.journaling import SessionJournal
    from pi_cross_session._internal.security.goals import GoalConfirmations, Reservation
    from pi_cross_session._internal.security.limits import LifetimeBudget


@dataclass(frozen=True, slots=True)
class Outbox:
    """Who sends, and with what: identity, exchanger, budget (if any), clock, live listing."""

    sender: Sender
    exchanger: Exchanger
    list_peers: Callable[[], Awaitable[Listing]]
    wall_ms: Callable[[], int]
    budget: LifetimeBudget | None = None
    #: Our own public view, so that a self-send is refused as such rather than as "not found".
    me: PublicPeer | None = None
    #: Receiver/goal pairs confirmed by scoped receipts (sessions with a budget only).
    confirmations: GoalConfirmations | None = None
    #: Where the sender's side of each send is journaled (``None``: nowhere).
    journal: SessionJournal | None = None


def summary_for(summary: str | None, text: str) -> str:
    """The wire summary: the caller's, else the text's first line, folded to 200 code points,
    else ``message`` — as the reference builds it, so both show the same preview."""
    source = summary if summary is not None and not is_blank(summary) else text.split("\n", 1)[0]
    return clean_line(source, MAX_SUMMARY_CODE_POINTS) or "message"


def cut_summary_length(summary: str | None) -> int | None:
    """How long ``summary`` is once folded to one line (in code points), when that is more than
    a message carries: the tool takes up to 400 UTF-16 units (spec §6.2), the wire keeps the
    first 200 code points of the folded line, so a longer one is sent cut. ``None`` when nothing
    is cut (or there is no summary)."""
    if summary is None:
        return None
    folded = len(clean_line(summary, len(summary)))
    return folded if folded > MAX_SUMMARY_CODE_POINTS else None


def new_message(text: str, summary: str | None, *, sent_at: int, goal_id: str | None) -> Message:
    """The message frame a send of ``text`` writes: new ids (UUIDs) and the wire summary
    (:func:`summary_for`)."""
    return Message(
        v=WIRE_VERSION,
        type="message",
        request_id=str(uuid.uuid4()),
        message_id=str(uuid.uuid4()),
        text=text,
        summary=summary_for(summary, text),
        sent_at=sent_at,
        goal_id=goal_id,
    )


def check_input(
    target: str, text: str, summary: str | None, goal_id: str | None = None
) -> tuple[str, str] | None:
    """The first problem with a caller's input as ``(code, detail)``, or ``None``."""
    if not is_well_formed(target) or is_blank(target) or utf16_length(target) > MAX_TARGET_UNITS:
        return (Code.INVALID_TARGET, f"the target must be 1 to {MAX_TARGET_UNITS} characters")
    if not is_well_formed(text):
        return (Code.INVALID_MESSAGE, "the message is not well-formed Unicode")
    if is_blank(text):
        return (Code.INVALID_MESSAGE, "the message is blank")
    if utf16_length(text) > MAX_TEXT_UNITS:
        return (Code.INVALID_MESSAGE, f"the message exceeds {MAX_TEXT_UNITS:,} characters")
    if summary is not None and (
        not is_well_formed(summary)
        or is_blank(summary)
        or utf16_length(summary) > MAX_TOOL_SUMMARY_UNITS
    ):
        return (
            Code.INVALID_MESSAGE,
            f"the summary must be 1 to {MAX_TOOL_SUMMARY_UNITS} characters",
        )
    if goal_id is not None:
        if not isinstance(goal_id, str) or ID_RE.fullmatch(goal_id) is None:
            return (Code.INVALID_GOAL, "a goal id is 1 to 128 of A-Z, a-z, 0-9, _ and -")
        if text.startswith(BRIDGE_PREFIX):
            return (Code.INVALID_GOAL, "a bridge envelope cannot be scoped to a goal")
    return None


def local_failure(
    code: str, detail: str, *, target: PublicPeer | None = None, next_step: str | None = None
) -> SendReport:
    """A report for an ending decided before anything was written to a peer."""
    verdict = classify(code)
    return SendReport(
        ok=False,
        status=code,
        message_id=None,
        target=target,
        state=verdict.state,
        retryable=verdict.retryable,
        next=next_step or verdict.next,
        detail=detail,
        message_written=False,
    )


def _peer_text(text: str, limit: int = DISPLAY_DIAGNOSTIC_CODE_POINTS) -> str:
    """A receiver's text as a diagnostic: one escaped line, cut."""
    return sanitize.line(text, limit)


def exchange_failure(exc: ExchangeError, message_id: str, peer: PublicPeer) -> SendReport:
    """A report for an exchange that did not end in a good receipt.

    The code is the receiver's ``status`` only when it is a word of our vocabulary (else
    ``unrecognized_status``, with the raw word escaped in the detail); every text of the
    receiver's, and every detail of the exchange (which may quote a reply), is escaped.
    """
    code = sender_code(exc.code)
    verdict = classify(code)
    detail = _peer_text(exc.detail)
    if code != exc.code:
        detail += f" with a status outside the protocol: {_peer_text(exc.code, MAX_STATUS_UNITS)}"
    if exc.remote_error is not None:
        detail += f": {_peer_text(exc.remote_error)}"
    short = not exc.message_written and shortage(exc) is not None
    # A remote-plane ending says what the other machine's user (or this one's) can do about it.
    remote = remote_plane.remote_next(code, remote_plane.remote_machine(peer))
    return SendReport(
        ok=False,
        status=code,
        message_id=message_id,
        target=peer,
        state=verdict.state,
        retryable=verdict.retryable,
        next=NEXT_SHORT_OF_RESOURCES if short else remote or verdict.next,
        detail=detail,
        message_written=exc.message_written,
    )


async def list_for_send(outbox: Outbox) -> Listing | SendReport:
    """The listing a send resolves its target in, or a failure report when the listing itself
    failed for lack of a kernel resource (``transport_error``, nothing written)."""
    try:
        return await outbox.list_peers()
    except CrossSessionError as exc:
        short = shortage(exc)
        if short is None:
            raise
        return local_failure(
            Code.TRANSPORT_ERROR, listing_short(short), next_step=NEXT_SHORT_OF_RESOURCES
        )


def unchecked_failure(listing: Listing) -> SendReport | None:
    """A target not found while the listing could not check every session is no ``not_found``:
    the target may be among those sessions. ``None`` when every session was checked."""
    if not listing.unchecked:
        return None
    return local_failure(
        Code.TRANSPORT_ERROR,
        target_unchecked(listing.unchecked),
        next_step=NEXT_SHORT_OF_RESOURCES,
    )


def find_target(outbox: Outbox, listing: Listing, target: str) -> PublicPeer:
    """The one live peer (or this session itself) ``target`` names in ``listing``; raises
    :class:`AddressError` otherwise."""
    own = [outbox.me] if outbox.me is not None else []
    self_id = outbox.me.instance_id if outbox.me is not None else outbox.sender.instance_id
    return resolve_target(target, [*listing.peers, *own], self_instance_id=self_id)


async def resolve(outbox: Outbox, target: str) -> tuple[PublicPeer, Listing] | SendReport:
    """The live peer ``target`` names, with the listing it came from, or a failure report.

    Out of file descriptors (or buffers, or memory), a listing that failed, or that could not
    check every session, ends in ``transport_error`` with nothing written, never ``not_found``.
    """
    listing = await list_for_send(outbox)
    if isinstance(listing, SendReport):
        return listing
    try:
        peer = find_target(outbox, listing, target)
    except AddressError as exc:
        unchecked = unchecked_failure(listing) if exc.code == Code.NOT_FOUND else None
        if unchecked is not None:
            return unchecked
        notes = [str(exc)]
        if exc.code == Code.NOT_FOUND:
            # The target may be among the registrations the listing never read, or a remote
            # session the gateway keeps no proxy for: say so.
            notes.append(listings.unread_line(listing.unread) or "")
            capped = await anyio.to_thread.run_sync(capped_sessions, outbox.exchanger.locations)
            if capped is not None:
                notes.append(listings.capped_hint(target, capped))
        return local_failure(exc.code, " ".join(note for note in notes if note))
    return peer, listing


async def send(
    outbox: Outbox,
    target: str,
    text: str,
    *,
    summary: str | None = None,
    goal_id: str | None = None,
    scope: anyio.CancelScope | None = None,
    wait_s: float = 0.0,
) -> SendReport:
    """Send one message (scoped to ``goal_id``, if given) and report exactly what is known
    about its fate; with ``wait_s`` > 0 (at most 30), also wait that long for the receiver to
    confirm delivery (see :attr:`SendReport.delivery`)."""
    problem = check_input(target, text, summary, goal_id)
    if problem is not None:
        return local_failure(*problem)
    if _certainly_exhausted(outbox, goal_id):
        # Refused before any connection, even the listing's probes (goal-scoped-v1 §2.4).
        return local_failure(Code.BUDGET_EXHAUSTED, _EXHAUSTED)
    resolved = await resolve(outbox, target)
    if isinstance(resolved, SendReport):
        return resolved
    peer, listing = resolved
    message = new_message(text, summary, sent_at=outbox.wall_ms(), goal_id=goal_id)
    return await _send_message(outbox, peer, listing, message, goal_id, scope, wait_s)


def _ended(outbox: Outbox, report: SendReport, message: Message) -> SendReport:
    """Journal how the send of ``message`` ended (if the sender keeps a journal); the report."""
    if outbox.journal is not None:
        outbox.journal.send_ended(report, message)
    return report


async def _send_message(
    outbox: Outbox,
    peer: PublicPeer,
    listing: Listing,
    message: Message,
    goal_id: str | None,
    scope: anyio.CancelScope | None,
    wait_s: float,
) -> SendReport:
    try:
        frame_to_bytes(message, max_frame_bytes=MAX_FRAME_BYTES)
    except FrameTooLargeError as exc:
        return _ended(outbox, local_failure(Code.MESSAGE_TOO_LARGE, str(exc), target=peer), message)
    reservation = _reserve(outbox, peer, goal_id)
    if isinstance(reservation, SendReport):
        return _ended(outbox, reservation, message)
    # One cancel scope covers the exchange and the wait for delivery: the caller (the runtime at
    # shutdown) can stop either, and what was known by then is still reported.
    progress = Progress()
    report: SendReport | None = None
    with scope or anyio.CancelScope():
        report, receipt = await _exchange(outbox, peer, listing, message, progress)
        _ended(outbox, report, message)
        if receipt is not None and wait_s > 0:
            # What stands if the wait is cut short.
            report = replace(report, delivery=DeliveryOutcome.NOT_CONFIRMED)
            registration = listing.registrations[peer.instance_id]
            delivery = await wait_for_delivery(outbox, registration, receipt, message, wait_s)
            report = replace(report, delivery=delivery)
            if outbox.journal is not None:
                outbox.journal.learnt(report, message.message_id, delivery.value, message.summary)
    if report is None:  # cancelled before the exchange ended
        report = _ended(outbox, _cancelled(message, peer, progress), message)
    if reservation is not None and outbox.confirmations is not None:
        refund = outbox.confirmations.settle(reservation, report.status if report.ok else "")
        if refund and outbox.budget is not None:
            outbox.budget.refund()
    return report


async def wait_for_delivery(
    outbox: Outbox,
    registration: Registration,
    receipt: Receipt,
    message: Message,
    wait_s: float,
) -> DeliveryOutcome:
    """Ask the receiver about ``message`` until it is delivered, can no longer be, or the wait
    (at most 30 s) is over; returns the delivery outcome. Never resends anything."""
    if not can_report_delivery(receipt.peer_capabilities):
        return DeliveryOutcome.UNCONFIRMABLE
    with anyio.move_on_after(min(wait_s, MAX_DELIVERY_WAIT_S)):
        while True:
            await anyio.sleep(DELIVERY_POLL_S)
            try:
                answer = await outbox.exchanger.query_status(
                    registration, sender=outbox.sender, message_id=message.message_id
                )
            except ExchangeError:
                continue  # a failed question says nothing about the message; ask again
            status = status_answer(answer.status)
            if status is None:
                # No state of the contract: nothing can be learned from this receiver.
                return DeliveryOutcome.INVALID_RECEIPT
            if status in (Code.DELIVERED, Code.UNKNOWN) or status in ENDED_UNDELIVERED:
                # Delivered, forgotten, or ended another way: it will never be delivered now.
                return DeliveryOutcome(status)
    return DeliveryOutcome.NOT_CONFIRMED


_EXHAUSTED = "this session incarnation has used its whole message budget"


def _certainly_exhausted(outbox: Outbox, goal_id: str | None) -> bool:
    """The budget is spent and no confirmed scoped pair could let this send through."""
    budget = outbox.budget
    if budget is None or budget.can_spend():
        return False
    confirmations = outbox.confirmations
    return goal_id is None or confirmations is None or not confirmations.has_goal(goal_id)


def _reserve(
    outbox: Outbox, peer: PublicPeer, goal_id: str | None
) -> Reservation | SendReport | None:
    """Claim the budget for one attempt: a reservation, a refusal, or ``None`` (no budget)."""
    budget = outbox.budget
    if budget is None:
        return None
    exhausted = _EXHAUSTED
    confirmations = outbox.confirmations
    if confirmations is None:
        if not budget.can_spend():
            return local_failure(Code.BUDGET_EXHAUSTED, exhausted, target=peer)
        budget.spend()
        return None
    reservation = confirmations.reserve(peer.instance_id, goal_id, budget.remaining)
    if isinstance(reservation, Code):
        if reservation is Code.BUDGET_EXHAUSTED and goal_id is not None:
            exhausted += (
                ", and no earlier scoped receipt from this session confirmed this goal "
                "(or one such send is already in flight)"
            )
        detail = exhausted if reservation is Code.BUDGET_EXHAUSTED else "invalid goal scope"
        return local_failure(reservation, detail, target=peer)
    if reservation.charged:
        budget.spend()
    return reservation


async def _exchange(
    outbox: Outbox,
    peer: PublicPeer,
    listing: Listing,
    message: Message,
    progress: Progress,
) -> tuple[SendReport, Receipt | None]:
    try:
        receipt = await outbox.exchanger.send(
            listing.registrations[peer.instance_id],
            sender=outbox.sender,
            message=message,
            progress=progress,
        )
    except ExchangeError as exc:
        return exchange_failure(exc, message.message_id, peer), None
    report = SendReport(
        ok=True,
        status=receipt.status,
        message_id=message.message_id,
        target=peer,
        message_written=True,
    )
    return report, receipt


def _cancelled(message: Message, peer: PublicPeer, progress: Progress) -> SendReport:
    verdict = classify(Code.CANCELLED)
    return SendReport(
        ok=False,
        status=Code.CANCELLED,
        message_id=message.message_id,
        target=peer,
        state=verdict.state,
        retryable=False,
        next=verdict.next,
        detail="the sender stopped while the message was in flight",
        message_written=progress.message_written,
    )


async def query_status(outbox: Outbox, target: str, message_id: str) -> SendReport:
    """Ask a peer what became of a message this sender identity sent it (free for both)."""
    resolved = await resolve(outbox, target)
    if isinstance(resolved, SendReport):
        return resolved
    peer, listing = resolved
    try:
        receipt = await outbox.exchanger.query_status(
            listing.registrations[peer.instance_id], sender=outbox.sender, message_id=message_id
        )
    except ExchangeError as exc:
        return exchange_failure(exc, message_id, peer)
    reply = receipt.reply
    diagnostic = None if reply is None or reply.error is None else _peer_text(reply.error)
    status = status_answer(receipt.status)
    if status is None:
        # ``ok`` with a word that is no message state: as unattributable as a bad receipt.
        verdict = classify(Code.INVALID_RECEIPT)
        detail = "the receiver answered with a state outside the protocol: " + _peer_text(
            receipt.status, MAX_STATUS_UNITS
        )
        return SendReport(
            ok=False,
            status=Code.INVALID_RECEIPT,
            message_id=message_id,
            target=peer,
            state=verdict.state,
            retryable=verdict.retryable,
            next=verdict.next,
            detail=detail if diagnostic is None else f"{detail} ({diagnostic})",
        )
    return SendReport(
        ok=True,
        status=status,
        message_id=message_id,
        target=peer,
        detail=diagnostic,
    )
