"""Every text the command line prints, in the command line's own words.

The model's texts (:mod:`pi_cross_session._internal.plugin.render`) speak of tools (``list_pi``) and
tell a model what to do; a person at a shell needs commands (``pi-cross-session peers``) and the
plain facts. So the command line keeps its words here, and shares only the wire's vocabulary.

Every string a peer controls (names, refs are ours, cwds, session ids, branch names, a receiver's
diagnostics and refusal texts, the target a user typed) goes through
:func:`~pi_cross_session._internal.protocol.sanitize.line` before it is placed in a line here;
message bodies go through :func:`~pi_cross_session._internal.protocol.sanitize.block` and are
indented by the caller.
"""

from __future__ import annotations

import time
import unicodedata
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from pi_cross_session._internal.protocol.codes import (
    REMOTE_NOT_SENT,
    SenderState,
    is_receipt_unknown,
)
from pi_cross_session._internal.protocol.limits import (
    DISPLAY_CWD_CODE_POINTS,
    DISPLAY_DIAGNOSTIC_CODE_POINTS,
    DISPLAY_SESSION_ID_CODE_POINTS,
    MAX_NAME_CODE_POINTS,
    QUEUE_TTL_S,
    RATE_CAPACITY,
    RATE_REFILL_PER_S,
    TEXT_DEDUP_WINDOW_S,
)
from pi_cross_session._internal.protocol.sanitize import line

if TYPE_CHECKING:  # only for annotations: these modules are heavy to import
    from pi_cross_session._internal.cli.follow import FollowResult
    from pi_cross_session._internal.plugin.cli_identity import Holder, SkippedSlot
    from pi_cross_session._internal.plugin.reports import SendReport
    from pi_cross_session._internal.protocol.registration import PublicPeer

PROG: Final = "pi-cross-session"
NO_PEERS: Final = "No other live sessions."
#: Live sessions named in a not-found message, at most.
_NAMED_AT_MOST: Final = 10
#: Characters of a git HEAD shown.
_HEAD_CHARS: Final = 8


def address(name: str, ref: str) -> str:
    """How to name a session on the command line: ``name [ref]``."""
    return f"{line(name, MAX_NAME_CODE_POINTS)} [{line(ref, 32)}]"


def peer_address(peer: PublicPeer) -> str:
    """``name [ref]`` of a listed peer."""
    return address(peer.name, peer.ref)


def _quoted(text: str) -> str:
    return '"' + line(text, DISPLAY_DIAGNOSTIC_CODE_POINTS) + '"'


def _sentence(text: str) -> str:
    """``text`` as one sentence: no trailing period doubled."""
    text = text.rstrip()
    return text if text.endswith((".", "!", "?", ":")) else text + "."


# -- peers -----------------------------------------------------------------------------------------


def _width(text: str) -> int:
    """Columns a terminal gives ``text``: wide (CJK, emoji) characters take two, combining
    marks none."""
    width = 0
    for char in text:
        if unicodedata.combining(char):
            continue
        width += 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
    return width


def _git_cell(peer: PublicPeer) -> str:
    git = peer.git
    if git is None:
        return "-"
    branch = "detached" if git.branch is None else line(git.branch, MAX_NAME_CODE_POINTS)
    cell = f"{branch}@{line(git.head, 64)[:_HEAD_CHARS]}"
    if git.worktree != peer.cwd:
        cell += f" ({line(git.worktree, DISPLAY_CWD_CODE_POINTS)})"
    return cell


PEER_COLUMNS: Final = ("ADDRESS", "STATUS", "INBOUND", "SESSION", "GIT", "CWD")


def peer_table(peers: Sequence[PublicPeer], *, unchecked: bool = False) -> str:
    """The live sessions as aligned columns, a header first; or a line saying there is none
    (an empty header instead when some sessions could not be checked: "none" would be untrue)."""
    if not peers:
        return "" if unchecked else NO_PEERS
    rows = [PEER_COLUMNS] + [
        (
            peer_address(peer),
            line(peer.status, 16),
            line(peer.inbound, 16),
            line(peer.id, DISPLAY_SESSION_ID_CODE_POINTS),
            _git_cell(peer),
            line(peer.cwd, DISPLAY_CWD_CODE_POINTS) or "-",
        )
        for peer in peers
    ]
    widths = [max(_width(row[column]) for row in rows) for column in range(len(PEER_COLUMNS))]
    lines = []
    for row in rows:
        cells = [
            cell + " " * (widths[column] - _width(cell)) for column, cell in enumerate(row[:-1])
        ]
        lines.append("  ".join([*cells, row[-1]]))
    return "\n".join(lines)


# -- waiting for an identity -------------------------------------------------------------------


def _holder(slot: int, holder: Holder | None, now_ms: int) -> str:
    if holder is None or holder.pid is None:
        return f"  identity {slot}: in use (its holder left no note)"
    what = line(holder.purpose, 120) or "a command"
    since = ""
    if holder.since_ms is not None:
        since = f", for {max(0, now_ms - holder.since_ms) / 1000:.0f} s"
    return f"  identity {slot}: pid {holder.pid}, {what}{since}"


def identity_wait(
    holders: Sequence[tuple[int, Holder | None]], timeout_s: float, *, now_ms: int | None = None
) -> str:
    """Said once, at once, when an invocation must wait for a sender identity: who holds what."""
    now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    if len(holders) == 1:
        head = f"{PROG}: waiting (up to {timeout_s:g} s) for the identity this needs:"
    else:
        head = (
            f"{PROG}: all {len(holders)} command-line identities are in use; waiting "
            f"(up to {timeout_s:g} s) for one:"
        )
    return "\n".join([head, *(_holder(slot, holder, now) for slot, holder in holders)])


def identity_wait_progress(elapsed_s: float) -> str:
    """The progress line while waiting for an identity (terminal only)."""
    return f"{PROG}: waiting for an identity… {elapsed_s:.0f} s"


def identity_wait_over(slot: int, elapsed_s: float) -> str:
    """The wait for an identity is over."""
    return f"{PROG}: got identity {slot} after {elapsed_s:.1f} s"


def identity_skipped(skipped: SkippedSlot) -> str:
    """A slot of the pool is left alone, once per invocation: why, and what to do."""
    from pi_cross_session._internal.plugin.render.sending import UNSAFE_LOCK_FIX

    return (
        f"{PROG}: warning: skipped command-line identity {skipped.slot}: {skipped.reason()}; "
        f"{UNSAFE_LOCK_FIX}"
    )


def identity_purpose(command: str, target: str) -> str:
    """What a holder writes in its lock's note: the command and its target."""
    return f"{command} to {line(target, 80)}" if command == "send" else f"{command} at {target}"


# -- the agent dir -------------------------------------------------------------------------------


def agent_dir_missing(agent_dir: str) -> str:
    """``send`` or ``status`` in an agent dir that does not exist (it is not created)."""
    return (
        f"the agent dir {line(agent_dir)} does not exist, so no session has run with it: check "
        f"its spelling (PI_CODING_AGENT_DIR; '{PROG} paths' shows the dir in effect, "
        f"'{PROG} doctor' checks it)"
    )


def agent_dir_not_a_dir(agent_dir: str) -> str:
    """``send`` or ``status`` with an agent dir that is a file (or something else)."""
    return (
        f"the agent dir {line(agent_dir)} is not a directory: check PI_CODING_AGENT_DIR "
        f"('{PROG} doctor' says more)"
    )


# -- input -------------------------------------------------------------------------------------


def summary_too_long(units: int, limit: int) -> str:
    """A ``--summary`` longer than the command line (and the tool) takes."""
    return (
        f"the summary is {units:,} UTF-16 code units long, {units - limit:,} over the {limit} "
        "--summary takes; shorten it"
    )


def summary_cut(code_points: int, kept: int) -> str:
    """A ``--summary`` longer than the receiver keeps: it goes out cut, and the user is told."""
    return (
        f"{PROG}: note: the summary has {code_points} characters once its whitespace is folded, "
        f"and a receiver keeps {kept}: it is sent cut to its first {kept}"
    )


def text_too_long(units: int, limit: int) -> str:
    """A message text longer than one message may be."""
    return (
        f"the message is {units:,} UTF-16 code units long, {units - limit:,} over the "
        f"{limit:,} one message may hold; send less"
    )


def frame_too_large(size: int, limit: int) -> str:
    """A message whose frame (its text JSON-escaped, with the other fields) would exceed the
    frame's bound: said before anything is sent."""
    return (
        f"the message's frame would be {size:,} bytes, {size - limit:,} over the {limit:,} "
        "bytes (1 MiB) one frame may hold: its text travels JSON-escaped, so quotes, "
        "backslashes and control characters count twice or more"
    )


def input_too_large(source: str, limit: int, size: int | None = None) -> str:
    """A message file or stdin larger than one frame (``size``: the file's, when known)."""
    if size is not None:
        return (
            f"{source} is {size:,} bytes, {size - limit:,} over the {limit:,} bytes (1 MiB) one "
            "frame may hold, and a message travels in one frame; send less"
        )
    return (
        f"{source} holds more than {limit:,} bytes, the most one frame may hold (1 MiB), and a "
        "message travels in one frame; send less"
    )


def input_not_utf8(source: str) -> str:
    """A message file or stdin that is not UTF-8."""
    return f"{source} is not UTF-8 text"


def input_unreadable(source: str, reason: str) -> str:
    """A message file that cannot be read."""
    return f"cannot read {source}: {line(reason, DISPLAY_DIAGNOSTIC_CODE_POINTS)}"


INPUT_CONFLICT: Final = "give the message once: as MESSAGE, as - for stdin, or with --file"
INPUT_MISSING: Final = "no message: give MESSAGE, - to read stdin, or --file PATH"
READING_STDIN: Final = f"{PROG}: reading the message from stdin; end it with Ctrl-D"


# -- addressing --------------------------------------------------------------------------------


def not_found(target: str, live: Sequence[PublicPeer], *, unread: int = 0) -> str:
    """No live session matches the target (the list of those that do exist comes along, and
    the registrations the listing left unread, among which the target may be)."""
    head = f"no live session matches {_quoted(target)}"
    if not live:
        text = f"{head}; there are no other live sessions."
    else:
        named = [peer_address(peer) for peer in live[:_NAMED_AT_MOST]]
        more = f" and {len(live) - _NAMED_AT_MOST} more" if len(live) > _NAMED_AT_MOST else ""
        text = f"{head}. Live sessions: {', '.join(named)}{more}."
    if unread <= 0:
        return text
    from pi_cross_session._internal.plugin.render.listings import (
        unread_line,  # heavy; only when there is one
    )

    return f"{text} {unread_line(unread)}"


def ambiguous(target: str, candidates: Sequence[PublicPeer]) -> str:
    """Several sessions match: one candidate per line, each with its ref and cwd."""
    lines = [
        f"{_quoted(target)} matches {len(candidates)} live sessions; "
        "name one as 'name [ref]' (or by its ref alone):"
    ]
    for peer in sorted(candidates, key=lambda p: (p.name, p.ref)):
        cwd = line(peer.cwd, DISPLAY_CWD_CODE_POINTS) or "(no cwd)"
        lines.append(f"  {peer_address(peer)}  {cwd}")
    return "\n".join(lines)


def to_itself(target: str) -> str:
    """The target names this command line's own identity."""
    return f"{_quoted(target)} is this command line itself; it cannot send a message to itself."


# -- what to do next, per code -----------------------------------------------------------------

_NEXT: Final[Mapping[str, str]] = {
    "not_found": f"see the live sessions with: {PROG} peers",
    "ambiguous": f"see the live sessions with: {PROG} peers",
    "busy": "it is between turns; retry explicitly once it is idle (nothing is retried for you)",
    "queue_full": "its queue is full; retry explicitly later (nothing is retried for you)",
    "rate_limited": (
        f"wait before sending again: each sender may send {RATE_CAPACITY} at once, then one "
        f"every {1 / RATE_REFILL_PER_S:g} s"
    ),
    "duplicate": (
        f"send a different text, or wait {TEXT_DEDUP_WINDOW_S:g} s to send the same one again"
    ),
    "refused": "that session refuses messages from other sessions (its inbound setting)",
    # The code alone also means an abort or a shutdown there: only the receiver's own words (in
    # the detail) may say its inbox is closed.
    "stopped": "that session takes no messages for now; its own words above say why",
    "budget_exhausted": "that session admits no more messages until it restarts",
    "message_too_large": "send less: one message must fit a 1 MiB frame",
    "unsupported": "that session runs an older version of the extension; upgrade it",
    "expired": "the message was too old when it arrived; check both machines' clocks",
    "authentication_failed": f"run {PROG} doctor",
    "unsafe_endpoint": f"run {PROG} doctor",
    "missing_endpoint": f"run {PROG} doctor",
    "wrong_endpoint": f"run {PROG} doctor",
    "identity_busy": "try again once the other commands are done",
}


def next_step(
    code: str,
    *,
    target: str | None = None,
    message_id: str | None = None,
    machine: str | None = None,
) -> str | None:
    """The command-line advice for an ending, or ``None`` when there is nothing useful to add;
    ``machine`` is the remote machine of a proxy target (:func:`remote_machine`)."""
    remote = None if machine is None else remote_next(code, machine)
    if remote is not None:
        return remote
    if is_receipt_unknown(code) and message_id is not None:
        where = "TARGET" if target is None else f"'{target}'"
        return (
            f"ask what became of it with: {PROG} status {where} {message_id} "
            "(never resend blindly: it may already have arrived)"
        )
    return _NEXT.get(code)


# -- send --------------------------------------------------------------------------------------

RECEIPT_MEANINGS: Final[Mapping[str, str]] = {
    "submitted": "handed to that session's conversation (not yet read or acted on)",
    "queued": (
        f"it waits in that session's queue until its current turn ends (at most {QUEUE_TTL_S:g} s)"
    ),
    "accepted": "an in-process handler of that session took it",
}

#: What each state means at the end of a wait, or in a status answer.
STATE_MEANINGS: Final[Mapping[str, str]] = {
    "delivered": (
        "the receiving session confirmed it entered its conversation (not a sign it was read "
        "or acted on)"
    ),
    "submitted": "handed to the receiver's conversation (not a sign it was read or acted on)",
    "queued": "waiting in the receiver's queue for its current turn to end",
    "accepted": "admitted, being handed over",
    "expired": "it waited too long in the receiver's queue; it will not be delivered",
    "dropped": "dropped before it reached the conversation; it will not be delivered",
    "dropped_cancelled": (
        "dropped because the receiver's turn was aborted; it will not be delivered"
    ),
    "dropped_shutdown": "dropped because the receiving session shut down",
    "dropped_user_reset": "dropped when the receiver's user reopened its inbox",
    "dropped_goal_revoked": "dropped because its goal ended",
    "injection_failed": "the receiving session could not take it into its conversation",
    "unknown": (
        "that session has no record of it. This does not mean it was not delivered: a "
        "restarted session forgets everything, and a message it never admitted is unknown too"
    ),
}


def _target_of(report: SendReport) -> str | None:
    return None if report.target is None else peer_address(report.target)


def _followed_meaning(follow: FollowResult, *, interrupted: bool = False) -> str:
    state = follow.last_state
    if state == "submitted":
        if follow.confirmable is False:
            return "handed to its conversation; that session cannot confirm delivery"
        if interrupted:
            return "handed to its conversation; delivery not confirmed yet"
        return "handed to its conversation; delivery was not confirmed within the wait"
    if state == "queued":
        if interrupted:
            return "still in that session's queue"
        return "still in that session's queue when the wait ended"
    return STATE_MEANINGS.get(state, "as that session reported it")


def _followed(report: SendReport, follow: FollowResult) -> str:
    """How the state came to be known: the receipt, then what following it saw."""
    path = " → ".join(line(state, 32) for state in follow.states)
    text = f"Receipt: {line(report.status, 32)}; followed {follow.elapsed_s:.1f} s: {path}."
    if follow.failed_queries and follow.confirmable is None:
        text += " (No status question was answered.)"
    return text


def sent(report: SendReport, follow: FollowResult | None = None) -> str:
    """A good receipt, or, once the message was followed, its latest state first (the receipt
    and the states seen after it)."""
    where = _target_of(report) or "the target"
    if follow is None:
        status = line(report.status, 32)
        meaning = RECEIPT_MEANINGS.get(report.status, "the receiver took it")
        return f"Message {status} to {where}: {meaning}. messageId={report.message_id}"
    state = line(follow.last_state, 32)
    return (
        f"Message to {where}: {state} — {_followed_meaning(follow)}. {_followed(report, follow)} "
        f"messageId={report.message_id}"
    )


def interrupted(report: SendReport | None, follow: FollowResult | None) -> str:
    """Ctrl-C during a send: what is known by then. Nothing sent, or the message id, its last
    known state and how to ask about it later."""
    if report is None or not report.message_written:
        return f"{PROG}: interrupted (Ctrl-C); nothing was sent"
    where = _target_of(report) or "the target"
    ask = _ask_later(report)
    if follow is not None:
        state = line(follow.last_state, 32)
        meaning = _followed_meaning(follow, interrupted=True)
        known = f"last known state {state} — {meaning}. {_followed(report, follow)}"
    elif report.ok:
        state = line(report.status, 32)
        known = f"receipt {state} — {RECEIPT_MEANINGS.get(report.status, 'the receiver took it')}."
    else:
        known = "no receipt came, so it may or may not have arrived."
    return (
        f"Interrupted (Ctrl-C) after the message was sent to {where}: {known} Ask what became "
        f"of it with: {ask} messageId={report.message_id}"
    )


def _ask_later(report: SendReport) -> str:
    """The ``status`` command that asks about a sent message."""
    target = "TARGET" if report.target is None else f"'{peer_address(report.target)}'"
    return f"{PROG} status {target} {report.message_id}"


def interrupted_next(report: SendReport) -> str:
    """``next`` in the JSON of an interrupted send whose message was written."""
    return f"ask what became of it with: {_ask_later(report)}"


def _detail(report: SendReport, trusted: str | None) -> str:
    # A receiver's refusal text is peer-controlled: one sanitised line, always. Only a detail we
    # wrote ourselves (``trusted``, already sanitised: ambiguous candidates) may span lines.
    if trusted is not None:
        return trusted
    return _sentence(line(report.detail or report.status, DISPLAY_DIAGNOSTIC_CODE_POINTS * 4))


#: Why a message was not sent, in words, for the endings that left nothing written (a receiver
#: that never read it, or a socket that failed its check); the code stays in ``--json``.
NOT_SENT_WHY: Final[Mapping[str, str]] = {
    "transport_error": "could not talk to it",
    "timeout": "it did not answer in time, so the message was never written",
    "connection_closed": "it closed the connection before the message could be written",
    "cancelled": "stopped before the message was written",
    "invalid_response": "it answered outside the protocol before the message was written",
    "unsafe_endpoint": "its socket failed the safety check",
    "missing_endpoint": "its socket is gone (the session may have just stopped)",
    "wrong_endpoint": "its socket is not where its registration says",
}


def _not_sent(report: SendReport, detail: str, where: str | None) -> str:
    to = f" to {where}" if where else ""
    why = NOT_SENT_WHY.get(report.status)
    if why is None:
        return f"Message not sent{to}: {detail}"
    return f"Message not sent{to}: {why} ({detail.rstrip('.')})."


def not_delivered(
    report: SendReport, next_text: str | None, *, trusted_detail: str | None = None
) -> str:
    """A send that did not end in a good receipt: not sent, refused, or outcome unknown.

    A message that never left says so, and why, in words (its code is for ``--json``); a
    receiver's answer keeps its word (``busy``, ``timeout``…), which the receipts table explains.
    A detail of several lines (the candidates of an ambiguous target) ends its line, so what
    follows starts a line of its own."""
    code = line(report.status, 64)
    detail = _detail(report, trusted_detail)
    where = _target_of(report)
    machine = remote_machine(report.target)
    meaning = remote_meaning(report.status, machine)
    not_sent = report.status in REMOTE_NOT_SENT
    if meaning is not None:
        # A remote-plane ending is said of what caused it (this machine, or the other one),
        # in our words from its code alone, never of the session it was meant for.
        head = (
            f"Message not sent to {where or 'the target'} ({code}): {meaning}."
            if not_sent
            else f"Message refused by {machine} ({code}): {meaning}; nothing was delivered to "
            f"{where or 'the target'}."
        )
    elif not report.message_written:
        head = _not_sent(report, detail, where)
    elif report.state == SenderState.RECEIPT_UNKNOWN:
        head = (
            f"Message to {where or 'the target'}: outcome unknown ({code}): {detail} "
            "It may or may not have arrived."
        )
    else:
        head = f"Message refused by {where or 'the target'} ({code}): {detail}"
    parts = [head]
    if next_text:
        parts.append(f"Next: {next_text}.")
    if report.message_written and report.message_id and not (meaning and not_sent):
        parts.append(f"messageId={report.message_id}")
    return _joined(parts)


def _joined(parts: Sequence[str]) -> str:
    """Sentences after one another; after a part of several lines, on a line of their own."""
    text = parts[0]
    for part in parts[1:]:
        text += ("\n" if "\n" in text else " ") + part
    return text


def gateway_not_connected(machine: str, problem: str, retry_s: float) -> str:
    """The gateway could not connect to NATS at start: why (already escaped, with its fix), and
    when it tries again."""
    return f"{PROG} gateway {line(machine, 32)}: {problem}; retrying in {retry_s:g} s"


def remote_machine(peer: PublicPeer | None) -> str:
    """The machine a proxy target stands for, by its name (``bob@buildbox``), escaped; "the
    remote machine" when its name names none."""
    if peer is None:
        return "the remote machine"
    # Imported here: only a remote ending needs the remote plane's names.
    from pi_cross_session._internal.protocol.remote.envelope import machine_of_name

    machine = machine_of_name(peer.name)
    return "the remote machine" if machine is None else line(machine, 32)


def remote_meaning(code: str, machine: str) -> str | None:
    """What a remote-plane ending means, at a shell (``None`` for other codes)."""
    if code == "unreachable":
        return (
            "this machine's gateway is not connected to NATS (the server is down or cannot be "
            "reached from here), so nothing left this machine"
        )
    if code == "not_listening":
        return (
            f"{machine} has not trusted this machine: no gateway there takes its messages (or, "
            f"if it does, {machine}'s gateway stopped or lost NATS moments ago)"
        )
    if code == "remote_inbound_off":
        return (
            f"{machine} does not take messages from other machines: its gateway runs with "
            "remote inbound off"
        )
    if code == "permission_denied":
        return (
            f"the NATS deployment does not let this machine send to {machine} (its credentials "
            "lack that right), so nothing left this machine"
        )
    return None


def remote_next(code: str, machine: str) -> str | None:
    """What to do about a remote-plane ending, at a shell (``None`` for other codes)."""
    if code == "unreachable":
        return (
            "check that the NATS server is up and reachable from here; the gateway reconnects "
            "by itself (its output says when); then send again (nothing was sent)"
        )
    if code == "not_listening":
        return (
            f"on {machine}, trust this machine: {PROG} remote trust <this machine's card> "
            f"({PROG} remote show prints the card here), or join both machines to one deployment"
        )
    if code == "remote_inbound_off":
        return f"on {machine}, its user can turn it on: {PROG} remote inbound on"
    if code == "permission_denied":
        return (
            f"the deployment's administrator can grant it: {PROG} remote deploy --machine CARD "
            "--push URL"
        )
    return None


def send_json(
    report: SendReport,
    *,
    next_text: str | None,
    follow: FollowResult | None = None,
    candidates: Sequence[PublicPeer] = (),
    interrupted: bool = False,
    summary_cut: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """The ``send --json`` object: no ``error`` unless it failed, no field that contradicts
    another (docs/user-guide.md says what each means).

    * ``status`` — the receipt's word, or the code of an ending without one (as always);
    * ``receipt`` — what the receiver answered when it took the message (``null``: it took
      nothing, or no answer came);
    * ``state`` — the latest state known: the receipt; after ``--wait``, the last state the
      receiver reported (``lastState`` says the same, for scripts that read it); without a
      receipt, how the send ended (``refused`` or ``receipt_unknown``).
    """
    if follow is not None:
        state = follow.last_state
    elif report.ok:
        state = report.status
    else:
        state = report.state or report.status
    data: dict[str, Any] = {
        "ok": report.ok,
        "status": report.status,
        "receipt": report.status if report.ok else None,
        "state": state,
        "retryable": report.retryable,
        "next": next_text,
        "messageId": report.message_id,
        "target": None if report.target is None else report.target.to_dict(),
        "messageWritten": report.message_written,
    }
    if not report.ok:
        data["error"] = report.detail or report.status
    if candidates:
        data["candidates"] = [peer.to_dict() for peer in candidates]
    if follow is not None:
        data["lastState"] = follow.last_state
        data["followed"] = list(follow.states)
        data["deliveryConfirmable"] = follow.confirmable
        data["followedSeconds"] = round(follow.elapsed_s, 1)
    if summary_cut is not None:
        data["summaryCut"] = {"codePoints": summary_cut[0], "kept": summary_cut[1]}
    if interrupted:
        data["interrupted"] = True
    return data


# -- following a message (send --wait), on a terminal --------------------------------------------


def follow_milestone(state: str, elapsed_s: float) -> str:
    """One state change while following a message."""
    return f"{PROG}: {line(state, 32)} after {elapsed_s:.1f} s"


def follow_progress(state: str, elapsed_s: float, remaining_s: float) -> str:
    """The progress line while following (replaced every poll)."""
    return (
        f"{PROG}: {line(state, 32)}; following {elapsed_s:.0f} s (at most {remaining_s:.0f} s "
        "more)…"
    )


# -- status ------------------------------------------------------------------------------------


def status_answer(
    message_id: str, peer: PublicPeer, state: str, diagnostic: str | None, *, confirmable: bool
) -> str:
    """What a session said about one message."""
    meaning = STATE_MEANINGS.get(state, "as that session reported it")
    if state == "submitted" and not confirmable:
        meaning += "; that session cannot confirm delivery"
    text = f"Message {message_id} at {peer_address(peer)}: {line(state, 32)} — {meaning}"
    if diagnostic:
        text += f" (its note: {line(diagnostic, DISPLAY_DIAGNOSTIC_CODE_POINTS)})"
    return text


def status_json(
    message_id: str, peer: PublicPeer, state: str, diagnostic: str | None, *, confirmable: bool
) -> dict[str, Any]:
    """The ``status --json`` object of an answered question (``diagnostic``, not ``error``: the
    receiver's note on a row is not a failure)."""
    data: dict[str, Any] = {
        "ok": True,
        "status": state,
        "state": state,  # the same word under the name a send's JSON gives the latest state
        "messageId": message_id,
        "target": peer.to_dict(),
        "deliveryConfirmable": confirmable,
    }
    if diagnostic:
        data["diagnostic"] = diagnostic
    return data


def status_not_asked(
    report: SendReport, next_text: str | None, *, trusted_detail: str | None = None
) -> str:
    """A status question that got no answer (no such target, or the exchange failed), in
    words: the code is for ``--json``."""
    detail = _detail(report, trusted_detail)
    where = _target_of(report)
    parts = [f"Could not ask{' ' + where if where else ''}: {detail}"]
    if next_text:
        parts.append(f"Next: {next_text}.")
    return _joined(parts)


def message_id_invalid(value: str) -> str:
    """``status`` with a MESSAGE_ID that no send of the command line can have printed."""
    return (
        f"{_quoted(value)} is not a message id: give the messageId a send printed (a UUID such "
        "as 0b7c6f1e-3d2a-4c1b-9e8f-5a6b7c8d9e0f)"
    )


# -- inbox -------------------------------------------------------------------------------------


def inbox_ready(name: str, ref: str, session_id: str, pid: int, *, refusing: bool) -> str:
    """The inbox's first line: who it is, and whether it takes messages at all."""
    policy = "; refusing every message (--refuse)" if refusing else ""
    return (
        f"inbox {address(name, ref)} listening as session "
        f"{line(session_id, DISPLAY_SESSION_ID_CODE_POINTS)} (pid {pid}){policy}; Ctrl-C to stop"
    )


def inbox_inbound(refusing: bool) -> str:
    """The inbound line of the inbox's status."""
    if refusing:
        return "Inbound: refuse — every message is refused (--refuse)"
    return "Inbound: accept"


def inbox_stopped(error: str | None) -> str:
    """The inbox's last line."""
    if error is None:
        return "stopped; files removed"
    return f"stopped after an error: {line(error, DISPLAY_DIAGNOSTIC_CODE_POINTS)}"


# -- mcp -------------------------------------------------------------------------------------------

MCP_EXTRA_MISSING: Final = (
    f"{PROG}: the MCP server needs the official MCP SDK: pip install 'pi-cross-session[mcp]'"
)


def mcp_invalid_inbound(value: str) -> str:
    """``PI_CROSS_SESSION_INBOUND`` holds something else than accept or refuse: fail closed."""
    return (
        f"PI_CROSS_SESSION_INBOUND is {line(repr(value), 60)}, neither accept nor refuse: "
        "inbound messages are refused"
    )


def mcp_stopped(error: str | None) -> str:
    """The server's last line on stderr when its inbox failed."""
    return f"{PROG} mcp: {inbox_stopped(error)}"


# -- remote status ---------------------------------------------------------------------------------

#: The command that starts a gateway, as a person types it.
GATEWAY_START: Final = f"{PROG} gateway --nats URL"
#: Capped sessions named in ``remote status``, at most.
_CAPPED_NAMED: Final = 5


def _clock(ms: object, now_ms: int) -> str:
    """A wall time: ``14:02:11`` today, ``2026-05-01 14:02`` another day."""
    if type(ms) is not int:
        return "?"
    moment, today = time.localtime(ms / 1000), time.localtime(now_ms / 1000)
    if moment[:3] == today[:3]:
        return time.strftime("%H:%M:%S", moment)
    return time.strftime("%Y-%m-%d %H:%M", moment)


def _span(seconds: float) -> str:
    """``42 s``, ``5 min``, ``3 h``, ``2 d``."""
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} d"


def _gateway_cell(gateway: Mapping[str, Any], now_ms: int) -> str:
    state, pid = gateway.get("state"), gateway.get("pid")
    if state == "running":
        started = gateway.get("startedAt")
        since = (
            f", started {_clock(started, now_ms)}, up {_span((now_ms - started) / 1000)}"
            if type(started) is int
            else ""
        )
        ready = "ready" if gateway.get("ready") else "not ready yet"
        return f"running, {ready} (pid {pid}{since})"
    if state == "stuck":
        age = gateway.get("statusAgeS")
        return (
            f"pid {pid} lives, but its status is {_span(age if isinstance(age, float) else 0)} "
            "old: it may be stuck (its own output says why; restart it)"
        )
    if state == "starting":
        return (
            f"starting (pid {pid}), not ready yet: connecting to NATS or waiting for JetStream "
            "(its own output says which)"
        )
    left = gateway.get("leftBehindAt")
    gone = (
        f" (the last one ended without cleaning up, at {_clock(left, now_ms)})"
        if type(left) is int
        else ""
    )
    return f"not running{gone}; start it: {GATEWAY_START} (docs/remote.md)"


def _server_cell(server: Mapping[str, Any]) -> str:
    urls = server.get("urls") or []
    where = server.get("connectedUrl") or ", ".join(str(url) for url in urls) or "?"
    jetstream = {
        "available": "JetStream available",
        "unavailable": "no JetStream (the server needs it: start nats-server with -js, "
        "or 'jetstream {}' in its configuration)",
    }.get(str(server.get("jetstream")), "JetStream not known yet")
    tls = "TLS on" if server.get("tls") else "TLS off"
    if server.get("connected"):
        return f"{line(str(where), 200)}: connected, {tls}, {jetstream}"
    return f"{line(str(where), 200)}: not connected (reconnecting by itself), {tls}, {jetstream}"


_PERMISSIONS: Final[Mapping[str, str]] = {
    "enforced": "enforced by the deployment (each machine only its own subjects)",
    "open": "not enforced: any client of this server can read and disturb the traffic "
    "(docs/remote.md, 'What is not protected')",
    "unknown": "not known (the server did not answer the probe)",
}


def _credentials_cell(credentials: Mapping[str, Any], now_ms: int) -> str:
    problem = credentials.get("problem")
    if problem is not None:
        return (
            f"cannot be used: {line(str(problem), DISPLAY_DIAGNOSTIC_CODE_POINTS)}; install them "
            f"again: {PROG} remote credentials FILE"
        )
    if not credentials.get("installed"):
        return (
            "none installed: the gateway connects without, which only a server without "
            f"permissions allows ({PROG} remote credentials FILE)"
        )
    parts = [f"installed for {line(str(credentials.get('name')), MAX_NAME_CODE_POINTS)}"]
    issued = credentials.get("issuedAt")
    if type(issued) is int:
        parts.append(f"issued {_clock(issued * 1000, now_ms)}")
    expires = credentials.get("expiresAt")
    if type(expires) is int:
        left = expires - now_ms / 1000
        parts.append(f"expired {_span(-left)} ago" if left <= 0 else f"expires in {_span(left)}")
    else:
        parts.append("no expiry")
    if credentials.get("forThisMachine") is False:
        parts.append(f"but for another NATS key than this machine's (see {PROG} remote show)")
    return ", ".join(parts)


def _proxies_cell(proxies: Mapping[str, Any]) -> str:
    held, cap, share = proxies.get("held"), proxies.get("cap"), proxies.get("share")
    text = f"{held} of at most {cap} ({share} guaranteed to each machine)"
    names = [line(str(name), MAX_NAME_CODE_POINTS + 33) for name in proxies["cappedSessions"]]
    if not names:
        return text + "; every remote session has one"
    shown = ", ".join(names[:_CAPPED_NAMED])
    more = f" and {len(names) - _CAPPED_NAMED} more" if len(names) > _CAPPED_NAMED else ""
    return f"{text}; {len(names)} without one (the cap): {shown}{more}"


def _skew_cell(skew: object) -> str:
    if type(skew) is not int:
        return "-"
    from pi_cross_session._internal.protocol.remote.settings import (
        ENVELOPE_MAX_AGE_S,
        ENVELOPE_MAX_AHEAD_S,
    )

    # Our clock at arrival minus theirs at signing: positive is behind (transit included).
    way = "behind" if skew >= 0 else "ahead"
    text = f"{abs(skew) / 1000:.1f} s {way}"
    if skew < -ENVELOPE_MAX_AHEAD_S * 1000 or skew > ENVELOPE_MAX_AGE_S * 1000:
        text += " (too far: its messages are refused expired; fix its clock)"
    return text


def _paused_note(left: object) -> str:
    if not isinstance(left, float):
        return ""
    return f"; not listened to for {_span(left)} more (false MACs or signatures: see the errors)"


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(_width(row[column]) for row in rows) for column in range(len(rows[0]))]
    return [
        "  ".join(
            [cell + " " * (widths[i] - _width(cell)) for i, cell in enumerate(row[:-1])] + [row[-1]]
        ).rstrip()
        for row in rows
    ]


def _machines_table(machines: Sequence[Mapping[str, Any]]) -> list[str]:
    def count(value: object) -> str:
        return str(value) if type(value) is int else "-"

    rows: list[Sequence[str]] = [("MACHINE", "SESSIONS", "PROXIES", "LAST RECORD", "CLOCK")]
    for machine in machines:
        ago = machine.get("lastRecordAgoS")
        rows.append(
            (
                line(str(machine.get("machine")), 32),
                count(machine.get("sessions")),
                count(machine.get("proxies")),
                f"{_span(ago)} ago" if isinstance(ago, int | float) else "never",
                _skew_cell(machine.get("skewMs")) + _paused_note(machine.get("pausedForS")),
            )
        )
    return _table(rows)


def remote_status(status: Mapping[str, Any], *, now_ms: int | None = None) -> str:
    """``remote status`` for people: aligned lines, short words, every string escaped."""
    now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    extra = (
        []
        if status.get("extraInstalled")
        else [
            (
                "extra",
                "not installed: the gateway cannot run here; pip install "
                "'pi-cross-session[remote]'",
            )
        ]
    )
    if not status.get("setUp"):
        head = (
            "The remote plane is not set up for this agent dir: "
            f"{PROG} remote init --machine NAME (docs/remote.md)."
        )
        return "\n".join([head, *(f"{label}: {text}" for label, text in extra)])
    rows: list[tuple[str, str]] = [("gateway", _gateway_cell(status["gateway"], now))]
    server = status.get("server")
    if isinstance(server, Mapping):
        rows.append(("server", _server_cell(server)))
    elif status.get("joinedServers"):
        joined = ", ".join(line(str(url), 200) for url in status["joinedServers"])
        rows.append(("server", f"{joined} (joined; nothing connects to it now)"))
    permissions = status.get("permissions")
    if permissions is not None:
        rows.append(("permissions", _PERMISSIONS.get(str(permissions), line(str(permissions)))))
    bucket = status.get("bucket")
    if isinstance(bucket, Mapping):
        state, detail = str(bucket.get("state")), bucket.get("detail")
        rows.append(("bucket", line(state if not detail else f"{state}: {detail}", 300)))
    machine = line(str(status.get("machine") or "?"), 32)
    inbound = status.get("inbound") or "?"
    rows.append(
        (
            "machine",
            f"{machine} (account {line(str(status.get('account')), 64)}, remote inbound {inbound})",
        )
    )
    card = status.get("card") or status.get("publicKey")
    if card:
        rows.append(("card", line(str(card), 400)))
    rows.append(("credentials", _credentials_cell(status["credentials"], now)))
    trust = status.get("trustFile") or {}
    trusted = [line(str(name), 32) for name in status.get("trusted") or []]
    if trust.get("problem"):
        rows.append(("trusts", f"the trust file cannot be used: {line(str(trust['problem']))}"))
    else:
        rows.append(("trusts", ", ".join(trusted) or f"nobody yet ({PROG} remote trust NAME KEY)"))
    proxies = status.get("proxies")
    if isinstance(proxies, Mapping):
        rows.append(("proxies", _proxies_cell(proxies)))
    rows.extend(extra)
    width = max(len(label) for label, _ in rows) + 2
    lines = [f"{label:<{width}}{text}" for label, text in rows]
    machines = status.get("machines") or []
    if machines and isinstance(server, Mapping):
        lines += ["", *_machines_table(machines)]
    errors = status.get("recentErrors") or []
    if errors:
        title = "recent warnings and errors" + (
            "" if isinstance(server, Mapping) else " of the gateway that ran last"
        )
        lines += ["", f"{title} (newest last):"]
        for entry in errors:
            text = line(str(entry.get("text")), DISPLAY_DIAGNOSTIC_CODE_POINTS)
            lines.append(
                f"  {_clock(entry.get('at'), now)}  {line(str(entry.get('level')), 8)}  {text}"
            )
    return "\n".join(lines)


#: ``gateway`` with neither ``--nats`` nor a deployment joined.
GATEWAY_NO_SERVER = (
    "pi-cross-session gateway: no NATS server to connect to: join a deployment "
    "('pi-cross-session remote join' with the line its hub printed) or pass --nats URL"
)


# -- the gateway started again, and remote rotate -------------------------------------------------


def gateway_reloading(machine: str) -> str:
    """SIGHUP reached a gateway (``remote rotate`` sends it once the new keys are in place)."""
    return (
        f"gateway {line(machine, 32)} starting again (SIGHUP): with this machine's keys, "
        "credentials and trust as its files now say"
    )


def gateway_not_reloaded(problem: str, *, running: bool = True) -> str:
    """SIGHUP, but the files cannot be used: the gateway runs on as it was (``running``), or
    none runs yet (the SIGHUP came while the first one connected) and the process waits."""
    then = (
        "it runs on as it was"
        if running
        else "no gateway runs until it can (Ctrl-C or SIGTERM to stop)"
    )
    return (
        f"{PROG} gateway: not started again: {line(problem, 300)}; {then} (fix that, then send "
        "SIGHUP again)"
    )


def gateway_not_served(machine: str, problem: str) -> str:
    """SIGHUP: the gateway stopped to start again, connected, and then could not serve."""
    return (
        f"{PROG} gateway: {line(machine, 32)} stopped to start again (SIGHUP), and then could "
        f"not serve: {line(problem, 300)}; it stops (start it again once that is fixed)"
    )


#: ``remote rotate`` on a machine that joined no deployment (set up by hand, ``remote deploy``).
ROTATE_NOT_JOINED: Final = (
    "this machine joined no deployment with 'pi-cross-session remote join', so no hub can replace "
    "its keys. On a deployment set up by hand: make new keys here ('pi-cross-session remote init "
    "--replace', which prints the new card), have the deployment's administrator admit that "
    "card ('pi-cross-session remote deploy --out DIR --machine CARD --push URL': the old NATS key "
    "is revoked with it), install the JWT it writes ('pi-cross-session remote credentials FILE'), "
    "restart the gateway, and on every machine that trusts this one by hand, 'pi-cross-session "
    "remote trust' it again with the new key"
)


def rotate_failed(code: str, detail: str) -> str:
    """``remote rotate`` did not finish: why (a refusal of the hub keeps its code), and what to
    do. Run again, it goes on from where it stopped (docs/remote.md, "Rotating a machine's
    keys")."""
    again = f"run '{PROG} remote rotate' again: it goes on from where it stopped"
    text = line(detail, 600)
    if code == "not_joined":
        return text
    if code == "hub_unreachable":
        return (
            f"no hub answered (hub_unreachable): {text}; is '{PROG} remote hub' running? Once "
            f"it answers, {again}"
        )
    if code == "credentials_refused":
        return f"the servers refused this machine ({code}): {text}"
    if code == "bad_answer":
        return f"the hub's answer cannot be used ({code}): {text}; {again}"
    if code == "busy":
        return f"not now ({code}): {text}"
    if code == "hub_error":
        return f"the hub failed to take it ({code}): {text}"
    return f"the hub refused ({line(code, 40)}): {text}"


def rotated(machine: str, old_key: str, new_key: str, nats_key: str, *, resumed: bool) -> str:
    """The rotation is done (``resumed``: one begun earlier and cut short): what changed."""
    return (
        ("finished the key rotation begun earlier: " if resumed else "")
        + f"rotated the keys of {line(machine, 32)}: identity {line(old_key, 60)} is now "
        f"{line(new_key, 60)}, NATS user {line(nats_key, 60)}; the hub revoked the old NATS key, "
        "and every gateway of the deployment takes the new identity key from its roster"
    )


def hub_machine_keys_revoked(machine: str, problem: str) -> str:
    """``remote hub``: the deployment revoked the keys of the hub's own machine, and no rotation
    it took is left here to finish."""
    return (
        f"{PROG} remote hub: the deployment no longer takes this machine's keys "
        f"({line(problem, 300)}); no key rotation of {line(machine, 32)} that it took is left "
        f"here to finish (cross-session/remote/rotation/), so make new keys with '{PROG} remote "
        "init --replace' and start the hub again: it admits them (machines that trust this one "
        "by hand need the new key)"
    )


ROTATE_NO_GATEWAY: Final = "no gateway runs here: the next one starts with the new keys"


def rotate_gateway_took(seconds: float) -> str:
    return f"the running gateway started again with the new keys ({seconds:.1f} s)"


def rotate_gateway_not_yet(wait_s: float) -> str:
    return (
        f"the running gateway has not come back with the new keys within {wait_s:g} s; see "
        f"'{PROG} remote status', or restart it"
    )
