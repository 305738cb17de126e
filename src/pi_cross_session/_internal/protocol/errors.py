"""The one exception tree of the package: every class, wherever it is defined.

Every error this package raises on purpose is a :class:`CrossSessionError` and carries a ``code``
(a wire status, an errno name or a local code). The tree below lists every exception class in
``src`` with the module that defines it; ``tests/package/test_errors.py`` checks that it is complete
and that each class's parent is the one drawn. Only module-private classes (a leading underscore:
control flow that never leaves its module) are left out.

::

    CrossSessionError                     every deliberate error; carries a code
    ├── FrameError                        bytes that are not a frame (framing, UTF-8, JSON)
    │   └── FrameTooLargeError            a frame over the byte cap (``message_too_large``)
    ├── FrameValidationError              JSON that is not the frame the contract expects
    ├── LocalProtocolError                we were about to break the contract ourselves
    │   ├── RegistrarStoppedError         protocol.io.discovery: the registrar never writes again
    │   ├── UnpublishableRegistrationError  protocol.registration: our own values would be skipped
    │   ├── RowTransitionError            security.rows: a message row's move the table forbids
    │   ├── TurnEventError                security.turns: a turn event the table says cannot come
    │   └── SeatBusyError                 plugin.hosts.mcp_seat: a hand-over nobody could take
    ├── InvalidRegistrationError          protocol.registration: a peer's file breaks the contract
    ├── WriteWaitTimeoutError             protocol.io.discovery: a write waited too long
    ├── AddressError                      protocol.addressing: no single live session matches
    ├── ExchangeError                     protocol.io.exchange: no good receipt
    ├── FileSystemError                   security.io.fs: something at a path cannot be used
    │   ├── UnsafePathError               security.io.fs: it fails a trust check
    │   └── FileOperationError            security.io.fs: the OS refused (code: errno name)
    ├── GoalError                         security.goals.errors: a goal action was refused
    ├── NotReadyError                     plugin.runtime: no running incarnation
    ├── IdentityBusyError                 plugin.cli_identity: every CLI identity stayed busy
    ├── IdentityUnusableError             plugin.cli_identity: no CLI identity's lock file is safe
    ├── InputError                        cli.send_cmd: the message to send could not be read
    ├── EnvelopeError                     protocol.remote.envelope: bytes that are no envelope
    ├── MachineKeyError                   security.remote.identity: a key that cannot be read
    ├── TrustConfigError                  security.remote.trust: a trust file that cannot be used
    ├── CredentialsError                  security.remote.nats_jwt: an NKey or JWT that is unusable
    ├── RemoteSetupError                  plugin.remote.files: the remote plane is not set up
    ├── DeploymentError                   plugin.remote.deployment: a deployment dir or card is bad
    │   └── AdmissionRefusedError         plugin.remote.deployment: the hub admits not (code: why)
    ├── PkiError                          plugin.remote.pki: a CA there that cannot be kept
    ├── JoinError                         protocol.remote.join: a join line, ask or answer is bad
    ├── JoinFailedError                   plugin.remote.joining: this machine did not join, and why
    ├── RotationRefusedError              security.remote.rotation: the hub takes not a rotation ask
    ├── RotateFailedError                 plugin.remote.rotation: this machine's keys not rotated
    ├── UnreachableError                  plugin.remote.link: not sent: no NATS connection, …
    │   ├── NoRespondersError             plugin.remote.link: NATS found nobody for it (not sent)
    │   └── ConnectError                  plugin.remote.link: connecting failed, and why
    ├── PermissionDeniedError             plugin.remote.link: NATS refused us the subject (not sent)
    ├── HopTimeoutError                   plugin.remote.link: no reply in time (outcome unknown)
    ├── BucketError                       plugin.remote.link: the bucket is missing or refused us
    │   └── NoJetStreamError              plugin.remote.link: the server runs without JetStream
    └── RefusedError                      plugin.remote.link: the servers refused an admin request

"The peer broke the protocol" (:class:`FrameError`, :class:`FrameValidationError`) and "we broke it"
(:class:`LocalProtocolError`) are different classes so that a caller never confuses a hostile input
with a bug of ours.
"""

from __future__ import annotations

from pi_cross_session._internal.protocol.codes import Code


class CrossSessionError(Exception):
    """Root of every deliberate error; ``code`` is the wire or local status it maps to."""

    code: str = Code.INVALID_FRAME

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class FrameError(CrossSessionError):
    """The peer sent bytes that do not form a frame: bad UTF-8, an empty line, not JSON."""

    code = Code.INVALID_FRAME


class FrameTooLargeError(FrameError):
    """One frame passed the raw byte cap before its LF arrived (or would, when encoding)."""

    code = Code.MESSAGE_TOO_LARGE


class FrameValidationError(CrossSessionError):
    """Well-formed JSON whose shape or values break the contract for the expected frame."""

    code = Code.INVALID_FRAME


class LocalProtocolError(CrossSessionError):
    """This side was about to send something the contract forbids; nothing was sent."""
