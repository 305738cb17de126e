"""Every frame the reference peer put on the wire parses, and re-encodes byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest

from pi_cross_session._internal.protocol import frames as wire
from pi_cross_session._internal.protocol.errors import FrameError
from tests.data_paths import REFERENCE

TRANSCRIPTS = sorted(REFERENCE.glob("*.wire.jsonl"))
NOT_JSON = {"09-invalid-json.wire.jsonl": 0}  # scenario 09 sends a non-JSON line on purpose


def parse(obj: object) -> wire.AnyFrame:
    kind = obj.get("type") if isinstance(obj, dict) else None
    if kind == "hello":
        return wire.parse_hello(obj)
    if kind == "response":
        return wire.parse_response(obj)
    return wire.parse_request(obj)


def test_the_transcripts_are_there() -> None:
    assert len(TRANSCRIPTS) >= 17


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=lambda p: p.name)
def test_reference_frames_parse_and_reencode_identically(path: Path) -> None:
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b"", "one frame per line, each terminated"
    for index, raw in enumerate(lines[:-1]):
        text = raw.decode("utf-8")
        if NOT_JSON.get(path.name) == index:
            with pytest.raises(FrameError):
                wire.loads_frame(text)
            continue
        frame = parse(wire.loads_frame(text))
        # The reference's encoding is canonical (JSON.stringify), so ours must equal it exactly.
        assert wire.dumps_frame(frame) == text


def test_reference_responses_say_what_a_sender_needs() -> None:
    for path in TRANSCRIPTS:
        for raw in path.read_bytes().split(b"\n")[:-1]:
            try:
                frame = parse(wire.loads_frame(raw.decode()))
            except FrameError:
                continue
            if isinstance(frame, wire.Response) and frame.ok:
                assert frame.peer_identity() is not None
                assert frame.code == frame.state == frame.status
