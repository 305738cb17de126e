"""Fuzzing the receiver's bounded tables: many identities, interleaved, against small bounds.

The byte-stream fuzzer (``test_fuzz_endpoint.py``) runs with tables too large to fill, so it
never meets an eviction. This one drives a live receiving session whose tables are small (8 ids,
8 text digests, 6 finished rows, 3 rate buckets of 2 tokens) with interleavings of ten
authenticated identities: unscoped messages and messages under goal ids the receiver never granted
(``goal_not_authorized``: committed, no budget, no row), re-sent texts and re-used message ids,
status queries, and time moving by nothing, a little, or past the 30 s window — each conversation
written in random chunks. Every reply must be exactly the one
:class:`tests.receiver.tables_model.TablesModel` derives from the contract and the eviction rules of
``docs/security.md``, so a receiver that forgot the wrong sender's entry (a repeat admitted, a
fresh text refused, a status turned ``unknown``, a drained bucket refilled) fails the example.

``PI_XS_FUZZ_EXAMPLES`` scales it with the other fuzz tests: one interleaving per 25 of their
examples (at least 50), so 80 under ``make test``'s 2,000, 800 under ``make test-long`` and 8,000
under ``make fuzz``. Runs are derandomized.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Final

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import Registration
from pi_cross_session._internal.security.limits import MessageIdLedger, RateLimiter, TextDedup
from tests.hypothesis_profiles import scaled
from tests.receiver.live import converse, identity, parse_replies
from tests.receiver.model import Identity
from tests.receiver.strategies import CAPABILITY, encode, hello_obj, message_obj, status_obj
from tests.receiver.tables_model import TablesModel, Verdict
from tests.support.socket_peers import published_sender
from tests.support.wire_session import Receiver, running_receiver

pytestmark = pytest.mark.hostile

EXAMPLES: Final = max(50, int(os.environ.get("PI_XS_FUZZ_EXAMPLES", scaled(2000))) // 25)
#: Small bounds, so that every table fills and evicts all the time.
IDS, TEXTS, ROWS, SENDERS, CAPACITY, REFILL = 8, 8, 6, 3, 2, 0.25
IDENTITIES: Final = 10
TEXT_POOL: Final = tuple(f"text {n}" for n in range(10))
GOALS: Final = (None, None, "forged-goal", "forged-goal", "other-goal")
DELTAS: Final = (0.0,) * 6 + (0.5, 0.5, 2.0, 6.0, 31.0)
UNBOUNDED: Final = 10**7
_SCALE: Final = 1 << 16


@dataclass(frozen=True, slots=True)
class Step:
    """One connection: who, what, and how long after the previous one."""

    sender: int
    status_query: bool
    text: int
    #: -1: a new message id; k: the sender's k-th most recent id (a new one if it has none).
    reuse: int
    goal: str | None
    delta: float
    #: Where the stream is cut into writes, as fractions of its length.
    cuts: tuple[int, ...]


STEPS: Final = st.lists(
    st.builds(
        Step,
        # Half the connections come from three busy identities, the rest from any of the ten.
        sender=st.one_of(st.integers(0, 2), st.integers(0, IDENTITIES - 1)),
        status_query=st.integers(0, 5).map(lambda n: n == 0),
        text=st.integers(0, len(TEXT_POOL) - 1),
        reuse=st.integers(-3, 2).map(lambda n: max(n, -1)),
        goal=st.sampled_from(GOALS),
        delta=st.sampled_from(DELTAS),
        cuts=st.lists(st.integers(0, _SCALE), max_size=3).map(tuple),
    ),
    min_size=1,
    max_size=12,
)


@dataclass
class TableReceiver:
    """The receiver under test, the small tables it was given, and the model beside it."""

    portal: BlockingPortal
    receiver: Receiver
    target: Registration
    senders: list[Identity]
    model: TablesModel
    texts: TextDedup
    ids: MessageIdLedger
    rate: RateLimiter
    history: dict[int, list[str]] = field(default_factory=dict)
    examples: int = 0
    serial: int = 0
    replies: dict[str, int] = field(default_factory=dict)

    def run(self, step: Step) -> None:
        self.receiver.clock.advance(step.delta)
        now = self.receiver.clock.monotonic()
        sender = self.senders[step.sender]
        self.serial += 1
        mine = self.history.setdefault(step.sender, [])
        fresh = not 0 <= step.reuse < len(mine)
        message_id = f"m{self.serial}" if fresh else mine[-1 - step.reuse]
        if step.status_query:
            body = status_obj(request_id=f"s{self.serial}", message_id=message_id)
            want = self.model.status(sender.instance_id, message_id)
        else:
            text = TEXT_POOL[step.text]
            body = message_obj(
                request_id=f"r{self.serial}",
                message_id=message_id,
                text=text,
                sent_at=self.receiver.clock.wall_ms(),
            )
            if step.goal is not None:
                body = body.appended("goalId", step.goal)
            want = self.model.message(sender.instance_id, message_id, text, step.goal, now)
            if message_id not in mine:
                mine.append(message_id)
        hello = hello_obj(
            identity(self.target), sender=sender, request_id="h", capabilities=(CAPABILITY,)
        )
        stream = encode(hello) + b"\n" + encode(body) + b"\n"
        edges = sorted({0, len(stream), *(k * len(stream) // _SCALE for k in step.cuts)})
        chunks = [stream[a:b] for a, b in itertools.pairwise(edges)]
        calls = len(self.receiver.host.calls)
        got = [(r.ok, r.status, r.request_id) for r in parse_replies(converse(self.path, chunks))]
        assert got == [(True, "ready", "h"), (want.ok, want.status, body.get("requestId"))], (
            got,
            want,
            step,
        )
        self.replies[want.status] = self.replies.get(want.status, 0) + 1
        self._check_admission(want, calls)
        self._check_sizes()

    @property
    def path(self) -> str:
        return self.target.socket_path

    def _check_admission(self, want: Verdict, calls_before: int) -> None:
        calls = len(self.receiver.host.calls)
        assert calls == calls_before + (1 if want.admitted else 0)
        if want.admitted:
            self.portal.call(self.receiver.turns.settle_submissions)

    def _check_sizes(self) -> None:
        model = self.model
        assert len(self.ids) == len(model.ids.entries) <= IDS
        assert len(self.texts) == len(model.texts.entries) <= TEXTS
        assert len(self.rate) == len(model.rate.order) <= SENDERS
        snapshot = self.receiver.snapshot()
        rows = {(row.sender_instance_id, row.message_id) for row in snapshot.rows}
        assert rows == {entry.key for entry in model.rows.entries}
        assert snapshot.evicted_rows == model.rows.evicted_own + model.rows.evicted_foreign


@contextmanager
def table_receiver(locations: Locations) -> Iterator[TableReceiver]:
    texts = TextDedup(max_entries=TEXTS)
    ids = MessageIdLedger(max_entries=IDS)
    rate = RateLimiter(capacity=CAPACITY, refill_per_s=REFILL, max_senders=SENDERS)
    admission = {"texts": texts, "message_ids": ids, "rate": rate, "max_rows": ROWS}
    with (
        start_blocking_portal("asyncio") as portal,
        portal.wrap_async_context_manager(
            running_receiver(locations, budget=UNBOUNDED, admission=admission)
        ) as receiver,
    ):
        senders = [identity(published_sender(locations, f"id-{n}")) for n in range(IDENTITIES)]
        model = TablesModel.bounded(
            ids=IDS, texts=TEXTS, rows=ROWS, senders=SENDERS, capacity=CAPACITY, refill=REFILL
        )
        target = receiver.registration
        yield TableReceiver(portal, receiver, target, senders, model, texts, ids, rate)
        portal.call(receiver.endpoint_idle)


@pytest.fixture
def tables(locations: Locations) -> Iterator[TableReceiver]:
    with table_receiver(locations) as live:
        yield live


def test_fuzz_interleaved_identities_against_small_tables(tables: TableReceiver) -> None:
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )
    @given(steps=STEPS)
    def run(steps: list[Step]) -> None:
        tables.examples += 1
        for step in steps:
            tables.run(step)

    run()
    assert tables.examples >= EXAMPLES
    model = tables.model
    # The strategy reaches what it is for: every table evicted, for its own sender and for
    # another, and every verdict of step 11 came up.
    for table in (model.ids, model.texts, model.rows):
        assert table.evicted_own > 0
        assert table.evicted_foreign > 0
    assert set(tables.replies) >= {
        "submitted",
        "duplicate",
        "rate_limited",
        "goal_not_authorized",
        "unknown",
    }
