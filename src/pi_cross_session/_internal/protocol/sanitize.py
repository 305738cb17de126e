"""The one sanitiser every peer-controlled string passes before it reaches a sink.

A peer controls many strings we show: its name, session id and cwd, a message's text and summary,
and every word of a receiver's reply (``status``, ``error``, ``next``). Shown raw, such a string can
drive the terminal that prints it (ESC and C1 control sequences clear the screen, set the window
title, write the clipboard with OSC 52, hide text), reorder what the reader sees (bidi overrides and
isolates), hide text from the reader while a model still reads it (zero-width and tag characters),
or forge whole lines (a CR that returns to the start of the line, an LF followed by a fake
``SYSTEM:`` line).

What is unsafe, for every sink alike: every character Python does not call printable except the
space separators (so C0 and C1 controls, DEL, format characters such as bidi controls, zero-width
characters and tags, line and paragraph separators, private-use, surrogate and unassigned code
points), plus the Hangul fillers, which are letters that render as nothing. An unsafe character is
never dropped silently: it is replaced by a visible escape (``\\x1b``, ``\\u202e``,
``\\U000e0041``), so the reader sees that something was there and what.

Sinks differ only in what structure they keep:

=====================================  =====================================================
sink                                   function
=====================================  =====================================================
one line (a name, a code, a summary,   :func:`line` — everything unsafe escaped, line breaks
a diagnostic) in a terminal, a tool    included; whitespace runs folded to one space; cut
result, a status display, a log        to a length
a block of text (a message body) in a  :func:`block` — line feeds and tabs kept, CRLF read
terminal or a conversation             as LF, everything else unsafe escaped (a lone CR too)
JSON for people or scripts             :func:`dumps` — standard JSON; C1 controls, bidi and
(``--json``)                           other invisible characters written as ``\\uXXXX``
=====================================  =====================================================

Pure: no I/O, nothing built at import time beyond two small constants.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from pi_cross_session._internal.protocol.text import JS_WHITESPACE

#: Letters that render as nothing, used to make a name look empty or like another name.
_INVISIBLE_LETTERS: Final = frozenset("\u115f\u1160\u3164\uffa0")
_INVISIBLE_LETTER: Final = re.compile("[\u115f\u1160\u3164\uffa0]")
#: Space separators are not printable to Python but are harmless to show: shown as a plain space.
_SPACE_SEPARATORS: Final = frozenset(
    "\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u202f\u205f\u3000"
)
_WHITESPACE_RUN: Final = re.compile("[" + re.escape(JS_WHITESPACE) + "]+")
#: What a cut line ends with, so a reader knows there was more.
ELLIPSIS: Final = "\u2026"


def is_unsafe(char: str) -> bool:
    """True when ``char`` (one code point) must not reach a sink as itself."""
    if char.isprintable():
        return char in _INVISIBLE_LETTERS
    return char not in _SPACE_SEPARATORS


def escape_char(char: str) -> str:
    """The visible escape of one code point: ``\\xHH``, ``\\uHHHH`` or ``\\UHHHHHHHH``."""
    point = ord(char)
    if point < 0x100:
        return f"\\x{point:02x}"
    if point < 0x10000:
        return f"\\u{point:04x}"
    return f"\\U{point:08x}"


def _escape_segment(segment: str, keep: str) -> str:
    # The common case costs one C-level scan: printable text has nothing to escape.
    if segment.isprintable() and _INVISIBLE_LETTER.search(segment) is None:
        return segment
    out: list[str] = []
    for char in segment:
        if char in keep or not is_unsafe(char):
            out.append(" " if char in _SPACE_SEPARATORS else char)
        else:
            out.append(escape_char(char))
    return "".join(out)


def escape(text: str, *, keep: str = "") -> str:
    """``text`` with every unsafe character escaped, except those in ``keep`` (e.g. ``"\\t"``)."""
    return _escape_segment(text, keep)


def line(text: str, limit: int | None = None) -> str:
    """One display line: unsafe characters escaped (line breaks too), whitespace runs folded to
    one space, the ends trimmed, and at most ``limit`` code points (an ellipsis marks a cut).

    For any single-line field a peer controls, on any sink: terminal, tool result, status, log.
    Escaping comes first, so a forged second line stays visibly part of the first.
    """
    folded = _WHITESPACE_RUN.sub(" ", escape(text, keep=" \t")).strip(" ")
    if limit is not None and len(folded) > limit:
        return folded[: max(0, limit - 1)].rstrip(" ") + ELLIPSIS
    return folded


def block(text: str) -> str:
    """A multi-line text (a message body) for a terminal or a conversation.

    Line feeds and tabs are kept, a CRLF pair is read as a line feed, and every other unsafe
    character (a lone CR, which would return to the start of the line and overwrite it, included)
    is escaped. The caller frames the result (indents it, or fences it) so that a line of peer text
    cannot pass for a line of ours.
    """
    normalised = text.replace("\r\n", "\n") if "\r" in text else text
    return "\n".join(_escape_segment(part, "\t") for part in normalised.split("\n"))


#: Characters JSON leaves raw with ``ensure_ascii=False`` that a terminal or a viewer would still
#: act on. JSON itself already escapes C0 controls, ``"`` and ``\\``.
_RAW_IN_JSON: Final = re.compile(r"[^\x00-\x7e]")


def _json_escape_match(match: re.Match[str]) -> str:
    char = match.group()
    if not is_unsafe(char):
        return char
    point = ord(char)
    if point < 0x10000:
        return f"\\u{point:04x}"
    # JSON has only \uXXXX escapes: an astral character is written as its surrogate pair.
    point -= 0x10000
    return f"\\u{0xD800 + (point >> 10):04x}\\u{0xDC00 + (point & 0x3FF):04x}"


def dumps(value: Any, *, indent: int | None = None) -> str:
    """JSON text for people and scripts: non-ASCII text stays readable, but every unsafe
    character (C1 controls, DEL, bidi and other invisible characters, separators) is a
    ``\\uXXXX`` escape. A JSON parser reads back exactly ``value``."""
    text = json.dumps(value, ensure_ascii=False, indent=indent)
    # JSON escapes line feeds inside strings, so each physical line can be judged on its own,
    # and a line that is printable (the common case) is kept in one C-level scan.
    return "\n".join(
        part
        if part.isprintable() and _INVISIBLE_LETTER.search(part) is None
        else _RAW_IN_JSON.sub(_json_escape_match, part)
        for part in text.split("\n")
    )
