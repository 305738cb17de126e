"""The pi-python host: ``activate(api)``, loaded through the ``pi_agent.extensions`` entry point.

pi-python (``pi-agent-*-lc`` 0.6) calls :func:`activate` once per session, inside the session's
event loop; several sessions may share one process (the ACP agent keeps one harness per session).
So everything lives in one :class:`PiPythonSession` per activation, and the only module state is a
registry of live sessions keyed by session id, used by the process-exit fallback.

What it wires, and why each way ("gap N" marks a shortcoming of the host that the item works
around; the numbers only tell the gaps apart):

* **Lifecycle.** The session's :class:`~pi_cross_session._internal.plugin.runtime.SessionRuntime`
starts at
  ``session_start`` as a task on the host's loop that this object holds, and stops in the
  ``register_cleanup`` callback (``harness.close()``). Processes that end normally without
  ``close()`` (``pi-agent-cli -p``, the ACP agent on stdin EOF: gap 5) are covered by an ``atexit``
  hook that removes the registration and socket of every session still registered here. A process
  killed by a signal runs neither; its registration stays until a listing proves its pid dead and
  reaps it (spec §1.5). Loading the extension again into a running session (the host sends no
  second ``session_start``) replaces the old incarnation with a new one at once.
* **Turns.** The hooks translate pi-python's events into the turn vocabulary of
  :mod:`pi_cross_session._internal.security.turns` and hand them to the runtime's one
  :class:`~pi_cross_session._internal.security.turns.TurnTracker`; admission and the gate read it.
  The translation (gap 2): a turn barrier (awaited right after the host leaves idle) and
  ``before_agent_start`` are :class:`TurnPreparing`; ``agent_start`` of a real run is
  :class:`TurnStarted`; the synthetic runs of slash commands (``run_id == ""``) are not turns — the
  preparation they interrupt is :class:`TurnAbandoned` — but keep us busy while they last, since a
  message injected then would be stranded in the host's steer queue (the one piece of state this
  adapter keeps, ``_command_run``).
* **Provenance.** The messages that open a run, before the model's first reply
  (:class:`ModelReplied`): a ``user`` message is :class:`TurnOpened` by the user; our own
  ``custom`` message (``customType == "cross-session"``) is :class:`OurMessageStarted`, a peer; any
  other extension's ``custom`` message is a notification (trusted in-process code), with the task
  handles it names.
* **How a turn ended** (gap 1): the last assistant message of ``agent_end.messages``: ``stop`` is
  safe; ``aborted`` reports the abort, then the end; ``error``, any other reason, or no assistant
  message at all are unsafe and close the inbox (fail closed). An assistant ``message_end`` with
  ``stopReason == "aborted"`` reports the abort at once (spec §5.6). Each abort and end carries
  the message's stop reason and ``errorMessage`` as the host wrote them (:func:`outcome_of`), so a
  closed inbox says how its turn ended.
* **Submission** (gap 3): ``api._require_bridge().trigger_message("cross-session", text,
  details=...)``, the host's only way for an extension to start a turn; it is looked up with
  ``getattr`` and its absence raises, so admission reports ``injection_failed`` — never a silent
  ``send_message``, which does not start a turn. The user is told with ``api.notify`` (the host does
  not show custom messages to an ACP client).
* **Gate.** A ``tool_call`` hook returns ``{"block": True, "reason": ...}`` per
  :mod:`pi_cross_session._internal.security.gate`.
* **Errors** (gap 8): every hook catches its own; a failure is logged, kept for
  ``/cross-session-status`` and told to the user, and never breaks the user's turn.
* **Tool failures.** pi-python's tool results have no error flag, so a failed send is marked as an
  error through our own ``tool_result`` hook, keeping its structured details.
* **Commands** (gap 9): a command's reply is what it passes to ``api.send_message`` while it runs.
* **Names.** pi-python sessions have no name, and their ids are UUIDv7 (clock first): see
  :func:`default_session_name`. A name set by ``PI_CROSS_SESSION_NAME``, ``[cross_session] name``
  or ``/cross-session-name`` wins over it (:mod:`pi_cross_session._internal.plugin.options`).

Known limits, all failing closed: a manual ``compact()`` or ``navigate_tree()`` leaves idle
without any hook, so a message submitted then waits in the host's steer queue and the inbox latches
after 5 s (the contract's rule for a submission that starts no turn); and a turn that fails before
``agent_start`` (another extension's ``before_agent_start`` raising, say) leaves the inbox
answering ``busy`` until the next turn ends, since no event says it was given up.
"""

from __future__ import annotations

import asyncio
import atexit
import inspect
import logging
import os
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any, Final

import anyio
from pi_agent_core.extensions import ExtensionAPI, ToolDefinition
from pi_agent_core.types import AgentToolResult, ToolAnnotations

from pi_cross_session._internal.plugin import commands, tools
from pi_cross_session._internal.plugin.options import (
    INBOUND_ENTRY_TYPE,
    NAME_ENTRY_TYPE,
    Inbound,
    PluginOptions,
    entry_data,
    load_options,
    name_entry,
    session_choice,
    session_entry,
    session_name_choice,
)
from pi_cross_session._internal.plugin.render import host_status, peer_text
from pi_cross_session._internal.plugin.runtime import RuntimeOptions, SessionRuntime
from pi_cross_session._internal.protocol import sanitize
from pi_cross_session._internal.protocol.io import environment
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import PublicPeer
from pi_cross_session._internal.security import goal_turns
from pi_cross_session._internal.security.admission import Delivery, TurnOutcome
from pi_cross_session._internal.security.call_gate import fail_closed, judge_call
from pi_cross_session._internal.security.gate import DEFAULT_POLICY, GatePolicy
from pi_cross_session._internal.security.goals import Authority
from pi_cross_session._internal.security.provenance import Provenance
from pi_cross_session._internal.security.task_rules import (
    created_handle,
    notification_handles,
    rule_for,
)
from pi_cross_session._internal.security.turns import (
    ModelReplied,
    OurMessageStarted,
    TurnAbandoned,
    TurnAborted,
    TurnEnded,
    TurnEnding,
    TurnEvent,
    TurnOpened,
    TurnPreparing,
    TurnStarted,
    TurnTracker,
)

logger = logging.getLogger(__name__)

#: The custom message type of an inbound peer message (the reference's, spec §7.1).
CUSTOM_TYPE: Final = "cross-session"
#: The session-journal entry type of goal task evidence (ownership, and call notes).
GOAL_EVIDENCE_TYPE: Final = "cross-session:goal-evidence:v1"
#: How long ``session_start`` waits for the inbox to register before letting the session go on.
READY_TIMEOUT_S: Final = 5.0
#: How long cleanup waits for the inbox to stop before removing its files the hard way.
STOP_TIMEOUT_S: Final = 10.0
#: pi-python's session ids are UUIDs of this version (time-ordered; see default_session_name).
UUID7_VERSION: Final = 7
#: How long cleanup lets the runtime's task finish after the runtime stopped, before cancelling.
TASK_GRACE_S: Final = 1.0
#: Host problems kept for ``/cross-session-status``.
MAX_PROBLEMS: Final = 20
#: Failed tool calls remembered until their ``tool_result`` hook marks them as errors.
MAX_FAILED_CALLS: Final = 64

_ENDINGS: Final = {
    "stop": TurnEnding.STOP,
    "aborted": TurnEnding.ABORTED,
    "error": TurnEnding.ERROR,
}


def _field(obj: object, name: str) -> Any:
    """A field of a host payload, which is a pydantic model or (for some events) a dict."""
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def ending_of(messages: object) -> TurnEnding:
    """How a run ended, from the stop reason of its last assistant message."""
    if not isinstance(messages, list):
        return TurnEnding.UNKNOWN
    for message in reversed(messages):
        if _field(message, "role") == "assistant":
            reason = _field(message, "stopReason")
            return _ENDINGS.get(reason, TurnEnding.OTHER) if reason else TurnEnding.UNKNOWN
    return TurnEnding.UNKNOWN


def outcome_of(messages: object) -> TurnOutcome:
    """How the host said a run ended, for the latch's reason: the stop reason of its last
    assistant message as written (``None`` without one) and that message's ``errorMessage``."""
    if isinstance(messages, list):
        for message in reversed(messages):
            if _field(message, "role") == "assistant":
                return _outcome(message)
    return TurnOutcome()


def _outcome(message: object) -> TurnOutcome:
    reason = _field(message, "stopReason")
    error = _field(message, "errorMessage")
    return TurnOutcome(
        stop_reason=reason if isinstance(reason, str) and reason else None,
        error=error if isinstance(error, str) and error else None,
    )


def message_details(delivery: Delivery) -> dict[str, Any]:
    """The ``details`` of the custom message: who sent it and its ids, without the token or git.

    The text is not repeated here (it is the message's content already, up to 1 MB).
    """
    sender = PublicPeer.from_registration(delivery.sender).to_dict()
    sender.pop("git", None)
    details: dict[str, Any] = {
        "messageId": delivery.message_id,
        "from": sender,
        "summary": delivery.summary,
        "sentAt": delivery.sent_at,
    }
    if delivery.goal_id is not None:
        details["goalId"] = delivery.goal_id
    return details


def default_session_name(session_id: str) -> str | None:
    """The name a pi-python session publishes, which has no name of its own.

    The contract's fallback is ``pi-`` plus the first 8 characters of the session id. pi-python's
    ids are UUIDv7, whose first 8 hex digits are the top of a millisecond clock: every session
    started within the same 65 s would get the same name, and addressing by name would be
    ``ambiguous``. For such ids we use the last 8 hex digits (random bits) instead; any other id
    keeps the contract's fallback (``None``).
    """
    try:
        parsed = uuid.UUID(session_id)
    except ValueError:
        return None
    if parsed.version != UUID7_VERSION:
        return None
    return "pi-" + parsed.hex[-8:]


def _annotations(spec: tools.ToolSpec) -> ToolAnnotations:
    # In the CLI's "ask" mode a call goes through unasked only for readOnlyHint, or for
    # destructiveHint False with openWorldHint False: list_pi is read-only; send_pi_message is
    # not destructive but reaches another session, so the user is asked before it runs.
    return ToolAnnotations(
        readOnlyHint=spec.read_only,
        destructiveHint=spec.destructive,
        idempotentHint=spec.idempotent,
        openWorldHint=spec.open_world,
    )


def _result_text(event: object) -> str:
    """The text parts of a tool result's content, joined."""
    content = _field(event, "content")
    if not isinstance(content, list):
        return ""
    parts = [_field(part, "text") for part in content]
    return "\n".join(part for part in parts if isinstance(part, str))


def _describe(exc: BaseException) -> BaseException:
    # anyio wraps a failing task in a group; the one error inside says more to a user.
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


class _Registry:
    """Live sessions of this process, by session id, for the process-exit fallback only."""

    def __init__(self) -> None:
        self.sessions: dict[str, PiPythonSession] = {}
        self._hooked = False

    def add(self, session: PiPythonSession) -> PiPythonSession | None:
        """Register ``session``; returns the one it replaces (a reload of the same session)."""
        previous = self.sessions.get(session.session_id)
        self.sessions[session.session_id] = session
        if not self._hooked:
            atexit.register(self.emergency_cleanup)
            self._hooked = True
        return previous if previous is not session else None

    def remove(self, session: PiPythonSession) -> None:
        if self.sessions.get(session.session_id) is session:
            del self.sessions[session.session_id]

    def emergency_cleanup(self) -> None:
        """Remove the files of every session that never got its ``close()``."""
        for session in list(self.sessions.values()):
            try:
                session.runtime.emergency_cleanup()
            except Exception:  # at exit, one failure must not keep the others' files
                logger.exception("cross-session emergency cleanup failed")
        self.sessions.clear()


_REGISTRY: Final = _Registry()


def runtime_for(session_id: str) -> SessionRuntime | None:
    """The runtime of a live pi-python session in this process, for in-process callers."""
    session = _REGISTRY.sessions.get(session_id)
    return None if session is None else session.runtime


class PiPythonSession:
    """One pi-python session's cross-session messaging: the host port, the hooks, the tools."""

    def __init__(
        self,
        api: ExtensionAPI,
        *,
        locations: Locations | None = None,
        runtime_options: RuntimeOptions | None = None,
        options: PluginOptions | None = None,
    ) -> None:
        self._api = api
        self.session_id = api.session_id
        self._cwd = os.path.abspath(api.cwd)
        self.options = options or load_options(api.home)
        self.locations = locations or environment.resolve()
        self.runtime = SessionRuntime(
            self,
            locations=self.locations,
            options=replace(
                runtime_options or RuntimeOptions(), inbound=self.options.inbound, kind="pi-python"
            ),
            on_goal_evidence=self._journal_goal_evidence,
        )
        # PI_CROSS_SESSION_NAME or agent.toml, until a name saved in the session is read back.
        self.runtime.set_name(self.options.name)
        self.policy: GatePolicy = DEFAULT_POLICY.with_tools(
            self.options.gated_tools_add, self.options.gated_tools_remove
        ).with_protected_roots(str(api.home), self.locations.agent_dir, cwd=self._cwd)
        self.problems: deque[str] = deque(maxlen=MAX_PROBLEMS)
        self._told: set[str] = set()  # kinds of failure the user was already told about
        # A slash command's synthetic run is under way: not a turn, but not idle either.
        self._command_run = False
        # Tasks this object owns: the runtime, and a start scheduled outside session_start.
        self._task: asyncio.Task[None] | None = None
        self._starter: asyncio.Task[None] | None = None
        self._closing = False
        self._failed_calls: OrderedDict[str, None] = OrderedDict()

    # -- installation ----------------------------------------------------------------------------

    def install(self) -> None:
        """Register tools, commands, hooks and cleanup with the host."""
        api = self._api
        for spec, execute in (
            (tools.LIST_PI_SPEC, self._execute_list_pi),
            (tools.SEND_PI_MESSAGE_SPEC, self._execute_send),
            (tools.PEER_GOAL_SPEC, self._execute_peer_goal),
        ):
            api.register_tool(
                ToolDefinition(
                    name=spec.name,
                    description=spec.description,
                    parameters=spec.parameters,
                    execute=execute,
                    label=spec.label,
                    prompt_snippet=spec.snippet,
                    prompt_guidelines=list(spec.guidelines),
                    annotations=_annotations(spec),
                )
            )
        runs: dict[str, Callable[[str], Awaitable[str] | str]] = {
            commands.PEERS: lambda _args: commands.peers(self.runtime),
            commands.LIST_PI: lambda _args: commands.peers(self.runtime),
            commands.STATUS: lambda args: commands.status(self.runtime, args, self.report()),
            commands.RESUME: lambda _args: self._resume(),
            commands.INBOUND: lambda args: commands.inbound(
                self.runtime, args, source=self.options.inbound_source, persist=self._persist
            ),
            commands.NAME: lambda args: commands.name(
                self.runtime, args, source=self.options.name_source, persist=self._persist_name
            ),
        }
        for command in commands.COMMAND_SPECS:
            api.register_command(
                command.name,
                description=command.description,
                handler=self._command(command.name, runs[command.name]),
            )
        api.on("session_start", self._on_session_start)
        api.on("before_agent_start", self._on_before_agent_start)
        api.on("agent_start", self._on_agent_start)
        api.on("message_start", self._on_message_start)
        api.on("message_end", self._on_message_end)
        api.on("agent_end", self._on_agent_end)
        api.on("tool_call", self._on_tool_call)
        api.on("tool_result", self._on_tool_result)
        api.register_cleanup(self._cleanup)
        add_barrier = getattr(api, "add_turn_barrier", None)
        if callable(add_barrier):  # older hosts lack it; before_agent_start still marks the turn
            add_barrier(self._turn_barrier)
        previous = _REGISTRY.add(self)
        if previous is not None:
            # The extension was loaded again into a session that already ran it: the host sends
            # no second session_start, so the new incarnation starts now and the old one stops.
            was_started = previous.started
            # No session_start follows, and the host's entry cache is as old as the first load:
            # take the old runtime's evidence (and its pending call notes) over directly.
            self.runtime.seed_goal_evidence(previous.runtime.goal_evidence())
            previous.supersede()
            if was_started:
                self._schedule_start()

    # -- HostPort --------------------------------------------------------------------------------

    @property
    def session_name(self) -> str | None:
        """pi-python has no session names: see :func:`default_session_name`."""
        return default_session_name(self.session_id)

    @property
    def cwd(self) -> str:
        """The session's working directory, made absolute."""
        return self._cwd

    def is_idle(self) -> bool:
        """No run, no slash-command run, and no turn being prepared."""
        return not self._command_run and not self.turns.host_active

    def submit(self, delivery: Delivery, content: str) -> None:
        """Start a turn with the peer's message (the host's ``trigger_message``); raise if the
        host cannot, so that admission reports ``injection_failed`` and latches."""
        if self._closing:
            raise RuntimeError("the session is closing")
        bridge = self._api._require_bridge()
        trigger = getattr(bridge, "trigger_message", None)
        if not callable(trigger):
            raise RuntimeError("this pi-python version cannot start a turn for an extension")
        trigger(CUSTOM_TYPE, content, details=message_details(delivery))
        self.notify(peer_text.message_preview(delivery))

    def notify(self, text: str) -> None:
        """One line to the user (not the model); never raises.

        Every text shown here is composed by :mod:`.render`, which escapes what peers wrote;
        :func:`~pi_cross_session._internal.protocol.sanitize.block` is the sink's own last guard.
        """
        try:
            self._api.notify(sanitize.block(text))
        except Exception:  # a closed session, say; the text is also logged
            logger.info("cross-session notice not shown: %s", sanitize.line(text))

    # -- state for commands ----------------------------------------------------------------------

    @property
    def started(self) -> bool:
        """True once the runtime was started (whether or not it still runs)."""
        return self._task is not None

    def report(self) -> commands.HostReport:
        """What ``/cross-session-status`` adds about this host session."""
        return commands.HostReport(
            inbound_source=str(self.options.inbound_source),
            warnings=self.options.warnings,
            problems=tuple(self.problems),
            name_source=str(self.options.name_source),
        )

    def _persist(self, value: Inbound) -> None:
        self._api.append_entry(
            INBOUND_ENTRY_TYPE, session_entry(value, changed_at_ms=time.time_ns() // 1_000_000)
        )
        self.options = self.options.with_session_choice(value)

    def _persist_name(self, name: str) -> None:
        # The name holds for this session even if the journal refuses the entry.
        self.options = self.options.with_session_name(name)
        self._api.append_entry(
            NAME_ENTRY_TYPE, name_entry(name, changed_at_ms=time.time_ns() // 1_000_000)
        )

    def _problem(self, what: str, exc: BaseException) -> None:
        exc = _describe(exc)
        logger.warning("cross-session: %s failed", what, exc_info=exc)
        self.problems.append(f"{what}: {type(exc).__name__}: {exc}")
        if what not in self._told:  # a hook failing on every event must not flood the user
            self._told.add(what)
            self.notify(host_status.hook_failed(what, exc))

    # -- lifecycle -------------------------------------------------------------------------------

    async def _on_session_start(self, event: object) -> None:
        try:
            entries = self._api.get_custom_entries(INBOUND_ENTRY_TYPE)
            self.options = self.options.with_session_choice(session_choice(entries))
            names = self._api.get_custom_entries(NAME_ENTRY_TYPE)
            self.options = self.options.with_session_name(session_name_choice(names))
            self.runtime.set_name(self.options.name)
            # Task ownership evidence of earlier goals (never a goal: a reload starts with none).
            evidence = self._api.get_custom_entries(GOAL_EVIDENCE_TYPE)
            self.runtime.seed_goal_evidence(entry_data(evidence, GOAL_EVIDENCE_TYPE))
            self.runtime.set_inbound(self.options.inbound)
            for warning in self.options.warnings:
                self.notify(warning)
            await self.start()
        except Exception as exc:
            self._problem("starting the cross-session inbox", exc)

    def _schedule_start(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.problems.append("the extension was reloaded outside the event loop; not started")
            return
        self._starter = loop.create_task(self.start(), name=f"pi-cross-session start {self}")

    async def start(self) -> None:
        """Start the runtime on the running loop and wait (bounded) until it is registered."""
        if self._task is not None or self._closing:
            return
        ready = asyncio.Event()
        runtime = self.runtime

        async def serve() -> None:
            try:
                async with anyio.create_task_group() as group:
                    await group.start(runtime.run)
                    ready.set()
            finally:
                ready.set()

        task = asyncio.get_running_loop().create_task(serve(), name=f"pi-cross-session {self}")
        task.add_done_callback(self._on_runtime_done)
        self._task = task
        try:
            await asyncio.wait_for(ready.wait(), READY_TIMEOUT_S)
        except TimeoutError:
            self.problems.append(f"the inbox did not register within {READY_TIMEOUT_S:g} s")
            self.notify(host_status.inbox_start_failed("it did not register in time"))

    def _on_runtime_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        exc = task.exception()  # retrieved here, so it is never "never retrieved"
        if exc is not None and not self._closing:
            exc = _describe(exc)
            logger.warning("cross-session inbox stopped", exc_info=exc)
            self.problems.append(f"the inbox stopped: {type(exc).__name__}: {exc}")
            self.notify(host_status.inbox_start_failed(exc))

    def supersede(self) -> None:
        """A newer activation took this session over: stop without waiting (its own cleanup,
        run later by the host, finds nothing left to do)."""
        self._closing = True
        self.runtime.request_stop()
        _REGISTRY.remove(self)

    async def _cleanup(self) -> None:
        """``harness.close()``: stop the runtime, then make sure its files are gone."""
        self._closing = True
        try:
            if self._starter is not None and not self._starter.done():
                self._starter.cancel()  # a start still under way has nothing worth finishing
            try:
                await asyncio.wait_for(self.runtime.stop(), STOP_TIMEOUT_S)
            except TimeoutError:
                self.problems.append(f"the inbox did not stop within {STOP_TIMEOUT_S:g} s")
            tasks = [t for t in (self._starter, self._task) if t is not None and not t.done()]
            if tasks:
                # After a clean stop the runtime's task ends within a loop step or two.
                _, late = await asyncio.wait(tasks, timeout=TASK_GRACE_S)
                for task in late:
                    task.cancel()
        except Exception:
            logger.exception("cross-session cleanup failed")
        finally:
            # A no-op once the incarnation closed itself; otherwise the files go now.
            self.runtime.emergency_cleanup()
            _REGISTRY.remove(self)

    # -- turns -----------------------------------------------------------------------------------

    async def _turn_barrier(self) -> None:
        # Awaited right after the host left idle for a turn: the earliest moment we can learn
        # that a turn is coming, so that no peer message is injected into its steer queue.
        try:
            self._preparing_turn()
            if self._task is None and not self._closing:
                # Loaded into a session whose session_start had already fired (a late
                # load_extension): start now rather than never.
                await self.start()
        except Exception as exc:
            self._problem("preparing a turn", exc)

    def _on_before_agent_start(self, event: object) -> None:
        try:
            self._preparing_turn()
        except Exception as exc:
            self._problem("preparing a turn", exc)

    @property
    def turns(self) -> TurnTracker:
        """The session's turn tracker (the runtime's), which the hooks below feed."""
        return self.runtime.turns

    def _report(self, event: TurnEvent, outcome: TurnOutcome | None = None) -> None:
        if outcome is not None:
            self.runtime.note_turn_outcome(outcome)
        self.runtime.on_turn(event)

    def _preparing_turn(self) -> None:
        # A command's synthetic run prepares no turn (the tracker ignores it during a turn).
        if not self._command_run:
            self._report(TurnPreparing())

    def _command_started(self) -> None:
        # The ACP agent awaits the turn barriers before it knows a prompt is a slash command, so
        # the barrier may have announced a turn that never comes: take it back. The command run
        # itself still keeps the host non-idle (see is_idle), so nothing is submitted meanwhile.
        self._command_run = True
        self._report(TurnAbandoned())

    def _on_agent_start(self, event: object) -> None:
        try:
            run_id = _field(event, "run_id") or ""
            if not run_id:
                # A slash command's synthetic run (commands only run while idle): not a turn.
                if not self.turns.turn_running:
                    self._command_started()
                return
            # A submission of ours still in flight lands in this turn, whoever opened it (the
            # host steers it in when a user prompt won the race): the tracker makes it a peer
            # turn.
            self._report(TurnStarted())
        except Exception as exc:
            self._problem("tracking the start of a turn", exc)

    def _on_message_start(self, event: object) -> None:
        try:
            if self._command_run or not self.turns.turn_running:
                return
            message = _field(event, "message")
            role = _field(message, "role")
            if role == "assistant":
                self._report(ModelReplied())
            elif role == "custom" and _field(message, "customType") == CUSTOM_TYPE:
                self._report(self._message_of_ours(message))
            elif role == "user":
                self._report(TurnOpened(Provenance.USER))
            elif role == "custom":
                handles = notification_handles(_field(message, "details"))
                self._report(TurnOpened(Provenance.NOTIFICATION, handles))
        except Exception as exc:
            self._problem("tracking a message", exc)

    @staticmethod
    def _message_of_ours(message: object) -> TurnEvent:
        # Only the id pair is read from the details: the goal and sender of a peer turn come
        # from admission's record of what it submitted, never from the message itself.
        details = _field(message, "details")
        message_id = _field(details, "messageId")
        sender = _field(_field(details, "from"), "instanceId")
        if isinstance(message_id, str) and isinstance(sender, str):
            return OurMessageStarted(message_id, sender)
        return TurnOpened(Provenance.PEER)

    def _on_message_end(self, event: object) -> None:
        try:
            message = _field(event, "message")
            if (
                self.turns.turn_running
                and _field(message, "role") == "assistant"
                and _field(message, "stopReason") == "aborted"
            ):
                self._report(TurnAborted(), _outcome(message))
        except Exception as exc:
            self._problem("tracking an abort", exc)

    def _on_agent_end(self, event: object) -> None:
        try:
            run_id = _field(event, "run_id") or ""
            if not run_id and self._command_run:
                self._command_run = False
                self._report(TurnAbandoned())
                return
            # Otherwise this ends the running turn. A run that failed by an exception ends with
            # events the host synthesises without a run id, so an empty one counts too; an end
            # with no start on record (the run failed before agent_start) still settles the turn
            # being prepared — as unsafe, since nothing vouches for it.
            messages = _field(event, "messages")
            ending = ending_of(messages)
            # How the host said it ended (its stop reason and error text): the reason the user
            # is shown if this end closes the inbox.
            outcome = outcome_of(messages)
            if ending is TurnEnding.ABORTED:
                self._report(TurnAborted(), outcome)
            self._report(TurnEnded(ending), outcome)
        except Exception as exc:
            self._problem("tracking the end of a turn", exc)

    # -- the gate --------------------------------------------------------------------------------

    def _on_tool_call(self, event: object) -> dict[str, Any] | None:
        tool_name = _field(event, "toolName")
        if not isinstance(tool_name, str):
            return None
        tool_input = _field(event, "input")
        arguments = self._wire_arguments(
            tool_name, tool_input if isinstance(tool_input, Mapping) else {}
        )
        # A call from outside this session's own loop (a workflow's sub-agent) is judged by the
        # running turn, or between turns by the last one, which most plausibly started that work.
        own_loop = _field(event, "origin") is None
        authority = self.turns.authority_for_call(own_loop=own_loop)
        try:
            judgement = judge_call(
                tool_name=tool_name,
                arguments=arguments,
                own_loop=own_loop,
                authority=authority,
                facts=self.turns.facts,
                goals=self.runtime.goals,
                policy=self.policy,
            )
            if judgement.notes_task:
                self._note_task_call(event)
        except Exception as exc:
            self._problem("the tool-call gate", exc)
            judgement = fail_closed(authority, tool_name, self.policy)
        if judgement.allowed:
            return None
        logger.info(
            "cross-session gate blocked %s in a %s turn", sanitize.line(tool_name), authority
        )
        return {"block": True, "reason": judgement.reason}

    def _wire_arguments(self, tool_name: str, arguments: Mapping[str, Any]) -> Mapping[str, Any]:
        # The host validates our tools' parameters with their pydantic models and hands the hook
        # the models' field names (goal_id), while the gate reads the wire names (goalId).
        if tool_name != tools.PEER_GOAL:
            return arguments
        return tools.PeerGoalParams.wire_arguments(arguments)

    def _note_task_call(self, event: object) -> None:
        # While a goal is active, what a task call creates belongs to that goal: noted (and
        # journaled) before the tool runs, attributed from its result (goal-scoped-v1 §3).
        goals = self.runtime.goals
        call_id = _field(event, "toolCallId")
        if goals is not None and isinstance(call_id, str):
            goals.note_call(call_id)

    def _settle_task_call(self, event: object, call_id: str) -> None:
        goals = self.runtime.goals
        if goals is None or goals.noted_goal(call_id) is None:
            return
        handle = None
        tool_name = _field(event, "toolName")
        tool_input = _field(event, "input")
        arguments = tool_input if isinstance(tool_input, Mapping) else {}
        rule = rule_for(self.policy.task_rules, str(tool_name), arguments)
        if rule is not None and not _field(event, "isError"):
            handle = created_handle(rule, _field(event, "details"), _result_text(event))
        goals.settle_call(call_id, handle)

    def _journal_goal_evidence(self, entry: Mapping[str, object]) -> None:
        self._api.append_entry(GOAL_EVIDENCE_TYPE, dict(entry))

    def _goal_authority(self, signal: object) -> Authority:
        return goal_turns.authority_of(
            self.turns.facts, self.runtime.goals, aborted=bool(getattr(signal, "aborted", False))
        )

    # -- tools -----------------------------------------------------------------------------------

    def _result(self, tool_call_id: str, output: tools.ToolOutput) -> AgentToolResult:
        if output.is_error:
            self._failed_calls[tool_call_id] = None
            while len(self._failed_calls) > MAX_FAILED_CALLS:
                self._failed_calls.popitem(last=False)
        # The text comes from render, which escaped every peer string; the sink guards anyway.
        text = sanitize.block(output.text)
        return AgentToolResult(content=[{"type": "text", "text": text}], details=output.details)

    async def _execute_list_pi(
        self, tool_call_id: str, params: object, signal: object = None, on_update: object = None
    ) -> AgentToolResult:
        return self._result(tool_call_id, await tools.run_list_pi(self.runtime))

    async def _execute_send(
        self, tool_call_id: str, params: object, signal: object = None, on_update: object = None
    ) -> AgentToolResult:
        # The send is not raced against an abort: it is bounded by the contract's 5 s deadline,
        # and cutting it short would lose the messageId the model needs to ask about it later.
        if not isinstance(params, tools.SendPiMessageParams):
            params = tools.SendPiMessageParams.model_validate(params)
        return self._result(tool_call_id, await tools.run_send_pi_message(self.runtime, params))

    async def _execute_peer_goal(
        self, tool_call_id: str, params: object, signal: object = None, on_update: object = None
    ) -> AgentToolResult:
        if not isinstance(params, tools.PeerGoalParams):
            params = tools.PeerGoalParams.model_validate(params)
        output = await tools.run_peer_goal(
            self.runtime, params, lambda: self._goal_authority(signal)
        )
        return self._result(tool_call_id, output)

    def _on_tool_result(self, event: object) -> dict[str, Any] | None:
        try:
            call_id = _field(event, "toolCallId")
            if isinstance(call_id, str):
                self._settle_task_call(event, call_id)
            if isinstance(call_id, str) and call_id in self._failed_calls:
                del self._failed_calls[call_id]
                return {"is_error": True}
        except Exception as exc:
            self._problem("marking a failed tool call", exc)
        return None

    # -- commands --------------------------------------------------------------------------------

    def _resume(self) -> str:
        # The command's own run is not a turn: for resuming, the session is idle when nothing but
        # this command runs. The call is synchronous, so nothing can be admitted in between.
        was_command = self._command_run
        self._command_run = False
        try:
            return commands.resume(self.runtime)
        finally:
            self._command_run = was_command

    def _command(
        self, name: str, run: Callable[[str], Awaitable[str] | str]
    ) -> Callable[..., Awaitable[None]]:
        async def handler(args: object = "") -> None:
            # The host runs a command only from a prompt, and then emits the command's synthetic
            # run; from here on this prompt is a command, not a turn being prepared.
            if not self.turns.turn_running:
                self._command_started()
            try:
                result = run(args if isinstance(args, str) else "")
                text = await result if inspect.isawaitable(result) else result
            except Exception as exc:  # a command's failure is its reply, never the host's error
                logger.warning("/%s failed", name, exc_info=True)
                text = host_status.command_failed(name, exc)
            # The host takes what a command sends while it runs as its reply (gap 9). The text
            # comes from render; the sink guards anyway.
            self._api.send_message(sanitize.block(text))

        return handler

    def __repr__(self) -> str:
        return f"<PiPythonSession {self.session_id}>"


def activate(api: ExtensionAPI) -> None:
    """The entry point: one :class:`PiPythonSession` per session, registered with the host."""
    PiPythonSession(api).install()


__all__ = [
    "CUSTOM_TYPE",
    "GOAL_EVIDENCE_TYPE",
    "READY_TIMEOUT_S",
    "STOP_TIMEOUT_S",
    "PiPythonSession",
    "activate",
    "default_session_name",
    "ending_of",
    "message_details",
    "outcome_of",
    "runtime_for",
]
