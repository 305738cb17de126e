"""An interactive pi-agent-cli session in a terminal: a line-based ACP client, to try it offline.

``python demo/try_session.py [--name NAME]`` starts the real ``pi-agent-cli`` (its ACP agent, the
one an editor such as Zed runs) with this environment, opens one session in the current directory
and then sends each line you type as a prompt: ``list sessions``, ``send hello to beta``,
``/peers``, ``/cross-session-status``. What the session says streams to the terminal, including the
turns that a message from another session starts while you type nothing. When the model wants a
tool that asks first (``send_pi_message``), the next line you type answers (``y`` allows it once).
Ctrl-D ends.

``--name`` sets ``PI_CROSS_SESSION_NAME``, the name other sessions address this one by. The model is
whatever ``agent.toml`` in ``PI_HOME`` names (``demo/try_model.py`` for a scripted one); the user
guide's "Try it offline" has the set-up. Everything the agent sends is printed with unsafe
characters escaped (``pi_cross_session.sanitize.block``): a peer's text reaches the terminal as
text, never as terminal controls.

Importing this module starts nothing: the test suite's ACP driver (``tests/host/acp_agent.py``)
takes :class:`DecliningClient` and :func:`chosen` from here, so that the demo and the tests answer
the agent the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import threading
from pathlib import Path
from typing import Any

from acp import PROTOCOL_VERSION, RequestError, spawn_agent_process, text_block
from acp.schema import (
    AgentMessageChunk,
    AllowedOutcome,
    DeniedOutcome,
    RequestPermissionResponse,
    ToolCallStart,
)

from pi_cross_session.sanitize import block, line

#: How the extension's notices start (``› Message from @alpha: …``): shown on lines of their own.
NOTICE = "› "


def show(text: str) -> None:
    sys.stdout.write(block(text))
    sys.stdout.flush()


def chosen(options: list[Any], kind: str) -> RequestPermissionResponse:
    """The answer to a permission request that selects the first of ``options`` whose kind
    starts with ``kind`` (``allow`` or ``reject``), or cancels when none does."""
    for option in options:
        if str(option.kind).startswith(kind):
            return RequestPermissionResponse(
                outcome=AllowedOutcome(outcome="selected", option_id=option.option_id)
            )
    return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))


class DecliningClient:
    """What an ACP client that offers no files, no terminal and no extensions answers."""

    async def write_text_file(self, *args: Any, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("fs/write_text_file")

    async def read_text_file(self, *args: Any, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("fs/read_text_file")

    async def create_terminal(self, *args: Any, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("terminal/create")

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(method)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None


class Terminal(DecliningClient):
    """The ACP client: prints the session's updates, asks the typist about permissions."""

    def __init__(self) -> None:
        self.lines: asyncio.Queue[str | None] = asyncio.Queue()
        self.answer: asyncio.Future[str | None] | None = None

    def typed(self, text: str | None) -> None:
        """One line from the keyboard (``None``: end of input): a pending question takes it."""
        if self.answer is not None and not self.answer.done():
            self.answer.set_result(text)
        else:
            self.lines.put_nowait(text)

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if isinstance(update, AgentMessageChunk):
            text = getattr(update.content, "text", "") or ""
            show(f"\n{text}\n" if text.startswith(NOTICE) else text)
        elif isinstance(update, ToolCallStart):
            show(f"\n[tool {line(update.title)}]\n")

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any
    ) -> RequestPermissionResponse:
        given = getattr(tool_call, "raw_input", None)
        if isinstance(given, dict):
            given = {key: value for key, value in given.items() if value is not None}
        raw = line(json.dumps(given, ensure_ascii=False, default=str), limit=300)
        show(f"\nAllow {line(str(tool_call.title))} {raw}? [y/N]\n")
        self.answer = asyncio.get_running_loop().create_future()
        reply = (await self.answer or "").strip().lower()
        return chosen(options, "allow" if reply in {"y", "yes"} else "reject")


def read_keyboard(terminal: Terminal, loop: asyncio.AbstractEventLoop) -> None:
    """Hand each typed line to the loop (a daemon thread: Ctrl-C never waits for a line)."""
    for text in iter(sys.stdin.readline, ""):
        loop.call_soon_threadsafe(terminal.typed, text.rstrip("\n"))
    loop.call_soon_threadsafe(terminal.typed, None)


def agent_command() -> str:
    beside = Path(sys.executable).with_name("pi-agent-cli")
    found = str(beside) if beside.exists() else shutil.which("pi-agent-cli")
    if found is None:
        sys.exit("pi-agent-cli is not installed here: pip install -e '.[pi-python]' first")
    return found


async def run(name: str | None) -> None:
    env = dict(os.environ)
    if name:
        env["PI_CROSS_SESSION_NAME"] = name
    terminal = Terminal()
    async with spawn_agent_process(
        terminal, agent_command(), env=env, use_unstable_protocol=True
    ) as (conn, _process):
        await conn.initialize(protocol_version=PROTOCOL_VERSION)
        session = await conn.new_session(cwd=os.getcwd())
        show("session started; type a line for the model, or /peers; Ctrl-D ends\n")
        loop = asyncio.get_running_loop()
        threading.Thread(target=read_keyboard, args=(terminal, loop), daemon=True).start()
        while (text := await terminal.lines.get()) is not None:
            if text.strip():
                await conn.prompt(session_id=session.session_id, prompt=[text_block(text)])
                show("\n")


def main() -> int:
    parser = argparse.ArgumentParser(prog="try_session.py", description=__doc__.split("\n")[0])
    parser.add_argument("--name", help="the name other sessions address this one by")
    args = parser.parse_args()
    try:
        asyncio.run(run(args.name))
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
