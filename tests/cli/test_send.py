"""``pi-cross-session send``: every exit code, the ``--json`` report, and nothing left behind."""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path

import anyio
import pytest

from pi_cross_session._internal.plugin import cli_identity, outbound
from pi_cross_session._internal.plugin.cli_identity import Holder
from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.io import discovery
from pi_cross_session._internal.protocol.io.exchange import Exchanger
from pi_cross_session._internal.protocol.limits import RATE_CAPACITY
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.security.io import fs
from pi_cross_session._internal.security.io.fs import NotedLock
from tests.support.bounds import MUST_HAPPEN_S
from tests.support.clocks import FakeClock
from tests.support.fake_receiver import SILENT, fake_receiver, ready
from tests.support.file_state import exists, leftovers
from tests.support.processes import CLI, HOLD_S, Inboxes, Result, cli_env, run_cli
from tests.support.socket_peers import make_registration, publish
from tests.support.wire_session import running_receiver

Cli = Callable[..., Result]

#: How many sends of a burst may find no receiver on a loaded machine (each is tried again).
NOT_REACHED_RETRIES = 20
REPORT_KEYS = {
    "ok",
    "status",
    "receipt",
    "state",
    "retryable",
    "next",
    "messageId",
    "target",
    "messageWritten",
}


def slot_lock_path(locations: Locations, slot: int) -> Path:
    state = Path(cli_identity.state_dir(locations))
    state.mkdir(mode=0o700, exist_ok=True)
    return state / cli_identity.slot_files(slot).lock


def identity_of(agent_dir: Path) -> dict[str, str]:
    data = json.loads((agent_dir / "cross-session" / "cli-identity.json").read_text())
    assert isinstance(data, dict)
    return data


# -- 0: submitted or queued ------------------------------------------------------------------------


def test_json_report_of_a_submitted_message_with_a_summary(
    inboxes: Inboxes, cli: Cli, locations: Locations
) -> None:
    inbox = inboxes.start("alpha")
    ready_event = inbox.wait_event("ready")
    sent = cli(
        "send", "alpha", "line one\nline two", "--summary", "  the short version  ", "--json"
    )
    assert sent.returncode == 0, sent
    report = sent.json()
    assert set(report) == REPORT_KEYS  # a success carries no "error" field at all
    assert report["ok"] is True
    assert report["status"] == "submitted"
    assert report["receipt"] == "submitted"
    assert report["state"] == "submitted"  # without --wait, the receipt is the latest state
    assert report["retryable"] is False
    assert report["next"] is None
    assert report["messageWritten"] is True  # a receipt came back, so the frame went out
    assert len(report["messageId"]) == 36
    assert report["target"]["instanceId"] == ready_event["instanceId"]
    assert report["target"]["name"] == "alpha"
    assert "token" not in report["target"]
    message = inbox.wait_event("message", messageId=report["messageId"])
    assert message["summary"] == "the short version"
    assert message["text"] == "line one\nline two"
    assert inbox.wait_event("state", messageId=report["messageId"])["summary"] == (
        "the short version"
    )
    assert leftovers(locations, keep=[ready_event["instanceId"]]) == []


def test_send_wait_reports_delivered_once_the_inbox_shows_the_message(
    inboxes: Inboxes, cli: Cli
) -> None:
    inbox = inboxes.start("delta", busy=0)
    sent = cli("send", "delta", "are you there?", "--wait", "5", "--json")
    assert sent.returncode == 0, sent
    report = sent.json()
    assert (report["status"], report["lastState"]) == ("submitted", "delivered")
    assert report["followed"] == ["submitted", "delivered"]
    assert report["deliveryConfirmable"] is True
    assert "error" not in report
    inbox.wait_event("message", messageId=report["messageId"])
    text = cli("send", "delta", "and now in words", "--wait", "5")
    assert text.returncode == 0, text
    assert "submitted → delivered" in text.stdout
    assert "confirmed it entered its conversation" in text.stdout


def test_parallel_sends_do_not_wait_for_each_other(
    inboxes: Inboxes, private_agent_dir: Path, locations: Locations
) -> None:
    """Three sends started together: each takes a free identity of the pool, none waits (and
    none says it waits), and every one is taken by the receiver.

    The receiver's turn is running before they start (a first message started it): a message
    that arrives between a submission and the turn it starts is refused ``busy`` by design, and
    three sends started together would race that window."""
    inbox = inboxes.start("busy-bee", busy=HOLD_S)
    first = run_cli(private_agent_dir, "send", "busy-bee", "start the turn", "--json")
    assert first.returncode == 0, first
    assert first.json()["status"] == "submitted", first
    inbox.wait_event("message", messageId=first.json()["messageId"])
    results: list[Result] = []

    def send(number: int) -> None:
        results.append(
            run_cli(private_agent_dir, "send", "busy-bee", f"parallel {number}", "--json")
        )

    threads = [threading.Thread(target=send, args=(n,)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(results) == 3
    every = "\n".join(map(str, results))
    assert all(r.returncode == 0 for r in results), every
    assert all(r.stderr == "" for r in results), every
    assert sorted(r.json()["status"] for r in results) == ["queued", "queued", "queued"]
    ready_event = inbox.wait_event("ready")
    assert leftovers(locations, keep=[ready_event["instanceId"]]) == []


# -- 2: refused --------------------------------------------------------------------------------


def test_the_same_text_twice_is_a_duplicate(
    inboxes: Inboxes, cli: Cli, locations: Locations, private_agent_dir: Path
) -> None:
    inbox = inboxes.start("gamma", busy=0)
    first = cli("send", "gamma", "exactly this text")
    assert first.returncode == 0, first
    again = cli("send", "gamma", "exactly this text", "--json")
    assert again.returncode == 2, again
    report = again.json()
    assert report["status"] == "duplicate"
    assert report["state"] == "refused"
    assert report["retryable"] is False
    assert report["messageWritten"] is True
    assert "same text within 30 s" in report["error"]
    # A different text from the same identity still goes through.
    other = cli("send", "gamma", "another text")
    assert other.returncode == 0, other
    # Three invocations, one sender: the receiver saw a single source (which is also why the
    # second one counted as a duplicate at all).
    assert {e["source"] for e in inbox.events() if e["event"] == "state"} == {
        identity_of(private_agent_dir)["instanceId"]
    }
    assert leftovers(locations, keep=[inbox.wait_event("ready")["instanceId"]]) == []


# -- 4: no such target -------------------------------------------------------------------------


def test_an_unknown_target_is_not_found(inboxes: Inboxes, cli: Cli, locations: Locations) -> None:
    ready_event = inboxes.start("present").wait_event("ready")
    sent = cli("send", "absent", "hello?", "--json")
    assert sent.returncode == 4, sent
    report = sent.json()
    assert report["status"] == "not_found"
    assert report["state"] == "refused"
    assert report["messageId"] is None
    assert report["messageWritten"] is False
    assert report["target"] is None
    assert f"Live sessions: present [{ready_event['ref']}]." in report["error"]
    assert report["next"] == "see the live sessions with: pi-cross-session peers"
    text = cli("send", "absent", "hello again?")
    assert text.returncode == 4, text
    # Command-line words: a message that never left says "not sent", the advice names the
    # command to run, and nothing speaks of the model's tools or of upgrading a peer.
    assert text.stderr.startswith('Message not sent: no live session matches "absent"')
    assert "not_found" not in text.stderr  # the code is for --json
    assert "pi-cross-session peers" in text.stderr
    assert "list_pi" not in text.stderr
    assert "upgrade" not in text.stderr
    assert "messageId" not in text.stderr
    assert leftovers(locations, keep=[ready_event["instanceId"]]) == []


def test_nobody_there_is_not_found(cli: Cli) -> None:
    sent = cli("send", "anyone", "hello?")
    assert sent.returncode == 4, sent
    assert "there are no other live sessions" in sent.stderr


def test_two_sessions_of_one_name_are_ambiguous_until_a_ref_is_given(
    inboxes: Inboxes, cli: Cli, locations: Locations
) -> None:
    first = inboxes.start("twin")
    second = inboxes.start("twin")
    refs = [i.wait_event("ready")["ref"] for i in (first, second)]
    sent = cli("send", "twin", "which one?", "--json")
    assert sent.returncode == 4, sent
    report = sent.json()
    assert report["status"] == "ambiguous"
    assert report["messageWritten"] is False
    for ref in refs:
        assert f"twin [{ref}]" in report["error"]
    assert sorted(c["ref"] for c in report["candidates"]) == sorted(refs)
    # In text, one candidate per line, each with its ref and cwd.
    text = cli("send", "twin", "which one, in words?")
    assert text.returncode == 4, text
    head, *candidates = text.stderr.rstrip("\n").split("\n")
    assert head.startswith('Message not sent: "twin" matches 2 live sessions;')
    assert sorted(c.split()[:2] for c in candidates[:2]) == sorted(
        ["twin", f"[{ref}]"] for ref in refs
    )
    # The advice does not run into the last candidate: it is a sentence of its own, on its line.
    assert len(candidates) == 3, text
    assert candidates[2] == "Next: see the live sessions with: pi-cross-session peers."
    precise = cli("send", f"@twin [{refs[1]}]", "you, the second one", "--json")
    assert precise.returncode == 0, precise
    assert precise.json()["target"]["ref"] == refs[1]
    second.wait_event("message", messageId=precise.json()["messageId"])
    assert not [e for e in first.events() if e["event"] == "message"]
    ids = [i.wait_event("ready")["instanceId"] for i in (first, second)]
    assert leftovers(locations, keep=ids) == []


# -- 1: invalid input --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "status"),
    [
        (("someone", "   "), "invalid_message"),
        (("someone", ""), "invalid_message"),
        (("   ", "a message"), "invalid_target"),
        (("someone", "a message", "--summary", " \t "), "invalid_message"),
    ],
    ids=["blank-message", "empty-message", "blank-target", "blank-summary"],
)
def test_invalid_input_exits_1_and_touches_nothing(
    cli: Cli, private_agent_dir: Path, args: tuple[str, ...], status: str
) -> None:
    sent = cli("send", *args, "--json")
    assert sent.returncode == 1, sent
    report = sent.json()
    assert report["status"] == status
    assert report["ok"] is False
    assert report["messageId"] is None
    assert report["messageWritten"] is False
    # Checked before anything is published: not even the identity is created.
    assert list(private_agent_dir.iterdir()) == []


def test_invalid_input_in_text_mode_goes_to_stderr(cli: Cli, private_agent_dir: Path) -> None:
    text = cli("send", "someone", " \n ")
    assert text.returncode == 1, text
    assert text.stdout == ""
    assert text.stderr.startswith("Message not sent: the message is blank.")
    assert list(private_agent_dir.iterdir()) == []


def test_a_message_to_the_command_line_itself_is_an_invalid_target(cli: Cli) -> None:
    sent = cli("send", "pi-cross-session-cli", "talking to myself", "--json")
    assert sent.returncode == 1, sent
    assert sent.json()["status"] == "invalid_target"
    assert "cannot send a message to itself" in sent.json()["error"]


# -- 3: receipt unknown ------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_receiver_that_never_answers_the_message_is_receipt_unknown(
    locations: Locations, private_agent_dir: Path, tmp_path: Path
) -> None:
    """A fake session answers probes and the hello with ``ready`` (with the queue capability),
    then stays silent: the command line gives up at its 5 s deadline with exit 3."""
    registration = make_registration(locations, "silent")
    async with fake_receiver(
        locations, [ready(registration), SILENT], registration=registration
    ) as fake:
        publish(locations, registration)
        started = time.monotonic()
        results: list[Result] = []

        async def send() -> None:
            results.append(
                await anyio.to_thread.run_sync(
                    partial(
                        run_cli, private_agent_dir, "send", "silent", "are you there?", "--json"
                    )
                )
            )

        async with anyio.create_task_group() as group:
            group.start_soon(send)
            # While the command line waits for a receipt, its registration is on disk, yet
            # nobody lists it.
            await fake.wait_for(lambda: fake.count("message") == 1)
            identity = identity_of(private_agent_dir)
            assert exists(locations.registration_path(identity["instanceId"]))
            listing = await discovery.list_peers(
                locations,
                fs,
                Exchanger(locations, fs).is_live,
                self_instance_id=None,
                with_git=False,
            )
            assert [p.name for p in listing.peers] == ["silent"]
        elapsed = time.monotonic() - started
        [sent] = results
        assert sent.returncode == 3, sent
        report = sent.json()
        assert report["status"] == "timeout"
        assert report["state"] == "receipt_unknown"
        assert report["retryable"] is False
        assert report["messageWritten"] is True
        assert "never resend blindly" in report["next"]
        assert report["messageId"] == next(
            r.body["messageId"] for r in fake.received if r.kind == "message"
        )
        assert 4.5 < elapsed < 20
        assert fake.count("message") == 1  # nothing was retried
    assert not exists(locations.registration_path(identity["instanceId"]))
    assert leftovers(locations, keep=[registration.instance_id]) == []


# -- 2: rate limited, across invocations -------------------------------------------------------


class FrozenAdmissionClock(FakeClock):
    """Real wall time (so a real command line's ``sentAt`` is fresh) and a monotonic clock that
    stands still: the receiver's token buckets never refill, however slow the machine is."""

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000


@pytest.mark.anyio
async def test_the_rate_limit_follows_the_identity_across_invocations(
    locations: Locations, private_agent_dir: Path
) -> None:
    """A burst through the command line's first identity (in-process, for speed) empties the
    receiver's bucket for it; the next real invocation, which gets that same identity, is then
    ``rate_limited`` (exit 2).

    The other identities of the pool are held meanwhile, so the invocation, started while the
    burst still holds the first one, has to wait: it says so at once on stderr, naming the
    holders, and the first identity is released only once it has said so. The receiver's
    admission clock stands still, so no token grows back in between, whatever the load.
    """
    others = [NotedLock(str(slot_lock_path(locations, slot))) for slot in (1, 2, 3)]
    tally: Counter[str] = Counter()
    async with running_receiver(locations, clock=FrozenAdmissionClock()) as rx:
        rx.turns.user_turn()  # a turn runs: every admitted message waits in the queue
        try:
            for lock in others:
                assert lock.try_acquire()
                lock.write_note(Holder(os.getpid(), "a test holding it", None).to_bytes())
            async with cli_identity.holding(locations, [0]) as held:
                burst_identity = held.identity.instance_id
                attempts = 0
                while tally["rate_limited"] == 0:
                    # A listing whose probe the loaded machine made late finds no receiver:
                    # nothing reached it and no token was spent, so that send is tried again.
                    attempts += 1
                    assert attempts <= RATE_CAPACITY + NOT_REACHED_RETRIES, tally
                    report = await outbound.send(held.outbox, "receiver", f"burst {attempts}")
                    if report.status != Code.NOT_FOUND:
                        tally[report.status] += 1
                process = await anyio.open_process(
                    [*CLI, "send", "receiver", "one more, from a new process", "--json"],
                    env=cli_env(private_agent_dir),
                    cwd=str(private_agent_dir),
                )
                assert process.stderr is not None
                said = b""
                with anyio.fail_after(MUST_HAPPEN_S):
                    async for chunk in process.stderr:
                        said += chunk
                        if b"got identity" in said or b"in use" in said:
                            break
                assert b"all 4 command-line identities are in use" in said, said
        finally:
            for lock in others:
                lock.release()
        with anyio.fail_after(MUST_HAPPEN_S):
            assert process.stdout is not None
            out = b"".join([chunk async for chunk in process.stdout])
            said += b"".join([chunk async for chunk in process.stderr])
            await process.wait()
        senders = {row.sender_instance_id for row in rx.snapshot().rows}
    assert tally == {"queued": RATE_CAPACITY, "rate_limited": 1}
    assert process.returncode == 2, (out, said)
    report = json.loads(out)
    assert report["status"] == "rate_limited"
    assert report["retryable"] is True
    assert report["state"] == "refused"
    assert "one every 2 s" in report["next"]
    # It said who held what, then which identity it got.
    stderr = said.decode()
    assert f"identity 1: pid {os.getpid()}, a test holding it" in stderr
    assert f"identity 0: pid {os.getpid()}" in stderr
    assert "got identity 0 after" in stderr
    assert identity_of(private_agent_dir)["instanceId"] == burst_identity
    assert senders == {burst_identity}


def test_send_name_is_the_sender_name_the_receiver_sees(inboxes: Inboxes, cli: Cli) -> None:
    inbox = inboxes.start("named-receiver", busy=0)
    sent = cli("send", "named-receiver", "who is this?", "--name", "  deploy\tscript ", "--json")
    assert sent.returncode == 0, sent
    message = inbox.wait_event("message", messageId=sent.json()["messageId"])
    assert message["sender"]["name"] == "deploy script"  # cleaned as every published name
    plain = cli("send", "named-receiver", "and without a name?", "--json")
    assert plain.returncode == 0, plain
    message = inbox.wait_event("message", messageId=plain.json()["messageId"])
    assert message["sender"]["name"] == "pi-cross-session-cli"
