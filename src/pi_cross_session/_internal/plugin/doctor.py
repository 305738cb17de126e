"""``pi-cross-session doctor``: find what keeps sessions from seeing or reaching each other.

It judges the agent dir, the peers dir, the runtime dir, the registrations and the sockets with the
same rules the sessions use (the facts come from
:mod:`pi_cross_session._internal.plugin.doctor_survey`), and the remote plane when this agent dir
has one (its identity, credentials, trust file and gateway, from
:mod:`pi_cross_session._internal.plugin.remote_state`, without the remote extra), probes the
sessions it finds, and says for each finding what is wrong, how much it matters and what to do.
Three promises:

* **It changes nothing and creates nothing**: no dir, no file, not even for a mistyped agent dir.
* **It never advises destroying a live session.** A fix that removes a file is given only when the
  process the file names is proven gone (``kill(pid, 0)`` → ``ESRCH``), or, for a socket, when the
  kernel says nobody listens on it. For a file of a process that still runs it names the process
  and what to do instead (``chmod 600`` for a loose mode, the agent dir spelling for a session
  registered under another one). A zombie (exited, not yet reaped by its parent) is named as one,
  with the parent that has to reap it; its files are not proven stale, so they are left alone.
* **It stays bounded** whatever fills the dirs: it reads the 512 registrations a listing reads and
  a sample past them, shows at most a few findings of one kind and counts the rest, and groups the
  registrations of one process that answers for none of them (decoys).

The text of every finding lives here; :func:`report_text` and :func:`report_json` render them, so
the command line only calls them.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from dataclasses import dataclass
from enum import StrEnum

import anyio

from pi_cross_session._internal.plugin import cli_identity, remote_state
from pi_cross_session._internal.plugin.doctor_settings import (
    DOCTOR_EXAMPLES,
    DOCTOR_FINDINGS_PER_KIND,
)
from pi_cross_session._internal.plugin.doctor_survey import (
    Entry,
    Listener,
    Process,
    SocketEntry,
    Spelling,
    Standing,
    Survey,
    survey,
)
from pi_cross_session._internal.protocol import sanitize
from pi_cross_session._internal.protocol.io import environment
from pi_cross_session._internal.protocol.io.exchange import ExchangeError, Exchanger
from pi_cross_session._internal.protocol.limits import (
    MAX_LISTED_REGISTRATIONS,
)
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.remote.settings import (
    CREDENTIALS_EXPIRY_WARNING_S,
    ENVELOPE_MAX_AGE_S,
    ENVELOPE_MAX_AHEAD_S,
)
from pi_cross_session._internal.security.io import fs


class Severity(StrEnum):
    """How much a finding matters."""

    OK = "ok"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


_RANK = {Severity.OK: 0, Severity.INFO: 1, Severity.WARNING: 2, Severity.ERROR: 3}


@dataclass(frozen=True, slots=True)
class Finding:
    """One observation: what, how bad, and how to fix it (empty when nothing needs doing).

    ``kind`` groups findings of one sort, so that a dir full of them yields a few and a count.
    """

    severity: Severity
    subject: str
    detail: str
    fix: str = ""
    kind: str = ""


# -- the agent dir and the private dirs ------------------------------------------------------------


def _agent_dir_findings(where: Locations, found: Survey) -> list[Finding]:
    agent_dir = sanitize.line(where.agent_dir)
    findings = [
        Finding(
            Severity.OK,
            "agent dir",
            f"{agent_dir} (namespace {where.namespace}); sessions see each other only when they "
            "use this exact string",
        )
    ]
    if not found.agent_dir_exists:
        findings.append(
            Finding(
                Severity.INFO,
                "agent dir",
                f"{agent_dir} does not exist: no session has run with this agent dir yet "
                "(check its spelling)",
            )
        )
    if not os.path.isabs(where.agent_dir):
        absolute = sanitize.line(os.path.abspath(where.agent_dir))
        findings.append(
            Finding(
                Severity.WARNING,
                "agent dir",
                "is relative: every session resolves it against its own working dir, so sessions "
                "started in different dirs never see each other",
                f"set an absolute path: PI_CODING_AGENT_DIR={absolute}",
            )
        )
    registered = _registered_per_spelling(found)
    for spelling in found.spellings:
        sessions = registered.get(spelling.agent_dir, 0)
        sockets = found.spelling_sockets.get(spelling.agent_dir, 0)
        if sessions or sockets:
            findings.append(_spelling_in_use(where, spelling, sessions, sockets))
        elif spelling.how == "without the trailing slash":
            findings.append(
                Finding(
                    Severity.WARNING,
                    "agent dir",
                    "ends with '/': sessions that write the same dir without it cannot see this "
                    "one",
                    "set PI_CODING_AGENT_DIR without the trailing slash everywhere",
                )
            )
    return findings


def _registered_per_spelling(found: Survey) -> dict[str, int]:
    """Registrations read here that are valid under each other spelling."""
    counts: dict[str, int] = defaultdict(int)
    for entry in found.entries:
        if entry.standing is Standing.OTHER_SPELLING and entry.spelling is not None:
            counts[entry.spelling.agent_dir] += 1
    return counts


def _spelling_in_use(where: Locations, spelling: Spelling, sessions: int, sockets: int) -> Finding:
    other = sanitize.line(spelling.agent_dir)
    if sessions:
        evidence = f"{sessions} registration(s) here were written with the agent dir spelled"
    else:
        runtime_dir = spelling.locations.runtime_dir
        evidence = f"the runtime dir {runtime_dir} holds {sockets} socket(s) of the spelling"
    return Finding(
        Severity.WARNING,
        "agent dir",
        f"{evidence} '{other}' ({spelling.how}, namespace {spelling.locations.namespace}); this "
        f"environment spells it '{sanitize.line(where.agent_dir)}' (namespace "
        f"{where.namespace}), a different namespace, so it cannot see or reach those sessions",
        f"set PI_CODING_AGENT_DIR={other} here (every session that should meet them must use "
        "exactly this string)",
    )


def _dir_finding(label: str, inspection: fs.DirInspection, *, starting: str) -> Finding:
    path = sanitize.line(inspection.path)
    state = inspection.state
    if state is fs.DirState.PRIVATE:
        return Finding(Severity.OK, label, f"{path} is private (0700, ours)")
    if state is fs.DirState.MISSING:
        return Finding(Severity.INFO, label, f"{path} does not exist yet; {starting}")
    if state is fs.DirState.LOOSE_MODE:
        return Finding(
            Severity.WARNING,
            label,
            f"{path}: {inspection.detail}",
            f"sessions repair this themselves at start-up; or run: chmod 700 {path}",
        )
    if state is fs.DirState.UNUSABLE:
        return Finding(Severity.ERROR, label, f"{path}: {inspection.detail}", inspection.remedy)
    return Finding(Severity.ERROR, label, f"{path}: {inspection.detail}")


# -- registrations ---------------------------------------------------------------------------------


def _who(entry: Entry) -> str:
    """A valid registration by the name it gives itself; any other by its file name's ref."""
    ref = entry.instance_id[:8]
    valid = entry.registration is not None
    return f"session {entry.name} [{ref}]" if valid and entry.name else f"registration {ref}"


def _reaper(process: Process) -> str:
    """``its parent, process 77 (bash),``: who has to reap a zombie."""
    parent = process.parent
    return f"its parent, {parent.describe()}," if parent is not None else "its parent"


def _runs(process: Process) -> str:
    """``which still runs``, or, for a zombie, that it has exited and who has to reap it."""
    if not process.zombie:
        return "which still runs"
    return f"which has exited but is not reaped: a zombie until {_reaper(process)} collects it"


def _zombie_fix(process: Process) -> str:
    """What to do about the files of a zombie: nothing by hand (it is not proven gone)."""
    parent = process.parent
    look = f" (ps -o pid,stat,args -p {parent.pid})" if parent is not None else ""
    return (
        "leave it in place: while the pid exists nothing proves it stale, and no session removes "
        f"it. Its parent has to reap it{look}: a parent that is stuck or never waits for its "
        "children must be fixed or stopped; once the zombie is gone, the next listing removes it"
    )


def _pid_words(entry: Entry) -> str:
    """``; it names process 1234 (sleep), which still runs`` and the like."""
    process = entry.process
    if process is None:
        return "; it names no process that can be checked"
    if process.gone:
        return f"; {process.describe()}, which it names, is gone"
    return f"; it names {process.describe()}, {_runs(process)}"


def _refused_fix(entry: Entry) -> str:
    path = sanitize.line(entry.path)
    process = entry.process
    if process is not None and process.gone:
        return f"its process is gone and no listing removes a file it refuses: rm {path}"
    if process is None:
        return "find out who wrote it before changing it; every session skips it"
    if process.zombie:
        return _zombie_fix(process)
    keep = f"it names {process.describe()}, which still runs: leave it in place"
    if entry.reason is fs.Reason.LOOSE_MODE:
        return f"chmod 600 {path} ({keep})"
    if entry.reason is fs.Reason.FOREIGN_OWNER and entry.owner_uid is not None:
        return (
            f"{keep}; only {fs.describe_uid(entry.owner_uid)} or an administrator can make it "
            "yours (owner you, mode 0600)"
        )
    return f"{keep}, and fix or stop the program that writes it"


def _entry_finding(entry: Entry, *, past: bool) -> Finding:
    """A registration a listing does not accept as this agent dir's: why, and what to do."""
    path = sanitize.line(entry.path)
    process = entry.process
    gone = process is not None and process.gone
    if entry.standing is Standing.REFUSED:
        return Finding(
            Severity.WARNING,
            _who(entry),
            f"ignored by every session: {entry.problem}{_pid_words(entry)}",
            _refused_fix(entry),
            kind="refused registration",
        )
    if entry.standing is Standing.OTHER_NAMESPACE:
        fix = (
            f"its process is gone: rm {path}"
            if gone
            else "run `pi-cross-session paths` where that session runs and use the same "
            "PI_CODING_AGENT_DIR in both"
        )
        return Finding(
            Severity.WARNING,
            _who(entry),
            f"registered under another spelling of this agent dir (namespace {entry.namespace}), "
            f"which this environment cannot reach{_pid_words(entry)}",
            fix,
            kind="registration of another namespace",
        )
    if entry.standing is Standing.UNREADABLE:
        return Finding(
            Severity.INFO, _who(entry), f"could not be read: {entry.problem}", kind="unreadable"
        )
    if gone:
        fix = f"its process is gone: rm {path}"
    elif process is None:
        fix = "find out who wrote it before changing it; every session skips it"
    elif process.zombie:
        fix = _zombie_fix(process)
    else:
        fix = (
            f"it names {process.describe()}, which still runs: leave it in place, and update or "
            "restart the program that writes it"
        )
    where = " (past the listing window)" if past else ""
    return Finding(
        Severity.WARNING,
        _who(entry),
        f"ignored by every session{where}: {entry.problem}{_pid_words(entry)}",
        fix,
        kind="invalid registration",
    )


@dataclass(frozen=True, slots=True)
class _Verdict:
    """A valid registration after its liveness checks."""

    entry: Entry
    #: ``None`` when it answered a probe; else the socket refusal or the probe's code.
    failure: str | None
    #: The failure is the socket check's, not the probe's.
    socket_failed: bool = False

    @property
    def hidden(self) -> bool:
        """Its process runs but it does not answer: a listing hides it and never removes it."""
        process = self.entry.process
        return (
            self.failure is not None
            and process is not None
            and not process.gone
            and not process.zombie
        )


async def _check(
    entry: Entry, exchanger: Exchanger, cli_instance_ids: frozenset[str]
) -> _Verdict | Finding:
    registration = entry.registration
    process = entry.process
    assert registration is not None
    assert process is not None
    if process.gone:
        return _Verdict(entry, "gone")
    if process.zombie:
        return _Verdict(entry, "zombie")  # it has exited: nothing answers, no probe needed
    if entry.socket_refusal is not None:
        if entry.instance_id in cli_instance_ids and entry.socket_refusal == "ENOENT":
            return Finding(Severity.OK, _who(entry), "the command line, sending (it has no inbox)")
        return _Verdict(entry, entry.socket_refusal, socket_failed=True)
    try:
        await exchanger.probe(registration)
    except ExchangeError as exc:
        return _Verdict(entry, exc.code)
    return _Verdict(entry, None)


def _valid_finding(verdict: _Verdict, window: int) -> Finding:
    """A registration valid for this agent dir (or another spelling of it)."""
    entry = verdict.entry
    registration = entry.registration
    process = entry.process
    assert registration is not None
    assert process is not None
    path = sanitize.line(entry.path)
    past = not entry.in_window
    spelling = entry.spelling
    if spelling is not None:
        other = sanitize.line(spelling.agent_dir)
        state = "live" if verdict.failure is None else f"not answering ({verdict.failure})"
        if process.gone:
            return Finding(
                Severity.INFO,
                _who(entry),
                f"registered under the agent dir spelled '{other}'; {process.describe()} is gone",
                f"its process is gone: rm {path}",
                kind="other spelling",
            )
        if process.zombie:
            return Finding(
                Severity.INFO,
                _who(entry),
                f"registered under the agent dir spelled '{other}'; it names "
                f"{process.describe()}, {_runs(process)}",
                _zombie_fix(process),
                kind="other spelling",
            )
        return Finding(
            Severity.WARNING,
            _who(entry),
            f"{state}, {process.describe()}, but registered under the agent dir spelled "
            f"'{other}' ({spelling.how}); this environment cannot see or reach it",
            f"to reach it from here, set PI_CODING_AGENT_DIR={other}",
            kind="other spelling",
        )
    if process.gone:
        fix = (
            "the next listing by any session removes it"
            if not past
            else f"no listing reads it (it is past the window), so none removes it: rm {path}"
        )
        return Finding(
            Severity.INFO,
            _who(entry),
            f"{process.describe()} is gone; the registration is stale",
            fix,
            kind="stale registration",
        )
    if process.zombie:
        return Finding(
            Severity.WARNING,
            _who(entry),
            f"{process.describe()}, which it names, has exited but is not reaped: a zombie "
            f"until {_reaper(process)} collects it. It answers nothing, and no listing removes "
            "its registration while the pid exists",
            _zombie_fix(process),
            kind="unreaped process",
        )
    if past:
        state = "live" if verdict.failure is None else f"not answering ({verdict.failure})"
        return Finding(
            Severity.ERROR,
            _who(entry),
            f"{state}, {process.describe()}, but its registration is past the {window}-entry "
            "window of listings: no session sees it, and sends to it end not_found",
            "the registrations ahead of it must go (see the peers dir findings); a restart only "
            "gives it a new place in the directory order, which the file system decides",
            kind="past the window",
        )
    if verdict.failure is None:
        return Finding(
            Severity.OK, _who(entry), f"live, {registration.status}, inbound {registration.inbound}"
        )
    if verdict.socket_failed:
        fix = "restart that session"
        if verdict.failure == "unsafe_endpoint":
            socket_path = sanitize.line(registration.socket_path)
            fix = f"check the socket's owner and mode (must be 0600): {socket_path}"
        return Finding(
            Severity.WARNING,
            _who(entry),
            f"process {process.pid} lives but its socket fails the check: {verdict.failure}",
            fix,
            kind="hidden session",
        )
    return Finding(
        Severity.WARNING,
        _who(entry),
        f"process {process.pid} lives but does not answer a probe: {verdict.failure}",
        "that session may be stuck or overloaded; it is hidden from listings meanwhile",
        kind="hidden session",
    )


def _decoy_findings(
    verdicts: list[_Verdict], window: int, *, sampled: bool
) -> tuple[list[Finding], set[str]]:
    """Several registrations of one running process that answers for none of them.

    A session has one registration per incarnation; a process behind many that all fail their
    probe is filling the dir. None of them can be proven stale while it runs.
    """
    by_pid: dict[int, list[_Verdict]] = defaultdict(list)
    for verdict in verdicts:
        process = verdict.entry.process
        if verdict.hidden and process is not None:
            by_pid[process.pid].append(verdict)
    findings: list[Finding] = []
    grouped: set[str] = set()
    for pid, group in sorted(by_pid.items(), key=lambda item: -len(item[1])):
        if len(group) < 2:
            continue
        grouped.update(v.entry.instance_id for v in group)
        process = group[0].entry.process
        assert process is not None
        in_window = sum(1 for v in group if v.entry.in_window)
        past = f" (and {len(group) - in_window} of those sampled past them)" if sampled else ""
        examples = ", ".join(v.entry.instance_id for v in group[:DOCTOR_EXAMPLES])
        findings.append(
            Finding(
                Severity.WARNING,
                f"registrations of process {pid}",
                f"{in_window} of the registrations a listing reads{past} name "
                f"{process.describe()}, which runs but answers on none of their sockets; for "
                f"example {examples}",
                f"no safe removal exists: a registration whose process runs cannot be proven "
                f"stale, so no session removes it (and neither should you while it runs). Find "
                f"out what it is (ps -p {pid} -o pid,user,args); if it should not publish "
                "sessions, stop it: each later listing then removes the ones it reads, up to "
                f"{window} at a time. Or give "
                "your own sessions a private agent dir: set PI_CODING_AGENT_DIR to a dir only "
                "they use",
                kind="decoys",
            )
        )
    return findings, grouped


def _window_finding(found: Survey) -> Finding | None:
    if found.unread == 0:
        return None
    sampled = sum(1 for e in found.entries if not e.in_window)
    return Finding(
        Severity.WARNING,
        "peers dir",
        f"{found.total} registrations; a listing reads only the first {found.window} in directory "
        f"order and leaves {found.unread} unread, so a live session among them is invisible "
        f"(doctor read the first {found.window} and {sampled} more, and counted the rest)",
        "see the findings below for what fills it",
    )


# -- sockets ---------------------------------------------------------------------------------------


def _socket_finding(socket_entry: SocketEntry, entry: Entry | None) -> Finding | None:
    """A socket no valid registration in the window accounts for."""
    name = os.path.basename(socket_entry.path)
    path = sanitize.line(socket_entry.path)
    if entry is not None and entry.standing in (Standing.OURS, Standing.OTHER_SPELLING):
        return None  # its registration's finding says all there is to say
    if not socket_entry.is_socket:
        return Finding(
            Severity.INFO,
            "runtime dir",
            f"{name} has no registration and is not a socket"
            if entry is None
            else f"{name} is not a socket",
            "sessions only make sockets here; find out where it came from",
            kind="stray file",
        )
    if socket_entry.refusal is not None:
        return Finding(
            Severity.WARNING,
            "runtime dir",
            f"{name} fails the socket check ({socket_entry.refusal}); no session connects to it",
            kind="unsafe socket",
        )
    registration = "it has no registration" if entry is None else f"its {_who(entry)} is ignored"
    listener = socket_entry.listener
    if listener is Listener.PROCESS and socket_entry.process is not None:
        return Finding(
            Severity.WARNING,
            "runtime dir",
            f"{name}: {socket_entry.process.describe()} listens on it, but {registration}, so "
            "no session can see it",
            "leave it in place; restart that session to publish it again"
            if entry is None
            else "fix its registration (see above)",
            kind="unseen listener",
        )
    if listener is Listener.NOBODY:
        process = None if entry is None else entry.process
        if process is not None and not process.gone:
            return Finding(
                Severity.INFO,
                "runtime dir",
                f"{name}: no process listens on it; its registration names "
                f"{process.describe()}, {_runs(process)}",
                _zombie_fix(process)
                if process.zombie
                else "leave it in place while that process runs",
                kind="silent socket",
            )
        return Finding(
            Severity.INFO,
            "runtime dir",
            f"{name} has no registration and no process listens on it"
            if entry is None
            else f"{name}: no process listens on it, and the process its registration names is "
            "gone",
            f"left by a session that ended; safe to remove when no session is starting: rm {path}",
            kind="leftover socket",
        )
    return Finding(
        Severity.INFO,
        "runtime dir",
        f"{name}: could not tell who listens on it ({listener})",
        kind="unknown socket",
    )


# -- the remote plane ------------------------------------------------------------------------------

#: The gateway's recent warnings and errors shown, at most (the newest).
_GATEWAY_LOG_SHOWN = 5
_REMOTE = "remote plane"
_GATEWAY_START = "start one: pi-cross-session gateway --nats URL (docs/remote.md)"


def _when(epoch_s: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch_s))


def _identity_findings(facts: remote_state.RemoteFacts) -> list[Finding]:
    machine = sanitize.line(facts.machine or "?", 32)
    findings = []
    for found in facts.files:
        path = sanitize.line(found.path)
        state = found.state
        if state is remote_state.FileState.PRIVATE:
            continue
        if state is remote_state.FileState.MISSING:
            if found.name == remote_state.NATS_SEED_FILE:
                findings.append(
                    Finding(
                        Severity.WARNING,
                        "remote identity",
                        f"{found.name} (this machine's NATS key) is missing: the next remote "
                        "command makes a new one, which the deployment has not admitted",
                        "after it is made, give the new card (pi-cross-session remote show) to "
                        "the deployment's administrator",
                    )
                )
                continue
            findings.append(
                Finding(
                    Severity.ERROR,
                    "remote identity",
                    f"{found.name} is missing: the identity is incomplete and the gateway cannot "
                    "start",
                    f"make a new identity: pi-cross-session remote init --machine {machine} "
                    "--replace (then give its card to every machine and deployment that trusts "
                    "this one)",
                )
            )
        elif state is remote_state.FileState.LOOSE:
            findings.append(
                Finding(
                    Severity.ERROR,
                    "remote identity",
                    f"{path}: {sanitize.line(found.detail)}; the gateway refuses it",
                    f"chmod 600 {path}; others could read it meanwhile: if they are not to be "
                    "trusted, make a new identity (pi-cross-session remote init --replace)",
                )
            )
        else:
            findings.append(
                Finding(
                    Severity.ERROR,
                    "remote identity",
                    f"{path} cannot be used ({state}): {sanitize.line(found.detail)}; the gateway "
                    "refuses it",
                    "it must be a regular file of yours with mode 0600",
                )
            )
    if not findings:
        findings.append(
            Finding(
                Severity.OK,
                "remote identity",
                f"machine {machine}; its key files are private (0600, ours)",
            )
        )
    directory = facts.directory
    if directory.state is fs.DirState.LOOSE_MODE:
        path = sanitize.line(directory.path)
        findings.append(
            Finding(
                Severity.WARNING,
                "remote identity",
                f"{path}: {directory.detail}",
                f"chmod 700 {path} (a remote command repairs it too)",
            )
        )
    elif directory.state in (fs.DirState.UNUSABLE, fs.DirState.UNREADABLE):
        findings.append(
            Finding(
                Severity.ERROR,
                "remote identity",
                f"{sanitize.line(directory.path)}: {sanitize.line(directory.detail)}",
                sanitize.line(directory.remedy),
            )
        )
    return findings


def _credentials_finding(facts: remote_state.RemoteFacts, now_s: float) -> Finding:
    credentials = facts.credentials
    install = "pi-cross-session remote credentials FILE (the JWT the deployment wrote for it)"
    if credentials is None:
        return Finding(
            Severity.INFO,
            "remote credentials",
            "no NATS credentials installed: the gateway connects without, which only a server "
            "that enforces no permissions accepts",
            f"to join a deployment: {install}",
        )
    if credentials.problem is not None:
        return Finding(
            Severity.ERROR,
            "remote credentials",
            f"{remote_state.NATS_JWT_FILE} cannot be used: {sanitize.line(credentials.problem)}",
            f"install them again: {install}",
        )
    issuer = sanitize.line(credentials.issuer or "?", 64)
    said = f"user {sanitize.line(credentials.name or '?', 64)}, issued by {issuer}"
    if credentials.issued_at is not None:
        said += f" on {_when(credentials.issued_at)}"
    if (
        credentials.subject is not None
        and facts.nats_key is not None
        and credentials.subject != facts.nats_key
    ):
        return Finding(
            Severity.ERROR,
            "remote credentials",
            f"{said}, for NATS key {sanitize.line(credentials.subject, 64)}, but this machine's "
            f"is {facts.nats_key}: the server refuses the connection",
            "ask the deployment's administrator for a JWT for this machine's card "
            f"(pi-cross-session remote show), then: {install}",
        )
    expires = credentials.expires_at
    if expires is None:
        return Finding(Severity.OK, "remote credentials", f"{said}; no expiry")
    if expires <= now_s:
        return Finding(
            Severity.ERROR,
            "remote credentials",
            f"{said}; expired on {_when(expires)}: the server refuses this machine",
            f"ask the deployment's administrator for a new JWT, then: {install}",
        )
    if expires - now_s <= CREDENTIALS_EXPIRY_WARNING_S:
        return Finding(
            Severity.WARNING,
            "remote credentials",
            f"{said}; expires on {_when(expires)}",
            f"ask the deployment's administrator for a new JWT before then, then: {install}",
        )
    return Finding(Severity.OK, "remote credentials", f"{said}; expires on {_when(expires)}")


def _trust_finding(facts: remote_state.RemoteFacts) -> Finding:
    trust = facts.trust
    path = sanitize.line(trust.path)
    if trust.state is remote_state.FileState.MISSING:
        return Finding(
            Severity.INFO,
            "remote trust",
            "no trust file: this machine trusts no other yet, and remote inbound is off",
            "pi-cross-session remote trust NAME KEY (the other machine's card)",
        )
    if trust.state is not remote_state.FileState.PRIVATE or trust.problem is not None:
        fix = (
            f"chmod 600 {path}"
            if trust.state is remote_state.FileState.LOOSE
            else (
                "fix or remove it, then trust the machines again: pi-cross-session remote trust "
                "NAME KEY"
            )
        )
        return Finding(
            Severity.ERROR,
            "remote trust",
            f"{path} cannot be used: {sanitize.line(trust.problem or str(trust.state))}; the "
            "gateway does not start",
            fix,
        )
    inbound = "on" if trust.inbound else "off"
    names = ", ".join(sanitize.line(name, 32) for name in trust.machines)
    account = sanitize.line(trust.account or "?", 64)
    if not names:
        return Finding(
            Severity.INFO,
            "remote trust",
            f"account {account}, remote inbound {inbound}; trusts no machine yet",
            "pi-cross-session remote trust NAME KEY (the other machine's card)",
        )
    return Finding(
        Severity.OK,
        "remote trust",
        f"account {account}, remote inbound {inbound}; trusts {names}",
    )


def _gateway_findings(facts: remote_state.RemoteFacts) -> list[Finding]:
    gateway = facts.gateway
    state = gateway.state
    if state is remote_state.GatewayState.STOPPED:
        left = gateway.snapshot
        written = None if left is None else left.get("writtenAt")
        gone = (
            f"; the last one ended without cleaning up ({_when(written / 1000)})"
            if type(written) is int
            else ""
        )
        return [
            Finding(
                Severity.INFO,
                "gateway",
                f"no gateway runs for this agent dir{gone}",
                _GATEWAY_START,
            ),
            *_gateway_log(left),
        ]
    if state is remote_state.GatewayState.STARTING:
        return [
            Finding(
                Severity.INFO,
                "gateway",
                f"process {gateway.pid} holds the gateway's lock but is not ready yet: it is "
                "connecting to NATS or waiting for JetStream",
                "its own output says which; if it stays so, stop it and start it with -v",
            )
        ]
    snapshot = gateway.snapshot or {}
    if state is remote_state.GatewayState.STUCK:
        age = gateway.age_s or 0.0
        return [
            Finding(
                Severity.WARNING,
                "gateway",
                f"process {gateway.pid} runs, but its status was last written {age:.0f} s ago "
                "(every few seconds when it works): it may be stuck",
                "look at its output; restart it",
            ),
            *_gateway_log(snapshot),
        ]
    findings = [_running_finding(gateway.pid, snapshot)]
    server = snapshot.get("server")
    server = server if isinstance(server, dict) else {}
    if snapshot.get("connected") is not True:
        findings.append(
            Finding(
                Severity.WARNING,
                "gateway",
                "not connected to NATS: it reconnects by itself; meanwhile sends to other "
                "machines are refused unreachable",
                "check that the server runs and this machine reaches it",
            )
        )
    if server.get("jetstream") == "unavailable":
        findings.append(
            Finding(
                Severity.ERROR,
                "gateway",
                "the NATS server has no JetStream: sessions are neither published nor found",
                "enable JetStream on the server (nats-server -js, or 'jetstream {}' in its "
                "configuration; remote deploy writes it)",
            )
        )
    if snapshot.get("permissions") == "open":
        findings.append(
            Finding(
                Severity.WARNING,
                "gateway",
                "the NATS deployment enforces no per-machine permissions: any client that can "
                "connect may read every message and disturb the traffic",
                "set it up with pi-cross-session remote deploy (docs/remote.md, 'Who may do what')",
            )
        )
    bucket = snapshot.get("bucket")
    if isinstance(bucket, dict) and bucket.get("state") not in ("ok", "created", "repaired"):
        findings.append(
            Finding(
                Severity.WARNING,
                "gateway",
                f"the bucket: {sanitize.line(str(bucket.get('state')), 16)}: "
                f"{sanitize.line(str(bucket.get('detail')))}",
                "the deployment's administrator can put it back: pi-cross-session remote bucket",
            )
        )
    findings.extend(_skew_findings(snapshot))
    findings.extend(_gateway_log(snapshot))
    return findings


def _running_finding(pid: int | None, snapshot: dict[str, object]) -> Finding:
    server = snapshot.get("server")
    server = server if isinstance(server, dict) else {}
    where = server.get("connectedUrl") or ", ".join(str(u) for u in server.get("urls") or [])
    started = snapshot.get("startedAt")
    since = f", since {_when(started / 1000)}" if type(started) is int else ""
    tls = "TLS on" if server.get("tls") else "TLS off"
    jetstream = {"available": "JetStream available"}.get(
        str(server.get("jetstream")), "JetStream not known yet"
    )
    ready = "ready" if snapshot.get("ready") is not False else "not ready yet"
    return Finding(
        Severity.OK,
        "gateway",
        f"running, {ready} (pid {pid}{since}); server {sanitize.line(str(where or '?'), 200)}, "
        f"{tls}, {jetstream}",
    )


def _skew_findings(snapshot: dict[str, object]) -> list[Finding]:
    machines = snapshot.get("machines")
    findings = []
    for entry in machines if isinstance(machines, list) else []:
        skew = entry.get("skewMs") if isinstance(entry, dict) else None
        if type(skew) is not int:
            continue
        if -ENVELOPE_MAX_AHEAD_S * 1000 <= skew <= ENVELOPE_MAX_AGE_S * 1000:
            continue
        way = "ahead of" if skew < 0 else "behind"
        name = sanitize.line(str(entry.get("machine")), 32)
        findings.append(
            Finding(
                Severity.WARNING,
                "gateway",
                f"the clock of machine {name} is {abs(skew) / 1000:.1f} s {way} ours: what its "
                "sessions send is refused expired",
                f"set the clocks right (NTP) on {name} or here",
                kind="clock skew",
            )
        )
    return findings


def _gateway_log(snapshot: dict[str, object] | None) -> list[Finding]:
    """The gateway's last warnings and errors, as it kept them (past events: information)."""
    entries = None if snapshot is None else snapshot.get("recentErrors")
    if not isinstance(entries, list):
        return []
    findings = []
    for entry in entries[-_GATEWAY_LOG_SHOWN:]:
        if not isinstance(entry, dict):
            continue
        at = entry.get("at")
        when = _when(at / 1000) if type(at) is int else "?"
        level = sanitize.line(str(entry.get("level")), 8)
        findings.append(
            Finding(
                Severity.INFO,
                "gateway log",
                f"{when} {level}: {sanitize.line(str(entry.get('text')))}",
            )
        )
    return findings


def _remote_findings(facts: remote_state.RemoteFacts, now_s: float) -> list[Finding]:
    """The remote plane of this agent dir: one line when it is not set up."""
    if not facts.set_up:
        return [
            Finding(
                Severity.OK,
                _REMOTE,
                "not set up for this agent dir (nothing to check); to join other machines: "
                "pi-cross-session remote init --machine NAME (docs/remote.md)",
            )
        ]
    findings = _identity_findings(facts)
    if not facts.extra:
        findings.append(
            Finding(
                Severity.WARNING,
                _REMOTE,
                "the [remote] extra is not installed: the gateway cannot run here",
                "pip install 'pi-cross-session[remote]'",
            )
        )
    findings.append(_credentials_finding(facts, now_s))
    findings.append(_trust_finding(facts))
    findings.extend(_gateway_findings(facts))
    return findings


# -- assembly --------------------------------------------------------------------------------------


def _bounded(findings: list[Finding]) -> list[Finding]:
    """At most :data:`DOCTOR_FINDINGS_PER_KIND` findings of one kind; the rest are counted."""
    shown: list[Finding] = []
    dropped: dict[str, list[Finding]] = defaultdict(list)
    counts: dict[str, int] = defaultdict(int)
    for finding in findings:
        if finding.kind:
            counts[finding.kind] += 1
            if counts[finding.kind] > DOCTOR_FINDINGS_PER_KIND:
                dropped[finding.kind].append(finding)
                continue
        shown.append(finding)
    for kind, rest in dropped.items():
        worst = max((f.severity for f in rest), key=_RANK.__getitem__)
        shown.append(
            Finding(
                worst,
                "doctor",
                f"{len(rest)} more findings of the kind '{kind}' are not shown (doctor shows "
                f"{DOCTOR_FINDINGS_PER_KIND} of each kind)",
            )
        )
    return shown


def _cli_instance_ids(locations: Locations) -> frozenset[str]:
    """The command line's sender identities (every one of its pool), read-only."""
    return frozenset(cli_identity.known_instance_ids(locations))


async def diagnose(
    locations: Locations | None = None, *, window: int = MAX_LISTED_REGISTRATIONS
) -> list[Finding]:
    """Every finding for this environment, in a stable order. Changes nothing.

    ``window`` is the number of registrations a listing reads (the contract's 512; tests use
    fewer).
    """
    where = locations or environment.resolve()

    def gather() -> Survey:
        return survey(where, _cli_instance_ids(where), window=window)

    found = await anyio.to_thread.run_sync(gather)
    findings = _agent_dir_findings(where, found)
    findings.append(
        _dir_finding("peers dir", found.peers_dir, starting="created when a session starts")
    )
    if found.listing_error is not None:
        findings.append(
            Finding(Severity.ERROR, "peers dir", f"cannot be listed: {found.listing_error}")
        )
    findings.append(
        _dir_finding("runtime dir", found.runtime_dir, starting="created when a session starts")
    )
    overflow = _window_finding(found)
    if overflow is not None:
        findings.append(overflow)
    if found.temps:
        findings.append(
            Finding(
                Severity.INFO,
                "peers dir",
                f"{found.temps} leftover temporary file(s) from interrupted writes; no listing "
                "reads them",
            )
        )

    verdicts, fixed = await _check_valid(where, found)
    sampled = any(not entry.in_window for entry in found.entries)
    decoys, grouped = _decoy_findings(verdicts, found.window, sampled=sampled)
    findings.extend(decoys)
    by_id = {entry.instance_id: entry for entry in found.entries}
    for entry in sorted(found.entries, key=lambda e: (not e.in_window, e.instance_id)):
        if entry.instance_id in fixed:
            findings.append(fixed[entry.instance_id])
        elif entry.instance_id in grouped:
            continue
        elif entry.registration is not None:
            verdict = next(v for v in verdicts if v.entry is entry)
            if entry.in_window or entry.instance_id in found.past_window:
                findings.append(_valid_finding(verdict, found.window))
        elif entry.in_window or entry.instance_id in found.past_window:
            findings.append(_entry_finding(entry, past=not entry.in_window))
    for socket_entry in found.sockets:
        finding = _socket_finding(socket_entry, by_id.get(socket_entry.instance_id))
        if finding is not None:
            findings.append(finding)
    if found.sockets_unchecked:
        findings.append(
            Finding(
                Severity.INFO,
                "runtime dir",
                f"{found.sockets_unchecked} more sockets were not checked",
            )
        )
    if found.total == 0 and found.listing_error is None:
        findings.append(Finding(Severity.INFO, "sessions", "no session is registered"))
    now = time.time()
    remote = await anyio.to_thread.run_sync(lambda: remote_state.read(where, now_s=now))
    findings.extend(_remote_findings(remote, now))
    return _bounded(findings)


async def _check_valid(
    where: Locations, found: Survey
) -> tuple[list[_Verdict], dict[str, Finding]]:
    """Probe every valid registration read (window, sample, past-window sockets) at once."""
    exchangers: dict[str | None, Exchanger] = {None: Exchanger(where, fs)}
    for spelling in found.spellings:
        exchangers[spelling.agent_dir] = Exchanger(spelling.locations, fs)
    verdicts: list[_Verdict] = []
    fixed: dict[str, Finding] = {}

    async def check(entry: Entry) -> None:
        key = None if entry.spelling is None else entry.spelling.agent_dir
        outcome = await _check(entry, exchangers[key], found.cli_instance_ids)
        if isinstance(outcome, Finding):
            fixed[entry.instance_id] = outcome
        else:
            verdicts.append(outcome)

    async with anyio.create_task_group() as group:
        for entry in found.entries:
            if entry.registration is not None:
                group.start_soon(check, entry)
    order = {entry.instance_id: index for index, entry in enumerate(found.entries)}
    verdicts.sort(key=lambda v: order[v.entry.instance_id])
    return verdicts, fixed


# -- output ----------------------------------------------------------------------------------------


def is_broken(findings: list[Finding]) -> bool:
    """True when something is broken (an error); warnings alone are not."""
    return any(f.severity is Severity.ERROR for f in findings)


def report_text(findings: list[Finding]) -> str:
    """One line per finding (``severity subject: detail``) and its fix below it, indented."""
    lines = []
    for finding in findings:
        lines.append(
            f"{finding.severity:<8}{sanitize.line(finding.subject)}: "
            f"{sanitize.line(finding.detail)}"
        )
        if finding.fix:
            lines.append(f"{'':<8}fix: {sanitize.line(finding.fix)}")
    return "\n".join(lines)


def report_json(findings: list[Finding]) -> str:
    """``{"findings": [...], "healthy": bool}``, with every unsafe character escaped."""
    data = [
        {
            "severity": str(f.severity),
            "subject": f.subject,
            "detail": f.detail,
            "fix": f.fix,
            "kind": f.kind,
        }
        for f in findings
    ]
    return sanitize.dumps({"findings": data, "healthy": not is_broken(findings)}, indent=2)


__all__ = [
    "Finding",
    "Severity",
    "diagnose",
    "is_broken",
    "report_json",
    "report_text",
]
