"""Replaying the reference transcripts against our own peers.

* :class:`Transcript` reads one recorded scenario (``NN-*.jsonl``): the frames in order, with their
  connection and direction, and the notes (close timings, host events, tool results).
* :class:`Identities` maps the recorded identities (session ids, instance ids, the redacted token
  placeholders, pids) onto live ones, and rewrites frames with it: every JSON string equal to a
  recorded identity is replaced, nothing else is touched, so a rewritten frame keeps the recorded
  shape, order and (identities having the same lengths) size.
* :class:`ReplayHost` and :func:`live_receiver` are the receiving side: a real
  :class:`~pi_cross_session._internal.plugin.runtime.SessionRuntime` (real endpoint, authentication
  and admission) on a host the test drives by hand — user turns, peer turns, releases — with a wall
  clock pinned to the recording's time, so the recorded ``sentAt`` values are "now".
* :func:`reply_shape` and :func:`normalized` reduce frames to what must agree between the reference
  and us (status words, flags, key order, field presence), leaving out what is ours (texts) or
  random (ids, tokens, times).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final

import anyio

from pi_cross_session._internal.plugin.runtime import RuntimeOptions, SessionRuntime
from pi_cross_session._internal.protocol.io.endpoint import EndpointConfig
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import Registration
from pi_cross_session._internal.security.admission import Clock, Delivery, Snapshot
from pi_cross_session._internal.security.provenance import Provenance
from pi_cross_session._internal.security.turns import (
    OurMessageStarted,
    TurnEnded,
    TurnEnding,
    TurnPreparing,
    TurnStarted,
)
from tests.data_paths import REFERENCE
from tests.support.waiting import eventually

ID_RE: Final = re.compile(r"[A-Za-z0-9_-]{1,128}")
INSTANCE_ID_RE: Final = re.compile(r"[0-9a-f]{32}")
TOKEN_RE: Final = re.compile(r"[0-9a-f]{64}")
#: How long a condition that must come true may take (polling: the runtime offers no events).


# -- transcripts -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    """One frame as it crossed the socket."""

    seq: int
    conn: str
    dir: str
    t_ms: float
    nbytes: int
    raw: str

    @property
    def body(self) -> Any:
        """The frame's JSON, or ``None`` for a line that is not JSON (scenario 09)."""
        try:
            return json.loads(self.raw)
        except ValueError:
            return None


@dataclass(frozen=True)
class Transcript:
    """One recorded scenario."""

    name: str
    records: tuple[Record, ...]
    notes: tuple[dict[str, Any], ...]

    @classmethod
    def load(cls, stem: str) -> Transcript:
        """``stem`` is the file name without ``.jsonl`` (e.g. ``03-auth-hello-message-receipt``)."""
        records: list[Record] = []
        notes: list[dict[str, Any]] = []
        for line in (REFERENCE / f"{stem}.jsonl").read_text(encoding="utf-8").splitlines():
            item = json.loads(line)
            if "note" in item:
                notes.append(item["note"])
            else:
                records.append(
                    Record(
                        seq=item["seq"],
                        conn=item["conn"],
                        dir=item["dir"],
                        t_ms=item["t_ms"],
                        nbytes=item["nbytes"],
                        raw=item["raw"],
                    )
                )
        records.sort(key=lambda r: r.seq)
        return cls(stem, tuple(records), tuple(notes))

    @property
    def connections(self) -> list[str]:
        """Connection labels in the order they were opened."""
        return list(dict.fromkeys(r.conn for r in self.records))

    def of(self, conn: str) -> list[Record]:
        return [r for r in self.records if r.conn == conn]

    def client_dir(self) -> str:
        """The direction of the connecting side's frames (the first frame's)."""
        return self.records[0].dir

    def frames(self, direction: str) -> list[Any]:
        return [r.body for r in self.records if r.dir == direction]

    def hellos(self) -> list[dict[str, Any]]:
        client = self.client_dir()
        return [
            body
            for body in self.frames(client)
            if isinstance(body, dict) and body.get("type") == "hello"
        ]

    def note(self, event: str) -> dict[str, Any] | None:
        return next((n for n in self.notes if n.get("event") == event), None)

    def first_t_ms(self, conn: str) -> float:
        return self.of(conn)[0].t_ms


def transcript_stems() -> list[str]:
    """Every annotated transcript of the reference recording."""
    return sorted(
        p.name[: -len(".jsonl")] for p in REFERENCE.glob("[0-9]*.jsonl") if ".wire." not in p.name
    )


# -- identities ------------------------------------------------------------------------------------


@dataclass
class Identities:
    """Recorded identity → live identity; applied to whole JSON values only."""

    strings: dict[str, str] = field(default_factory=dict)
    pids: dict[int, int] = field(default_factory=dict)

    def add(self, recorded: str, live: str) -> None:
        known = self.strings.setdefault(recorded, live)
        assert known == live, f"{recorded!r} is already mapped to {known!r}"

    def add_pid(self, recorded: int, live: int) -> None:
        self.pids[recorded] = live

    def map(self, value: Any) -> Any:
        """``value`` with every mapped string replaced (recursively); ``pid`` keys mapped too."""
        if isinstance(value, str):
            return self.strings.get(value, value)
        if isinstance(value, list):
            return [self.map(item) for item in value]
        if isinstance(value, dict):
            out: dict[str, Any] = {}
            for key, item in value.items():
                if key == "pid" and isinstance(item, int) and item in self.pids:
                    out[key] = self.pids[item]
                else:
                    out[key] = self.map(item)
            return out
        return value

    def rewrite_line(self, raw: str) -> bytes:
        """A recorded client line as we put it on the wire: identities mapped, compact JSON,
        UTF-8, LF. A line that is not JSON is sent exactly as recorded."""
        try:
            body = json.loads(raw)
        except ValueError:
            return raw.encode("utf-8") + b"\n"
        return compact(self.map(body))


def compact(body: Any) -> bytes:
    """A frame as the reference writes it: ``JSON.stringify`` plus LF."""
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n"


def fresh_session_id() -> str:
    """A live session id with the recorded ids' length (a UUID), so frame sizes stay equal."""
    return str(uuid.uuid4())


# -- comparing frames ------------------------------------------------------------------------------

#: Reply fields whose values must agree with the reference's (texts are ours; ids are compared by
#: their own rule, ``peer`` separately).
REPLY_VALUES: Final = ("v", "type", "ok", "status", "capabilities", "code", "state", "retryable")


def reply_shape(body: Mapping[str, Any]) -> dict[str, Any]:
    """What of a reply must equal the reference's: the values above, and the keys in order."""
    return {"keys": list(body), **{key: body.get(key, "<absent>") for key in REPLY_VALUES}}


def request_id_rule(reply: Mapping[str, Any], request: Any) -> str:
    """How a reply's requestId relates to the frame it answers: ``echo`` or ``unknown``."""
    if isinstance(request, Mapping) and reply["requestId"] == request.get("requestId"):
        return "echo"
    assert reply["requestId"] == "unknown", (reply, request)
    return "unknown"


def normalized(frame: Mapping[str, Any], identities: Identities) -> dict[str, Any]:
    """A client frame with what legitimately differs between runs blanked out: ids (which must
    match the ID rule), tokens (64 hex on our side; placeholders in the recording), ``sentAt``
    (an integer); session and instance ids mapped to live ones. Key order is kept."""
    out: dict[str, Any] = {}
    for key, value in frame.items():
        if key in ("requestId", "messageId"):
            assert isinstance(value, str)
            assert ID_RE.fullmatch(value), (key, value)
            out[key] = "<id>"
        elif key == "token":
            out[key] = "<token>"
        elif key == "sentAt":
            assert type(value) is int, (key, value)
            out[key] = "<int>"
        elif key in ("target", "from"):
            assert isinstance(value, dict)
            out[key] = {
                k: "<token>" if k == "token" else identities.map(v) for k, v in value.items()
            }
        else:
            out[key] = value
    return out


# -- the receiving side ----------------------------------------------------------------------------


@dataclass
class ReplayHost:
    """A :class:`~pi_cross_session._internal.plugin.host.HostPort` whose turns the test runs by
    hand."""

    session: str
    name: str = "replay-receiver"
    cwd: str = "/tmp/xs-fixture/cwd-py"
    idle: bool = True
    submitted: list[Delivery] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)

    @property
    def session_id(self) -> str:
        return self.session

    @property
    def session_name(self) -> str | None:
        return self.name

    def is_idle(self) -> bool:
        return self.idle

    def submit(self, delivery: Delivery, content: str) -> None:
        del content
        self.submitted.append(delivery)

    def notify(self, text: str) -> None:
        self.notices.append(text)


class PinnedClock:
    """Wall time that starts at a given epoch ms and moves with the real monotonic clock."""

    def __init__(self, start_ms: int) -> None:
        self._start_ms = start_ms
        self._t0 = time.monotonic()

    def wall_ms(self) -> int:
        return self._start_ms + int((time.monotonic() - self._t0) * 1000)

    @property
    def clock(self) -> Clock:
        return Clock(wall_ms=self.wall_ms, monotonic=time.monotonic)


@dataclass
class LiveReceiver:
    """The session under replay: runtime, host, and what it has been through."""

    runtime: SessionRuntime
    host: ReplayHost
    _settled: int = 0

    @property
    def registration(self) -> Registration:
        registration = self.runtime.registration()
        assert registration is not None, "the receiver is not running"
        return registration

    def snapshot(self) -> Snapshot:
        snapshot = self.runtime.snapshot()
        assert snapshot is not None
        return snapshot

    # -- host events, as a real host adapter reports them ----------------------------------------

    def user_turn(self) -> None:
        """A local user prompt starts a turn and keeps the session busy (``prompt_hold``)."""
        self.runtime.on_turn(TurnPreparing())
        self.host.idle = False
        self.runtime.on_turn(TurnStarted(Provenance.USER))

    def end_turn(self) -> None:
        """The running turn ends cleanly (``release``); a queued message may be flushed."""
        self.host.idle = True
        self.runtime.on_turn(TurnEnded(TurnEnding.STOP))

    def settle_submissions(self) -> int:
        """Run the peer turn each new submission starts (shown, answered, ended cleanly)."""
        pending = self.host.submitted[self._settled :]
        for delivery in pending:
            self.host.idle = False
            self.runtime.on_turn(TurnStarted(Provenance.PEER))
            self.runtime.on_turn(
                OurMessageStarted(delivery.message_id, delivery.sender.instance_id)
            )
            self.end_turn()
        self._settled += len(pending)
        return len(pending)

    async def endpoint_idle(self) -> None:
        """Wait until the endpoint serves no connection (see tests.support.socket_peers for why)."""
        current = self.runtime._current  # no public handle on the endpoint's counters
        if current is not None:
            endpoint = current.endpoint
            await eventually(lambda: endpoint.statistics().open_connections == 0)


@asynccontextmanager
async def live_receiver(
    locations: Locations,
    *,
    session_id: str,
    wall_start_ms: int,
    idle_after_hello_s: float,
) -> AsyncIterator[LiveReceiver]:
    """Run a :class:`SessionRuntime` on a :class:`ReplayHost` until the block ends."""
    host = ReplayHost(session=session_id)
    options = RuntimeOptions(
        with_git=False,
        clock=PinnedClock(wall_start_ms).clock,
        endpoint=EndpointConfig(idle_after_hello_s=idle_after_hello_s),
    )
    runtime = SessionRuntime(host, locations=locations, options=options)
    receiver = LiveReceiver(runtime, host)
    async with anyio.create_task_group() as group:
        await group.start(runtime.run)
        try:
            yield receiver
            await receiver.endpoint_idle()
        finally:
            with anyio.CancelScope(shield=True):
                await runtime.stop()
            group.cancel_scope.cancel()


def sent_at_values(transcripts: Iterable[Transcript]) -> list[int]:
    """Every ``sentAt`` the client frames of these transcripts carry."""
    return [
        body["sentAt"]
        for transcript in transcripts
        for body in transcript.frames(transcript.client_dir())
        if isinstance(body, dict) and "sentAt" in body
    ]
