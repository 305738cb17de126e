"""``pi-cross-session log`` on journals the sessions wrote themselves: two live inboxes, a message
sent to one of them from the command line with ``send --wait``, and ``log --id`` shows both ends
of it, each as that end saw it."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from tests.support.bounds import MUST_HAPPEN_S
from tests.support.processes import Inboxes, Result

Cli = Callable[..., Result]


def logged_until(cli: Cli, done: Callable[[list[dict[str, object]]], bool], *args: str) -> Result:
    """Run ``log --json ARGS`` until what it prints satisfies ``done`` (the receiver journals
    its last step as its host confirms it, which may come a moment after the sender heard)."""
    deadline = time.monotonic() + MUST_HAPPEN_S
    while True:
        result = cli("log", "--json", *args)
        assert result.returncode == 0, result
        if done([json.loads(text) for text in result.stdout.splitlines()]):
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"log never showed it:\n{result}")
        time.sleep(0.05)


def test_log_by_id_shows_both_ends_of_a_message_the_sessions_journaled(
    inboxes: Inboxes, cli: Cli
) -> None:
    reviewer = inboxes.start("reviewer", busy=0.1)
    inboxes.start("bystander")
    sent = cli("send", "--name", "builder", "--wait", "5", "reviewer", "hand-off: branch ready")
    assert sent.returncode == 0, sent
    message_id = sent.message_id()

    def both_ends_delivered(records: list[dict[str, object]]) -> bool:
        ends = {(r["direction"], r["kind"]) for r in records}
        return {("out", "delivered"), ("in", "delivered")} <= ends

    as_json = logged_until(cli, both_ends_delivered, "--id", message_id)
    people = cli("log", "--id", message_id)

    records = [json.loads(text) for text in as_json.stdout.splitlines()]
    by_side = {
        side: [r["kind"] for r in records if r["direction"] == side] for side in ("out", "in")
    }
    assert by_side == {
        "out": ["sent", "submitted", "delivered"],
        "in": ["admitted", "submitted", "delivered"],
    }
    for record in records:
        assert record["messageId"] == message_id
        assert record["from"]["name"] == "builder"
        assert record["to"]["name"] == "reviewer"
        # Both ends keep a journal: neither side is unknown.
        assert record["otherSideKnown"] is True
    assert people.returncode == 0, people
    lines = people.stdout.splitlines()
    assert len(lines) == 6, people
    assert all(message_id in line and " → reviewer [" in line for line in lines)
    assert all(line.split("  ")[1].startswith("builder [") for line in lines)
    assert not any("side unknown" in line for line in lines)
    # Each end's lines in its own order (the sender stamps "sent" with its receipt, when the
    # send ended: the receiver's first steps may come earlier in the merged history).
    senders = [line.split("  ")[2] for line in lines if "(as the sender saw it)" in line]
    receivers = [line.split("  ")[2] for line in lines if "(as the receiver saw it)" in line]
    assert senders == ["sent", "submitted", "delivered"]
    assert receivers == ["admitted", "submitted", "delivered"]
    assert people.stderr == ""
    # The bystander saw nothing of it.
    assert cli("log", "--json", "--session", "bystander").stdout == ""
    reviewer.stop()
