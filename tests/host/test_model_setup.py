"""What the user guide says about giving ``pi-agent-cli`` a model, checked against the real CLI.

Without a ``[model]`` table in ``agent.toml`` the one-shot ``pi-agent-cli -p`` prints an empty
line: the default provider has no chat model behind it, and the error lands only in the session's
journal. A ``[model]`` table names the provider and model, and the provider's LangChain package
must be installed beside pi-python; without it, the journal names the package to install.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

#: pi-agent-cli starts a whole harness; on two busy cores that can take a while.
CLI_TIMEOUT_S = 60.0


def pi_agent_cli() -> str:
    found = shutil.which("pi-agent-cli", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip("pi-agent-cli is not installed next to this interpreter")
    return found


def last_reply(pi_home: Path) -> dict[str, Any]:
    """The last assistant message in the (only) session journal under ``pi_home``."""
    [journal] = (pi_home / "sessions").glob("*.jsonl")
    entries = [json.loads(line) for line in journal.read_text().splitlines() if line]
    replies = [e["message"] for e in entries if e.get("message", {}).get("role") == "assistant"]
    assert replies, entries
    reply = replies[-1]
    assert isinstance(reply, dict)
    return reply


def prompt(pi_home: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    # The agent dir is the test's own (the root conftest set it, and removes its runtime dir).
    env = {**os.environ, "PI_HOME": str(pi_home)}
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "PI_CROSS_SESSION_NAME"):
        env.pop(key, None)
    return subprocess.run(
        [pi_agent_cli(), "-p", "hello", "--cwd", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )


def test_without_a_model_the_cli_prints_an_empty_line(pi_home: Path, tmp_path: Path) -> None:
    done = prompt(pi_home, tmp_path)
    assert done.returncode == 0, done
    assert done.stdout == "\n"
    reply = last_reply(pi_home)
    assert (reply["provider"], reply["stopReason"]) == ("mock", "error")


@pytest.mark.skipif(
    importlib.util.find_spec("langchain_anthropic") is not None,
    reason="the provider package is installed: the CLI would call the real API",
)
def test_a_model_table_names_the_provider_and_the_package_it_needs(
    pi_home: Path, tmp_path: Path
) -> None:
    (pi_home / "agent.toml").write_text(
        '[model]\nprovider = "anthropic"\nid = "claude-sonnet-4-5"\n'
        'api_key_env = "ANTHROPIC_API_KEY"\n'
    )
    done = prompt(pi_home, tmp_path)
    assert done.returncode == 0, done
    reply = last_reply(pi_home)
    assert (reply["provider"], reply["model"]) == ("anthropic", "claude-sonnet-4-5")
    assert "langchain-anthropic" in reply["errorMessage"]
