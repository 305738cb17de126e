"""``send --wait S`` tells the truth: it follows a queued message until the queue decides its fate,
reports the last state actually known, shows progress on a terminal only, and exits as ``status``
does (0 delivered, 5 submitted, 6 queued, 2 expired or dropped, 3 unknown).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

import anyio
import pytest

from pi_cross_session._internal.protocol.capabilities import CANCEL_SAFE_QUEUE
from pi_cross_session._internal.protocol.io.endpoint import EndpointConfig
from pi_cross_session._internal.protocol.paths import Locations
from tests.support.bounds import MUST_HAPPEN_S
from tests.support.processes import (
    COMMAND_TIMEOUT_S,
    HOLD_S,
    SHORT_QUEUE_TTL_CLI,
    Inboxes,
    InboxProcess,
    Result,
    run_cli,
    run_with_tty_stderr,
)
from tests.support.socket_peers import running_peer

Cli = Callable[..., Result]
T = TypeVar("T")


def occupy(inboxes: Inboxes, cli: Cli, name: str, busy: float = HOLD_S) -> InboxProcess:
    """Start an inbox whose first message keeps it busy for ``busy`` seconds (by default until
    the test ends the turn), and send that."""
    inbox = inboxes.start(name, busy=busy)
    first = cli("send", name, "keeps it busy")
    assert first.returncode == 0, first
    inbox.wait_event("message", messageId=first.message_id())
    return inbox


def while_queued(inbox: InboxProcess, run: Callable[[], T]) -> T:
    """Run ``run`` (a command that sends to the busy ``inbox`` and follows its message) in a
    thread; once the inbox shows that message queued, end the inbox's turn so the queue moves on.
    The queue moves when the test says, not after a number of seconds a loaded machine can beat."""
    results: list[T] = []
    worker = threading.Thread(target=lambda: results.append(run()))
    worker.start()
    try:
        inbox.wait_event("state", state="queued", timeout=MUST_HAPPEN_S)
    finally:
        inbox.end_turn()
        worker.join(timeout=2 * COMMAND_TIMEOUT_S)
    [result] = results
    return result


def test_a_queued_message_is_followed_past_s_until_it_leaves_the_queue(
    inboxes: Inboxes, cli: Cli
) -> None:
    """--wait 1 to a message that stays queued past 1 s: the wait does not end at 1 s with a
    guess, it follows the message out of the queue and reports what the receiver said last."""
    inbox = occupy(inboxes, cli, "slow")
    sent = while_queued(inbox, partial(cli, "send", "slow", "after you", "--wait", "1", "--json"))
    assert sent.returncode == 0, sent  # 0: delivered
    report = sent.json()
    # One vocabulary: what the receiver answered at admission, and the latest state, under
    # names that cannot be mistaken; "status" keeps its meaning (the receipt), and "lastState"
    # its (the latest state).
    assert (report["receipt"], report["state"]) == ("queued", "delivered")
    assert (report["status"], report["lastState"]) == ("queued", "delivered")
    assert report["followed"][0] == "queued"
    assert report["followed"][-1] == "delivered"
    assert set(report["followed"]) <= {"queued", "submitted", "delivered"}
    assert report["deliveryConfirmable"] is True
    assert "error" not in report


def test_text_report_of_a_followed_message(inboxes: Inboxes, cli: Cli) -> None:
    inbox = occupy(inboxes, cli, "wordy")
    sent = while_queued(inbox, partial(cli, "send", "wordy", "in words, please", "--wait", "1"))
    assert sent.returncode == 0, sent
    # The latest state first, then how it came to be known (the receipt, the states seen).
    assert sent.stdout.startswith("Message to wordy [")
    assert "]: delivered — the receiving session confirmed it entered its conversation" in (
        sent.stdout
    )
    assert "Receipt: queued; followed " in sent.stdout
    assert "queued → " in sent.stdout
    assert "not yet confirmed" not in sent.stdout
    assert sent.stderr == ""  # progress is for terminals only


@pytest.mark.slow
def test_a_message_that_expires_in_the_queue_is_reported_expired(
    inboxes: Inboxes, cli: Cli, private_agent_dir: Path, tmp_path: Path
) -> None:
    """The queue's TTL runs out while the receiver is still busy: the wait, bounded by the TTL
    plus a margin, sees the expiry and says so (exit 2), never "submitted, not confirmed".

    Both processes run with a TTL of seconds (``SHORT_QUEUE_TTL_CLI``): the rule is the same at
    any TTL, and the 30 s figure is pinned by ``tests/receiver/test_limits.py``."""
    inbox = inboxes.start("stuck", busy=HOLD_S, command=SHORT_QUEUE_TTL_CLI)
    first = cli("send", "stuck", "keeps it busy")
    assert first.returncode == 0, first
    inbox.wait_event("message", messageId=first.message_id())
    sent = run_cli(
        private_agent_dir,
        "send",
        "stuck",
        "too late",
        "--wait",
        "2",
        "--json",
        cwd=tmp_path,
        timeout=2 * COMMAND_TIMEOUT_S,
        command=SHORT_QUEUE_TTL_CLI,
    )
    assert sent.returncode == 2, sent
    report = sent.json()
    assert (report["status"], report["lastState"]) == ("queued", "expired")
    assert (report["receipt"], report["state"]) == ("queued", "expired")
    assert report["followed"] == ["queued", "expired"]
    asked = cli("status", "stuck", report["messageId"])
    assert asked.returncode == 2, asked
    assert ": expired — it waited too long in the receiver's queue" in asked.stdout


def test_a_terminal_sees_each_state_change_while_waiting(
    inboxes: Inboxes, cli: Cli, private_agent_dir: Path, tmp_path: Path
) -> None:
    inbox = occupy(inboxes, cli, "watched")
    code, out, terminal = while_queued(
        inbox,
        partial(
            run_with_tty_stderr,
            private_agent_dir,
            "send",
            "watched",
            "show me",
            "--wait",
            "1",
            cwd=tmp_path,
        ),
    )
    assert code == 0, (out, terminal)
    assert "pi-cross-session: queued after 0.0 s" in terminal
    assert "pi-cross-session: delivered after " in terminal
    assert terminal.index("queued after") < terminal.index("delivered after")
    assert out.startswith("Message to watched [")  # the report itself stays on stdout
    assert "]: delivered — " in out


@pytest.mark.anyio
async def test_a_receiver_without_delivery_receipts_ends_the_wait_at_submitted(
    locations: Locations, private_agent_dir: Path, tmp_path: Path
) -> None:
    """An older receiver never says ``delivered``: the wait ends as soon as it says
    ``submitted`` (exit 5), and ``status`` says the same, noting it cannot confirm delivery."""
    older = EndpointConfig(capabilities=(CANCEL_SAFE_QUEUE,))
    async with running_peer(locations, "legacy", config=older) as legacy:
        run = partial(run_cli, private_agent_dir, cwd=tmp_path)
        sent = await anyio.to_thread.run_sync(run, "send", "legacy", "hi", "--wait", "30", "--json")
        assert sent.returncode == 5, sent
        report = sent.json()
        assert (report["lastState"], report["deliveryConfirmable"]) == ("submitted", False)
        assert report["followedSeconds"] < 30  # ended at the first answer, not at S
        asked = await anyio.to_thread.run_sync(run, "status", "legacy", report["messageId"])
        assert asked.returncode == 5, asked
        assert ": submitted — " in asked.stdout
        assert "that session cannot confirm delivery" in asked.stdout
        assert len(legacy.inbox.entries) == 1  # asked about, never resent
