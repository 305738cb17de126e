"""What ``send`` and ``status`` share: waiting for an identity out loud, and finding the target.

Both hold one of the command line's sender identities while they run
(:mod:`pi_cross_session._internal.plugin.cli_identity`); when every identity they may use is busy
they say on stderr, at once, who holds what, then show the wait on a terminal. Both resolve the
target against a listing made as that identity, and explain a target that names no single session in
command-line words (one candidate per line when several match).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final, cast

from pi_cross_session._internal.cli import exits, words
from pi_cross_session._internal.cli.console import Console
from pi_cross_session._internal.plugin.capped import capped_sessions
from pi_cross_session._internal.plugin.cli_identity import Held, Holder, SkippedSlot
from pi_cross_session._internal.plugin.outbound import (
    Outbox,
    find_target,
    list_for_send,
    local_failure,
    unchecked_failure,
)
from pi_cross_session._internal.plugin.reports import SendReport
from pi_cross_session._internal.protocol.addressing import AddressError, resolve_target
from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.io.discovery import Listing
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import PublicPeer
from pi_cross_session._internal.protocol.sanitize import line

#: The ``status`` (in ``--json``) of a send or a status question in an agent dir that does not
#: exist: nothing was created, asked or sent.
NO_AGENT_DIR: Final = "no_agent_dir"


def missing_agent_dir(locations: Locations) -> SendReport | None:
    """A report saying the agent dir does not exist (or is not a dir), or ``None`` when it is
    there. ``send`` and ``status`` never create it: a mistyped ``PI_CODING_AGENT_DIR`` would
    otherwise become a new, empty network, and ``doctor`` could no longer point at the typo."""
    agent_dir = locations.agent_dir
    if os.path.isdir(agent_dir):
        return None
    if os.path.lexists(agent_dir):
        return local_failure(NO_AGENT_DIR, words.agent_dir_not_a_dir(agent_dir))
    return local_failure(NO_AGENT_DIR, words.agent_dir_missing(agent_dir))


class IdentityWaitNotes:
    """Says on stderr who holds the identities an invocation waits for, and how long it waits."""

    def __init__(self, console: Console) -> None:
        self._console = console

    def started(self, holders: Sequence[tuple[int, Holder | None]], timeout_s: float) -> None:
        """Once, at once: every identity wanted is in use, by these processes."""
        self._console.problem(words.identity_wait(holders, timeout_s))

    def still_waiting(self, elapsed_s: float) -> None:
        """About once a second (a terminal only)."""
        self._console.progress(words.identity_wait_progress(elapsed_s))

    def ended(self, slot: int, elapsed_s: float) -> None:
        """The wait is over: say which identity this invocation got."""
        self._console.problem(words.identity_wait_over(slot, elapsed_s))

    def skipped(self, skipped: SkippedSlot) -> None:
        """Once per slot: its lock file is unsafe, so another identity is used."""
        self._console.problem(words.identity_skipped(skipped))


@dataclass(frozen=True, slots=True)
class Resolved:
    """The one live session a target names, and the listing it was found in."""

    peer: PublicPeer
    listing: Listing

    def outbox(self, outbox: Outbox) -> Outbox:
        """``outbox``, listing from this same listing (the target is not looked up twice)."""
        listing = self.listing

        async def same_listing() -> Listing:
            return listing

        return replace(outbox, list_peers=same_listing)


@dataclass(frozen=True, slots=True)
class AddressFailure:
    """A target that names no single live session, explained for a person."""

    report: SendReport
    #: Already sanitised; may span lines (one candidate per line).
    text: str
    candidates: tuple[PublicPeer, ...] = ()

    @property
    def exit_code(self) -> int:
        """4 when no single session matches, 1 for a target that can never match (itself)."""
        if self.report.status in (Code.NOT_FOUND, Code.AMBIGUOUS):
            return exits.EXIT_NO_TARGET
        return exits.EXIT_LOCAL


async def resolve(held: Held, target: str) -> Resolved | AddressFailure:
    """List the live sessions as ``held`` and find the one ``target`` names."""
    listing = await list_for_send(held.outbox)
    if isinstance(listing, SendReport):  # out of descriptors: nothing was sent
        return AddressFailure(listing, line(listing.detail or listing.status))
    me = held.outbox.me
    try:
        peer = find_target(held.outbox, listing, target)
    except AddressError as exc:
        candidates: tuple[PublicPeer, ...] = ()
        if exc.code == Code.NOT_FOUND:
            unchecked = unchecked_failure(listing)
            if unchecked is not None:
                return AddressFailure(unchecked, line(unchecked.detail or unchecked.status))
            text = words.not_found(target, listing.peers, unread=listing.unread)
            capped = capped_sessions(held.outbox.exchanger.locations)
            if capped is not None:
                from pi_cross_session._internal.plugin.render.listings import (
                    capped_hint,  # only when it applies
                )

                text = f"{text} {capped_hint(target, capped)}"
        elif exc.code == Code.AMBIGUOUS:
            candidates = tuple(cast(Sequence[PublicPeer], exc.candidates))
            text = words.ambiguous(target, candidates)
        elif _is_me(target, me):
            text = words.to_itself(target)
        else:
            text = line(str(exc))
        return AddressFailure(local_failure(exc.code, text), text, candidates)
    return Resolved(peer, listing)


def _is_me(target: str, me: PublicPeer | None) -> bool:
    if me is None:
        return False
    try:
        resolve_target(target, [me], self_instance_id=None)
    except AddressError:
        return False
    return True
