"""Conversations with a live receiver for the catalogue: exact bytes in, checked replies out."""

from __future__ import annotations

from typing import Final, TypeAlias

import anyio

from tests.receiver.live import identity
from tests.receiver.strategies import Obj, encode, hello_obj
from tests.support.raw_client import RawClient, parse_reply
from tests.support.wire_session import Receiver

UNKNOWN: Final = "unknown"
HELLO_ID: Final = "hello-1"
#: A reply as the tests compare it: ``(ok, status, requestId)``.
Reply: TypeAlias = tuple[bool, str, str]


def lines(*frames: Obj | bytes) -> bytes:
    """Each frame (a JSON tree, or raw bytes) followed by a LF."""
    return b"".join((f if isinstance(f, bytes) else encode(f)) + b"\n" for f in frames)


async def talk(path: str, stream: bytes) -> list[Reply]:
    """Send ``stream``, half-close, and return every reply (each checked) until the close."""
    async with RawClient.connect(path) as client:
        try:
            await client.send(stream)
            await client.send_eof()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # the receiver already answered and closed
        replies: list[Reply] = []
        while (raw := await client.read_line()) is not None:
            reply = parse_reply(raw)
            replies.append((reply.ok, reply.status, reply.request_id))
        assert await client.read_to_eof() == b"", "a partial line before the close"
    return replies


async def still_serving(rx: Receiver) -> None:
    """A legitimate probe still gets ``ready``."""
    replies = await talk(rx.registration.socket_path, lines(hello_obj(identity(rx.registration))))
    assert replies == [(True, "ready", HELLO_ID)]


def admitted(rx: Receiver) -> list[tuple[str, str]]:
    """Admitted messages, from every place that records one; they must agree."""
    snapshot = rx.snapshot()
    rows = [(row.sender_instance_id, row.message_id) for row in snapshot.rows]
    calls = [(c.delivery.sender.instance_id, c.delivery.message_id) for c in rx.host.calls]
    assert snapshot.admitted == len(rows) == len(set(rows))
    assert calls == rows
    return rows
