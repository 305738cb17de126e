"""One pi-python session in its own process, for demo/agents_demo.py: a real ``AgentHarness`` with
this extension loaded and a scripted fake chat model, driven over stdin, reporting on stdout.

Run as ``python demo/agent_session.py --name alpha [--session-id UUID] [--script rules.json]
[--budget N]``. The environment says where sessions meet (``PI_CODING_AGENT_DIR``) and the pi home
(``PI_HOME``); the orchestrator gives each process private, temporary ones. ``--budget`` lowers the
session's lifetime message budget (the contract's 256), so that a demo can spend it quickly; the
extension has no user option for it, so the process then loads the extension as
``PiPythonSession(api, runtime_options=RuntimeOptions(budget=N))`` instead of through ``activate``.

**The model** is langchain's ``GenericFakeChatModel`` answering from a *script*: a list of rules
``{"on": ..., "call": {"name": ..., "args": {...}} | "say": ..., "contains": ...}``. ``on`` is what
the model was just given: ``user`` (the user's prompt), ``peer`` (a peer message, framed by the
extension) or ``tool:NAME`` (the result of that tool). The first rule that matches is used, once.
Without one the model says ``ok`` (or ``done`` after a tool result), which ends the turn. A
string in a rule's ``args`` may hold ``{{key}}``: it is replaced with the latest string value of
``key`` among the conversation's tool results that were JSON objects (``peer_goal`` answers with the
goal as JSON, so ``{{goalId}}`` is the goal the model was last told about), as a model would copy
it from what it read.

**Stdin** takes one JSON object per line: ``{"prompt": text}`` runs a user turn (a text starting
with ``/`` is a slash command, whose reply is printed), ``{"script": rules}`` appends rules,
``{"release": true}`` lets the ``long_job`` tool finish, ``{"abort": true}`` aborts the running
turn and ``{"exit": true}`` closes the harness and ends the process.

**Stdout** gets one JSON object per line, each with an ``event``: ``ready``, ``turn_start`` (with
the turn's provenance: ``user``, ``peer`` or ``other``), ``model_input`` (each message the model was
newly given), ``model_reply``, ``tool_start``, ``tool_result`` (with the lifetime budget left after
the call), ``tool_waiting``, ``turn_end`` (with the assistant stop reasons), ``command`` (a slash
command and its reply), ``notice`` (what the extension told the user), ``error`` and ``exit``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pi_agent_core.extensions import ExtensionAPI, ToolDefinition
from pi_agent_core.types import AgentToolResult, Model
from pi_agent_harness import AgentHarness, MemorySessionRepo
from pi_agent_harness.env import LocalExecutionEnv

from pi_cross_session._internal.plugin.hosts import pi_python
from pi_cross_session._internal.plugin.runtime import RuntimeOptions, SessionRuntime

# The module, not the function of the same name it exports (host-pi-python.md §1.11).
langchain_stream = importlib.import_module("pi_agent_core.adapters.langchain_stream")

PEER_HEADER = "Message from another session"
#: How long ``long_job`` waits for a release at most.
LONG_JOB_S = 30.0

_write_lock = threading.Lock()
_started = time.monotonic()


def emit(event: str, **data: Any) -> None:
    """One JSON line on stdout (from the loop or the model's thread)."""
    line = json.dumps(
        {"event": event, "t": round(time.monotonic() - _started, 3), **data},
        ensure_ascii=False,
        default=str,
    )
    with _write_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def text_of(content: Any) -> str:
    """The plain text of a message's content, whatever its shape."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict):
                parts.append(str(block.get("text", "")))
            else:
                parts.append(str(getattr(block, "text", block)))
        return "".join(parts)
    return "" if content is None else str(content)


def field_of(obj: Any, name: str) -> Any:
    """A field of a host payload (a pydantic model or a dict)."""
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


# -- the scripted model ----------------------------------------------------------------------------


def situation(message: BaseMessage, tool_names: dict[str, str]) -> str:
    """What the model was just given: ``user``, ``peer`` or ``tool:NAME``."""
    if isinstance(message, ToolMessage):
        return "tool:" + tool_names.get(message.tool_call_id, "?")
    if text_of(message.content).startswith(PEER_HEADER):
        return "peer"
    return "user"


def fill(value: Any, facts: dict[str, str]) -> Any:
    """``value`` with every ``{{key}}`` in its strings replaced by ``facts[key]`` (if known)."""
    if isinstance(value, str):
        for key, known in facts.items():
            value = value.replace("{{" + key + "}}", known)
        return value
    if isinstance(value, list):
        return [fill(item, facts) for item in value]
    if isinstance(value, dict):
        return {key: fill(item, facts) for key, item in value.items()}
    return value


def facts_of(messages: Sequence[BaseMessage]) -> dict[str, str]:
    """The string fields of the conversation's JSON tool results, the latest value winning."""
    facts: dict[str, str] = {}
    for message in messages:
        if not isinstance(message, ToolMessage):
            continue
        try:
            data = json.loads(text_of(message.content))
        except ValueError:
            continue
        if isinstance(data, dict):
            facts.update((k, v) for k, v in data.items() if isinstance(v, str))
    return facts


class Script:
    """The rules the model follows; each is used once."""

    def __init__(self) -> None:
        self.rules: list[dict[str, Any]] = []
        self.calls = 0
        self._lock = threading.Lock()

    def add(self, rules: Sequence[dict[str, Any]]) -> None:
        with self._lock:
            self.rules.extend(dict(rule) for rule in rules)

    def reply(self, messages: Sequence[BaseMessage]) -> AIMessage:
        tool_names: dict[str, str] = {}
        for message in messages:
            if isinstance(message, AIMessage):
                for call in message.tool_calls:
                    tool_names[str(call.get("id"))] = call["name"]
        last = messages[-1]
        now = situation(last, tool_names)
        text = text_of(last.content)
        with self._lock:
            for index, rule in enumerate(self.rules):
                if rule.get("on") == now and rule.get("contains", "") in text:
                    del self.rules[index]
                    break
            else:
                rule = {"say": "done" if now.startswith("tool:") else "ok"}
            self.calls += 1
            call_id = f"call_{self.calls}"
        if "call" in rule:
            name = rule["call"]["name"]
            args = fill(rule["call"].get("args", {}), facts_of(messages))
            emit("model_reply", situation=now, tool=name, args=args)
            tool_call = {
                "index": 0,
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            return AIMessage(content="", additional_kwargs={"tool_calls": [tool_call]})
        emit("model_reply", situation=now, text=rule["say"])
        return AIMessage(content=rule["say"])


class ScriptedChat(GenericFakeChatModel):
    """A fake chat model that reports what it is given and answers from a :class:`Script`."""

    script: Any = None

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChat:
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        # What is new since the model's last reply: the user's prompt, a peer message, results.
        start = len(messages)
        while start > 0 and not isinstance(messages[start - 1], AIMessage):
            start -= 1
        for message in messages[start:]:
            role = (
                "tool"
                if isinstance(message, ToolMessage)
                else "human"
                if isinstance(message, HumanMessage)
                else message.type
            )
            emit("model_input", role=role, text=text_of(message.content))
        return ChatResult(generations=[ChatGeneration(message=self.script.reply(messages))])


# -- helper extensions: a recorder and a slow tool ---------------------------------------------


class Recorder:
    """Prints the host's events a viewer cares about: turns, their provenance, tool results."""

    def __init__(self) -> None:
        self.run: str | None = None
        self.opening = False
        self.turns = 0
        self.runtime: SessionRuntime | None = None  # for the budget left after a tool call

    def activate(self, api: ExtensionAPI) -> None:
        api.on("agent_start", self._agent_start)
        api.on("message_start", self._message_start)
        api.on("tool_execution_start", self._tool_start)
        api.on("tool_execution_end", self._tool_end)
        api.on("agent_end", self._agent_end)

    def _agent_start(self, event: Any) -> None:
        run_id = field_of(event, "run_id") or ""
        if run_id:  # a slash command's synthetic run has none
            self.run, self.opening = run_id, True
            self.turns += 1

    def _message_start(self, event: Any) -> None:
        if self.run is None or not self.opening:
            return
        message = field_of(event, "message")
        role = field_of(message, "role")
        if role == "assistant":
            return
        self.opening = False
        custom = field_of(message, "customType")
        provenance = "user" if role == "user" else "peer" if custom == "cross-session" else "other"
        data: dict[str, Any] = {"turn": self.turns, "provenance": provenance, "role": role}
        if custom is not None:
            data["customType"] = custom
            details = field_of(message, "details") or {}
            data["messageId"] = field_of(details, "messageId")
            data["from"] = field_of(field_of(details, "from"), "name")
        data["text"] = text_of(field_of(message, "content"))
        emit("turn_start", **data)

    def _tool_start(self, event: Any) -> None:
        emit("tool_start", tool=field_of(event, "tool_name"), args=field_of(event, "args"))

    def _tool_end(self, event: Any) -> None:
        result = field_of(event, "result")
        emit(
            "tool_result",
            tool=field_of(event, "tool_name"),
            isError=bool(field_of(event, "is_error")),
            text=text_of(field_of(result, "content")),
            details=field_of(result, "details"),
            budget=None if self.runtime is None else self.runtime.remaining_budget(),
        )

    def _agent_end(self, event: Any) -> None:
        run_id = field_of(event, "run_id") or ""
        if not run_id and self.run is None:
            return  # a slash command's synthetic run
        reasons = [
            field_of(m, "stopReason")
            for m in field_of(event, "messages") or []
            if field_of(m, "role") == "assistant"
        ]
        emit("turn_end", turn=self.turns, stopReasons=reasons)
        self.run, self.opening = None, False


class LongJob:
    """A tool ``long_job`` that keeps a turn busy until released (stdin) or aborted."""

    def __init__(self) -> None:
        self.release = asyncio.Event()

    def activate(self, api: ExtensionAPI) -> None:
        api.register_tool(
            ToolDefinition(
                name="long_job",
                description="Run a long job (the demo releases it).",
                parameters={"type": "object", "properties": {}},
                execute=self._execute,
                annotations={"readOnlyHint": True},
            )
        )

    async def _execute(
        self, tool_call_id: str, params: Any, signal: Any = None, on_update: Any = None
    ) -> AgentToolResult:
        self.release.clear()
        emit("tool_waiting", tool="long_job")
        waits = [asyncio.ensure_future(self.release.wait())]
        if signal is not None:
            waits.append(asyncio.ensure_future(signal.wait_aborted()))
        _, pending = await asyncio.wait(
            waits, timeout=LONG_JOB_S, return_when=asyncio.FIRST_COMPLETED
        )
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        outcome = "finished" if self.release.is_set() else "interrupted"
        return AgentToolResult(content=[{"type": "text", "text": f"long job {outcome}"}])


# -- the session -------------------------------------------------------------------------------


async def read_stdin(queue: asyncio.Queue[dict[str, Any] | None]) -> None:
    """Feed stdin's JSON lines to ``queue`` from a thread (None at EOF)."""
    loop = asyncio.get_running_loop()

    def pump() -> None:
        for line in sys.stdin:
            line = line.strip()
            if not line:
                continue
            try:
                item = json.loads(line)
            except ValueError:
                emit("error", error=f"not JSON: {line!r}")
                continue
            loop.call_soon_threadsafe(queue.put_nowait, item)
        loop.call_soon_threadsafe(queue.put_nowait, None)

    threading.Thread(target=pump, daemon=True, name="stdin").start()


async def main(args: argparse.Namespace) -> int:
    script = Script()
    script.add(args.rules)
    chat = ScriptedChat(messages=iter([]), script=script)
    langchain_stream.resolve_chat_model = lambda *a, **k: chat

    cwd = args.cwd
    options = {"cwd": cwd, **({"id": args.session_id} if args.session_id else {})}
    session = await MemorySessionRepo().create(options)
    recorder, long_job = Recorder(), LongJob()

    def extension(api: ExtensionAPI) -> None:
        if args.budget is None:
            pi_python.activate(api)
        else:
            runtime_options = RuntimeOptions(budget=args.budget)
            pi_python.PiPythonSession(api, runtime_options=runtime_options).install()

    harness = AgentHarness(
        session=session,
        model=Model(provider="fake", model_id="fake"),
        stream_fn=langchain_stream.langchain_stream,
        env=LocalExecutionEnv(cwd),
        extensions=[extension, recorder.activate, long_job.activate],
        auto_discover_extensions=False,
    )
    harness.subscribe(
        lambda event, *_: (
            emit("notice", text=str(field_of(event, "text") or field_of(event, "message")))
            if field_of(event, "type") == "notice"
            else None
        )
    )
    await harness.load_extensions()

    session_id = (await harness.session.get_metadata()).id
    runtime = pi_python.runtime_for(session_id)
    registration = None if runtime is None else runtime.registration()
    if registration is None:
        emit("error", error="the cross-session inbox did not start")
        await harness.close()
        return 1
    recorder.runtime = runtime
    emit(
        "ready",
        name=args.name,
        sessionId=session_id,
        publishedName=registration.name,
        instanceId=registration.instance_id,
        pid=os.getpid(),
    )

    queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
    await read_stdin(queue)
    tasks: set[asyncio.Task[None]] = set()

    async def run_prompt(text: str) -> None:
        try:
            if text.startswith("/"):
                # Commands run between turns: let a turn that just reported its end settle.
                await harness.wait_for_idle()
            message = await harness.prompt(text)
        except Exception as exc:
            emit("error", error=f"{type(exc).__name__}: {exc}", prompt=text)
            return
        if text.startswith("/"):
            blocks = message.content
            reply = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
            emit("command", command=text, output=reply)

    while True:
        item = await queue.get()
        if item is None or item.get("exit"):
            break
        if "script" in item:
            script.add(item["script"])
        if "prompt" in item:
            task = asyncio.ensure_future(run_prompt(str(item["prompt"])))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            await asyncio.sleep(0)  # let the turn begin before the next control line
        if item.get("release"):
            long_job.release.set()
        if item.get("abort"):
            emit("aborting")
            await harness.abort()

    await asyncio.gather(*tasks, return_exceptions=True)
    await harness.wait_for_idle()
    await harness.close()
    emit("exit")
    return 0


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--name", required=True, help="the label printed with every event")
    parser.add_argument("--session-id", help="the session id (default: a fresh UUIDv7)")
    parser.add_argument("--script", help="a JSON file of the model's first rules")
    parser.add_argument("--cwd", help="the session's working directory (default: here)")
    parser.add_argument(
        "--budget", type=int, help="the lifetime message budget (default: the contract's 256)"
    )
    args = parser.parse_args(argv)
    # Read before the loop starts (no blocking file access inside it).
    args.rules = json.loads(Path(args.script).read_text()) if args.script else []
    args.cwd = os.path.abspath(args.cwd or os.getcwd())
    return args


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main(parse())))
