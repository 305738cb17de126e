"""The discovery bucket's configuration (plugin/remote/bucket.py): the stream we create has every
protection, and the check a gateway runs names each one a stream lacks."""

from __future__ import annotations

from typing import Any

import pytest

from pi_cross_session._internal.plugin.remote.bucket import BucketSpec, problems
from pi_cross_session._internal.protocol.remote.envelope import KV_STREAM, RECORD_PREFIX
from pi_cross_session._internal.protocol.remote.settings import MAX_RECORD_BYTES

SECOND_NS = 1_000_000_000


@pytest.mark.parametrize("spec", [BucketSpec(), BucketSpec(ttl_s=6.0, replicas=3)])
def test_the_stream_we_create_has_no_problems(spec: BucketSpec) -> None:
    config = spec.stream_config()
    assert problems(config, spec) == []
    assert config["name"] == KV_STREAM
    assert config["subjects"] == [f"{RECORD_PREFIX}.>"]
    assert config["num_replicas"] == spec.replicas
    assert config["max_age"] == int(spec.ttl_s * SECOND_NS)


#: Each protection taken away, and a word of what the check must say about it.
WEAKENED: dict[str, tuple[dict[str, Any], str]] = {
    "rollup allowed": ({"allow_rollup_hdrs": True}, "rollup"),
    "deletes allowed": ({"deny_delete": False}, "delete"),
    "purges allowed": ({"deny_purge": False}, "purge"),
    "direct get off": ({"allow_direct": False}, "direct"),
    "smaller messages": ({"max_msg_size": MAX_RECORD_BYTES - 1}, "max message size"),
    "longer age": ({"max_age": 60 * SECOND_NS}, "max age"),
    "shorter age": ({"max_age": 10 * SECOND_NS}, "max age"),
    "no age": ({"max_age": 0}, "max age"),
    "more history": ({"max_msgs_per_subject": 2}, "more than one record"),
    "unbounded history": ({"max_msgs_per_subject": -1}, "more than one record"),
    "other subjects": ({"subjects": [f"{RECORD_PREFIX}.>", "pi-xs.>"]}, "subjects"),
}


@pytest.mark.parametrize("case", sorted(WEAKENED))
def test_each_protection_removed_is_named(case: str) -> None:
    change, word = WEAKENED[case]
    spec = BucketSpec()
    found = problems({**spec.stream_config(), **change}, spec)
    assert len(found) == 1
    assert word in found[0]


@pytest.mark.parametrize(
    ("field", "named"),
    [
        ("allow_rollup_hdrs", False),
        ("deny_delete", True),
        ("deny_purge", True),
        ("allow_direct", True),
    ],
)
def test_a_flag_the_server_leaves_out_counts_as_false(field: str, named: bool) -> None:
    """A server omits false flags from the configuration it returns: an omitted protection is
    missing, an omitted permission is refused."""
    spec = BucketSpec()
    config = {k: v for k, v in spec.stream_config().items() if k != field}
    assert len(problems(config, spec)) == int(named)


def test_every_protection_removed_at_once_is_named_each() -> None:
    spec = BucketSpec()
    weakened: dict[str, Any] = {}
    for change, _ in WEAKENED.values():
        weakened |= change
    found = problems({**spec.stream_config(), **weakened}, spec)
    words = {word for _, word in WEAKENED.values()}
    assert all(any(word in line for line in found) for word in words)
    assert len(found) == len(words)


def test_a_second_either_way_is_the_same_ttl() -> None:
    spec = BucketSpec(ttl_s=30.0)
    config = spec.stream_config()
    for drift in (-SECOND_NS, SECOND_NS):
        assert problems({**config, "max_age": config["max_age"] + drift}, spec) == []
    assert problems({**config, "max_age": config["max_age"] + SECOND_NS + 1}, spec) != []
