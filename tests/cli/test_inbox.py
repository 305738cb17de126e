"""``pi-cross-session inbox``: a live session in its own process, driven by real ``send``s."""

from __future__ import annotations

import os
import re
import signal
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from pi_cross_session._internal.protocol.paths import Locations
from tests.support.file_state import mode_of
from tests.support.processes import HOLD_S, Inboxes, Result

Cli = Callable[..., Result]


def test_json_inbox_reports_ready_then_each_state_and_the_message(
    inboxes: Inboxes, cli: Cli, locations: Locations
) -> None:
    inbox = inboxes.start("beta")
    ready = inbox.wait_event("ready")
    assert ready["name"] == "beta"
    assert ready["pid"] == inbox.pid
    assert ready["inbound"] == "accept"
    assert re.fullmatch(r"[0-9a-f]{32}", ready["instanceId"])
    assert ready["ref"] == ready["instanceId"][:8]
    assert ready["sessionId"]

    sent = cli("send", "beta", "Please rebase on main.\nSecond line.")
    assert sent.returncode == 0, sent
    assert sent.stderr == ""
    assert sent.stdout.startswith(f"Message submitted to beta [{ready['ref']}]: "), sent
    message_id = sent.message_id()

    message = inbox.wait_event("message", messageId=message_id)
    assert message["text"] == "Please rebase on main.\nSecond line."
    assert message["summary"] == "Please rebase on main."
    assert message["sender"]["name"] == "pi-cross-session-cli"
    assert re.fullmatch(r"[0-9a-f]{32}", message["sender"]["instanceId"])
    assert message["sender"]["sessionId"].startswith("cli-")
    state = inbox.wait_event("state", messageId=message_id, state="delivered")
    # Shown as a sender asking about it would hear it: delivered once the host confirmed it,
    # never a second "submitted".
    assert inbox.states_of(message_id) == ["accepted", "submitted", "delivered"]
    assert state["delivered"] is True
    assert state["sender"] == "pi-cross-session-cli"
    assert state["summary"] == "Please rebase on main."
    assert state["source"] == message["sender"]["instanceId"]
    # Every event carries its time (epoch ms), in order.
    stamps = [e["at"] for e in inbox.events()]
    assert all(isinstance(at, int) for at in stamps)
    assert stamps == sorted(stamps)
    assert [e["delivered"] for e in inbox.events() if e["event"] == "state"] == [
        False,
        False,
        True,
    ]


def test_text_inbox_prints_readable_lines(inboxes: Inboxes, cli: Cli) -> None:
    inbox = inboxes.start("text box", busy=0, as_json=False)
    ready = inbox.wait_line(
        r"^\[\d\d:\d\d:\d\d\] inbox text box \[([0-9a-f]{8})\] listening as session "
        r"(\S+) \(pid (\d+)\); Ctrl-C to stop$"
    )
    ref, pid = ready.group(1), int(ready.group(3))
    assert pid == inbox.pid

    sent = cli("send", f"text box [{ref}]", "hello in plain text", "--summary", "greeting")
    assert sent.returncode == 0, sent
    message_id = sent.message_id()
    inbox.wait_line(
        rf"accepted\s+{message_id} from pi-cross-session-cli \[[0-9a-f]{{8}}\]: greeting"
    )
    inbox.wait_line(rf"submitted\s+{message_id} from pi-cross-session-cli")
    inbox.wait_line(rf"delivered\s+{message_id} from pi-cross-session-cli")
    inbox.wait_line(rf"message {message_id} from pi-cross-session-cli \[[0-9a-f]{{8}}\]$")
    inbox.wait_line(r"^    hello in plain text$")

    inbox.send_signal(signal.SIGUSR1)
    inbox.wait_line(r"\] status:$")
    inbox.wait_line(r"^Phase: (idle|preflight|busy); inbox open$")
    inbox.wait_line(r"^Budget: 255 of 256 left; queue 0/50; admitted 1$")
    assert inbox.stop(signal.SIGINT) == 0
    assert re.search(r"\] stopped; files removed$", inbox.lines[-1]), inbox.output()


def test_busy_inbox_queues_a_second_message_and_delivers_it_after_the_turn(
    inboxes: Inboxes, cli: Cli
) -> None:
    # Busy until told: the second send is a new process, which may take seconds to start.
    inbox = inboxes.start("slowpoke", busy=HOLD_S)
    first = cli("send", "slowpoke", "first message", "--json")
    assert first.returncode == 0, first
    assert first.json()["status"] == "submitted"
    first_id = first.json()["messageId"]
    # The simulated turn has started once the message event is out: the inbox is busy now.
    inbox.wait_event("message", messageId=first_id)

    second = cli("send", "slowpoke", "second message")
    assert second.returncode == 0, second
    assert second.stdout.startswith("Message queued to slowpoke ["), second
    second_id = second.message_id()
    assert inbox.states_of(second_id) == ["accepted", "queued"]

    inbox.send_signal(signal.SIGUSR1)
    status = inbox.wait_event("status")
    assert status["phase"] == "busy"
    assert status["pending"] == 1
    assert {m["messageId"]: m["state"] for m in status["messages"]} == {
        first_id: "submitted",
        second_id: "queued",
    }

    inbox.end_turn()
    delivered = inbox.wait_event("message", messageId=second_id)
    assert delivered["text"] == "second message"
    inbox.wait_event("state", messageId=second_id, state="delivered")
    assert inbox.states_of(second_id) == ["accepted", "queued", "submitted", "delivered"]
    assert [e["messageId"] for e in inbox.events() if e["event"] == "message"] == [
        first_id,
        second_id,
    ]


def test_sigusr1_prints_a_status_event(inboxes: Inboxes, cli: Cli) -> None:
    inbox = inboxes.start("counter", busy=0)
    sent = cli("send", "counter", "count me")
    assert sent.returncode == 0, sent
    message_id = sent.message_id()
    inbox.wait_event("message", messageId=message_id)
    inbox.send_signal(signal.SIGUSR1)
    status = inbox.wait_event("status")
    assert status["phase"] in ("idle", "busy")
    assert status["remainingBudget"] == 255
    assert status["pending"] == 0
    assert status["admitted"] == 1
    assert status["stopped"] is False
    [row] = status["messages"]
    assert row["messageId"] == message_id
    assert row["state"] == "submitted"
    assert row["source"] == inbox.wait_event("message")["sender"]["instanceId"]
    # The inbox goes on receiving after a status request.
    again = cli("send", "counter", "still there?")
    assert again.returncode == 0, again


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_the_inbox_and_removes_its_files(
    inboxes: Inboxes, locations: Locations, stop_signal: int
) -> None:
    inbox = inboxes.start("short-lived")
    instance_id = inbox.wait_event("ready")["instanceId"]
    registration = Path(locations.registration_path(instance_id))
    socket = Path(locations.socket_path(instance_id))
    assert registration.is_file()
    assert mode_of(registration) == 0o600
    assert stat.S_ISSOCK(os.lstat(socket).st_mode)
    assert mode_of(socket) == 0o600

    assert inbox.stop(stop_signal) == 0
    events = inbox.events()
    assert {k: v for k, v in events[-1].items() if k != "at"} == {"event": "stopped", "error": None}
    assert events[-2]["event"] == "status"  # the final figures come just before
    assert events[-2]["inbound"] == "accept"
    assert not registration.exists()
    assert not socket.exists()
    assert list(Path(locations.peers_dir).glob("*.json")) == []
    assert list(Path(locations.runtime_dir).glob("*.sock")) == []
    assert inbox.err_lines == []


def test_refusing_inbox_refuses_a_send_with_exit_2(inboxes: Inboxes, cli: Cli) -> None:
    inbox = inboxes.start("closed-door", "--refuse")
    assert inbox.wait_event("ready")["inbound"] == "refuse"
    sent = cli("send", "closed-door", "let me in", "--json")
    assert sent.returncode == 2, sent
    report = sent.json()
    assert report["status"] == "refused"
    assert report["state"] == "refused"
    assert report["retryable"] is False
    assert report["ok"] is False
    assert "does not accept messages" in report["error"]
    assert "error" in report
    # Text mode goes to stderr, with the status word, in the command line's words: the frame
    # went out, and the receiver refused it.
    text = cli("send", "closed-door", "let me in, please")
    assert text.returncode == 2, text
    assert text.stdout == ""
    assert text.stderr.startswith("Message refused by closed-door [")
    assert "(refused): " in text.stderr
    assert "refuses messages from other sessions (its inbound setting)" in text.stderr
    assert "upgrade" not in text.stderr
    assert "list_pi" not in text.stderr
    assert not [e for e in inbox.events() if e["event"] in ("state", "message")]


def test_a_name_with_spaces_and_unicode_is_addressable_as_name_and_ref(
    inboxes: Inboxes, cli: Cli
) -> None:
    name = "Zoë’s reviewer 🦊 № 2"
    inbox = inboxes.start(name)
    ready = inbox.wait_event("ready")
    assert ready["name"] == name
    sent = cli("send", f"{name} [{ready['ref']}]", "grüße, 你好 🦊", "--json")
    assert sent.returncode == 0, sent
    assert sent.json()["target"]["name"] == name
    message = inbox.wait_event("message", messageId=sent.json()["messageId"])
    assert message["text"] == "grüße, 你好 🦊"
    by_name = cli("send", name, "by the bare name")
    assert by_name.returncode == 0, by_name
    assert re.match(
        rf"Message (submitted|queued) to {re.escape(name)} \[{ready['ref']}\]: ", by_name.stdout
    )


def test_cwd_option_is_advertised_in_peers(inboxes: Inboxes, cli: Cli, tmp_path: Path) -> None:
    advertised = tmp_path / "somewhere else" / "project ü"
    advertised.mkdir(parents=True)
    inboxes.start("elsewhere", "--cwd", str(advertised))
    listed = cli("peers", "--json")
    assert listed.returncode == 0, listed
    [peer] = listed.json()["peers"]
    assert peer["name"] == "elsewhere"
    assert peer["cwd"] == str(advertised)


def test_text_status_names_the_running_inbox(inboxes: Inboxes) -> None:
    inbox = inboxes.start("named", as_json=False)
    ref = inbox.wait_line(r"inbox named \[([0-9a-f]{8})\] listening").group(1)
    inbox.send_signal(signal.SIGUSR1)
    line = inbox.wait_line(r"^Inbox: ").string
    assert line == f"Inbox: named [{ref}]"


def test_an_unsafe_runtime_dir_stops_the_inbox_with_a_one_line_error(
    inboxes: Inboxes, locations: Locations, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    os.symlink(elsewhere, locations.runtime_dir)
    try:
        inbox = inboxes.start("refused", wait=False)
        code = inbox.process.wait(timeout=15)
        inbox.close()
        assert list(elsewhere.iterdir()) == []  # nothing was created through the link
        assert list(Path(locations.peers_dir).glob("*.json")) == []
        assert code == 1
        errors = "\n".join(inbox.err_lines)
        assert "Traceback" not in errors, errors
        assert "pi-cross-session: unsafe_endpoint: " in errors
        assert "symbolic link" in errors
    finally:
        os.unlink(locations.runtime_dir)
