"""What a frame's JSON would cost to build, judged before anything is built.

``json.loads`` builds one Python object per value, and that, not the frame's size, is what a frame
costs: 1 MiB of ``[{},{},…]`` takes tens of milliseconds and leaves the allocator holding memory
long after, while the 1 MiB space-padded hello the contract pins takes about one. No frame of the
contract needs more than a few containers and a few dozen values, so a frame that would need more
is refused *before* it is parsed (see the bounds in
:mod:`~pi_cross_session._internal.protocol.limits`).

The measure uses only C-speed string methods, so it costs a few passes over the text whatever the
text holds:

1. **escape pairs are dropped**: every ``\\\\`` pair, then every ``\\"`` (reading left to right,
   as a JSON lexer pairs them inside a string), so that every ``"`` left is a delimiter;
2. **strings**: the ``"`` left, halved and rounded up (an unterminated string counts);
3. the quotes cut the text into runs alternately outside and inside strings; outside, each ``{``
   or ``[`` is a **container** (so nesting is never deeper than their count) and each ``,`` or
   ``:`` a **separator** (every value after the first in a container needs one).

The measure is defined for any text, JSON or not: a frame is judged on it alone, and one beyond a
bound gets the reply a frame of the wrong kind gets, whether or not it would have parsed. This
module is pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from pi_cross_session._internal.protocol.limits import (
    MAX_FRAME_CONTAINERS,
    MAX_FRAME_SEPARATORS,
    MAX_FRAME_STRINGS,
)

_BACKSLASH: Final = "\\"
_BACKSLASH_PAIR: Final = "\\\\"
_ESCAPED_QUOTE: Final = '\\"'
_QUOTE: Final = '"'


@dataclass(frozen=True, slots=True)
class FrameShape:
    """The work a frame's JSON would take: strings, containers, separators (see the module)."""

    strings: int
    containers: int
    separators: int


@dataclass(frozen=True, slots=True)
class ShapeBounds:
    """The most of each a frame may hold; the defaults are the receiver's (``limits``)."""

    max_strings: int = MAX_FRAME_STRINGS
    max_containers: int = MAX_FRAME_CONTAINERS
    max_separators: int = MAX_FRAME_SEPARATORS

    def admits(self, shape: FrameShape) -> bool:
        """True when a frame of this shape may be parsed."""
        return (
            shape.strings <= self.max_strings
            and shape.containers <= self.max_containers
            and shape.separators <= self.max_separators
        )


RECEIVER_BOUNDS: Final = ShapeBounds()


def measure(text: str, *, max_strings: int | None = None) -> FrameShape:
    """The shape of ``text``. With ``max_strings``, a text holding more strings than that is not
    cut at its quotes (its ``containers`` and ``separators`` are then reported as 0): the count
    of strings alone already refuses it, and the cut would cost one object per string."""
    plain = text
    if _BACKSLASH in plain:
        plain = plain.replace(_BACKSLASH_PAIR, "").replace(_ESCAPED_QUOTE, "")
    quotes = plain.count(_QUOTE)
    strings = (quotes + 1) // 2
    if max_strings is not None and strings > max_strings:
        return FrameShape(strings=strings, containers=0, separators=0)
    containers = separators = 0
    # Runs outside strings are the even ones; counted in place, never joined into a copy.
    for run in plain.split(_QUOTE)[0::2] if quotes else (plain,):
        containers += run.count("{") + run.count("[")
        separators += run.count(",") + run.count(":")
    return FrameShape(strings=strings, containers=containers, separators=separators)


def affordable(text: str, bounds: ShapeBounds = RECEIVER_BOUNDS) -> bool:
    """True when parsing ``text`` costs no more than a frame within ``bounds`` can need."""
    # Counted over the whole text, quotes and brackets inside strings included, each figure can
    # only be larger than the measure's; within the bounds that way, the text is within them. A
    # frame of the contract passes here, with no cut at its quotes.
    count = text.count
    if (
        (count(_QUOTE) + 1) // 2 <= bounds.max_strings
        and count("{") + count("[") <= bounds.max_containers
        and count(",") + count(":") <= bounds.max_separators
    ):
        return True
    return bounds.admits(measure(text, max_strings=bounds.max_strings))


__all__ = ["RECEIVER_BOUNDS", "FrameShape", "ShapeBounds", "affordable", "measure"]
