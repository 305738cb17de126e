"""The wire's numeric bounds and the receiver's, with the reason beside each.

Wire bounds are fixed by the interoperability contract (``docs/spec/wire.md``); changing
one of them breaks compatibility with the reference peer. The receiver's policy bounds live here
too, so that a reader can see everything a session is willing to spend at a glance; the classes
that enforce them take each bound as a keyword-only override so tests can use small values. Other
rooms keep their own settings beside them (the remote plane, the goals, the command line and its
identity pool, ``doctor``, the MCP host, the git reader: docs/operations.md, "Limits").
"""

from typing import Final

# -- framing -------------------------------------------------------------------------------------
#: Raw bytes one frame may occupy, counting its LF, a first-frame BOM and incomplete UTF-8 tails.
MAX_FRAME_BYTES: Final = 1_048_576

#: Frames kept as templates, because they are written again and again with only a new
#: ``requestId``: the replies a process builds (a session's ``ready``, receipts and refusals), and
#: each exchanger's hellos (one per peer and sender). Each is validated once and copied (or
#: written around each new id). Status answers carry varied texts, so the bound keeps those from
#: growing the table: past it, the oldest template is dropped. A listing probes at most 512
#: peers, so each of its hellos stays a template between two listings.
MAX_FRAME_TEMPLATES: Final = 1_024
#: The longest frame text (characters) kept to take the same frame again without parsing it: a
#: reply a sender judged (every ``ready`` of a peer differs only in its id), a hello a receiver
#: accepted (every hello of one sender to one receiver, likewise). A ``ready`` is about 300
#: characters, a hello with ``from`` about 600 and a refusal with the longest error text under
#: 1,500; the bound keeps padded frames (a frame may be 1 MiB) out of the tables.
MAX_KNOWN_FRAME_CHARS: Final = 2_048
#: Hellos a receiver keeps, once accepted, to know them again (see ``MAX_KNOWN_FRAME_CHARS``):
#: one per sender and per kind of probe that reached it, oldest dropped first. Only a hello that
#: named this session with its token gets in, so a process without the token cannot use it.
MAX_KNOWN_HELLOS: Final = 256

# -- identifiers and field lengths (units noted: utf16 = UTF-16 code units, cp = code points) ----
#: requestId / messageId / goalId: ``[A-Za-z0-9_-]{1,128}``.
MAX_ID_CHARS: Final = 128
#: Session ids, utf16.
MAX_SESSION_ID_UNITS: Final = 512
#: Message text, utf16; the reference's JS string length.
MAX_TEXT_UNITS: Final = 1_000_000
#: Wire summary and session names, cp.
MAX_SUMMARY_CODE_POINTS: Final = 200
MAX_NAME_CODE_POINTS: Final = 200
#: Summary a tool caller may pass before normalisation, utf16.
MAX_TOOL_SUMMARY_UNITS: Final = 400
#: Tool ``target`` parameter, utf16.
MAX_TARGET_UNITS: Final = 512
#: Registration ``cwd``, utf16.
MAX_CWD_UNITS: Final = 32_768
#: Capability list: items and units per item.
MAX_CAPABILITIES: Final = 8
MAX_CAPABILITY_UNITS: Final = 64
#: Response fields, utf16.
MAX_STATUS_UNITS: Final = 64
MAX_NEXT_UNITS: Final = 2048
MAX_ERROR_UNITS: Final = 4096
#: Largest integer a JS number holds exactly (``Number.MAX_SAFE_INTEGER``).
MAX_SAFE_INTEGER: Final = 2**53 - 1
#: Registration pid bounds (a positive signed 32-bit value).
MAX_PID: Final = 2_147_483_647

# -- display truncation (cp) -----------------------------------------------------------------------
DISPLAY_CWD_CODE_POINTS: Final = 500
DISPLAY_SESSION_ID_CODE_POINTS: Final = 200
DISPLAY_DIAGNOSTIC_CODE_POINTS: Final = 400
#: Random bytes of the nonce on the marker lines that fence a peer message for the model: 64 bits,
#: so a peer that wants to close the fence early and write lines that look like ours must guess a
#: value drawn after its text arrived, with one chance in 2**64.
FENCE_NONCE_BYTES: Final = 8
#: A path someone else chose (a symlink's target), inside a diagnostic.
DISPLAY_PATH_CODE_POINTS: Final = 120
#: Characters of the instance id shown as its short ``ref``.
REF_CHARS: Final = 8
#: A hex prefix shorter than this is too likely to match several peers to be an address.
MIN_HEX_PREFIX_CHARS: Final = 6

# -- discovery -------------------------------------------------------------------------------------
#: Registrations a listing considers; more are ignored so a junk-filled dir cannot stall a listing.
MAX_LISTED_REGISTRATIONS: Final = 512
#: Largest registration file read; a real one is under 1 KiB.
MAX_REGISTRATION_BYTES: Final = 65_536
#: Attempts to read a registration that is replaced between its check and its open. A writer
#: replaces its file by an atomic rename at every heartbeat and busy/idle change, so a reader may
#: meet one rewrite (a second attempt reads the new file); a file replaced on every attempt is
#: refused.
REGISTRATION_READ_ATTEMPTS: Final = 3
HEARTBEAT_INTERVAL_S: Final = 30.0
#: After a heartbeat write that failed for lack of a kernel resource (out of file descriptors,
#: buffers or memory: transient, unlike a full disk or a removed dir), the next try comes this
#: soon, doubling on each failure in a row up to the heartbeat interval; the session stays
#: registered meanwhile (its record is only older).
HEARTBEAT_RETRY_S: Final = 0.5
#: A probe enforces its own 350 ms deadline; this much more and a listing stops waiting for it,
#: so a probe that ignores its deadline cannot stall a listing.
PROBE_GUARD_MARGIN_S: Final = 0.15
#: How long a lister waits for the reap lock before leaving the reaping to whoever holds it.
REAP_LOCK_TIMEOUT_S: Final = 0.05
#: How long a registration write (or an unregister) waits for the write in flight.
WRITE_WAIT_S: Final = 5.0

# -- bridge envelopes (spec §8.4; recognised only to refuse them) ----------------------------------
#: An envelope may live at most this long after it is checked.
BRIDGE_MAX_TTL_MS: Final = 30_000
BRIDGE_MAX_HOPS: Final = 4
BRIDGE_MAX_BUDGET: Final = 256

# -- sockets ---------------------------------------------------------------------------------------
#: Bytes asked of a socket per read, by the endpoint and the exchange alike.
READ_CHUNK_BYTES: Final = 65_536
#: Connections the kernel may queue for the endpoint before it accepts them (the kernel caps it
#: at ``net.core.somaxconn``): anyio's default, which the endpoint used before it listened itself.
#: A full queue makes a sender's connect wait (within its own deadline), not fail.
LISTEN_BACKLOG: Final = 65_536
#: First pause after a failed ``accept`` that no shed connection could make good (out of file
#: descriptors with nothing to shed, or any other error), so the accept loop cannot spin on a
#: listener that stays readable. Each further failure in a row doubles it...
ACCEPT_BACKOFF_S: Final = 0.01
#: ...up to this: short enough that service resumes within a second once descriptors come back
#: from elsewhere (a connection of ours that closes ends the pause at once).
ACCEPT_BACKOFF_MAX_S: Final = 1.0
#: Once ``accept`` has run out of file descriptors, the endpoint keeps this many free for the rest
#: of the session (a registration read for each hello being authenticated, a heartbeat write, a
#: listing), holding its connections to what is left: otherwise a flood of connections would
#: leave authenticated senders refused and the heartbeat failing, although probes still worked.
DESCRIPTOR_RESERVE: Final = 8
#: While so held, how often the endpoint counts the free descriptors again (by duplicating one,
#: at most a connection limit's worth) to give the connections back what came free.
DESCRIPTOR_CHECK_S: Final = 1.0
#: Bytes one process (by kernel pid) may have the endpoint read at once, across all its
#: connections: a full hello and two full 1 MiB frames, so an honest sender is never slowed by
#: a message or two written back to back...
PEER_READ_BURST_BYTES: Final = 2 * 1_048_576 + 65_536
#: ...and then per second: four times what admission ever takes from one sender in the long run
#: (0.5 messages a second, of at most 1 MiB each). Judging a 1 MiB frame costs the event loop a
#: few milliseconds (decoding, the shape check, parsing, field checks), so one process streaming
#: at this rate takes about one percent of the loop and never its whole.
PEER_READ_BYTES_PER_S: Final = 2 * 1_048_576
#: A connection that read more than this held buffers the allocator serves from its heap; once it
#: has closed, the endpoint asks the allocator to give the freed heap back to the OS (glibc keeps
#: it otherwise, and the RSS with it)...
MEMORY_GIVE_BACK_AFTER_BYTES: Final = 65_536
#: ...at most this often, and once more this long after the last such close: a trim walks the
#: heap, a few milliseconds for a large one.
MEMORY_GIVE_BACK_EVERY_S: Final = 1.0
#: Processes whose read budget is remembered; a process whose budget has refilled needs no entry,
#: so more than this are only ever held by processes that are all in debt, and the fullest is
#: then forgotten first. Four times the connections, so every process with a connection fits.
MAX_READ_BUDGET_PEERS: Final = 256

# -- frame shape (what a frame's JSON may cost before it is parsed) ------------------------------
# A valid hello holds 4 containers (the object, ``target``, ``from``, ``capabilities``), 28
# separators (commas and colons) and 28 strings when it lists 8 capabilities; a message holds 1
# container, 15 separators and 14 strings. Extra fields are legal, so each bound leaves an honest
# peer several times that room; a frame beyond any of them is refused unparsed, with the reply a
# frame that is not a hello (or not a request) gets. At these bounds parsing costs microseconds
# whatever the frame's size: the cost of ``json.loads`` grows with the values it builds.
#: Objects and arrays (``{`` and ``[`` outside strings); also a bound on nesting depth.
MAX_FRAME_CONTAINERS: Final = 32
#: Commas and colons outside strings: every value after the first in a container needs one.
MAX_FRAME_SEPARATORS: Final = 256
#: Strings, keys included.
MAX_FRAME_STRINGS: Final = 128

# -- connections and deadlines ---------------------------------------------------------------------
MAX_CONNECTIONS: Final = 64
#: Workers an endpoint keeps waiting for their next turn to accept once their connection has
#: ended (the others end): waking one costs a fraction of creating one, and a session answering
#: probe after probe needs one; a few cover the bursts of listings, and a flood of 64 connections
#: does not leave 64 tasks' frames behind (about 2 KiB each).
MAX_IDLE_CONNECTION_TASKS: Final = 8
#: Recent authentication refusals kept as diagnostics for our status (counts by cause are kept
#: apart and are bounded by the causes): enough to see a pattern, too few to matter as memory.
AUTH_DIAGNOSTICS_KEPT: Final = 20
#: Sender incarnations whose first authenticated pid a receiver remembers, oldest forgotten first
#: (the same bound as the senders a rate table tracks).
MAX_PINNED_SENDERS: Final = 256
#: Absolute life of one inbound connection, from accept.
CONNECTION_DEADLINE_S: Final = 30.0
#: Inactivity allowed after a successful hello.
IDLE_AFTER_HELLO_S: Final = 5.0
#: Absolute time from ``ready`` to the end of the second frame. A sender writes its message (or
#: status query) as soon as ``ready`` arrives, within its own 5 s deadline for the whole exchange
#: (``SEND_DEADLINE_S``), so nobody still waits for a receipt later than this; a connection that
#: trickles a byte now and then to defeat the idle bound is cut here instead of at 30 s.
REQUEST_DEADLINE_AFTER_READY_S: Final = 5.0
#: At capacity (or out of file descriptors), a connection open this long, and not being answered,
#: may be shed to serve a newcomer: a real sender writes its hello and its request at once and is
#: done within its own 5 s deadline; only a slow, stalled or idle connection is still there.
SHED_AFTER_S: Final = 5.0
#: One monotonic deadline covering vetting, connect, hello and receipt.
SEND_DEADLINE_S: Final = 5.0
PROBE_DEADLINE_S: Final = 0.35

# -- admission -------------------------------------------------------------------------------------
#: A message older than this (by its sentAt) is refused as expired.
MESSAGE_MAX_AGE_S: Final = 30.0
#: Clock skew tolerated for a sentAt in the future.
MESSAGE_MAX_FUTURE_SKEW_S: Final = 5.0
#: Same text from the same sender is a duplicate within this window.
TEXT_DEDUP_WINDOW_S: Final = 30.0
#: Per-sender token bucket.
RATE_CAPACITY: Final = 30
RATE_REFILL_PER_S: Final = 0.5
MAX_RATE_SENDERS: Final = 256
#: Pending queue and the life of one entry.
MAX_QUEUED: Final = 50
QUEUE_TTL_S: Final = 30.0
#: Lifetime units per incarnation, shared by inbound commits and outbound attempts.
LIFETIME_BUDGET: Final = 256
#: Bounded caches (message ids, status rows, text digests).
MAX_CACHE_ENTRIES: Final = 512
#: A peer submission must start a turn within this time, or the inbox latches.
TURN_START_GRACE_S: Final = 5.0

# -- delivery receipts (ours) ----------------------------------------------------------------------
#: Longest a sender waits for ``delivered`` after a good receipt (the tool's and CLI's bound).
MAX_DELIVERY_WAIT_S: Final = 30.0
#: How often a waiting sender asks (a status query costs the receiver no budget and no token).
DELIVERY_POLL_S: Final = 0.25
