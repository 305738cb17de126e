"""The command line's exit codes: stable numbers a script can rely on, and the table ``--help``,
the README and docs/operations.md show.

``send`` without ``--wait`` keeps its first meanings (0 the receiver took it, 2 refused, 3 receipt
unknown, 4 no such target, 1 a usage or local error). ``status`` and ``send --wait`` report what
became of the message, so they add codes for the states between "taken" and "delivered": every
state a script may need to tell apart has its own number.
"""

from __future__ import annotations

from typing import Final

EXIT_OK: Final = 0
EXIT_LOCAL: Final = 1
EXIT_REFUSED: Final = 2
EXIT_UNKNOWN: Final = 3
EXIT_NO_TARGET: Final = 4
EXIT_SUBMITTED: Final = 5
EXIT_QUEUED: Final = 6
EXIT_INTERRUPTED: Final = 130


def for_state(state: str) -> int:
    """The exit code of a message state as ``status`` and ``send --wait`` report it; a word no
    receiver of ours says counts as unknown."""
    # Imported here: a command that reports no message state (peers) need not build the enum.
    from pi_cross_session._internal.protocol.codes import FINAL_ROW_STATES, PENDING_ROW_STATES, Code

    if state == Code.DELIVERED:
        return EXIT_OK
    if state == Code.SUBMITTED:
        return EXIT_SUBMITTED
    if state in PENDING_ROW_STATES:
        return EXIT_QUEUED
    if state in FINAL_ROW_STATES:
        return EXIT_REFUSED  # expired, dropped, injection failed: it will never be delivered
    return EXIT_UNKNOWN


#: The table shown under ``--help`` (and copied, word for word, into the docs).
TABLE: Final = """\
exit codes:
  0    send: the receiver took the message (submitted or queued)
       status, send --wait: delivered (the receiving session confirmed it
       entered its conversation; not a sign it was read or acted on)
  1    usage or local error; nothing was sent
  2    refused; for status and send --wait also: it will never be delivered
       (expired, dropped, injection failed)
  3    unknown: a send's receipt never came (ask with status, never resend
       blindly); for status: the receiver has no record of it, or could
       not be asked
  4    no single live session matches the target (not found or ambiguous)
  5    status, send --wait: submitted, delivery not confirmed
  6    status, send --wait: still queued at the receiver
  130  interrupted (Ctrl-C)
peers, paths, inbox and doctor exit 0 when they did their job and 1 otherwise."""

#: The epilog of the commands whose job is not a message (``paths``, ``peers``, ``inbox``): the
#: table above is ``send``'s and ``status``'s, and ``--help`` shows it there only.
SIMPLE: Final = """\
exit status: 0 when it did its job, 1 otherwise, 130 when interrupted (Ctrl-C);
'pi-cross-session --help' shows the codes of send and status."""
