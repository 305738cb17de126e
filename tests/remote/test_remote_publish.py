"""What a gateway publishes of its local sessions (plugin/remote/publish.py): the sequence each
record and tombstone is signed with, and the record a session becomes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pi_cross_session._internal.plugin.remote.publish import next_seq, record_of
from pi_cross_session._internal.protocol.limits import MAX_SAFE_INTEGER
from pi_cross_session._internal.protocol.remote.envelope import PeerRecord
from pi_cross_session._internal.protocol.remote.settings import REMOTE_RECORD_CWD_CHARS
from tests.hypothesis_profiles import scaled
from tests.support.admission_kit import registration

#: 2001-09-09 to 2100-01-01, in wall milliseconds.
WALL_MS = st.integers(1_000_000_000_000, 4_102_444_800_000)


@settings(max_examples=scaled(200))
@given(start=st.integers(0, MAX_SAFE_INTEGER // 2), walls=st.lists(WALL_MS, max_size=50))
def test_sequences_grow_strictly_and_never_fall_below_the_clock(
    start: int, walls: list[int]
) -> None:
    """Even when the clock steps back, no record is signed at or below an earlier one."""
    last = start
    for wall_ms in walls:
        seq = next_seq(last, wall_ms)
        assert seq > last
        assert seq >= wall_ms * 1000
        last = seq


def test_a_restarted_gateway_signs_above_what_it_signed_before() -> None:
    """A gateway that restarts has forgotten its last sequence; the clock, a millisecond on,
    still puts it above a burst of records signed within one millisecond."""
    wall_ms = 1_750_000_000_000
    last = 0
    for _ in range(999):
        last = next_seq(last, wall_ms)
    assert next_seq(0, wall_ms + 1) > last


def test_a_sequence_of_this_century_fits_a_record() -> None:
    seq = next_seq(0, 4_102_444_800_000)
    assert seq <= MAX_SAFE_INTEGER
    assert isinstance(record_of(registration("alice"), (), seq=seq), PeerRecord)


def test_a_long_cwd_is_cut_to_what_a_record_holds() -> None:
    """A session may sit deeper than a record shows; it is still published, its cwd cut."""
    deep = "/" + "\U0001d11e" * (REMOTE_RECORD_CWD_CHARS + 100)
    session = registration("alice").model_copy(update={"cwd": deep})
    record = record_of(session, ("cancel-safe-queue-v1",), seq=3)
    assert record.cwd == deep[:REMOTE_RECORD_CWD_CHARS]
    assert (record.seq, record.instance_id) == (3, session.instance_id)
    assert list(record.capabilities) == ["cancel-safe-queue-v1"]
