"""``pi-cross-session watch`` in a real terminal (tmux, 160×50): what a person sees while two inbox
processes run and a command-line send reaches one of them; the keys; the terminal given back as
it was; and a terminal without rich, which gets lines and the one sentence saying what to install.
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.processes import Inboxes, cli_env, run_cli
from tests.support.tmux import TMUX, Terminal

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(TMUX is None, reason="tmux is not installed (apt install tmux)"),
]

#: Printed by the shell after watch ends: its exit status, then the terminal's settings.
AFTER = "echo; echo watch-exit=$?; stty -a"
#: The shell outlives a Ctrl-C meant for watch (a trap with a command is not inherited by it).
BEFORE = "trap : INT"


@pytest.fixture
def terminals(tmp_path: Path) -> Iterator[list[Terminal]]:
    """The terminals a test opens; every tmux server is killed at the end."""
    opened: list[Terminal] = []
    yield opened
    for terminal in opened:
        terminal.close()


def open_watch(
    terminals: list[Terminal],
    agent_dir: Path,
    tmp_path: Path,
    *args: str,
    stdin: str = "",
    **env: str,
) -> Terminal:
    command = shlex.join([sys.executable, "-m", "pi_cross_session", "watch", *args]) + stdin
    terminal = Terminal(
        ["sh", "-c", f"{BEFORE}; {command}; {AFTER}"],
        env={**cli_env(agent_dir), **env},
        cwd=tmp_path,
        config_dir=tmp_path,
        width=160,
        height=50,
    )
    terminals.append(terminal)
    return terminal


def row_of(screen: str, needle: str) -> str:
    return next(line for line in screen.splitlines() if needle in line)


def test_the_screen_shows_the_sessions_and_a_message_reaching_its_end(
    inboxes: Inboxes, private_agent_dir: Path, tmp_path: Path, terminals: list[Terminal]
) -> None:
    alpha = inboxes.start("alpha", busy=0)
    beta = inboxes.start("beta", busy=0)
    alpha_ref = alpha.wait_event("ready")["instanceId"][:6]
    beta_ref = beta.wait_event("ready")["instanceId"][:6]
    terminal = open_watch(terminals, private_agent_dir, tmp_path)
    screen = terminal.wait_for(
        lambda s: f"alpha [{alpha_ref}]" in s and f"beta [{beta_ref}]" in s and "inbox" in s
    )
    assert "2 live sessions" in screen
    assert "f filter  p pause  q quit" in screen

    sent = run_cli(
        private_agent_dir, "send", "--name", "carol", "beta", "hello beta", "--wait", "20",
        cwd=tmp_path,
    )  # fmt: skip
    assert sent.returncode == 0, sent
    message_id = sent.message_id()
    # Both ends' last word: the receiver confirmed delivery, and the sender waited to hear it.
    screen = terminal.wait_for(
        lambda s: message_id[:8] in s and row_of(s, message_id[:8]).count("delivered") == 2
    )
    row = row_of(screen, message_id[:8])
    assert re.search(rf"carol \[\w{{6}}\]\s+beta \[{beta_ref}\]", row), row

    # f narrows the feed to one session after another; p pauses (and says so); q quits.
    terminal.send_keys("f")
    terminal.wait_for(re.compile(r"feed: \S+ \[\w{6}\]"))
    terminal.send_keys("p")
    terminal.wait_for("PAUSED")
    terminal.send_keys("q")
    after = terminal.wait_for("watch-exit=")
    assert "watch-exit=0" in after
    # The alternate screen is gone and the terminal reads lines and echoes again.
    assert "f filter  p pause  q quit" not in after
    settings = after[after.index("watch-exit=") :]
    assert re.search(r"(?<!-)icanon", settings), settings
    assert re.search(r"(?<!-)echo\b", settings), settings


@pytest.mark.parametrize(
    "stdin",
    [
        "",
        # No keys to read: the loop sleeps instead, and a signal must still end it.
        " < /dev/null",
    ],
)
def test_ctrl_c_ends_the_view_with_zero_and_gives_the_terminal_back(
    private_agent_dir: Path, tmp_path: Path, terminals: list[Terminal], stdin: str
) -> None:
    terminal = open_watch(
        terminals, private_agent_dir, tmp_path, "--session", "nobody", stdin=stdin
    )
    terminal.wait_for("feed: nobody")
    terminal.send_keys("C-c")
    after = terminal.wait_for("watch-exit=")
    assert "watch-exit=0" in after, after
    settings = after[after.index("watch-exit=") :]
    assert re.search(r"(?<!-)icanon", settings), settings


def test_a_terminal_without_rich_gets_lines_and_says_what_to_install(
    inboxes: Inboxes, private_agent_dir: Path, tmp_path: Path, terminals: list[Terminal]
) -> None:
    shadow = tmp_path / "shadow" / "rich"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('no rich here')\n", encoding="utf-8")
    beta = inboxes.start("beta", busy=0)
    beta_ref = beta.wait_event("ready")["instanceId"][:6]
    terminal = open_watch(terminals, private_agent_dir, tmp_path, PYTHONPATH=str(shadow.parent))
    screen = terminal.wait_for(f"session beta [{beta_ref}] appeared")
    [said] = [line for line in screen.splitlines() if "needs rich" in line]
    assert "pip install '.[watch]' in a clone, or pip install 'rich>=13.7'" in said
    assert screen.count("needs rich") == 1
