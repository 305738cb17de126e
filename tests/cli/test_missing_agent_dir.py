"""``send`` and ``status`` never create an agent dir: a mistyped ``PI_CODING_AGENT_DIR`` is said
to be one (naming the dir, exit 1, nothing sent), and stays missing, so ``doctor`` can still say
"check its spelling" afterwards."""

from __future__ import annotations

import uuid
from pathlib import Path

from tests.support.processes import Inboxes, run_cli


def test_a_send_to_a_missing_agent_dir_creates_nothing_and_names_it(
    inboxes: Inboxes, tmp_path: Path
) -> None:
    inboxes.start("bob", busy=0)  # live, but under the agent dir spelled right
    typo = tmp_path / "agnet"
    sent = run_cli(typo, "send", "bob", "hello", cwd=tmp_path)
    assert sent.returncode == 1, sent
    assert sent.stderr.startswith(f"Message not sent: the agent dir {typo} does not exist"), sent
    assert "check its spelling (PI_CODING_AGENT_DIR" in sent.stderr
    assert not typo.exists()
    as_json = run_cli(typo, "send", "bob", "hello", "--json", cwd=tmp_path)
    assert as_json.returncode == 1, as_json
    report = as_json.json()
    assert (report["ok"], report["status"], report["messageWritten"]) == (
        False,
        "no_agent_dir",
        False,
    )
    assert str(typo) in report["error"]
    assert not typo.exists()
    # The dir is still missing, so doctor still points at the spelling.
    doctor = run_cli(typo, "doctor", cwd=tmp_path)
    assert "check its spelling" in doctor.stdout + doctor.stderr, doctor
    assert not typo.exists()


def test_a_status_question_in_a_missing_agent_dir_creates_nothing(tmp_path: Path) -> None:
    typo = tmp_path / "agnet"
    asked = run_cli(typo, "status", "bob", str(uuid.uuid4()), cwd=tmp_path)
    assert asked.returncode == 1, asked
    assert asked.stderr.startswith(f"Could not ask: the agent dir {typo} does not exist"), asked
    as_json = run_cli(typo, "status", "bob", str(uuid.uuid4()), "--json", cwd=tmp_path)
    assert as_json.returncode == 1, as_json
    assert as_json.json()["status"] == "no_agent_dir"
    assert not typo.exists()


def test_an_agent_dir_that_is_a_file_is_left_alone(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "agent-file"
    not_a_dir.write_text("notes")
    sent = run_cli(not_a_dir, "send", "bob", "hello", cwd=tmp_path)
    assert sent.returncode == 1, sent
    assert f"the agent dir {not_a_dir} is not a directory" in sent.stderr, sent
    assert not_a_dir.read_text() == "notes"
