"""The status line that says what a session did to keep serving under load (and says nothing
when nothing pressed it)."""

from __future__ import annotations

from types import MappingProxyType

from pi_cross_session._internal.plugin.render import host_status
from pi_cross_session._internal.plugin.reports import PeerChecks, Pressure
from pi_cross_session._internal.security.auth import AuthDiagnostics

QUIET = AuthDiagnostics(refusals=MappingProxyType({}), recent=())


def checks(pressure: Pressure, shed: int = 0) -> PeerChecks:
    return PeerChecks(
        source="SO_PEERCRED",
        auth=QUIET,
        foreign_uid_closed=0,
        credentials_unreadable=0,
        unverified=0,
        shed=shed,
        pressure=pressure,
    )


def test_an_unpressed_session_shows_no_pressure_line() -> None:
    assert host_status.pressure_line(Pressure()) is None
    assert host_status.peer_check_lines(checks(Pressure())) == [
        "Peer checks: SO_PEERCRED; other uids closed 0"
    ]
    assert host_status.peer_check_data(checks(Pressure()))["peerChecks"]["pressure"] == {
        "acceptFailures": {},
        "lastAcceptFailure": None,
        "lastAcceptFailureAgeS": None,
        "descriptorCap": None,
        "shedForDescriptors": 0,
        "requestDeadlineCuts": 0,
        "costlyFrames": 0,
        "throttledReads": 0,
        "registrationRetries": {},
        "lastRegistrationRetryAgeS": None,
    }


def test_everything_that_happened_is_said_once() -> None:
    pressure = Pressure(
        accept_failures={"EMFILE": 3, "ECONNABORTED": 1},
        last_accept_failure="EMFILE",
        last_accept_failure_age_s=12.4,
        descriptor_cap=49,
        shed_for_descriptors=8,
        request_deadline_cuts=5,
        costly_frames=7,
        throttled_reads=900,
        registration_retries={"EMFILE": 2},
        last_registration_retry_age_s=3.0,
    )
    lines = host_status.peer_check_lines(checks(pressure, shed=11))
    assert lines[0] == (
        "Peer checks: SO_PEERCRED; other uids closed 0; connections shed for newcomers 11"
    )
    assert lines[-1] == (
        "Under pressure: accept failed ECONNABORTED 1, EMFILE 3, last 12 s ago (kept serving); "
        "file descriptors short: connections held to 49 (counted again every second); "
        "connections shed to free descriptors 8; registration writes retried EMFILE 2, "
        "last 3 s ago; requests too slow after ready 5; frames too costly to parse 7; "
        "reads slowed for a process over its share 900"
    )
    data = host_status.peer_check_data(checks(pressure, shed=11))["peerChecks"]
    assert (data["shed"], data["pressure"]["descriptorCap"]) == (11, 49)
    assert data["pressure"]["acceptFailures"] == {"EMFILE": 3, "ECONNABORTED": 1}
