"""What a person and a model are told when a send to another machine does not go through
(docs/remote.md, "Honest receipts, per failure"): each ending names its real cause, over real
gateways and a real nats-server.

* the remote *machine* refuses (its gateway runs with remote inbound off): said of the machine,
  never of the session;
* this machine's gateway is not connected to NATS: "not sent", a local failure;
* the remote machine's gateway takes nothing from this machine (it has not trusted it): at once,
  a refusal that says so and how to fix it;
* ``peers --remote`` calls a quiet, live gateway live.
"""

from __future__ import annotations

import io
import json
import time

import anyio
import pytest

from pi_cross_session._internal import api
from pi_cross_session._internal.cli import exits, remote_peers
from pi_cross_session._internal.cli.console import Console
from pi_cross_session._internal.plugin.render import sending
from pi_cross_session._internal.plugin.reports import SendReport
from pi_cross_session._internal.protocol.remote.settings import REMOTE_SNAPSHOT_REFRESH_S
from tests.support.remote import Fleet, Machine
from tests.support.waiting import eventually

#: A send that ends at once takes a command-line start and two local legs; well under this.
AT_ONCE_S = 2.0


def _received(inbox: object, message_id: str) -> int:
    return sum(
        1
        for e in inbox.events()  # type: ignore[attr-defined]
        if e.get("event") == "message" and e.get("messageId") == message_id
    )


def _tool_text(machine: Machine, target: str, text: str) -> tuple[SendReport, str]:
    """A send as the library (and the tools) make it, and the tool result's text."""
    report = anyio.run(lambda: api.send(target, text, agent_dir=str(machine.agent_dir)))
    return report, sending.send_result(report)


def test_a_machine_with_remote_inbound_off_is_named_as_refusing_not_the_session(
    fleet: Fleet,
) -> None:
    fleet.start_server()
    laptop, buildbox = fleet.pair("laptop", "buildbox")
    bob = buildbox.inbox("bob")
    laptop.start_gateway()
    buildbox.start_gateway("--inbound", "off")
    laptop.wait_peer("bob@buildbox")

    sent = laptop.cli("send", "bob@buildbox", "knock knock")
    assert sent.returncode == exits.EXIT_REFUSED, sent
    said = sent.stderr
    assert "remote_inbound_off" in said, sent
    assert "buildbox does not take messages from other machines" in said, sent
    assert "remote inbound off" in said, sent
    assert "pi-cross-session remote inbound on" in said, sent
    assert "This session does not accept" not in said, sent
    assert "refused by bob@buildbox" not in said, sent

    as_json = laptop.cli("send", "bob@buildbox", "knock again", "--json")
    assert as_json.returncode == exits.EXIT_REFUSED, as_json
    report = as_json.json()
    assert (report["status"], report["state"]) == ("remote_inbound_off", "refused"), report
    assert "remote inbound on" in report["next"], report

    tool, text = _tool_text(laptop, "bob@buildbox", "and from a tool")
    assert (tool.status, tool.ok) == ("remote_inbound_off", False)
    assert "buildbox does not take messages from other machines" in text, text
    assert "remote inbound on" in text, text
    assert "This session does not accept" not in text, text
    for message_id in (report["messageId"], tool.message_id):
        assert _received(bob, str(message_id)) == 0


def test_a_send_while_this_machines_gateway_has_no_nats_connection_is_not_sent_and_local(
    fleet: Fleet,
) -> None:
    server = fleet.start_server()
    laptop, buildbox = fleet.pair("laptop", "buildbox")
    bob = buildbox.inbox("bob")
    gateway = laptop.start_gateway()
    buildbox.start_gateway()
    laptop.wait_peer("bob@buildbox")
    server.stop()
    gateway.wait_line("NATS connection lost", stderr=True)

    sent = laptop.cli("send", "bob@buildbox", "while NATS is down")
    assert sent.returncode == exits.EXIT_LOCAL, sent
    assert "Message not sent to bob@buildbox" in sent.stderr, sent
    assert "not connected to NATS" in sent.stderr, sent
    assert "refused by" not in sent.stderr, sent
    as_json = laptop.cli("send", "bob@buildbox", "still down", "--json")
    assert as_json.returncode == exits.EXIT_LOCAL, as_json
    assert (as_json.json()["status"], as_json.json()["state"]) == ("unreachable", "refused")

    tool, text = _tool_text(laptop, "bob@buildbox", "from a tool")
    assert tool.status == "unreachable"
    assert text.startswith("Message not sent to bob@buildbox"), text
    assert "not connected to NATS" in text, text
    for message_id in (as_json.json()["messageId"], tool.message_id):
        assert _received(bob, str(message_id)) == 0


def test_a_send_to_a_machine_that_has_not_trusted_this_one_says_so_at_once(
    fleet: Fleet,
) -> None:
    fleet.start_server()
    laptop = fleet.machine("laptop")
    buildbox = fleet.machine("buildbox")
    laptop.trust(buildbox)  # one direction only: buildbox never trusted laptop
    bob = buildbox.inbox("bob")
    gateway = laptop.start_gateway()
    buildbox.start_gateway()
    laptop.wait_peer("bob@buildbox")

    started = time.monotonic()
    sent = laptop.cli("send", "bob@buildbox", "do you know me?")
    took = time.monotonic() - started
    assert took < AT_ONCE_S, (took, sent)
    assert sent.returncode == exits.EXIT_REFUSED, sent
    said = sent.stderr
    assert "not_listening" in said, sent
    assert "buildbox has not trusted this machine" in said, sent
    assert "pi-cross-session remote trust" in said, sent
    assert "pi-cross-session remote show" in said, sent
    assert "could not be reached" not in said, sent

    as_json = laptop.cli("send", "bob@buildbox", "still a stranger?", "--json")
    report = as_json.json()
    assert (report["status"], report["state"]) == ("not_listening", "refused"), report
    assert "remote trust" in report["next"], report

    tool, text = _tool_text(laptop, "bob@buildbox", "from a tool")
    assert tool.status == "not_listening"
    assert "buildbox has not trusted this machine" in text, text
    assert "remote trust" in text, text
    for message_id in (report["messageId"], tool.message_id):
        assert _received(bob, str(message_id)) == 0
    # The gateway says it too, once, for whoever watches it rather than the sender.
    said = [line for line in gateway.err_lines if "a send to buildbox was not delivered" in line]
    assert len(said) == 1, gateway.output()
    assert "remote trust" in said[0], said


def test_peers_remote_calls_a_quiet_live_gateway_live(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing changes for longer than a short staleness rule: the snapshot is rewritten anyway,
    so ``peers --remote`` never says "no gateway" about a live one."""
    fleet.start_server()
    laptop, buildbox = fleet.pair("laptop", "buildbox")
    buildbox.inbox("bob")
    laptop.start_gateway()
    buildbox.start_gateway()
    laptop.wait_peer("bob@buildbox")
    # The reader's rule, shortened: a snapshot older than this is a dead gateway's. It must
    # still hold a refresh (every REMOTE_SNAPSHOT_REFRESH_S) and a late write.
    stale_after_s = REMOTE_SNAPSHOT_REFRESH_S + 3.0
    monkeypatch.setattr(remote_peers, "REMOTE_RECORD_TTL_S", stale_after_s)

    def live() -> bool:
        out = io.StringIO()
        remote_peers.show_remote(laptop.locations, Console(out=out), as_json=True)
        shown = json.loads(out.getvalue())
        return shown["gateway"] is True and any(p.get("name") == "bob" for p in shown["peers"])

    anyio.run(lambda: eventually(live))  # the first snapshot that lists bob
    # Quiet for over twice the rule: a snapshot written only on change would go stale.
    quiet_until = time.monotonic() + 2 * stale_after_s + 1
    while time.monotonic() < quiet_until:
        assert live(), "peers --remote called the live gateway gone"
        time.sleep(0.5)
    shown = laptop.cli("peers", "--remote")
    assert "bob on buildbox" in shown.stdout, shown
