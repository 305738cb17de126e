"""Text rules shared by the whole wire: lengths in the contract's units, JS whitespace, names.

The reference peer is written in JavaScript, so several rules are phrased in JS terms:

* string length is counted in UTF-16 code units (an astral character counts two);
* ``trim`` and ``\\s`` use the ECMAScript whitespace set, which includes U+FEFF and differs from
  :meth:`str.isspace` (Python counts U+001C..U+001F and U+0085, JS does not);
* a "well-formed" string holds no lone surrogate. Python strings can carry one (``json.loads`` turns
  ``"\\ud800"`` into one), so every text that reaches a rule is checked first.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Final

from pi_cross_session._internal.protocol.limits import MAX_ID_CHARS, MAX_NAME_CODE_POINTS

#: ECMAScript WhiteSpace + LineTerminator (what ``\s`` and ``String.prototype.trim`` use).
JS_WHITESPACE: Final = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)
_JS_WHITESPACE_RUN: Final = re.compile("[" + re.escape(JS_WHITESPACE) + "]+")
_ASTRAL: Final = re.compile("[\U00010000-\U0010ffff]")
_SURROGATE: Final = re.compile("[\ud800-\udfff]")

#: A request or message id (spec §3: 1–128 characters of ``[A-Za-z0-9_-]``). Here, not among
#: the frames, so that a reader of ids (the journal's) need not import pydantic.
ID_RE: Final = re.compile(rf"[A-Za-z0-9_-]{{1,{MAX_ID_CHARS}}}")

#: What a session without a usable name is called.
UNNAMED_SESSION: Final = "unnamed-session"


def utf16_length(value: str) -> int:
    """Length of ``value`` as JavaScript's ``String.prototype.length`` reports it."""
    if value.isascii():
        return len(value)
    return len(value) + len(_ASTRAL.findall(value))


def is_well_formed(value: str) -> bool:
    """True when ``value`` holds no lone surrogate, i.e. it can be encoded as UTF-8."""
    return value.isascii() or _SURROGATE.search(value) is None


def require_well_formed(value: str) -> str:
    """``value`` itself, or :class:`ValueError` when it holds a lone surrogate (a validator)."""
    if not is_well_formed(value):
        raise ValueError("must be well-formed Unicode (no lone surrogates)")
    return value


def js_trim(value: str) -> str:
    """``String.prototype.trim``: strip the ECMAScript whitespace set from both ends."""
    return value.strip(JS_WHITESPACE)


def is_blank(value: str) -> bool:
    """True when nothing but ECMAScript whitespace is left after trimming."""
    return not js_trim(value)


def truncate_code_points(value: str, limit: int) -> str:
    """Keep at most ``limit`` code points (a Python ``str`` is indexed by code point)."""
    return value[:limit]


def _is_control_or_format(char: str) -> bool:
    return unicodedata.category(char) in ("Cc", "Cf")


def clean_line(value: str, limit: int = MAX_NAME_CODE_POINTS) -> str:
    """Fold a string to one display line of at most ``limit`` code points.

    Control and format characters become spaces, every whitespace run becomes one space, the ends
    are trimmed, then the result is cut to ``limit`` code points. This is the normalisation both
    peers apply to names, summaries and display fields, so two implementations agree on what a
    name is and which names collide.
    """
    if value.isascii() and value.isprintable():
        spaced = value
    else:
        spaced = "".join(" " if _is_control_or_format(c) else c for c in value)
    folded = _JS_WHITESPACE_RUN.sub(" ", spaced)
    return truncate_code_points(js_trim(folded), limit)


def clean_name(value: str | None) -> str:
    """A session name as it is published: cleaned, cut to 200 code points, never empty.

    Unlike :func:`clean_line` alone, a space left at the end by the cut is trimmed too: a name that
    ends in whitespace could not be addressed as ``name [ref]``.
    """
    cleaned = js_trim(clean_line(value or "", MAX_NAME_CODE_POINTS))
    return cleaned or UNNAMED_SESSION
