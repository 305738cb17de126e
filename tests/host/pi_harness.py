"""Real pi-python sessions for tests: a scripted chat model, harness builders, helper extensions.

The model is langchain's ``GenericFakeChatModel`` with two changes: it accepts ``bind_tools``
and, instead of a fixed list, asks a *responder* — a plain function of the conversation — for
each reply. A test states what the model does in each situation ("when a peer
message arrives, call ``workflow``"), so replies never depend on how many turns ran before.

Tool calls are emitted OpenAI-style in ``additional_kwargs`` (with ``index``), which langchain-core
streams as tool-call chunks; an ``AIMessage(tool_calls=...)`` would not stream.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pi_agent_core.extensions import ExtensionAPI, ToolDefinition
from pi_agent_core.types import AgentToolResult, Model
from pi_agent_harness import AgentHarness, MemorySessionRepo
from pi_agent_harness.env import LocalExecutionEnv

from pi_cross_session._internal.plugin.hosts import pi_python
from pi_cross_session._internal.plugin.hosts.headless import HeadlessHost
from pi_cross_session._internal.plugin.runtime import RuntimeOptions, SessionRuntime
from pi_cross_session._internal.protocol.io.exchange import ExchangeConfig
from pi_cross_session._internal.security.goals import TaskHandle, TaskKind
from tests.support.bounds import MUST_HAPPEN_S
from tests.support.waiting import eventually

#: The ``peer`` fixture: a headless session ``beta`` and its host.
Peer = tuple[HeadlessHost, SessionRuntime]
#: How a peer's message opens in the model's conversation.
PEER_HEADER = "Message from another session"

# The module, not the function of the same name it exports (pi-python resolves the chat model
# through it).
langchain_stream = importlib.import_module("pi_agent_core.adapters.langchain_stream")

Responder = Callable[[Sequence[BaseMessage]], AIMessage]

#: How often the helpers below look at a condition, and for how long at most.
POLL_S = 0.01
WAIT_S = MUST_HAPPEN_S


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
        return self._texts_of(ToolMessage)

    def human_texts(self) -> list[str]:
        """Every user-role text the model was shown (peer messages included), without repeats."""
        return self._texts_of(HumanMessage)

    def _texts_of(self, kind: type[BaseMessage]) -> list[str]:
        seen: list[str] = []
        for conversation in self.conversations:
            for message in conversation:
                if isinstance(message, kind) and text_of(message) not in seen:
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


def took_over(session_id: str, old: SessionRuntime) -> bool:
    """Whether a runtime other than ``old`` now serves ``session_id`` and has registered.

    A runtime has its identity from the moment an incarnation starts; its registration file is
    written a moment later, and only then may a test count files or expect a peer to find it.
    """
    new = pi_python.runtime_for(session_id)
    return new is not None and new is not old and new.incarnations > 0


async def settle(*runtimes: SessionRuntime) -> None:
    """Wait until no endpoint of ``runtimes`` has an open connection.

    Stopping an endpoint while a probe's connection is still being torn down makes asyncio report
    ``InvalidStateError`` (see tests/support/socket_peers.py), so tests settle before closing. The
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


# -- goal-grant helpers (test_goal_*.py) ----------------------------------------------------------

#: How a plan is named in a prompt or a message text: ``plan:<name>``.
PLAN_RE = re.compile(r"\bplan:([A-Za-z0-9_-]+)")

#: One scripted tool call: the tool's name and its arguments.
Step = tuple[str, dict[str, Any]]


def call_tools(*steps: Step, prefix: str = "multi") -> AIMessage:
    """A reply that calls several tools at once (the host prepares them in order, then runs them
    concurrently)."""
    tool_calls = [
        {
            "index": n,
            "id": f"{prefix}_{n}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)},
        }
        for n, (name, args) in enumerate(steps)
    ]
    return AIMessage(content="", additional_kwargs={"tool_calls": tool_calls})


@dataclass
class PlanResponder:
    """A responder that follows named plans, whoever asks.

    The last user-role message of the conversation (a prompt, a peer message, a notification)
    opens the running turn; if it says ``plan:<name>``, the model makes that plan's tool calls one
    per reply, in order, then says ``done``. A step may be a single :data:`Step` or a tuple of them
    (one reply calling them all). Every call gets a fresh id, so evidence never mixes up calls.
    An opener containing :attr:`failure_marker` makes the model fail instead.
    """

    plans: dict[str, list[Step | tuple[Step, ...]]] = field(default_factory=dict)
    calls: int = 0
    #: A turn whose opener contains this fails in the model (the host ends it with ``error``).
    failure_marker: str = "model:fail"

    def __call__(self, messages: Sequence[BaseMessage]) -> AIMessage:
        opener = max(
            (n for n, message in enumerate(messages) if isinstance(message, HumanMessage)),
            default=None,
        )
        if opener is None:
            return say("ok")
        if self.failure_marker in text_of(messages[opener]):
            raise RuntimeError("the model provider failed")
        found = PLAN_RE.search(text_of(messages[opener]))
        steps = self.plans.get(found.group(1), []) if found else []
        done = sum(isinstance(m, AIMessage) for m in messages[opener + 1 :])
        if done >= len(steps):
            return say("done")
        step = steps[done]
        self.calls += 1
        if isinstance(step[0], str):
            name, args = step
            return call_tool(name, args, call_id=f"call_{self.calls}")
        return call_tools(*step, prefix=f"call_{self.calls}")


@dataclass
class RunWorkflowTool:
    """A helper extension standing in for pi-dynamic-workflows' ``workflow`` tool, with run ids.

    A call without ``resume_from_run_id`` creates run ``run-<n>`` and reports it in
    ``details.runId`` (or, with ``background``, only as ``run_id: <id>`` in its text, as a
    background run does); a call with it resumes that run. ``hold`` keeps the call running until
    :attr:`release` is set or the turn is aborted; ``fail`` makes it raise (an error result).
    ``runs`` records every call that executed.
    """

    runs: list[dict[str, Any]] = field(default_factory=list)
    created: list[str] = field(default_factory=list)
    entered: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    def activate(self, api: ExtensionAPI) -> None:
        api.register_tool(
            ToolDefinition(
                name="workflow",
                description="Run a workflow of sub-agents, or resume one by its run id.",
                parameters={
                    "type": "object",
                    "properties": {
                        "script": {"type": "string"},
                        "resume_from_run_id": {"type": "string"},
                        "background": {"type": "boolean"},
                        "hold": {"type": "boolean"},
                        "fail": {"type": "boolean"},
                    },
                },
                execute=self._execute,
            )
        )

    async def _execute(
        self, tool_call_id: str, params: Any, signal: Any = None, on_update: Any = None
    ) -> AgentToolResult:
        self.runs.append(dict(params))
        if params.get("fail"):
            raise RuntimeError("the workflow failed")
        resumed = params.get("resume_from_run_id")
        if resumed:
            run_id = str(resumed)
        else:
            run_id = f"run-{len(self.created) + 1}"
            self.created.append(run_id)
        if params.get("hold"):
            self.entered.set()
            waits = [asyncio.ensure_future(self.release.wait())]
            if signal is not None:
                waits.append(asyncio.ensure_future(signal.wait_aborted()))
            _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        if params.get("background"):
            text = f"workflow started in the background; run_id: {run_id}"
            return AgentToolResult(content=[{"type": "text", "text": text}])
        return AgentToolResult(
            content=[{"type": "text", "text": f"workflow {run_id} ran"}],
            details={"runId": run_id},
        )


@dataclass
class StubTools:
    """A helper extension registering tools by name that only record that they ran (stand-ins
    for other extensions' settings, goal and delegation tools)."""

    names: tuple[str, ...]
    ran: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def activate(self, api: ExtensionAPI) -> None:
        for name in self.names:
            api.register_tool(
                ToolDefinition(
                    name=name,
                    description=f"Stand-in for {name}.",
                    parameters={"type": "object", "properties": {}, "additionalProperties": True},
                    execute=self._executor(name),
                )
            )

    def _executor(self, name: str) -> Callable[..., Any]:
        async def execute(
            tool_call_id: str, params: Any, signal: Any = None, on_update: Any = None
        ) -> AgentToolResult:
            self.ran.append((name, dict(params)))
            return AgentToolResult(content=[{"type": "text", "text": f"{name} ran"}])

        return execute


@dataclass
class ApiProbe:
    """A helper extension that keeps the host API it was given, to act as another extension of
    the same session (``trigger_message``, as pi-dynamic-workflows does)."""

    api: ExtensionAPI | None = None

    def activate(self, api: ExtensionAPI) -> None:
        self.api = api

    def notify_model(self, custom_type: str, text: str, details: dict[str, Any]) -> None:
        """Start a notification turn (idle) with a custom message of ``custom_type``."""
        assert self.api is not None
        self.api._require_bridge().trigger_message(custom_type, text, details=details)


async def execute_directly(harness: AgentHarness, tool: str, args: dict[str, Any]) -> Any:
    """Run an extension tool's ``execute`` as the host would, but past the ``tool_call`` hooks
    (what a call that got around the gate would do); its result."""
    definition = harness.extension_registry.get_tools()[tool]
    result = definition.execute(f"direct-{tool}", args, None, None)
    return await result if inspect.isawaitable(result) else result


@dataclass(frozen=True)
class ToolResultView:
    """One tool result as the session saved it."""

    tool: str
    text: str
    details: Any
    is_error: bool


async def saved_tool_results(harness: AgentHarness) -> list[ToolResultView]:
    """Every tool result saved in the harness's session, in order."""
    context = await harness.session.build_context()
    views = []
    message: Any
    for message in context.messages:
        if getattr(message, "role", None) != "toolResult":
            continue
        parts = [str(p.get("text", "")) for p in message.content if isinstance(p, dict)]
        views.append(
            ToolResultView(message.toolName, "".join(parts), message.details, message.isError)
        )
    return views


async def journal_entries(harness: AgentHarness, custom_type: str) -> list[Any]:
    """The data of every custom entry of ``custom_type`` in the session journal, including
    writes the host still holds until the turn's end."""
    entries: list[Any] = list(await harness.session.get_entries())
    saved = [entry.data for entry in entries if getattr(entry, "customType", None) == custom_type]
    pending = [
        write.get("data")
        for write in harness.pending_session_writes
        if write.get("type") == "custom_entry" and write.get("custom_type") == custom_type
    ]
    return saved + pending


#: Stand-ins for other extensions' tools a goal grant never covers (or covers only in part:
#: ``Agent`` may create a sub-agent, never with ``schedule``).
GATED_STUB_TOOLS = (
    "goal_update",
    "set_config",
    "set_active_tools",
    "send_user_message",
    "agent",
    "Agent",
)


@dataclass
class GoalHarness:
    """A real harness with our extension and the helpers goal tests need, driven by plans.

    Each ``user`` / ``from_peer`` / ``notified`` call runs one turn that follows the given steps
    (see :class:`PlanResponder`) and returns the tool results that turn saved.
    """

    harness: AgentHarness
    session_id: str
    plans: PlanResponder
    workflow: RunWorkflowTool
    stubs: StubTools
    recorder: Recorder
    probe: ApiProbe
    hold: HoldTool

    @property
    def runtime(self) -> SessionRuntime:
        """Our extension's runtime for this session (a reload replaces it)."""
        runtime = pi_python.runtime_for(self.session_id)
        assert runtime is not None, "the extension is not running in this harness"
        return runtime

    @property
    def instance_id(self) -> str:
        """This session's runtime id now (how peers address it and bind it)."""
        identity = self.runtime.identity
        assert identity is not None, "the inbox is not running"
        return identity.instance_id

    def owner_of_run(self, run_id: str) -> str | None:
        """The goal that owns run ``run_id``, as the running incarnation knows."""
        goals = self.runtime.goals
        assert goals is not None, "the inbox is not running"
        return goals.owner_of(TaskHandle(TaskKind.RUN, run_id))

    def _plan(self, steps: Sequence[Step | tuple[Step, ...]]) -> str:
        name = f"p{len(self.plans.plans) + 1}"
        self.plans.plans[name] = list(steps)
        return name

    async def user(self, *steps: Step | tuple[Step, ...]) -> list[ToolResultView]:
        """A user prompt whose turn makes ``steps``."""
        before = len(await saved_tool_results(self.harness))
        await self.harness.prompt(f"plan:{self._plan(steps)}")
        return (await saved_tool_results(self.harness))[before:]

    async def _turn(self, start: Callable[[str], Awaitable[Any]], steps: Sequence[Any]) -> Any:
        before = len(await saved_tool_results(self.harness))
        ended = len(self.recorder.ended())
        outcome = await start(f"plan:{self._plan(steps)}")
        if getattr(outcome, "status", "submitted") in ("submitted", "queued"):
            await eventually(lambda: len(self.recorder.ended()) > ended)
            await self.harness.wait_for_idle()
        return outcome, (await saved_tool_results(self.harness))[before:]

    async def from_peer(
        self,
        sender: SessionRuntime,
        *steps: Step | tuple[Step, ...],
        goal_id: str | None = None,
        text: str = "please",
    ) -> tuple[Any, list[ToolResultView]]:
        """``sender`` messages this session (scoped to ``goal_id`` if given); when the message
        is admitted, its turn makes ``steps``. Returns the send report and the turn's results."""

        async def send(plan: str) -> Any:
            return await sender.send(self.instance_id, f"{text} {plan}", goal_id=goal_id)

        return await self._turn(send, steps)  # type: ignore[no-any-return]

    async def notified(
        self,
        details: dict[str, Any],
        *steps: Step | tuple[Step, ...],
        custom_type: str = "workflow-result",
    ) -> list[ToolResultView]:
        """Another extension of this session reports back (a notification turn)."""

        async def trigger(plan: str) -> None:
            self.probe.notify_model(custom_type, f"finished; {plan}", details)

        _, results = await self._turn(trigger, steps)
        return results  # type: ignore[no-any-return]

    async def command(self, text: str) -> str:
        """Run a slash command; its reply."""
        return await reply_text(self.harness, text)

    async def start_goal(self, objective: str = "ship the release") -> str:
        """Start a goal from a user turn; its id."""
        [result] = await self.user(("peer_goal", {"action": "start", "objective": objective}))
        assert not result.is_error, result
        goal_id = result.details["goalId"]
        assert isinstance(goal_id, str)
        return goal_id

    async def bind(self, goal_id: str, *peer_ids: str) -> ToolResultView:
        """Bind live peers to the goal from a user turn; the tool's result."""
        args = {"action": "bind", "goalId": goal_id, "peerIds": list(peer_ids)}
        [result] = await self.user(("peer_goal", args))
        return result

    async def complete(self, goal_id: str) -> ToolResultView:
        """Complete the goal from a user turn; the tool's result."""
        [result] = await self.user(("peer_goal", {"action": "complete", "goalId": goal_id}))
        return result


#: How long a goal test session waits for a live peer's probe while binding it. The contract's
#: 350 ms is what a real session uses; on a loaded 2-core test machine the shared event loop can
#: stall that long, and a missed probe would make a live peer look gone to ``bind``.
GOAL_PROBE_S = MUST_HAPPEN_S


def goal_activate(api: ExtensionAPI) -> None:
    """Our extension as :func:`pi_python.activate` loads it, with a patient liveness probe and
    no git lookups (neither is what goal tests are about). A module-level function, so loading it
    again replaces it, as loading ``activate`` again does."""
    options = RuntimeOptions(with_git=False, exchange=ExchangeConfig(probe_deadline_s=GOAL_PROBE_S))
    pi_python.PiPythonSession(api, runtime_options=options).install()


async def goal_harness(
    harnesses: Callable[..., Awaitable[AgentHarness]], model: ScriptedChat, **kwargs: Any
) -> GoalHarness:
    """A :class:`GoalHarness` from the ``harnesses`` fixture (our extension loaded through
    :func:`goal_activate`), the ``model`` following plans."""
    plans = PlanResponder()
    model.responder = plans
    workflow, stubs = RunWorkflowTool(), StubTools(GATED_STUB_TOOLS)
    recorder, probe, hold = Recorder(), ApiProbe(), HoldTool()
    harness = await harnesses(
        goal_activate,
        workflow.activate,
        stubs.activate,
        recorder.activate,
        probe.activate,
        hold.activate,
        ours=False,
        **kwargs,
    )
    return GoalHarness(
        harness, await session_id(harness), plans, workflow, stubs, recorder, probe, hold
    )


async def scoped_goal_harness(
    harnesses: Callable[..., Awaitable[AgentHarness]],
    model: ScriptedChat,
    member: SessionRuntime,
    **kwargs: Any,
) -> tuple[GoalHarness, str]:
    """A :class:`GoalHarness` with an active goal and ``member`` bound to it; and the goal's id."""
    alpha = await goal_harness(harnesses, model, **kwargs)
    goal_id = await alpha.start_goal()
    identity = member.identity
    assert identity is not None, "the member's inbox is not running"
    bound = await alpha.bind(goal_id, identity.instance_id)
    assert not bound.is_error, bound
    return alpha, goal_id


#: How the gate's refusal of a call starts (``{}``: the tool's name).
GATE_BLOCKED = "Blocked by cross-session safety: `{}`"
#: How the gate words a turn acting for a goal, and a turn a plain peer message started.
GOAL_BOUND_TURN = "this turn acts for a goal"
PEER_ONLY_TURN = "started by a message from another agent session"


def gate_blocked(result: ToolResultView, tool: str) -> bool:
    """True when the gate refused ``result``'s call (the tool never ran)."""
    return result.is_error and result.text.startswith(GATE_BLOCKED.format(tool))


def goal_refused(result: ToolResultView, code: str) -> bool:
    """True when ``peer_goal`` itself refused the call with ``code``."""
    details = result.details
    return result.is_error and isinstance(details, dict) and details.get("code") == code


def instance_id_of(runtime: SessionRuntime) -> str:
    """A running runtime's instance id."""
    identity = runtime.identity
    assert identity is not None, "the inbox is not running"
    return identity.instance_id
