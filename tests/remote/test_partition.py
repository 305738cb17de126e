"""A partition and a gateway killed mid-exchange (docs/remote.md, "Faults"): each send ends in a
receipt, a definite refusal or an honest ``receipt_unknown``; a tap on the receiving machine's
subject shows every request went out once and never again, and the sessions show no message
admitted twice, nor one refused as not sent (``unreachable``, ``not_listening``) admitted at
all."""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pi_cross_session._internal.cli import exits
from pi_cross_session._internal.protocol.remote.envelope import request_subject
from tests.support.bounds import MUST_HAPPEN_S
from tests.support.processes import Result
from tests.support.remote import Fleet, Machine, Tap


def _received(inbox: Any, message_id: str) -> int:
    return sum(
        1
        for e in inbox.events()
        if e.get("event") == "message" and e.get("messageId") == message_id
    )


def _wait(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + MUST_HAPPEN_S
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _pids(machine: Machine, name: str) -> set[int]:
    """The pids in the registrations named ``name`` (a killed gateway leaves its own behind)."""
    return {r["pid"] for r in machine.registrations() if r["name"] == name}


def _unknown(result: Result) -> str:
    """The message id of a send that ended ``receipt_unknown`` (and says not to retry)."""
    report = result.json()
    assert result.returncode == exits.EXIT_UNKNOWN, result
    assert (report["status"], report["state"]) == ("connection_closed", "receipt_unknown")
    assert report["retryable"] is False
    message_id: str = report["messageId"]
    return message_id


def _unreachable(result: Result) -> str:
    """A send this machine's gateway could not hand to NATS (it has no connection): not sent,
    a local failure."""
    report = result.json()
    assert result.returncode == exits.EXIT_LOCAL, result
    assert (report["status"], report["state"]) == ("unreachable", "refused")
    message_id: str = report["messageId"]
    return message_id


def _not_listening(result: Result) -> str:
    """A send NATS took and found nobody for: the other machine's gateway is not there."""
    report = result.json()
    assert result.returncode == exits.EXIT_REFUSED, result
    assert (report["status"], report["state"]) == ("not_listening", "refused")
    message_id: str = report["messageId"]
    return message_id


def _send_until_ok(machine: Machine, target: str) -> str:
    """Send until one gets a receipt (meanwhile a gateway reconnecting refuses ``unreachable``,
    and one whose peer is not back yet ``not_listening``)."""
    deadline = time.monotonic() + MUST_HAPPEN_S
    while True:
        result = machine.cli("send", target, f"after the fault {uuid.uuid4()}", "--json")
        if result.returncode == exits.EXIT_OK:
            message_id: str = result.json()["messageId"]
            return message_id
        if result.json()["status"] == "not_listening":
            _not_listening(result)  # this side is back, the other side not yet
        else:
            _unreachable(result)
        assert time.monotonic() < deadline, result
        time.sleep(0.2)


def test_a_gateway_cut_from_nats_while_its_sessions_stay_up(fleet: Fleet) -> None:
    fleet.start_server()
    laptop, buildbox = fleet.pair("laptop", "buildbox")
    bob = buildbox.inbox("bob")
    alice = laptop.inbox("alice")
    link = fleet.link()  # buildbox's only way to NATS; laptop and the server stay whole
    laptop.start_gateway()
    buildbox.start_gateway(urls=[link.url])
    laptop.wait_peer("bob@buildbox")
    buildbox.wait_peer("alice@laptop")
    to_buildbox = request_subject("buildbox", "laptop")

    # The tap is a subscriber too, so NATS would no longer answer "no responders" while it
    # listens: it watches the silent partition only.
    with Tap(fleet.url, [to_buildbox], creds=fleet.admin_creds) as tap:
        # A silent partition: buildbox's connection stays open, no byte moves. The request goes
        # out once; no verified reply comes in the hop's 4 s, so the sender hears
        # receipt_unknown, and nothing is sent again.
        link.freeze()
        silent = _unknown(laptop.cli("send", "bob@buildbox", "across a silent cut", "--json"))
        assert tap.count(to_buildbox) == 1
        # The route comes back within the envelope's window: the request that was held is
        # handled then, once. (Beyond the window it would be refused `expired`, never admitted.)
        link.thaw()
        bob.wait_event("message", messageId=silent)
        assert tap.count(to_buildbox) == 1

    # A broken link: buildbox's connection is closed and it cannot reconnect. The server drops
    # its subscription, so a send to it is refused `not_listening` at once ("no responders":
    # nobody took it); buildbox's own sessions still run, and their sends out are refused
    # `unreachable`, a local failure (its gateway has no connection).
    link.cut()
    gone = _not_listening(laptop.cli("send", "bob@buildbox", "while cut", "--json"))
    stuck = _unreachable(buildbox.cli("send", "alice@laptop", "from the cut side", "--json"))

    # Healed: the gateway reconnects by itself, the proxies outlived the cut (shorter than the
    # record TTL), and both directions work again; what was refused as not sent never arrives.
    link.heal()
    bob.wait_event("message", messageId=_send_until_ok(laptop, "bob@buildbox"))
    alice.wait_event("message", messageId=_send_until_ok(buildbox, "alice@laptop"))
    assert _received(bob, silent) == 1
    assert _received(bob, gone) == 0
    assert _received(alice, stuck) == 0


def test_a_gateway_killed_mid_exchange_is_receipt_unknown_and_nothing_arrives_twice(
    fleet: Fleet,
) -> None:
    fleet.start_server()
    laptop, buildbox = fleet.pair("laptop", "buildbox")
    bob = buildbox.inbox("bob", "--busy", "0")
    near = laptop.start_gateway()
    far = buildbox.start_gateway()
    laptop.wait_peer("bob@buildbox")
    subject = request_subject("buildbox", "laptop")

    def send_while(kill: Callable[[], None], text: str, published: int) -> str:
        """Send to bob@buildbox; once the request is on NATS (and buildbox's gateway, frozen,
        holds it), run ``kill``; return the message id of the receipt_unknown it ends in."""
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(laptop.cli, "send", "bob@buildbox", text, "--json")
            _wait(lambda: tap.count(subject) == published, "the request went out")
            kill()
            return _unknown(pending.result())

    with Tap(fleet.url, [subject], creds=fleet.admin_creds) as tap:
        # The *sending* gateway killed while its request is out: the sender's connection to the
        # proxy closes at once, receipt_unknown. The request was out, so buildbox, thawed,
        # delivers it: once, and its reply goes to nobody.
        far.process.send_signal(signal.SIGSTOP)
        try:
            first = send_while(near.kill, "the sender's gateway dies", 1)
        finally:
            far.process.send_signal(signal.SIGCONT)
        bob.wait_event("message", messageId=first)

        # The *receiving* gateway killed while it holds a request: receipt_unknown after the
        # hop's deadline; the request died with it (core NATS never redelivers), so the
        # restarted gateway never sees it.
        near = laptop.start_gateway()
        _wait(lambda: near.pid in _pids(laptop, "bob@buildbox"), "a new proxy for bob")
        far.process.send_signal(signal.SIGSTOP)
        second = send_while(far.kill, "the receiver's gateway dies", 2)
        buildbox.start_gateway()
        bob.wait_event("message", messageId=_send_until_ok(laptop, "bob@buildbox"))
        # One request per send, never a second: the two that died and the one after.
        assert tap.count(subject) == 3

    assert _received(bob, first) == 1
    assert _received(bob, second) == 0
