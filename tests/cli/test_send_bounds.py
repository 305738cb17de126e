"""``send`` checks each bound of the contract before anything is sent, and says which one was
missed and by how much (exit 1: a local failure, nothing sent, the agent dir untouched):

* a message text holds at most 1,000,000 UTF-16 code units;
* its frame, once the text is JSON-escaped (a ``"`` becomes ``\\"``), at most 1,048,576 bytes.

The summary's two bounds (400 units taken, 200 code points kept) are in ``test_send_input.py``.
"""

from __future__ import annotations

from pathlib import Path

from pi_cross_session._internal.protocol.limits import MAX_FRAME_BYTES, MAX_TEXT_UNITS
from tests.support.processes import Inboxes, run_cli


def test_a_text_whose_escaped_frame_is_over_1_mib_is_a_local_failure(
    inboxes: Inboxes, private_agent_dir: Path, tmp_path: Path
) -> None:
    """600 KB of ``"``: under every input bound, but its frame would be twice that. Refused
    before anything is sent (it was ``message_too_large``, exit 2, as if a receiver refused)."""
    inbox = inboxes.start("bob", busy=0)
    path = tmp_path / "quotes.txt"
    path.write_text('"' * 600_000)
    sent = run_cli(private_agent_dir, "send", "bob", "--file", str(path), "--json", cwd=tmp_path)
    assert sent.returncode == 1, sent
    report = sent.json()
    assert (report["status"], report["messageWritten"]) == ("message_too_large", False)
    assert report["error"].startswith("the message's frame would be 1,200,")
    over = int(report["error"].split("bytes, ", 1)[1].split(" over", 1)[0].replace(",", ""))
    assert 150_000 < over < 160_000
    assert f"over the {MAX_FRAME_BYTES:,} bytes (1 MiB) one frame may hold" in report["error"]
    text = run_cli(private_agent_dir, "send", "bob", "--file", str(path), cwd=tmp_path)
    assert text.returncode == 1, text
    assert text.stderr.startswith("Message not sent: the message's frame would be "), text
    # Decided before an identity was taken: nothing of the command line's exists.
    assert not (private_agent_dir / "cross-session").exists()
    assert not [e for e in inbox.events() if e["event"] in ("message", "state")]


def test_a_text_over_1000000_units_is_a_local_failure_saying_by_how_much(
    inboxes: Inboxes, private_agent_dir: Path, tmp_path: Path
) -> None:
    inboxes.start("bob", busy=0)
    path = tmp_path / "long.txt"
    path.write_text("x" * (MAX_TEXT_UNITS + 7))
    sent = run_cli(private_agent_dir, "send", "bob", "--file", str(path), cwd=tmp_path)
    assert sent.returncode == 1, sent
    assert sent.stderr.startswith(
        "Message not sent: the message is 1,000,007 UTF-16 code units long, 7 over the "
        "1,000,000 one message may hold"
    ), sent
    assert not (private_agent_dir / "cross-session").exists()


def test_a_text_at_both_bounds_is_sent_whole(
    inboxes: Inboxes, private_agent_dir: Path, tmp_path: Path
) -> None:
    """1,000,000 units, and its frame just under 1 MiB: the bounds are the contract's, not
    tighter."""
    inbox = inboxes.start("bob", busy=0)
    path = tmp_path / "full.txt"
    text = "x" * MAX_TEXT_UNITS
    path.write_text(text)
    sent = run_cli(private_agent_dir, "send", "bob", "--file", str(path), "--json", cwd=tmp_path)
    assert sent.returncode == 0, sent
    assert inbox.wait_event("message", messageId=sent.json()["messageId"])["text"] == text
