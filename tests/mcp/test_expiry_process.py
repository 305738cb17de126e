"""A message to an MCP host that never reads, end to end with real processes and real time (the
server runs with a queue time to live of seconds, see ``tests/support/short_queue_ttl_cli.py``): the
CLI's ``send`` is told ``queued``; after the queue's time to live the CLI's ``status`` says
``expired`` (its exit code says it will never be delivered); the server's own
``cross-session-status`` prompt lists it; and the host's next read tells its model that a message
expired unread, and from whom."""

from __future__ import annotations

import re
from pathlib import Path

import anyio
import pytest

from pi_cross_session._internal.cli import exits
from pi_cross_session._internal.plugin.render import mcp_host
from tests.mcp.test_process import mcp_process
from tests.support.processes import (
    CLI,
    COMMAND_TIMEOUT_S,
    MESSAGE_ID_RE,
    SHORT_QUEUE_TTL_CLI,
    cli_env,
)
from tests.support.short_queue_ttl_cli import SHORT_QUEUE_TTL_S

pytestmark = pytest.mark.anyio


async def cli(agent_dir: Path, *args: str) -> tuple[int, str]:
    with anyio.fail_after(COMMAND_TIMEOUT_S):
        done = await anyio.run_process([*CLI, *args], env=cli_env(agent_dir), check=False)
    return done.returncode, done.stdout.decode() + done.stderr.decode()


@pytest.mark.slow
async def test_a_message_the_host_never_reads_ends_expired_and_every_status_says_so(
    private_agent_dir: Path, tmp_path: Path
) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    async with mcp_process(
        private_agent_dir,
        workdir,
        tmp_path / "err.log",
        "--name",
        "mcp-quiet",
        command=SHORT_QUEUE_TTL_CLI,
    ) as host:
        code, out = await cli(private_agent_dir, "send", "mcp-quiet", "is anyone reading?")
        assert code == exits.EXIT_OK, out
        assert out.startswith("Message queued to mcp-quiet ["), out
        match = MESSAGE_ID_RE.search(out)
        assert match is not None, out
        message_id = match.group(1)

        # Nobody reads: the queue drops the message once its time to live is over.
        await anyio.sleep(SHORT_QUEUE_TTL_S + 1)
        code, out = await cli(private_agent_dir, "status", "mcp-quiet", message_id)
        assert code == exits.EXIT_REFUSED, out
        assert "expired" in out

        prompt = await host.session.get_prompt("cross-session-status")
        shown = prompt.messages[0].content.text  # type: ignore[union-attr]
        assert re.search(rf"{message_id}.*expired|expired.*{message_id}", shown), shown

        text, is_error = await host.call("read_pi_messages")
        assert not is_error
        assert text.startswith(mcp_host.NO_MESSAGES)
        assert "1 message expired unread" in text
    assert host.stray == []
