"""``make demo``: two real pi-python sessions in two processes go through the three acts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "demo" / "agents_demo.py"


@pytest.mark.slow
def test_the_agents_demo_passes_every_act(tmp_path: Path) -> None:
    scratch = tmp_path / "demo-tmp"  # the demo's temporary dir goes here, and must be removed
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch), "PYTHONWARNINGS": "ignore"}
    env.pop("PI_CROSS_SESSION_INBOUND", None)
    done = subprocess.run(
        [sys.executable, str(DEMO)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    output = done.stdout
    assert done.returncode == 0, output + done.stderr
    for line in (
        "✓ beta's turn starts from alpha's peer message",
        "✓ beta's model reads it framed as peer text",
        "✓ a turn starts on alpha from the answer",
        '"status": "queued"',
        "✓ the queued message starts a new turn only after beta's turn ended",
        "queued message → dropped_cancelled",
        '"status": "stopped"',
        "Inbox reopened",
        "✓ a later send is submitted",
        "registrations left: none; sockets left: none",
        "demo finished: all expectations held",
    ):
        assert line in output, f"missing {line!r} in:\n{output}"
    assert "✗" not in output
    assert not any(scratch.iterdir()), "the demo left files in its temporary dir"
