"""Target resolution: which live peer a ``send_pi_message`` target names (spec §6.2). Pure.

A target is trimmed (JS ``trim``) and loses one leading ``@``; then the first rule that applies
decides:

1. ``<name> [<hex>]`` (6 to 32 lowercase hex in brackets): the name must be equal, exactly, and the
   instance id must start with the hex. A ref from before a reload therefore no longer matches.
2. exactly 32 lowercase hex: an exact instance id, never a name or a session id.
3. anything else: a name, a session id or an instance id that is equal, or a lowercase hex prefix of
   at least 6 characters of an instance id.

No match is ``not_found``, several are ``ambiguous``; both messages say what does exist and how to
be precise. They suggest ``@name [ref]`` rather than ``name [ref]``: since one leading ``@`` is
always removed, only the ``@`` form reaches a session whose name itself starts with ``@``.

``\\s``/``\\S``/``.`` of rule 1 are the JavaScript classes (U+FEFF is whitespace, U+001C is not,
``.`` stops at every line terminator), built from
:data:`~pi_cross_session._internal.protocol.text.JS_WHITESPACE`.

Deviation from the reference, on purpose: the caller's own session is never a candidate, but when a
target would match *only* the caller, the reference reports ``not_found`` while we report
``invalid_target`` saying that a session cannot message itself. "Not found" for a session that is
plainly listed as this one sends a model looking for a peer that does not exist. For this to work
the caller passes its own entry in ``peers`` (it is filtered out by ``self_instance_id``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final, Protocol, TypeVar

from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.errors import CrossSessionError
from pi_cross_session._internal.protocol.limits import (
    DISPLAY_CWD_CODE_POINTS,
    DISPLAY_DIAGNOSTIC_CODE_POINTS,
    MAX_TARGET_UNITS,
    MIN_HEX_PREFIX_CHARS,
)
from pi_cross_session._internal.protocol.paths import is_instance_id
from pi_cross_session._internal.protocol.text import (
    JS_WHITESPACE,
    clean_line,
    clean_name,
    is_blank,
    is_well_formed,
    js_trim,
    utf16_length,
)

_WS: Final = "[" + re.escape(JS_WHITESPACE) + "]"
_NOT_WS: Final = "[^" + re.escape(JS_WHITESPACE) + "]"
#: JS ``.`` without the ``s`` flag: anything but a line terminator.
_ANY: Final = "[^\n\r\u2028\u2029]"
#: ``^(.*\S)\s+\[([0-9a-f]{6,32})\]$`` with JavaScript's classes; used with fullmatch.
_NAME_WITH_REF: Final = re.compile(
    f"({_ANY}*{_NOT_WS}){_WS}+\\[([0-9a-f]{{{MIN_HEX_PREFIX_CHARS},32}})\\]"
)
_HEX_PREFIX: Final = re.compile(f"[0-9a-f]{{{MIN_HEX_PREFIX_CHARS},32}}")

#: How a target may be written; the hint of the empty, too-long and not-found errors.
_HOW_TO_ADDRESS: Final = (
    'Address a session as "@name [ref]" with the name and ref list_pi shows, '
    "or by its exact session id or runtime id."
)


class Addressable(Protocol):
    """What resolution reads of a peer; :class:`~.registration.PublicPeer` provides it."""

    @property
    def name(self) -> str: ...
    @property
    def id(self) -> str: ...
    @property
    def instance_id(self) -> str: ...
    @property
    def ref(self) -> str: ...
    @property
    def cwd(self) -> str: ...


PeerT = TypeVar("PeerT", bound=Addressable)


class AddressError(CrossSessionError):
    """A target that names no single other live session.

    ``code`` is ``invalid_target``, ``not_found`` or ``ambiguous``; ``target`` is the target as
    given; ``candidates`` holds every match when ambiguous (empty otherwise).
    """

    code = Code.INVALID_TARGET

    def __init__(
        self,
        message: str,
        *,
        code: str,
        target: str,
        candidates: Sequence[Addressable] = (),
    ) -> None:
        super().__init__(message, code=code)
        self.target = target
        self.candidates: tuple[Addressable, ...] = tuple(candidates)


def _label(peer: Addressable) -> str:
    return f"{clean_name(peer.name)} [{peer.ref}]"


def _quoted(target: str) -> str:
    # The target comes from a model or a user: one clean, bounded line inside quotes.
    return '"' + clean_line(target, DISPLAY_DIAGNOSTIC_CODE_POINTS) + '"'


def _bounded_list(items: Sequence[str], limit: int) -> str:
    """Join items with commas until ``limit`` code points; say how many were left out."""
    shown: list[str] = []
    used = 0
    for item in items:
        cost = len(item) + (2 if shown else 0)
        if shown and used + cost > limit:
            break
        shown.append(item)
        used += cost
    rest = len(items) - len(shown)
    return ", ".join(shown) + (f" and {rest} more" if rest else "")


def _matches(t: str, peer: Addressable) -> bool:
    """Rules 1 to 3 of spec §6.2 for one peer; ``t`` is already trimmed and without its ``@``."""
    with_ref = _NAME_WITH_REF.fullmatch(t)
    if with_ref is not None:
        return peer.name == with_ref.group(1) and peer.instance_id.startswith(with_ref.group(2))
    if is_instance_id(t):
        return peer.instance_id == t
    return (
        peer.name == t
        or peer.id == t
        or peer.instance_id == t
        or (_HEX_PREFIX.fullmatch(t) is not None and peer.instance_id.startswith(t))
    )


def _normalise(target: str) -> str:
    if utf16_length(target) > MAX_TARGET_UNITS:
        raise AddressError(
            f"The target is longer than {MAX_TARGET_UNITS} UTF-16 units. {_HOW_TO_ADDRESS}",
            code=Code.INVALID_TARGET,
            target=target,
        )
    if not is_well_formed(target):
        raise AddressError(
            "The target contains an unpaired surrogate, so it cannot name any session.",
            code=Code.INVALID_TARGET,
            target=target,
        )
    t = js_trim(target).removeprefix("@")
    if is_blank(t):
        raise AddressError(
            f"The target is empty. {_HOW_TO_ADDRESS}", code=Code.INVALID_TARGET, target=target
        )
    return t


def _not_found(target: str, t: str, others: Sequence[Addressable]) -> AddressError:
    parts = [f"No other live session matches {_quoted(target)}."]
    with_ref = _NAME_WITH_REF.fullmatch(t)
    if with_ref is not None:
        renamed = sorted(_label(p) for p in others if p.name == with_ref.group(1))
        if renamed:
            # The usual cause: the session reloaded, so its runtime id (and ref) changed.
            parts.append(
                "A session with that name is live under another ref (it may have restarted): "
                + _bounded_list(renamed, DISPLAY_DIAGNOSTIC_CODE_POINTS)
                + "."
            )
    elif is_instance_id(t):
        parts.append("A 32-character hex target is compared only with runtime ids.")
    names = sorted({clean_name(p.name) for p in others})
    if names:
        parts.append("Live sessions: " + _bounded_list(names, DISPLAY_DIAGNOSTIC_CODE_POINTS) + ".")
    else:
        parts.append("There are no other live sessions.")
    parts.append(_HOW_TO_ADDRESS)
    return AddressError(" ".join(parts), code=Code.NOT_FOUND, target=target)


def _ambiguous(target: str, matches: Sequence[Addressable]) -> AddressError:
    lines = [
        f"{_quoted(target)} matches {len(matches)} live sessions; "
        'name one as "@name [ref]" with a ref from this list:'
    ]
    lines.extend(
        f"- {_label(p)} in {clean_line(p.cwd, DISPLAY_CWD_CODE_POINTS) or '(no cwd)'}"
        for p in sorted(matches, key=_label)
    )
    return AddressError("\n".join(lines), code=Code.AMBIGUOUS, target=target, candidates=matches)


def resolve_target(target: str, peers: Sequence[PeerT], *, self_instance_id: str | None) -> PeerT:
    """The one live peer ``target`` names, or :class:`AddressError`.

    ``peers`` are the live peers of a listing. It may include the caller's own entry (the one whose
    instance id is ``self_instance_id``): that entry is never returned, but lets a self-send be
    refused with a message that says so.
    """
    t = _normalise(target)
    others = [p for p in peers if p.instance_id != self_instance_id]
    matches = [p for p in others if _matches(t, p)]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise _ambiguous(target, matches)
    if any(p.instance_id == self_instance_id and _matches(t, p) for p in peers):
        raise AddressError(
            f"{_quoted(target)} is this session; a session cannot send a message to itself.",
            code=Code.INVALID_TARGET,
            target=target,
        )
    raise _not_found(target, t, others)
