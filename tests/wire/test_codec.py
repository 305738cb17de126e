"""The line framing, rule by rule (spec §3.1, spec §10 items 1-5),
at the real cap and at small ones."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import pytest

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
from pi_cross_session._internal.protocol.limits import MAX_FRAME_BYTES

CAP = MAX_FRAME_BYTES
KIB64 = 65_536
TOO_LARGE = Code.MESSAGE_TOO_LARGE
INVALID = Code.INVALID_FRAME
CLEAN_EOF = ConnectionClosed(partial=False)
PARTIAL_EOF = ConnectionClosed(partial=True)


# -- helpers -----------------------------------------------------------------------------------


def chunks_of(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def feed(chunks: Iterable[bytes], *, eof: bool = True, max_frame_bytes: int = CAP) -> list[Event]:
    """Feed chunks (then EOF), collecting every frame and the last event once.

    Empty chunks are skipped: ``b""`` is how EOF is spelled.
    """
    decoder = FrameDecoder(max_frame_bytes=max_frame_bytes)
    out: list[Event] = []
    last: Event = NEED_DATA
    data = [chunk for chunk in chunks if chunk]
    for chunk in [*data, b""] if eof else data:
        decoder.receive_data(chunk)
        *frames, last = decoder.events()
        out.extend(frames)
    out.append(last)
    return out


def one_shot(data: bytes, *, max_frame_bytes: int = CAP) -> list[Event]:
    return feed([data], max_frame_bytes=max_frame_bytes)


def bytewise(data: bytes, *, max_frame_bytes: int = CAP) -> list[Event]:
    return feed(chunks_of(data, 1), max_frame_bytes=max_frame_bytes)


def codes(events: list[Event]) -> list[object]:
    """Events with faults reduced to their code (details are ours and may be reworded)."""
    return [e.code if isinstance(e, Fault) else e for e in events]


def padded(total: int, *, prefix: bytes = b'{"t":"', suffix: bytes = b'"}\n') -> bytes:
    """A frame of exactly ``total`` bytes, padded with CJK (3 bytes each) then spaces."""
    room = total - len(prefix) - len(suffix)
    cjk, spaces = divmod(room, 3)
    data = prefix + "中".encode() * cjk + b" " * spaces + suffix
    assert len(data) == total
    return data


def fault_code(event: Event) -> Code:
    assert isinstance(event, Fault), event
    return event.code


# -- events and the public surface --------------------------------------------------------------


def test_two_frames_in_one_chunk() -> None:
    assert one_shot(b'{"a":1}\n[2]\n') == [Frame('{"a":1}', 8), Frame("[2]", 4), CLEAN_EOF]


def test_a_fresh_decoder_needs_data() -> None:
    decoder = FrameDecoder()
    assert decoder.next_event() is NEED_DATA
    assert decoder.events() == [NEED_DATA]
    assert decoder.pending_bytes == 0
    assert repr(NEED_DATA) == "NEED_DATA"


def test_next_event_hands_out_frames_one_at_a_time_in_order() -> None:
    decoder = FrameDecoder()
    decoder.receive_data(b"1\n2\n3\n4")
    assert decoder.next_event() == Frame("1", 2)
    assert decoder.events() == [Frame("2", 2), Frame("3", 2), NEED_DATA]
    assert decoder.next_event() is NEED_DATA
    assert decoder.pending_bytes == 1
    decoder.receive_data(b"\n")
    assert decoder.next_event() == Frame("4", 2)
    assert decoder.next_event() is NEED_DATA


def test_event_types_are_frozen_and_slotted() -> None:
    frame = Frame("x", 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        frame.text = "y"  # type: ignore[misc]
    for event in (frame, ConnectionClosed(partial=False), Fault(INVALID, "x")):
        assert not hasattr(event, "__dict__")


def test_the_cap_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        FrameDecoder(max_frame_bytes=0)


def test_bytearray_and_memoryview_are_accepted() -> None:
    decoder = FrameDecoder()
    decoder.receive_data(bytearray(b"ab"))  # type: ignore[arg-type]
    decoder.receive_data(memoryview(b"c\n"))  # type: ignore[arg-type]
    assert decoder.events() == [Frame("abc", 4), NEED_DATA]


# -- splitting and reassembly -------------------------------------------------------------------


def test_frames_spanning_chunks_are_reassembled() -> None:
    assert feed([b'{"a"', b":1}\n[", b"2", b"]\n"]) == [
        Frame('{"a":1}', 8),
        Frame("[2]", 4),
        CLEAN_EOF,
    ]


def test_multibyte_text_fed_one_byte_at_a_time() -> None:
    text = '{"text":"héllo 中文 😀 𝄞 ‰"}'
    data = text.encode() + b"\n"
    assert bytewise(data) == [Frame(text, len(data)), CLEAN_EOF]


def test_every_two_way_split_gives_the_same_events() -> None:
    data = '{"a":"ü"}\n{"b":"中😀"}\r\n'.encode()
    expected = one_shot(data)
    assert expected == [Frame('{"a":"ü"}', 11), Frame('{"b":"中😀"}\r', 17), CLEAN_EOF]
    for i in range(len(data) + 1):
        assert feed([data[:i], data[i:]]) == expected, i


def test_many_frames_per_chunk_then_a_partial_one() -> None:
    decoder = FrameDecoder()
    decoder.receive_data(b"[1]\n" * 1000 + b"[2")
    events = decoder.events()
    assert events == [Frame("[1]", 4)] * 1000 + [NEED_DATA]
    assert decoder.pending_bytes == 2


# -- whitespace and empty lines -----------------------------------------------------------------


def test_crlf_keeps_the_carriage_return_in_the_text() -> None:
    assert one_shot(b"{}\r\n") == [Frame("{}\r", 4), CLEAN_EOF]


def test_a_lone_carriage_return_is_a_frame_not_a_codec_fault() -> None:
    assert one_shot(b"\r\n") == [Frame("\r", 2), CLEAN_EOF]


def test_trailing_spaces_stay_in_the_frame() -> None:
    assert one_shot(b"{}   \n") == [Frame("{}   ", 6), CLEAN_EOF]


@pytest.mark.parametrize(
    "data",
    [b"\n", b"{}\n\n{}\n", BOM + b"\n", b"{}\n\n"],
    ids=["alone", "between-frames", "after-bom", "at-end"],
)
def test_an_empty_line_is_invalid(data: bytes) -> None:
    for events in (one_shot(data), bytewise(data)):
        assert codes(events)[-1] == INVALID
        assert events[:-1] == [Frame("{}", 3)] * data.startswith(b"{}")


# -- BOM ------------------------------------------------------------------------------------------


def test_a_leading_bom_is_stripped_and_counted() -> None:
    assert one_shot(BOM + b"{}\n{}\n") == [Frame("{}", 6), Frame("{}", 3), CLEAN_EOF]


def test_a_bom_split_across_chunks_is_still_stripped() -> None:
    data = BOM + '{"x":"中"}\n'.encode()
    expected = [Frame('{"x":"中"}', len(data)), CLEAN_EOF]
    assert bytewise(data) == expected
    for i in range(len(data) + 1):
        for j in range(i, len(data) + 1):
            assert feed([data[:i], data[i:j], data[j:]]) == expected, (i, j)


def test_a_bom_on_a_later_frame_stays_in_the_text() -> None:
    data = b"{}\n" + BOM + b"{}\n" + BOM + b"\n"
    expected = [Frame("{}", 3), Frame("\ufeff{}", 6), Frame("\ufeff", 4), CLEAN_EOF]
    assert one_shot(data) == expected
    assert bytewise(data) == expected


def test_only_the_first_of_two_leading_boms_is_stripped() -> None:
    assert one_shot(BOM + BOM + b"{}\n") == [Frame("\ufeff{}", 9), CLEAN_EOF]


def test_a_bom_prefix_followed_by_other_bytes_is_decoded_as_utf8() -> None:
    # EF BB starts a three-byte sequence; 'A' cannot continue it.
    assert codes(feed([b"\xef", b"\xbb", b"A\n"])) == [INVALID]
    # EF BB 80 is a valid character (U+FEC0), not a BOM.
    assert feed([b"\xef", b"\xbb\x80\n"]) == [Frame("\ufec0", 4), CLEAN_EOF]


@pytest.mark.parametrize("prefix", [b"\xef", b"\xef\xbb", BOM])
def test_eof_inside_or_right_after_a_bom_is_a_partial_frame(prefix: bytes) -> None:
    assert bytewise(prefix) == [PARTIAL_EOF]
    decoder = FrameDecoder()
    decoder.receive_data(prefix)
    assert decoder.pending_bytes == len(prefix)


def test_bom_plus_frame_exactly_at_the_cap_is_accepted() -> None:
    # Spec §10 item 3: BOM (3) + 1,048,572 + LF = 1,048,576.
    body = padded(1_048_572 + 1)
    events = one_shot(BOM + body)
    assert events == [Frame(body[:-1].decode(), CAP), CLEAN_EOF]
    assert feed(chunks_of(BOM + body, KIB64)) == events


@pytest.mark.parametrize("body_bytes", [1_048_573, 1_048_575])
def test_bom_plus_frame_over_the_cap_is_too_large(body_bytes: int) -> None:
    # 3 + 1,048,573 + LF is the first size refused; 3 + 1,048,575 + LF is the spec's example.
    data = BOM + padded(body_bytes + 1)
    assert codes(one_shot(data)) == [TOO_LARGE]
    assert codes(feed(chunks_of(data, KIB64))) == [TOO_LARGE]


def test_bom_plus_frame_one_under_the_cap_is_accepted() -> None:
    body = padded(1_048_571 + 1)
    assert one_shot(BOM + body) == [Frame(body[:-1].decode(), CAP - 1), CLEAN_EOF]


def test_a_bom_alone_can_exceed_a_tiny_cap() -> None:
    assert codes(feed([b"\xef", b"\xbb"], max_frame_bytes=1, eof=False)) == [TOO_LARGE]
    assert codes(feed([BOM], max_frame_bytes=2, eof=False)) == [TOO_LARGE]
    assert feed([BOM], max_frame_bytes=3, eof=False) == [NEED_DATA]


# -- the byte cap -------------------------------------------------------------------------------


@pytest.mark.parametrize("total", [CAP - 1, CAP, CAP + 1])
def test_the_real_cap_with_cjk_padding(total: int) -> None:
    # Spec §10 item 1: the frame of exactly 1,048,576 bytes with its LF passes; one more fails.
    data = padded(total)
    expected: list[object] = (
        [TOO_LARGE] if total > CAP else [Frame(data[:-1].decode(), total), CLEAN_EOF]
    )
    assert codes(one_shot(data)) == expected
    assert codes(feed(chunks_of(data, KIB64))) == expected
    assert codes(feed(chunks_of(data, 4093))) == expected


def test_the_real_cap_leaves_frames_around_it_intact() -> None:
    big = padded(CAP)
    events = feed(chunks_of(b"[1]\n" + big + b"[2]\n", KIB64))
    assert events == [Frame("[1]", 4), Frame(big[:-1].decode(), CAP), Frame("[2]", 4), CLEAN_EOF]


def test_too_large_fires_before_any_newline() -> None:
    # Spec §10 item 2: 1,048,577 raw bytes without a newline.
    decoder = FrameDecoder()
    data = padded(CAP + 1, suffix=b"")
    for chunk in chunks_of(data, KIB64)[:-1]:
        decoder.receive_data(chunk)
        assert decoder.next_event() is NEED_DATA
        assert decoder.pending_bytes <= CAP
    decoder.receive_data(data[-(len(data) % KIB64 or KIB64) :])
    assert fault_code(decoder.next_event()) == TOO_LARGE
    assert decoder.pending_bytes == 0


def test_exactly_cap_bytes_pending_is_not_yet_too_large() -> None:
    decoder = FrameDecoder()
    decoder.receive_data(b"a" * CAP)
    assert decoder.next_event() is NEED_DATA
    assert decoder.pending_bytes == CAP
    decoder.receive_data(b"\n")  # even the LF is one byte too many
    assert fault_code(decoder.next_event()) == TOO_LARGE


def test_cap_bytes_then_eof_is_a_partial_frame() -> None:
    assert one_shot(b"a" * CAP) == [PARTIAL_EOF]


def test_a_partial_multibyte_tail_counts_toward_the_cap() -> None:
    tail = "中".encode()[:2]
    # 1,048,574 + 2 = 1,048,576 pending: allowed until more arrives.
    assert one_shot(b"a" * (CAP - 2) + tail) == [PARTIAL_EOF]
    # 1,048,575 + 2 = 1,048,577: refused without waiting for the rest of the character.
    assert codes(feed([b"a" * (CAP - 1), tail], eof=False)) == [TOO_LARGE]
    assert codes(feed([b"a" * (CAP - 1) + tail[:1], tail[1:]], eof=False)) == [TOO_LARGE]


@pytest.mark.parametrize("cap", [4, 8, 9])
@pytest.mark.parametrize("delta", [-1, 0, 1])
def test_small_caps_at_limit_minus_one_limit_and_limit_plus_one(cap: int, delta: int) -> None:
    total = cap + delta
    data = b"[" + b"1" * (total - 3) + b"]\n"
    expected: list[object] = (
        [TOO_LARGE] if delta > 0 else [Frame(data[:-1].decode(), total), CLEAN_EOF]
    )
    assert codes(one_shot(data, max_frame_bytes=cap)) == expected
    assert codes(bytewise(data, max_frame_bytes=cap)) == expected


@pytest.mark.parametrize("cap", [6, 7, 8])
def test_small_caps_count_multibyte_characters_in_bytes(cap: int) -> None:
    data = '"中"\n'.encode()  # 3 + 2 quotes + LF = 6 bytes, 4 characters
    expected: list[object] = [Frame('"中"', 6), CLEAN_EOF]
    assert one_shot(data, max_frame_bytes=cap) == expected
    assert codes(one_shot(data, max_frame_bytes=5)) == [TOO_LARGE]
    assert codes(bytewise(data, max_frame_bytes=5)) == [TOO_LARGE]


def test_the_cap_is_per_frame_not_per_chunk() -> None:
    data = b"[1]\n" * 10
    assert one_shot(data, max_frame_bytes=4) == [Frame("[1]", 4)] * 10 + [CLEAN_EOF]


def test_invalid_utf8_within_the_cap_wins_over_too_large() -> None:
    # The 0xFF is byte 3 of a frame with cap 4: it was seen before the cap was passed.
    assert codes(one_shot(b"ab\xffcdef\n", max_frame_bytes=4)) == [INVALID]
    assert codes(bytewise(b"ab\xffcdef\n", max_frame_bytes=4)) == [INVALID]
    # At byte 5 it lies past the cap: the frame is too large first.
    assert codes(one_shot(b"abcd\xffef\n", max_frame_bytes=4)) == [TOO_LARGE]
    assert codes(bytewise(b"abcd\xffef\n", max_frame_bytes=4)) == [TOO_LARGE]


# -- UTF-8 ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        b"\xff",
        b"\xc0\xaf",  # overlong '/'
        b"\x80",  # stray continuation byte
        b"\xed\xa0\x80",  # an encoded surrogate (U+D800)
        b"\xf4\x90\x80\x80",  # past U+10FFFF
        b"\xe4\xb8A",  # a sequence cut short by another character
    ],
    ids=lambda b: b.hex(),
)
def test_invalid_utf8_is_an_invalid_frame(bad: bytes) -> None:
    data = b'{"a":"' + bad + b'"}\n'
    assert codes(one_shot(data)) == [INVALID]
    assert codes(bytewise(data)) == [INVALID]


def test_an_invalid_byte_then_lf() -> None:
    # Spec §10 item 4.
    assert codes(one_shot(b"\xff\n")) == [INVALID]


@pytest.mark.parametrize("bad", [b"\xff", b"\xc0", b"\xe0\x80", b"\xed\xa0", b"\xf4\x90"])
def test_an_invalid_byte_faults_before_its_lf_arrives(bad: bytes) -> None:
    assert codes(feed([b'{"a":"', bad], eof=False)) == [INVALID]
    assert codes(feed([bad], eof=False)) == [INVALID]
    assert codes(feed(chunks_of(b'{"a":"' + bad, 1), eof=False)) == [INVALID]


def test_an_incomplete_sequence_followed_by_lf_is_invalid() -> None:
    for data in (b'{"a":"\xe4\xb8\n', b"\xf0\x9f\x98\n", b"\xc3\n"):
        assert codes(one_shot(data)) == [INVALID]
        assert codes(bytewise(data)) == [INVALID]


def test_an_incomplete_sequence_at_eof_is_only_a_partial_frame() -> None:
    assert one_shot(b'{"a":"\xe4\xb8') == [PARTIAL_EOF]


def test_a_valid_frame_then_garbage_yields_the_frame_first() -> None:
    # Spec §10 item 4: what came before the fault is not disturbed by it.
    for tail in (b"\xff\n", b"\xff", b"\n", b"x" * 20):
        data = b'{"ok":1}\n' + tail
        expected = [Frame('{"ok":1}', 9), INVALID if tail != b"x" * 20 else TOO_LARGE]
        assert codes(feed([data], eof=False, max_frame_bytes=16)) == expected
        assert codes(feed(chunks_of(data, 1), eof=False, max_frame_bytes=16)) == expected


def test_frames_after_a_fault_in_the_same_chunk_are_not_decoded() -> None:
    events = one_shot(b"[1]\n\xff\n[2]\n")
    assert codes(events) == [Frame("[1]", 4), INVALID]


# -- EOF, stickiness and misuse -----------------------------------------------------------------


def test_eof_with_nothing_pending_is_clean() -> None:
    assert one_shot(b"") == [CLEAN_EOF]
    assert one_shot(b"{}\n") == [Frame("{}", 3), CLEAN_EOF]


def test_eof_with_a_pending_frame_drops_it() -> None:
    decoder = FrameDecoder()
    decoder.receive_data(b"{}\n{")
    decoder.receive_data(b"")
    assert decoder.events() == [Frame("{}", 3), PARTIAL_EOF]
    assert decoder.pending_bytes == 0


def test_closed_is_sticky_and_data_after_eof_is_a_local_error() -> None:
    decoder = FrameDecoder()
    decoder.receive_data(b"")
    closed = decoder.next_event()
    assert closed == CLEAN_EOF
    assert decoder.next_event() is closed
    assert decoder.events() == [closed]
    with pytest.raises(LocalProtocolError):
        decoder.receive_data(b"{}\n")
    with pytest.raises(LocalProtocolError):
        decoder.receive_data(b"")


def test_a_fault_is_sticky() -> None:
    decoder = FrameDecoder()
    decoder.receive_data(b"[1]\n\xff")
    assert decoder.next_event() == Frame("[1]", 4)
    fault = decoder.next_event()
    assert fault_code(fault) == INVALID
    decoder.receive_data(b"[2]\n")  # ignored: nothing more is decoded
    assert decoder.next_event() is fault
    assert decoder.events() == [fault]
    decoder.receive_data(b"")  # EOF does not replace the fault
    assert decoder.next_event() is fault
    with pytest.raises(LocalProtocolError):
        decoder.receive_data(b"[3]\n")
    assert decoder.events() == [fault]


def test_a_fault_releases_the_pending_bytes() -> None:
    decoder = FrameDecoder(max_frame_bytes=10)
    decoder.receive_data(b"a" * 10)
    assert decoder.pending_bytes == 10
    decoder.receive_data(b"a")
    assert decoder.pending_bytes == 0
    assert fault_code(decoder.next_event()) == TOO_LARGE


def test_fault_details_never_quote_the_peer() -> None:
    for data in (b"SECRET\xff\n", b"SECRET" * 10):
        (event,) = feed([data], eof=False, max_frame_bytes=16)
        assert isinstance(event, Fault)
        assert "SECRET" not in event.detail
        assert event.detail


# -- the encoder --------------------------------------------------------------------------------


def test_encode_frame_appends_a_lf() -> None:
    assert encode_frame('{"a":"中"}') == '{"a":"中"}\n'.encode()
    assert encode_frame("{}\r") == b"{}\r\n"


@pytest.mark.parametrize("total", [CAP - 1, CAP, CAP + 1])
def test_encode_frame_at_the_real_cap(total: int) -> None:
    body = padded(total)[:-1].decode()
    if total > CAP:
        with pytest.raises(FrameTooLargeError) as caught:
            encode_frame(body)
        assert caught.value.code == TOO_LARGE
    else:
        raw = encode_frame(body)
        assert len(raw) == total
        assert one_shot(raw) == [Frame(body, total), CLEAN_EOF]


@pytest.mark.parametrize("delta", [-1, 0, 1])
def test_encode_frame_with_a_small_cap_counts_bytes(delta: int) -> None:
    body = "中中"  # 6 bytes, 7 with the LF
    if delta < 0:
        with pytest.raises(FrameTooLargeError):
            encode_frame(body, max_frame_bytes=7 + delta)
    else:
        assert len(encode_frame(body, max_frame_bytes=7 + delta)) == 7


@pytest.mark.parametrize(
    "body",
    ["", "a\nb", "\n", "a\ud800b", "\udfff", "\ufeff{}"],
    ids=["empty", "lf", "only-lf", "surrogate", "low-surrogate", "leading-bom"],
)
def test_encode_frame_refuses_what_a_reader_would_not_take_back(body: str) -> None:
    with pytest.raises(LocalProtocolError):
        encode_frame(body)


def test_encode_frame_checks_the_body_before_the_size() -> None:
    # A body we must never send is our bug, whatever its size.
    with pytest.raises(LocalProtocolError):
        encode_frame("a\n" * 10, max_frame_bytes=4)


def test_encoded_frames_decode_back() -> None:
    # A U+FEFF after the first character survives: only a connection-initial BOM is stripped.
    bodies = ['{"v":1}', "中文 😀", "x\ufeff", " spaced "]
    data = b"".join(encode_frame(b) for b in bodies)
    expected = [Frame(b, len(b.encode()) + 1) for b in bodies] + [CLEAN_EOF]
    assert one_shot(data) == expected
    assert bytewise(data) == expected
