"""Settings of the remote plane, each with its reason (docs/remote.md).

The remote plane's own room: the wire core's bounds stay in
:mod:`pi_cross_session._internal.protocol.limits`; what only gateways, envelopes and machines use
lives here.
"""

from __future__ import annotations

from typing import Final

from pi_cross_session._internal.protocol.limits import MAX_FRAME_BYTES

#: A machine name: at most this many characters of ``a-z 0-9 -``; it appears in NATS subjects, KV
#: keys and in names like ``alice@buildbox``, so it stays short.
MAX_MACHINE_NAME_CHARS: Final = 32
#: An envelope on NATS, at most: one full frame's text plus room for the envelope's own fields.
#: The NATS server's ``max_payload`` must allow it (its default 1 MB does not).
MAX_ENVELOPE_BYTES: Final = MAX_FRAME_BYTES + 65_536
#: A published session's cwd keeps at most this many code points (a display field: a proxy shows
#: it after ``machine:``), so that a record, at worst every character escaped, stays small.
REMOTE_RECORD_CWD_CHARS: Final = 4_096
#: A record or tombstone in the bucket, at most (the bucket's ``max_msg_size`` too): a record at
#: its largest, every field escaped, is under 60 KiB. Anything larger on a record subject is
#: dropped before its signature is checked.
MAX_RECORD_BYTES: Final = 65_536
#: A request larger than this has its signature verified in a worker thread, not on the event
#: loop: verifying hashes every byte (about 2 ms for a full frame), and a flood of large junk under
#: a trusted name would otherwise stall every other origin and proxy for that long each time.
VERIFY_ON_LOOP_BYTES: Final = 65_536
#: A signed envelope is valid from this long before now (the contract's 30 s message window) …
ENVELOPE_MAX_AGE_S: Final = 30.0
#: … to this far ahead (the contract's 5 s future skew): machines keep clocks within 5 s.
ENVELOPE_MAX_AHEAD_S: Final = 5.0
#: Nonces remembered per origin machine while their envelopes are inside the window; a full table
#: refuses that machine (``rate_limited``) until entries age out, never forgets one early. 8,192
#: in 35 s is 234 envelopes a second, over twice the machine's sustained rate below.
REMOTE_NONCES_PER_MACHINE: Final = 8_192
#: Nonces are kept packed, 24 bytes each with their forgetting time, in this many lists per
#: origin machine chosen by the nonce's first byte: a look-up reads one list (about 32 entries
#: when the table is full), and a machine's table costs 24 bytes a nonce instead of about 200 as
#: Python objects.
REMOTE_NONCE_PARTITIONS: Final = 256
#: Envelopes one origin machine may have handled at once, then per second: a machine's senders
#: together, bounding what one machine costs the gateway (a delivery costs it about a millisecond
#: of CPU) whatever number of senders it claims. 100/s is three times what its 64 sender
#: identities could get admitted by one receiver in the long run (0.5/s each).
REMOTE_MACHINE_RATE_CAPACITY: Final = 600
REMOTE_MACHINE_REFILL_PER_S: Final = 100.0
#: Origin machines tracked by that bucket (the allow-list is the real bound; this caps the table).
MAX_REMOTE_MACHINES: Final = 256
#: Deliveries to local sessions one origin machine may have in flight at once.
REMOTE_IN_FLIGHT_PER_MACHINE: Final = 16
#: Deliveries this gateway has open to one local session at once, from every machine together:
#: half of the session's door (``MAX_CONNECTIONS``), so local senders and listings' probes keep
#: the other half. Ten machines at their own bound would otherwise open 160 connections to a
#: door of 64, and what the door turns away ends ``transport_error`` (receipt unknown).
REMOTE_DELIVERIES_PER_SESSION: Final = 32
#: … more wait for one of those slots, at most this many per session; beyond, refused
#: ``rate_limited`` at once (nothing reached the session) …
REMOTE_WAITING_PER_SESSION: Final = 64
#: … and for at most this long, then refused ``rate_limited`` the same way. Waiting plus the
#: delivery's own deadline (3 s) stays inside the sending gateway's hop deadline (4 s), so a
#: delivery that waited still answers in time.
REMOTE_SESSION_WAIT_S: Final = 0.5
#: Local identities (registration files) kept for one origin machine's senders …
REMOTE_SENDERS_PER_MACHINE: Final = 64
#: … of which one idle this long may be replaced: by then the receiver's bucket for it is full
#: again (30 tokens at 0.5/s) and its 30 s dedup windows are over, so replacing it grants nothing.
REMOTE_SENDER_IDLE_S: Final = 60.0
#: The sending gateway waits this long for the remote reply: inside the sender's own 5 s for the
#: whole exchange, leaving a second for the two local legs.
REMOTE_HOP_DEADLINE_S: Final = 4.0
#: The receiving gateway's exchange with the real session: short enough for its reply to make the
#: hop deadline above.
REMOTE_DELIVERY_DEADLINE_S: Final = 3.0
#: Published sessions expire from the KV bucket (its ``max_age``) and from every reader's mirror
#: this long after their last refresh: three refreshes missed.
REMOTE_RECORD_TTL_S: Final = 30.0
#: How often a gateway re-puts every live local session (and at once on any change): a third of
#: the TTL, whatever TTL a deployment picks (``gateway --record-ttl``).
REMOTE_PUBLISH_EVERY_S: Final = REMOTE_RECORD_TTL_S / 3
#: The TTL a deployment may pick: short enough to notice a dead machine sooner, long enough for a
#: gateway's scans (every 2 s) to keep its records alive.
MIN_REMOTE_RECORD_TTL_S: Final = 6.0
MAX_REMOTE_RECORD_TTL_S: Final = 3_600.0
#: How often a gateway lists its local sessions to notice one appear, change or go.
REMOTE_SCAN_EVERY_S: Final = 2.0
#: How often a gateway withdraws proxies whose record stopped being refreshed.
REMOTE_SWEEP_EVERY_S: Final = 1.0
#: Proxies one gateway keeps, first come first kept: a listing reads the first 512 registrations
#: of the peers dir, and local sessions must keep most of that window.
MAX_PROXIES: Final = 128
#: Remote records kept in a gateway's mirror, per origin machine and in all; more are counted
#: and ignored, so no machine can fill another's share.
REMOTE_RECORDS_PER_MACHINE: Final = 512
MAX_REMOTE_RECORDS: Final = 10_000
#: Refusal diagnostics a gateway keeps for its status (counts by cause are never evicted).
REMOTE_DIAGNOSTICS_KEPT: Final = 20
#: Connecting to NATS at start, at most; later reconnects go on for as long as the gateway runs.
NATS_CONNECT_TIMEOUT_S: Final = 5.0
#: A JetStream cluster that has just started elects its leader within seconds; a gateway waits
#: this long for the bucket before giving up.
JETSTREAM_READY_S: Final = 20.0
#: … asking again this often meanwhile.
JETSTREAM_RETRY_S: Final = 0.5
#: A JetStream API request (the bucket's configuration, a record's acknowledgement, a read of the
#: current records) waits this long for its answer.
BUCKET_OPERATION_TIMEOUT_S: Final = 5.0
#: Bytes waiting in the client for one subscription (requests from one origin machine, or its
#: records) before the client drops what arrives: each origin has its own, so one origin's flood,
#: or a stranger's under its name, fills only its own, and a gateway's memory stays bounded.
REMOTE_PENDING_BYTES_PER_ORIGIN: Final = 8 * 1024 * 1024
#: Records (and tombstones) the bucket's stream keeps, all machines together: twice what any
#: reader keeps, so a reader's own bound is the one that bites. When full, the oldest go first
#: (records are re-put every third of the TTL, so an honest machine's come back by themselves).
BUCKET_MAX_MSGS: Final = 2 * MAX_REMOTE_RECORDS
#: A JetStream API answer (a stream's configuration and state, an acknowledgement) is a few KiB;
#: a larger one is not parsed (without permissions, anyone who saw the request could answer it).
MAX_API_ANSWER_BYTES: Final = 65_536
#: Replies a request looks at, at most, for one it accepts (a stranger answering first with junk
#: does not turn a receipt into an unknown).
REPLY_CANDIDATES: Final = 8
#: A gateway checks the bucket (exists, configured as it must be) at start and when an operation
#: on it fails, at most this often.
BUCKET_CHECK_EVERY_S: Final = 2.0
#: A read of one machine's current records takes at most this many bytes (and
#: ``REMOTE_RECORDS_PER_MACHINE`` records): an honest machine's 512 records are far smaller, and a
#: machine that filled its keys with the largest junk costs a reader no more.
REMOTE_READ_BYTES_PER_MACHINE: Final = 4 * 1024 * 1024
#: Pause between reconnect attempts to NATS.
NATS_RECONNECT_WAIT_S: Final = 0.5
#: How often a running gateway looks whether its trust file changed (one ``stat``): ``remote
#: trust`` and ``remote inbound`` take effect within this long, and say so.
REMOTE_TRUST_POLL_S: Final = 1.0
#: ``remote trust`` waits this long at most for a running gateway to say it took the change
#: (it looks every ``REMOTE_TRUST_POLL_S`` and writes its status within a second after).
REMOTE_TRUST_TAKEN_WAIT_S: Final = 5.0
#: How often the remote snapshot file for ``peers --remote`` is rewritten, at most.
REMOTE_SNAPSHOT_EVERY_S: Final = 1.0
#: … and rewritten at least this often even when nothing changed (its counters still move).
REMOTE_SNAPSHOT_REFRESH_S: Final = 5.0
#: Connections open at once across all of a gateway's proxies (each proxy also keeps the
#: contract's 64): a gateway with 128 proxies must not run out of file descriptors.
MAX_GATEWAY_CONNECTIONS: Final = 256
#: A gateway's snapshot older than this says its gateway is stuck, not merely quiet: it is
#: rewritten at least every ``REMOTE_SNAPSHOT_REFRESH_S``, so three rewrites were missed
#: (``remote status``, ``doctor``).
REMOTE_SNAPSHOT_STALE_S: Final = 3 * REMOTE_SNAPSHOT_REFRESH_S
#: Warnings and errors a gateway keeps for its status, newest last: enough to see what went
#: wrong recently, bounded whatever repeats (every line is in the gateway's own log as well).
REMOTE_PROBLEMS_KEPT: Final = 20
#: … each cut to this many characters (a line of the log, not a dump).
REMOTE_PROBLEM_CHARS: Final = 300
#: ``doctor`` warns about NATS credentials that expire within this long (a gateway with expired
#: ones cannot reconnect).
CREDENTIALS_EXPIRY_WARNING_S: Final = 7 * 24 * 3600
#: A gateway that cannot connect at start tries again after this long, then twice as long each
#: time up to the next bound: quick enough for a server that is starting, and a line a person
#: can read for each try rather than one every half second.
NATS_START_RETRY_FIRST_S: Final = 1.0
#: … at most this long between tries (a server down for hours costs a line and a connection
#: attempt a minute, not thousands).
NATS_START_RETRY_MAX_S: Final = 60.0
#: A first connection attempt ends once every server failed this many times: one failure can be
#: the reset that follows the real cause (an authorization violation), the second one names it.
NATS_START_FAILURES_PER_SERVER: Final = 2
#: While a lost connection cannot come back, the gateway says so again this often (its client
#: retries every ``NATS_RECONNECT_WAIT_S``; a line for each would bury everything else).
NATS_PROBLEM_REMINDER_S: Final = 60.0
#: A key rotation's ask (``remote rotate``, docs/remote.md "Rotating a machine's keys") is signed
#: the moment before it is sent, so the hub takes it only inside the envelopes' window: from this
#: long before the hub's now …
ROTATE_ASK_MAX_AGE_S: Final = ENVELOPE_MAX_AGE_S
#: … to this far ahead (machines of a deployment keep their clocks within 5 s). Older is stale: a
#: captured ask cannot be played back later.
ROTATE_ASK_MAX_AHEAD_S: Final = ENVELOPE_MAX_AHEAD_S
#: Each step of a rotation (connecting, the hub's answer) may take this long: a running hub
#: answers in milliseconds; one that does not in this long will not, and the person hears so.
ROTATE_STEP_TIMEOUT_S: Final = 10.0
#: A machine is given at most this many new keys by its hub (``remote rotate``) within any
#: ``ROTATE_WINDOW_S``: each new NATS key the hub signs is revoked for good later (the old key
#: when the rotation is confirmed, the new one when a pending rotation is replaced), NATS keeps
#: every revocation in the account's JWT, and every server is handed that JWT whole at each
#: change. Two: a rotation, and one more begun afresh after the first's new keys were lost.
ROTATE_KEYS_PER_WINDOW: Final = 2
#: … a day: rotating is rare (a key that may have leaked, or hygiene), and so a machine, even a
#: hostile one that holds its keys, adds at most 730 revocations a year to the account JWT
#: (about 100 bytes each) instead of one per ask (a thousand asks made it 94 KB).
ROTATE_WINDOW_S: Final = 24 * 3600
#: ``remote rotate`` waits this long at most for the running gateway to come back with the new
#: keys (it stops, withdraws, connects again with the new credentials and serves).
ROTATE_GATEWAY_WAIT_S: Final = 20.0
#: A trusted machine whose requests or records fail their MAC or signature this many times within
#: ``MACHINE_PAUSE_WITHIN_S``, on a deployment whose permissions vouch that it sent them (a holder
#: of its NATS credentials without its machine key, or a broken gateway), is not listened to for
#: a while: NATS then stops delivering its junk at all (docs/remote.md, "Pausing a machine").
MACHINE_PAUSE_AFTER_FAILURES: Final = 8
MACHINE_PAUSE_WITHIN_S: Final = 10.0
#: The first pause; each next one (with nothing good from the machine between) lasts twice as
#: long, up to ``MACHINE_PAUSE_LONGEST_S``.
MACHINE_PAUSE_FIRST_S: Final = 30.0
MACHINE_PAUSE_LONGEST_S: Final = 600.0
#: How often, at most, a gateway looks whether a machine's false MACs are an older version's
#: signatures (one signature check each time), to say which machine to update.
OLDER_CHECK_EVERY_S: Final = 60.0
