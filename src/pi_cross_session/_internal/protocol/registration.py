"""The v2 registration record (spec §1.3): validation, exact serialisation, public view, display.

A registration is the JSON file ``<agentDir>/peers/<instanceId>.json`` through which a running
session tells the others where it listens and which bearer token opens its door. This module is
pure: it turns bytes into a :class:`Registration` (or refuses them), a registration into the exact
bytes the reference writer would produce, and a registration into what may be shown to a model or a
user (:class:`PublicPeer`, :func:`display_line`). Reading the dir, checking file modes and running
``git`` belong to other modules.

Choices made where the contract leaves room:

* **Unknown fields are dropped.** The reference ignores them during validation but passes them on
  to listings and RPC payloads; we never show anything a peer wrote that the contract does not
  define.
* **Numbers are read as their JSON spelling says.** ``version``, ``protocol`` and ``pid`` must be
  JSON integers: ``2.0`` or ``1e3`` is refused even though JavaScript, which has one number type,
  would accept it. No writer of either side produces such a spelling, so this only narrows what a
  forged file can do. Booleans are never numbers. A timestamp must be finite as a JS double, so an
  integer too large for a double (JS reads it as ``Infinity``) is refused.
* **Bytes must be UTF-8.** Node would replace invalid bytes with U+FFFD and carry on; we refuse.
  Strings holding a lone surrogate (a ``"\\ud800"`` escape) are refused: spec §11 asks for
  well-formed strings throughout, and such a name or path could not be shown or hashed faithfully.
* **The error code.** A refused record raises :class:`InvalidRegistrationError` with code
  ``invalid_frame`` (a registration is the discovery plane's frame), except a ``socketPath`` that
  differs from the recomputed one, which is ``unsafe_endpoint`` as in sender vetting (spec §2).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Annotated, Any, Final, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
)

from pi_cross_session._internal.protocol import jsonwire, sanitize
from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.errors import (
    CrossSessionError,
    FrameError,
    LocalProtocolError,
)
from pi_cross_session._internal.protocol.limits import (
    DISPLAY_CWD_CODE_POINTS,
    DISPLAY_SESSION_ID_CODE_POINTS,
    MAX_CWD_UNITS,
    MAX_NAME_CODE_POINTS,
    MAX_PID,
    MAX_REGISTRATION_BYTES,
    MAX_SAFE_INTEGER,
    MAX_SESSION_ID_UNITS,
    REF_CHARS,
)
from pi_cross_session._internal.protocol.paths import is_instance_id, js_to_well_formed
from pi_cross_session._internal.protocol.text import (
    UNNAMED_SESSION,
    clean_name,
    require_well_formed,
    utf16_length,
)

#: Registration schema written and accepted (``version``).
REGISTRATION_VERSION: Final = 2
#: Wire protocol announced in the registration (``protocol``).
PROTOCOL_VERSION: Final = 1

Status = Literal["idle", "busy"]
Inbound = Literal["accept", "refuse"]

_TOKEN: Final = re.compile(r"[0-9a-f]{64}")
#: A commit id: SHA-1 (40) or SHA-256 (64) in lowercase hex.
_GIT_HEAD: Final = re.compile(r"[0-9a-f]{40,64}")
#: How much of the commit id a display line shows (a format detail of spec §6.1, not a bound).
_HEAD_DISPLAY_CHARS: Final = 8
#: Separator of display fields: an em dash between spaces.
_SEP: Final = " \u2014 "


# -- errors ----------------------------------------------------------------------------------------


class InvalidRegistrationError(CrossSessionError):
    """A registration read from the peers dir breaks the contract; listings skip it.

    ``field`` names the first offending JSON field (camelCase), or is ``None`` when the record as a
    whole is wrong (not UTF-8, not JSON, not an object, too large).
    """

    code = Code.INVALID_FRAME

    def __init__(self, message: str, *, field: str | None = None, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.field = field


class UnpublishableRegistrationError(LocalProtocolError):
    """Our own values would make a registration the other peers skip; nothing was written.

    ``field`` names the offending JSON field (camelCase).
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


# -- field rules -----------------------------------------------------------------------------------
# Before-validators see the raw JSON value; they exist because pydantic's int/Literal checks accept
# True for 1 and 2.0 for 2, which is exactly what the contract's typed reader must not do.


def _exact_int(value: object) -> object:
    if type(value) is not int:
        raise ValueError("must be a JSON integer")
    return value


def _finite_number(value: object) -> object:
    if type(value) is int:
        try:
            float(value)
        except OverflowError:
            # JS reads such a literal as Infinity, which is not finite.
            raise ValueError("must be a finite number") from None
        return value
    if type(value) is float and math.isfinite(value):
        return value
    raise ValueError("must be a finite number")


def _is_version(value: int) -> int:
    if value != REGISTRATION_VERSION:
        raise ValueError(f"must be {REGISTRATION_VERSION}")
    return value


def _is_protocol(value: int) -> int:
    if value != PROTOCOL_VERSION:
        raise ValueError(f"must be {PROTOCOL_VERSION}")
    return value


def _session_id(value: str) -> str:
    if not value or utf16_length(value) > MAX_SESSION_ID_UNITS:
        raise ValueError(f"must be 1 to {MAX_SESSION_ID_UNITS} UTF-16 units long")
    return value


def _instance_id(value: str) -> str:
    if not is_instance_id(value):
        raise ValueError("must be 32 lowercase hex characters")
    return value


def _name(value: str) -> str:
    # A str is indexed by code point, which is the unit of this limit.
    if not value or len(value) > MAX_NAME_CODE_POINTS:
        raise ValueError(f"must be 1 to {MAX_NAME_CODE_POINTS} code points long")
    return value


def _cwd(value: str) -> str:
    if utf16_length(value) > MAX_CWD_UNITS:
        raise ValueError(f"must be at most {MAX_CWD_UNITS} UTF-16 units long")
    return value


def _pid(value: int) -> int:
    if not 1 <= value <= MAX_PID:
        raise ValueError(f"must be between 1 and {MAX_PID}")
    return value


def _git_head(value: str) -> str:
    if _GIT_HEAD.fullmatch(value) is None:
        raise ValueError("must be 40 to 64 lowercase hex characters")
    return value


def _token(value: str) -> str:
    # fullmatch: Python's "$" would also accept a trailing newline.
    if _TOKEN.fullmatch(value) is None:
        raise ValueError("must be 64 lowercase hex characters")
    return value


_Str = Annotated[str, AfterValidator(require_well_formed)]
_Int = Annotated[int, BeforeValidator(_exact_int)]
_Timestamp = Annotated[int | float, BeforeValidator(_finite_number)]


class _RegistrationFields(BaseModel):
    """The twelve fields a registration shares with its public view, in writer order."""

    model_config = ConfigDict(frozen=True, strict=True, populate_by_name=True, extra="ignore")

    version: Annotated[_Int, AfterValidator(_is_version)]
    protocol: Annotated[_Int, AfterValidator(_is_protocol)]
    id: Annotated[_Str, AfterValidator(_session_id)]
    instance_id: Annotated[_Str, AfterValidator(_instance_id)] = Field(alias="instanceId")
    name: Annotated[_Str, AfterValidator(_name)]
    cwd: Annotated[_Str, AfterValidator(_cwd)]
    pid: Annotated[_Int, AfterValidator(_pid)]
    started_at: _Timestamp = Field(alias="startedAt")
    updated_at: _Timestamp = Field(alias="updatedAt")
    status: Status
    inbound: Inbound
    socket_path: _Str = Field(alias="socketPath")

    @property
    def ref(self) -> str:
        """The short form of the instance id shown beside a name: its first 8 characters."""
        return self.instance_id[:REF_CHARS]


class Registration(_RegistrationFields):
    """A validated v2 registration. Attribute names are snake_case; JSON keys are camelCase.

    The token is left out of ``repr`` so a registration can be logged without leaking it.
    """

    token: Annotated[_Str, AfterValidator(_token)] = Field(repr=False)


#: The JSON keys a registration file may contribute.
_WIRE_KEYS: Final = frozenset(
    field.alias or name for name, field in Registration.model_fields.items()
)


class GitInfo(BaseModel):
    """Where a peer's cwd sits in git: worktree root, branch (``None`` when detached), HEAD."""

    model_config = ConfigDict(frozen=True, strict=True)

    worktree: Annotated[_Str, Field(min_length=1)]
    branch: _Str | None
    head: Annotated[_Str, AfterValidator(_git_head)]

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of a listing: ``{worktree, branch, head}``."""
        return {"worktree": self.worktree, "branch": self.branch, "head": self.head}


class PublicPeer(_RegistrationFields):
    """What may be shown of a peer: its registration without the token, plus ``ref`` and ``git``."""

    git: GitInfo | None = None

    @classmethod
    def from_registration(
        cls, registration: Registration, git: GitInfo | None = None
    ) -> PublicPeer:
        """The public view of a validated registration, with the git metadata found at listing."""
        fields = registration.model_dump(exclude={"token"})
        return cls.model_validate({**fields, "git": git})

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of a listing, in the reference's key order (``ref`` before ``git``)."""
        data = self.model_dump(by_alias=True, exclude={"git"})
        data["ref"] = self.ref
        data["git"] = None if self.git is None else self.git.to_dict()
        return data


# -- reading ---------------------------------------------------------------------------------------


def _describe(error: ValidationError) -> tuple[str | None, str]:
    """The first failing field and a message that never echoes the (possibly hostile) value."""
    first = error.errors(include_url=False, include_input=False)[0]
    loc = first["loc"]
    field = str(loc[0]) if loc else None
    if first["type"] == "value_error":
        reason = str(first["ctx"]["error"])
    elif first["type"] == "missing":
        reason = "is missing"
    else:
        reason = first["msg"][:1].lower() + first["msg"][1:]
    where = f"field {field!r}" if field else "the record"
    return field, f"{where} {reason}"


def parse_registration(
    raw: bytes | str, *, file_stem: str, expected_socket_path: str
) -> Registration:
    """Validate one registration exactly as a reader must (spec §1.3, spec §1.5).

    ``file_stem`` is the file name without ``.json``; ``expected_socket_path`` is the path *this*
    reader computes for that instance id from its own agent dir and uid. Any failure raises
    :class:`InvalidRegistrationError`; a listing skips the entry.
    """
    size = len(raw) if isinstance(raw, bytes) else len(raw.encode("utf-8", "surrogatepass"))
    if size > MAX_REGISTRATION_BYTES:
        raise InvalidRegistrationError(f"the record is larger than {MAX_REGISTRATION_BYTES} bytes")
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidRegistrationError("the record is not UTF-8") from None
    else:
        text = raw
    try:
        data = jsonwire.loads(text)
    except FrameError:
        raise InvalidRegistrationError("the record is not JSON") from None
    if not isinstance(data, dict):
        raise InvalidRegistrationError("the record is not a JSON object")
    # Only the contract's camelCase keys are read: a snake_case "instance_id" in a file must not
    # stand in for "instanceId", and everything else is dropped (see the module docstring).
    known = {key: value for key, value in data.items() if key in _WIRE_KEYS}
    try:
        registration = Registration.model_validate(known)
    except ValidationError as exc:
        field, message = _describe(exc)
        raise InvalidRegistrationError(f"invalid registration: {message}", field=field) from None
    if registration.instance_id != file_stem:
        raise InvalidRegistrationError(
            "invalid registration: field 'instanceId' differs from the file name",
            field="instanceId",
        )
    if registration.socket_path != expected_socket_path:
        raise InvalidRegistrationError(
            "invalid registration: field 'socketPath' is not the path this agent dir gives",
            field="socketPath",
            code=Code.UNSAFE_ENDPOINT,
        )
    return registration


# -- writing ---------------------------------------------------------------------------------------


def js_number_text(value: int | float) -> str:
    """A number spelled as JavaScript's ``JSON.stringify`` spells it.

    Python and JS agree on the shortest round-trip digits but not on where exponent notation starts
    (``1e16`` vs ``10000000000000000``) nor on integral floats (``5.0`` vs ``5``). An integer beyond
    2**53 is spelled as the double JS would hold.
    """
    if isinstance(value, int) and abs(value) <= MAX_SAFE_INTEGER:
        return str(value)
    number = float(value)
    if not math.isfinite(number):
        raise ValueError("JSON has no spelling for a non-finite number")
    if number == 0:
        return "0"  # JS prints -0 as 0 too
    sign = "-" if number < 0 else ""
    # repr gives the shortest digits that round-trip; Decimal splits them into digits and exponent.
    _, digit_tuple, exponent = Decimal(repr(abs(number))).normalize().as_tuple()
    assert isinstance(exponent, int)  # finite, so never 'n'/'N'/'F'
    digits = "".join(map(str, digit_tuple))
    k = len(digits)
    n = exponent + k  # the decimal point sits after n digits
    if k <= n <= 21:
        body = digits + "0" * (n - k)
    elif 0 < n <= 21:
        body = f"{digits[:n]}.{digits[n:]}"
    elif -6 < n <= 0:
        body = "0." + "0" * -n + digits
    else:
        mantissa = digits if k == 1 else f"{digits[0]}.{digits[1:]}"
        body = f"{mantissa}e{'+' if n - 1 >= 0 else '-'}{abs(n - 1)}"
    return sign + body


def serialize(registration: Registration) -> bytes:
    """The registration file's bytes: compact JSON, the writer's key order, no trailing newline.

    Byte-identical to what the reference writes for the same values, numbers included.
    """
    members: list[str] = []
    for key, value in registration.model_dump(by_alias=True).items():
        # Every value is a str or a number (bool never validates), see _RegistrationFields.
        text = jsonwire.dumps(value) if isinstance(value, str) else js_number_text(value)
        members.append(f"{jsonwire.dumps(key)}:{text}")
    return ("{" + ",".join(members) + "}").encode("utf-8")


def inbound_from_flag(value: str | None) -> Inbound:
    """The effective inbound policy of the ``--cross-session-inbound`` option (spec §6.4).

    Unset means ``accept``; any value other than exactly ``accept`` means ``refuse``, so a typo
    closes the door rather than opening it.
    """
    return "accept" if value is None or value == "accept" else "refuse"


def _utf16_prefix(value: str, units: int) -> str:
    # JS slices by UTF-16 unit and could split a surrogate pair; we stop before such a pair instead,
    # so the default name never holds half a character.
    taken = 0
    for index, char in enumerate(value):
        taken += 2 if ord(char) > 0xFFFF else 1
        if taken > units:
            return value[:index]
    return value


def default_name(session_id: str, session_name: str | None) -> str:
    """The published name: the session's own name, or ``pi-`` + the id's first 8, cleaned
    (spec §1.6).

    Only ``None`` falls back to the id; an empty name is cleaned to ``unnamed-session``, as the
    reference's nullish fallback does.
    """
    if session_name is None:
        session_name = "pi-" + _utf16_prefix(session_id, REF_CHARS)
    # A lone surrogate would make every reader skip us; U+FFFD keeps the session reachable.
    return clean_name(js_to_well_formed(session_name))


def build_registration(
    *,
    session_id: str,
    session_name: str | None,
    instance_id: str,
    cwd: str,
    pid: int,
    started_at: int,
    updated_at: int,
    status: Status,
    inbound: Inbound,
    socket_path: str,
    token: str,
) -> Registration:
    """The registration our own writer publishes, checked by the same rules every reader applies.

    The name is derived with :func:`default_name`. Values that a reader would refuse (an empty or
    over-long session id, a cwd past the limit, a malformed id or token, a file past the size cap)
    raise
    :class:`UnpublishableRegistrationError`: a record the peers silently skip is worse than a clear
    error at start-up.
    """
    fields = {
        "version": REGISTRATION_VERSION,
        "protocol": PROTOCOL_VERSION,
        "id": session_id,
        "instanceId": instance_id,
        "name": default_name(session_id, session_name),
        "cwd": cwd,
        "pid": pid,
        "startedAt": started_at,
        "updatedAt": updated_at,
        "status": status,
        "inbound": inbound,
        "socketPath": socket_path,
        "token": token,
    }
    try:
        registration = Registration.model_validate(fields)
    except ValidationError as exc:
        field, message = _describe(exc)
        raise UnpublishableRegistrationError(
            f"cannot publish this session: {message}", field=field
        ) from None
    # A cwd within its unit limit can still push the file past the readers' size cap (an astral
    # character is 2 units but 4 bytes); such a file would be skipped just the same.
    if len(serialize(registration)) > MAX_REGISTRATION_BYTES:
        raise UnpublishableRegistrationError(
            f"cannot publish this session: with this cwd the record would be larger than "
            f"{MAX_REGISTRATION_BYTES} bytes",
            field="cwd",
        )
    return registration


# -- git metadata and display ----------------------------------------------------------------------


def parse_git_output(stdout: str) -> GitInfo | None:
    """Read ``git -C <cwd> rev-parse --show-toplevel HEAD --abbrev-ref HEAD`` (spec §6.1).

    The last line is the branch (``HEAD`` means detached), the line before it the commit id, and
    everything before that the worktree (a path may itself hold a newline). Anything that does not
    fit gives ``None``, as does any failure of the command, which the caller maps to ``None`` too.
    """
    text = stdout.removesuffix("\n")
    parts = text.rsplit("\n", 2)
    if len(parts) != 3:
        return None
    # Tolerate CRLF output: only a line's own terminator is dropped, never path content.
    worktree, head, branch = (part.removesuffix("\r") for part in parts)
    if not branch:
        return None
    try:
        return GitInfo(worktree=worktree, branch=None if branch == "HEAD" else branch, head=head)
    except ValidationError:
        return None


def display_name(name: str) -> str:
    """A session name as shown: escaped and folded to one line like every peer string, or
    ``unnamed-session`` when nothing visible is left.

    A name that a reader would publish is already clean (spec §1.6), and shows as itself; a name a
    hostile peer wrote by hand shows its control and invisible characters as escapes, rather than
    as the spaces :func:`~pi_cross_session._internal.protocol.text.clean_name` would make of them,
    so the reader sees that something was there.
    """
    return sanitize.line(name, MAX_NAME_CODE_POINTS) or UNNAMED_SESSION


def display_line(peer: PublicPeer) -> str:
    """One listing line: ``<name> [<ref>] — <status> — <cwd><git> — session <id>``.

    Every field a peer controls (its name, cwd and session id, and the git worktree and branch
    read from its cwd) goes through :func:`~pi_cross_session._internal.protocol.sanitize.line`:
    control, format and invisible characters are escaped, never acted on, so no field can drive the
    terminal or start a forged line; each is cut to the display limits of spec §1.6.
    """
    if peer.git is None:
        git = f"{_SEP}git none"
    else:
        worktree = sanitize.line(peer.git.worktree, DISPLAY_CWD_CODE_POINTS)
        branch = (
            "detached"
            if peer.git.branch is None
            else sanitize.line(peer.git.branch, MAX_NAME_CODE_POINTS)
        )
        git = f"{_SEP}git {worktree} ({branch}@{peer.git.head[:_HEAD_DISPLAY_CHARS]})"
    cwd = sanitize.line(peer.cwd, DISPLAY_CWD_CODE_POINTS)
    session = sanitize.line(peer.id, DISPLAY_SESSION_ID_CODE_POINTS)
    name = display_name(peer.name)
    return f"{name} [{peer.ref}]{_SEP}{peer.status}{_SEP}{cwd}{git}{_SEP}session {session}"
