"""Escape a string another session chose before it reaches a sink of yours.

Every string a peer controls (its name, cwd and branch, a message's text and summary) can drive a
terminal, reorder or hide what a reader sees, or forge lines, until escaped. An unsafe character is
never dropped: it becomes a visible escape such as ``\\x1b`` or ``\\u202e``.

* :func:`line` — for one line (a name, a summary): line breaks escaped too, whitespace folded,
  optionally cut to ``limit`` code points;
* :func:`block` — for a message body: line feeds and tabs kept, everything else unsafe escaped;
* :func:`dumps` — JSON with invisible and control characters written as ``\\uXXXX``;
* :func:`is_unsafe` — whether one character would be escaped.
"""

from __future__ import annotations

from pi_cross_session._internal.protocol.sanitize import block, dumps, is_unsafe, line

__all__ = ["block", "dumps", "is_unsafe", "line"]
