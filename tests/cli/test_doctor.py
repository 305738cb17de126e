"""``pi-cross-session doctor``: what it finds, how it says to fix it, and that it changes nothing.

The command is run as a real process where the whole path matters (exit status, text and JSON
output, a live inbox on the other side); the single findings are checked through
:func:`doctor.diagnose` in-process, which is the same code and much faster.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pi_cross_session._internal.plugin import cli_identity, doctor
from pi_cross_session._internal.plugin.doctor import Finding, Severity
from pi_cross_session._internal.protocol.io import environment
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import Registration
from pi_cross_session._internal.security.io import fs
from tests.support.file_state import exists, listdir, mode_of, tree_state, write_text
from tests.support.processes import Inboxes, Result
from tests.support.socket_peers import make_registration, publish

Cli = Callable[..., Result]


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    done = subprocess.Popen(["true"])
    done.wait()
    assert fs.pid_is_dead(done.pid)
    return done.pid


def published(locations: Locations, name: str, **fields: Any) -> Registration:
    registration = make_registration(locations, name, **fields)
    publish(locations, registration)
    return registration


def orphan_socket(locations: Locations) -> str:
    """A real socket file in the runtime dir that no registration names."""
    fs.ensure_private_dir(locations.runtime_dir)
    path = locations.socket_path(secrets.token_hex(16))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(path)
    finally:
        listener.close()
    os.chmod(path, 0o600)
    return path


def by_subject(findings: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for finding in findings:
        grouped.setdefault(finding["subject"], []).append(finding)
    return grouped


def only(findings: list[Finding], subject: str) -> Finding:
    matching = [f for f in findings if f.subject == subject]
    assert len(matching) == 1, findings
    return matching[0]


# -- through the command line ------------------------------------------------------------------


def test_healthy_setup(inboxes: Inboxes, cli: Cli, locations: Locations) -> None:
    alpha = inboxes.start("alpha").wait_event("ready")
    beta = inboxes.start("beta", "--refuse").wait_event("ready")
    checked = cli("doctor", "--json")
    assert checked.returncode == 0, checked
    report = checked.json()
    assert report["healthy"] is True
    findings = report["findings"]
    assert {f["severity"] for f in findings} == {"ok"}, findings
    sessions = sorted((alpha, beta), key=lambda ready: ready["instanceId"])
    assert [f["subject"] for f in findings] == [
        "agent dir",
        "peers dir",
        "runtime dir",
        *(f"session {ready['name']} [{ready['ref']}]" for ready in sessions),
        "remote plane",
    ]
    grouped = by_subject(findings)
    assert locations.agent_dir in grouped["agent dir"][0]["detail"]
    assert grouped["peers dir"][0]["detail"] == f"{locations.peers_dir} is private (0700, ours)"
    assert grouped["runtime dir"][0]["detail"] == f"{locations.runtime_dir} is private (0700, ours)"
    assert grouped[f"session alpha [{alpha['ref']}]"][0]["detail"] == "live, idle, inbound accept"
    assert grouped[f"session beta [{beta['ref']}]"][0]["detail"] == "live, idle, inbound refuse"
    assert all(f["fix"] == "" for f in findings)
    # No remote identity here: one line says so, and it is nothing to fix.
    assert grouped["remote plane"][0]["detail"].startswith("not set up for this agent dir")

    text = cli("doctor")
    assert text.returncode == 0, text
    lines = text.stdout.splitlines()
    assert len(lines) == len(findings)
    assert all(line.startswith("ok      ") for line in lines), lines
    assert f"ok      session alpha [{alpha['ref']}]: live, idle, inbound accept" in lines


def test_a_messy_setup_is_reported_and_left_exactly_as_it_was(
    cli: Cli, locations: Locations, private_agent_dir: Path
) -> None:
    stale = published(locations, "ghost", pid=dead_pid())
    loose = published(locations, "loose")
    os.chmod(locations.registration_path(loose.instance_id), 0o644)
    Path(locations.peers_dir, f".{secrets.token_hex(16)}.{secrets.token_hex(4)}.tmp").write_text("")
    os.chmod(locations.peers_dir, 0o755)
    orphan = orphan_socket(locations)
    before = tree_state(private_agent_dir, locations.runtime_dir)

    checked = cli("doctor", "--json")
    assert checked.returncode == 0, checked  # warnings, no error
    report = checked.json()
    assert report["healthy"] is True
    grouped = by_subject(report["findings"])

    [peers_dir] = [f for f in grouped["peers dir"] if "mode" in f["detail"]]
    assert peers_dir["severity"] == "warning"
    assert peers_dir["detail"] == f"{locations.peers_dir}: mode 0755 instead of 0700"
    assert f"chmod 700 {locations.peers_dir}" in peers_dir["fix"]
    [temps] = [f for f in grouped["peers dir"] if "temporary" in f["detail"]]
    assert temps["severity"] == "info"

    [ignored] = grouped[f"registration {loose.instance_id[:8]}"]
    assert ignored["severity"] == "warning"
    assert ignored["detail"].startswith("ignored by every session: ")
    assert "0644" in ignored["detail"]
    # Its process (this test) runs: the fix repairs the mode, it never removes the file.
    assert ignored["fix"].startswith(f"chmod 600 {locations.registration_path(loose.instance_id)}")

    [gone] = grouped[f"session ghost [{stale.ref}]"]
    assert gone["severity"] == "info"
    assert "stale" in gone["detail"]
    assert f"process {stale.pid} is gone" in gone["detail"]

    [left] = grouped["runtime dir"][1:]
    assert left["severity"] == "info"
    assert left["detail"] == (
        f"{os.path.basename(orphan)} has no registration and no process listens on it"
    )
    assert left["fix"].endswith(f"rm {orphan}")

    text = cli("doctor")
    assert text.returncode == 0, text
    assert f"warning peers dir: {locations.peers_dir}: mode 0755 instead of 0700" in text.stdout
    fix = (
        f"fix: sessions repair this themselves at start-up; or run: chmod 700 {locations.peers_dir}"
    )
    assert f"        {fix}" in text.stdout
    assert f"info    session ghost [{stale.ref}]: process {stale.pid} is gone" in text.stdout

    assert tree_state(private_agent_dir, locations.runtime_dir) == before


def test_a_symlinked_peers_dir_is_an_error(cli: Cli, locations: Locations, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    os.symlink(elsewhere, locations.peers_dir)
    checked = cli("doctor", "--json")
    assert checked.returncode == 1, checked
    report = checked.json()
    assert report["healthy"] is False
    [finding] = by_subject(report["findings"])["peers dir"]
    assert finding["severity"] == "error"
    assert "symbolic link" in finding["detail"]
    assert "cannot start" in finding["fix"]
    assert os.path.islink(locations.peers_dir)
    assert list(elsewhere.iterdir()) == []


def test_a_live_session_with_a_loose_socket_gets_a_warning(
    inboxes: Inboxes, cli: Cli, locations: Locations
) -> None:
    ready = inboxes.start("sockpuppet").wait_event("ready")
    socket_path = locations.socket_path(ready["instanceId"])
    os.chmod(socket_path, 0o666)
    checked = cli("doctor", "--json")
    assert checked.returncode == 0, checked
    [finding] = by_subject(checked.json()["findings"])[f"session sockpuppet [{ready['ref']}]"]
    assert finding["severity"] == "warning"
    assert finding["detail"] == (
        f"process {ready['pid']} lives but its socket fails the check: unsafe_endpoint"
    )
    assert "must be 0600" in finding["fix"]
    assert socket_path in finding["fix"]
    assert mode_of(socket_path) == 0o666  # reported, not repaired


def test_a_refusing_session_that_lost_its_socket_is_not_ok(
    inboxes: Inboxes, cli: Cli, locations: Locations
) -> None:
    inbox = inboxes.start("do-not-disturb", "--refuse")
    ready = inbox.wait_event("ready")
    os.unlink(locations.socket_path(ready["instanceId"]))
    checked = cli("doctor", "--json")
    [finding] = by_subject(checked.json()["findings"])[f"session do-not-disturb [{ready['ref']}]"]
    assert finding["severity"] == "warning", finding
    assert "command line" not in finding["detail"]


# -- diagnose(), in-process --------------------------------------------------------------------


@pytest.mark.anyio
async def test_nothing_created_yet(locations: Locations, private_agent_dir: Path) -> None:
    findings = await doctor.diagnose(locations)
    assert only(findings, "peers dir").severity is Severity.INFO
    assert "does not exist yet" in only(findings, "peers dir").detail
    assert only(findings, "runtime dir").severity is Severity.INFO
    assert only(findings, "sessions").detail == "no session is registered"
    assert listdir(private_agent_dir) == []
    assert not exists(locations.runtime_dir)


@pytest.mark.anyio
async def test_a_loose_peers_dir_is_a_warning_with_a_chmod_fix(locations: Locations) -> None:
    os.makedirs(locations.peers_dir, mode=0o700)
    os.chmod(locations.peers_dir, 0o755)
    finding = only(await doctor.diagnose(locations), "peers dir")
    assert finding.severity is Severity.WARNING
    assert finding.fix.endswith(f"chmod 700 {locations.peers_dir}")
    assert mode_of(locations.peers_dir) == 0o755


@pytest.mark.anyio
async def test_a_loose_runtime_dir_is_a_warning(locations: Locations) -> None:
    os.makedirs(locations.runtime_dir, mode=0o700)
    os.chmod(locations.runtime_dir, 0o711)
    finding = only(await doctor.diagnose(locations), "runtime dir")
    assert finding.severity is Severity.WARNING
    assert "0711" in finding.detail
    assert mode_of(locations.runtime_dir) == 0o711


@pytest.mark.anyio
async def test_a_peers_dir_that_is_a_file_is_an_error(locations: Locations) -> None:
    write_text(locations.peers_dir, "not a dir")
    findings = [f for f in await doctor.diagnose(locations) if f.subject == "peers dir"]
    assert [f.severity for f in findings] == [Severity.ERROR, Severity.ERROR]
    assert "it is not a directory" in findings[0].detail
    assert findings[1].detail.startswith("cannot be listed:")


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
@pytest.mark.anyio
async def test_a_peers_dir_of_another_user_is_an_error(locations: Locations) -> None:
    os.makedirs(locations.peers_dir, mode=0o700)
    os.chown(locations.peers_dir, 65534, 65534)
    finding = only(await doctor.diagnose(locations), "peers dir")
    assert finding.severity is Severity.ERROR
    assert "owned by uid 65534" in finding.detail


@pytest.mark.anyio
async def test_a_registration_readable_by_others_is_ignored(locations: Locations) -> None:
    loose = published(locations, "loose")
    path = locations.registration_path(loose.instance_id)
    os.chmod(path, 0o644)
    finding = only(await doctor.diagnose(locations), f"registration {loose.instance_id[:8]}")
    assert finding.severity is Severity.WARNING
    assert finding.detail.startswith("ignored by every session:")
    assert "gives others access" in finding.detail
    assert f"it names process {os.getpid()} (" in finding.detail
    assert finding.fix.startswith(f"chmod 600 {path} (it names process {os.getpid()}")
    assert mode_of(path) == 0o644


@pytest.mark.anyio
async def test_a_registration_that_is_not_json_is_ignored(locations: Locations) -> None:
    fs.ensure_private_dir(locations.peers_dir)
    instance_id = secrets.token_hex(16)
    fs.write_registration(locations.peers_dir, instance_id, b"{ broken", still_current=lambda: True)
    finding = only(await doctor.diagnose(locations), f"registration {instance_id[:8]}")
    assert finding.severity is Severity.WARNING
    assert "not JSON" in finding.detail


@pytest.mark.anyio
async def test_a_stale_registration_is_info(locations: Locations) -> None:
    ghost = published(locations, "ghost", pid=dead_pid())
    finding = only(await doctor.diagnose(locations), f"session ghost [{ghost.ref}]")
    assert finding.severity is Severity.INFO
    assert "stale" in finding.detail
    assert exists(locations.registration_path(ghost.instance_id))  # not reaped


@pytest.mark.anyio
async def test_a_live_process_without_a_socket_is_a_warning(locations: Locations) -> None:
    mute = published(locations, "mute")  # our own pid: alive; no socket was ever made
    finding = only(await doctor.diagnose(locations), f"session mute [{mute.ref}]")
    assert finding.severity is Severity.WARNING
    assert finding.detail == f"process {mute.pid} lives but its socket fails the check: ENOENT"
    assert finding.fix == "restart that session"


@pytest.mark.anyio
async def test_a_socket_that_does_not_answer_is_a_warning(locations: Locations) -> None:
    deaf = published(locations, "deaf")
    fs.ensure_private_dir(locations.runtime_dir)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(deaf.socket_path)
        os.chmod(deaf.socket_path, 0o600)
        listener.listen(8)  # accepts connections into the backlog, never answers
        finding = only(await doctor.diagnose(locations), f"session deaf [{deaf.ref}]")
    finally:
        listener.close()
    assert finding.severity is Severity.WARNING
    assert "does not answer a probe: timeout" in finding.detail


@pytest.mark.anyio
@pytest.mark.parametrize("slot", [0, 2])
async def test_the_command_lines_own_registration_is_ok(locations: Locations, slot: int) -> None:
    """Any identity of the command line's pool, while it sends (it has no socket by design)."""
    async with cli_identity.holding(locations, [slot]) as held:
        findings = await doctor.diagnose(locations)
    ref = held.identity.instance_id[:8]
    finding = only(findings, f"session pi-cross-session-cli [{ref}]")
    assert finding.severity is Severity.OK
    assert "command line" in finding.detail


@pytest.mark.anyio
async def test_orphan_files_in_the_runtime_dir_are_info(locations: Locations) -> None:
    orphan = orphan_socket(locations)
    not_a_socket = locations.socket_path(secrets.token_hex(16))
    write_text(not_a_socket, "")
    findings = [f for f in await doctor.diagnose(locations) if f.subject == "runtime dir"]
    details = sorted(f.detail for f in findings[1:])
    assert details == sorted(
        [
            f"{os.path.basename(orphan)} has no registration and no process listens on it",
            f"{os.path.basename(not_a_socket)} has no registration and is not a socket",
        ]
    )
    assert all(f.severity is Severity.INFO for f in findings[1:])
    assert exists(orphan)
    assert exists(not_a_socket)


@pytest.mark.anyio
async def test_a_trailing_slash_in_the_agent_dir_is_a_warning(private_agent_dir: Path) -> None:
    slashed = environment.resolve(env={"PI_CODING_AGENT_DIR": f"{private_agent_dir}/"})
    try:
        findings = await doctor.diagnose(slashed)
    finally:
        shutil.rmtree(slashed.runtime_dir, ignore_errors=True)
    warnings = [f for f in findings if f.subject == "agent dir" and f.severity is Severity.WARNING]
    assert len(warnings) == 1
    assert "trailing slash" in warnings[0].fix


@pytest.mark.anyio
async def test_diagnose_changes_nothing(locations: Locations, private_agent_dir: Path) -> None:
    published(locations, "ghost", pid=dead_pid())
    published(locations, "mute")
    loose = published(locations, "loose")
    os.chmod(locations.registration_path(loose.instance_id), 0o640)
    os.chmod(locations.peers_dir, 0o750)
    orphan_socket(locations)
    os.chmod(locations.runtime_dir, 0o701)
    before = tree_state(private_agent_dir, locations.runtime_dir)
    await doctor.diagnose(locations)
    assert tree_state(private_agent_dir, locations.runtime_dir) == before
