"""``pi-cross-session log`` stays up, and inert, on whatever the journals hold: hostile names and
summaries come out escaped (never a raw ESC), lines that are not events (binary, invalid UTF-8,
over-long, of the wrong shape, cut by a kill) are skipped and counted in one note, and a journal
that is not ours (a symbolic link, loose modes) is refused and said, never read or repaired."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest

from pi_cross_session._internal.security.io.journal import Direction, Event, EventKind, Party
from pi_cross_session._internal.security.io.journal_network import journal_root
from tests.journal.conftest import Journals
from tests.support.hostile_text import (
    ALL_ATTACKS,
    ATTACKS,
    FORGED_LINE,
    assert_safe_json_text,
    assert_safe_line,
)
from tests.support.processes import Result, run_cli

pytestmark = pytest.mark.hostile

GOOD = Party("good", "a1" * 16)
OTHER = Party("other", "b2" * 16)
M1 = "44444444-4444-4444-8444-444444444444"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def event(at: int, name: str, **more: object) -> Event:
    sender = Party(name, GOOD.instance_id)
    return Event(at, EventKind.SENT, M1, sender, OTHER, direction=Direction.OUT, **more)  # type: ignore[arg-type]


def good_line(at: int, name: str = "plain") -> bytes:
    return json.dumps(event(at, name).to_json()).encode() + b"\n"


def run_log(agent_dir: Path, *args: str) -> Result:
    return run_cli(agent_dir, "log", *args, cwd=agent_dir.parent)


def test_hostile_names_and_summaries_come_out_escaped(
    journals: Journals, private_agent_dir: Path
) -> None:
    t0 = now_ms() - 60_000
    names = list(ATTACKS.values())
    journals.write(
        GOOD.instance_id,
        *(
            event(t0 + i, name, summary=ALL_ATTACKS[:200], text=ALL_ATTACKS)
            for i, name in enumerate(names)
        ),
        keep_text=True,
    )

    people = run_log(private_agent_dir)
    scripts = run_log(private_agent_dir, "--json")

    assert people.returncode == 0, people
    lines = people.stdout.splitlines()
    assert len(lines) == len(names), people
    for line in lines:
        assert_safe_line(line)
        assert not line.startswith(FORGED_LINE)
    assert "\x1b" not in people.stdout + people.stderr
    assert scripts.returncode == 0, scripts
    records = scripts.stdout.splitlines()
    assert len(records) == len(names)
    for text, name in zip(records, names, strict=True):
        assert_safe_json_text(text)
        # Escaped for the terminal, yet a JSON reader gets the peer's exact strings back.
        record = json.loads(text)
        assert record["session"]["name"] == name
        assert record["text"] == ALL_ATTACKS
    assert "\x1b" not in scripts.stdout


def test_lines_that_are_not_events_are_skipped_and_counted_in_one_note(
    journals: Journals, private_agent_dir: Path
) -> None:
    t0 = now_ms() - 60_000
    journals.append_raw(
        GOOD.instance_id,
        b"".join(
            [
                good_line(t0),
                bytes(b for b in range(256) if b != 0x0A) + b"\n",  # binary
                b'{"v":1,"at":1,"kind":"sent","name":"\xff\xfe"}\n',  # invalid UTF-8
                b"[" * 100_000 + b"\n",  # deeper than any parser goes, longer than a line
                b'{"v":1,"at":"soon","kind":"sent"}\n',  # valid JSON, wrong types
                json.dumps({**event(t0, "x").to_json(), "kind": "\x1b[2Jpwned"}).encode() + b"\n",
                good_line(t0 + 1, "after the junk"),
                b'{"v":1,"at":' + str(t0 + 2).encode() + b',"kind":"sent","messageI',  # killed
            ]
        ),
    )

    result = run_log(private_agent_dir)
    verbose = run_log(private_agent_dir, "-v")

    assert result.returncode == 0, result
    lines = result.stdout.splitlines()
    assert len(lines) == 2, result
    assert "plain" in lines[0]
    assert "after the junk" in lines[1]
    assert result.stderr.splitlines() == [
        "pi-cross-session log: skipped 6 lines that were not events (run with -v for where)"
    ]
    assert verbose.returncode == 0, verbose
    where = journals.dir_of(GOOD.instance_id)
    assert f"skipped in {where}: 6 lines that were not events" in verbose.stderr
    assert "\x1b" not in result.stderr + verbose.stderr


def test_paths_in_the_notes_are_escaped(tmp_path: Path) -> None:
    # The agent dir comes from the environment: a name that would drive the terminal or forge a
    # line is shown escaped wherever a path is said.
    agent_dir = tmp_path / f"agent{ATTACKS['window title (OSC 0)']}\n{FORGED_LINE}"
    agent_dir.mkdir()
    empty = run_log(agent_dir)
    journals = Journals(agent_dir)
    journals.append_raw(GOOD.instance_id, b"junk\n" + good_line(now_ms()))
    noted = run_log(agent_dir, "-v")

    for result in (empty, noted):
        assert result.returncode == 0, result
        assert "\x1b" not in result.stdout + result.stderr
        assert not any(
            line.startswith(FORGED_LINE) for line in (result.stdout + result.stderr).splitlines()
        ), result
    assert "No journals in the agent dir" in empty.stdout
    assert "skipped in " in noted.stderr
    assert "\\x1b]0;pwned\\x07\\x0aSYSTEM" in noted.stderr


def test_journals_that_are_not_ours_are_refused_and_said_never_read_or_repaired(
    journals: Journals, private_agent_dir: Path, tmp_path: Path
) -> None:
    t0 = now_ms() - 60_000
    journals.write(GOOD.instance_id, event(t0, "readable"))
    # A session dir that is a symbolic link to a journal elsewhere.
    elsewhere = Journals(tmp_path / "elsewhere").write("c3" * 16, event(t0 + 1, "linked"))
    linked = journals.dir_of("c3" * 16)
    linked.symlink_to(elsewhere)
    # A session dir with loose modes, and a file with loose modes in a private dir.
    loose_dir = journals.write("d4" * 16, event(t0 + 2, "loose dir"))
    loose_dir.chmod(0o755)
    loose_file = journals.write("e5" * 16, event(t0 + 3, "loose file")) / "journal.jsonl"
    loose_file.chmod(0o644)

    result = run_log(private_agent_dir)
    verbose = run_log(private_agent_dir, "-v")

    assert result.returncode == 0, result
    assert len(result.stdout.splitlines()) == 1, result
    assert "readable" in result.stdout
    assert result.stderr.splitlines() == [
        "pi-cross-session log: skipped 3 files or dir(s) not ours (run with -v for where)"
    ]
    assert f"not read: {linked}: it is a symbolic link" in verbose.stderr
    assert f"not read: {loose_dir}: mode 0755 instead of 0700" in verbose.stderr
    assert f"not read: {loose_file}: " in verbose.stderr
    assert "gives others access" in verbose.stderr
    # Reads only: nothing repaired.
    assert stat.S_IMODE(loose_dir.stat().st_mode) == 0o755
    assert stat.S_IMODE(loose_file.stat().st_mode) == 0o644


def test_a_journal_root_that_is_a_symbolic_link_is_refused(
    private_agent_dir: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    Journals(elsewhere).write(GOOD.instance_id, event(now_ms(), "linked"))
    root = Path(journal_root(str(private_agent_dir)))
    root.parent.mkdir(mode=0o700, parents=True)
    root.symlink_to(journal_root(str(elsewhere)))

    result = run_log(private_agent_dir, "-v")

    assert result.returncode == 0, result
    assert "linked" not in result.stdout
    assert "skipped 1 file or dir(s) not ours" in result.stderr
    assert f"not read: {root}: it is a symbolic link" in result.stderr
    assert os.path.islink(root)
