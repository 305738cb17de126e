"""The hostile catalogue, wire side: named attacks on a live receiving session, each with the exact
answer the contract requires and a check that nothing was admitted that should not have been.

Every case runs against a real :class:`SessionRuntime` serving its real socket
(:func:`tests.support.wire_session.running_receiver`), in this test's own agent dir. The spec's
pinned cases (spec §10 items 2, 4, 5, 6, 7) are marked ``item N`` in their ids.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final

import anyio
import pytest

from pi_cross_session._internal.protocol.io.endpoint import Endpoint, EndpointConfig
from pi_cross_session._internal.protocol.limits import MAX_CONNECTIONS
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import Registration
from tests.files import files
from tests.receiver.live import identity
from tests.receiver.model import BOM, BRIDGE_PREFIX, FRAME_CAP, Identity
from tests.receiver.strategies import (
    DEEP_ARRAYS,
    Json,
    Obj,
    Raw,
    encode,
    hello_obj,
    message_obj,
    status_obj,
)
from tests.receiver.talk import HELLO_ID, UNKNOWN, Reply, admitted, lines, still_serving, talk
from tests.support.raw_client import RawClient
from tests.support.socket_peers import published_sender
from tests.support.wire_session import Receiver, on_disk, running_receiver

pytestmark = [pytest.mark.anyio, pytest.mark.hostile]

MESSAGE_ID: Final = "msg-req-1"


@dataclass(frozen=True)
class Ctx:
    """What a case may address: the receiver, a valid sender, another live session's record."""

    locations: Locations
    target: Registration
    alpha: Registration
    other: Registration
    now_ms: int

    @property
    def me(self) -> Identity:
        return identity(self.target)

    @property
    def sender(self) -> Identity:
        return identity(self.alpha)


def edit(obj: Obj, path: str, value: Json) -> Obj:
    """``obj`` with the value at a dotted ``path`` replaced (or added)."""
    head, _, rest = path.partition(".")
    if not rest:
        return obj.with_value(head, value)
    inner = obj.get(head)
    assert isinstance(inner, Obj)
    return obj.with_value(head, edit(inner, rest, value))


def drop(obj: Obj, path: str) -> Obj:
    head, _, rest = path.partition(".")
    if not rest:
        return obj.without(head)
    inner = obj.get(head)
    assert isinstance(inner, Obj)
    return obj.with_value(head, drop(inner, rest))


def probe_hello(ctx: Ctx) -> Obj:
    return hello_obj(ctx.me, request_id=HELLO_ID)


def auth_hello(ctx: Ctx, claim: Identity | None = None) -> Obj:
    return hello_obj(ctx.me, sender=claim or ctx.sender, request_id=HELLO_ID)


def message(ctx: Ctx, **changes: Json) -> Obj:
    body = message_obj(
        request_id=MESSAGE_ID, message_id="m-1", text="a hostile hello", sent_at=ctx.now_ms
    )
    for key, value in changes.items():
        body = body.with_value(key, value)
    return body


@asynccontextmanager
async def receiving(locations: Locations, **options: Any) -> AsyncIterator[tuple[Receiver, Ctx]]:
    """A live receiving session, a published sender ``alpha`` and another session's record."""
    async with running_receiver(locations, **options) as rx:
        alpha = published_sender(locations, "alpha")
        other = published_sender(locations, "other")
        yield rx, Ctx(locations, rx.registration, alpha, other, rx.clock.wall_ms())


# -- claims backed by hostile registration files (spec §1.5: each must be ignored) -----------------


def _claim(ctx: Ctx, body: dict[str, object], *, stem: str | None = None) -> Identity:
    found = files.identity_of(body)
    return Identity(found.session_id, stem or found.instance_id, found.token)


def loose_mode(ctx: Ctx) -> Identity:
    body = files.record(ctx.locations, "loose")
    files.write_record(ctx.locations, body, mode=0o644)
    return _claim(ctx, body)


def group_readable(ctx: Ctx) -> Identity:
    body = files.record(ctx.locations, "group")
    files.write_record(ctx.locations, body, mode=0o640)
    return _claim(ctx, body)


def symlinked(ctx: Ctx) -> Identity:
    body = files.record(ctx.locations, "linked")
    files.write_symlinked(ctx.locations, body)
    return _claim(ctx, body)


def oversized(ctx: Ctx) -> Identity:
    body = files.record(ctx.locations, "big")
    files.write_raw(
        ctx.locations, body["instanceId"], files.padded(files.record_bytes(body), 65_537)
    )
    return _claim(ctx, body)


def socket_outside(ctx: Ctx) -> Identity:
    body = files.record(ctx.locations, "outside", socketPath="/tmp/outside-the-runtime-dir.sock")
    files.write_record(ctx.locations, body)
    return _claim(ctx, body)


def misfiled(ctx: Ctx) -> Identity:
    body = files.record(ctx.locations, "misfiled")
    stem = os.urandom(16).hex()
    files.write_raw(ctx.locations, stem, files.record_bytes(body))
    return _claim(ctx, body, stem=stem)


def not_json(ctx: Ctx) -> Identity:
    body = files.record(ctx.locations, "garbled")
    files.write_raw(ctx.locations, body["instanceId"], files.record_bytes(body)[:-1])
    return _claim(ctx, body)


def fifo(ctx: Ctx) -> Identity:
    body = files.record(ctx.locations, "fifo")
    os.mkfifo(os.path.join(files.peers_dir(ctx.locations), f"{body['instanceId']}.json"), 0o600)
    return _claim(ctx, body)


def directory(ctx: Ctx) -> Identity:
    body = files.record(ctx.locations, "dir")
    os.mkdir(os.path.join(files.peers_dir(ctx.locations), f"{body['instanceId']}.json"), 0o700)
    return _claim(ctx, body)


def unregistered(ctx: Ctx) -> Identity:
    return Identity("nobody", os.urandom(16).hex(), os.urandom(32).hex())


def another_sessions_id(ctx: Ctx) -> Identity:
    # The record is valid, but it belongs to session "other", not to the id this hello claims.
    return Identity(ctx.other.id, ctx.alpha.instance_id, ctx.alpha.token)


def wrong_from_token(ctx: Ctx) -> Identity:
    return Identity(ctx.alpha.id, ctx.alpha.instance_id, ctx.other.token)


def uppercase_from_token(ctx: Ctx) -> Identity:
    return Identity(ctx.alpha.id, ctx.alpha.instance_id, ctx.alpha.token.upper())


def receiver_itself(ctx: Ctx) -> Identity:
    return ctx.me


CLAIMS: Final[list[tuple[str, Callable[[Ctx], Identity]]]] = [
    ("item-6-wrong-from-token", wrong_from_token),
    ("from-token-uppercase", uppercase_from_token),
    ("from-unregistered-instance", unregistered),
    ("from-id-of-another-session", another_sessions_id),
    ("from-the-receiver-itself", receiver_itself),
    ("from-registration-mode-0644", loose_mode),
    ("from-registration-mode-0640", group_readable),
    ("from-registration-symlink", symlinked),
    ("from-registration-over-64-KiB", oversized),
    ("from-registration-socket-outside-runtime-dir", socket_outside),
    ("from-registration-filed-under-another-id", misfiled),
    ("from-registration-not-json", not_json),
    ("from-registration-is-a-fifo", fifo),
    ("from-registration-is-a-directory", directory),
]


@pytest.mark.parametrize(("claim", "case"), [(c, n) for n, c in CLAIMS], ids=[n for n, _ in CLAIMS])
async def test_hello_from_an_unverifiable_sender_is_refused(
    locations: Locations, claim: Callable[[Ctx], Identity], case: str
) -> None:
    async with receiving(locations) as (rx, ctx):
        claimed = claim(ctx)
        stream = lines(auth_hello(ctx, claimed), message(ctx))
        replies = await talk(ctx.target.socket_path, stream)
        assert replies == [(False, "authentication_failed", HELLO_ID)], case
        assert admitted(rx) == []
        await still_serving(rx)


# -- first frames ----------------------------------------------------------------------------------


def _hello_with(path: str, value: Json) -> Callable[[Ctx], bytes]:
    return lambda ctx: lines(edit(auth_hello(ctx), path, value), message(ctx))


def _hello_without(path: str) -> Callable[[Ctx], bytes]:
    return lambda ctx: lines(drop(auth_hello(ctx), path), message(ctx))


def _raw(data: bytes) -> Callable[[Ctx], bytes]:
    return lambda ctx: data


#: About 1 MiB of empty objects in an array: the parse-cost attack (350,000 dicts to build).
COSTLY_OBJECTS: Final = b"[" + b"{}," * 340_000 + b"{}]"
REFUSED_UNKNOWN: Final = [(False, "authentication_failed", UNKNOWN)]
REFUSED_HELLO: Final = [(False, "authentication_failed", HELLO_ID)]
BAD_FRAME: Final = [(False, "invalid_frame", UNKNOWN)]
READY: Final = [(True, "ready", HELLO_ID)]
ASTRAL: Final = "\U0001d11e"

FIRST_FRAMES: Final = [
    # Not JSON, or not a frame at all.
    pytest.param(_raw(b"hello there\n"), BAD_FRAME, id="not-json"),
    pytest.param(_raw(b"\n"), BAD_FRAME, id="empty-line"),
    pytest.param(_raw(BOM + b"\n"), BAD_FRAME, id="bom-then-empty-line"),
    pytest.param(_raw(b"\r\n"), BAD_FRAME, id="line-holding-only-cr"),
    pytest.param(_raw(b"\xff\n"), BAD_FRAME, id="item-4-invalid-utf8-byte"),
    pytest.param(_raw(b"\xff"), BAD_FRAME, id="invalid-byte-without-any-newline"),
    pytest.param(_raw(b'{"v":"\xed\xa0\x80"}\n'), BAD_FRAME, id="utf8-encoded-surrogate"),
    pytest.param(_raw(b'{"v":"\xc0\xaf"}\n'), BAD_FRAME, id="utf8-overlong-slash"),
    pytest.param(_raw(b'{"v":"\xe2\x82\n'), BAD_FRAME, id="utf8-sequence-cut-by-newline"),
    pytest.param(_raw(BOM + BOM + b"{}\n"), BAD_FRAME, id="second-bom-is-not-stripped"),
    pytest.param(_hello_with("v", Raw(b"NaN")), BAD_FRAME, id="hello-v-nan"),
    pytest.param(_hello_with("v", Raw(b"Infinity")), BAD_FRAME, id="hello-v-infinity"),
    # JSON, but not a hello: authentication_failed for "unknown".
    pytest.param(_raw(b"[]\n"), REFUSED_UNKNOWN, id="json-array"),
    pytest.param(_raw(b"null\n"), REFUSED_UNKNOWN, id="json-null"),
    pytest.param(_raw(b'"hello"\n'), REFUSED_UNKNOWN, id="json-string"),
    pytest.param(_raw(b"{}\n"), REFUSED_UNKNOWN, id="empty-object"),
    pytest.param(lambda ctx: lines(message(ctx)), REFUSED_UNKNOWN, id="message-before-hello"),
    pytest.param(
        lambda ctx: lines(status_obj(request_id="s", message_id="m-1")),
        REFUSED_UNKNOWN,
        id="status-before-hello",
    ),
    pytest.param(_hello_with("v", 2), REFUSED_UNKNOWN, id="hello-v-2"),
    pytest.param(_hello_with("v", True), REFUSED_UNKNOWN, id="hello-v-true"),
    pytest.param(_hello_with("v", Raw(b"1.0")), REFUSED_UNKNOWN, id="hello-v-1.0"),
    pytest.param(_hello_with("v", Raw(b"1e400")), REFUSED_UNKNOWN, id="hello-v-1e400"),
    pytest.param(_hello_with("v", "1"), REFUSED_UNKNOWN, id="hello-v-string"),
    pytest.param(_hello_without("type"), REFUSED_UNKNOWN, id="hello-without-type"),
    pytest.param(_hello_with("requestId", ""), REFUSED_UNKNOWN, id="item-6-empty-request-id"),
    pytest.param(_hello_with("requestId", "r" * 129), REFUSED_UNKNOWN, id="request-id-129-chars"),
    pytest.param(_hello_with("requestId", "\u0663"), REFUSED_UNKNOWN, id="request-id-arabic-digit"),
    pytest.param(_hello_with("requestId", None), REFUSED_UNKNOWN, id="request-id-null"),
    pytest.param(_hello_with("target.id", ""), REFUSED_UNKNOWN, id="item-6-empty-target-id"),
    pytest.param(
        _hello_with("target.id", ASTRAL * 257), REFUSED_UNKNOWN, id="target-id-514-utf16-units"
    ),
    pytest.param(
        lambda ctx: lines(
            edit(auth_hello(ctx), "target.instanceId", ctx.target.instance_id.upper())
        ),
        REFUSED_UNKNOWN,
        id="target-instance-uppercase",
    ),
    pytest.param(_hello_with("from", None), REFUSED_UNKNOWN, id="item-6-from-null"),
    pytest.param(_hello_with("from", []), REFUSED_UNKNOWN, id="from-array"),
    pytest.param(_hello_without("from.token"), REFUSED_UNKNOWN, id="from-without-token"),
    pytest.param(_hello_with("capabilities", None), REFUSED_UNKNOWN, id="capabilities-null"),
    pytest.param(
        _hello_with("capabilities", "cancel-safe-queue-v1"),
        REFUSED_UNKNOWN,
        id="capabilities-string",
    ),
    pytest.param(_hello_with("capabilities", ["c"] * 9), REFUSED_UNKNOWN, id="nine-capabilities"),
    pytest.param(
        _hello_with("capabilities", ["x" * 65]), REFUSED_UNKNOWN, id="capability-65-units"
    ),
    pytest.param(_hello_with("capabilities", [1]), REFUSED_UNKNOWN, id="capability-not-a-string"),
    pytest.param(
        lambda ctx: lines(
            edit(drop(auth_hello(ctx), "requestId"), "request_id", HELLO_ID), message(ctx)
        ),
        REFUSED_UNKNOWN,
        id="python-field-name-request_id",
    ),
    # A hello, but not for us or not with our secret: authentication_failed for its own id.
    pytest.param(
        lambda ctx: lines(edit(auth_hello(ctx), "token", ctx.other.token), message(ctx)),
        REFUSED_HELLO,
        id="item-6-wrong-token",
    ),
    pytest.param(
        lambda ctx: lines(edit(auth_hello(ctx), "token", ctx.target.token.upper()), message(ctx)),
        REFUSED_HELLO,
        id="token-uppercase-hex",
    ),
    pytest.param(
        lambda ctx: lines(edit(auth_hello(ctx), "token", ctx.target.token + "\n"), message(ctx)),
        REFUSED_HELLO,
        id="token-with-trailing-newline",
    ),
    pytest.param(_hello_with("token", "\ud800"), REFUSED_HELLO, id="token-lone-surrogate-escape"),
    pytest.param(_hello_with("token", 0), REFUSED_UNKNOWN, id="token-not-a-string"),
    pytest.param(
        _hello_with("target.id", "someone-else"), REFUSED_HELLO, id="item-6-wrong-target-id"
    ),
    pytest.param(
        lambda ctx: lines(edit(auth_hello(ctx), "target.instanceId", ctx.other.instance_id)),
        REFUSED_HELLO,
        id="item-6-wrong-target-instance",
    ),
    pytest.param(
        lambda ctx: lines(hello_obj(identity(ctx.other), sender=ctx.sender, request_id=HELLO_ID)),
        REFUSED_HELLO,
        id="replayed-hello-of-another-session",
    ),
    pytest.param(
        lambda ctx: lines(auth_hello(ctx).appended("token", ctx.other.token), message(ctx)),
        REFUSED_HELLO,
        id="duplicate-token-key-wrong-one-last",
    ),
    # Too costly to be a hello (more containers, separators or strings than any hello needs):
    # refused unparsed with the not-a-hello reply, JSON or not. Deep nesting used to be a bad
    # frame because Python's parser ran out of recursion; it is now refused before parsing.
    pytest.param(_raw(DEEP_ARRAYS.data + b"\n"), REFUSED_UNKNOWN, id="10000-nested-arrays"),
    pytest.param(
        _hello_with("deep", DEEP_ARRAYS), REFUSED_UNKNOWN, id="hello-with-deep-extra-field"
    ),
    pytest.param(_raw(COSTLY_OBJECTS + b"\n"), REFUSED_UNKNOWN, id="one-mebibyte-of-objects"),
    pytest.param(_raw(COSTLY_OBJECTS[:-1] + b"\n"), REFUSED_UNKNOWN, id="costly-and-not-json"),
    pytest.param(_raw(b'""' * 200 + b"\n"), REFUSED_UNKNOWN, id="two-hundred-strings"),
    pytest.param(_hello_with("pad", [0] * 300), REFUSED_UNKNOWN, id="hello-with-300-numbers"),
    pytest.param(
        _hello_with("pad", Raw(b"[" * 33 + b"]" * 33)), REFUSED_UNKNOWN, id="hello-33-deep"
    ),
    # Tolerated: the contract's framing and JSON rules let these through.
    pytest.param(
        lambda ctx: lines(probe_hello(ctx).appended("pad", [0] * 200)),
        READY,
        id="hello-with-200-extra-numbers-within-bounds",
    ),
    pytest.param(
        lambda ctx: lines(probe_hello(ctx).appended("pad", '{[,:]}\\"' * 2_000)),
        READY,
        id="hello-with-structure-and-escapes-inside-a-string",
    ),
    pytest.param(lambda ctx: BOM + lines(probe_hello(ctx)), READY, id="bom-before-hello"),
    pytest.param(lambda ctx: encode(probe_hello(ctx)) + b"\r\n", READY, id="crlf-hello"),
    pytest.param(lambda ctx: encode(probe_hello(ctx)) + b"   \n", READY, id="hello-padded"),
    pytest.param(
        lambda ctx: lines(
            edit(probe_hello(ctx), "token", ctx.other.token).appended("token", ctx.target.token)
        ),
        READY,
        id="duplicate-token-key-right-one-last",
    ),
    pytest.param(
        lambda ctx: lines(probe_hello(ctx).appended("__proto__", Obj((("token", "x"),)))),
        READY,
        id="extra-proto-field",
    ),
    # Cut or oversized.
    pytest.param(lambda ctx: encode(probe_hello(ctx)), [], id="hello-without-newline-then-eof"),
    pytest.param(
        _raw(b" " * (FRAME_CAP + 1)),
        [(False, "message_too_large", UNKNOWN)],
        id="item-2-unterminated-over-the-cap",
    ),
]


@pytest.mark.parametrize(("stream", "expected"), FIRST_FRAMES)
async def test_first_frame(
    locations: Locations, stream: Callable[[Ctx], bytes], expected: list[Reply]
) -> None:
    async with receiving(locations) as (rx, ctx):
        assert await talk(ctx.target.socket_path, stream(ctx)) == expected
        assert admitted(rx) == []
        await still_serving(rx)


async def test_hello_naming_the_sender_as_sender_is_only_a_probe(locations: Locations) -> None:
    """``sender`` is our Python name for ``from``; on the wire it is an unknown field, so this
    hello is a probe and its message is refused as unauthenticated (spec §3.3)."""
    async with receiving(locations) as (rx, ctx):
        hello = auth_hello(ctx)
        claim = hello.get("from")
        assert claim is not None
        stream = lines(hello.without("from").appended("sender", claim), message(ctx))
        replies = await talk(ctx.target.socket_path, stream)
        assert replies == [(True, "ready", HELLO_ID), (False, "authentication_failed", MESSAGE_ID)]
        assert admitted(rx) == []


# -- second frames, after a genuine authenticated hello ------------------------------------------


def _second(**changes: Json) -> Callable[[Ctx], bytes]:
    return lambda ctx: lines(message(ctx, **changes))


def _second_without(key: str) -> Callable[[Ctx], bytes]:
    return lambda ctx: lines(message(ctx).without(key))


def _sent(offset_ms: int) -> Callable[[Ctx], bytes]:
    return lambda ctx: lines(message(ctx, sentAt=ctx.now_ms + offset_ms))


BAD_SECOND: Final = [(False, "invalid_frame", UNKNOWN)]
SUBMITTED: Final = [(True, "submitted", MESSAGE_ID)]


def _refused(code: str) -> list[Reply]:
    return [(False, code, MESSAGE_ID)]


SECOND_FRAMES: Final = [
    pytest.param(lambda ctx: lines(auth_hello(ctx)), BAD_SECOND, id="second-hello"),
    pytest.param(_raw(b"{}\n{}\n{}\n"), BAD_SECOND, id="item-5-three-empty-objects"),
    pytest.param(_raw(b"\n"), BAD_SECOND, id="empty-line-after-hello"),
    pytest.param(lambda ctx: BOM + lines(message(ctx)), BAD_SECOND, id="bom-before-second-frame"),
    pytest.param(_raw(b'{"v":1,"text":"\xff"}\n'), BAD_SECOND, id="invalid-utf8-in-message"),
    pytest.param(_second(messageId=""), BAD_SECOND, id="item-7-empty-message-id"),
    pytest.param(_second(requestId=""), BAD_SECOND, id="item-7-empty-request-id"),
    pytest.param(_second(text=None), BAD_SECOND, id="item-7-null-text"),
    pytest.param(_second(summary="s" * 201), BAD_SECOND, id="item-7-summary-201-code-points"),
    pytest.param(_second(summary=" \t"), BAD_SECOND, id="summary-blank"),
    pytest.param(_second(text=Raw(b'"\\ud800"')), BAD_SECOND, id="text-lone-surrogate-escape"),
    pytest.param(_second(summary=Raw(b'"a\\udc00"')), BAD_SECOND, id="summary-lone-surrogate"),
    pytest.param(_second(text=Raw(b"NaN")), BAD_SECOND, id="text-nan"),
    pytest.param(_second(v="1"), BAD_SECOND, id="message-v-string"),
    pytest.param(_second(v=Raw(b"1E0")), BAD_SECOND, id="message-v-exponent"),
    pytest.param(_second(goalId=None), BAD_SECOND, id="goal-id-null"),
    pytest.param(_second(goalId="not a goal"), BAD_SECOND, id="goal-id-malformed"),
    pytest.param(_second(pad=[0] * 300), BAD_SECOND, id="message-with-300-extra-numbers"),
    pytest.param(_second(pad=[Obj(())] * 40), BAD_SECOND, id="message-with-40-extra-objects"),
    pytest.param(_raw(COSTLY_OBJECTS + b"\n"), BAD_SECOND, id="one-mebibyte-of-objects"),
    pytest.param(_second_without("sentAt"), BAD_SECOND, id="sent-at-missing"),
    pytest.param(_second(sentAt=Raw(b"1.7e12")), BAD_SECOND, id="sent-at-float"),
    pytest.param(_second(sentAt=2**53), BAD_SECOND, id="sent-at-2-pow-53"),
    pytest.param(_second(sentAt=True), BAD_SECOND, id="sent-at-boolean"),
    pytest.param(_second(sentAt="1700000000000"), BAD_SECOND, id="sent-at-string"),
    pytest.param(_second(sentAt=Raw(b"1e400")), BAD_SECOND, id="sent-at-1e400"),
    pytest.param(_second(text=""), _refused("invalid_message"), id="item-7-empty-text"),
    pytest.param(_second(text=" \n\t"), _refused("invalid_message"), id="item-7-blank-text"),
    pytest.param(_second(text="\ufeff\u3000"), _refused("invalid_message"), id="text-js-blank"),
    pytest.param(_sent(-30_001), _refused("expired"), id="sent-30001-ms-ago"),
    pytest.param(_sent(5_001), _refused("expired"), id="sent-5001-ms-ahead"),
    pytest.param(_second(sentAt=-1), _refused("expired"), id="sent-at-negative"),
    pytest.param(
        _second(text=BRIDGE_PREFIX + "{not json"), _refused("invalid_bridge"), id="bridge-garbled"
    ),
    # Accepted at the edge: these are well-formed, and exactly one row must appear.
    pytest.param(_sent(-30_000), SUBMITTED, id="sent-exactly-30-s-ago"),
    pytest.param(_sent(5_000), SUBMITTED, id="sent-exactly-5-s-ahead"),
    pytest.param(_second(text="\x1c"), SUBMITTED, id="text-python-whitespace-is-not-js-blank"),
    pytest.param(_second(summary=ASTRAL * 200), SUBMITTED, id="summary-200-astral-code-points"),
    pytest.param(
        _second(text='{"a":[1,2]}, "b": \\ ' * 20_000),
        SUBMITTED,
        id="text-full-of-json-is-one-string",
    ),
    pytest.param(_second(pad=[0] * 200), SUBMITTED, id="message-with-200-extra-numbers"),
    pytest.param(
        lambda ctx: lines(message(ctx).appended("__proto__", Obj((("text", 1),)))),
        SUBMITTED,
        id="message-with-proto-field",
    ),
    pytest.param(
        lambda ctx: lines(message(ctx), message(ctx, messageId="m-2"), b"garbage"),
        SUBMITTED,
        id="pipelined-frames-after-the-reply-are-ignored",
    ),
    pytest.param(
        lambda ctx: lines(message(ctx)) + b"\xff\n",
        SUBMITTED,
        id="item-4-fault-after-the-message-keeps-it",
    ),
]


@pytest.mark.parametrize(("stream", "expected"), SECOND_FRAMES)
async def test_second_frame(
    locations: Locations, stream: Callable[[Ctx], bytes], expected: list[Reply]
) -> None:
    async with receiving(locations) as (rx, ctx):
        replies = await talk(ctx.target.socket_path, lines(auth_hello(ctx)) + stream(ctx))
        assert replies == [(True, "ready", HELLO_ID), *expected]
        rows = admitted(rx)
        if expected == SUBMITTED:
            assert rows == [(ctx.alpha.instance_id, "m-1")]
        else:
            assert rows == []
        await still_serving(rx)


@pytest.mark.parametrize(
    ("second", "expected"),
    [
        pytest.param(
            lambda ctx: message(ctx), (False, "authentication_failed", MESSAGE_ID), id="message"
        ),
        pytest.param(
            lambda ctx: status_obj(request_id="s-1", message_id="m-1"),
            (False, "invalid_frame", UNKNOWN),
            id="status-query",
        ),
    ],
)
async def test_probe_connection_cannot_deliver_or_query(
    locations: Locations, second: Callable[[Ctx], Obj], expected: Reply
) -> None:
    async with receiving(locations) as (rx, ctx):
        replies = await talk(ctx.target.socket_path, lines(probe_hello(ctx), second(ctx)))
        assert replies == [(True, "ready", HELLO_ID), expected]
        assert admitted(rx) == []


async def test_status_query_is_source_qualified(locations: Locations) -> None:
    """Another sender asking about alpha's message learns nothing: ``unknown`` (spec §3.6)."""
    async with receiving(locations) as (rx, ctx):
        path = ctx.target.socket_path
        assert await talk(path, lines(auth_hello(ctx), message(ctx))) == [
            (True, "ready", HELLO_ID),
            *SUBMITTED,
        ]
        query = status_obj(request_id="s-1", message_id="m-1")
        spy = identity(ctx.other)
        assert await talk(path, lines(auth_hello(ctx, spy), query)) == [
            (True, "ready", HELLO_ID),
            (True, "unknown", "s-1"),
        ]
        assert await talk(path, lines(auth_hello(ctx), query)) == [
            (True, "ready", HELLO_ID),
            (True, "submitted", "s-1"),
        ]
        assert admitted(rx) == [(ctx.alpha.instance_id, "m-1")]


async def test_replayed_message_id_is_duplicate_and_admitted_once(locations: Locations) -> None:
    async with receiving(locations) as (rx, ctx):
        path = ctx.target.socket_path
        first = await talk(path, lines(auth_hello(ctx), message(ctx)))
        rx.turns.settle_submissions()
        again = await talk(path, lines(auth_hello(ctx), message(ctx, text="other text")))
        assert first[1:] == SUBMITTED
        assert again[1:] == _refused("duplicate")
        assert admitted(rx) == [(ctx.alpha.instance_id, "m-1")]


# -- connections: deadlines, idle cuts, the connection cap -----------------------------------------

#: Injected bounds, small so the cuts come quickly; the assertions are about outcomes, not time.
DEADLINE_S: Final = 1.5
IDLE_S: Final = 0.3
#: For the slow drip: an idle bound far above the pause between bytes, so that only the absolute
#: deadline can cut it, even on a loaded machine.
DRIP_IDLE_S: Final = 1.0
DRIP_PAUSE_S: Final = 0.05


def endpoint_of(rx: Receiver) -> Endpoint[object]:
    current = rx.runtime._current  # no public handle on the endpoint's counters
    assert current is not None
    return current.endpoint


async def test_slowloris_without_newline_is_cut_by_the_connection_deadline(
    locations: Locations,
) -> None:
    config = EndpointConfig(connection_deadline_s=DEADLINE_S, idle_after_hello_s=IDLE_S)
    async with receiving(locations, endpoint=config) as (rx, ctx):
        async with RawClient.connect(ctx.target.socket_path) as client:
            client.limit_s = DEADLINE_S + 3
            await client.send(b'{"v":1,"type":"hel')
            assert await client.read_to_eof() == b""
        stats = endpoint_of(rx).statistics()
        assert stats.deadline_cuts == 1
        assert admitted(rx) == []
        await still_serving(rx)


async def test_slow_drip_after_hello_is_cut_by_the_absolute_deadline(locations: Locations) -> None:
    """Each byte resets the idle bound, but not the connection deadline (spec §3.2)."""
    config = EndpointConfig(connection_deadline_s=DEADLINE_S, idle_after_hello_s=DRIP_IDLE_S)
    async with receiving(locations, endpoint=config) as (rx, ctx):
        endpoint = endpoint_of(rx)
        async with RawClient.connect(ctx.target.socket_path) as client:
            client.limit_s = DEADLINE_S + 3
            await client.send(lines(auth_hello(ctx)))
            assert (await client.read_reply()).status == "ready"
            drip = encode(message(ctx))
            with anyio.move_on_after(DEADLINE_S + 3):
                for byte in drip[:-1]:
                    try:
                        await client.send(bytes([byte]))
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                        break
                    await anyio.sleep(DRIP_PAUSE_S)
            assert await client.read_to_eof() == b""
        stats = endpoint.statistics()
        assert (stats.deadline_cuts, stats.idle_cuts) == (1, 0)
        assert admitted(rx) == []


async def test_silence_after_hello_is_cut_by_the_idle_bound(locations: Locations) -> None:
    config = EndpointConfig(connection_deadline_s=30.0, idle_after_hello_s=IDLE_S)
    async with receiving(locations, endpoint=config) as (rx, ctx):
        endpoint = endpoint_of(rx)
        async with RawClient.connect(ctx.target.socket_path) as client:
            await client.send(lines(auth_hello(ctx)) + encode(message(ctx))[:20])
            assert (await client.read_reply()).status == "ready"
            assert await client.read_to_eof() == b""
        assert endpoint.statistics().idle_cuts == 1
        assert admitted(rx) == []


async def test_the_65th_concurrent_connection_is_closed_without_a_byte(
    locations: Locations,
) -> None:
    async with receiving(locations) as (rx, ctx):
        endpoint = endpoint_of(rx)
        path = ctx.target.socket_path
        async with AsyncExitStack() as stack:
            held = [
                await stack.enter_async_context(RawClient.connect(path))
                for _ in range(MAX_CONNECTIONS)
            ]
            for client in held:
                await client.send(b'{"v":1')  # engaged, never finished
            async with RawClient.connect(path) as extra:
                await extra.send(lines(auth_hello(ctx), message(ctx)))
                assert await extra.read_to_eof() == b""
            stats = endpoint.statistics()
            assert (stats.refused_over_capacity, stats.open_connections) == (1, MAX_CONNECTIONS)
            # One slot freed by a fault reply; the next connection is served again.
            await held[0].send(b"\n")
            assert (await held[0].read_reply()).status == "invalid_frame"
            assert await held[0].read_to_eof() == b""
            await still_serving(rx)
        assert admitted(rx) == []
        assert endpoint.statistics().refused_over_capacity == 1


@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the kernel names the pid on Linux"
)
async def test_hello_replayed_from_another_process_is_refused(locations: Locations) -> None:
    """A hello copied from a genuine sender (its registration, its token) but sent by another
    process: the kernel says who connected, and it is not the pid the registration names."""
    async with receiving(locations) as (rx, ctx):
        elsewhere = files.record(ctx.locations, "alpha", pid=os.getppid())
        files.write_record(ctx.locations, elsewhere)
        stream = lines(auth_hello(ctx, files.identity_of(elsewhere)), message(ctx))
        replies = await talk(ctx.target.socket_path, stream)
        assert replies == [(False, "authentication_failed", HELLO_ID)]
        assert admitted(rx) == []


# -- floods: the same frame raced over many connections at once ------------------------------------

FLOOD: Final = 40


def _same_frame(ctx: Ctx, index: int) -> Obj:
    return message(ctx)


def _same_text(ctx: Ctx, index: int) -> Obj:
    return message(ctx, messageId=f"m-{index}", requestId=f"r-{index}")


def _all_distinct(ctx: Ctx, index: int) -> Obj:
    return message(ctx, messageId=f"m-{index}", requestId=f"r-{index}", text=f"text {index}")


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        pytest.param(_same_frame, {"queued": 1, "duplicate": FLOOD - 1}, id="same-message-id"),
        pytest.param(_same_text, {"queued": 1, "duplicate": FLOOD - 1}, id="same-text"),
        pytest.param(_all_distinct, {"queued": 30, "rate_limited": FLOOD - 30}, id="rate-burst"),
    ],
)
async def test_flood_of_concurrent_connections_is_admitted_atomically(
    locations: Locations, frame: Callable[[Ctx, int], Obj], expected: dict[str, int]
) -> None:
    """Admission is atomic (spec §3.2): however the connections interleave, a replayed id or text
    is admitted once, and one sender's burst stops at 30, with exactly one row per admission."""
    async with receiving(locations) as (rx, ctx):
        rx.turns.user_turn()  # busy with a known turn: a capable sender's messages are queued
        statuses: list[str] = []

        async def one(index: int) -> None:
            replies = await talk(ctx.target.socket_path, lines(auth_hello(ctx), frame(ctx, index)))
            assert replies[0] == (True, "ready", HELLO_ID)
            statuses.append(replies[1][1])

        async with anyio.create_task_group() as group:
            for index in range(FLOOD):
                group.start_soon(one, index)
        counts = {status: statuses.count(status) for status in set(statuses)}
        assert counts == expected
        snapshot = rx.snapshot()
        keys = [(row.sender_instance_id, row.message_id) for row in snapshot.rows]
        assert len(keys) == len(set(keys)) == snapshot.admitted == expected["queued"]
        assert snapshot.queued == expected["queued"]
        assert rx.host.calls == []


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param(b'{"v":1,"type":"\xff', (False, "invalid_frame", UNKNOWN), id="invalid-byte"),
        pytest.param(b'{"v":"\xed\xa0', (False, "invalid_frame", UNKNOWN), id="surrogate-start"),
        pytest.param(
            b" " * (FRAME_CAP + 1), (False, "message_too_large", UNKNOWN), id="past-the-cap"
        ),
    ],
)
async def test_a_fault_is_answered_at_once_without_waiting_for_a_newline(
    locations: Locations, data: bytes, expected: Reply
) -> None:
    """The client keeps the connection open and sends no LF: the fault is answered as soon as
    its bytes arrive (spec §3.1), not when the frame or the connection ends."""
    async with receiving(locations) as (rx, ctx):
        async with RawClient.connect(ctx.target.socket_path) as client:
            await client.send(data)
            reply = await client.read_reply()
            assert (reply.ok, reply.status, reply.request_id) == expected
            assert await client.read_to_eof() == b""
        assert admitted(rx) == []


async def test_shutdown_closes_held_connections_without_a_byte(locations: Locations) -> None:
    """Connections still open when the session stops are closed at once, unanswered, and the
    socket and registration are gone (spec §2 cleanup, spec §3.2)."""
    async with receiving(locations) as (rx, ctx):
        path = ctx.target.socket_path
        registration = ctx.locations.registration_path(ctx.target.instance_id)
        async with RawClient.connect(path) as early, RawClient.connect(path) as ready:
            await early.send(b'{"v":1,"type":"hello"')
            await ready.send(lines(auth_hello(ctx)))
            assert (await ready.read_reply()).status == "ready"
            await rx.runtime.stop()
            assert await early.read_to_eof() == b""
            assert await ready.read_to_eof() == b""
        assert not on_disk(path)
        assert not on_disk(registration)
        with pytest.raises(FileNotFoundError):
            await anyio.connect_unix(path)
