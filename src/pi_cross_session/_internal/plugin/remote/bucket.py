"""The discovery bucket as it must be: a JetStream stream in the shape of a NATS KV bucket.

Anyone who can read a bucket with NATS's own tools (``nats kv``) can read ours, but it is created
with the protections a KV bucket lacks by default (docs/remote.md, "The bucket"):

* **rollup headers refused** (``allow_rollup_hdrs: false``): a put with ``Nats-Rollup: all`` on a
  machine's own key would otherwise wipe every machine's records;
* **no message delete, no purge** through the API (``deny_delete``, ``deny_purge``);
* **direct get** on, so that a gateway reads the current records without a consumer (a machine
  may not create consumers);
* records at most :data:`MAX_RECORD_BYTES` (``max_msg_size``), one per key, kept for the TTL
  (``max_age``), at most :data:`BUCKET_MAX_MSGS` in all, the oldest going first.

:func:`problems` compares a stream's configuration with this, for the check a gateway runs at
start and whenever a bucket operation fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from nats.js import api

from pi_cross_session._internal.protocol.remote.envelope import KV_STREAM, RECORD_PREFIX
from pi_cross_session._internal.protocol.remote.settings import (
    BUCKET_MAX_MSGS,
    MAX_RECORD_BYTES,
    REMOTE_RECORD_TTL_S,
)

#: Nanoseconds per second, in the JetStream API's durations.
_NS: Final = 1_000_000_000


@dataclass(frozen=True, slots=True)
class BucketSpec:
    """What a deployment chooses: the records' TTL and how many servers keep each one."""

    ttl_s: float = REMOTE_RECORD_TTL_S
    replicas: int = 1

    def stream_config(self) -> dict[str, Any]:
        """The stream's configuration, as the JetStream API takes it."""
        config = api.StreamConfig(
            name=KV_STREAM,
            description="pi-cross-session: the sessions each machine publishes",
            subjects=[f"{RECORD_PREFIX}.>"],
            allow_direct=True,
            allow_rollup_hdrs=False,
            deny_delete=True,
            deny_purge=True,
            discard=api.DiscardPolicy.OLD,
            max_age=self.ttl_s,
            max_msgs=BUCKET_MAX_MSGS,
            max_msgs_per_subject=1,
            max_msg_size=MAX_RECORD_BYTES,
            num_replicas=self.replicas,
            storage=api.StorageType.FILE,
            # A duplicate window longer than the TTL is refused by the server.
            duplicate_window=min(self.ttl_s, 120.0),
        )
        return config.as_dict()


def problems(config: dict[str, Any], spec: BucketSpec) -> list[str]:
    """What in a stream's ``config`` differs from ``spec``'s in a way that matters, in words."""
    found: list[str] = []
    if config.get("subjects") != [f"{RECORD_PREFIX}.>"]:
        found.append("its subjects are not the records' alone")
    if config.get("allow_rollup_hdrs", False):
        found.append("it accepts rollup headers (one put could wipe every machine's records)")
    if not config.get("deny_delete", False):
        found.append("it lets clients delete messages")
    if not config.get("deny_purge", False):
        found.append("it lets clients purge it")
    if not config.get("allow_direct", False):
        found.append("direct get is off (gateways cannot read it)")
    size = config.get("max_msg_size", -1)
    if not isinstance(size, int) or 0 <= size < MAX_RECORD_BYTES:
        found.append(f"its max message size ({size}) is below a record's {MAX_RECORD_BYTES}")
    age = config.get("max_age", 0)
    if not isinstance(age, int) or abs(age - int(spec.ttl_s * _NS)) > _NS:
        found.append(f"its max age ({age / _NS if isinstance(age, int) else age} s) is not the TTL")
    if config.get("max_msgs_per_subject") != 1:
        found.append("it keeps more than one record per key")
    return found
