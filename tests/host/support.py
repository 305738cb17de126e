"""Real pi-python sessions for tests: a scripted chat model, harness builders, helper extensions.

The model is langchain's ``GenericFakeChatModel`` (host-pi-python.md §1.11) with two changes: it
accepts ``bind_tools`` and, instead of a fixed list, asks a *responder* — a plain function of the
conversation — for each reply. A test states what the model does in each situation ("when a peer
message arrives, call ``workflow``"), so replies never depend on how many turns ran before.

Tool calls are emitted OpenAI-style in ``additional_kwargs`` (with ``index``), which langchain-core
streams as tool-call chunks; an ``AIMessage(tool_calls=...)`` would not stream.
"""

from __future__ import annotations

import asyncio
import importlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pi_agent_core.extensions import ExtensionAPI, ToolDefinition
from pi_agent_core.types import AgentToolResult, Model
from pi_agent_harness import AgentHarness, MemorySessionRepo
from pi_agent_harness.env import LocalExecutionEnv

from pi_cross_session.plugin.hosts import pi_python
from pi_cross_session.plugin.runtime import SessionRuntime

# The module, not the function of the same name it exports (host-pi-python.md §1.11).
langchain_stream = importlib.import_module("pi_agent_core.adapters.langchain_stream")

Responder = Callable[[Sequence[BaseMessage]], AIMessage]

#: How often the helpers below look at a condition, and for how long at most.
POLL_S = 0.01
WAIT_S = 5.0


def text_of(message: BaseMessage) -> str:
    """The plain text of a langchain message, whatever its content shape."""
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(
        block.get("text", "") if isinstance(block, dict) else str(block) for block in content
    )


def call_tool(name: str, args: dict[str, Any], call_id: str = "call_1") -> AIMessage:
    """A reply that calls one tool."""
    tool_call = {
        "index": 0,
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }
    return AIMessage(content="", additional_kwargs={"tool_calls": [tool_call]})


def say(text: str) -> AIMessage:
    """A reply with text only, which ends the turn."""
    return AIMessage(content=text)


def default_responder(messages: Sequence[BaseMessage]) -> AIMessage:
    """After a tool result say "done", otherwise "ok"."""
    return say("done" if isinstance(messages[-1], ToolMessage) else "ok")


class ScriptedChat(GenericFakeChatModel):
    """A fake chat model whose every reply comes from ``responder(conversation)``."""

    responder: Any = None
    conversations: list[list[BaseMessage]] = []  # noqa: RUF012 (pydantic copies defaults)

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChat:
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.conversations.append(list(messages))
        respond = self.responder or default_responder
        return ChatResult(generations=[ChatGeneration(message=respond(messages))])

    def tool_results(self) -> list[str]:
        """Every tool result the model was shown, in order, without repeats."""
        seen: list[str] = []
        for conversation in self.conversations:
            for message in conversation:
                if isinstance(message, ToolMessage) and text_of(message) not in seen:
                    seen.append(text_of(message))
        return seen

    def human_texts(self) -> list[str]:
        """Every user-role text the model was shown (peer messages included), without repeats."""
        seen: list[str] = []
        for conversation in self.conversations:
            for message in conversation:
                if isinstance(message, HumanMessage) and text_of(message) not in seen:
                    seen.append(text_of(message))
        return seen


def scripted_model(responder: Responder | None = None) -> ScriptedChat:
    """A fresh model with its own conversation log."""
    return ScriptedChat(messages=iter([]), responder=responder, conversations=[])


async def new_harness(
    cwd: str,
    *extensions: Callable[[ExtensionAPI], None],
    repo: MemorySessionRepo | None = None,
    session: Any = None,
    auto_discover: bool = False,
) -> AgentHarness:
    """A real harness on a memory session, with ``extensions`` loaded (ours first by default)."""
    if session is None:
        session = await (repo or MemorySessionRepo()).create({"cwd": cwd})
    harness = AgentHarness(
        session=session,
        model=Model(provider="fake", model_id="fake"),
        stream_fn=langchain_stream.langchain_stream,
        env=LocalExecutionEnv(cwd),
        extensions=list(extensions),
        auto_discover_extensions=auto_discover,
    )
    await harness.load_extensions()
    return harness


async def session_id(harness: AgentHarness) -> str:
    """The harness's session id (the key of our extension's registry)."""
    return (await harness.session.get_metadata()).id


async def runtime_of(harness: AgentHarness) -> SessionRuntime:
    """The cross-session runtime our extension runs for ``harness``."""
    runtime = pi_python.runtime_for(await session_id(harness))
    assert runtime is not None, "the extension is not running in this harness"
    return runtime


async def eventually(condition: Callable[[], object]) -> None:
    """Wait (at most :data:`WAIT_S`) until ``condition()`` is true; the host reports through
    events, not awaitables."""
    with anyio.fail_after(WAIT_S):
        while not condition():  # noqa: ASYNC110 (no event to wait on)
            await anyio.sleep(POLL_S)


async def settle(*runtimes: SessionRuntime) -> None:
    """Wait until no endpoint of ``runtimes`` has an open connection.

    Stopping an endpoint while a probe's connection is still being torn down makes asyncio report
    ``InvalidStateError`` (see tests/support/sessions.py), so tests settle before they close. The
    endpoint is private to the runtime; tests may look.
    """
    for runtime in runtimes:
        current = runtime._current
        if current is None:
            continue
        endpoint = current.endpoint
        await eventually(lambda endpoint=endpoint: endpoint.statistics().open_connections == 0)


async def reply_text(harness: AgentHarness, prompt: str) -> str:
    """Run a prompt (or a slash command) and return the final assistant text."""
    message = await harness.prompt(prompt)
    blocks = message.content
    return "".join(block.get("text", "") for block in blocks if block.get("type") == "text")


@dataclass
class Recorder:
    """A helper extension that records what the host shows extensions: runs and messages."""

    events: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)

    def activate(self, api: ExtensionAPI) -> None:
        for name in ("agent_start", "agent_end", "message_start", "tool_call"):
            api.on(name, lambda event, name=name: self._record(name, event))

    def _record(self, name: str, event: Any) -> None:
        data: dict[str, Any] = {}
        message = getattr(event, "message", None)
        if message is not None:
            data = {
                "role": getattr(message, "role", None),
                "customType": getattr(message, "customType", None),
                "content": getattr(message, "content", None),
                "details": getattr(message, "details", None),
            }
        if name == "agent_end":
            data["stopReasons"] = [
                getattr(m, "stopReason", None)
                for m in event.messages
                if getattr(m, "role", None) == "assistant"
            ]
        if name == "tool_call":
            data["toolName"] = event.toolName
        self.events.append((name, getattr(event, "run_id", ""), data))

    def runs(self) -> list[list[dict[str, Any]]]:
        """The message_start data of each real run, in order."""
        runs: dict[str, list[dict[str, Any]]] = {}
        for name, run_id, data in self.events:
            if run_id and name == "agent_start":
                runs[run_id] = []
            elif run_id and name == "message_start":
                runs.setdefault(run_id, []).append(data)
        return list(runs.values())

    def ended(self) -> list[list[str | None]]:
        """The assistant stop reasons of each ended run (command runs excluded)."""
        return [data["stopReasons"] for name, run_id, data in self.events if name == "agent_end"]


@dataclass
class HoldTool:
    """A helper extension with a tool ``hold`` that keeps a turn busy until released or aborted."""

    entered: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    calls: int = 0

    def activate(self, api: ExtensionAPI) -> None:
        api.register_tool(
            ToolDefinition(
                name="hold",
                description="Wait until released.",
                parameters={"type": "object", "properties": {}},
                execute=self._execute,
                annotations={"readOnlyHint": True},
            )
        )

    async def _execute(
        self, tool_call_id: str, params: Any, signal: Any = None, on_update: Any = None
    ) -> AgentToolResult:
        self.calls += 1
        self.entered.set()
        waits = [asyncio.ensure_future(self.release.wait())]
        if signal is not None:
            waits.append(asyncio.ensure_future(signal.wait_aborted()))
        _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        return AgentToolResult(content=[{"type": "text", "text": "released"}])


@dataclass
class FakeWorkflowTool:
    """A helper extension standing in for pi-dynamic-workflows' ``workflow`` tool (gated)."""

    runs: list[dict[str, Any]] = field(default_factory=list)

    def activate(self, api: ExtensionAPI) -> None:
        api.register_tool(
            ToolDefinition(
                name="workflow",
                description="Run a workflow of sub-agents.",
                parameters={"type": "object", "properties": {"script": {"type": "string"}}},
                execute=self._execute,
            )
        )

    async def _execute(
        self, tool_call_id: str, params: Any, signal: Any = None, on_update: Any = None
    ) -> AgentToolResult:
        self.runs.append(dict(params))
        return AgentToolResult(content=[{"type": "text", "text": "workflow ran"}])
