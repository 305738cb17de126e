"""``make demo-mcp``: the SDK's stdio client drives two MCP servers beside a pi-python session and
a headless inbox, through push, pull and withdrawal."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.processes import run_demo

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "demo" / "mcp_demo.py"


@pytest.mark.slow
def test_the_mcp_demo_runs_every_act(tmp_path: Path) -> None:
    output = run_demo(DEMO, tmp_path / "demo-tmp", timeout_s=300)
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
