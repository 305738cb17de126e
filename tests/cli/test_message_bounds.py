"""A message's two bounds, as the README states them, through a real ``send`` and a live inbox.

The text is at most 1,000,000 UTF-16 code units (``MAX_TEXT_UNITS``), and the frame that carries
it, JSON with every escape, at most 1 MiB (``MAX_FRAME_BYTES``, 1,048,576 bytes). ASCII text meets
the first bound: 1,000,000 characters go, one more does not. Text in other scripts, or with
characters JSON escapes, meets the second first, well under a million units. Every refusal is
decided before anything is sent: exit 1, and the inbox receives nothing.
"""

from __future__ import annotations

from pathlib import Path

from pi_cross_session._internal.protocol.limits import MAX_FRAME_BYTES, MAX_TEXT_UNITS
from tests.support.processes import Inboxes, run_cli


def test_the_text_bound_and_the_frame_bound_each_refuse_before_sending(
    inboxes: Inboxes, private_agent_dir: Path, tmp_path: Path
) -> None:
    assert (MAX_TEXT_UNITS, MAX_FRAME_BYTES) == (1_000_000, 1_048_576)
    inbox = inboxes.start("bounded", busy=0)

    def send(text: str) -> tuple[int, str]:
        path = tmp_path / "message.txt"
        path.write_text(text, encoding="utf-8")
        sent = run_cli(private_agent_dir, "send", "bounded", "--file", str(path))
        return sent.returncode, sent.stdout + sent.stderr

    code, output = send("a" * MAX_TEXT_UNITS)
    assert code == 0, output
    inbox.wait_event("message")

    code, output = send("a" * (MAX_TEXT_UNITS + 1))  # 1,000,001 bytes: the frame would fit
    assert code == 1, output
    assert "not sent" in output.lower()
    assert "1,000,000" in output

    # 524,288 two-byte characters: half the units, a 1 MiB file, and a frame over 1 MiB.
    code, output = send("é" * (MAX_FRAME_BYTES // 2))
    assert code == 1, output
    assert "1,048,576" in output

    # 200,000 control characters: 200 KB of text, each escaped to six bytes in the frame.
    code, output = send("\x01" * 200_000)
    assert code == 1, output
    assert "1,048,576" in output

    # Only the first message ever reached the inbox.
    assert len([e for e in inbox.events() if e.get("event") == "message"]) == 1
