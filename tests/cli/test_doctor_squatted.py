"""A runtime dir someone else made first: start-up says who and what to do, and doctor agrees.

The runtime dir's name, ``/tmp/pi-peers-<uid>-<ns12>``, is predictable from the agent dir, so
another local user can create it before our first session does (spec §2 says start-up then fails;
it still does). Making a real dir of another owner needs root; without root the same message is
checked through the file layer's ``uid=`` seam in ``tests/files/test_fs.py``, and a symlink (which
needs no root) is squatted here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from pi_cross_session._internal.plugin.render import host_status
from pi_cross_session._internal.protocol.limits import DISPLAY_DIAGNOSTIC_CODE_POINTS
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.security.io import fs
from tests.support.processes import Inboxes, Result, run_cli

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")


@pytest.fixture
def squatted(locations: Locations) -> Iterator[str]:
    """The runtime dir, created first by uid 65534 (another user)."""
    os.mkdir(locations.runtime_dir, 0o755)
    os.chown(locations.runtime_dir, NOBODY, NOBODY)
    yield locations.runtime_dir
    os.rmdir(locations.runtime_dir)


def start_failure(inboxes: Inboxes) -> tuple[int, str]:
    inbox = inboxes.start("squatted", wait=False)
    code = inbox.process.wait(timeout=15)
    inbox.close()
    return code, "\n".join(inbox.err_lines)


def doctor_runtime_dir(private_agent_dir: Path) -> tuple[Result, dict[str, str]]:
    checked = run_cli(private_agent_dir, "doctor", "--json")
    [finding] = [f for f in checked.json()["findings"] if f["subject"] == "runtime dir"]
    return checked, finding


@needs_root
def test_start_up_names_the_owner_and_what_to_do(
    inboxes: Inboxes, squatted: str, private_agent_dir: Path
) -> None:
    code, errors = start_failure(inboxes)
    assert code == 1
    assert "Traceback" not in errors, errors
    owner = fs.describe_uid(NOBODY)
    assert f"refusing '{squatted}': owned by {owner}, not by you (uid {os.getuid()})" in errors
    assert "another user created it first" in errors
    assert "Use another agent dir (set PI_CODING_AGENT_DIR" in errors
    assert "ask an administrator to remove it" in errors
    assert os.listdir(squatted) == []  # nothing was created in someone else's dir


@needs_root
def test_doctor_diagnoses_a_squatted_runtime_dir(squatted: str, private_agent_dir: Path) -> None:
    checked, finding = doctor_runtime_dir(private_agent_dir)
    assert checked.returncode == 1, checked
    assert checked.json()["healthy"] is False
    assert finding["severity"] == "error"
    assert finding["detail"] == (
        f"{squatted}: owned by {fs.describe_uid(NOBODY)}, not by you (uid {os.getuid()}): "
        "another user created it first"
    )
    assert "PI_CODING_AGENT_DIR" in finding["fix"]
    assert "administrator" in finding["fix"]
    text = run_cli(private_agent_dir, "doctor")
    assert text.returncode == 1
    assert f"error   runtime dir: {squatted}: owned by " in text.stdout


def test_a_symlink_in_place_of_the_runtime_dir_is_named_with_its_target(
    inboxes: Inboxes, locations: Locations, private_agent_dir: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    os.symlink(elsewhere, locations.runtime_dir)
    try:
        code, errors = start_failure(inboxes)
        checked, finding = doctor_runtime_dir(private_agent_dir)
    finally:
        os.unlink(locations.runtime_dir)
    assert code == 1
    assert f"it is a symbolic link to '{elsewhere}'" in errors
    assert "Move it aside" in errors
    assert checked.returncode == 1
    assert finding["detail"].startswith(f"{locations.runtime_dir}: it is a symbolic link to ")
    assert "Move it aside" in finding["fix"]
    assert list(elsewhere.iterdir()) == []


def test_the_whole_refusal_fits_the_sessions_start_failure_notice(locations: Locations) -> None:
    """A pi-python session shows the start-up error in one notice cut at 400 code points: the
    remedy must survive the cut for an ordinary runtime dir path."""
    fs.ensure_private_dir(locations.runtime_dir)
    with pytest.raises(fs.UnsafePathError) as refused:
        fs.ensure_private_dir(locations.runtime_dir, uid=os.getuid() + 1)
    shown = host_status.inbox_start_failed(refused.value)
    assert len(str(refused.value)) <= DISPLAY_DIAGNOSTIC_CODE_POINTS
    assert refused.value.remedy in shown
