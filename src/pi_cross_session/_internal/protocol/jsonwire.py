"""JSON as the reference peer reads and writes it.

Python's :mod:`json` is close to ECMAScript's ``JSON`` but not equal. The differences that matter:

* Python accepts ``NaN``, ``Infinity`` and ``-Infinity``; JS refuses them. We refuse them.
* Python raises :class:`RecursionError` on very deep nesting; that is a bad frame, not a crash.
* Python keeps integers exact at any size; JS rounds past 2**53. Rules that need a JS-safe integer
  check for it explicitly (see :mod:`pi_cross_session._internal.protocol.frames`). An integer
  literal too long for Python's conversion limit is read as a float, as JS would, instead of
  failing.
* Both keep the last of duplicate keys, both accept only `` \\t\\n\\r`` around values, both
  fail on a leading U+FEFF inside the text.

Output is what ``JSON.stringify`` produces for our values: no spaces, non-ASCII as UTF-8 rather than
``\\u`` escapes, control characters escaped the same way, integers as integers.
"""

from __future__ import annotations

import json
from typing import Any, NoReturn

from pi_cross_session._internal.protocol.errors import FrameError


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


#: Python refuses to convert integers longer than this many digits; JS reads them as doubles.
_MAX_INT_DIGITS = 4000


def _js_int(digits: str) -> int | float:
    # A JS number: beyond the digit limit an integer literal becomes a (possibly infinite) double,
    # which every rule needing a safe integer then refuses, as the reference's checks would.
    return int(digits) if len(digits) <= _MAX_INT_DIGITS else float(digits)


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_int=_js_int)
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def loads(text: str) -> Any:
    """Parse one frame's text; any failure is a :class:`FrameError` (``invalid_frame``)."""
    try:
        return _DECODER.decode(text)
    except (ValueError, RecursionError) as exc:
        raise FrameError("the frame is not valid JSON") from exc


def dumps(value: Any) -> str:
    """Serialise a frame body compactly, as the reference does (no trailing newline)."""
    return _ENCODER.encode(value)
