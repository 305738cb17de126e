"""Claude Code itself connects to ``pi-cross-session mcp`` (its MCP health listing), when a Claude
Code binary is at hand: ``claude`` on PATH, or the path in ``PI_XS_CLAUDE``. Skipped otherwise;
``make test`` never needs it (the npm package ``@anthropic-ai/claude-code`` ships the binary)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pi_cross_session._internal.protocol.io import environment

CLAUDE = os.environ.get("PI_XS_CLAUDE") or shutil.which("claude")
pytestmark = pytest.mark.skipif(CLAUDE is None, reason="no Claude Code binary here")


class ClaudeCode:
    """Claude Code in a private home and an empty project dir, with this test's agent dir."""

    def __init__(self, agent_dir: Path, scratch: Path) -> None:
        assert CLAUDE is not None
        home = scratch / "home"
        self.project = scratch / "project"
        home.mkdir()
        self.project.mkdir()
        self.env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(home),
            "PI_CODING_AGENT_DIR": str(agent_dir),
        }

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``claude ARGS`` in the project dir."""
        assert CLAUDE is not None
        return subprocess.run(
            [CLAUDE, *args],
            cwd=self.project,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


@pytest.mark.parametrize("delivery", ["pull", "push"])
def test_claude_code_lists_the_server_as_connected_and_it_withdraws_after(
    private_agent_dir: Path, tmp_path: Path, delivery: str
) -> None:
    claude = ClaudeCode(private_agent_dir, tmp_path)
    server = [sys.executable, "-m", "pi_cross_session", "mcp", "--delivery", delivery]
    added = claude.run("mcp", "add", "pi-cross-session", "--", *server)
    assert added.returncode == 0, added
    listed = claude.run("mcp", "list")
    line = next(x for x in listed.stdout.splitlines() if x.startswith("pi-cross-session:"))
    assert "Connected" in line, listed
    peers = environment.resolve(env={"PI_CODING_AGENT_DIR": str(private_agent_dir)}).peers_dir
    assert not list(Path(peers).glob("*.json"))  # the health check's server withdrew


def test_claude_code_reads_the_documented_mcp_json(private_agent_dir: Path, tmp_path: Path) -> None:
    """The ``.mcp.json`` of docs/mcp.md, as Claude Code parses it: a project-scoped stdio server
    with our command and arguments (which Claude Code asks its user to approve before it starts
    it, so its health is not checked here)."""
    claude = ClaudeCode(private_agent_dir, tmp_path)
    server = {
        "type": "stdio",
        "command": sys.executable,
        "args": ["-m", "pi_cross_session", "mcp", "--delivery", "push"],
    }
    (claude.project / ".mcp.json").write_text(
        json.dumps({"mcpServers": {"pi-cross-session": server}})
    )
    shown = claude.run("mcp", "get", "pi-cross-session")
    assert shown.returncode == 0, shown
    fields = dict(line.strip().split(": ", 1) for line in shown.stdout.splitlines() if ": " in line)
    assert fields["Scope"].startswith("Project config"), shown.stdout
    assert fields["Type"] == "stdio"
    assert fields["Command"] == sys.executable
    assert fields["Args"] == "-m pi_cross_session mcp --delivery push"
