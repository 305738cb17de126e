"""``pi-cross-session send``: the message from stdin or a file, and a summary never cut silently.

A message is ``MESSAGE``, stdin with ``-``, or ``--file PATH``; a file or stdin is read at most
one frame's size plus one byte, so an input too large to send is refused before it is read whole.
Every refusal here is decided before anything is published: exit 1, and the agent dir untouched.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from pi_cross_session._internal.protocol.limits import MAX_FRAME_BYTES
from tests.support.processes import Inboxes, Result, run_cli

Cli = Callable[..., Result]


def test_a_message_from_stdin(inboxes: Inboxes, private_agent_dir: Path, tmp_path: Path) -> None:
    inbox = inboxes.start("reader", busy=0)
    text = "from a pipe\nsecond line, ünïcode 🦊\n"
    sent = run_cli(private_agent_dir, "send", "reader", "-", "--json", stdin=text, cwd=tmp_path)
    assert sent.returncode == 0, sent
    message = inbox.wait_event("message", messageId=sent.json()["messageId"])
    assert message["text"] == text  # exactly what was piped, trailing newline included
    assert message["summary"] == "from a pipe"


def test_a_200_kb_message_from_a_file(
    inboxes: Inboxes, cli: Cli, tmp_path: Path, private_agent_dir: Path
) -> None:
    """Too long for an argument list (the tracker's 200 KB "Argument list too long"), fine as
    a file."""
    inbox = inboxes.start("big", busy=0)
    text = "".join(f"line {n:06d} of a long report\n" for n in range(200_000 // 28))
    assert len(text.encode()) > 190_000
    path = tmp_path / "report.txt"
    path.write_text(text, encoding="utf-8")
    sent = cli("send", "big", "--file", str(path), "--summary", "the long report", "--json")
    assert sent.returncode == 0, sent
    message = inbox.wait_event("message", messageId=sent.json()["messageId"])
    assert message["text"] == text
    assert message["summary"] == "the long report"


def nothing_created(agent_dir: Path) -> bool:
    return list(agent_dir.iterdir()) == []


def test_a_file_larger_than_a_frame_is_refused_unsent(
    cli: Cli, tmp_path: Path, private_agent_dir: Path
) -> None:
    path = tmp_path / "huge.txt"
    path.write_bytes(b"x" * (MAX_FRAME_BYTES + 1))
    sent = cli("send", "anyone", "--file", str(path))
    assert sent.returncode == 1, sent
    # Its size is known without reading it: which bound, and by how much.
    assert sent.stderr.startswith(
        f"Message not sent: {path} is {MAX_FRAME_BYTES + 1:,} bytes, 1 over the "
        f"{MAX_FRAME_BYTES:,} bytes (1 MiB) one frame may hold"
    ), sent
    assert nothing_created(private_agent_dir)


def test_an_endless_input_is_refused_without_being_read_whole(
    cli: Cli, private_agent_dir: Path
) -> None:
    """/dev/zero never ends: only a bounded read lets the command answer at all."""
    sent = cli("send", "anyone", "--file", "/dev/zero", "--json")
    assert sent.returncode == 1, sent
    report = sent.json()
    assert report["status"] == "invalid_message"
    assert report["messageWritten"] is False
    assert "more than" in report["error"]
    assert nothing_created(private_agent_dir)


def test_a_file_that_is_not_utf8_is_refused(
    cli: Cli, tmp_path: Path, private_agent_dir: Path
) -> None:
    path = tmp_path / "latin1.txt"
    path.write_bytes("caf\xe9".encode("latin-1"))
    sent = cli("send", "anyone", "--file", str(path))
    assert sent.returncode == 1, sent
    assert "is not UTF-8 text" in sent.stderr
    assert nothing_created(private_agent_dir)


def test_a_missing_file_is_refused(cli: Cli, tmp_path: Path, private_agent_dir: Path) -> None:
    sent = cli("send", "anyone", "--file", str(tmp_path / "nope.txt"))
    assert sent.returncode == 1, sent
    assert "cannot read" in sent.stderr
    assert "No such file or directory" in sent.stderr
    assert nothing_created(private_agent_dir)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--file", "x.txt", "also a message"), "give the message once"),
        ((), "no message: give MESSAGE, - to read stdin, or --file PATH"),
    ],
    ids=["message-and-file", "no-message"],
)
def test_the_message_is_given_exactly_once(
    cli: Cli, private_agent_dir: Path, args: tuple[str, ...], expected: str
) -> None:
    sent = cli("send", "anyone", *args)
    assert sent.returncode == 1, sent
    assert expected in sent.stderr
    assert nothing_created(private_agent_dir)


def test_a_summary_is_taken_up_to_400_units_and_a_cut_is_said(
    inboxes: Inboxes, cli: Cli, private_agent_dir: Path
) -> None:
    """As the send tool takes it: up to 400 UTF-16 units, folded, and cut to the 200 code points
    a receiver keeps. A cut is never silent: a note on stderr, ``summaryCut`` in ``--json``.
    Over 400 units is refused before anything is sent, saying by how much."""
    inbox = inboxes.start("summaries", busy=0)
    long = "s" * 300
    cut = cli("send", "summaries", "a text", "--summary", long, "--json")
    assert cut.returncode == 0, cut
    assert cut.json()["summaryCut"] == {"codePoints": 300, "kept": 200}
    assert "note: the summary has 300 characters" in cut.stderr
    assert "it is sent cut to its first 200" in cut.stderr
    summary = inbox.wait_event("message", messageId=cut.json()["messageId"])["summary"]
    assert summary == "s" * 200
    in_words = cli("send", "summaries", "another text", "--summary", "t" * 250)
    assert in_words.returncode == 0, in_words
    assert in_words.stdout.startswith("Message submitted to summaries [")
    assert "note: the summary has 250 characters" in in_words.stderr
    over = cli("send", "summaries", "text", "--summary", "s" * 401, "--json")
    assert over.returncode == 1, over
    assert over.json()["status"] == "invalid_message"
    assert over.json()["error"] == (
        "the summary is 401 UTF-16 code units long, 1 over the 400 --summary takes; shorten it"
    )
    astral = cli("send", "summaries", "text", "--summary", "\U0001f600" * 201)  # 402 units
    assert astral.returncode == 1, astral
    assert "402 UTF-16 code units long, 2 over the 400" in astral.stderr
    whole = "w" * 200
    sent = cli("send", "summaries", "text", "--summary", whole, "--json")
    assert sent.returncode == 0, sent
    assert "summaryCut" not in sent.json()
    assert sent.stderr == ""
    assert inbox.wait_event("message", messageId=sent.json()["messageId"])["summary"] == whole
    folded = "a   " * 60  # 240 characters, 119 once its runs of spaces fold: not a cut
    sent = cli("send", "summaries", "more text", "--summary", folded, "--json")
    assert sent.returncode == 0, sent
    assert "summaryCut" not in sent.json()
    summary = inbox.wait_event("message", messageId=sent.json()["messageId"])["summary"]
    assert summary == " ".join(["a"] * 60)


def test_stdin_when_a_file_is_given_is_left_alone(
    inboxes: Inboxes, private_agent_dir: Path, tmp_path: Path
) -> None:
    inbox = inboxes.start("files", busy=0)
    path = tmp_path / "note.txt"
    path.write_text("from the file", encoding="utf-8")
    sent = run_cli(
        private_agent_dir,
        "send",
        "files",
        "--file",
        os.fspath(path),
        "--json",
        stdin="from stdin, ignored",
        cwd=tmp_path,
    )
    assert sent.returncode == 0, sent
    assert inbox.wait_event("message", messageId=sent.json()["messageId"])["text"] == (
        "from the file"
    )
