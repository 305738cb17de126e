"""Spec §10 items 9 and 10 at the wire: who may be submitted, queued or told ``busy``, and the
abort latch. A real runtime receives on its real endpoint; its host is scripted by the test."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pi_cross_session._internal.plugin.render.peer_text import PEER_TEXT_NOTICE
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.security.admission import Phase
from pi_cross_session._internal.security.provenance import Provenance
from pi_cross_session._internal.security.turns import TurnEnded, TurnEnding, TurnOpened
from tests.support.waiting import eventually
from tests.support.wire_session import LEGACY, Receiver, assert_accounted, running_receiver

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("capabilities", [LEGACY, []], ids=["no-capabilities", "empty-list"])
async def test_item09_legacy_sender_to_an_idle_receiver_is_submitted(
    locations: Locations, capabilities: list[str] | None
) -> None:
    async with running_receiver(locations) as rx:
        old = rx.sender("old", capabilities=capabilities)
        reply = await old.send("hello from an old peer", message_id="old-1")
        assert (reply.ok, reply.status, reply.retryable) == (True, "submitted", False)
        assert len(rx.host.calls) == 1
        call = rx.host.calls[0]
        assert call.delivery.message_id == "old-1"
        assert call.delivery.sender.instance_id == old.instance_id
        assert "hello from an old peer" in call.content
        assert PEER_TEXT_NOTICE in call.content
        assert rx.state(old, "old-1") == "submitted"
        rx.turns.settle_submissions()
        assert_accounted(rx, all_final=True)


async def _user_turn(rx: Receiver) -> None:
    rx.turns.user_turn()


async def _peer_turn(rx: Receiver) -> None:
    first = await rx.sender("first").send("starts a peer turn")
    assert first.status == "submitted"
    rx.turns.start(Provenance.PEER)


async def _prompt_preflight(rx: Receiver) -> None:
    rx.turns.preparing()  # before_agent_start: the host still says idle


async def _submission_preflight(rx: Receiver) -> None:
    first = await rx.sender("first").send("waits for its turn to start")
    assert first.status == "submitted"
    assert rx.snapshot().phase is Phase.PREFLIGHT


async def _host_says_busy(rx: Receiver) -> None:
    rx.host.idle = False  # no turn event at all: the host's own word is enough to refuse


BUSY_STATES: dict[str, tuple[Callable[[Receiver], object], str]] = {
    # state: (how to get there, what a capable sender is told in that state)
    "busy-user-turn": (_user_turn, "queued"),
    "busy-peer-turn": (_peer_turn, "queued"),
    "preflight-prompt": (_prompt_preflight, "busy"),
    "preflight-own-submission": (_submission_preflight, "busy"),
    "host-not-idle": (_host_says_busy, "busy"),
}


@pytest.mark.parametrize("capabilities", [LEGACY, []], ids=["no-capabilities", "empty-list"])
@pytest.mark.parametrize("state", list(BUSY_STATES))
async def test_item09_legacy_sender_to_a_busy_or_preflight_receiver_is_busy(
    locations: Locations, state: str, capabilities: list[str] | None
) -> None:
    enter, capable_answer = BUSY_STATES[state]
    async with running_receiver(locations) as rx:
        await enter(rx)  # type: ignore[misc]
        calls_before = len(rx.host.calls)
        old = rx.sender("old", capabilities=capabilities)
        reply = await old.send(message_id="old-1")
        assert (reply.ok, reply.status, reply.retryable) == (False, "busy", True)
        assert rx.state(old, "old-1") is None  # refused before any commit
        assert len(rx.host.calls) == calls_before  # no host call for it, none at all after
        # The same state, a capable sender: queued only when a known turn is running.
        new = await rx.sender("new").send(message_id="new-1")
        assert new.status == capable_answer
        assert len(rx.host.calls) == calls_before
        assert_accounted(rx)


#: Every ending of a turn whose source stayed unknown latches: the receiver cannot vouch for it.
ENDINGS = [
    TurnEnding.UNKNOWN,
    TurnEnding.ERROR,
    TurnEnding.OTHER,
    TurnEnding.ABORTED,
    TurnEnding.STOP,
]


@pytest.mark.parametrize("ending", ENDINGS, ids=str)
async def test_item10_unknown_turn_source_refuses_then_settling_it_latches_until_resume(
    locations: Locations, ending: TurnEnding
) -> None:
    async with running_receiver(locations) as rx:
        capable = rx.sender("capable")
        legacy = rx.sender("legacy", capabilities=LEGACY)
        rx.turns.preparing()
        rx.turns.start(Provenance.UNKNOWN)  # agent_start, but nobody knows who started it
        for sender in (capable, legacy):
            reply = await sender.send()
            assert (reply.ok, reply.status, reply.retryable) == (False, "busy", True)

        rx.turns.end(ending)
        snapshot = rx.snapshot()
        assert snapshot.stopped
        assert snapshot.phase is Phase.IDLE
        assert any("closed" in notice for notice in rx.host.notices), rx.host.notices
        for sender in (capable, legacy):
            reply = await sender.send()
            assert (reply.ok, reply.status, reply.retryable) == (False, "stopped", False)

        # A genuine user turn does not reopen it, and resume is refused while a turn runs.
        rx.turns.user_turn()
        assert (await capable.send()).status == "stopped"
        refused = rx.runtime.resume()
        assert not refused.reopened
        assert rx.snapshot().stopped
        rx.turns.end(TurnEnding.STOP)
        assert (await capable.send()).status == "stopped"
        assert rx.host.calls == []

        outcome = rx.runtime.resume()
        assert (outcome.reopened, outcome.dropped) == (True, 0)
        assert not rx.snapshot().stopped
        reply = await capable.send(message_id="after-resume")
        assert (reply.ok, reply.status) == (True, "submitted")
        assert [d.message_id for d in rx.host.submitted] == ["after-resume"]
        rx.turns.settle_submissions()
        snapshot = assert_accounted(rx, all_final=True)
        assert snapshot.refusals == {"busy": 2, "stopped": 4}


async def test_item10_an_unknown_turn_identified_later_queues_and_settles_safely(
    locations: Locations,
) -> None:
    """A host that learns the source after agent_start (``TurnOpened``): from then on
    the turn is known, capable senders are queued, and a clean stop flushes instead of latching."""
    async with running_receiver(locations) as rx:
        capable = rx.sender("capable")
        rx.turns.start(Provenance.UNKNOWN)
        assert (await capable.send(message_id="early")).status == "busy"
        rx.runtime.on_turn(TurnOpened(Provenance.UNKNOWN))  # never a downgrade, never a no-op win
        assert (await capable.send(message_id="still-early")).status == "busy"
        rx.runtime.on_turn(TurnOpened(Provenance.USER))
        assert (await capable.send(message_id="queued")).status == "queued"
        legacy = await rx.sender("legacy", capabilities=LEGACY).send()
        assert legacy.status == "busy"  # a legacy sender is never queued
        rx.turns.end(TurnEnding.STOP)
        await eventually(lambda: len(rx.host.calls) == 1)
        assert not rx.snapshot().stopped
        assert rx.host.calls[0].delivery.message_id == "queued"
        rx.turns.settle_submissions()
        assert_accounted(rx, all_final=True)


async def test_item10_abort_latch_drops_queued_messages_and_resume_does_not_replay(
    locations: Locations,
) -> None:
    async with running_receiver(locations) as rx:
        sender = rx.sender("capable")
        rx.turns.user_turn()
        queued = [await sender.send(message_id=f"q{i}") for i in range(3)]
        assert [r.status for r in queued] == ["queued"] * 3
        rx.turns.abort()
        for i in range(3):
            assert (await sender.status(f"q{i}")).status == "dropped_cancelled"
        assert (await sender.send()).status == "stopped"
        assert not rx.runtime.resume().reopened  # the aborted turn has not settled yet
        rx.turns.end(TurnEnding.ABORTED)
        outcome = rx.runtime.resume()
        assert (outcome.reopened, outcome.dropped) == (True, 0)
        await rx.endpoint_idle()
        assert rx.host.calls == []  # nothing replayed, not even after the resume
        for i in range(3):
            assert (await sender.status(f"q{i}")).status == "dropped_cancelled"
        assert_accounted(rx, all_final=True)


async def test_item09_a_queue_is_never_stranded_behind_a_busy_looking_host(
    locations: Locations,
) -> None:
    # Our FIFO rule (docs/protocol.md): while a message waits for its flush, newcomers are told
    # busy rather than overtaking it. The flush a safe settle owes is retried until the host is
    # idle, so the wait is short and the queued message is delivered.
    async with running_receiver(locations) as rx:
        capable = rx.sender("capable")
        rx.turns.user_turn()
        assert (await capable.send(message_id="queued")).status == "queued"
        # The turn settles cleanly, but the host only reports idle a moment later.
        rx.runtime.on_turn(TurnEnded(TurnEnding.STOP))
        await rx.maintenance_pass()  # the flush found the host busy and skipped
        snapshot = rx.snapshot()
        assert (snapshot.phase, snapshot.stopped, snapshot.queued) == (Phase.IDLE, False, 1)
        assert rx.host.calls == []
        reply = await rx.sender("old", capabilities=LEGACY).send(message_id="old-1")
        assert (reply.ok, reply.status) == (False, "busy"), reply
        rx.host.idle = True
        await rx.maintenance_pass()  # the owed flush goes through now
        assert len(rx.host.calls) == 1
        assert (await capable.status("queued")).status == "submitted"
