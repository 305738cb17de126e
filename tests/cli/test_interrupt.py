"""Ctrl-C during ``send``: what is known by then is said, never lost.

Once the message was written (or its receipt came), an interrupt prints the message id, the last
state known and the ``status`` command that asks later, as text or ``--json``, and exits 130;
before that, it says nothing was sent. Each test runs ``send`` as its own process and signals it
with SIGINT, as a terminal's Ctrl-C does, at a moment the test knows from what happened (the
receiver shows the message queued and the sender remembers its id, or the sender says it waits).
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from functools import partial
from pathlib import Path

import anyio
import pytest

from pi_cross_session._internal.cli import exits
from pi_cross_session._internal.plugin import cli_identity
from pi_cross_session._internal.plugin.cli_identity import ALL_SLOTS, Holder
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.security.io.fs import NotedLock
from tests.support.fake_receiver import SILENT, fake_receiver, ready
from tests.support.file_state import leftovers
from tests.support.processes import (
    CLI,
    COMMAND_TIMEOUT_S,
    HOLD_S,
    Inboxes,
    InboxProcess,
    Result,
    WatchedProcess,
    cli_env,
)
from tests.support.socket_peers import make_registration, publish
from tests.support.waiting import eventually

Cli = Callable[..., Result]


def start_send(agent_dir: Path, cwd: Path, *args: str) -> WatchedProcess:
    """``pi-cross-session send ARGS`` as a process of its own, to be signalled."""
    return WatchedProcess([*CLI, "send", *args], env=cli_env(agent_dir), label="send", cwd=cwd)


def interrupt(sender: WatchedProcess) -> int:
    """Ctrl-C, as a terminal sends it; the exit status once the process ended by itself."""
    sender.process.send_signal(signal.SIGINT)
    code = sender.process.wait(timeout=COMMAND_TIMEOUT_S)
    sender.close()  # reaps and joins the readers: every line it printed is in
    return code


def occupied(inboxes: Inboxes, cli: Cli, name: str) -> InboxProcess:
    """An inbox busy with a first message for the whole test: the next one stays queued."""
    inbox = inboxes.start(name, busy=HOLD_S)
    first = cli("send", name, "keeps it busy")
    assert first.returncode == 0, first
    inbox.wait_event("message", messageId=first.message_id())
    return inbox


def queued_and_received(inbox: InboxProcess, locations: Locations) -> str:
    """The id of the message the receiver shows queued, once the sender has its receipt (it
    remembers the id as soon as the receipt came, before following the message)."""
    message_id: str = inbox.wait_event("state", state="queued")["messageId"]
    anyio.run(partial(eventually, lambda: cli_identity.senders_of(locations, message_id)))
    return message_id


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_ctrl_c_while_following_prints_the_message_id_and_how_to_ask(
    inboxes: Inboxes,
    cli: Cli,
    locations: Locations,
    private_agent_dir: Path,
    tmp_path: Path,
    as_json: bool,
) -> None:
    inbox = occupied(inboxes, cli, "slow")
    ref = inbox.wait_event("ready")["ref"]
    flags = ("--json",) if as_json else ()
    sender = start_send(private_agent_dir, tmp_path, "slow", "after you", "--wait", "30", *flags)
    try:
        message_id = queued_and_received(inbox, locations)
        code = interrupt(sender)
    finally:
        sender.close()
    assert code == exits.EXIT_INTERRUPTED, sender.output()
    out = "\n".join(sender.lines)
    ask = f"pi-cross-session status 'slow [{ref}]' {message_id}"
    if as_json:
        report = json.loads(out)
        assert report["interrupted"] is True
        assert report["messageId"] == message_id
        assert (report["receipt"], report["state"]) == ("queued", "queued")
        assert report["followed"] == ["queued"]
        assert report["messageWritten"] is True
        assert report["next"] == f"ask what became of it with: {ask}"
    else:
        assert out.startswith(f"Interrupted (Ctrl-C) after the message was sent to slow [{ref}]")
        assert "last known state queued — still in that session's queue" in out
        assert "Receipt: queued; followed " in out
        assert f"Ask what became of it with: {ask}" in out
        assert f"messageId={message_id}" in out
    # The identity it held is released, its registration removed; the message stays queued.
    keep = [inbox.wait_event("ready")["instanceId"]]
    assert leftovers(locations, keep=keep) == []
    asked = cli("status", f"slow [{ref}]", message_id, "--json")
    assert asked.returncode == exits.EXIT_QUEUED, asked
    assert asked.json()["state"] == "queued"


def test_ctrl_c_before_anything_was_sent_says_so(
    inboxes: Inboxes, locations: Locations, private_agent_dir: Path, tmp_path: Path
) -> None:
    """Interrupted while it waits for a sender identity (all four held here): nothing was
    written, and it says so rather than printing nothing."""
    inbox = inboxes.start("patient", busy=0)
    locks = []
    state = Path(cli_identity.state_dir(locations))
    state.mkdir(mode=0o700, exist_ok=True)
    for slot in ALL_SLOTS:
        lock = NotedLock(str(state / cli_identity.slot_files(slot).lock))
        assert lock.try_acquire()
        lock.write_note(Holder(None, "holding it for the test", None).to_bytes())
        locks.append(lock)
    try:
        sender = start_send(private_agent_dir, tmp_path, "patient", "never sent", "--json")
        try:
            sender.wait_line(r"waiting \(up to", stderr=True)
            code = interrupt(sender)
        finally:
            sender.close()
    finally:
        for lock in locks:
            lock.release()
    assert code == exits.EXIT_INTERRUPTED, sender.output()
    assert sender.lines == []  # no report: there is no message to report on
    assert sender.err_lines[-1] == "pi-cross-session: interrupted (Ctrl-C); nothing was sent"
    assert not [e for e in inbox.events() if e["event"] == "message"]


@pytest.mark.anyio
async def test_ctrl_c_while_the_receipt_is_awaited_gives_the_id_to_ask_about(
    locations: Locations, private_agent_dir: Path, tmp_path: Path
) -> None:
    """The message was written and no receipt came yet: it may or may not have arrived, and the
    id to ask about is printed (the exchange is cut, not left to its 5 s deadline)."""
    registration = make_registration(locations, "mute")
    async with fake_receiver(
        locations, [ready(registration), SILENT], registration=registration
    ) as fake:
        publish(locations, registration)
        sender = start_send(private_agent_dir, tmp_path, "mute", "hello?", "--json")
        try:
            await fake.wait_for(lambda: fake.count("message") == 1)
            code = await anyio.to_thread.run_sync(interrupt, sender)
        finally:
            sender.close()
        [message] = [r.body for r in fake.received if r.kind == "message"]
    assert code == exits.EXIT_INTERRUPTED, sender.output()
    report = json.loads("\n".join(sender.lines))
    assert report["interrupted"] is True
    assert report["messageId"] == message["messageId"]
    assert (report["status"], report["receipt"], report["messageWritten"]) == (
        "cancelled",
        None,
        True,
    )
    assert report["state"] == "receipt_unknown"
    expected = f"pi-cross-session status 'mute [{registration.ref}]' {message['messageId']}"
    assert report["next"] == f"ask what became of it with: {expected}"
