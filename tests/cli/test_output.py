"""Robust output: a stdout that cannot encode, ``-v`` logging, and exit codes people can look up.

Exit codes are part of the interface scripts use, so ``--help`` lists them, and the README and
docs/operations.md carry the same table word for word (checked here against the source of truth,
:data:`pi_cross_session._internal.cli.exits.TABLE`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from pi_cross_session._internal.cli import exits
from tests.support.processes import Inboxes, Result, run_cli

Cli = Callable[..., Result]
ROOT = Path(__file__).resolve().parents[2]
NAME = "Zoë’s reviewer 🦊"


def test_an_ascii_stdout_gets_escapes_not_a_traceback(
    inboxes: Inboxes, private_agent_dir: Path, tmp_path: Path
) -> None:
    inbox = inboxes.start(NAME, busy=0)
    ascii_env = {"PYTHONIOENCODING": "ascii"}

    def run(*args: str) -> Result:
        return run_cli(private_agent_dir, *args, cwd=tmp_path, env=ascii_env, encoding="ascii")

    listed = run("peers")
    assert listed.returncode == 0, listed
    assert "Traceback" not in listed.stderr
    assert "Zo\\xeb\\u2019s reviewer \\U0001f98a [" in listed.stdout
    as_json = run("peers", "--json")
    assert as_json.returncode == 0, as_json
    assert as_json.stdout.isascii()
    assert [peer["name"] for peer in json.loads(as_json.stdout)["peers"]] == [NAME]
    sent = run("send", NAME, "grüße 🦊")
    assert sent.returncode == 0, sent
    assert "Traceback" not in sent.stderr
    assert sent.stdout.startswith("Message submitted to Zo\\xeb")
    assert inbox.wait_event("message", messageId=sent.message_id())["text"] == "grüße 🦊"
    missing = run("send", "nobody 🦊", "x")
    assert missing.returncode == 4, missing
    assert "Traceback" not in missing.stderr
    assert '"nobody \\U0001f98a"' in missing.stderr


def test_verbose_logs_sanitised_lines_to_stderr(cli: Cli) -> None:
    quiet = cli("send", "nobody", "x")
    assert quiet.returncode == 4, quiet
    assert "info:" not in quiet.stderr
    for args in (("-v", "send", "nobody", "x"), ("send", "nobody", "x", "--verbose")):
        loud = cli(*args)
        assert loud.returncode == 4, loud
        logged = [line for line in loud.stderr.splitlines() if ": info: " in line]
        assert any("took command-line identity 0" in line for line in logged), loud
        assert any("released command-line identity 0" in line for line in logged), loud
        assert all(line.startswith("pi-cross-session: info: pi_cross_session.") for line in logged)


@pytest.mark.parametrize("command", [(), ("send",), ("status",)])
def test_help_lists_the_exit_codes(cli: Cli, command: tuple[str, ...]) -> None:
    shown = cli(*command, "--help")
    assert shown.returncode == 0, shown
    assert exits.TABLE in shown.stdout


@pytest.mark.parametrize(
    "command", ["paths", "inbox", "peers", "doctor", "mcp", "gateway", "remote"]
)
def test_only_send_and_status_repeat_the_table_of_exit_codes(cli: Cli, command: str) -> None:
    """The table is about a message's fate: the other commands do not repeat it under their
    --help (those whose job is not a message say their own codes in one line)."""
    shown = cli(command, "--help")
    assert shown.returncode == 0, shown
    assert "exit codes:" not in shown.stdout
    assert "status, send --wait" not in shown.stdout
    if command in ("paths", "inbox", "peers"):
        assert exits.SIMPLE in shown.stdout


@pytest.mark.parametrize("document", ["README.md", "docs/operations.md"])
def test_the_docs_carry_the_exit_code_table(document: str) -> None:
    text = (ROOT / document).read_text(encoding="utf-8")
    assert exits.TABLE in text


def test_the_table_covers_every_code() -> None:
    listed = {int(code) for code in re.findall(r"^  (\d+) ", exits.TABLE, re.MULTILINE)}
    defined = {value for name, value in vars(exits).items() if name.startswith("EXIT_")}
    assert listed == defined
