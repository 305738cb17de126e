"""``remote status`` for people (cli/words.py): what the machines table says."""

from __future__ import annotations

from typing import Any

from pi_cross_session._internal.cli import words

NOW_MS = 1_800_000_000_000


def status(**machine: Any) -> dict[str, Any]:
    return {
        "setUp": True,
        "extraInstalled": True,
        "gateway": {"state": "running", "pid": 4242, "startedAt": NOW_MS - 60_000},
        "server": {"url": "nats://127.0.0.1:4222", "connected": True},
        "machine": "buildbox",
        "account": "pi-xs",
        "inbound": "on",
        "credentials": {"installed": True, "name": "buildbox"},
        "trusted": ["laptop"],
        "machines": [
            {
                "machine": "laptop",
                "sessions": 2,
                "proxies": 2,
                "lastRecordAgoS": 3.0,
                "skewMs": 40,
                **machine,
            }
        ],
    }


def test_a_machine_whose_requests_are_paused_says_so_and_for_how_long() -> None:
    text = words.remote_status(status(pausedForS=25.4), now_ms=NOW_MS)
    (row,) = [line for line in text.splitlines() if line.startswith("laptop")]
    assert "not listened to for 25 s more (false MACs or signatures: see the errors)" in row
    quiet = words.remote_status(status(pausedForS=None), now_ms=NOW_MS)
    assert "not listened to" not in quiet
