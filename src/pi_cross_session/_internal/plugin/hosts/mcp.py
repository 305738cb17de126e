"""The MCP host: ``pi-cross-session mcp``, a stdio MCP server that is one peer of the network.

One server process is one peer: it registers like any session (its own instance id, token,
socket and heartbeat, through :class:`~pi_cross_session._internal.plugin.runtime.SessionRuntime`),
and withdraws its registration when the host closes its stdin or the process is signalled. The
receiver's rules (authentication, kernel peer checks, rate, duplicates, budget, queue, latch) are
the same code as for every other host; this module only translates.

What it offers the host's model (built on the official MCP Python SDK's low-level server):

* the tools ``list_pi`` and ``send_pi_message``, with the same parameters and result texts as the
  pi-python extension (:mod:`~pi_cross_session._internal.plugin.tools`), plus what this host must
  add: the agent dir a listing looked in;
* in **pull** mode, ``read_pi_messages`` (what waits now) and ``wait_pi_message`` (wait, bounded),
  for hosts that cannot receive pushes;
* in **push** mode, the ``claude/channel`` capability: each message becomes a
  ``notifications/claude/channel`` notification, ``content`` framed exactly as the pi-python host
  frames it (:func:`~pi_cross_session._internal.plugin.render.peer_text.peer_message`), ``meta``
  the sender's name, ref, reply address (or why it has none), message id and summary
  (:func:`~pi_cross_session._internal.plugin.render.mcp_host.channel_meta`). No permission relay is
  declared: a peer can never answer a permission prompt;
* ``instructions`` in the initialize result: what a peer message is and how to reply;
* the prompts ``cross-session-status`` and ``cross-session-resume``: prompts are the MCP
  primitive a user invokes (Claude Code refuses to let the model invoke one), so reopening a
  latched inbox stays the local user's act, as ``/cross-session-resume`` is in pi-python.

``peer_goal`` is not offered: a goal must be started and bound in the local user's own turn, and
an MCP server cannot tell the user's turn from one a peer's message started. The peer still sends
goal-scoped messages (``send_pi_message`` with ``goalId``) to sessions whose user bound it.

When a message counts as taken, and what ``submitted`` and ``delivered`` mean, is decided in
:mod:`.mcp_seat`. In push mode the receipt of a message waits until its notification reached the
host's pipe (:meth:`McpHost.hold_receipt`), so ``submitted`` never runs ahead of the write.

Nothing but MCP messages is ever written to stdout: while the server runs, file descriptor 1
points at stderr and the messages go to a private copy of the host's pipe (:func:`serve`), and
logging goes to stderr. When the host closes stdin, the requests already read are answered before
the server exits (:func:`serve_streams`, bounded by ``MCP_DRAIN_TIMEOUT_S``).
"""

from __future__ import annotations

import fcntl
import io
import logging
import os
import sys
import uuid
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Final, Protocol

import anyio
import anyio.abc
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pi_cross_session import __version__
from pi_cross_session._internal.plugin import commands, tools
from pi_cross_session._internal.plugin.hosts.mcp_seat import DeliveryMode, Seat, SeatBusyError
from pi_cross_session._internal.plugin.hosts.mcp_settings import (
    MAX_PULL_MESSAGES,
    MAX_PULL_UNITS,
    MAX_PULL_WAIT_S,
    MCP_DRAIN_TIMEOUT_S,
    MCP_STOP_TIMEOUT_S,
    PULL_HANDOFF_STEP_S,
)
from pi_cross_session._internal.plugin.options import NAME_ENV, parse_name
from pi_cross_session._internal.plugin.render import host_tools, mcp_host
from pi_cross_session._internal.plugin.runtime import RuntimeOptions, SessionRuntime
from pi_cross_session._internal.protocol import sanitize
from pi_cross_session._internal.protocol.limits import MAX_QUEUED
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.text import utf16_length
from pi_cross_session._internal.security.admission import Delivery, Row
from pi_cross_session._internal.security.rows import RowState

logger = logging.getLogger(__name__)

#: The server's name in its initialize result (hosts name it by their own configuration key).
SERVER_NAME: Final = "pi-cross-session"
#: Claude Code's channel capability and notification (research preview, v2.1.80+).
CHANNEL_CAPABILITY: Final = "claude/channel"
CHANNEL_METHOD: Final = "notifications/claude/channel"

#: The name of a server whose working directory has no usable name (``/``).
FALLBACK_NAME: Final = "mcp-session"

READ_PI_MESSAGES: Final = "read_pi_messages"
WAIT_PI_MESSAGE: Final = "wait_pi_message"
STATUS_PROMPT: Final = commands.STATUS
RESUME_PROMPT: Final = commands.RESUME


class _Writer(Protocol):
    """The transport's write side (the SDK's stdio stream), as the push loop uses it."""

    async def send(self, item: SessionMessage, /) -> None:
        """Hand one message to the transport, which writes it to stdout."""
        ...


class PipeWrites(anyio.AsyncFile[str]):
    """The host's pipe as the SDK's transport writes to it, counting the lines whose flush
    returned: those are in the pipe. Every message is one line (JSON has no raw line break), in
    the order the transport took them (:class:`_Transport` numbers them so)."""

    def __init__(self, fp: io.TextIOWrapper) -> None:
        super().__init__(fp)
        self.lines = 0
        self._unflushed = 0
        self._flushed = anyio.Event()

    async def write(self, b: str) -> int:
        """Write (part of) the next lines."""
        written = await super().write(b)
        self._unflushed += b.count("\n")
        return written

    async def flush(self) -> None:
        """Flush into the pipe: every line written so far is then in it."""
        await super().flush()
        if self._unflushed:
            self.lines += self._unflushed
            self._unflushed = 0
            self._flushed.set()
            self._flushed = anyio.Event()

    async def written(self, line: int) -> None:
        """Return once the first ``line`` lines are in the pipe."""
        while self.lines < line:
            await self._flushed.wait()


@dataclass(slots=True)
class _HandOver:
    """One pushed message on its way to the pipe: done once written (``ok``) or failed."""

    done: anyio.Event = field(default_factory=anyio.Event)
    ok: bool = False

    def end(self, *, ok: bool) -> None:
        self.ok = ok
        self.done.set()

    async def wait(self) -> bool:
        await self.done.wait()
        return self.ok


class ReadPiMessagesParams(BaseModel):
    """``read_pi_messages`` takes no parameters."""

    model_config = ConfigDict(extra="forbid", title=READ_PI_MESSAGES)


class WaitPiMessageParams(BaseModel):
    """``wait_pi_message``: how long to wait at most."""

    model_config = ConfigDict(extra="forbid", title=WAIT_PI_MESSAGE)

    seconds: float | None = Field(
        default=None,
        gt=0,
        le=MAX_PULL_WAIT_S,
        allow_inf_nan=False,
        description=mcp_host.WAIT_SECONDS_DESCRIPTION,
    )


#: Not read-only: reading takes the messages out of this session's inbox (a second read does not
#: return them) and turns each into "delivered" for the sender's status query. Nothing is
#: destroyed, and nothing outside this machine's sessions is touched (closed world).
READ_SPEC: Final = tools.ToolSpec(
    name=READ_PI_MESSAGES,
    label=mcp_host.READ_LABEL,
    description=mcp_host.READ_DESCRIPTION,
    snippet=mcp_host.READ_DESCRIPTION,
    parameters=ReadPiMessagesParams,
    open_world=False,
)
WAIT_SPEC: Final = tools.ToolSpec(
    name=WAIT_PI_MESSAGE,
    label=mcp_host.WAIT_LABEL,
    description=mcp_host.WAIT_DESCRIPTION,
    snippet=mcp_host.WAIT_DESCRIPTION,
    parameters=WaitPiMessageParams,
    open_world=False,
)


@dataclass(frozen=True, slots=True)
class McpOptions:
    """How one ``pi-cross-session mcp`` process presents itself."""

    name: str
    cwd: str
    delivery: DeliveryMode = DeliveryMode.PULL
    inbound: str = "accept"
    #: Where the inbound setting came from, for the status prompt (``flag``, ``env``,
    #: ``default``: :data:`~pi_cross_session._internal.plugin.render.mcp_host.INBOUND_SOURCES`).
    inbound_source: str = "default"
    warnings: tuple[str, ...] = ()
    #: Where the name came from, for the status prompt (``flag``, ``env``, ``cwd``, ``fallback``:
    #: :data:`~pi_cross_session._internal.plugin.render.mcp_host.NAME_SOURCES`).
    name_source: str = "flag"
    #: Whether ``PI_CODING_AGENT_DIR`` named the agent dir (else the default one is used), for
    #: what ``list_pi`` and the start-up line say about it.
    agent_dir_from_env: bool = True


@dataclass(slots=True)
class _Reader:
    """One read or wait in progress: what was handed over to it so far."""

    taken: list[tuple[Delivery, str]] = field(default_factory=list)
    units: int = 0


@dataclass(frozen=True, slots=True)
class PullResult:
    """What one read collected, and what it should tell the model besides."""

    messages: tuple[tuple[Delivery, str], ...]
    remaining: int
    expired: tuple[Row, ...]

    @property
    def text(self) -> str:
        """The result text: framed messages, then what is still waiting or expired unread."""
        return mcp_host.pulled_messages(
            self.messages,
            remaining=self.remaining,
            expired=self.expired,
        )


class McpHost:
    """A :class:`~pi_cross_session._internal.plugin.host.HostPort` for an MCP host, and its read
    side."""

    def __init__(self, options: McpOptions, *, session_id: str | None = None) -> None:
        self.options = options
        self._session_id = session_id or str(uuid.uuid4())
        self._seat: Seat | None = None
        self._runtime: SessionRuntime | None = None
        # Push: one notification at a time is being written (the seat takes one at a time).
        pushes: tuple[
            MemoryObjectSendStream[tuple[Delivery, str]],
            MemoryObjectReceiveStream[tuple[Delivery, str]],
        ] = anyio.create_memory_object_stream[tuple[Delivery, str]](1)
        self._pushes_in, self._pushes_out = pushes
        # Push: each message handed over until its notification is in the pipe, by its key.
        self._hand_overs: dict[tuple[str, str], _HandOver] = {}
        self._reader: _Reader | None = None
        self._read_lock = anyio.Lock()
        self._changed = anyio.Event()
        # Messages that expired unread since the last read, for the next read to mention.
        self._expired: deque[Row] = deque(maxlen=MAX_QUEUED)
        self._closing = False
        self.pushed: int = 0

    # -- wiring ----------------------------------------------------------------------------------

    def attach(self, runtime: SessionRuntime) -> Seat:
        """Bind the runtime this host reports to; returns the seat (the turn model)."""
        self._runtime = runtime
        self._seat = Seat(self.options.delivery, runtime)
        return self._seat

    @property
    def seat(self) -> Seat:
        """The turn model (see :mod:`.mcp_seat`)."""
        if self._seat is None:
            raise RuntimeError("the MCP host is not attached to a runtime")
        return self._seat

    @property
    def runtime(self) -> SessionRuntime:
        """The session runtime this host belongs to."""
        if self._runtime is None:
            raise RuntimeError("the MCP host is not attached to a runtime")
        return self._runtime

    def observe_row(self, row: Row) -> None:
        """The runtime's row observer: remember expirations, and wake a waiting reader."""
        if row.state is RowState.EXPIRED:
            self._expired.append(row)
        self._wake()

    def close(self) -> None:
        """The host connection is ending: take nothing more."""
        self._closing = True
        if self._seat is not None:
            self._seat.close()
        self._pushes_in.close()
        self._wake()

    # -- HostPort --------------------------------------------------------------------------------

    @property
    def session_id(self) -> str:
        """A fresh id per server process (one process is one peer)."""
        return self._session_id

    @property
    def session_name(self) -> str | None:
        """``--name``, ``PI_CROSS_SESSION_NAME``, or the host's working directory's name."""
        return self.options.name

    @property
    def cwd(self) -> str:
        """The host's working directory (an MCP host starts its servers in it)."""
        return self.options.cwd

    def is_idle(self) -> bool:
        """True exactly while a message would be taken at once (see :mod:`.mcp_seat`)."""
        return self._seat is not None and not self._closing and self._seat.is_idle()

    def submit(self, delivery: Delivery, content: str) -> None:
        """Hand one admitted message over: queue its notification (push), or put it into the
        read in progress (pull). Never blocks; raises when nobody can take it."""
        seat = self.seat
        if self._closing or not seat.is_idle():
            raise SeatBusyError("the MCP host cannot take a message now")
        if seat.mode is DeliveryMode.PUSH:
            self._pushes_in.send_nowait((delivery, content))
            seat.take(delivery)
            self._hand_overs[_key(delivery)] = _HandOver()
            return
        reader = self._reader
        if reader is None:  # the seat is idle in pull mode only while a reader is here
            raise SeatBusyError("no read is in progress")
        seat.take(delivery)
        reader.taken.append((delivery, content))
        reader.units += utf16_length(content)
        self._wake()

    def notify(self, text: str) -> None:
        """A line for the local user: MCP hosts show a server's stderr in their logs."""
        logger.warning("%s", sanitize.line(text))

    def hold_receipt(self, sender_instance_id: str, message_id: str) -> Awaitable[bool] | None:
        """The receiver's receipt of a message just submitted waits on this (a
        :class:`~pi_cross_session._internal.plugin.host.HoldsReceipts` host): in push mode, until
        its notification is in the host's pipe (``True``) or could not be written (``False``: no
        receipt is given, the outcome is unknown). ``None``: nothing to wait for (pull mode)."""
        hand_over = self._hand_overs.get((sender_instance_id, message_id))
        return None if hand_over is None else hand_over.wait()

    # -- push ------------------------------------------------------------------------------------

    async def run_pushes(
        self,
        write: _Writer,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Write each pushed message to the host as a channel notification, one at a time; each
        written one ends its hand-over cleanly, a failed write unsafely (the inbox closes). A
        notification counts as written when ``write.send`` returns: over the real stdout, once
        its line is in the pipe (:meth:`_Transport.into_pipe`)."""
        task_status.started()
        try:
            async with self._pushes_out:
                async for delivery, content in self._pushes_out:
                    notification = types.JSONRPCNotification(
                        jsonrpc="2.0",
                        method=CHANNEL_METHOD,
                        params={"content": content, "meta": mcp_host.channel_meta(delivery)},
                    )
                    ok = True
                    try:
                        await write.send(SessionMessage(notification))
                        self.pushed += 1
                    except (anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
                        ok = False
                        self.notify(mcp_host.mcp_push_failed(exc))
                    hand_over = self._hand_overs.pop(_key(delivery), None)
                    if hand_over is not None:
                        hand_over.end(ok=ok)
                    self.seat.handed(ok=ok)
        finally:
            # Whatever was not written by now never will be: no receipt may wait for it.
            for hand_over in self._hand_overs.values():
                hand_over.end(ok=False)
            self._hand_overs.clear()

    # -- pull ------------------------------------------------------------------------------------

    async def read(self, *, wait_s: float = 0.0) -> PullResult:
        """Collect what waits now; with ``wait_s``, wait up to that long for a first message.

        One read at a time. Queued messages are handed over one per pass of the runtime's loop,
        as after a real turn, until the queue is empty or the result is full; the messages in the
        result are reported delivered once it is complete.
        """
        async with self._read_lock:
            reader = _Reader()
            self._reader = reader
            seat = self.seat
            seat.reader_arrived()
            try:
                await self._collect(reader, wait_s)
            finally:
                # No await from here until the reader is gone: a hand-over can only happen at an
                # await, so none can land in a reader that has left.
                self._settle(reader)
                self._reader = None
                seat.reader_left()
            for delivery, _ in reader.taken:
                seat.delivered(delivery)
            expired = tuple(self._expired)
            self._expired.clear()
            return PullResult(tuple(reader.taken), self._queued(), expired)

    async def _collect(self, reader: _Reader, wait_s: float) -> None:
        deadline = anyio.current_time() + wait_s
        while True:
            changed = self._changed = anyio.Event()
            self._settle(reader)
            if len(reader.taken) >= MAX_PULL_MESSAGES or reader.units >= MAX_PULL_UNITS:
                return
            if self._closing:
                return
            queued = self._queued()
            now = anyio.current_time()
            if queued == 0:
                if reader.taken or now >= deadline:
                    return
                timeout = deadline - now
            else:
                timeout = PULL_HANDOFF_STEP_S
            with anyio.move_on_after(timeout) as scope:
                await changed.wait()
            if scope.cancelled_caught and queued:
                logger.warning("queued messages were not handed over in time; read ends")
                return

    def _settle(self, reader: _Reader) -> None:
        # The message handed to this reader is in its result: that hand-over (a peer turn) ends.
        if self._reader is reader and self.seat.handing is not None:
            self.seat.handed()

    def _queued(self) -> int:
        snapshot = self.runtime.snapshot()
        return 0 if snapshot is None else snapshot.queued

    def _wake(self) -> None:
        self._changed.set()

    # -- prompts ---------------------------------------------------------------------------------

    def status_text(self) -> str:
        """``cross-session-status``: where the name and the inbound setting came from is said in
        this server's words (its option, its variable, its working directory)."""
        options = self.options
        report = commands.HostReport(
            inbound_source=mcp_host.INBOUND_SOURCES.get(
                options.inbound_source, options.inbound_source
            ),
            warnings=options.warnings,
            name_source=mcp_host.NAME_SOURCES.get(options.name_source, options.name_source),
        )
        return commands.status(self.runtime, "", report)

    def resume_text(self) -> str:
        """``cross-session-resume``: the local user invoked it, so the host is at rest (no turn
        of its model runs while its user types); a hand-over in progress still refuses it."""
        seat = self.seat
        seat.reader_arrived()
        try:
            return commands.resume(self.runtime)
        finally:
            seat.reader_left()


def _key(delivery: Delivery) -> tuple[str, str]:
    return delivery.sender.instance_id, delivery.message_id


# -- the MCP server ------------------------------------------------------------------------------

ToolRunner = Callable[[BaseModel], Awaitable[tools.ToolOutput]]


def _tool(spec: tools.ToolSpec) -> types.Tool:
    return types.Tool(
        name=spec.name,
        title=spec.label,
        description=spec.description,
        input_schema=spec.parameters.model_json_schema(by_alias=True),
        annotations=types.ToolAnnotations(
            title=spec.label,
            read_only_hint=spec.read_only,
            destructive_hint=spec.destructive,
            idempotent_hint=spec.idempotent,
            open_world_hint=spec.open_world,
        ),
    )


def _validation_text(exc: ValidationError) -> str:
    # The offending input is never echoed back (it may be a megabyte, or a peer's text).
    problems = []
    for error in exc.errors(include_url=False, include_input=False):
        where = ".".join(str(part) for part in error["loc"]) or "arguments"
        problems.append(f"{where}: {error['msg']}")
    return "; ".join(problems)


def _text_result(text: str, *, is_error: bool = False) -> types.CallToolResult:
    # Text only: structured details would carry peer strings to the model unescaped.
    return types.CallToolResult(
        content=[types.TextContent(text=sanitize.block(text))], is_error=is_error
    )


class McpServer:
    """The MCP server of one peer: tools, prompts, instructions and the channel capability."""

    def __init__(self, host: McpHost) -> None:
        self.host = host
        mode = host.options.delivery
        specs: list[tuple[tools.ToolSpec, ToolRunner]] = [
            (tools.LIST_PI_SPEC, self._list_pi),
            (tools.SEND_PI_MESSAGE_SPEC, self._send),
        ]
        if mode is DeliveryMode.PULL:
            specs += [(READ_SPEC, self._read), (WAIT_SPEC, self._wait)]
        self._specs = {spec.name: (spec, run) for spec, run in specs}
        self._tools = [_tool(spec) for spec, _ in specs]
        self._prompts = [
            types.Prompt(name=STATUS_PROMPT, description=mcp_host.STATUS_PROMPT_DESCRIPTION),
            types.Prompt(name=RESUME_PROMPT, description=mcp_host.RESUME_PROMPT_DESCRIPTION),
        ]
        self.server: Server[Any] = Server(
            SERVER_NAME,
            version=__version__,
            instructions=mcp_host.mcp_instructions(mode.value, self._name()),
            on_list_tools=self._on_list_tools,
            on_call_tool=self._on_call_tool,
            on_list_prompts=self._on_list_prompts,
            on_get_prompt=self._on_get_prompt,
        )
        self.server.add_notification_handler(
            "notifications/initialized", types.NotificationParams, self._on_initialized
        )

    def _name(self) -> str:
        name = self.host.runtime.name
        return name if name is not None else self.host.options.name

    def initialization_options(self) -> Any:
        """Capabilities: tools and prompts, and ``claude/channel`` in push mode only (a server
        that never pushes must not register as a channel). Never the permission relay."""
        experimental: dict[str, dict[str, Any]] | None = None
        if self.host.options.delivery is DeliveryMode.PUSH:
            experimental = {CHANNEL_CAPABILITY: {}}
        return self.server.create_initialization_options(experimental_capabilities=experimental)

    # -- handlers --------------------------------------------------------------------------------

    async def _on_initialized(
        self, ctx: ServerRequestContext[Any], params: types.NotificationParams
    ) -> None:
        self.host.seat.host_ready()

    async def _on_list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list(self._tools))

    async def _on_call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        # A host that calls a tool has finished its handshake, whatever it sent before.
        self.host.seat.host_ready()
        entry = self._specs.get(params.name)
        if entry is None:
            raise MCPError(
                code=types.INVALID_PARAMS, message=mcp_host.mcp_unknown_tool(params.name)
            )
        spec, run = entry
        try:
            parsed = spec.parameters.model_validate(dict(params.arguments or {}))
        except ValidationError as exc:
            return _text_result(
                mcp_host.mcp_bad_arguments(spec.name, _validation_text(exc)), is_error=True
            )
        try:
            output = await run(parsed)
        except Exception as exc:  # a bug of ours: the host gets an error result, never a crash
            logger.exception("tool %s failed", spec.name)
            return _text_result(host_tools.tool_failure(spec.name, exc), is_error=True)
        return _text_result(output.text, is_error=output.is_error)

    async def _on_list_prompts(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=list(self._prompts))

    async def _on_get_prompt(
        self, ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        if params.name == STATUS_PROMPT:
            text = self.host.status_text()
        elif params.name == RESUME_PROMPT:
            text = self.host.resume_text()
        else:
            raise MCPError(
                code=types.INVALID_PARAMS, message=mcp_host.mcp_unknown_prompt(params.name)
            )
        message = types.PromptMessage(
            role="user",
            content=types.TextContent(text=sanitize.block(mcp_host.mcp_prompt_result(text))),
        )
        return types.GetPromptResult(messages=[message])

    # -- tools -----------------------------------------------------------------------------------

    async def _list_pi(self, params: BaseModel) -> tools.ToolOutput:
        runtime = self.host.runtime
        output = await tools.run_list_pi(runtime)
        if output.is_error:
            return output
        where = mcp_host.listing_where(
            runtime.locations.agent_dir,
            empty=not output.details.get("peers"),
            from_env=self.host.options.agent_dir_from_env,
        )
        return tools.ToolOutput(f"{output.text}\n{where}", output.details)

    async def _send(self, params: BaseModel) -> tools.ToolOutput:
        assert isinstance(params, tools.SendPiMessageParams)
        # The result says when the summary went out cut, as in every host (tools.py).
        return await tools.run_send_pi_message(self.host.runtime, params)

    async def _read(self, params: BaseModel) -> tools.ToolOutput:
        result = await self.host.read()
        return tools.ToolOutput(result.text)

    async def _wait(self, params: BaseModel) -> tools.ToolOutput:
        assert isinstance(params, WaitPiMessageParams)
        wait_s = MAX_PULL_WAIT_S if params.seconds is None else params.seconds
        result = await self.host.read(wait_s=wait_s)
        return tools.ToolOutput(result.text)


# -- one process, one peer -----------------------------------------------------------------------


class _OpenRequests:
    """The requests read from the host and not answered yet, by id (a multiset: a host may
    reuse an id), so the server can answer them all when the host closes stdin."""

    def __init__(self) -> None:
        self._open: Counter[int | str] = Counter()
        self._changed = anyio.Event()

    def read(self, message: types.JSONRPCMessage) -> None:
        """A message from the host: a request opens; a cancellation closes the request it names
        (the SDK never answers a request its host cancelled)."""
        if isinstance(message, types.JSONRPCRequest):
            self._open[message.id] += 1
        elif isinstance(message, types.JSONRPCNotification) and (
            message.method == "notifications/cancelled" and isinstance(message.params, dict)
        ):
            request_id = message.params.get("requestId")
            if isinstance(request_id, int | str):
                self.answered(request_id)

    def answered(self, request_id: int | str | None) -> None:
        """A response or error for ``request_id`` went to the transport (or never will)."""
        if request_id is None or self._open[request_id] <= 0:
            return
        self._open[request_id] -= 1
        if self._open[request_id] == 0:
            del self._open[request_id]
        self._changed.set()
        self._changed = anyio.Event()

    async def all_answered(self) -> None:
        """Return once every request read so far is answered."""
        while self._open:
            await self._changed.wait()


class _Transport:
    """The transport's write side, shared by the server and the push loop: one message at a time,
    each numbered as the line it becomes on stdout; each answer closes its request."""

    def __init__(self, inner: Any, requests: _OpenRequests, pipe: PipeWrites | None) -> None:
        self._inner = inner
        self._requests = requests
        self._pipe = pipe
        self._lock = anyio.Lock()
        self._lines = 0

    async def _send(self, item: SessionMessage) -> int:
        message = item.message
        async with self._lock:  # the transport takes messages in this order, and writes them so
            try:
                await self._inner.send(item)
            finally:
                if isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
                    self._requests.answered(message.id)
            self._lines += 1
            return self._lines

    async def send(self, item: SessionMessage, /) -> None:
        """Hand one message to the transport."""
        await self._send(item)

    async def into_pipe(self, item: SessionMessage) -> None:
        """Hand one message to the transport; return once it is in the host's pipe (once the
        transport took it, when there is no pipe: an in-memory transport)."""
        line = await self._send(item)
        if self._pipe is not None:
            await self._pipe.written(line)

    def pushes(self) -> _Writer:
        """The write side of the push loop: a notification is written once it is in the pipe."""
        return _IntoPipe(self)

    async def aclose(self) -> None:
        """Close the transport's write side."""
        await self._inner.aclose()

    async def __aenter__(self) -> _Transport:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


@dataclass(frozen=True, slots=True)
class _IntoPipe:
    transport: _Transport

    async def send(self, item: SessionMessage, /) -> None:
        await self.transport.into_pipe(item)


async def _relay_until_answered(
    source: Any,
    sink: MemoryObjectSendStream[SessionMessage | Exception],
    requests: _OpenRequests,
    on_eof: Callable[[], None],
) -> None:
    """Pass the host's messages on to the server; when the host closes stdin, stop taking peer
    messages (``on_eof``), let the requests already read be answered (bounded by
    ``MCP_DRAIN_TIMEOUT_S``), and only then tell the server the input ended. The SDK's server
    cancels every request still running when its input ends, so without this a request written
    just before stdin closed would get "Connection closed" instead of its answer."""
    async with sink:
        async for item in source:
            if isinstance(item, SessionMessage):
                requests.read(item.message)
            await sink.send(item)
        on_eof()
        with anyio.move_on_after(MCP_DRAIN_TIMEOUT_S) as scope:
            await requests.all_answered()
        if scope.cancelled_caught:
            logger.warning("requests still unanswered when the host closed stdin; ending anyway")


async def serve_streams(
    options: McpOptions,
    read_stream: Any,
    write_stream: Any,
    *,
    pipe: PipeWrites | None = None,
    locations: Locations | None = None,
    runtime_options: RuntimeOptions | None = None,
    stop: anyio.Event | None = None,
    finished: anyio.Event | None = None,
    task_status: anyio.abc.TaskStatus[SessionRuntime] = anyio.TASK_STATUS_IGNORED,
) -> SessionRuntime:
    """Run one peer that talks MCP over ``read_stream`` / ``write_stream`` (the SDK's transport
    streams) until the host closes its side (or ``stop`` is set); the requests already read then
    get their answers, and the registration is withdrawn before this returns; ``finished`` is set
    once it is. ``pipe`` is the host's pipe behind ``write_stream`` when there is one (a pushed
    message counts as written once it is in the pipe). Reports the runtime once it is
    registered; returns it (for its ``last_error``). Raises the runtime's error if the inbox
    cannot start."""
    host = McpHost(options)
    runtime = SessionRuntime(
        host,
        locations=locations,
        options=replace(runtime_options or RuntimeOptions(inbound=options.inbound), kind="mcp"),
        on_row=host.observe_row,
        # No /cross-session-resume here: the user reopens through this server's prompt.
        reopen=mcp_host.REOPEN_WITH_PROMPT,
    )
    seat = host.attach(runtime)
    mcp_server = McpServer(host)
    requests = _OpenRequests()
    writer = _Transport(write_stream, requests, pipe)
    relayed_in, relayed_out = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    async with anyio.create_task_group() as group:
        await group.start(runtime.run)
        seat.open()
        await group.start(host.run_pushes, writer.pushes())

        async def stop_when_asked() -> None:
            if stop is not None:
                await stop.wait()
                group.cancel_scope.cancel()

        group.start_soon(stop_when_asked)
        group.start_soon(_relay_until_answered, read_stream, relayed_in, requests, host.close)
        task_status.started(runtime)
        try:
            await mcp_server.server.run(relayed_out, writer, mcp_server.initialization_options())
        finally:
            host.close()
            with anyio.CancelScope(shield=True), anyio.move_on_after(MCP_STOP_TIMEOUT_S):
                await runtime.stop()
            runtime.emergency_cleanup()  # a no-op once the incarnation closed itself
            if finished is not None:
                finished.set()
            group.cancel_scope.cancel()
    return runtime


async def serve(
    options: McpOptions,
    *,
    locations: Locations | None = None,
    runtime_options: RuntimeOptions | None = None,
    stop: anyio.Event | None = None,
    finished: anyio.Event | None = None,
    task_status: anyio.abc.TaskStatus[SessionRuntime] = anyio.TASK_STATUS_IGNORED,
) -> SessionRuntime:
    """:func:`serve_streams` on this process's stdin and stdout. While it serves, the SDK's
    transport points descriptor 1 at stderr, so nothing but MCP messages reaches stdout.

    The transport reads stdin in a worker thread that nothing can interrupt: after ``stop``, this
    returns only once the host closes stdin. ``finished`` says when the peer has withdrawn, which
    is what a signalled process waits for before it exits.
    """
    with _pipe_to_host() as pipe:
        async with stdio_server(stdout=pipe) as (read_stream, write_stream):
            return await serve_streams(
                options,
                read_stream,
                write_stream,
                pipe=pipe,
                locations=locations,
                runtime_options=runtime_options,
                stop=stop,
                finished=finished,
                task_status=task_status,
            )


@contextmanager
def _pipe_to_host() -> Iterator[PipeWrites]:
    """Descriptor 1 for MCP messages alone, as the SDK's transport claims it when given no
    stdout of its own: the messages go to a private copy of the host's pipe, fd 1 points at
    stderr while the server runs (a stray print cannot corrupt the protocol), and is pointed back
    at the pipe afterwards. The copy is never closed: a worker thread may still be writing to it
    when the server ends, and a closed descriptor could be reused under it."""
    sys.stdout.flush()
    wire = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)  # above 0-2, so never taken for a standard one
    os.dup2(2, 1)
    try:
        text = io.TextIOWrapper(os.fdopen(wire, "wb", closefd=False), encoding="utf-8")
        yield PipeWrites(text)
    finally:
        os.dup2(wire, 1)


def name_origin(cwd: str, environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The name of a server started without ``--name`` and where it came from:
    ``PI_CROSS_SESSION_NAME`` (``env``), else the name of the host's working directory (``cwd``),
    cleaned as the wire cleans names, else :data:`FALLBACK_NAME` (``fallback``)."""
    env = os.environ if environ is None else environ
    chosen = parse_name(env.get(NAME_ENV))
    if chosen is not None:
        return chosen, "env"
    from_cwd = parse_name(os.path.basename(os.path.normpath(cwd)))
    if from_cwd is not None:
        return from_cwd, "cwd"
    return FALLBACK_NAME, "fallback"


def default_name(cwd: str, environ: Mapping[str, str] | None = None) -> str:
    """The name of a server started without ``--name`` (see :func:`name_origin`)."""
    return name_origin(cwd, environ)[0]


__all__ = [
    "CHANNEL_CAPABILITY",
    "CHANNEL_METHOD",
    "READ_PI_MESSAGES",
    "RESUME_PROMPT",
    "SERVER_NAME",
    "STATUS_PROMPT",
    "WAIT_PI_MESSAGE",
    "McpHost",
    "McpOptions",
    "McpServer",
    "PipeWrites",
    "PullResult",
    "ReadPiMessagesParams",
    "WaitPiMessageParams",
    "default_name",
    "name_origin",
    "serve",
    "serve_streams",
]
