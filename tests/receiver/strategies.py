"""Hypothesis strategies for hostile byte streams.

Frames are built as JSON trees (:class:`Obj` keeps its keys in order, duplicates included, and
:class:`Raw` puts any token on the wire verbatim, valid JSON or not), mutated (keys deleted,
replaced by hostile values, added, or duplicated), then framed (CR/LF variants, BOMs, empty lines,
cut at a random point) and chunked (random split points, or one byte per write).

Nothing here decides what the receiver must answer: :mod:`tests.receiver.model` does, from the
bytes alone.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, TypeAlias, TypeVar

from hypothesis import strategies as st

from tests.receiver.model import (
    BOM,
    BRIDGE_PREFIX,
    JS_WHITESPACE,
    Identity,
    shape,
    well_formed,
)


@dataclass(frozen=True, slots=True)
class Raw:
    """A token written to the wire exactly as given (it may be invalid JSON or invalid UTF-8)."""

    data: bytes


@dataclass(frozen=True, slots=True)
class Now:
    """A ``sentAt`` relative to the receiver's clock when the example runs, in one spelling:
    ``int`` (``now + offset``), ``float`` (the same value as a JSON float), ``half`` (``now +
    0.5``), ``exp`` (``1.7e12``-style exponent notation) or ``str`` (digits in a string)."""

    offset: int = 0
    form: str = "int"


@dataclass(frozen=True, slots=True)
class Obj:
    """A JSON object as an ordered list of pairs, so that a key can appear twice."""

    pairs: tuple[tuple[str, Json], ...]

    def keys(self) -> list[str]:
        return [key for key, _ in self.pairs]

    def get(self, key: str) -> Json | None:
        found: Json | None = None
        for name, value in self.pairs:
            if name == key:
                found = value
        return found

    def without(self, key: str) -> Obj:
        return Obj(tuple(pair for pair in self.pairs if pair[0] != key))

    def with_value(self, key: str, value: Json) -> Obj:
        """Replace every value of ``key`` in place, or append the key if it is missing."""
        if key not in self.keys():
            return self.appended(key, value)
        return Obj(tuple((name, value if name == key else old) for name, old in self.pairs))

    def appended(self, key: str, value: Json) -> Obj:
        return Obj((*self.pairs, (key, value)))


Json: TypeAlias = bool | int | float | str | list["Json"] | Obj | Raw | Now | None
T = TypeVar("T")


def resolve(value: Json, now_ms: int) -> Json:
    """``value`` with every :class:`Now` replaced by its value at ``now_ms``."""
    if isinstance(value, Now):
        at = now_ms + value.offset
        spelled: dict[str, Json] = {
            "int": at,
            "float": float(at),
            "half": at + 0.5,
            "exp": Raw(f"{at / 1e12!r}e12".encode()),
            "str": str(at),
        }
        return spelled[value.form]
    if isinstance(value, Obj):
        return Obj(tuple((key, resolve(item, now_ms)) for key, item in value.pairs))
    if isinstance(value, list):
        return [resolve(item, now_ms) for item in value]
    return value


def _string(value: str) -> bytes:
    # Real UTF-8 for well-formed text; JSON escapes (``"\ud800"``) for lone surrogates.
    return json.dumps(value, ensure_ascii=not well_formed(value)).encode("utf-8")


def encode(value: Json) -> bytes:
    """The bytes of ``value`` as compact JSON (Raw tokens verbatim)."""
    if isinstance(value, Raw):
        return value.data
    if isinstance(value, Now):
        raise TypeError("resolve() the frame before encoding it")
    if isinstance(value, Obj):
        inner = b",".join(_string(key) + b":" + encode(item) for key, item in value.pairs)
        return b"{" + inner + b"}"
    if isinstance(value, list):
        return b"[" + b",".join(encode(item) for item in value) + b"]"
    if isinstance(value, str):
        return _string(value)
    return json.dumps(value, allow_nan=False).encode("ascii")


# -- hostile leaves ------------------------------------------------------------------------------

#: Nesting far past any recursion limit (spec: deep nesting is a bad frame, not a crash).
DEEP_ARRAYS: Final = Raw(b"[" * 10_000 + b"]" * 10_000)

RAW_TOKENS: Final = (
    Raw(b"NaN"),
    Raw(b"Infinity"),
    Raw(b"-Infinity"),
    Raw(b"1e400"),
    Raw(b"-1e400"),
    Raw(b"1e-400"),
    Raw(b"1.0"),
    Raw(b"1E0"),
    Raw(b"-0"),
    Raw(b"0.0"),
    Raw(b"9" * 400),
    Raw(b"-" + b"9" * 5000),
    Raw(b"01"),
    Raw(b"+1"),
    Raw(b'"\\ud800"'),
    Raw(b'"\\udfff"'),
    Raw(b'"a\\udc00b"'),
    Raw(b'"\\ud83d\\ude00"'),
    Raw(b'"\\u0000"'),
    Raw(b'"tab\there"'),
    Raw(b'"\xff"'),
    Raw(b'"\xed\xa0\x80"'),
    Raw(b'"\xc0\xaf"'),
    Raw(b'"\xe2\x82"'),
    Raw(b"tru"),
    Raw(b"nul"),
    Raw(b"[1,]"),
    Raw(b"{"),
    Raw(b"\xef\xbb\xbf1"),
    Raw(b"[" * 50 + b"]" * 50),
    DEEP_ARRAYS,
)

INTEGERS: Final = st.one_of(
    st.integers(-10, 10),
    st.sampled_from([2**31, 2**53 - 1, 2**53, -(2**53) + 1, -(2**53), 2**63, 2**64, 10**30]),
    st.integers(),
)

#: Characters that are whitespace to Python but not to JavaScript, or invisible without being
#: whitespace to either, next to the real JS whitespace set.
TRIM_EDGES: Final = "\x1c\x1d\x1e\x1f\x85\u180e\u200b\u2060"
WHITESPACE: Final = "".join(sorted(JS_WHITESPACE)) + TRIM_EDGES

TEXTS: Final = st.one_of(
    st.text(max_size=24),
    st.text(alphabet=WHITESPACE, max_size=6),
    st.text(alphabet=st.characters(min_codepoint=0x10000), max_size=8),
    st.just(BRIDGE_PREFIX + "{}"),
)

SCALARS: Final = st.one_of(
    st.none(),
    st.booleans(),
    INTEGERS,
    st.floats(allow_nan=False, allow_infinity=False),
    TEXTS,
    st.sampled_from(RAW_TOKENS),
)


def _objects(children: st.SearchStrategy[Json]) -> st.SearchStrategy[Json]:
    pairs = st.lists(st.tuples(st.text(max_size=6), children), max_size=4)
    return pairs.map(lambda items: Obj(tuple(items)))


#: Any JSON-ish value: scalars, hostile tokens, small arrays and objects.
VALUES: Final[st.SearchStrategy[Json]] = st.recursive(
    SCALARS,
    lambda children: st.one_of(st.lists(children, max_size=4), _objects(children)),
    max_leaves=8,
)

_ID_ALPHABET: Final = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"

#: Request and message ids: valid ones, one too long, and lookalikes the ID regex must refuse.
IDS: Final = st.one_of(
    st.text(alphabet=_ID_ALPHABET, min_size=1, max_size=128),
    st.text(alphabet=_ID_ALPHABET, min_size=129, max_size=130),
    st.sampled_from(["", " ", "a b", "é", "a\n", "a/b", "٣", "ａ", "a\u200b", "-", "_"]),
)

#: Keys a mutation may add: the frame's own names spelled another way, prototype names, noise.
#: ``goalId`` is left out here: scoped messages are built on purpose (see ``GOAL_IDS``).
EXTRA_KEYS: Final = st.one_of(
    st.sampled_from(
        [
            "v",
            "type",
            "requestId",
            "request_id",
            "messageId",
            "from",
            "sender",
            "capabilities",
            "token",
            "target",
            "text",
            "summary",
            "sentAt",
            "__proto__",
            "constructor",
            "",
        ]
    ),
    st.text(max_size=6),
).filter(lambda key: key != "goalId")


# -- mutations -------------------------------------------------------------------------------------


class Pools:
    """Replacement values per key: the key's own near-misses, or any hostile value.

    Built once per test: hypothesis pays for every new strategy object it meets, so nothing here
    is created per example.
    """

    def __init__(self, pools: Mapping[str, st.SearchStrategy[Json]]) -> None:
        self._by_key = {key: st.one_of(pool, pool, VALUES) for key, pool in pools.items()}

    def values_for(self, key: str) -> st.SearchStrategy[Json]:
        return self._by_key.get(key, VALUES)


NO_POOLS: Final = Pools({})


def pick(draw: st.DrawFn, items: Sequence[T]) -> T:
    """One of ``items`` (drawn as an index, with no new strategy object)."""
    return items[draw(st.integers(0, len(items) - 1))]


def mutate(
    draw: st.DrawFn, base: Obj, pools: Pools, *, nested: Sequence[str] = (), most: int = 3
) -> Obj:
    """``base`` after up to ``most`` mutations (delete a key, replace a value, add a key or a
    duplicate of one), at the top level or inside one of the ``nested`` objects."""
    obj = base
    for _ in range(draw(st.integers(0, most))):
        places = [key for key in nested if isinstance(obj.get(key), Obj)]
        place = pick(draw, [None, *places])
        inner = obj if place is None else obj.get(place)
        assert isinstance(inner, Obj)
        operation = draw(st.integers(0, 3))
        keys = inner.keys()
        if operation == 0 and keys:
            inner = inner.without(pick(draw, keys))
        elif operation in (1, 2) and keys:
            key = pick(draw, keys)
            inner = inner.with_value(key, draw(pools.values_for(key)))
        else:
            existing = bool(keys) and draw(st.booleans())  # a duplicate of a key, or a new one
            key = pick(draw, keys) if existing else draw(EXTRA_KEYS)
            inner = inner.appended(key, draw(pools.values_for(key)))
        obj = inner if place is None else obj.with_value(place, inner)
    return obj


# -- frames ----------------------------------------------------------------------------------------

CAPABILITY: Final = "cancel-safe-queue-v1"


def hello_obj(
    target: Identity,
    *,
    sender: Identity | None = None,
    request_id: str = "hello-1",
    capabilities: Sequence[str] | None = (CAPABILITY,),
) -> Obj:
    """A hello in the reference's key order; authenticated when ``sender`` is given."""
    pairs: list[tuple[str, Json]] = [("v", 1), ("type", "hello")]
    if capabilities is not None:
        pairs.append(("capabilities", list(capabilities)))
    pairs += [
        ("requestId", request_id),
        ("token", target.token),
        ("target", Obj((("id", target.session_id), ("instanceId", target.instance_id)))),
    ]
    if sender is not None:
        claim = (
            ("id", sender.session_id),
            ("instanceId", sender.instance_id),
            ("token", sender.token),
        )
        pairs.append(("from", Obj(claim)))
    return Obj(tuple(pairs))


def message_obj(
    *, request_id: str, message_id: str, text: str, sent_at: Json, summary: str = "fuzz"
) -> Obj:
    """A message frame in the reference's key order."""
    return Obj(
        (
            ("v", 1),
            ("type", "message"),
            ("requestId", request_id),
            ("messageId", message_id),
            ("text", text),
            ("summary", summary),
            ("sentAt", sent_at),
        )
    )


def status_obj(*, request_id: str, message_id: str) -> Obj:
    return Obj((("v", 1), ("type", "status"), ("requestId", request_id), ("messageId", message_id)))


def hex_variants(value: str) -> st.SearchStrategy[Json]:
    """Near-misses of a hex secret or id: case, length, whitespace, type."""
    return st.sampled_from(
        [value, value.upper(), value[:-1], value + "0", " " + value, value + "\n", "", [value]]
    )


def hello_pools(target: Identity, others: Sequence[Identity]) -> Pools:
    """Replacement values for hello keys: the right ones, other sessions' ones, near-misses."""
    tokens = [target.token, *(other.token for other in others)]
    session_ids = [target.session_id, *(other.session_id for other in others)]
    instance_ids = [target.instance_id, *(other.instance_id for other in others)]
    return Pools(
        {
            "v": st.sampled_from([1, 2, 0, True, "1", Raw(b"1.0"), None]),
            "type": st.sampled_from(["hello", "Hello", "message", "status", "", None]),
            "requestId": IDS,
            "token": st.one_of(st.sampled_from(tokens), hex_variants(target.token)),
            "instanceId": st.one_of(
                st.sampled_from(instance_ids), hex_variants(target.instance_id)
            ),
            "id": st.one_of(
                st.sampled_from(session_ids),
                st.sampled_from(["", "x" * 513, "\ud800", target.session_id + " "]),
            ),
            "capabilities": st.one_of(
                st.lists(st.sampled_from([CAPABILITY, "x" * 65, "", "y"]), max_size=10),
                st.sampled_from([CAPABILITY, None, [None], [1], {}]),
            ),
            "from": st.sampled_from([None, [], "", {}]),
        }
    )


#: ``sentAt`` around the admission window (30 s old, 5 s ahead) and in every wrong spelling.
SENT_AT: Final = st.one_of(
    st.sampled_from([Now(offset) for offset in (-30_001, -30_000, -1, 0, 1, 5_000, 5_001)]),
    st.sampled_from([Now(0, form) for form in ("float", "half", "exp", "str")]),
    st.sampled_from([0, -1, 2**53 - 1, 2**53, -(2**53), Raw(b"1e400"), True, None]),
)

#: Goal ids for scoped messages. The fuzzed session never has a goal active, so a well-formed
#: one is refused ``goal_not_authorized`` after its id and text are committed (the forged-goal
#: path a flood of throwaway identities uses); the rest are malformed.
GOAL_IDS: Final = st.one_of(
    st.sampled_from(["forged-goal", "g" * 128, "goal-1"]),
    st.sampled_from(["", "g" * 129, "a b", None, 1, [], Obj(()), "é"]),
)

#: Replacement values for message and status keys.
MESSAGE_POOLS: Final = Pools(
    {
        "goalId": GOAL_IDS,
        "v": st.sampled_from([1, 2, 0, True, "1", Raw(b"1.0"), Raw(b"1E0"), None]),
        "type": st.sampled_from(["message", "status", "hello", "Message", "", None]),
        "requestId": IDS,
        "messageId": IDS,
        "text": TEXTS,
        "summary": st.one_of(
            TEXTS,
            st.text(min_size=195, max_size=205),
            st.text(alphabet=st.characters(min_codepoint=0x10000), min_size=195, max_size=205),
        ),
        "sentAt": SENT_AT,
    }
)


# -- framing and chunking --------------------------------------------------------------------------

TERMINATORS: Final = (b"\n",) * 6 + (b"\r\n", b" \n", b"\t\r\n", b"\r\r\n", b"   \n")
LEADS: Final = (b"",) * 5 + (b" ", b"\t", b"\r", b"  ")

#: Positions are drawn as fractions of a length, never as indices: the length of a stream depends
#: on live state (fresh ids grow), and hypothesis needs the same choices to have the same bounds.
_SCALE: Final = 1 << 20
_FRACTIONS: Final = st.integers(0, _SCALE)
_CUTS: Final = st.lists(_FRACTIONS, max_size=6)


def position(draw: st.DrawFn, length: int) -> int:
    """A position in ``0..length``, from a draw whose bounds do not depend on ``length``."""
    return draw(_FRACTIONS) * length // _SCALE


def frame(draw: st.DrawFn, bodies: Sequence[bytes], *, cut_one_in: int = 5) -> bytes:
    """``bodies`` as one stream: line ends, leading BOM or blanks, empty lines, maybe cut short."""
    out = bytearray()
    if draw(st.integers(0, 9)) == 0:
        out += BOM
    for body in bodies:
        noise = draw(st.integers(0, 29))
        if noise == 0:
            out += b"\n"  # an empty line is a frame of its own, and a fault
        elif noise == 1:
            out += BOM  # stripped only at the very start of the connection
        elif noise == 2:
            out += b"\r\n"  # a line holding only CR is not empty, and not JSON
        out += pick(draw, LEADS) + body + pick(draw, TERMINATORS)
    if cut_one_in and draw(st.integers(0, cut_one_in - 1)) == 0:
        out = out[: position(draw, len(out))]
    return bytes(out)


def chunk(draw: st.DrawFn, stream: bytes) -> list[bytes]:
    """``stream`` split into writes: at random points, or one byte per write for short ones."""
    byte_by_byte = draw(st.integers(0, 9)) == 0
    cuts = [k * len(stream) // _SCALE for k in draw(_CUTS)]
    if not stream:
        return []
    if byte_by_byte and len(stream) <= 300:
        return [stream[i : i + 1] for i in range(len(stream))]
    edges = sorted({0, *cuts, len(stream)})
    return [stream[a:b] for a, b in itertools.pairwise(edges)]


def _lines(items: list[bytes]) -> bytes:
    return b"\n".join(items) + b"\n"


def _with_bom(data: bytes) -> bytes:
    return BOM + data


def _utf8_line(text: str) -> bytes:
    return text.encode("utf-8") + b"\n"


def _one_line(data: bytes) -> bytes:
    return data.replace(b"\n", b" ")


_BYTE_LINES: Final = st.lists(st.binary(max_size=40), min_size=1, max_size=5).map(b"\n".join)

#: Byte soup: raw bytes, lines of bytes, a BOM first, random text or JSON values as lines.
RANDOM_STREAMS: Final = st.one_of(
    st.binary(max_size=300),
    _BYTE_LINES,
    _BYTE_LINES.map(_with_bom),
    st.text(max_size=60).map(_utf8_line),
    st.lists(VALUES.map(encode), min_size=1, max_size=3).map(_lines),
)

#: One line's worth of junk (no LF inside): JSON values, text, raw bytes.
GARBAGE_LINES: Final = st.one_of(
    VALUES.map(encode),
    st.text(max_size=30).map(str.encode),
    st.binary(max_size=30),
).map(_one_line)


# -- frames built to cost the parser (docs/protocol.md, "Frames too costly to parse") ------------

#: Strings whose JSON spelling holds escapes and structural characters: each still counts as one
#: string and nothing else.
TRICKY_STRINGS: Final = ("", '"', "\\", '\\"', "{[,:]}", 'a"b\\c"', '\\\\"{', "字,:")
#: Where a padded count lands relative to its bound: just under, at, just past, far past.
SHAPE_DELTAS: Final = (-1, 0, 1, 2, 40)
#: What a pad value adds, per kind: ``(strings, containers, separators)`` per item, and fixed.
SHAPE_KINDS: Final = ("separators", "containers", "strings", "objects", "tricky")


def _pad_for(kind: str, count: int, draw: st.DrawFn) -> Json:
    """A value holding ``count`` of the kind's unit (see :func:`shaped`)."""
    if kind == "separators":
        return [0] * count
    if kind == "containers":
        return Raw(b"[" * count + b"]" * count)
    if kind == "objects":
        return [Obj(())] * count
    if kind == "tricky":
        return [pick(draw, TRICKY_STRINGS) for _ in range(count)]
    return [""] * count


def shaped(draw: st.DrawFn, base: Obj, bounds: tuple[int, int, int]) -> bytes:
    """``base`` with one extra field, ``pad``, whose value brings one count of the frame's shape
    (strings, containers or separators, as :func:`tests.receiver.model.shape` measures it) to its
    bound plus a drawn delta; sometimes the frame is then cut by one byte (no longer JSON)."""
    strings, containers, separators = shape(encode(base).decode("utf-8", "surrogatepass"))
    max_strings, max_containers, max_separators = bounds
    kind = pick(draw, SHAPE_KINDS)
    delta = pick(draw, SHAPE_DELTAS)
    # Appending "pad" adds a string (its key) and two separators (its comma and colon).
    strings, separators = strings + 1, separators + 2
    if kind == "separators":
        count = max_separators + delta - separators + 1  # n items: n - 1 commas
    elif kind in ("containers", "objects"):
        count = max_containers + delta - containers - (kind == "objects")
    else:
        count = max_strings + delta - strings
    body = encode(base.appended("pad", _pad_for(kind, max(1, count), draw)))
    if draw(st.integers(0, 4)) == 0:
        body = body[:-1]
    return body
