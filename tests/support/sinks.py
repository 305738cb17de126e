"""Every sink of :mod:`pi_cross_session._internal.plugin.render`, fed one set of peer-controlled
strings.

:func:`every_sink` builds the objects a peer's strings reach (its registration and public view, a
delivery, a status row, a send report, peer-check texts, a goal) from one :class:`PeerStrings`, and
returns what each sink shows, tagged with the rule it must obey:

* ``line`` — one line, no unsafe character at all;
* ``text`` — lines of ours: no unsafe character but LF;
* ``block`` — text escaped as a block: no unsafe character but LF and tab;
* ``json`` — JSON text: no unsafe character but LF, and it parses back;
* ``conversation`` — a framed peer message: see :func:`check_conversation`;
* ``inbox`` — the CLI inbox's message: the first line ours, the rest indented peer text.

:func:`check_sink` applies the rule. The unit tests call this with each attack class in every field;
the hostile fuzzer calls it with hypothesis-drawn text.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Final

from pi_cross_session._internal.plugin.render import (
    host_commands,
    host_status,
    host_tools,
    listings,
    peer_text,
    receiving,
    sending,
)
from pi_cross_session._internal.plugin.reports import GoalView, PeerChecks, SendReport
from pi_cross_session._internal.protocol import sanitize
from pi_cross_session._internal.protocol.registration import (
    GitInfo,
    PublicPeer,
    Registration,
    parse_registration,
)
from pi_cross_session._internal.security.admission import (
    Delivery,
    Phase,
    ResumeOutcome,
    Row,
    Snapshot,
)
from pi_cross_session._internal.security.auth import AuthDiagnostics
from pi_cross_session._internal.security.goals import GoalStatus, Scope
from tests.support.hostile_text import unsafe_in

INSTANCE_ID: Final = "0123456789abcdef0123456789abcdef"
HEAD: Final = "2f1e3d4c" + "0" * 32
AGENT_DIR_SOCKET: Final = "/tmp/pi-xs-test/s/" + INSTANCE_ID + ".sock"


@dataclass(frozen=True)
class PeerStrings:
    """One value for every string a peer (or, for ``objective``, the local user) controls.

    ``name`` must be 1 to 200 code points and ``session_id`` 1 to 512 UTF-16 units, as a
    registration requires; all must be well-formed (the wire and the file reader refuse lone
    surrogates before anything is shown).
    """

    name: str = "peer"
    session_id: str = "s-1"
    cwd: str = "/work"
    worktree: str = "/work"
    branch: str | None = "main"
    text: str = "hello"
    summary: str = "hello"
    status: str = "busy"
    error: str = "refused"
    next: str = "retry"
    diagnostic: str = "a diagnostic"
    message_id: str = "m-1"
    objective: str = "ship it"


def hostile_registration(strings: PeerStrings) -> Registration:
    """A registration as a hostile peer could write it (validated like any the reader accepts)."""
    body = {
        "version": 2,
        "protocol": 1,
        "id": strings.session_id,
        "instanceId": INSTANCE_ID,
        "name": strings.name,
        "cwd": strings.cwd,
        "pid": os.getpid(),
        "startedAt": 1,
        "updatedAt": 1,
        "status": "idle",
        "inbound": "accept",
        "socketPath": AGENT_DIR_SOCKET,
        "token": "ab" * 32,
    }
    return parse_registration(
        json.dumps(body), file_stem=INSTANCE_ID, expected_socket_path=AGENT_DIR_SOCKET
    )


def _report(strings: PeerStrings, target: PublicPeer, *, ok: bool) -> SendReport:
    # Built raw, as if a path upstream had forgotten to escape: render must hold on its own.
    return SendReport(
        ok=ok,
        status=strings.status,
        message_id=strings.message_id,
        target=target,
        state="receipt_unknown" if not ok else None,
        next=strings.next,
        detail=strings.error,
        message_written=True,
        delivery=strings.status if ok else None,
    )


def every_sink(strings: PeerStrings) -> list[tuple[str, str, str]]:
    """``(sink, rule, output)`` for every render sink a peer string can reach."""
    reg = hostile_registration(strings)
    git = GitInfo(worktree=strings.worktree, branch=strings.branch, head=HEAD)
    peer = PublicPeer.from_registration(reg, git=git)
    delivery = Delivery(strings.message_id, reg, strings.text, strings.summary, 1, "g1")
    row = Row(
        sender_instance_id=INSTANCE_ID,
        sender_name=strings.name,
        message_id=strings.message_id,
        summary=strings.summary,
        state=strings.status,
        admitted_at_ms=1,
        updated_at_ms=2,
        diagnostic=strings.diagnostic,
    )
    snapshot = Snapshot(
        phase=Phase.IDLE,
        stopped=True,
        latch_reason=strings.diagnostic,
        shut_down=False,
        remaining_budget=1,
        total_budget=256,
        queued=0,
        max_queued=50,
        rows=(row,),
        evicted_rows=0,
        refusals={strings.status: 1},
        admitted=1,
    )
    goal = GoalStatus("g1", strings.objective, Scope(strings.session_id, INSTANCE_ID, strings.cwd))
    checks = PeerChecks(
        source="SO_PEERCRED",
        auth=AuthDiagnostics(refusals={strings.status: 1}, recent=(strings.error,)),
        foreign_uid_closed=0,
        credentials_unreadable=0,
        unverified=0,
    )
    failed, refused = _report(strings, peer, ok=False), _report(strings, peer, ok=True)
    error = RuntimeError(strings.error)
    sinks: list[tuple[str, str, str]] = [
        ("message_preview", "line", peer_text.message_preview(delivery)),
        ("address", "line", listings.address(peer)),
        ("runtime_ids", "line", listings.runtime_ids([peer]) or ""),
        ("send_result (failed)", "line", sending.send_result(failed)),
        ("send_result (ok)", "line", sending.send_result(refused)),
        ("status_query_result", "line", sending.status_query_result(refused)),
        ("delivery_text", "line", sending.delivery_text(strings.status)),
        ("goal_refused", "line", host_tools.goal_refused("bind", strings.status, strings.error)),
        ("tool_failure", "line", host_tools.tool_failure("list_pi", error)),
        ("hook_failed", "line", host_status.hook_failed("a hook", error)),
        ("command_failed", "line", host_status.command_failed("peers", error)),
        ("inbox_start_failed", "line", host_status.inbox_start_failed(error)),
        ("registration_lost", "line", host_status.registration_lost(error)),
        ("unreadable_config", "line", host_commands.unreadable_config(strings.cwd, strings.error)),
        (
            "invalid_inbound_option",
            "line",
            host_commands.invalid_inbound_option("x", strings.status),
        ),
        (
            "inbound_changed",
            "line",
            host_commands.inbound_changed("accept", saved=False, error=strings.error),
        ),
        ("resume_text", "line", receiving.resume_text(ResumeOutcome(False, 0, strings.diagnostic))),
        ("inbox_row", "line", receiving.inbox_row(row)),
        ("listing", "text", listings.listing(peer, [peer])),
        ("status_text", "text", receiving.status_text(snapshot, me=peer)),
        ("goal_lines", "text", "\n".join(host_status.goal_lines(GoalView(goal, None, 0, 0)))),
        ("peer_check_lines", "text", "\n".join(host_status.peer_check_lines(checks))),
        (
            "host_status_text",
            "text",
            host_status.host_status_text(
                snapshot,
                me=peer,
                inbound="accept",
                inbound_source="env",
                warnings=(strings.error,),
                problems=(strings.diagnostic,),
            ),
        ),
        ("status_json", "json", receiving.status_json(snapshot)),
        (
            "status_command_json",
            "json",
            host_status.status_command_json(receiving.status_data(snapshot)),
        ),
        ("goal_view_text", "json", host_tools.goal_view_text(goal.as_dict())),
        ("send_details", "json", sanitize.dumps(sending.send_details(failed))),
        ("send_details strings", "block", "\n".join(_strings(sending.send_details(failed)))),
        ("peer_message", "conversation", peer_text.peer_message(delivery)),
        ("peer_message (goal)", "conversation", peer_text.peer_message(delivery, goal)),
        ("inbox_message", "inbox", receiving.inbox_message(delivery)),
    ]
    return sinks


def _strings(value: object) -> list[str]:
    # The error text of a send's details keeps our line feeds: judged as text, not a line.
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for key, item in value.items() if key != "target" for s in _strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


def check_conversation(content: str, text: str) -> None:
    """A framed peer message: nothing unsafe but LF and tab; the fence holds exactly the escaped
    text; every line outside the fence is one of ours."""
    assert unsafe_in(content, allowed="\n\t") == [], content
    body = peer_text.fenced_text(content)
    assert body == sanitize.block(text)
    header, begin, *_ = content.split("\n")
    assert header.startswith("Message from another session, ")
    assert begin.startswith("----- peer text ")
    assert begin.endswith(" begins -----")
    after = content[content.index(begin) + len(begin) + 1 + len(body) + 1 :]
    end, notice = after.split("\n", 1)
    assert end == begin.replace(" begins ", " ends ")
    assert notice.startswith("(The text between the two marker lines above")
    assert "\n" not in notice


def check_sink(sink: str, rule: str, output: str, strings: PeerStrings) -> None:
    """Apply ``rule`` to what ``sink`` showed for ``strings``."""
    if rule == "line":
        assert unsafe_in(output) == [], (sink, output)
        assert "\n" not in output, (sink, output)
    elif rule == "text":
        assert unsafe_in(output, allowed="\n") == [], (sink, output)
    elif rule == "block":
        assert unsafe_in(output, allowed="\n\t") == [], (sink, output)
    elif rule == "json":
        assert unsafe_in(output, allowed="\n") == [], (sink, output)
        json.loads(output)
    elif rule == "conversation":
        check_conversation(output, strings.text)
    elif rule == "inbox":
        assert unsafe_in(output, allowed="\n\t") == [], (sink, output)
        first, *rest = output.split("\n")
        assert first.startswith("message ")
        assert all(line.startswith("    ") for line in rest), (sink, output)
    else:
        raise AssertionError(f"no rule {rule!r}")


def assert_every_sink_safe(strings: PeerStrings) -> None:
    """Every sink shows ``strings`` by its rule."""
    for sink, rule, output in every_sink(strings):
        check_sink(sink, rule, output, strings)


__all__ = ["PeerStrings", "assert_every_sink_safe", "check_sink", "every_sink"]
