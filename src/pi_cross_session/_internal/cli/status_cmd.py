"""``pi-cross-session status TARGET MESSAGE_ID``: what became of a message sent from here.

A receiver keeps status rows per sender, so the question must come from the identity that sent
the message: the one that remembers the id (:func:`cli_identity.senders_of`). Only that identity
is waited for if it is busy (a ``send --wait`` may still be following the message). A message no
identity remembers (sent before the pool existed, or forgotten) is asked about by each stored
identity in turn until one gets an answer other than ``unknown``.

The exit code is the state (:mod:`.exits`): 0 delivered, 5 submitted, 6 queued, 2 expired or
dropped, 3 unknown (or the question could not be asked), 4 no such target, 1 a local error (an
agent dir that does not exist, which it never creates; a MESSAGE_ID no send of ours can have
printed is a usage error of the parser, also 1).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import anyio

from pi_cross_session._internal.cli import exits, words
from pi_cross_session._internal.cli.console import Console
from pi_cross_session._internal.cli.sender import (
    NO_AGENT_DIR,
    AddressFailure,
    IdentityWaitNotes,
    missing_agent_dir,
    resolve,
)
from pi_cross_session._internal.plugin import cli_identity, outbound
from pi_cross_session._internal.plugin.reports import SendReport
from pi_cross_session._internal.protocol import paths
from pi_cross_session._internal.protocol.capabilities import can_report_delivery
from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.io import environment
from pi_cross_session._internal.protocol.io.exchange import ExchangeError
from pi_cross_session._internal.protocol.registration import PublicPeer


@dataclass(frozen=True, slots=True)
class Answer:
    """A receiver's answer about one message."""

    peer: PublicPeer
    state: str
    diagnostic: str | None
    confirmable: bool


def run(args: argparse.Namespace, console: Console) -> int:
    """Ask, print, and exit with the state's code."""
    return anyio.run(_status, args, console)


async def _status(args: argparse.Namespace, console: Console) -> int:
    locations = environment.resolve()
    missing = missing_agent_dir(locations)
    if missing is not None:
        return _print(console, args, missing)
    recorded = await anyio.to_thread.run_sync(cli_identity.senders_of, locations, args.message_id)
    if recorded:
        slots = recorded
    else:
        known = await anyio.to_thread.run_sync(cli_identity.known_instance_ids, locations)
        slots = sorted(known.values()) or [0]
    outcome: Answer | SendReport | AddressFailure | None = None
    unusable: cli_identity.IdentityUnusableError | None = None
    for slot in slots:
        try:
            outcome = await _ask(args, console, locations, slot)
        except cli_identity.IdentityUnusableError as exc:
            if recorded:
                raise  # only the identity that sent it can learn what became of it
            unusable = exc  # an unsafe lock file costs that identity, not the question
            continue
        if not isinstance(outcome, Answer) or outcome.state != Code.UNKNOWN:
            break
    if outcome is None:
        assert unusable is not None
        raise unusable
    return _print(console, args, outcome)


async def _ask(
    args: argparse.Namespace, console: Console, locations: paths.Locations, slot: int
) -> Answer | SendReport | AddressFailure:
    async with cli_identity.holding(
        locations,
        [slot],
        purpose=words.identity_purpose("status", args.message_id),
        reporter=IdentityWaitNotes(console),
    ) as held:
        resolved = await resolve(held, args.target)
        if isinstance(resolved, AddressFailure):
            return resolved
        peer = resolved.peer
        registration = resolved.listing.registrations[peer.instance_id]
        try:
            receipt = await held.outbox.exchanger.query_status(
                registration, sender=held.outbox.sender, message_id=args.message_id
            )
        except ExchangeError as exc:
            return outbound.exchange_failure(exc, args.message_id, peer)
    reply = receipt.reply
    return Answer(
        peer=peer,
        state=receipt.status,
        diagnostic=None if reply is None else reply.error,
        confirmable=can_report_delivery(receipt.peer_capabilities),
    )


def _print(
    console: Console, args: argparse.Namespace, outcome: Answer | SendReport | AddressFailure
) -> int:
    if isinstance(outcome, Answer):
        if args.json:
            console.json(
                words.status_json(
                    args.message_id,
                    outcome.peer,
                    outcome.state,
                    outcome.diagnostic,
                    confirmable=outcome.confirmable,
                )
            )
        else:
            console.result(
                words.status_answer(
                    args.message_id,
                    outcome.peer,
                    outcome.state,
                    outcome.diagnostic,
                    confirmable=outcome.confirmable,
                )
            )
        return exits.for_state(outcome.state)
    failure = outcome if isinstance(outcome, AddressFailure) else None
    report = outcome.report if isinstance(outcome, AddressFailure) else outcome
    next_text = words.next_step(report.status)
    if args.json:
        data = words.send_json(
            report,
            next_text=next_text,
            candidates=() if failure is None else failure.candidates,
        )
        data["messageId"] = args.message_id
        data.pop("messageWritten")
        data.pop("receipt")
        console.json(data)
    else:
        trusted = None if failure is None else failure.text
        console.problem(words.status_not_asked(report, next_text, trusted_detail=trusted))
    if failure is not None:
        return failure.exit_code
    if report.status == NO_AGENT_DIR:
        return exits.EXIT_LOCAL  # nothing there to ask as, or about
    return exits.EXIT_UNKNOWN  # the question went unanswered: what became of it is not known
