"""Claude Code itself connects to ``pi-cross-session mcp`` (its MCP health listing), when a Claude
Code binary is at hand: ``claude`` on PATH, or the path in ``PI_XS_CLAUDE``. Skipped otherwise;
``make test`` never needs it (the npm package ``@anthropic-ai/claude-code`` ships the binary)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pi_cross_session.protocol.io import environment

CLAUDE = os.environ.get("PI_XS_CLAUDE") or shutil.which("claude")
pytestmark = pytest.mark.skipif(CLAUDE is None, reason="no Claude Code binary here")


@pytest.mark.parametrize("delivery", ["pull", "push"])
def test_claude_code_lists_the_server_as_connected_and_it_withdraws_after(
    private_agent_dir: Path, tmp_path: Path, delivery: str
) -> None:
    assert CLAUDE is not None
    home = tmp_path / "home"
    project = tmp_path / "project"
    home.mkdir()
    project.mkdir()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "PI_CODING_AGENT_DIR": str(private_agent_dir),
    }
    server = [sys.executable, "-m", "pi_cross_session", "mcp", "--delivery", delivery]
    added = subprocess.run(
        [CLAUDE, "mcp", "add", "pi-cross-session", "--", *server],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert added.returncode == 0, added
    listed = subprocess.run(
        [CLAUDE, "mcp", "list"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    line = next(x for x in listed.stdout.splitlines() if x.startswith("pi-cross-session:"))
    assert "Connected" in line, listed
    peers = environment.resolve(env={"PI_CODING_AGENT_DIR": str(private_agent_dir)}).peers_dir
    assert not list(Path(peers).glob("*.json"))  # the health check's server withdrew
