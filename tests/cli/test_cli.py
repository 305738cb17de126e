"""The command line: ``--version`` and ``paths``, run as a real subprocess and in-process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pi_cross_session import __version__
from pi_cross_session._internal.cli import main

INSTANCE = "2d06c66b2c0fbee2d957b41c6c78cad0"


def run(*args: str, agent_dir: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PI_CODING_AGENT_DIR": agent_dir}
    return subprocess.run(
        [sys.executable, "-m", "pi_cross_session", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_version(private_agent_dir: Path) -> None:
    done = run("--version", agent_dir=str(private_agent_dir))
    assert done.returncode == 0
    assert done.stdout.strip() == f"pi-cross-session {__version__}"


def test_paths_json_for_the_recorded_fixture() -> None:
    done = run("paths", "--json", "--instance-id", INSTANCE, agent_dir="/tmp/xs-fixture/agent")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    uid = os.getuid()
    assert report["agentDir"] == "/tmp/xs-fixture/agent"
    assert report["namespace"] == "0012f3d496fe"
    assert report["runtimeDir"] == f"/tmp/pi-peers-{uid}-0012f3d496fe"
    assert report["socketPath"] == f"/tmp/pi-peers-{uid}-0012f3d496fe/{INSTANCE}.sock"
    assert report["registrationPath"] == f"/tmp/xs-fixture/agent/peers/{INSTANCE}.json"
    assert report["instanceIdIsExample"] is False


def test_paths_text_uses_the_environment(
    private_agent_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["paths"]) == 0
    out = capsys.readouterr().out
    assert f"agent dir         {private_agent_dir}\n" in out
    assert "example instance" in out


def test_paths_does_not_create_anything(private_agent_dir: Path) -> None:
    assert main(["paths", "--json"]) == 0
    assert list(private_agent_dir.iterdir()) == []


def test_a_bad_instance_id_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["paths", "--instance-id", "ABC"])
    assert caught.value.code == 1  # a usage error; 2 would mean "refused" to a script
    assert "32 lowercase hex" in capsys.readouterr().err


def test_no_command_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 1
    assert "paths" in capsys.readouterr().err
