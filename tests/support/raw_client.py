"""A byte-level client for endpoint tests, and the checks every receiver reply must pass.

The client writes exactly the bytes a test gives it and reads replies line by line, so a test can
put any framing on the wire (fragments, BOMs, several frames in one write, oversized lines) and see
exactly what the receiver answers. Frames are built here with the stdlib ``json`` module, never
with the package's encoder, so the tests do not assume what they are testing.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final

import anyio
import anyio.abc

from pi_cross_session._internal.protocol import frames
from pi_cross_session._internal.protocol.registration import Registration
from tests.support.bounds import MUST_HAPPEN_S

#: Keys every reply carries, in the order the reference emits them (spec §3.4).
REPLY_KEYS: Final = (
    "v",
    "type",
    "requestId",
    "ok",
    "status",
    "capabilities",
    "code",
    "state",
    "retryable",
    "next",
)
RETRYABLE_STATUSES: Final = frozenset({"busy", "queue_full", "rate_limited"})
#: What our receivers advertise in every response (the reference 2.2.1 lists only the first).
CAPABILITIES: Final = ["cancel-safe-queue-v1", "goal-scoped-peer-v1", "delivery-receipts-v1"]
#: How long a test waits for a reply or an EOF that must come.
READ_TIMEOUT_S: Final = MUST_HAPPEN_S
BOM: Final = b"\xef\xbb\xbf"


def line(body: Mapping[str, Any]) -> bytes:
    """A frame as the reference writes it: compact JSON, UTF-8, LF."""
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n"


def hello(
    target: Registration,
    *,
    sender: Registration | None = None,
    request_id: str = "hello-1",
    capabilities: Iterable[str] | None = CAPABILITIES,
) -> dict[str, Any]:
    """A hello for ``target``; authenticated when ``sender`` is given."""
    body: dict[str, Any] = {"v": 1, "type": "hello"}
    if capabilities is not None:
        body["capabilities"] = list(capabilities)
    body["requestId"] = request_id
    body["token"] = target.token
    body["target"] = {"id": target.id, "instanceId": target.instance_id}
    if sender is not None:
        body["from"] = {"id": sender.id, "instanceId": sender.instance_id, "token": sender.token}
    return body


def message_body(
    *,
    text: str = "hello over the wire",
    request_id: str = "msg-req-1",
    message_id: str = "msg-1",
    summary: str = "hello",
    sent_at: int | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A message frame sent now (extra fields appended after the standard ones)."""
    return {
        "v": 1,
        "type": "message",
        "requestId": request_id,
        "messageId": message_id,
        "text": text,
        "summary": summary,
        "sentAt": int(time.time() * 1000) if sent_at is None else sent_at,
        **extra,
    }


def status_body(*, request_id: str = "st-req-1", message_id: str = "msg-1") -> dict[str, Any]:
    """A status query frame."""
    return {"v": 1, "type": "status", "requestId": request_id, "messageId": message_id}


def parse_reply(raw: bytes) -> frames.Response:
    """Assert ``raw`` is one reply line exactly as the contract shapes it; return it parsed.

    Shape (spec §3.4): one compact UTF-8 JSON line; keys ``v,type,requestId,ok,status,
    capabilities,code,state,retryable,next`` in that order, then ``error`` if present, then
    ``peer`` exactly when ``ok``; ``code == state == status``; ``retryable`` only for the load
    refusals; every refusal explains itself in ``error``.
    """
    assert raw.endswith(b"\n"), raw
    assert raw.count(b"\n") == 1, raw
    assert not raw.startswith(BOM)
    text = raw[:-1].decode("utf-8")
    body = json.loads(text)
    assert isinstance(body, dict)
    keys = list(body)
    assert tuple(keys[: len(REPLY_KEYS)]) == REPLY_KEYS, keys
    tail = keys[len(REPLY_KEYS) :]
    expected_tail = [key for key in ("error", "peer") if key in body]
    assert tail == expected_tail, keys
    ok = body["ok"]
    status = body["status"]
    assert body["v"] == 1
    assert body["type"] == "response"
    assert body["code"] == body["state"] == status
    assert body["capabilities"] == CAPABILITIES
    assert body["retryable"] is ((not ok) and status in RETRYABLE_STATUSES)
    assert isinstance(body["next"], str)
    assert body["next"]
    assert ("peer" in body) is ok
    if not ok:
        assert isinstance(body.get("error"), str)
        assert body["error"]
    response = frames.parse_response(frames.loads_frame(text))
    # The reference's JSON.stringify output is canonical; ours must be byte-identical to it.
    assert frames.dumps_frame(response) == text
    if ok:
        identity = response.peer_identity()
        assert identity is not None
        assert list(body["peer"]) == ["id", "instanceId", "pid"]
    return response


class RawClient:
    """One client connection that writes exact bytes and reads whole lines."""

    def __init__(self, stream: anyio.abc.SocketStream) -> None:
        self._stream = stream
        self._buffer = b""
        self._eof = False
        #: True when the receiver reset the connection instead of closing it cleanly.
        self.reset = False
        #: How long one read of a reply or of the EOF may take before the test fails.
        self.limit_s = READ_TIMEOUT_S

    @classmethod
    @asynccontextmanager
    async def connect(cls, path: str) -> AsyncIterator[RawClient]:
        stream = await anyio.connect_unix(path)
        try:
            yield cls(stream)
        finally:
            await anyio.aclose_forcefully(stream)

    async def send(self, data: bytes) -> None:
        await self._stream.send(data)

    async def send_eof(self) -> None:
        await self._stream.send_eof()

    async def _fill(self) -> bool:
        """Read more bytes into the buffer; False at EOF (or reset)."""
        if self._eof:
            return False
        try:
            chunk = await self._stream.receive()
        except anyio.EndOfStream:
            chunk = b""
        except anyio.BrokenResourceError:
            # Linux resets an AF_UNIX peer that closes with unread data; replies already
            # received have been read before this error surfaces.
            self.reset = True
            chunk = b""
        if not chunk:
            self._eof = True
            return False
        self._buffer += chunk
        return True

    async def read_line(self) -> bytes | None:
        """The next line with its LF, or None if the connection ended first."""
        with anyio.fail_after(self.limit_s):
            while b"\n" not in self._buffer:
                if not await self._fill():
                    return None
        index = self._buffer.index(b"\n") + 1
        raw, self._buffer = self._buffer[:index], self._buffer[index:]
        return raw

    async def read_reply(self) -> frames.Response:
        """The next reply line, checked with :func:`parse_reply`."""
        raw = await self.read_line()
        assert raw is not None, "the receiver closed without replying"
        return parse_reply(raw)

    async def read_to_eof(self) -> bytes:
        """Every byte left until the receiver closes (a test usually expects ``b""``)."""
        with anyio.fail_after(self.limit_s):
            while await self._fill():
                pass
        rest, self._buffer = self._buffer, b""
        return rest


async def exchange_raw(path: str, *chunks: bytes, replies: int = 1) -> list[frames.Response]:
    """Connect, write ``chunks`` (one write each), read ``replies`` replies, then expect EOF."""
    async with RawClient.connect(path) as client:
        for chunk in chunks:
            await client.send(chunk)
        got = [await client.read_reply() for _ in range(replies)]
        assert await client.read_to_eof() == b""
    return got
