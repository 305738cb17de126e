"""The command line's sender identities: how many, how long to wait for one, what each keeps.
The pool's own room (the wire's bounds are in :mod:`pi_cross_session._internal.protocol.limits`);
light
enough for the parser, which every command loads, to read the pool's size."""

from typing import Final

from pi_cross_session._internal.protocol.limits import MAX_CACHE_ENTRIES

#: Sender identities the command line keeps per agent dir. Each is one sender to a receiver (its
#: own rate bucket, duplicate window and status rows), and one process holds it at a time (a
#: receiver checks the hello comes from the pid its registration names). So this many invocations
#: can send at once, and a script gets at most this many times one sender's rate.
CLI_IDENTITY_POOL: Final = 4
#: How long an invocation waits for a free identity when all are in use: longer than the longest
#: legitimate hold (a send whose --wait follows a queued message to its fate, about 40 s).
CLI_IDENTITY_WAIT_S: Final = 60.0
#: How often an invocation that waits for an identity tries them again.
CLI_IDENTITY_RETRY_S: Final = 0.1
#: Message ids each identity remembers sending, so ``status`` asks as the identity that sent the
#: message; a receiver keeps no more rows than this for all its senders together.
CLI_SENT_IDS_KEPT: Final = MAX_CACHE_ENTRIES
#: Bytes read of a lock's holder note (pid, command, since when): a few dozen in practice.
CLI_HOLDER_NOTE_BYTES: Final = 4096
