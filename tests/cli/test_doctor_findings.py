"""Each finding of ``doctor``: what it says, and that a removal is advised only on proof.

Most cases call :func:`doctor.diagnose` in-process (the same code the command runs); the ones about
the command's output (bounded text, escaping, exit status) run it as a real process. Every case
also checks the rule doctor lives by: a fix that removes a file names a process proven gone, or a
socket nobody listens on.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from pi_cross_session._internal.plugin import doctor
from pi_cross_session._internal.plugin.doctor import Finding, Severity
from pi_cross_session._internal.plugin.doctor_settings import (
    DOCTOR_EXAMPLES,
    DOCTOR_FINDINGS_PER_KIND,
    DOCTOR_SAMPLE_PAST_WINDOW,
)
from pi_cross_session._internal.protocol import paths
from pi_cross_session._internal.protocol.io import environment
from pi_cross_session._internal.protocol.limits import (
    MAX_LISTED_REGISTRATIONS,
)
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.security.io import fs
from tests.cli.test_doctor import dead_pid, published
from tests.files import files
from tests.support.file_state import exists, tree_state
from tests.support.processes import Inboxes, run_cli

pytestmark = pytest.mark.anyio

#: What a fix that tells the user to remove a file says.
REMOVAL_WORDS = ("rm ", "delete", "safe to remove")


def removals(findings: list[Finding]) -> list[Finding]:
    """Findings whose fix tells the user to remove something."""
    return [f for f in findings if any(word in f.fix.lower() for word in REMOVAL_WORDS)]


def about(findings: list[Finding], needle: str) -> list[Finding]:
    return [f for f in findings if needle in f"{f.subject} {f.detail} {f.fix}"]


def raw_record(locations: Locations, **fields: object) -> dict[str, object]:
    return files.record(locations, "raw", **fields)


@contextmanager
def listening(path: str) -> Iterator[socket.socket]:
    """A socket of ours at ``path`` with a listener behind it (this test process)."""
    fs.ensure_private_dir(os.path.dirname(path))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        os.chmod(path, 0o600)
        listener.listen(8)
        yield listener


def bound_only(path: str) -> None:
    """A socket file nobody listens on (a session that died leaves one)."""
    fs.ensure_private_dir(os.path.dirname(path))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(path)
    os.chmod(path, 0o600)


# -- registrations the listing refuses ---------------------------------------------------------


async def test_a_refused_registration_of_a_gone_process_may_be_removed(
    locations: Locations,
) -> None:
    ghost = published(locations, "ghost", pid=dead_pid())
    path = locations.registration_path(ghost.instance_id)
    os.chmod(path, 0o640)
    [finding] = about(await doctor.diagnose(locations), ghost.ref)
    assert finding.severity is Severity.WARNING
    assert f"process {ghost.pid}, which it names, is gone" in finding.detail
    assert finding.fix == f"its process is gone and no listing removes a file it refuses: rm {path}"


async def test_a_refused_registration_naming_no_process_is_left_alone(
    locations: Locations,
) -> None:
    instance_id = secrets.token_hex(16)
    path = files.write_raw(locations, instance_id, b"not json at all", mode=0o644)
    findings = await doctor.diagnose(locations)
    [finding] = about(findings, instance_id[:8])
    assert "it names no process that can be checked" in finding.detail
    assert "find out who wrote it" in finding.fix
    assert removals(findings) == []
    assert exists(path)


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
async def test_a_registration_of_another_owner_names_the_owner(locations: Locations) -> None:
    alive = published(locations, "theirs")
    path = locations.registration_path(alive.instance_id)
    os.chown(path, 65534, 65534)
    findings = await doctor.diagnose(locations)
    [finding] = about(findings, alive.ref)
    assert "owned by uid 65534" in finding.detail
    assert f"only {fs.describe_uid(65534)} or an administrator" in finding.fix
    assert removals(findings) == []


async def test_an_invalid_registration_of_a_running_process_is_left_alone(
    locations: Locations,
) -> None:
    body = raw_record(locations, version=3)  # names this test process
    path = files.write_record(locations, body)
    findings = await doctor.diagnose(locations)
    [finding] = about(findings, str(body["instanceId"])[:8])
    assert finding.detail.startswith("ignored by every session: ")
    assert f"it names process {os.getpid()} (" in finding.detail
    assert "leave it in place" in finding.fix
    assert removals(findings) == []
    assert exists(path)


async def test_an_invalid_registration_of_a_gone_process_may_be_removed(
    locations: Locations,
) -> None:
    gone = dead_pid()
    body = raw_record(locations, status="sleeping", pid=gone)
    path = files.write_record(locations, body)
    [finding] = about(await doctor.diagnose(locations), str(body["instanceId"])[:8])
    assert finding.fix == f"its process is gone: rm {path}"


async def test_a_registration_of_an_unknown_namespace_says_so(locations: Locations) -> None:
    instance_id = secrets.token_hex(16)
    elsewhere = paths.runtime_dir_for("0123456789ab", locations.uid)
    body = raw_record(
        locations, instanceId=instance_id, socketPath=f"{elsewhere}/{instance_id}.sock"
    )
    files.write_record(locations, body)
    findings = await doctor.diagnose(locations)
    [finding] = about(findings, instance_id[:8])
    assert "another spelling of this agent dir (namespace 0123456789ab)" in finding.detail
    assert "pi-cross-session paths" in finding.fix
    assert removals(findings) == []


# -- sockets -----------------------------------------------------------------------------------


async def test_a_listener_without_a_registration_is_named_and_left_alone(
    locations: Locations,
) -> None:
    path = locations.socket_path(secrets.token_hex(16))
    with listening(path):
        findings = await doctor.diagnose(locations)
    [finding] = about(findings, os.path.basename(path))
    assert finding.severity is Severity.WARNING
    assert f"process {os.getpid()} (" in finding.detail
    assert "listens on it, but it has no registration" in finding.detail
    assert removals(findings) == []


async def test_a_silent_socket_whose_registration_names_a_running_process_is_left_alone(
    locations: Locations,
) -> None:
    loose = published(locations, "loose")  # this test process, alive
    os.chmod(locations.registration_path(loose.instance_id), 0o644)
    bound_only(loose.socket_path)
    findings = await doctor.diagnose(locations)
    [socket_finding] = about(findings, os.path.basename(loose.socket_path))
    assert "no process listens on it" in socket_finding.detail
    assert f"process {os.getpid()}" in socket_finding.detail
    assert removals(findings) == []


async def test_a_silent_socket_of_a_gone_process_may_be_removed(locations: Locations) -> None:
    ghost = published(locations, "ghost", pid=dead_pid())
    os.chmod(locations.registration_path(ghost.instance_id), 0o600)
    instance_id = secrets.token_hex(16)
    files.write_raw(locations, instance_id, b"{}", mode=0o644)
    orphan = locations.socket_path(instance_id)
    bound_only(orphan)
    findings = await doctor.diagnose(locations)
    [finding] = about(findings, os.path.basename(orphan))
    assert finding.fix.endswith(f"rm {orphan}")


# -- spellings of the agent dir ------------------------------------------------------------------


def test_a_relative_agent_dir_is_a_warning_with_the_absolute_path(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    (workdir / "agent").mkdir(parents=True)
    relative = environment.resolve(env={"PI_CODING_AGENT_DIR": "agent"})
    try:
        report = run_cli("agent", "doctor", "--json", cwd=workdir).json()
    finally:
        if exists(relative.runtime_dir):
            os.rmdir(relative.runtime_dir)
    [finding] = [f for f in report["findings"] if "relative" in f["detail"]]
    assert finding["severity"] == "warning"
    assert finding["fix"] == f"set an absolute path: PI_CODING_AGENT_DIR={workdir / 'agent'}"


def test_sessions_that_use_the_real_path_of_a_symlinked_agent_dir_are_named(
    inboxes: Inboxes, private_agent_dir: Path, tmp_path: Path
) -> None:
    alias = tmp_path / "alias"
    alias.symlink_to(private_agent_dir)
    ready = inboxes.start("real").wait_event("ready")
    report = run_cli(alias, "doctor", "--json").json()
    findings = report["findings"]
    [spelling] = [f for f in findings if f["subject"] == "agent dir" and f["severity"] == "warning"]
    assert "with symbolic links resolved" in spelling["detail"]
    assert spelling["fix"].startswith(f"set PI_CODING_AGENT_DIR={private_agent_dir} here")
    [session] = [f for f in findings if ready["ref"] in f["subject"]]
    assert session["detail"].startswith(f"live, process {ready['pid']}")


# -- decoys and the window -----------------------------------------------------------------------


def test_ten_thousand_decoys_give_a_short_report_naming_their_process(
    inboxes: Inboxes, locations: Locations, private_agent_dir: Path
) -> None:
    ready = inboxes.start("real").wait_event("ready")
    with files.unrelated_process() as pid:
        decoys = set(files.write_decoys(locations, 10_000, pid))
        # The real session's heartbeat may rewrite its own registration meanwhile (every 30 s).
        own = [locations.registration_path(ready["instanceId"])]
        before = tree_state(private_agent_dir, locations.runtime_dir, rewritten=own)
        text = run_cli(private_agent_dir, "doctor")
        checked = run_cli(private_agent_dir, "doctor", "--json")
        after = tree_state(private_agent_dir, locations.runtime_dir, rewritten=own)
    assert after == before
    report = checked.json()
    findings = report["findings"]
    # Bounded: a few kilobytes, not one line per decoy (it printed 2 MB before).
    assert len(text.stdout.encode()) < 8_000, text.stdout
    assert len(findings) < 20, findings
    [window] = [f for f in findings if f["subject"] == "peers dir" and "unread" in f["detail"]]
    assert window["detail"].startswith(
        f"10001 registrations; a listing reads only the first {MAX_LISTED_REGISTRATIONS} "
        f"in directory order and leaves {10_001 - MAX_LISTED_REGISTRATIONS} unread"
    )
    [group] = [f for f in findings if f["kind"] == "decoys"]
    assert group["subject"] == f"registrations of process {pid}"
    assert f"process {pid} (sleep), which runs but answers on none" in group["detail"]
    named = [word.strip(",") for word in group["detail"].split() if len(word.strip(",")) == 32]
    assert len(named) == DOCTOR_EXAMPLES
    assert set(named) <= decoys
    # The sample past the window holds decoys, and the real session if it landed there.
    sampled = re.search(r"\(and (\d+) of those sampled past them\)", group["detail"])
    assert sampled is not None
    assert int(sampled.group(1)) in (DOCTOR_SAMPLE_PAST_WINDOW - 1, DOCTOR_SAMPLE_PAST_WINDOW)
    assert group["fix"].startswith("no safe removal exists")
    assert f"ps -p {pid}" in group["fix"]
    assert "PI_CODING_AGENT_DIR" in group["fix"]
    assert not any("rm " in f["fix"] for f in findings)
    # The real session: live, or (more likely) past the window, which is an error.
    [real] = [f for f in findings if ready["ref"] in f["subject"]]
    if real["severity"] == "error":
        assert "past the 512-entry window" in real["detail"]
        assert checked.returncode == 1
    else:
        assert real["detail"] == "live, idle, inbound accept"


async def test_a_few_registrations_of_one_silent_process_are_one_finding(
    locations: Locations,
) -> None:
    with files.unrelated_process() as pid:
        ids = files.write_decoys(locations, 3, pid)
        findings = await doctor.diagnose(locations)
    [group] = [f for f in findings if f.kind == "decoys"]
    assert group.detail.startswith(f"3 of the registrations a listing reads name process {pid} (")
    assert all(instance_id in group.detail for instance_id in ids)
    assert not any(instance_id[:8] in f.subject for f in findings for instance_id in ids)
    assert removals(findings) == []


async def test_findings_of_one_kind_are_capped_and_counted(locations: Locations) -> None:
    for _ in range(DOCTOR_FINDINGS_PER_KIND + 5):
        files.write_record(locations, raw_record(locations, version=3))
    findings = await doctor.diagnose(locations)
    invalid = [f for f in findings if f.kind == "invalid registration"]
    assert len(invalid) == DOCTOR_FINDINGS_PER_KIND
    [more] = [f for f in findings if f.subject == "doctor"]
    assert more.detail.startswith("5 more findings of the kind 'invalid registration'")
    assert more.severity is Severity.WARNING


async def test_a_stale_registration_past_the_window_may_be_removed(locations: Locations) -> None:
    """A listing reaps only what it reads: past the window, nobody ever will."""
    gone = dead_pid()
    stale = [published(locations, f"stale-{n}", pid=gone) for n in range(3)]
    for registration in stale:
        bound_only(registration.socket_path)  # how doctor finds the ones past the window
    findings = await doctor.diagnose(locations, window=1)
    fixes = sorted(f.fix for f in findings if f.kind == "stale registration")
    past = [
        f"no listing reads it (it is past the window), so none removes it: rm {path}"
        for path in sorted(locations.registration_path(r.instance_id) for r in stale)
    ]
    assert len(fixes) == 3
    assert fixes.count("the next listing by any session removes it") == 1
    assert set(fixes) - {"the next listing by any session removes it"} <= set(past)


# -- the output ----------------------------------------------------------------------------------


def test_a_hostile_process_name_is_escaped_in_text_and_json(
    locations: Locations, private_agent_dir: Path, tmp_path: Path
) -> None:
    # A process's name is the file name it was started from: a link named with an escape
    # sequence gives ``sleep`` that name.
    disguised = tmp_path / "evil\x1b[2Jname"
    disguised.symlink_to("/bin/sleep")
    child = subprocess.Popen([str(disguised), "600"])
    try:
        body = raw_record(locations, pid=child.pid)
        files.write_raw(locations, str(body["instanceId"]), files.record_bytes(body), mode=0o644)
        text = run_cli(private_agent_dir, "doctor")
        as_json = run_cli(private_agent_dir, "doctor", "--json")
    finally:
        child.kill()
        child.wait()
    assert "\x1b" not in text.stdout
    assert f"process {child.pid} (evil\\x1b[2Jname)" in text.stdout
    assert "\x1b" not in as_json.stdout
    assert f"process {child.pid} (evil\\\\x1b[2Jname)" in as_json.stdout
