"""MCP hosts on the network: the SDK's real stdio client drives ``pi-cross-session mcp`` as Claude
Code, Codex CLI or any MCP host would, beside a pi-python session and a headless inbox.

Four processes share a private, temporary agent dir (removed at the end, like the pi home):

* ``reviewer``: a pi-python session (demo/agent_session.py, a scripted model) that answers any
  peer message with ``send_pi_message``;
* ``builder``: a headless inbox (``pi-cross-session inbox``);
* ``claude``: ``pi-cross-session mcp --delivery push``, as Claude Code with channels runs it;
* ``codex``: ``pi-cross-session mcp`` (pull), as any other MCP host runs it.

Act 1 (push): claude asks the reviewer for a review; the reviewer's answer arrives at claude as a
``notifications/claude/channel`` notification. Act 2 (pull): builder sends codex a message with the
command line; it waits queued until codex calls ``read_pi_messages``; codex answers builder. Act 3:
both hosts close stdin, and their registrations are gone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from mcp.client import ClientSession, NotificationBinding
from mcp.client.stdio import StdioServerParameters, stdio_client
from pydantic import BaseModel

from pi_cross_session._internal.protocol.io import environment

CLI = [sys.executable, "-m", "pi_cross_session"]
HERE = Path(__file__).resolve().parent
SESSION = HERE / "agent_session.py"
BOLD = "\033[1m" if sys.stdout.isatty() else ""
PLAIN = "\033[0m" if sys.stdout.isatty() else ""
WAIT_S = 30.0


def heading(title: str) -> None:
    print(f"\n{BOLD}== {title}{PLAIN}", flush=True)


def indented(text: str, prefix: str = "    ") -> None:
    for line in text.splitlines():
        print(f"{prefix}{line}")


class ChannelParams(BaseModel):
    content: str
    meta: dict[str, str] | None = None


class Watched:
    """A child process whose stdout lines (JSON events) are collected as they come."""

    def __init__(self, command: list[str], env: dict[str, str], cwd: Path) -> None:
        self.process = subprocess.Popen(
            command,
            env=env,
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with self._lock:
                self.events.append(event)

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            with self._lock:
                for event in self.events:
                    if predicate(event):
                        return event
            time.sleep(0.05)
        raise SystemExit(f"demo: an expected event never came from {self.process.args!r}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()


class McpHost:
    """An MCP host: the SDK's stdio client running ``pi-cross-session mcp``."""

    def __init__(self, name: str, session: ClientSession) -> None:
        self.name = name
        self.session = session
        self.channel: list[ChannelParams] = []

    async def call(self, tool: str, arguments: dict[str, Any] | None = None) -> str:
        print(f"  [{self.name}] calls {tool} {json.dumps(arguments or {})}")
        result = await self.session.call_tool(tool, arguments or {})
        text = "\n".join(block.text for block in result.content if block.type == "text")
        indented(text)
        return text


@asynccontextmanager
async def mcp_host(name: str, env: dict[str, str], cwd: Path, *args: str) -> AsyncIterator[McpHost]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "pi_cross_session", "mcp", "--name", name, *args],
        env={key: env[key] for key in ("PI_CODING_AGENT_DIR", "PI_HOME")},
        cwd=str(cwd),
    )
    host: McpHost | None = None

    async def on_channel(event: ChannelParams) -> None:
        assert host is not None
        host.channel.append(event)

    binding = NotificationBinding(
        method="notifications/claude/channel", params_type=ChannelParams, handler=on_channel
    )
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write, notification_bindings=[binding]) as session,
    ):
        init = await session.initialize()
        host = McpHost(name, session)
        tools = [tool.name for tool in (await session.list_tools()).tools]
        experimental = init.capabilities.experimental
        print(f"  [{name}] initialized: capabilities.experimental = {experimental}")
        print(f"  [{name}] tools: {', '.join(tools)}")
        yield host


async def wait_until(condition: Callable[[], bool]) -> None:
    with anyio.fail_after(WAIT_S):
        while not condition():  # noqa: ASYNC110 (the demo polls what it shows)
            await anyio.sleep(0.05)


def peers_left(agent_dir: Path) -> list[str]:
    peers = agent_dir / "peers"
    return sorted(p.name for p in peers.glob("*.json")) if peers.is_dir() else []


async def main() -> int:
    root = Path(tempfile.mkdtemp(prefix="pi-xs-mcp-demo-"))
    agent_dir = root / "agent"
    agent_dir.mkdir()
    home = root / "pi-home"
    home.mkdir()
    work = root / "work"
    work.mkdir()
    env = {**os.environ, "PI_CODING_AGENT_DIR": str(agent_dir), "PI_HOME": str(home)}
    runtime_dir = environment.resolve(env={"PI_CODING_AGENT_DIR": str(agent_dir)}).runtime_dir
    env.pop("PI_CROSS_SESSION_NAME", None)
    env.pop("PI_CROSS_SESSION_INBOUND", None)
    script = root / "reviewer.json"
    script.write_text(
        json.dumps(
            [
                {
                    "on": "peer",
                    "call": {
                        "name": "send_pi_message",
                        "args": {"target": "claude", "message": "Reviewed PR #12: ship it."},
                    },
                }
            ]
        )
    )
    reviewer = Watched(
        [
            sys.executable,
            str(SESSION),
            "--name",
            "reviewer",
            "--cwd",
            str(work),
            "--script",
            str(script),
        ],
        env,
        work,
    )
    builder = Watched([*CLI, "inbox", "--name", "builder", "--json", "--busy", "0.2"], env, work)
    try:
        heading("Start: a pi-python session (reviewer) and a headless inbox (builder)")
        ready = reviewer.wait_for(lambda e: e.get("event") == "ready")
        builder.wait_for(lambda e: e.get("event") == "ready")
        reviewer_name = str(ready["publishedName"])
        print(f"  reviewer is {reviewer_name}; builder is listening")

        async with AsyncExitStack() as stack:
            heading("Act 1: push. Claude Code with channels (pi-cross-session mcp --delivery push)")
            claude = await stack.enter_async_context(
                mcp_host("claude", env, work, "--delivery", "push")
            )
            await claude.call("list_pi")
            await claude.call(
                "send_pi_message", {"target": reviewer_name, "message": "Please review PR #12."}
            )
            await wait_until(lambda: bool(claude.channel))
            event = claude.channel[0]
            print("  [claude] channel notification (notifications/claude/channel):")
            print(f"    meta: {json.dumps(event.meta)}")
            indented(event.content, "    | ")

            heading("Act 2: pull. Any other MCP host (pi-cross-session mcp)")
            codex = await stack.enter_async_context(mcp_host("codex", env, work))
            text = "Build 4711 is green.\x1b[2J (a peer's escape, shown escaped)"
            sent = await anyio.run_process(
                [*CLI, "send", "codex", text, "--name", "ci"], env=env, check=False
            )
            print("  $ pi-cross-session send codex 'Build 4711 is green. ...'")
            indented(sent.stdout.decode().strip())
            await codex.call("read_pi_messages")
            await codex.call(
                "send_pi_message", {"target": "builder", "message": "Thanks: deploying 4711."}
            )
            message = builder.wait_for(lambda e: e.get("event") == "message")
            print(f"  [builder] received from {message['sender']['name']}: {message['text']}")
            await codex.call("wait_pi_message", {"seconds": 1})

            heading("Act 3: the hosts close stdin; their servers withdraw")
        left = peers_left(agent_dir)
        print(f"  registrations left: {len(left)} (reviewer and builder)")
        if len(left) != 2:
            raise SystemExit("demo: an MCP server did not withdraw its registration")
    finally:
        reviewer.stop()
        builder.stop()
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(runtime_dir, ignore_errors=True)
    print(f"\n{BOLD}Done.{PLAIN} The agent dir was temporary and is removed.")
    return 0


if __name__ == "__main__":
    raise SystemExit(anyio.run(main))
