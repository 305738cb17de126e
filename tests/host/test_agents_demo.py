"""``make demo``: two real pi-python sessions in two processes go through the four acts."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.processes import run_demo

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "demo" / "agents_demo.py"


@pytest.mark.slow
def test_the_agents_demo_passes_every_act(tmp_path: Path) -> None:
    output = run_demo(
        DEMO, tmp_path / "demo-tmp", timeout_s=600, unset=("PI_CROSS_SESSION_INBOUND",)
    )
    for line in (
        "✓ beta's turn starts from alpha's peer message",
        "✓ beta's model reads it framed as peer text",
        "✓ a turn starts on alpha from the answer",
        '"status": "queued"',
        "✓ the queued message starts a new turn only after beta's turn ended",
        "queued message → dropped_cancelled",
        '"status": "stopped"',
        "Inbox reopened",
        "✓ a later send is submitted",
        # Act 4: a goal takes beta's scoped reports past alpha's spent budget, until completed.
        "budgets left: alpha 0 of 6, beta 3 of 8",
        "✓ alpha's user turn starts the goal (peer_goal start)",
        "✓ and binds beta by its runtime id (peer_goal bind); alpha's status shows it",
        "✓ all 6 scoped reports are submitted, though alpha's budget is 0",
        "✓ beta's unscoped note is refused budget_exhausted by alpha (the receiver)",
        "✓ beta's budget is refunded for each scoped send",
        "✓ alpha admitted the 6 scoped reports and its budget stayed at 0",
        "✓ alpha's user completes the goal (peer_goal complete)",
        "✓ beta's next scoped send is refused goal_not_authorized by alpha",
        "Refused: budget_exhausted 1, goal_not_authorized 1",
        "registrations left: none; sockets left: none",
        "demo finished: all expectations held",
    ):
        assert line in output, f"missing {line!r} in:\n{output}"
    assert "✗" not in output
    receipts = {
        line.split("{")[0].strip(): line
        for line in output.splitlines()
        if " · beta budget " in line
    }
    for step in range(1, 7):
        assert '"status": "submitted"' in receipts[f"step {step}/6 [goal]"], receipts
    assert receipts["step 3/6 [goal]"].endswith("· beta budget 3"), receipts
    assert receipts["step 6/6 [goal]"].endswith("· beta budget 2"), receipts
    assert '"status": "budget_exhausted"' in receipts["a side note [no goal]"], receipts
    assert '"status": "goal_not_authorized"' in receipts["after complete [goal]"], receipts
    assert receipts["after complete [goal]"].endswith("· beta budget 1"), receipts
