"""``doctor`` never advises removing what a live session owns, and names the spelling in use.

Each case is a real ``pi-cross-session inbox`` process (a live session) and a real ``doctor``
process. The two first cases are the two bad advices ``doctor`` once gave: it told a user to
delete the registration of a running session when the agent dir was spelled with a trailing slash,
and when a live session's registration had mode 0644.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pi_cross_session._internal.protocol.io import environment
from pi_cross_session._internal.protocol.paths import Locations
from tests.support.file_state import exists, mode_of, tree_state
from tests.support.processes import Inboxes, InboxProcess, Result, run_cli

#: Words of a fix that removes something.
REMOVAL_WORDS = ("remove", "delete", "rm ")


def removal_advice(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Every finding whose fix (or detail) tells the user to remove a file."""
    return [
        finding
        for finding in report["findings"]
        if any(word in f"{finding['fix']} {finding['detail']}".lower() for word in REMOVAL_WORDS)
    ]


def doctor(agent_dir: str, *args: str, cwd: Path | None = None) -> Result:
    return run_cli(agent_dir, "doctor", *args, cwd=cwd)


def mentions(report: dict[str, Any], *needles: str) -> list[dict[str, Any]]:
    """Findings whose subject, detail or fix contains every needle."""
    return [
        finding
        for finding in report["findings"]
        if all(
            needle in f"{finding['subject']} {finding['detail']} {finding['fix']}"
            for needle in needles
        )
    ]


# -- a trailing slash ------------------------------------------------------------------------------


def test_a_trailing_slash_names_the_spelling_live_sessions_use_and_removes_nothing(
    inboxes: Inboxes, private_agent_dir: Path, locations: Locations, tmp_path: Path
) -> None:
    ready = inboxes.start("builder").wait_event("ready")
    slashed = f"{private_agent_dir}/"
    before = tree_state(private_agent_dir, locations.runtime_dir)
    try:
        checked = doctor(slashed, "--json")
        text = doctor(slashed)
    finally:
        # doctor must not have made the slashed namespace's runtime dir; remove it if it did.
        stray = environment.resolve(env={"PI_CODING_AGENT_DIR": slashed}).runtime_dir
        made_runtime_dir = exists(stray)
        if made_runtime_dir:
            os.rmdir(stray)
    assert not made_runtime_dir
    report = checked.json()
    assert removal_advice(report) == [], report
    assert mentions(report, "no session is registered") == [], report
    # The live session is named, with the spelling it uses and what to set.
    named = mentions(report, ready["ref"], str(private_agent_dir))
    assert named, report
    advice = mentions(report, f"PI_CODING_AGENT_DIR={private_agent_dir}")
    assert advice, report
    assert {finding["severity"] for finding in advice} == {"warning"}
    assert f"PI_CODING_AGENT_DIR={private_agent_dir}" in text.stdout
    assert "remove" not in text.stdout.lower()
    assert tree_state(private_agent_dir, locations.runtime_dir) == before


def test_without_the_slash_sessions_that_use_it_are_named_too(
    inboxes: Inboxes, private_agent_dir: Path, tmp_path: Path
) -> None:
    slashed = f"{private_agent_dir}/"
    slashed_runtime = environment.resolve(env={"PI_CODING_AGENT_DIR": slashed}).runtime_dir
    # Not through ``Inboxes``: a ``Path`` would drop the trailing slash.
    inbox = InboxProcess(slashed, "--name", "slashed", cwd=tmp_path)
    try:
        ready = inbox.wait_event("ready")
        report = doctor(str(private_agent_dir), "--json").json()
    finally:
        inbox.close()
        if exists(slashed_runtime):
            os.rmdir(slashed_runtime)
    assert removal_advice(report) == [], report
    assert mentions(report, ready["ref"]), report
    assert mentions(report, f"PI_CODING_AGENT_DIR={slashed}"), report


# -- a live session's registration at 0644 ---------------------------------------------------------


def test_a_live_registration_at_0644_gets_chmod_never_a_removal(
    inboxes: Inboxes, private_agent_dir: Path, locations: Locations
) -> None:
    ready = inboxes.start("loose").wait_event("ready")
    registration = locations.registration_path(ready["instanceId"])
    socket_path = locations.socket_path(ready["instanceId"])
    os.chmod(registration, 0o644)
    checked = doctor(str(private_agent_dir), "--json")
    assert checked.returncode == 0, checked
    report = checked.json()
    assert removal_advice(report) == [], report
    [finding] = mentions(report, f"chmod 600 {registration}")
    assert finding["severity"] == "warning"
    assert f"process {ready['pid']}" in finding["detail"]
    assert "0644" in finding["detail"]
    # The socket the session listens on is named as live, not as a leftover.
    [listening] = mentions(report, os.path.basename(socket_path))
    assert f"process {ready['pid']}" in listening["detail"]
    assert "safe" not in listening["fix"]
    assert mode_of(registration) == 0o644  # reported, not repaired
    assert exists(socket_path)


# -- read-only -------------------------------------------------------------------------------------


def test_a_mistyped_agent_dir_is_not_created(tmp_path: Path) -> None:
    mistyped = tmp_path / "agnet"
    runtime_dir = environment.resolve(env={"PI_CODING_AGENT_DIR": str(mistyped)}).runtime_dir
    try:
        checked = doctor(str(mistyped), "--json")
        text = doctor(str(mistyped))
        made = (exists(mistyped), exists(runtime_dir))
    finally:
        if exists(runtime_dir):
            os.rmdir(runtime_dir)
    assert made == (False, False)
    assert checked.returncode == 0, checked
    assert mentions(checked.json(), str(mistyped), "does not exist"), checked
    assert text.returncode == 0, text


def test_the_help_states_these_promises(private_agent_dir: Path) -> None:
    shown = run_cli(private_agent_dir, "doctor", "--help")
    assert shown.returncode == 0, shown
    text = " ".join(shown.stdout.split())
    assert "It changes and creates nothing" in text
    assert "suggests removing a file only when the process it names is gone" in text
    assert "another spelling of the agent dir" in text
    assert "Exit 1 when something is broken" in text
