"""``pi-cross-session watch`` in a real terminal shows a latched inbox, and why (issue 25).

A command-line ``inbox`` never latches (its simulated turns always end cleanly), so the session
that latches here is a real pi-python session (the harness with our extension) whose scripted
model cannot reach its provider when a peer's message arrives: the turn ends with an error and
the inbox closes, as in ``test_failed_turn.py``. The session publishes its live state itself; the
message comes from a real ``pi-cross-session send`` process; ``watch`` runs as its own process in
a tmux terminal and reads the registration, the journals and the live state like any user's.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from langchain_core.messages import AIMessage, BaseMessage

from tests.host.pi_harness import PEER_HEADER, ScriptedChat, runtime_of, say, text_of
from tests.support.processes import cli_env, run_cli
from tests.support.tmux import TMUX, Terminal

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,
    pytest.mark.skipif(TMUX is None, reason="tmux is not installed (apt install tmux)"),
]


def provider_down_for_peers(messages: Sequence[BaseMessage]) -> AIMessage:
    """A peer's message meets a provider that cannot be reached; a user's prompt works."""
    if text_of(messages[-1]).startswith(PEER_HEADER):
        raise ConnectionError("Connection error.")
    return say("ok")


async def test_watch_shows_a_latched_inbox_with_its_reason(
    harnesses: Callable[..., Any],
    model: ScriptedChat,
    private_agent_dir: Path,
    workdir: Path,
    tmp_path: Path,
) -> None:
    harness = await harnesses()
    model.responder = provider_down_for_peers
    runtime = await runtime_of(harness)
    registration = runtime.registration()
    assert registration is not None
    ref = registration.instance_id[:6]
    command = shlex.join([sys.executable, "-m", "pi_cross_session", "watch"])
    terminal = await anyio.to_thread.run_sync(
        lambda: Terminal(
            ["sh", "-c", command],
            env=cli_env(private_agent_dir),
            cwd=tmp_path,
            config_dir=tmp_path,
            width=160,
            height=50,
        )
    )
    try:
        # Watch probes the session like any lister: the harness's loop answers while the
        # terminal is read on a thread.
        def session_row(screen: str) -> str:
            rows = [line for line in screen.splitlines() if f"[{ref}]" in line]
            return rows[0] if rows else ""

        # Its kind shows once its live state is published (within a second of its start).
        screen = await anyio.to_thread.run_sync(
            lambda: terminal.wait_for(lambda s: "pi-python" in session_row(s))
        )
        assert " open " in session_row(screen)

        sent = await anyio.to_thread.run_sync(
            lambda: run_cli(
                private_agent_dir,
                "send",
                "--name",
                "alpha",
                registration.instance_id,
                "please rebase onto main",
                cwd=workdir,
            )
        )
        assert sent.returncode == 0, sent
        message_id = sent.message_id()

        screen = await anyio.to_thread.run_sync(
            lambda: terminal.wait_for(lambda s: "latched (" in session_row(s))
        )
        # Why, in the session's own words: the turn of which message, from whom.
        row = session_row(screen)
        assert row.lstrip().startswith("pi-python"), row
        assert f"latched (the turn in which message {message_id[:8]}" in row, screen
        # The message that closed it is in the feed, sent by alpha to this session.
        [fed] = [line for line in screen.splitlines() if message_id[:8] in line and line != row]
        assert "alpha [" in fed
        assert f"[{ref}]" in fed
    finally:
        await anyio.to_thread.run_sync(terminal.close)
