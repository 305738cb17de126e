"""``pi-cross-session log`` through the real command line: every session's journal merged oldest
first, its filters, ``--limit``, ``--json`` as JSON Lines, what it says when there is nothing, and
its usage errors."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pi_cross_session._internal.security.io.journal import Direction, Event, EventKind, Party
from tests.journal.conftest import Journals
from tests.support.processes import Result, cli_env

Cli = Callable[..., Result]

BUILDER = Party("builder", "b1" * 16)
REVIEWER = Party("reviewer", "7e" * 16)
#: A Node session: it keeps no journal, so only what our sessions saw of it shows.
NODE = Party("node-tester", "cd" * 16)
M1 = "11111111-1111-4111-8111-111111111111"
M2 = "22222222-2222-4222-8222-222222222222"
M3 = "33333333-3333-4333-8333-333333333333"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def sent(at: int, mid: str, sender: Party, receiver: Party, **more: Any) -> Event:
    """An event the message's sender wrote."""
    kind = more.pop("kind", EventKind.SENT)
    return Event(at, kind, mid, sender, receiver, direction=Direction.OUT, **more)


def seen(at: int, kind: EventKind, mid: str, receiver: Party, sender: Party, **more: Any) -> Event:
    """An event the message's receiver wrote."""
    return Event(at, kind, mid, receiver, sender, direction=Direction.IN, **more)


def history(journals: Journals, t0: int) -> None:
    """builder → reviewer (delivered), reviewer → builder (refused), builder → node (queued)."""
    journals.write(
        BUILDER.instance_id,
        sent(t0, M1, BUILDER, REVIEWER),
        sent(t0 + 2, M1, BUILDER, REVIEWER, kind=EventKind.SUBMITTED),
        seen(t0 + 10, EventKind.REFUSED, M2, BUILDER, REVIEWER, code="busy"),
        sent(t0 + 20, M3, BUILDER, NODE),
        sent(t0 + 21, M3, BUILDER, NODE, kind=EventKind.QUEUED),
    )
    journals.write(
        REVIEWER.instance_id,
        seen(t0 + 1, EventKind.ADMITTED, M1, REVIEWER, BUILDER),
        seen(t0 + 2, EventKind.SUBMITTED, M1, REVIEWER, BUILDER),
        seen(t0 + 5, EventKind.DELIVERED, M1, REVIEWER, BUILDER),
        sent(t0 + 9, M2, REVIEWER, BUILDER),
        sent(t0 + 11, M2, REVIEWER, BUILDER, kind=EventKind.REFUSED, code="busy"),
    )


def records(result: Result) -> list[dict[str, Any]]:
    """The JSON Lines of a ``log --json``, each line one object."""
    assert result.returncode == 0, result
    return [json.loads(text) for text in result.stdout.splitlines()]


def steps(result: Result) -> list[tuple[str, str, str]]:
    """(message id, kind, the writer's side) of each JSON line."""
    return [(r["messageId"], r["kind"], r["direction"]) for r in records(result)]


def test_every_sessions_journal_is_merged_oldest_first_with_both_ends(
    journals: Journals, cli: Cli
) -> None:
    history(journals, now_ms() - 60_000)

    result = cli("log")

    assert result.returncode == 0, result
    lines = result.stdout.splitlines()
    assert len(lines) == 10, result
    # Merged by time across the two journals: the sender's "sent" first, then the receiver's.
    assert [line.split("  ")[2] for line in lines] == [
        "sent",
        "admitted",
        "submitted",
        "submitted",
        "delivered",
        "sent",
        "refused busy",
        "refused busy",
        "sent",
        "queued",
    ]
    first = lines[0]
    assert "builder [b1b1b1] → reviewer [7e7e7e]" in first
    assert M1 in first
    assert "(as the sender saw it)" in first
    assert "(as the receiver saw it)" in lines[1]
    # The Node session keeps no journal: its side of the message is said to be unknown.
    assert all("[receiver's side unknown: no journal]" in line for line in lines[-2:])
    assert not any("side unknown" in line for line in lines[:-2])
    assert result.stderr == ""


def test_a_session_is_named_by_name_id_or_id_prefix_at_either_end(
    journals: Journals, cli: Cli
) -> None:
    history(journals, now_ms() - 60_000)
    everything = steps(cli("log", "--json"))

    by_name = steps(cli("log", "--json", "--session", "node-tester"))
    assert by_name == [(M3, "sent", "out"), (M3, "queued", "out")]
    assert steps(cli("log", "--json", "--session", NODE.instance_id)) == by_name
    assert steps(cli("log", "--json", "--session", "CDCDCD")) == by_name
    # Fewer than six hex characters name no id (they are taken as a name).
    assert steps(cli("log", "--json", "--session", "cdcdc")) == []
    # Either end: the reviewer's journal and what the builder saw of the reviewer.
    assert steps(cli("log", "--json", "--session", "reviewer")) == [
        step for step in everything if step[0] in (M1, M2)
    ]
    # --peer: the other end. Between builder and node, whichever wrote it.
    assert steps(cli("log", "--json", "--session", "builder", "--peer", "cdcdcdcd")) == by_name
    assert steps(cli("log", "--json", "--session", "reviewer", "--peer", "node-tester")) == []


def test_states_time_and_message_id_filter_the_history(journals: Journals, cli: Cli) -> None:
    t0 = now_ms()
    history(journals, t0 - 2 * 3600_000)  # two hours ago
    journals.write(
        BUILDER.instance_id,
        sent(t0 - 5_000, M1, BUILDER, REVIEWER, kind=EventKind.DELIVERED),
    )

    refusals = steps(cli("log", "--json", "--state", "refused"))
    assert refusals == [(M2, "refused", "in"), (M2, "refused", "out")]
    # Repeated, or separated by commas; a hyphen for an underscore.
    assert steps(cli("log", "--json", "--state", "refused", "--state", "queued")) == [
        *refusals,
        (M3, "queued", "out"),
    ]
    assert steps(cli("log", "--json", "--state", "queued,Refused")) == [
        *refusals,
        (M3, "queued", "out"),
    ]
    assert steps(cli("log", "--json", "--state", "receipt-unknown")) == []
    assert steps(cli("log", "--json", "--since", "1h")) == [(M1, "delivered", "out")]
    assert len(steps(cli("log", "--json", "--since", "3h"))) == 11
    assert steps(cli("log", "--json", "--id", M2)) == [
        (M2, "sent", "out"),
        (M2, "refused", "in"),
        (M2, "refused", "out"),
    ]
    assert steps(cli("log", "--json", "--id", M2, "--state", "sent")) == [(M2, "sent", "out")]


def test_limit_keeps_the_newest_events_and_says_so(journals: Journals, cli: Cli) -> None:
    t0 = now_ms() - 60_000
    ids = [f"{index:08x}-0000-4000-8000-000000000000" for index in range(40)]
    # Two sessions whose events interleave, so the newest five come from both journals.
    journals.write(
        BUILDER.instance_id, *(sent(t0 + 2 * i, ids[i], BUILDER, REVIEWER) for i in range(40))
    )
    journals.write(
        REVIEWER.instance_id,
        *(seen(t0 + 2 * i + 1, EventKind.ADMITTED, ids[i], REVIEWER, BUILDER) for i in range(40)),
    )

    result = cli("log", "--json", "--limit", "5")

    assert [(r["messageId"], r["kind"]) for r in records(result)] == [
        (ids[37], "admitted"),
        (ids[38], "sent"),
        (ids[38], "admitted"),
        (ids[39], "sent"),
        (ids[39], "admitted"),
    ]
    assert "showing the newest 5 of 80 events" in result.stderr
    assert len(records(cli("log", "--json"))) == 80


def test_json_lines_carry_both_ends_and_whether_the_other_side_is_known(
    journals: Journals, cli: Cli
) -> None:
    history(journals, now_ms() - 60_000)

    lines = records(cli("log", "--json", "--id", M3))

    assert len(lines) == 2
    first = lines[0]
    assert first["from"] == {"name": "builder", "instanceId": BUILDER.instance_id}
    assert first["to"] == {"name": "node-tester", "instanceId": NODE.instance_id}
    assert first["otherSideKnown"] is False
    assert first["kind"] == "sent"
    assert "v" not in first
    (delivered,) = records(cli("log", "--json", "--state", "delivered"))
    assert delivered["otherSideKnown"] is True
    assert delivered["session"]["name"] == "reviewer"


def test_kept_text_is_shown_as_the_summary(journals: Journals, cli: Cli) -> None:
    journals.write(
        BUILDER.instance_id,
        sent(now_ms(), M1, BUILDER, REVIEWER, summary="please review", text="the diff is ready"),
        keep_text=True,
    )

    line = cli("log").stdout
    (record,) = records(cli("log", "--json"))

    assert "“please review”" in line
    assert record["summary"] == "please review"
    assert record["text"] == "the diff is ready"


def test_no_journals_says_where_it_looked_and_that_sessions_write_one(
    cli: Cli, private_agent_dir: Path
) -> None:
    result = cli("log")

    assert result.returncode == 0, result
    assert f"No journals in the agent dir {json.dumps(str(private_agent_dir))}" in result.stdout
    assert "PI_CROSS_SESSION_JOURNAL=off" in result.stdout
    # It looked; it made nothing.
    assert list(private_agent_dir.iterdir()) == []
    as_json = cli("log", "--json")
    assert as_json.returncode == 0, as_json
    assert as_json.stdout == ""
    assert "No journals in the agent dir" in as_json.stderr


def test_no_matching_event_says_how_many_journals_it_read(journals: Journals, cli: Cli) -> None:
    history(journals, now_ms() - 60_000)

    result = cli("log", "--session", "nobody")

    assert result.returncode == 0, result
    assert result.stdout.startswith("No events match in the journals of 2 sessions")


def test_an_unknown_state_is_a_usage_error_naming_the_states(journals: Journals, cli: Cli) -> None:
    history(journals, now_ms() - 60_000)

    result = cli("log", "--state", "refused,delievered")

    assert result.returncode == 1, result
    assert result.stdout == ""
    assert "unknown state 'delievered'" in result.stderr
    for word in ("sent", "admitted", "refused", "queued", "submitted", "delivered", "dropped"):
        assert word in result.stderr
    bad_limit = cli("log", "--limit", "0")
    assert bad_limit.returncode == 1, bad_limit
    assert "--limit" in bad_limit.stderr


def test_a_reader_that_goes_away_ends_log_quietly(
    journals: Journals, private_agent_dir: Path
) -> None:
    # More lines than a pipe holds, so that ``log`` is still writing when ``head`` exits.
    t0 = now_ms() - 60_000
    journals.write(
        BUILDER.instance_id,
        *(
            sent(t0 + i, f"{i:08x}-0000-4000-8000-000000000000", BUILDER, REVIEWER)
            for i in range(1_000)
        ),
    )
    log = subprocess.Popen(
        [sys.executable, "-m", "pi_cross_session", "log"],
        env=cli_env(private_agent_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert log.stdout is not None
    assert log.stderr is not None
    first = log.stdout.readline()
    log.stdout.close()  # what ``| head -1`` does once it has its line
    try:
        errors = log.stderr.read()
        code = log.wait(timeout=30)
    finally:
        log.stderr.close()
        if log.poll() is None:
            log.kill()
            log.wait()

    assert b"builder" in first
    assert b"Traceback" not in errors, errors
    assert b"BrokenPipeError" not in errors, errors
    assert code == 0, errors


def test_log_starts_without_the_event_loop_or_the_frames(private_agent_dir: Path) -> None:
    probe = (
        "import sys\n"
        "from pi_cross_session._internal.cli import main\n"
        "code = main(['log'])\n"
        "heavy = ('anyio', 'pydantic', 'pi_cross_session._internal.protocol.frames')\n"
        "print(code, sorted(name for name in heavy if name in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env=cli_env(private_agent_dir),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.splitlines()[-1] == "0 []", done
