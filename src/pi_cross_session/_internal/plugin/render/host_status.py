"""What a host session tells its user about itself: the notices (the inbox closed, could not
start or lost its registration, a hook or command failed, a goal ended) and
``/cross-session-status`` with its goal, peer-check and pressure parts, readable and ``--json``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from pi_cross_session._internal.plugin.render.host_commands import INBOUND_SOURCES
from pi_cross_session._internal.plugin.render.peer_text import shown_diagnostic, shown_word
from pi_cross_session._internal.plugin.render.receiving import (
    REOPEN_WITH_COMMAND,
    closed_reason,
    status_text,
)
from pi_cross_session._internal.plugin.reports import GoalView, PeerChecks, Pressure
from pi_cross_session._internal.protocol import sanitize
from pi_cross_session._internal.protocol.limits import DISPLAY_DIAGNOSTIC_CODE_POINTS
from pi_cross_session._internal.protocol.registration import PublicPeer
from pi_cross_session._internal.security.admission import Latch, Snapshot
from pi_cross_session._internal.security.auth import RefusalCause
from pi_cross_session._internal.security.goals import GoalEnd, RevokeReason

GOAL_END_REASONS: Final[dict[str, str]] = {
    RevokeReason.COMPLETED: "it was completed",
    RevokeReason.CANCELLED: "it was cancelled",
    RevokeReason.LATCH: "the inbox latched after an abort",
    RevokeReason.UNSAFE_END: "a turn ended without a clean stop",
    RevokeReason.RELOAD: "the session was reloaded",
    RevokeReason.SHUTDOWN: "the session shut down",
    RevokeReason.SCOPE_CHANGED: "the session's working directory changed",
}


def goal_ended(end: GoalEnd | None) -> str:
    """One line for the user: which goal ended and why; its grant never comes back."""
    if end is None:
        return "No goal has ended in this session."
    why = GOAL_END_REASONS.get(end.reason, str(end.reason))
    return (
        f"Goal {end.goal_id} ended because {why}. Bound peers lost its grant for good; "
        "start a new goal to grant again."
    )


def inbox_latched(
    latch: Latch, goal_end: GoalEnd | None = None, *, reopen: str = REOPEN_WITH_COMMAND
) -> str:
    """The notice when the abort latch closes the inbox (and ended the goal, if one was on):
    which turn, how it ended as the host said, what that means for senders, how to reopen."""
    text = (
        f"Cross-session inbox closed: {closed_reason(latch)}. Other sessions' messages are "
        f"refused (stopped) until you reopen it: {reopen}."
    )
    if goal_end is not None and goal_end.reason in (RevokeReason.LATCH, RevokeReason.UNSAFE_END):
        text += f" {goal_ended(goal_end)} Resuming does not restore it."
    return text


def goal_lines(view: GoalView) -> list[str]:
    """The goal part of ``/cross-session-status``."""
    goal, last_end = view.status, view.last_end
    if goal.goal_id is None:
        lines = ["Goal: none"]
    else:
        objective = sanitize.line(goal.objective or "", DISPLAY_DIAGNOSTIC_CODE_POINTS)
        members = ", ".join(peer[:8] for peer in goal.peer_ids) or "no peers bound"
        lines = [f"Goal: {goal.goal_id} — {objective}", f"  bound peers: {members}"]
    if last_end is not None and last_end.goal_id != goal.goal_id:
        lines.append(f"  last ended: {last_end.goal_id} ({last_end.reason})")
    lines.append(f"  confirmed scoped receivers (for sending): {view.confirmations}")
    return lines


def goal_data(view: GoalView) -> dict[str, Any]:
    """The goal part of ``/cross-session-status --json``."""
    last_end = view.last_end
    return {
        "goal": view.status.as_dict(),
        "lastGoalEnd": None
        if last_end is None
        else {"goalId": last_end.goal_id, "reason": str(last_end.reason)},
        "goalConfirmations": view.confirmations,
    }


def peer_check_lines(checks: PeerChecks | None, *, recent: int = 3) -> list[str]:
    """The peer-check part of ``/cross-session-status``: the credential source, refusals by
    cause, and the newest refusal texts."""
    if checks is None:
        return []
    if checks.source == "unavailable":
        head = "Peer checks: kernel credentials unavailable here (pids and uids not enforced)"
    else:
        head = f"Peer checks: {checks.source}; other uids closed {checks.foreign_uid_closed}"
    if checks.shed:
        head += f"; connections shed for newcomers {checks.shed}"
    refused = ", ".join(
        f"{shown_word(cause)} {n}" for cause, n in sorted(checks.auth.refusals.items())
    )
    lines = [head + (f"; hellos refused: {refused}" if refused else "")]
    changed = checks.auth.refusals.get(RefusalCause.PID_CHANGED.value, 0)
    if changed:
        lines.append(
            f"  Possible impersonation: {changed} hello(s) named a session whose registration "
            "now names another pid than the one it first authenticated with: another process "
            "of your user rewrote it to pose as that session, or the first one was the impostor"
        )
    for text in checks.auth.recent[-recent:] if recent > 0 else ():
        lines.append(f"  {shown_diagnostic(text)}")
    pressure = pressure_line(checks.pressure)
    if pressure is not None:
        lines.append(pressure)
    return lines


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{name} {n}" for name, n in sorted(counts.items()))


def _ago(seconds: float | None) -> str:
    return "" if seconds is None else f", last {seconds:.0f} s ago"


def pressure_line(pressure: Pressure) -> str | None:
    """One line on what the session did to keep serving under load; ``None`` if nothing."""
    if not pressure.pressed:
        return None
    parts: list[str] = []
    if pressure.accept_failures:
        parts.append(
            f"accept failed {_counts(pressure.accept_failures)}"
            f"{_ago(pressure.last_accept_failure_age_s)} (kept serving)"
        )
    if pressure.descriptor_cap is not None:
        parts.append(
            f"file descriptors short: connections held to {pressure.descriptor_cap} "
            "(counted again every second)"
        )
    if pressure.shed_for_descriptors:
        parts.append(f"connections shed to free descriptors {pressure.shed_for_descriptors}")
    if pressure.registration_retries:
        parts.append(
            f"registration writes retried {_counts(pressure.registration_retries)}"
            f"{_ago(pressure.last_registration_retry_age_s)}"
        )
    if pressure.request_deadline_cuts:
        parts.append(f"requests too slow after ready {pressure.request_deadline_cuts}")
    if pressure.costly_frames:
        parts.append(f"frames too costly to parse {pressure.costly_frames}")
    if pressure.throttled_reads:
        parts.append(f"reads slowed for a process over its share {pressure.throttled_reads}")
    return "Under pressure: " + "; ".join(parts)


def peer_check_data(checks: PeerChecks | None) -> dict[str, Any]:
    """The peer-check part of ``/cross-session-status --json``."""
    if checks is None:
        return {"peerChecks": None}
    return {
        "peerChecks": {
            "source": checks.source,
            "foreignUidClosed": checks.foreign_uid_closed,
            "credentialsUnreadable": checks.credentials_unreadable,
            "unverified": checks.unverified,
            "shed": checks.shed,
            "helloRefusals": dict(checks.auth.refusals),
            "recent": list(checks.auth.recent),
            "pressure": pressure_data(checks.pressure),
        }
    }


def pressure_data(pressure: Pressure) -> dict[str, Any]:
    """What :func:`pressure_line` says, for ``--json``."""
    return {
        "acceptFailures": dict(pressure.accept_failures),
        "lastAcceptFailure": pressure.last_accept_failure,
        "lastAcceptFailureAgeS": pressure.last_accept_failure_age_s,
        "descriptorCap": pressure.descriptor_cap,
        "shedForDescriptors": pressure.shed_for_descriptors,
        "requestDeadlineCuts": pressure.request_deadline_cuts,
        "costlyFrames": pressure.costly_frames,
        "throttledReads": pressure.throttled_reads,
        "registrationRetries": dict(pressure.registration_retries),
        "lastRegistrationRetryAgeS": pressure.last_registration_retry_age_s,
    }


def inbox_start_failed(error: BaseException | str) -> str:
    """The inbox could not start: the session runs on, unreachable."""
    detail = shown_diagnostic(str(error) or type(error).__name__)
    return (
        f"Cross-session inbox could not start ({detail}); other sessions cannot reach this one. "
        "/cross-session-status shows details."
    )


def hook_failed(what: str, error: BaseException) -> str:
    """One of our host hooks failed; the user's turn goes on regardless."""
    detail = shown_diagnostic(str(error) or type(error).__name__)
    return (
        f"Cross-session: {what} failed ({type(error).__name__}: {detail}); your turn was not "
        "affected. /cross-session-status keeps the details."
    )


def command_failed(command: str, error: BaseException) -> str:
    """A slash command of ours failed."""
    detail = shown_diagnostic(str(error) or type(error).__name__)
    return f"/{command} failed: {type(error).__name__}: {detail}"


def registration_lost(error: BaseException) -> str:
    """The registration could not be kept, so the inbox stopped."""
    detail = shown_diagnostic(str(error) or type(error).__name__)
    return f"Cross-session inbox stopped: its registration could not be kept ({detail})"


INBOX_NOT_RUNNING: Final = "Cross-session inbox: not running in this session."


def host_status_text(
    snapshot: Snapshot | None,
    *,
    me: PublicPeer | None,
    inbound: str,
    inbound_source: str,
    warnings: Sequence[str] = (),
    problems: Sequence[str] = (),
    sections: Sequence[str] = (),
    reopen: str = REOPEN_WITH_COMMAND,
) -> str:
    """The readable ``/cross-session-status`` of a host session: the receiver's state, further
    ``sections`` (the goal, peer checks), then the inbound setting and anything that went wrong
    in the host adapter."""
    lines = (
        [INBOX_NOT_RUNNING] if snapshot is None else [status_text(snapshot, me=me, reopen=reopen)]
    )
    lines.extend(sections)
    where = INBOUND_SOURCES.get(inbound_source, inbound_source)
    lines.append(f"Inbound: {inbound} (set by {where})")
    lines.extend(f"Warning: {shown_diagnostic(warning, 600)}" for warning in warnings)
    if problems:
        lines.append("Problems seen in this session (newest last):")
        lines.extend(f"  {shown_diagnostic(problem, 600)}" for problem in problems)
    return "\n".join(lines)


def status_command_json(data: dict[str, Any]) -> str:
    """``/cross-session-status --json``: the object as indented JSON, escaped for a terminal."""
    return sanitize.dumps(data, indent=2)


def journal_setting_unknown(variable: str, value: str) -> str:
    """The journal setting is a value we do not know: the journal is off, and why."""
    return f"{variable} is {value[:40]!r}, which is not on, text or off: the event journal is off"


__all__ = [
    "GOAL_END_REASONS",
    "INBOX_NOT_RUNNING",
    "command_failed",
    "goal_data",
    "goal_ended",
    "goal_lines",
    "hook_failed",
    "host_status_text",
    "inbox_latched",
    "inbox_start_failed",
    "journal_setting_unknown",
    "peer_check_data",
    "peer_check_lines",
    "pressure_data",
    "pressure_line",
    "registration_lost",
    "status_command_json",
]
