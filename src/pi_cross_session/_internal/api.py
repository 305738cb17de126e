"""The library: list the live sessions, send a message, run an inbox — each in a few typed lines.

Everything here runs on the machinery the command line and the host extension use: the read-only
listing of ``pi-cross-session peers``, the sender identities and the send of ``pi-cross-session
send``, and the headless session of ``pi-cross-session inbox``. ``docs/api.md`` has examples (a
test runs every one of them).

All three are async (anyio, on asyncio or trio) and take ``agent_dir``, the agent dir whose
sessions they meet; by default the one the environment names (``PI_CODING_AGENT_DIR``, else
``~/.pi/agent``), as the host and the command line do.

Every string that comes from another session (a peer's name, cwd, branch; a message's text and
summary) is that session's to choose: escape it for wherever it goes
(:mod:`pi_cross_session._internal.protocol.sanitize` has a function per sink).
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio
import anyio.abc

from pi_cross_session._internal.plugin import cli_identity, outbound
from pi_cross_session._internal.plugin.hosts.headless import HeadlessHost, HostEvent, serve_inbox
from pi_cross_session._internal.plugin.peer_listing import list_live
from pi_cross_session._internal.plugin.render import host_status, sending
from pi_cross_session._internal.plugin.reports import DeliveryOutcome, SendOutcome, SendReport
from pi_cross_session._internal.plugin.runtime import NotReadyError, RuntimeOptions, SessionRuntime
from pi_cross_session._internal.protocol.errors import CrossSessionError
from pi_cross_session._internal.protocol.io import environment
from pi_cross_session._internal.protocol.paths import Locations, locations_for
from pi_cross_session._internal.protocol.registration import PublicPeer
from pi_cross_session._internal.security.admission import Delivery

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Peers:
    """The live sessions, newest first, and whether the listing could see every one."""

    peers: tuple[PublicPeer, ...]
    #: Registrations left unread past the listing's window (a live session may be among them).
    unread: int = 0
    #: Sessions this process could not check (it ran out of file descriptors or memory).
    unchecked: int = 0

    @property
    def complete(self) -> bool:
        """True when every registration was read and every session checked."""
        return not (self.unread or self.unchecked)


@dataclass(frozen=True, slots=True)
class InboxMessage:
    """One message an inbox received: authenticated sender, the text exactly as sent."""

    message_id: str
    #: The sending session, as its registration (checked at the hello) shows it; no git.
    sender: PublicPeer
    text: str
    #: The one-line preview the sender chose (or the text's first line).
    summary: str
    #: The sender's clock when it sent the message, in epoch milliseconds.
    sent_at_ms: int


#: What :func:`run_inbox` calls for each message; a coroutine function is awaited.
OnMessage = Callable[[InboxMessage], Awaitable[None] | None]


def _locations(agent_dir: str | None) -> Locations:
    if agent_dir is None:
        return environment.resolve()
    return locations_for(agent_dir, environment.resolve_uid())


async def list_peers(*, agent_dir: str | None = None, with_git: bool = True) -> Peers:
    """The live sessions, with each one's git worktree, branch and HEAD (unless ``with_git`` is
    false). Creates nothing and takes no sender identity."""
    listing = await list_live(_locations(agent_dir), with_git=with_git)
    return Peers(tuple(listing.peers), listing.unread, listing.unchecked)


async def send(
    target: str,
    text: str,
    *,
    summary: str | None = None,
    wait_s: float = 0.0,
    name: str | None = None,
    agent_dir: str | None = None,
) -> SendReport:
    """Send ``text`` to the one live session ``target`` names and report what is known.

    ``target`` is what ``peers`` shows (``name [ref]``), a unique name, a session id or a
    runtime id (or 6+ of its leading hex digits). The report's ``outcome`` says whether the
    receiver took the message (``submitted``, ``queued``, ``accepted`` — none of them means it
    was read), refused it, or whether nobody knows (``receipt_unknown``: never resend blindly).
    With ``wait_s`` > 0 (at most 30), ``delivery`` also says whether the receiver confirmed,
    within that time, that the message entered its conversation. Nothing is ever retried.

    The message goes out as one of the command line's sender identities (named ``name``, by
    default ``pi-cross-session-cli``), so ``pi-cross-session status`` can ask about it later.
    Raises :class:`CrossSessionError` when no identity could be taken or published (every one
    stayed busy, say); every ending of the send itself is in the report.
    """
    problem = outbound.check_input(target, text, summary)
    if problem is not None:
        return outbound.local_failure(*problem)
    async with cli_identity.holding(
        _locations(agent_dir), name=name, purpose=sending.library_send_purpose(target)
    ) as held:
        report = await outbound.send(held.outbox, target, text, summary=summary, wait_s=wait_s)
        if report.message_written and report.message_id is not None:
            await held.remember(report.message_id)
    return report


async def run_inbox(
    on_message: OnMessage,
    *,
    name: str | None = None,
    cwd: str | None = None,
    accept: bool = True,
    agent_dir: str | None = None,
    task_status: anyio.abc.TaskStatus[PublicPeer] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Run a live session named ``name`` that hands each message it receives to ``on_message``,
    until cancelled.

    Start it in a task group (``await group.start(run_inbox, handle)``) to wait until other
    sessions can see it: the start returns this inbox as they list it. Messages come one at a
    time, as in an agent session: while ``on_message`` runs the session is busy, so senders are
    told ``queued`` and their messages follow, in order, once it returns (a message queued longer
    than 30 s expires). A callback that raises is logged and the inbox goes on. ``accept=False``
    refuses every message (senders hear ``refused``).
    """
    locations = _locations(agent_dir)
    async with anyio.create_task_group() as callbacks:
        # The host's turn ends when the callback returns, not after a fixed time.
        host = HeadlessHost(
            name=name,
            cwd=cwd,
            busy_s=math.inf,
            on_event=lambda event: _hand_over(event, on_message, host, callbacks),
        )
        options = RuntimeOptions(inbound="accept" if accept else "refuse")
        runtime = SessionRuntime(host, locations=locations, options=options)
        await callbacks.start(serve_inbox, host, runtime)
        registration = runtime.registration()
        if registration is None:  # it stopped as soon as it started
            raise NotReadyError(host_status.INBOX_NOT_RUNNING) from runtime.last_error
        task_status.started(PublicPeer.from_registration(registration))
        await runtime.wait_finished()
        callbacks.cancel_scope.cancel()


def _hand_over(
    event: HostEvent,
    on_message: OnMessage,
    host: HeadlessHost,
    callbacks: anyio.abc.TaskGroup,
) -> None:
    """A message entered the (headless) conversation: run the callback as its turn."""
    if event.delivery is None:
        logger.info("inbox notice: %s", event.text)  # already one of our texts
        return
    message = _message(event.delivery)

    async def turn() -> None:
        try:
            result = on_message(message)
            if inspect.isawaitable(result):
                await result
        except Exception:
            logger.exception("the inbox callback failed on message %s", message.message_id)
        finally:
            host.end_turn()

    callbacks.start_soon(turn)


def _message(delivery: Delivery) -> InboxMessage:
    return InboxMessage(
        message_id=delivery.message_id,
        sender=PublicPeer.from_registration(delivery.sender),
        text=delivery.text,
        summary=delivery.summary,
        sent_at_ms=delivery.sent_at,
    )


__all__ = [
    "CrossSessionError",
    "DeliveryOutcome",
    "InboxMessage",
    "Peers",
    "PublicPeer",
    "SendOutcome",
    "SendReport",
    "list_peers",
    "run_inbox",
    "send",
]
