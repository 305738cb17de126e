"""A real ACP client driving ``pi-agent-cli`` over stdio (its ACP mode).

:class:`RecordingClient` is the client side of the connection: it records every session
notification and answers the agent's requests with the answers of the demo's line client
(``demo/try_session.py``). :func:`acp_agent` spawns the agent (``python -m pi_agent_cli``, stdio
ACP mode, ``PI_USE_MOCK=1``) with the test's agent dir and pi home, and makes sure the process is
gone afterwards, whatever happened. The agent's stderr goes to a log file that tests may show
when something fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from acp import PROTOCOL_VERSION, spawn_agent_process
from acp.client.connection import ClientSideConnection
from acp.schema import AgentMessageChunk, AvailableCommandsUpdate, RequestPermissionResponse
from demo.try_session import DecliningClient, chosen

#: Every wait on the agent ends after this long at most: generous, because a loaded machine can take
#: many seconds to start the agent, and a wait that is met ends at once.
ACP_WAIT_S = 60.0
POLL_S = 0.02

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class RecordingClient(DecliningClient):
    """The ACP client: records session updates, declines file and terminal access."""

    updates: list[tuple[str, Any]] = field(default_factory=list)
    permission_requests: list[Any] = field(default_factory=list)

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append((session_id, update))

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any
    ) -> RequestPermissionResponse:
        # Only a question about trusting the project could come here (no tool needs asking in
        # these tests): decline, which leaves the project's own resources out.
        self.permission_requests.append((session_id, tool_call, options))
        return chosen(options, "reject")

    # -- what the tests look at -------------------------------------------------------------------

    def of(self, session_id: str) -> list[Any]:
        return [update for sid, update in self.updates if sid == session_id]

    def commands(self, session_id: str) -> list[str] | None:
        """The command names of the latest ``available_commands_update``, if any came."""
        latest = None
        for update in self.of(session_id):
            if isinstance(update, AvailableCommandsUpdate):
                latest = [command.name for command in update.available_commands]
        return latest

    def message_text(self, session_id: str, start: int = 0) -> str:
        """The text of every ``agent_message_chunk`` from update number ``start`` on."""
        parts = []
        for update in self.of(session_id)[start:]:
            if isinstance(update, AgentMessageChunk):
                parts.append(getattr(update.content, "text", "") or "")
        return "".join(parts)

    async def wait_for(self, condition: Callable[[], object], what: str) -> None:
        """Wait (at most :data:`ACP_WAIT_S`) until ``condition()`` is true."""
        try:
            with anyio.fail_after(ACP_WAIT_S):
                while not condition():  # noqa: ASYNC110 (updates arrive as calls, not events)
                    await anyio.sleep(POLL_S)
        except TimeoutError:
            raise AssertionError(
                f"timed out waiting for {what}; updates: {self.updates!r}"
            ) from None


@dataclass
class AcpAgent:
    """A running ``pi-agent-cli`` and the connection to it."""

    conn: ClientSideConnection
    process: asyncio.subprocess.Process
    client: RecordingClient
    log: Path

    def stderr(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    async def request(self, awaitable: Any, what: str) -> Any:
        """Await one request to the agent, with the suite's deadline."""
        try:
            with anyio.fail_after(ACP_WAIT_S):
                return await awaitable
        except TimeoutError:
            raise AssertionError(f"{what} timed out; agent stderr:\n{self.stderr()}") from None


def agent_env(agent_dir: Path, pi_home: Path) -> dict[str, str]:
    """The agent's environment: ours, plus the mock model, the test's agent dir and pi home."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PI_")}
    env.update(
        PI_USE_MOCK="1",
        PI_HOME=str(pi_home),
        PI_CODING_AGENT_DIR=str(agent_dir),
        PYTHONWARNINGS="ignore",
    )
    env.pop("PI_CROSS_SESSION_INBOUND", None)
    return env


@asynccontextmanager
async def acp_agent(agent_dir: Path, pi_home: Path, log: Path) -> AsyncIterator[AcpAgent]:
    """Spawn ``python -m pi_agent_cli`` (ACP over stdio) and initialize the connection.

    However the test ends, the process is asked to stop (stdin closed), then terminated, then
    killed, and waited for.
    """
    client = RecordingClient()
    with log.open("wb") as stderr:
        async with spawn_agent_process(
            client,
            sys.executable,
            "-m",
            "pi_agent_cli",
            env=agent_env(agent_dir, pi_home),
            cwd=str(REPO_ROOT),
            transport_kwargs={"stderr": stderr, "shutdown_timeout": 5.0},
            use_unstable_protocol=True,
        ) as (conn, process):
            agent = AcpAgent(conn=conn, process=process, client=client, log=log)
            try:
                await agent.request(
                    conn.initialize(protocol_version=PROTOCOL_VERSION), "initialize"
                )
                yield agent
            finally:
                await stop_process(process)


async def stop_process(process: asyncio.subprocess.Process) -> None:
    """End the agent process, politely first, and wait for it (bounded)."""
    if process.returncode is not None:
        return
    with contextlib.suppress(Exception):
        if process.stdin is not None:
            process.stdin.close()
    with anyio.move_on_after(5.0, shield=True):
        await process.wait()
        return
    with contextlib.suppress(ProcessLookupError):
        process.terminate()
    with anyio.move_on_after(5.0, shield=True):
        await process.wait()
        return
    with contextlib.suppress(ProcessLookupError):
        process.kill()
    with anyio.move_on_after(5.0, shield=True):
        await process.wait()
