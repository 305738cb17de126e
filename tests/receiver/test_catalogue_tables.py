"""The hostile catalogue, bounded tables: named attacks that try to make a live receiver forget
another sender's state by filling a shared table (docs/security.md, "Bounded tables and who can
evict what").

Each case runs a real :class:`SessionRuntime` serving its real socket, with senders whose
registrations are published in this test's agent dir; the attackers are many throwaway identities
(one published registration each), the cheapest thing a same-user attacker has. Admission time is a
fake clock, so "29 s later" takes no wall time. Where a case names the real bound (512 digests and
ids) it uses it; the others use small overrides to stay quick.
"""

from __future__ import annotations

import pytest

from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.limits import MAX_CACHE_ENTRIES, RATE_CAPACITY
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.security.limits import MessageIdLedger, RateLimiter, TextDedup
from tests.goals.kit import GoalWireSender, goal_sender
from tests.receiver.talk import still_serving
from tests.support.wire_session import Receiver, assert_accounted, running_receiver

pytestmark = [pytest.mark.anyio, pytest.mark.hostile]

FORGED_GOAL = "forged-goal"


async def _flood(rx: Receiver, attackers: list[GoalWireSender], per_attacker: int) -> None:
    """Each attacker commits ``per_attacker`` fresh texts under a goal id that is not ours: every
    one is answered ``goal_not_authorized``, commits its id and digest, and spends no budget."""
    budget = rx.runtime.remaining_budget()
    for n in range(per_attacker):
        for attacker in attackers:
            reply = await attacker.send_goal(FORGED_GOAL, f"junk {n} from {attacker.instance_id}")
            assert reply.status == Code.GOAL_NOT_AUTHORIZED, reply
    assert rx.runtime.remaining_budget() == budget


async def test_throwaway_identities_with_forged_goal_ids_cannot_unsuppress_a_repeat(
    locations: Locations,
) -> None:
    """The tracker's attack at the real bounds: 36 identities commit 540 digests (more than the
    512 kept) within seconds; the victim's repeat inside its 30 s window stays a duplicate, and
    so does a reuse of its message id."""
    async with running_receiver(locations) as rx:
        victim = rx.sender("victim")
        assert (await victim.send("please deploy", message_id="v-1")).status == Code.SUBMITTED
        rx.turns.settle_submissions()
        attackers = [goal_sender(rx, f"sybil-{n}") for n in range(36)]
        await _flood(rx, attackers, per_attacker=15)
        assert MAX_CACHE_ENTRIES < 36 * 15
        rx.clock.advance(29)
        assert (await victim.send("please deploy")).status == Code.DUPLICATE
        assert (await victim.send("other words", message_id="v-1")).status == Code.DUPLICATE
        assert [d.message_id for d in rx.host.submitted] == ["v-1"]
        await still_serving(rx)
        assert_accounted(rx, all_final=True)


async def test_one_identity_flooding_the_tables_evicts_only_its_own_entries(
    locations: Locations,
) -> None:
    """One attacker, small tables: its own oldest digests and ids go, the victim's never do."""
    small = {"texts": TextDedup(max_entries=8), "message_ids": MessageIdLedger(max_entries=8)}
    async with running_receiver(locations, admission=small) as rx:
        victim = rx.sender("victim")
        assert (await victim.send("status please", message_id="v-1")).status == Code.SUBMITTED
        rx.turns.settle_submissions()
        attacker = goal_sender(rx, "mallory")
        await _flood(rx, [attacker], per_attacker=RATE_CAPACITY - 1)
        assert (await victim.send("status please")).status == Code.DUPLICATE
        assert (await victim.send("new words", message_id="v-1")).status == Code.DUPLICATE
        # The attacker's first message is forgotten (its own entries made room): a repeat of it
        # is judged afresh.
        first = f"junk 0 from {attacker.instance_id}"
        assert (await attacker.send_goal(FORGED_GOAL, first)).status == Code.GOAL_NOT_AUTHORIZED
        assert_accounted(rx, all_final=True)


async def test_one_senders_admissions_never_turn_another_senders_status_unknown(
    locations: Locations,
) -> None:
    async with running_receiver(locations, admission={"max_rows": 4}) as rx:
        victim, mallory = rx.sender("victim"), rx.sender("mallory")
        assert (await victim.send(message_id="v-1")).status == Code.SUBMITTED
        rx.turns.settle_submissions()
        for _ in range(12):
            assert (await mallory.send()).status == Code.SUBMITTED
            rx.turns.settle_submissions()
        assert (await victim.status("v-1")).status == Code.DELIVERED  # not unknown
        snapshot = rx.snapshot()
        assert len(snapshot.rows) == 4
        assert snapshot.evicted_rows == 13 - 4


async def test_churning_identities_does_not_refill_a_drained_rate_bucket(
    locations: Locations,
) -> None:
    """A sender out of tokens stays out while fresh identities churn the tracked senders: what is
    forgotten is the bucket lacking the fewest tokens, never the drained one."""
    async with running_receiver(locations, admission={"rate": RateLimiter(max_senders=4)}) as rx:
        drained = goal_sender(rx, "drained")
        for n in range(RATE_CAPACITY):
            reply = await drained.send_goal(FORGED_GOAL, f"spend {n}")
            assert reply.status == Code.GOAL_NOT_AUTHORIZED
        assert (await drained.send_goal(FORGED_GOAL, "one more")).status == Code.RATE_LIMITED
        churn = [goal_sender(rx, f"churn-{n}") for n in range(12)]
        await _flood(rx, churn, per_attacker=1)
        assert (await drained.send_goal(FORGED_GOAL, "and now?")).status == Code.RATE_LIMITED
        await still_serving(rx)
