"""Derived local identities, the per-machine sender table and machine flow (security/remote/)."""

from __future__ import annotations

import pytest

from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.paths import is_instance_id
from pi_cross_session._internal.security.remote.replay import NonceWindow, Seen
from pi_cross_session._internal.security.remote.senders import (
    Claim,
    MachineFlow,
    SenderTable,
    SessionDoors,
    derive_instance_id,
)


def test_a_derived_id_is_an_instance_id_stable_within_an_incarnation() -> None:
    first = derive_instance_id(b"s1", "laptop", "a" * 32)
    assert is_instance_id(first)
    assert derive_instance_id(b"s1", "laptop", "a" * 32) == first
    assert derive_instance_id(b"s2", "laptop", "a" * 32) != first  # a new gateway incarnation
    assert derive_instance_id(b"s1", "laptop2", "a" * 32) != first  # another machine
    assert derive_instance_id(b"s1", "laptop", "b" * 32) != first
    # A machine name cannot smuggle the separator to collide with another machine's id.
    with pytest.raises(ValueError, match="machine"):
        derive_instance_id(b"s1", "lap\ntop", "a" * 32)


def test_a_full_machine_is_refused_until_an_identity_has_been_idle_long_enough() -> None:
    table = SenderTable(per_machine=2, idle_s=60)
    assert table.claim("m", "a", 0).claim is Claim.NEW
    assert table.claim("m", "b", 1).claim is Claim.NEW
    assert table.claim("m", "a", 2).claim is Claim.KNOWN
    assert table.claim("m", "c", 59).claim is Claim.FULL
    assert table.claim("other", "c", 59).claim is Claim.NEW  # machines do not share
    claimed = table.claim("m", "c", 61)  # b was used at 1, idle 60 s: it gives way
    assert (claimed.claim, claimed.evicted) == (Claim.NEW, "b")
    assert table.holds("m", "a")
    assert not table.holds("m", "b")
    table.release("m", "a")
    assert table.count("m") == 1


def test_machine_flow_bounds_rate_and_in_flight_per_machine() -> None:
    flow = MachineFlow(capacity=3, refill_per_s=1.0, in_flight=2)
    assert flow.start("m", 0.0) is None
    assert flow.start("m", 0.0) is None
    assert flow.start("m", 0.0) is Code.RATE_LIMITED  # two in flight
    assert flow.start("n", 0.0) is None  # another machine is not affected
    flow.finish("m")
    assert flow.start("m", 0.0) is None  # third token
    flow.finish("m")
    flow.finish("m")
    assert flow.start("m", 0.0) is Code.RATE_LIMITED  # no token left
    assert flow.start("m", 1.0) is None  # one refilled
    assert flow.refused == 2


def test_a_session_door_admits_its_open_slots_and_its_line_then_refuses() -> None:
    doors = SessionDoors(open_at_once=2, waiting=1)
    assert [doors.arrive("s") for _ in range(4)] == [True, True, True, False]
    assert doors.arrive("t")  # another session has its own door
    assert doors.admitted("s") == 3
    assert not doors.leave("s")
    assert doors.arrive("s")  # a place freed
    for _ in range(3):
        doors.leave("s")
    assert doors.admitted("s") == 0  # nothing kept for an idle session
    assert doors.refused == 1
    with pytest.raises(ValueError, match="open slot"):
        SessionDoors(open_at_once=0)


def test_the_real_session_door_leaves_room_at_the_session_for_others() -> None:
    from pi_cross_session._internal.protocol import limits
    from pi_cross_session._internal.protocol.remote import settings

    assert settings.REMOTE_DELIVERIES_PER_SESSION < limits.MAX_CONNECTIONS
    # Waiting, then the delivery's own deadline, still answers within the sender's hop.
    assert (
        settings.REMOTE_SESSION_WAIT_S + settings.REMOTE_DELIVERY_DEADLINE_S
        < settings.REMOTE_HOP_DEADLINE_S
    )


N1, N2, N = ("1" * 32, "2" * 32, "a" * 32)


def test_nonces_are_forgotten_only_once_their_envelope_left_the_window() -> None:
    window = NonceWindow(per_machine=1, max_age_ms=1_000)
    assert window.admit("m", N1, at_ms=0, now_ms=0) is Seen.NEW
    assert window.admit("m", N1, at_ms=0, now_ms=1_000) is Seen.REPLAY
    assert window.admit("m", N2, at_ms=1_000, now_ms=1_000) is Seen.FULL
    assert window.admit("m", N2, at_ms=1_001, now_ms=1_001) is Seen.NEW
    assert window.size("m") == 1


def test_an_envelope_dated_ahead_is_remembered_until_it_ages_out() -> None:
    window = NonceWindow(per_machine=4, max_age_ms=1_000)
    assert window.admit("m", N, at_ms=500, now_ms=0) is Seen.NEW
    assert window.admit("m", N, at_ms=500, now_ms=1_500) is Seen.REPLAY
    assert window.admit("m", N, at_ms=1_501, now_ms=1_501) is Seen.NEW  # forgotten, then anew
    assert window.size("m") == 1


def test_the_origin_table_is_bounded_and_frees_idle_machines() -> None:
    window = NonceWindow(per_machine=4, max_age_ms=10, max_machines=1)
    assert window.admit("a", N, at_ms=0, now_ms=0) is Seen.NEW
    assert window.admit("b", N, at_ms=0, now_ms=5) is Seen.FULL
    assert window.admit("b", N, at_ms=11, now_ms=11) is Seen.NEW


def test_a_nonce_behind_one_dated_ahead_may_be_kept_longer_never_shorter() -> None:
    # One partition (both nonces start with the same byte): the first, dated 5 s ahead, is due
    # at 35_000; the second, due at 30_500, waits behind it and is still a replay at 34_000.
    window = NonceWindow(per_machine=8, max_age_ms=30_000)
    ahead, plain = "ab" + "1" * 30, "ab" + "2" * 30
    assert window.admit("m", ahead, at_ms=5_000, now_ms=0) is Seen.NEW
    assert window.admit("m", plain, at_ms=500, now_ms=500) is Seen.NEW
    assert window.admit("m", plain, at_ms=500, now_ms=30_000) is Seen.REPLAY
    assert window.admit("m", plain, at_ms=34_000, now_ms=34_000) is Seen.REPLAY
    assert window.admit("m", ahead, at_ms=35_001, now_ms=35_001) is Seen.NEW  # both went
    assert window.size("m") == 1


def test_a_nonce_straddling_two_kept_ones_is_not_taken_for_a_replay() -> None:
    window = NonceWindow(per_machine=8, max_age_ms=1_000)
    first, second = "0123456789abcdef" * 2, "fedcba9876543210" * 2
    assert window.admit("m", first, at_ms=0, now_ms=0) is Seen.NEW
    assert window.admit("m", second, at_ms=0, now_ms=0) is Seen.NEW
    # The last 8 bytes of the first and the first 8 of the second, side by side in the bucket.
    straddling = first[16:] + second[:16]
    assert window.admit("m", straddling, at_ms=0, now_ms=0) is Seen.NEW
    assert window.admit("m", straddling, at_ms=0, now_ms=0) is Seen.REPLAY
    with pytest.raises(ValueError, match="32 hex"):
        window.admit("m", "ab", at_ms=0, now_ms=0)


def test_a_full_window_of_nonces_costs_24_bytes_each() -> None:
    # Ten machines at 90 envelopes a second over the 30 s a nonce signed "now" is kept (the
    # bench's relayed flood): 27,000 nonces held at once.
    window = NonceWindow()
    now, admitted = 1_000_000_000, 0
    for tick in range(90 * 30):
        at = now + tick * 1_000 // 90
        for machine in range(10):
            nonce = f"{machine:02x}{tick:030x}"
            assert window.admit(f"relay{machine}", nonce, at_ms=at, now_ms=at) is Seen.NEW
            admitted += 1
    assert sum(window.size(f"relay{m}") for m in range(10)) == admitted == 27_000
    assert window.held_bytes() == 24 * admitted
