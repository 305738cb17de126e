"""Byte-level framing vectors (spec §10 items 1-5) and a replay of the reference peer's traffic.

The vectors live in ``tests/vectors/framing/manifest.json`` as recipes, so a 1 MiB input costs a
line of JSON rather than a megabyte of fixture; the manifest's ``format`` entry explains them.
"""

from __future__ import annotations

import functools
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from pi_cross_session._internal.protocol import jsonwire
from pi_cross_session._internal.protocol.codec import (
    ConnectionClosed,
    Event,
    Fault,
    Frame,
    FrameDecoder,
)
from pi_cross_session._internal.protocol.errors import FrameError
from pi_cross_session._internal.protocol.limits import MAX_FRAME_BYTES
from tests.data_paths import REFERENCE, VECTORS

MANIFEST = VECTORS / "framing" / "manifest.json"

CASES: list[dict[str, Any]] = json.loads(MANIFEST.read_text(encoding="utf-8"))["cases"]
SMALL = 65_536


# -- building and feeding -------------------------------------------------------------------------


def build(case: dict[str, Any]) -> bytes:
    """The byte stream a case's ``input`` recipe describes."""
    parts: list[bytes | None] = []
    fill: dict[str, Any] | None = None
    for segment in case["input"]:
        if "hex" in segment:
            parts.append(bytes.fromhex(segment["hex"]))
        elif "text" in segment:
            parts.append(segment["text"].encode())
        elif "repeat" in segment:
            parts.append(segment["repeat"].encode() * segment["count"])
        elif "fill" in segment:
            assert fill is None, "at most one fill segment per case"
            fill = segment
            parts.append(None)
        else:
            raise AssertionError(f"unknown segment {segment!r}")
    if fill is not None:
        fixed = sum(len(p) for p in parts if p is not None)
        room = case["total_bytes"] - fixed
        unit, filler = fill["fill"].encode(), fill["filler"].encode()
        assert len(filler) == 1, "the filler must be one byte"
        copies, rest = divmod(room, len(unit))
        parts = [unit * copies + filler * rest if p is None else p for p in parts]
    stream = b"".join(p for p in parts if p is not None)
    if "total_bytes" in case:
        assert len(stream) == case["total_bytes"], "the recipe does not give the stated size"
    return stream


@functools.cache
def stream_of(case_id: str) -> bytes:
    return build(next(c for c in CASES if c["id"] == case_id))


def feed(chunks: list[bytes], *, max_frame_bytes: int) -> list[Event]:
    decoder = FrameDecoder(max_frame_bytes=max_frame_bytes)
    events: list[Event] = []
    for chunk in chunks:
        decoder.receive_data(chunk)
        *frames, last = decoder.events()
        events.extend(frames)
        assert not isinstance(last, ConnectionClosed), "closed before EOF"
    decoder.receive_data(b"")
    events.extend(decoder.events())
    return events


def cut(stream: bytes, offsets: list[int]) -> list[bytes]:
    bounds = [0, *offsets, len(stream)]
    return [stream[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def sized(stream: bytes, size: int) -> list[bytes]:
    return [stream[i : i + size] for i in range(0, len(stream), size)]


def chunkings(case: dict[str, Any], stream: bytes) -> dict[str, list[bytes]]:
    plans = {
        "one-shot": [stream] if stream else [],
        "64KiB": sized(stream, 65_536),
        "4KiB": sized(stream, 4096),
        "7B": sized(stream, 7),
    }
    if len(stream) < SMALL:
        plans["1B"] = sized(stream, 1)
    for offsets in case.get("split_at", []):
        plans[f"at{offsets}"] = cut(stream, offsets)
    return plans


def check(events: list[Event], expect: list[dict[str, Any]]) -> None:
    assert len(events) == len(expect), events
    for event, want in zip(events, expect, strict=True):
        if "frame" in want:
            spec = want["frame"]
            assert isinstance(event, Frame), event
            assert event.raw_bytes == spec["raw_bytes"]
            if "text" in spec:
                assert event.text == spec["text"]
            assert event.text.startswith(spec.get("text_starts", ""))
            assert event.text.endswith(spec.get("text_ends", ""))
            if spec.get("json"):
                jsonwire.loads(event.text)
        elif "fault" in want:
            assert isinstance(event, Fault), event
            assert event.code == want["fault"]
        else:
            assert event == ConnectionClosed(partial=want["closed"]["partial"])


# -- the vectors ----------------------------------------------------------------------------------


def test_the_manifest_covers_spec_items_1_to_5() -> None:
    ids = [case["id"] for case in CASES]
    assert len(ids) == len(set(ids))
    for item in range(1, 6):
        assert any(f"§10 item {item}" in case["spec"] for case in CASES), item


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_vector(case: dict[str, Any]) -> None:
    stream = stream_of(case["id"])
    cap = case.get("max_frame_bytes", MAX_FRAME_BYTES)
    for name, chunks in chunkings(case, stream).items():
        assert b"".join(chunks) == stream
        try:
            check(feed(chunks, max_frame_bytes=cap), case["expect"])
        except AssertionError as exc:
            raise AssertionError(f"{case['id']} fed {name}: {exc}") from exc


# -- replay of the reference peer's recorded traffic ----------------------------------------------

TRANSCRIPTS = sorted(REFERENCE.glob("*.wire.jsonl"))
# Scenario 09 sends a non-JSON first line on purpose: (file name, line index).
NOT_JSON = {("09-invalid-json.wire.jsonl", 0)}


def test_the_reference_transcripts_are_present() -> None:
    assert REFERENCE.is_dir(), f"the recorded reference traffic is expected at {REFERENCE}"
    assert len(TRANSCRIPTS) >= 17


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=[p.name for p in TRANSCRIPTS])
def test_reference_traffic_decodes_to_its_lines(path: Path) -> None:
    wire = path.read_bytes()
    lines = wire.split(b"\n")
    assert lines.pop() == b"", "each recorded frame ends with its LF"
    expected: list[Event] = [Frame(line.decode("utf-8"), len(line) + 1) for line in lines]
    expected.append(ConnectionClosed(partial=False))
    assert feed([wire], max_frame_bytes=MAX_FRAME_BYTES) == expected
    assert feed(sized(wire, 1), max_frame_bytes=MAX_FRAME_BYTES) == expected
    for index, frame in enumerate(expected[:-1]):
        assert isinstance(frame, Frame)
        if (path.name, index) in NOT_JSON:
            with pytest.raises(FrameError):
                jsonwire.loads(frame.text)
        else:
            assert isinstance(jsonwire.loads(frame.text), dict)
