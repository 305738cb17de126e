"""The mirror's book of other machines' sessions (security/remote/records.py): which signed record
of each session is current, how tombstones and the TTL end one, and how much it may hold."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from pi_cross_session._internal.protocol.remote.envelope import PeerRecord, Tombstone
from pi_cross_session._internal.security.remote.records import Key, Offer, RecordBook
from tests.hypothesis_profiles import scaled

NOW_MS = 1_700_000_000_000
TTL_S = 30.0
AHEAD_S = 5.0
#: How long after a session's newest envelope was signed its sequence must still be remembered:
#: until then a record signed before it could still pass the verifier's clock check.
REMEMBER_MS = int((TTL_S + AHEAD_S) * 1000)
IID = "a" * 32
OTHER_IID = "b" * 32


def record(seq: int, instance_id: str = IID, *, status: str = "idle") -> PeerRecord:
    return PeerRecord(
        seq=seq,
        id=f"session-{seq}",
        instance_id=instance_id,
        name="alice",
        cwd="/w",
        status=status,  # type: ignore[arg-type]
        inbound="accept",
        started_at=1,
        updated_at=seq,
        capabilities=[],
    )


def stone(seq: int, instance_id: str = IID) -> Tombstone:
    return Tombstone(seq=seq, instance_id=instance_id)


def book(*, per_machine: int = 16, total: int = 64) -> RecordBook:
    return RecordBook(ttl_s=TTL_S, per_machine=per_machine, total=total, ahead_s=AHEAD_S)


def iid(number: int) -> str:
    return f"{number:032x}"


# -- sequences -------------------------------------------------------------------------------------


def test_a_newer_record_replaces_the_held_one() -> None:
    b = book()
    assert b.offer("laptop", NOW_MS, record(1), 0.0) is Offer.NEW
    assert b.offer("laptop", NOW_MS + 1, record(2, status="busy"), 1.0) is Offer.UPDATED
    assert b.get(("laptop", IID)) == record(2, status="busy")
    assert b.seq(("laptop", IID)) == 2
    assert b.seen(("laptop", IID)) == 1.0
    assert len(b) == 1
    assert list(b.items()) == [(("laptop", IID), record(2, status="busy"))]


@pytest.mark.parametrize("seq", [5, 4, 0])
def test_an_equal_or_older_sequence_is_stale(seq: int) -> None:
    b = book()
    b.offer("laptop", NOW_MS, record(5), 0.0)
    assert b.offer("laptop", NOW_MS + 1, record(seq, status="busy"), 1.0) is Offer.STALE
    assert b.get(("laptop", IID)) == record(5)
    assert b.seen(("laptop", IID)) == 0.0


def test_a_tombstone_removes_and_no_older_record_brings_the_session_back() -> None:
    b = book()
    key = ("laptop", IID)
    b.offer("laptop", NOW_MS, record(1), 0.0)
    b.offer("laptop", NOW_MS, record(2), 1.0)
    assert b.offer("laptop", NOW_MS, stone(3), 2.0) is Offer.REMOVED
    assert (b.get(key), b.seen(key), len(b)) == (None, None, 0)
    # Captured earlier and written back into the bucket: refused, as is the tombstone again.
    for replay in (record(2), record(1), record(3)):
        assert b.offer("laptop", NOW_MS, replay, 3.0) is Offer.STALE
    assert b.offer("laptop", NOW_MS, stone(3), 3.0) is Offer.STALE
    assert b.get(key) is None
    assert (b.seq(key), b.remembered()) == (3, 1)
    # Its own machine publishing it again, later, is another matter.
    assert b.offer("laptop", NOW_MS, record(4), 4.0) is Offer.NEW
    assert b.get(key) == record(4)


def test_a_tombstone_for_a_session_not_held_is_noted_and_remembered() -> None:
    b = book()
    key = ("laptop", IID)
    assert b.offer("laptop", NOW_MS, stone(7), 0.0) is Offer.NOTED
    assert (b.seq(key), len(b), b.remembered()) == (7, 0, 1)
    assert b.offer("laptop", NOW_MS, record(6), 1.0) is Offer.STALE
    assert b.get(key) is None
    assert b.offer("laptop", NOW_MS, record(8), 1.0) is Offer.NEW


def test_nothing_but_a_tombstone_of_its_own_machine_removes_a_record() -> None:
    """A delete or purge nobody signed is no offer at all: the book has no way to take one."""
    assert not [
        name
        for name in ("delete", "remove", "discard", "pop", "purge", "clear", "__delitem__")
        if hasattr(RecordBook, name)
    ]
    b = book()
    key = ("laptop", IID)
    b.offer("laptop", NOW_MS, record(5), 0.0)
    # Another machine cannot end the laptop's session, even under the same instance id.
    assert b.offer("desk", NOW_MS, stone(99), 1.0) is Offer.NOTED
    assert b.offer("laptop", NOW_MS, stone(2, OTHER_IID), 1.0) is Offer.NOTED
    assert b.offer("laptop", NOW_MS, stone(5), 1.0) is Offer.STALE
    assert b.expire(TTL_S, NOW_MS + 10 * REMEMBER_MS) == []
    assert b.get(key) == record(5)
    assert b.offer("laptop", NOW_MS, stone(6), 1.0) is Offer.REMOVED
    assert b.get(key) is None


# -- time ------------------------------------------------------------------------------------------


def test_the_ttl_ends_a_record_not_refreshed() -> None:
    b = book()
    laptop, desk = ("laptop", IID), ("desk", IID)
    b.offer("laptop", NOW_MS, record(1), 100.0)
    b.offer("desk", NOW_MS, record(1), 100.0)
    b.offer("desk", NOW_MS + 20_000, record(2), 120.0)
    assert b.expire(100.0 + TTL_S, NOW_MS + 30_000) == []
    assert b.expire(100.5 + TTL_S, NOW_MS + 30_500) == [laptop]
    assert b.expire(100.5 + TTL_S, NOW_MS + 30_500) == []  # told once
    assert (b.get(laptop), b.seen(laptop)) == (None, None)
    assert b.get(desk) == record(2)
    assert b.expire(120.5 + TTL_S, NOW_MS + 50_500) == [desk]
    assert len(b) == 0


def test_a_paused_machines_records_are_held_until_it_is_read_again() -> None:
    b = book()
    laptop, desk = ("laptop", IID), ("desk", IID)
    b.offer("laptop", NOW_MS, record(1), 100.0)
    b.offer("desk", NOW_MS, record(1), 100.0)
    later = 100.5 + TTL_S
    assert b.expire(later, NOW_MS + 30_500, held={"laptop"}) == [desk]
    assert b.get(laptop) == record(1)
    # Listened to again: its records end as they would have, unless read afresh.
    assert b.expire(later, NOW_MS + 30_500) == [laptop]


def test_a_replayed_record_does_not_keep_its_session_alive() -> None:
    b = book()
    key = ("laptop", IID)
    b.offer("laptop", NOW_MS, record(1), 0.0)
    assert b.offer("laptop", NOW_MS, record(1), 20.0) is Offer.STALE
    assert b.seen(key) == 0.0
    assert b.expire(TTL_S + 1, NOW_MS + 31_000) == [key]


def test_a_sequence_is_remembered_until_an_older_record_could_no_longer_pass() -> None:
    b = book()
    key = ("laptop", IID)
    at = NOW_MS - 2_000  # signed a little before it arrived: the signature's time counts
    b.offer("laptop", NOW_MS - 10_000, record(1), 0.0)
    b.offer("laptop", at, stone(2), 1.0)
    for now_ms in (NOW_MS, at + REMEMBER_MS - 1, at + REMEMBER_MS):
        assert b.expire(1.0, now_ms) == []
        assert b.seq(key) == 2
        assert b.offer("laptop", NOW_MS - 10_000, record(1), 1.0) is Offer.STALE
    assert b.expire(1.0, at + REMEMBER_MS + 1) == []
    assert (b.seq(key), b.remembered()) == (None, 0)


def test_a_live_record_is_never_forgotten_by_the_wall_clock_alone() -> None:
    b = book()
    key = ("laptop", IID)
    b.offer("laptop", NOW_MS, record(3), 0.0)
    assert b.expire(TTL_S, NOW_MS + 100 * REMEMBER_MS) == []
    assert (b.get(key), b.seq(key)) == (record(3), 3)


def test_a_record_ended_by_the_ttl_is_remembered_from_its_signature() -> None:
    b = book()
    key = ("laptop", IID)
    b.offer("laptop", NOW_MS, record(3), 0.0)
    assert b.expire(TTL_S + 1, NOW_MS + REMEMBER_MS) == [key]
    assert b.seq(key) == 3
    assert b.offer("laptop", NOW_MS, record(2), TTL_S + 1) is Offer.STALE
    assert b.expire(TTL_S + 2, NOW_MS + REMEMBER_MS + 1) == []
    assert b.seq(key) is None


# -- bounds ----------------------------------------------------------------------------------------


def test_one_machine_filling_its_share_does_not_stop_another() -> None:
    b = book(per_machine=2, total=10)
    assert [b.offer("laptop", NOW_MS, record(1, iid(n)), 0.0) for n in range(3)] == [
        Offer.NEW,
        Offer.NEW,
        Offer.FULL,
    ]
    assert b.ignored == 1
    assert b.get(("laptop", iid(2))) is None
    assert b.offer("desk", NOW_MS, record(1, iid(2)), 0.0) is Offer.NEW
    # A full share still takes newer records of the sessions it holds.
    assert b.offer("laptop", NOW_MS, record(2, iid(0)), 1.0) is Offer.UPDATED
    assert b.ignored == 1


def test_the_whole_book_is_bounded_too() -> None:
    b = book(per_machine=3, total=4)
    for n in range(3):
        assert b.offer("laptop", NOW_MS, record(1, iid(n)), 0.0) is Offer.NEW
    assert b.offer("desk", NOW_MS, record(1, iid(0)), 0.0) is Offer.NEW
    assert b.offer("desk", NOW_MS, record(1, iid(1)), 0.0) is Offer.FULL
    assert b.offer("server", NOW_MS, record(1, iid(0)), 0.0) is Offer.FULL
    assert (b.ignored, len(b), b.remembered()) == (2, 4, 4)


def test_remembered_sequences_take_room_and_give_it_back_when_forgotten() -> None:
    b = book(per_machine=2, total=10)
    assert b.offer("laptop", NOW_MS, stone(1, iid(0)), 0.0) is Offer.NOTED
    assert b.offer("laptop", NOW_MS, stone(1, iid(1)), 0.0) is Offer.NOTED
    # No room to remember a third: it is noted all the same, and not kept.
    assert b.offer("laptop", NOW_MS, stone(1, iid(2)), 0.0) is Offer.NOTED
    assert b.seq(("laptop", iid(2))) is None
    assert b.offer("laptop", NOW_MS, record(2, iid(3)), 0.0) is Offer.FULL
    b.expire(1.0, NOW_MS + REMEMBER_MS + 1)
    assert b.remembered() == 0
    assert b.offer("laptop", NOW_MS + REMEMBER_MS, record(2, iid(3)), 1.0) is Offer.NEW


@pytest.mark.parametrize(
    "bounds",
    [{"per_machine": 0}, {"total": 0}, {"ttl_s": 0.0}, {"ttl_s": -1.0}],
)
def test_bounds_must_be_positive(bounds: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="positive"):
        RecordBook(**bounds)  # type: ignore[arg-type]


# -- a machine no longer trusted -------------------------------------------------------------------


def test_forgetting_a_machine_drops_all_it_held_and_names_its_live_sessions() -> None:
    b = book(per_machine=3, total=10)
    b.offer("laptop", NOW_MS, record(4, iid(0)), 0.0)
    b.offer("laptop", NOW_MS, record(2, iid(1)), 0.0)
    b.offer("laptop", NOW_MS, stone(9, iid(2)), 0.0)  # remembered, not live
    b.offer("desk", NOW_MS, record(1, iid(0)), 0.0)
    assert (len(b), b.remembered()) == (3, 4)
    assert sorted(b.forget("laptop")) == [("laptop", iid(0)), ("laptop", iid(1))]
    assert (len(b), b.remembered()) == (1, 1)
    for n in range(3):
        assert (b.get(("laptop", iid(n))), b.seq(("laptop", iid(n)))) == (None, None)
    assert list(b.items()) == [(("desk", iid(0)), record(1, iid(0)))]
    assert b.forget("laptop") == []


def test_a_machine_trusted_again_starts_afresh() -> None:
    """Its sequences went with it (time alone refuses its older records); its share is free."""
    b = book(per_machine=2, total=10)
    b.offer("laptop", NOW_MS, record(5, iid(0)), 0.0)
    b.offer("laptop", NOW_MS, stone(5, iid(1)), 0.0)
    assert b.offer("laptop", NOW_MS, record(1, iid(2)), 0.0) is Offer.FULL
    b.forget("laptop")
    assert b.offer("laptop", NOW_MS, record(1, iid(0)), 1.0) is Offer.NEW
    assert b.offer("laptop", NOW_MS, record(1, iid(2)), 1.0) is Offer.NEW
    assert b.offer("laptop", NOW_MS, record(1, iid(3)), 1.0) is Offer.FULL


def test_forgetting_a_machine_never_held_changes_nothing() -> None:
    b = book()
    b.offer("desk", NOW_MS, record(1), 0.0)
    assert b.forget("laptop") == []
    assert b.forget("des") == []  # a prefix of a name held is another machine
    assert (b.get(("desk", IID)), b.remembered()) == (record(1), 1)


# -- any interleaving ------------------------------------------------------------------------------

MACHINES = ("a", "b", "c")
IIDS = tuple(iid(n) for n in range(1, 5))
PER_MACHINE = 3
TOTAL = 7


@dataclass
class Entry:
    """What the book must hold of one session."""

    seq: int
    at: int
    live: PeerRecord | None
    seen: float


class RecordBookMachine(RuleBasedStateMachine):
    """Offers, expiry, forgetting a machine and both clocks in any order, against a model of
    what the book promises.

    Besides the model, two promises are checked on their own: the book never holds more than its
    bounds, and a sequence it accepted stays (or is overtaken) until its signature is
    ``REMEMBER_MS`` old on the reader's wall clock, or its machine is forgotten (no longer
    trusted) — so nothing at or below it gets in before.
    """

    def __init__(self) -> None:
        super().__init__()
        self.book = RecordBook(ttl_s=TTL_S, per_machine=PER_MACHINE, total=TOTAL, ahead_s=AHEAD_S)
        self.now = 0.0
        self.now_ms = NOW_MS
        self.model: dict[Key, Entry] = {}
        self.ignored = 0
        #: Sequences accepted, with the ``at`` they were signed at.
        self.promises: dict[Key, tuple[int, int]] = {}

    def _room_for(self, machine: str) -> bool:
        mine = sum(1 for key in self.model if key[0] == machine)
        return len(self.model) < TOTAL and mine < PER_MACHINE

    def _expected(self, key: Key, body: PeerRecord | Tombstone, at: int) -> Offer:
        entry = self.model.get(key)
        if entry is not None and body.seq <= entry.seq:
            return Offer.STALE
        gone = isinstance(body, Tombstone)
        live = None if isinstance(body, Tombstone) else body
        if entry is None:
            if not self._room_for(key[0]):
                if gone:
                    return Offer.NOTED
                self.ignored += 1
                return Offer.FULL
            self.model[key] = Entry(body.seq, at, live, self.now)
            return Offer.NOTED if gone else Offer.NEW
        was_live = entry.live is not None
        entry.seq, entry.at, entry.live, entry.seen = body.seq, max(entry.at, at), live, self.now
        if gone:
            return Offer.REMOVED if was_live else Offer.NOTED
        return Offer.UPDATED if was_live else Offer.NEW

    @rule(
        machine=st.sampled_from(MACHINES),
        instance_id=st.sampled_from(IIDS),
        seq=st.integers(0, 12),
        age_ms=st.integers(-5_000, 40_000),
        gone=st.booleans(),
    )
    def offer(self, machine: str, instance_id: str, seq: int, age_ms: int, gone: bool) -> None:
        key = (machine, instance_id)
        body = stone(seq, instance_id) if gone else record(seq, instance_id)
        at = self.now_ms - age_ms
        before = self.book.seq(key)
        result = self.book.offer(machine, at, body, self.now)
        if before is not None and seq <= before:
            assert result is Offer.STALE
            assert self.book.seq(key) == before
        assert result is self._expected(key, body, at)
        if self.book.seq(key) == seq and result is not Offer.STALE:
            self.promises[key] = (seq, at)

    @rule(
        seconds=st.sampled_from([0.5, 1.0, 5.0, 29.5, 30.0, 30.5, 35.0, 60.0]),
        drift_ms=st.integers(-1_000, 1_000),
    )
    def advance(self, seconds: float, drift_ms: int) -> None:
        self.now += seconds
        self.now_ms += int(seconds * 1000) + drift_ms

    @rule()
    def expire(self) -> None:
        ended = self.book.expire(self.now, self.now_ms)
        expected: list[Key] = []
        for key, entry in list(self.model.items()):
            if entry.live is not None and self.now - entry.seen > TTL_S:
                entry.live = None
                expected.append(key)
            if entry.live is None and self.now_ms > entry.at + REMEMBER_MS:
                del self.model[key]
        assert sorted(ended) == sorted(expected)
        self.promises = {
            key: (seq, at)
            for key, (seq, at) in self.promises.items()
            if self.now_ms <= at + REMEMBER_MS or self.book.get(key) is not None
        }

    @rule(machine=st.sampled_from(MACHINES))
    def forget(self, machine: str) -> None:
        ended = self.book.forget(machine)
        mine = [key for key in self.model if key[0] == machine]
        assert sorted(ended) == sorted(key for key in mine if self.model[key].live is not None)
        for key in mine:
            del self.model[key]
        self.promises = {key: p for key, p in self.promises.items() if key[0] != machine}

    @invariant()
    def within_bounds(self) -> None:
        held = [(m, i) for m in MACHINES for i in IIDS if self.book.seq((m, i)) is not None]
        assert self.book.remembered() == len(held) <= TOTAL
        for machine in MACHINES:
            assert sum(1 for key in held if key[0] == machine) <= PER_MACHINE
        assert self.book.ignored == self.ignored

    @invariant()
    def promises_kept(self) -> None:
        for key, (seq, _) in self.promises.items():
            remembered = self.book.seq(key)
            assert remembered is not None
            assert remembered >= seq

    @invariant()
    def agrees_with_the_model(self) -> None:
        for machine in MACHINES:
            for instance_id in IIDS:
                key = (machine, instance_id)
                entry = self.model.get(key)
                assert self.book.seq(key) == (None if entry is None else entry.seq)
                assert self.book.get(key) == (None if entry is None else entry.live)
        assert len(self.book) == sum(1 for e in self.model.values() if e.live is not None)


RecordBookMachine.TestCase.settings = settings(max_examples=scaled(200), stateful_step_count=50)
TestRecordBookMachine = RecordBookMachine.TestCase
