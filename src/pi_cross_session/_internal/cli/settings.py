"""The command line's own bounds: how long ``inbox --busy`` may pretend to be busy, how much of a
message file or stdin ``send`` reads, and how long ``send --wait`` follows a queued message past
the queue's time to live. The command line's room (the wire's and the receiver's bounds are in
:mod:`pi_cross_session._internal.protocol.limits`)."""

from typing import Final

from pi_cross_session._internal.protocol.limits import MAX_FRAME_BYTES

#: Longest simulated turn ``pi-cross-session inbox --busy`` takes (a tool for trying things out;
#: a longer one only makes the queue expire).
MAX_INBOX_BUSY_S: Final = 60.0
#: Bytes read from a message file or stdin, at most: a UTF-8 text longer than one frame cannot
#: be sent (it has at least as many bytes as UTF-16 units), so a larger input is refused before
#: it is read whole.
MAX_MESSAGE_INPUT_BYTES: Final = MAX_FRAME_BYTES
#: After the queue TTL, how long ``send --wait`` keeps following a message that is still queued:
#: the receiver's expiry check plus one status round-trip. So a queued message's fate (submitted
#: or expired) is known before the wait ends, and the wait cannot race the queue's expiry.
QUEUE_FATE_MARGIN_S: Final = 2.0
