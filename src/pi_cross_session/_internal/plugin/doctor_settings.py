"""What ``doctor`` may spend: a diagnosis stays bounded in time and output whatever fills the
dirs. The doctor's own room (the wire's bounds are in
:mod:`pi_cross_session._internal.protocol.limits`)."""

from typing import Final

from pi_cross_session._internal.protocol.limits import MAX_LISTED_REGISTRATIONS

#: Registrations past the listing window that doctor reads as a sample, to say what fills the dir.
DOCTOR_SAMPLE_PAST_WINDOW: Final = 64
#: Findings of one kind doctor shows before it only counts the rest.
DOCTOR_FINDINGS_PER_KIND: Final = 8
#: Instance ids named as examples in one summary finding.
DOCTOR_EXAMPLES: Final = 5
#: Sockets in the runtime dir doctor asks the kernel about (one non-blocking connect each).
DOCTOR_SOCKETS_CHECKED: Final = MAX_LISTED_REGISTRATIONS
#: A process name (``/proc/<pid>/comm`` holds at most 15 bytes on Linux) shown in a finding.
DISPLAY_PROCESS_NAME_CODE_POINTS: Final = 64
