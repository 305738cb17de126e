"""``make demo-mcp``: the SDK's stdio client drives two MCP servers beside a pi-python session and
a headless inbox, through push, pull and withdrawal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "demo" / "mcp_demo.py"


@pytest.mark.slow
def test_the_mcp_demo_runs_every_act(tmp_path: Path) -> None:
    scratch = tmp_path / "demo-tmp"  # the demo's temporary dir goes here, and must be removed
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch), "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(
        [sys.executable, str(DEMO)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = done.stdout
    assert done.returncode == 0, output + done.stderr
    for line in (
        "[claude] initialized: capabilities.experimental = {'claude/channel': {}}",
        "[claude] channel notification (notifications/claude/channel):",
        "| Reviewed PR #12: ship it.",
        "[codex] tools: list_pi, send_pi_message, read_pi_messages, wait_pi_message",
        "Message queued to codex [",
        "Build 4711 is green.\\x1b[2J (a peer's escape, shown escaped)",
        "[builder] received from codex: Thanks: deploying 4711.",
        "registrations left: 2 (reviewer and builder)",
    ):
        assert line in output, output
    assert "\x1b[2J" not in output
    assert list(scratch.iterdir()) == []
