"""Admission under random interleavings of wire frames, host events, time and the local user.

The host events drive the session's turn tracker, as a host adapter reports them (preparing,
abandoned, started, opened by, our message started, model replied, aborted, ended), and admission
reads it. The machine keeps its own model of what the contract allows (spec §5): which ids and
texts each sender had admitted and when, each sender's token bucket, the budget. Every arrival is
answered by an oracle that applies the pipeline in order, using only the receiver's public gate
predicates (:meth:`Admission.can_submit`, :meth:`Admission.can_queue`) for the host-dependent step
8. The invariants then check the state table after every step.

``PI_XS_STATEFUL_EXAMPLES`` sets the number of examples (default: 400 in ``make test``, ten times
that under the ``long`` hypothesis profile).
"""

from __future__ import annotations

import os

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from pi_cross_session._internal.protocol.bridge import BRIDGE_PREFIX
from pi_cross_session._internal.protocol.codes import ROW_STATES, Code
from pi_cross_session._internal.protocol.frames import Response
from pi_cross_session._internal.security.admission import (
    FINAL_STATES,
    Admission,
    Delivery,
    Phase,
    Row,
    Snapshot,
)
from pi_cross_session._internal.security.auth import Caller
from pi_cross_session._internal.security.provenance import Provenance
from pi_cross_session._internal.security.turns import ModelReplied, TurnEnding
from tests.hypothesis_profiles import scaled
from tests.support.admission_kit import (
    Kit,
    bridge_text,
    caller,
    check_reply,
    registration,
    status_query,
)

EXAMPLES = int(os.environ.get("PI_XS_STATEFUL_EXAMPLES", scaled(400)))

CAPACITY = 30
REFILL_PER_S = 0.5
WINDOW_S = 30.0

SENDERS: dict[str, Caller] = {
    "alice": caller("alice"),
    "bob": caller("bob"),
    "legacy": caller("legacy", capable=False),
}
TEXTS = ("A", "B", "C", "a longer text\nwith two lines")
BLANKS = (" ", "\ufeff", "\u3000\n\t")
#: sentAt offsets around both edges of the window (ms before now; negative is in the future).
AGES = (0, 1_000, 20_000, 29_999, 30_000, 30_001, 90_000, -4_999, -5_000, -5_001)
#: Dyadic steps keep every sum exact, so the bucket model and the code agree to the last bit.
SMALL_STEPS = (0.25, 0.5, 1.0, 2.0, 4.75, 5.0)
LARGE_STEPS = (10.0, 29.5, 30.0, 31.0, 120.0)
NAMES = sorted(SENDERS)
INSTANCE = {name: registration(name).instance_id for name in SENDERS}

#: Clean ends are the common case; every unsafe one is still drawn.
ENDINGS = (TurnEnding.STOP,) * 4 + tuple(e for e in TurnEnding if e is not TurnEnding.STOP)

OK_COMMITS = frozenset({Code.SUBMITTED, Code.QUEUED, Code.INJECTION_FAILED})


class AdmissionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.kit = Kit()

    @initialize(
        budget=st.sampled_from([256, 256, 256, 256, 256, 8, 0]),
        max_queued=st.sampled_from([50, 50, 3]),
        in_a_user_turn=st.booleans(),
    )
    def start(self, budget: int, max_queued: int, in_a_user_turn: bool) -> None:
        self.kit = Kit(budget=budget, max_queued=max_queued, on_row=self._on_row)
        self.history: dict[tuple[str, str], list[str]] = {}
        if in_a_user_turn:  # half the runs start busy, so queueing is common
            self.kit.turn_started(Provenance.USER)
        self.kit.host.before_submit = self._on_submit
        self.initial_budget = budget
        self.max_queued = max_queued
        self.context: str | None = None
        self.submits_in_call = 0
        self.serial = 0
        # The model.
        self.committed: dict[tuple[str, str], str] = {}
        self.sent_ids: dict[str, list[str]] = {name: [] for name in SENDERS}
        self.admitted_ids: dict[str, set[str]] = {name: set() for name in SENDERS}
        self.commit_times: dict[str, list[float]] = {name: [] for name in SENDERS}
        self.text_last: dict[tuple[str, str], float] = {}
        self.bucket: dict[str, tuple[float, float]] = {}
        self.finals: dict[tuple[str, str], str] = {}
        self.flush_due = False
        self.shut_down = False
        self.fail_next = False
        self.violations: list[str] = []

    # -- helpers ---------------------------------------------------------------------------------

    @property
    def admission(self) -> Admission:
        return self.kit.admission

    def now(self) -> float:
        return self.kit.clock.monotonic()

    def _on_submit(self, delivery: Delivery) -> None:
        # Admission turns any exception from the host into injection_failed, so a violation seen
        # here is recorded and asserted afterwards instead of raised.
        checks = (
            (self.context in ("admit", "flush"), "submit outside an admission or a flush"),
            (not self.admission.stopped, "submitted while latched"),
            (not self.shut_down, "submitted after shutdown"),
            (self.kit.host.idle, "submitted while the host was busy"),
            # The expected turn is registered before the host is called (preflight), and no
            # turn may be running.
            (self.admission.phase is Phase.PREFLIGHT, "submitted outside its own preflight"),
            (not self.admission.can_queue(), "submitted during a running turn"),
            (self.submits_in_call == 0, "more than one submission in one call"),
        )
        self.violations.extend(message for ok, message in checks if not ok)
        self.kit.host.failure = RuntimeError("host refused") if self.fail_next else None
        self.fail_next = False
        self.submits_in_call += 1

    def _on_row(self, row: Row) -> None:
        """Every change the receiver reports: born ``accepted``, never out of a final state (a
        final row may still change its diagnostic). Recorded rather than raised, because
        admission never lets an observer's exception out; the invariant asserts."""
        states = self.history.setdefault((row.sender_name, row.message_id), [])
        if not states and row.state != Code.ACCEPTED:
            self.violations.append(f"{row.message_id} was born {row.state}")
        if states and states[-1] in FINAL_STATES and row.state != states[-1]:
            self.violations.append(f"{row.message_id} left {states[-1]}")
        states.append(row.state)

    def _tokens(self, name: str) -> float:
        if name not in self.bucket:
            return float(CAPACITY)
        tokens, stamp = self.bucket[name]
        return min(float(CAPACITY), tokens + max(0.0, self.now() - stamp) * REFILL_PER_S)

    def _text_is_fresh_duplicate(self, name: str, text: str) -> bool:
        last = self.text_last.get((name, text))
        return last is not None and self.now() - last < WINDOW_S

    def _expected(
        self, snap: Snapshot, name: str, kind: str, text: str, message_id: str, age: int
    ) -> set[str]:
        """The pipeline of spec §5, in order, as the set of acceptable answers."""
        if kind == "blank":
            return {Code.INVALID_MESSAGE}
        if self.kit.inbound != "accept":
            return {Code.REFUSED}
        if snap.stopped or snap.shut_down:
            return {Code.STOPPED}
        if age > 30_000 or age < -5_000:
            return {Code.EXPIRED}
        if kind == "bad_bridge":
            return {Code.INVALID_BRIDGE}
        if kind == "bridge":
            return {Code.UNSUPPORTED}
        # Older messages waiting for their flush are never overtaken (our FIFO rule).
        can_submit = self.admission.can_submit() and not snap.queued
        if not can_submit and not (SENDERS[name].can_queue and self.admission.can_queue()):
            return {Code.BUSY}
        if snap.queued >= self.max_queued:
            return {Code.QUEUE_FULL}
        if snap.remaining_budget <= 0:
            return {Code.BUDGET_EXHAUSTED}
        if message_id in self.admitted_ids[name] or self._text_is_fresh_duplicate(name, text):
            return {Code.DUPLICATE}
        if self._tokens(name) < 1.0:
            return {Code.RATE_LIMITED}
        if can_submit:
            return {Code.INJECTION_FAILED if self.fail_next else Code.SUBMITTED}
        return {Code.QUEUED}

    def _arrive(self, name: str, kind: str, text: str, age: int, reuse: int | None) -> Response:
        if kind == "blank":
            text = BLANKS[len(text) % len(BLANKS)]
        elif kind == "fresh":
            self.serial += 1
            text = f"fresh text {self.serial}"
        elif kind == "bridge":
            text = bridge_text(self.kit.clock.wall_ms())
        elif kind == "bad_bridge":
            text = BRIDGE_PREFIX + '{"version": 2}'
        used = self.sent_ids[name]
        if reuse is not None and used:
            message_id = used[reuse % len(used)]
        else:
            self.serial += 1
            message_id = f"id{self.serial}"
            used.append(message_id)
        # Expire what is due first, as the runtime's maintenance does on time, so the model sees
        # the queue admission will see.
        self.admission.tick()
        snap = self.admission.snapshot()
        expected = self._expected(snap, name, kind, text, message_id, age)

        budget_before = self.kit.budget.remaining
        rows_before = snap.rows
        attempts_before = self.kit.host.attempts
        msg = self.kit.message(text, age_ms=age, message_id=message_id)
        self.context, self.submits_in_call = "admit", 0
        reply = self.admission.admit(SENDERS[name], msg)
        self.context = None
        check_reply(reply, request_id=msg.request_id)
        assert reply.status in expected, (reply.status, expected)
        event(f"reply {reply.status}")

        if reply.status in OK_COMMITS:
            self._commit(name, text, message_id, reply.status)
            assert self.kit.budget.remaining == budget_before - 1
            row = self.kit.row(name, message_id)
            assert row is not None
            assert row.state == reply.status
            calls = 0 if reply.status == Code.QUEUED else 1
            assert self.kit.host.attempts == attempts_before + calls
            assert not (reply.status == Code.QUEUED and not SENDERS[name].can_queue)
        else:
            assert self.kit.budget.remaining == budget_before, "a refusal changed the budget"
            # Time may expire queued rows on the way in; nothing else may change.
            after = {
                (r.sender_instance_id, r.message_id): r for r in self.admission.snapshot().rows
            }
            for before in rows_before:
                now_row = after[(before.sender_instance_id, before.message_id)]
                if now_row != before:
                    assert (before.state, now_row.state) == (Code.QUEUED, Code.EXPIRED), (
                        "a refusal changed the rows"
                    )
            assert self.kit.host.attempts == attempts_before, "a refusal reached the host"
        return reply

    def _commit(self, name: str, text: str, message_id: str, status: str) -> None:
        now = self.now()
        assert message_id not in self.admitted_ids[name], "a repeated id was admitted"
        assert not self._text_is_fresh_duplicate(name, text), "a repeated text was admitted"
        self.admitted_ids[name].add(message_id)
        self.text_last[(name, text)] = now
        self.bucket[name] = (self._tokens(name) - 1.0, now)
        times = self.commit_times[name]
        times.append(now)
        # A token bucket: over any span, at most the burst plus what refilled during it.
        # ``times`` is ascending (the clock never steps back): from times[i] to now there were
        # len(times) - i commits.
        for index, start in enumerate(times):
            in_span = len(times) - index
            assert in_span <= CAPACITY + REFILL_PER_S * (now - start), "rate bound broken"
        self.committed[(name, message_id)] = status

    # -- wire ------------------------------------------------------------------------------------

    @rule(
        name=st.sampled_from(NAMES),
        kind=st.sampled_from(("pool", "pool", "fresh")),
        text=st.sampled_from(TEXTS),
        age=st.sampled_from(AGES),
    )
    def arrive(self, name: str, kind: str, text: str, age: int) -> None:
        """A message with a new id: text from a small pool (so often repeated) or fresh."""
        self._arrive(name, kind, text, age, None)

    @rule(name=st.sampled_from(NAMES), text=st.sampled_from(TEXTS), reuse=st.integers(0, 50))
    def arrive_with_an_old_id(self, name: str, text: str, reuse: int) -> None:
        """A message reusing one of this sender's ids (admitted or refused before)."""
        self._arrive(name, "pool", text, 0, reuse)

    @rule(
        name=st.sampled_from(NAMES),
        kind=st.sampled_from(("blank", "bridge", "bad_bridge")),
        age=st.sampled_from(AGES),
    )
    def arrive_odd(self, name: str, kind: str, age: int) -> None:
        """A blank text, a valid bridge envelope or an invalid one."""
        self._arrive(name, kind, "", age, None)

    @precondition(
        lambda self: (
            self.kit.inbound == "accept"
            and not self.admission.stopped
            and not self.shut_down
            and self.admission.can_queue()
        )
    )
    @rule(name=st.sampled_from(NAMES), count=st.integers(5, 40))
    def burst(self, name: str, count: int) -> None:
        """A chatty sender: many fresh messages at one instant (reaches rate and queue bounds)."""
        for _ in range(count):
            self._arrive(name, "fresh", "", 0, None)

    @rule(name=st.sampled_from(NAMES), asker=st.sampled_from(NAMES), pick=st.integers(0, 50))
    def status(self, name: str, asker: str, pick: int) -> None:
        """``asker`` queries one of ``name``'s message ids: its own rows only, for free."""
        used = self.sent_ids[name]
        message_id = used[pick % len(used)] if used else "never-sent"
        before = (self.kit.budget.remaining, self.admission.snapshot())
        tokens = {n: self.kit.rate.tokens(INSTANCE[n], self.now()) for n in SENDERS}
        query = status_query(message_id)
        reply = self.admission.status(SENDERS[asker], query)
        check_reply(reply, request_id=query.request_id)
        assert reply.ok
        row = self.kit.row(asker, message_id)
        if row is None:
            assert reply.status == Code.UNKNOWN
        else:
            assert reply.status == row.state
            assert reply.error == row.diagnostic
        if asker != name and (asker, message_id) not in self.committed:
            assert reply.status == Code.UNKNOWN
        assert (self.kit.budget.remaining, self.admission.snapshot()) == before
        assert tokens == {n: self.kit.rate.tokens(INSTANCE[n], self.now()) for n in SENDERS}

    # -- time ------------------------------------------------------------------------------------

    @rule(seconds=st.sampled_from(SMALL_STEPS + SMALL_STEPS + LARGE_STEPS))
    def advance(self, seconds: float) -> None:
        self.kit.clock.advance(seconds)

    @rule()
    def tick(self) -> None:
        attempts = self.kit.host.attempts
        self.admission.tick()
        assert self.kit.host.attempts == attempts
        deadline = self.admission.next_deadline()
        assert deadline is None or deadline > self.now()

    # -- host ------------------------------------------------------------------------------------

    @rule()
    def turn_preparing(self) -> None:
        self.kit.turn_preparing()

    @rule()
    def turn_abandoned(self) -> None:
        """The prompt being prepared was a slash command after all."""
        self.kit.turn_not_started()

    @rule(source=st.sampled_from(list(Provenance)))
    def turn_opened(self, source: Provenance) -> None:
        """A message opening the running turn says who started it (ignored outside one)."""
        self.kit.turn_identified(source)

    @rule()
    def model_replied(self) -> None:
        """The model's first reply: the running turn's provenance is settled."""
        self.kit.turns.handle(ModelReplied())

    @rule(source=st.sampled_from(list(Provenance)))
    def turn_started(self, source: Provenance) -> None:
        self.kit.turn_started(source)
        assert self.admission.phase is Phase.BUSY

    @precondition(lambda self: self.admission.phase is Phase.PREFLIGHT)
    @rule()
    def our_turn_starts(self) -> None:
        """The usual answer to our submission: the host starts a turn and cannot say whose."""
        self.kit.turn_started(Provenance.UNKNOWN)

    @rule(pick=st.integers(0, 300))
    def message_started(self, pick: int) -> None:
        if not self.committed:
            return
        name, message_id = sorted(self.committed)[pick % len(self.committed)]
        self.kit.message_started(message_id, INSTANCE[name])

    @rule(ending=st.sampled_from(ENDINGS), flush_at_once=st.booleans())
    def turn_ended(self, ending: TurnEnding, flush_at_once: bool) -> None:
        """A turn settles; when it asks for a flush the runtime does it now or a bit later."""
        queued = self.admission.snapshot().queued
        due = self.kit.turn_ended(ending)
        snap = self.admission.snapshot()
        if due:
            assert ending is TurnEnding.STOP
            assert queued > 0
            assert not snap.stopped
        if ending is not TurnEnding.STOP:
            assert snap.stopped, "an unsafe ending did not latch"
            assert snap.queued == 0
        self.flush_due = due
        event(f"turn_ended {ending} -> {due}")
        if due and flush_at_once:
            self.runtime_flushes()

    @precondition(lambda self: self.admission.can_queue() and self.admission.snapshot().queued)
    @rule(flush_at_once=st.booleans())
    def known_turn_stops_with_a_queue(self, flush_at_once: bool) -> None:
        """The path to a flush, made common: a queueable turn with a queue ends cleanly."""
        self.turn_ended(TurnEnding.STOP, flush_at_once)

    @precondition(lambda self: self.flush_due)
    @rule()
    def runtime_flushes(self) -> None:
        """What the runtime does on the next loop turn after ``turn_ended`` returned True."""
        self.flush_due = False
        before = self.admission.snapshot()
        waiting = [(r.sender_name, r.message_id) for r in before.rows if r.state == Code.QUEUED]
        could_submit = self.admission.can_submit() and not before.stopped
        attempts = self.kit.host.attempts
        self.context, self.submits_in_call = "flush", 0
        row = self.admission.flush_one()
        self.context = None
        assert self.kit.host.attempts - attempts <= 1, "more than one submission per flush"
        live = [key for key in waiting if self.kit.state(*key) != Code.EXPIRED]
        event(f"flush {'none' if row is None else row.state}")
        if row is None:
            assert self.kit.host.attempts == attempts
            assert not (could_submit and live), "a safe flush with live entries submitted nothing"
        else:
            assert self.kit.host.attempts == attempts + 1
            assert row.state in (Code.SUBMITTED, Code.INJECTION_FAILED)
            assert (row.sender_name, row.message_id) == live[0], "not the oldest live entry"

    @rule(now=st.sampled_from([False] * 3 + [True]))
    def turn_aborted(self, now: bool) -> None:
        """The running turn's abort signal fires (1 draw in 4 acts: the latch is not the norm)."""
        if not now:
            return
        self.kit.turn_aborted()
        snap = self.admission.snapshot()
        assert snap.stopped
        assert snap.queued == 0

    @rule(what=st.sampled_from(["fail_next_submit", "host_idle", "inbound"]))
    def perturb(self, what: str) -> None:
        """The host's next submit throws, the host flips idle/busy, or the policy flips."""
        host = self.kit.host
        if what == "fail_next_submit":
            self.fail_next = True
        elif what == "host_idle":
            host.idle = not host.idle
        else:
            self.kit.inbound = "refuse" if self.kit.inbound == "accept" else "accept"

    # -- local user ------------------------------------------------------------------------------

    @rule()
    def resume(self) -> None:
        budget = self.kit.budget.remaining
        outcome = self.admission.resume()
        snap = self.admission.snapshot()
        assert snap.remaining_budget == budget, "resume changed the budget"
        if outcome.reopened:
            assert not snap.stopped
            assert snap.queued == 0
            assert snap.phase is Phase.IDLE
        else:
            assert outcome.reason
            assert outcome.dropped == 0

    @rule(now=st.sampled_from([False] * 9 + [True]))
    def shutdown(self, now: bool) -> None:
        """Rare (1 draw in 10 acts): everything after it is refused."""
        if not now:
            return
        self.admission.shutdown()
        self.shut_down = True
        assert self.admission.snapshot().queued == 0

    # -- invariants ------------------------------------------------------------------------------

    @invariant()
    def the_state_table_holds(self) -> None:
        assert not self.violations, self.violations
        snap = self.admission.snapshot()
        # The budget: bounded, and spent exactly once per commit (so never by a refusal).
        assert 0 <= snap.remaining_budget <= 256
        assert snap.remaining_budget == self.initial_budget - len(self.committed)
        assert snap.admitted == len(self.committed)
        # The queue: bounded, mirrored by the rows, emptied by the latch and by shutdown.
        assert snap.queued <= self.max_queued <= 50
        assert snap.queued == sum(1 for row in snap.rows if row.state == Code.QUEUED)
        if snap.stopped or snap.shut_down:
            assert snap.queued == 0
        # Exactly one row per committed message, in a row state, never left in "accepted".
        assert snap.evicted_rows == 0
        assert len(snap.rows) == len(self.committed)
        assert {(row.sender_name, row.message_id) for row in snap.rows} == set(self.committed)
        for row in snap.rows:
            assert row.state in ROW_STATES
            assert row.state != Code.ACCEPTED, "a row stayed in the transient state"
            # A final state is never left.
            key = (row.sender_name, row.message_id)
            if key in self.finals:
                assert row.state == self.finals[key], f"{key} left {self.finals[key]}"
            elif row.state in FINAL_STATES:
                self.finals[key] = row.state
        # Shutdown is for good.
        if self.shut_down:
            assert snap.shut_down
            assert self.admission.next_deadline() is None


AdmissionMachine.TestCase.settings = settings(max_examples=EXAMPLES, stateful_step_count=40)
TestAdmissionMachine = AdmissionMachine.TestCase
