"""The MCP host's bounds (``pi-cross-session mcp``): what one read of the inbox returns and how
long the server waits. Its own room (the wire's bounds are in
:mod:`pi_cross_session._internal.protocol.limits`)."""

from typing import Final

from pi_cross_session._internal.protocol.limits import MAX_TEXT_UNITS, QUEUE_TTL_S, SEND_DEADLINE_S

#: Longest ``wait_pi_message`` waits for a message: the queue's time to live, since a message
#: queued when the wait began has ended by then anyway, and MCP hosts time tool calls out at a
#: minute or so.
MAX_PULL_WAIT_S: Final = QUEUE_TTL_S
#: Messages one ``read_pi_messages`` / ``wait_pi_message`` result carries, at most; the rest stay
#: queued for the next read (a result is one block of the model's context).
MAX_PULL_MESSAGES: Final = 10
#: Text one result carries, utf16, before it stops taking more messages: one full-size message
#: (the first always fits, whatever its size).
MAX_PULL_UNITS: Final = MAX_TEXT_UNITS
#: How long a read waits for the next queued message to be handed over: one pass of the runtime's
#: loop in practice; the bound only keeps a read from hanging on a runtime that stopped.
PULL_HANDOFF_STEP_S: Final = 2.0
#: How long the server lets its inbox stop after the host closed stdin or signalled it, before
#: removing the registration and socket the hard way (the SDK's client kills a server 2 s after
#: closing its stdin, with SIGTERM, which is handled the same way).
MCP_STOP_TIMEOUT_S: Final = 5.0
#: How long the server keeps answering after the host closed stdin: requests it had already read
#: are answered before it exits. A send under way ends its whole exchange within the sender's
#: deadline (``SEND_DEADLINE_S``), and a read or wait in progress returns at once with what it
#: holds; only a send that also waits for delivery (``waitSeconds``) can run past this, and is then
#: answered with the SDK's "Connection closed" error.
MCP_DRAIN_TIMEOUT_S: Final = SEND_DEADLINE_S + 1.0
