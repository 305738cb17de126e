"""Properties of the framing: chunking never matters, a simple model agrees, round trips hold.

The model (:func:`model`) restates spec §3.1 over a whole byte string, frame by frame, with no
streaming at all. The decoder must produce exactly its events for the whole stream, and, after
every chunk, exactly its events for the bytes received so far (so faults come as soon as the bytes
show them, never later).
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pi_cross_session._internal.protocol.codec import (
    BOM,
    NEED_DATA,
    ConnectionClosed,
    Event,
    Fault,
    Frame,
    FrameDecoder,
    encode_frame,
)
from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.errors import FrameTooLargeError, LocalProtocolError
from tests.hypothesis_profiles import scaled

SETTINGS = settings(max_examples=scaled(100))

# -- the model -----------------------------------------------------------------------------------

# Continuations that complete any valid partial sequence: E0 needs A0.., ED needs ..9F, F0 needs
# 90.., F4 needs ..8F; one of these first bytes fits each, and 80 fits every later position.
_COMPLETIONS = [b""] + [
    bytes([first]) + b"\x80" * extra for first in (0x80, 0x90, 0xA0) for extra in range(3)
]


def can_start_valid_utf8(data: bytes) -> bool:
    """True when some valid UTF-8 text begins with ``data`` (no byte in it is a dead end)."""
    for ext in _COMPLETIONS:
        try:
            (data + ext).decode("utf-8")
        except UnicodeDecodeError:
            continue
        return True
    return False


def model(stream: bytes, cap: int, *, eof: bool) -> list[Event]:
    """Spec §3.1, applied to a stream known in full: frames, then one final event."""
    out: list[Event] = []
    start = 0
    while True:
        lf = stream.find(b"\n", start)
        raw = stream[start:] if lf < 0 else stream[start : lf + 1]
        first = start == 0
        # Judge the frame on its first ``cap`` raw bytes (LF excluded from the UTF-8 check).
        seen = raw[:cap]
        if lf >= 0 and len(raw) <= cap:
            seen = seen[:-1]
        if not can_start_valid_utf8(seen):
            out.append(Fault(Code.INVALID_FRAME, ""))
            return out
        if len(raw) > cap:
            out.append(Fault(Code.MESSAGE_TOO_LARGE, ""))
            return out
        if lf < 0:
            out.append(ConnectionClosed(partial=bool(raw)) if eof else NEED_DATA)
            return out
        body = raw[:-1]
        if first and body.startswith(BOM):
            body = body[len(BOM) :]
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            out.append(Fault(Code.INVALID_FRAME, ""))
            return out
        if not text:
            out.append(Fault(Code.INVALID_FRAME, ""))
            return out
        out.append(Frame(text, len(raw)))
        start = lf + 1


def comparable(events: list[Event]) -> list[Event]:
    """Fault details are prose; compare faults by code only."""
    return [Fault(e.code, "") if isinstance(e, Fault) else e for e in events]


# -- strategies ----------------------------------------------------------------------------------

pieces = st.one_of(
    st.text(max_size=6).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.sampled_from(
        [
            b"\n",
            b"\n",
            b"\r\n",
            b"{}",
            BOM,
            BOM[:1],
            BOM[:2],
            b"\xff",
            b"\xc0\xaf",
            b"\xed\xa0",
            b"\xed\xa0\x80",
            b"\xe4\xb8",
            b"\xe4",
            b"\xf0\x9f\x98\x80",
            b"\xf0\x9f",
            b"\xf4\x90",
            b"\x80",
        ]
    ),
    st.binary(max_size=4),
)
streams = st.lists(pieces, max_size=24).map(b"".join)
# Mostly well-formed streams, so that long runs of frames get exercised too.
clean_streams = st.lists(
    st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\n"), min_size=1),
    max_size=12,
).map(lambda lines: "".join(line + "\n" for line in lines).encode())
caps = st.integers(min_value=1, max_value=40)


@st.composite
def splits(draw: st.DrawFn, data: bytes) -> list[bytes]:
    """Cut ``data`` at a random set of points (chunks are never empty: b"" means EOF)."""
    cuts = draw(st.sets(st.integers(min_value=1, max_value=max(len(data) - 1, 1))))
    bounds = [0, *sorted(c for c in cuts if c < len(data)), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def run(chunks: list[bytes], cap: int, *, style: str = "events") -> tuple[list[Event], list[int]]:
    """Decode ``chunks`` then EOF; return the events and ``pending_bytes`` after each chunk."""
    decoder = FrameDecoder(max_frame_bytes=cap)
    out: list[Event] = []
    pending: list[int] = []
    for chunk in [*chunks, b""]:
        decoder.receive_data(chunk)
        pending.append(decoder.pending_bytes)
        if style == "events":
            *frames, last = decoder.events()
            out.extend(frames)
        else:
            while isinstance(event := decoder.next_event(), Frame):
                out.append(event)
            last = event
    out.append(last)
    return out, pending


# -- properties ----------------------------------------------------------------------------------


@SETTINGS
@given(st.data(), st.one_of(streams, clean_streams), caps | st.just(1_048_576))
def test_any_chunking_gives_the_events_of_the_model(
    data: st.DataObject, stream: bytes, cap: int
) -> None:
    expected = model(stream, cap, eof=True)
    chunks = data.draw(splits(stream))
    style = data.draw(st.sampled_from(["events", "next_event"]))
    events, pending = run(chunks, cap, style=style)
    assert comparable(events) == expected
    # Faults are compared with their details too: the same bytes, the same words.
    assert events == run([stream] if stream else [], cap)[0]
    assert max(pending) <= cap


@SETTINGS
@given(st.data(), streams, caps)
def test_events_come_as_soon_as_the_bytes_so_far_decide_them(
    data: st.DataObject, stream: bytes, cap: int
) -> None:
    decoder = FrameDecoder(max_frame_bytes=cap)
    got: list[Event] = []
    received = b""
    for chunk in data.draw(splits(stream)):
        decoder.receive_data(chunk)
        received += chunk
        *frames, last = decoder.events()
        got.extend(frames)
        assert comparable([*got, last]) == model(received, cap, eof=False)


@settings(max_examples=scaled(100))
@given(st.one_of(streams, clean_streams), caps)
def test_byte_at_a_time_equals_one_shot(stream: bytes, cap: int) -> None:
    bytewise, _ = run([stream[i : i + 1] for i in range(len(stream))], cap)
    whole, _ = run([stream] if stream else [], cap)
    assert bytewise == whole


well_formed_bodies = st.text(
    st.characters(exclude_categories=["Cs"], exclude_characters="\n"), min_size=1
).filter(lambda body: not body.startswith("\ufeff"))
cjk_and_astral = st.text(
    st.sampled_from('中文字テスト한국어😀𝄞🀄\U0010fffd\u00e9\u20ac\r ab"{}'), min_size=1
).filter(lambda body: not body.startswith("\ufeff"))


@SETTINGS
@given(st.data(), st.lists(well_formed_bodies | cjk_and_astral, min_size=1, max_size=8))
def test_encode_then_decode_round_trips(data: st.DataObject, bodies: list[str]) -> None:
    wire = b"".join(encode_frame(body) for body in bodies)
    chunks = data.draw(splits(wire))
    events, _ = run(chunks, 1_048_576)
    assert events == [Frame(b, len(b.encode()) + 1) for b in bodies] + [
        ConnectionClosed(partial=False)
    ]


@SETTINGS
@given(well_formed_bodies | cjk_and_astral, caps)
def test_encoder_and_decoder_agree_on_the_cap(body: str, cap: int) -> None:
    size = len(body.encode()) + 1
    if size > cap:
        with pytest.raises(FrameTooLargeError):
            encode_frame(body, max_frame_bytes=cap)
        # Every prefix of valid UTF-8 is a valid prefix, so the decoder can only say too large.
        assert comparable(run([body.encode() + b"\n"], cap)[0]) == [
            Fault(Code.MESSAGE_TOO_LARGE, "")
        ]
    else:
        wire = encode_frame(body, max_frame_bytes=cap)
        assert run([wire], cap)[0] == [Frame(body, size), ConnectionClosed(partial=False)]


@SETTINGS
@given(st.data(), st.binary(max_size=64), caps | st.just(1_048_576))
def test_decoding_never_raises_and_misuse_is_a_local_error(
    data: st.DataObject, stream: bytes, cap: int
) -> None:
    decoder = FrameDecoder(max_frame_bytes=cap)
    for chunk in data.draw(splits(stream)):
        decoder.receive_data(chunk)
        decoder.next_event()
        decoder.events()
    decoder.receive_data(b"")
    final = decoder.next_event()
    while isinstance(final, Frame):
        final = decoder.next_event()
    assert isinstance(final, Fault | ConnectionClosed)
    assert decoder.next_event() is final
    with pytest.raises(LocalProtocolError):
        decoder.receive_data(data.draw(st.binary(max_size=4)))
