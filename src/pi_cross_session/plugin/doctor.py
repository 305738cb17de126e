"""``pi-cross-session doctor``: find what keeps sessions from seeing or reaching each other.

Read-only: it judges the agent dir, the peers dir, the runtime dir, every registration and every
socket with the same rules the sessions use, and changes nothing. Each finding says what is wrong,
how much it matters, and how to fix it.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from enum import StrEnum
from functools import partial

import anyio

from pi_cross_session.plugin import cli_identity
from pi_cross_session.protocol import paths
from pi_cross_session.protocol.errors import CrossSessionError
from pi_cross_session.protocol.exchange import ExchangeError, Exchanger
from pi_cross_session.protocol.limits import MAX_LISTED_REGISTRATIONS
from pi_cross_session.protocol.paths import Locations, instance_id_from_filename
from pi_cross_session.protocol.registration import Registration, parse_registration
from pi_cross_session.protocol.text import clean_line
from pi_cross_session.security import fs


class Severity(StrEnum):
    """How much a finding matters."""

    OK = "ok"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class Finding:
    """One observation: what, how bad, and how to fix it (empty when nothing needs doing)."""

    severity: Severity
    subject: str
    detail: str
    fix: str = ""


def _dir_finding(label: str, path: str, *, missing_ok: str) -> Finding:
    found = fs.inspect_private_dir(path)
    if found.state is fs.DirState.PRIVATE:
        return Finding(Severity.OK, label, f"{path} is private (0700, ours)")
    if found.state is fs.DirState.MISSING:
        return Finding(Severity.INFO, label, f"{path} does not exist yet; {missing_ok}")
    if found.state is fs.DirState.LOOSE_MODE:
        return Finding(
            Severity.WARNING,
            label,
            f"{path}: {found.detail}",
            "sessions repair this themselves at start-up; or run: chmod 700 " + path,
        )
    return Finding(Severity.ERROR, label, f"{path}: {found.detail}", found.remedy)


def _scan_registrations(locations: Locations) -> tuple[list[Finding], list[Registration]]:
    findings: list[Finding] = []
    good: list[Registration] = []
    try:
        entries = sorted(os.listdir(locations.peers_dir))
    except FileNotFoundError:
        return findings, good
    except OSError as exc:
        findings.append(Finding(Severity.ERROR, "peers dir", f"cannot be listed: {exc}"))
        return findings, good
    names = [name for name in entries if instance_id_from_filename(name) is not None]
    temps = [name for name in entries if name.startswith(".") and name.endswith(".tmp")]
    if len(names) > MAX_LISTED_REGISTRATIONS:
        findings.append(
            Finding(
                Severity.WARNING,
                "peers dir",
                f"{len(names)} registrations; listings look at only {MAX_LISTED_REGISTRATIONS}",
                "remove registrations of sessions that are gone (a listing reaps dead ones)",
            )
        )
    if temps:
        findings.append(
            Finding(
                Severity.INFO,
                "peers dir",
                f"{len(temps)} leftover temporary file(s) from interrupted writes",
                "harmless; they can be deleted when no session is starting",
            )
        )
    for name in names:
        instance_id = instance_id_from_filename(name)
        assert instance_id is not None
        path = locations.registration_path(instance_id)
        subject = f"registration {instance_id[:8]}"
        try:
            raw = fs.read_registration_bytes(path)
            registration = parse_registration(
                raw,
                file_stem=instance_id,
                expected_socket_path=locations.socket_path(instance_id),
            )
        except CrossSessionError as exc:
            findings.append(
                Finding(
                    Severity.WARNING,
                    subject,
                    f"ignored by every session: {clean_line(str(exc), 300)}",
                    f"remove {path} if no running session owns it",
                )
            )
            continue
        good.append(registration)
    return findings, good


def _cli_instance_id(locations: Locations) -> str | None:
    """The command line's own sender identity, if one exists (read-only)."""
    path = os.path.join(cli_identity.state_dir(locations), cli_identity.IDENTITY_FILE)
    try:
        identity = cli_identity.parse_identity(fs.read_registration_bytes(path))
    except CrossSessionError:
        return None
    return None if identity is None else identity.instance_id


async def _check_peer(
    locations: Locations,
    exchanger: Exchanger,
    registration: Registration,
    cli_instance_id: str | None,
) -> Finding:
    who = f"{clean_line(registration.name)} [{registration.ref}]"
    subject = f"session {who}"
    if await anyio.to_thread.run_sync(fs.pid_is_dead, registration.pid):
        return Finding(
            Severity.INFO,
            subject,
            f"process {registration.pid} is gone; the registration is stale",
            "the next listing by any session removes it",
        )
    refusal = await anyio.to_thread.run_sync(fs.vet_socket, registration.socket_path)
    if refusal is not None:
        fix = "restart that session"
        if refusal == "unsafe_endpoint":
            fix = f"check the socket's owner and mode (must be 0600): {registration.socket_path}"
        elif registration.instance_id == cli_instance_id and refusal == "ENOENT":
            return Finding(Severity.OK, subject, "the command line, sending (it has no inbox)")
        return Finding(
            Severity.WARNING,
            subject,
            f"process {registration.pid} lives but its socket fails the check: {refusal}",
            fix,
        )
    try:
        await exchanger.probe(registration)
    except ExchangeError as exc:
        return Finding(
            Severity.WARNING,
            subject,
            f"process {registration.pid} lives but does not answer a probe: {exc.code}",
            "that session may be stuck or overloaded; it is hidden from listings meanwhile",
        )
    return Finding(
        Severity.OK, subject, f"live, {registration.status}, inbound {registration.inbound}"
    )


def _orphan_sockets(locations: Locations, registered: set[str]) -> list[Finding]:
    try:
        entries = os.listdir(locations.runtime_dir)
    except OSError:
        return []
    findings = []
    for name in sorted(entries):
        if not name.endswith(".sock") or name[: -len(".sock")] in registered:
            continue
        path = os.path.join(locations.runtime_dir, name)
        try:
            is_socket = stat.S_ISSOCK(os.lstat(path).st_mode)
        except OSError:
            continue
        findings.append(
            Finding(
                Severity.INFO,
                "runtime dir",
                f"{name} has no registration" + ("" if is_socket else " and is not a socket"),
                "left by a session that died; safe to delete when no session is starting",
            )
        )
    return findings


async def diagnose(locations: Locations | None = None) -> list[Finding]:
    """Every finding for this environment, in a stable order. Changes nothing."""
    where = locations or paths.resolve()
    findings = [
        Finding(
            Severity.OK,
            "agent dir",
            f"{where.agent_dir} (namespace {where.namespace}); sessions see each other only "
            "when they use this exact string",
        )
    ]
    if where.agent_dir.endswith("/") and len(where.agent_dir) > 1:
        findings.append(
            Finding(
                Severity.WARNING,
                "agent dir",
                "ends with '/': sessions that write the same dir without it cannot see this one",
                "set PI_CODING_AGENT_DIR without the trailing slash everywhere",
            )
        )
    findings.append(
        _dir_finding("peers dir", where.peers_dir, missing_ok="created when a session starts")
    )
    findings.append(
        _dir_finding("runtime dir", where.runtime_dir, missing_ok="created when a session starts")
    )
    scanned, registrations = await anyio.to_thread.run_sync(partial(_scan_registrations, where))
    findings.extend(scanned)
    exchanger = Exchanger(where, fs)
    cli_id = await anyio.to_thread.run_sync(_cli_instance_id, where)
    results: dict[str, Finding] = {}

    async def check(registration: Registration) -> None:
        results[registration.instance_id] = await _check_peer(
            where, exchanger, registration, cli_id
        )

    async with anyio.create_task_group() as group:
        for registration in registrations:
            group.start_soon(check, registration)
    findings.extend(results[r.instance_id] for r in registrations)
    registered = {r.instance_id for r in registrations}
    findings.extend(await anyio.to_thread.run_sync(_orphan_sockets, where, registered))
    if not registrations:
        findings.append(Finding(Severity.INFO, "sessions", "no session is registered"))
    return findings
