"""Fuzzing a live receiving session with hostile byte streams.

Each test starts one real session (a :class:`SessionRuntime` serving its endpoint on a real Unix
socket) and feeds it thousands of streams: byte soup, mutated hellos, mutated second frames after a
genuine authenticated hello (some carrying a ``goalId`` the session never granted, refused
``goal_not_authorized`` after its commit), valid conversations cut short and chunked at random,
frames at the 1 MiB cap, and frames padded to cost the parser (strings, containers and separators
at their bounds, JSON or not). Two more tests change the conditions rather than the bytes: a
second frame trickled after ``ready`` so slowly that it misses the request deadline, and examples
run while another process holds every connection slot (silent, mid-hello, or past ``ready`` and
into a second frame), retaking each one the receiver sheds. For every example (see
:meth:`tests.receiver.live.LiveReceiver.check`):

* every reply parses as a response of the contract, with a known status, and the replies are
  exactly the ones :class:`tests.receiver.model.ReceiverModel` derives from the spec — including no
  byte at all where the stream ends before a frame is complete;
* nothing is admitted (no budget spent, no host submission, no row) unless the model admits it,
  which needs a valid authenticated hello followed by a well-formed, fresh message;
* a legitimate probe still gets ``ready`` afterwards.

At the end of each test every admitted message has exactly one row and one host submission.

``PI_XS_FUZZ_EXAMPLES`` sets the total number of examples, shared between the tests below: by
default 2,000 in ``make test`` and ten times that under the ``long`` hypothesis profile
(``make test-long``); ``make fuzz`` runs 200,000. Runs are derandomized, so CI is reproducible.
"""

from __future__ import annotations

import itertools
import os
from typing import Final

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from pi_cross_session._internal.protocol.io.endpoint import EndpointConfig
from pi_cross_session._internal.protocol.limits import MAX_CONNECTIONS
from pi_cross_session._internal.protocol.paths import Locations
from tests.hypothesis_profiles import scaled
from tests.receiver.crowd import crowd
from tests.receiver.live import LiveReceiver, identity, live_receiver
from tests.receiver.model import BOM, FRAME_CAP, MAX_CONTAINERS, MAX_SEPARATORS, MAX_STRINGS
from tests.receiver.strategies import (
    CAPABILITY,
    GARBAGE_LINES,
    MESSAGE_POOLS,
    RANDOM_STREAMS,
    VALUES,
    Json,
    Now,
    Obj,
    Pools,
    chunk,
    encode,
    frame,
    hello_obj,
    hello_pools,
    message_obj,
    mutate,
    pick,
    position,
    resolve,
    shaped,
    status_obj,
)

pytestmark = pytest.mark.hostile

EXAMPLES: Final = int(os.environ.get("PI_XS_FUZZ_EXAMPLES", scaled(2000)))
#: How the examples are shared between the tests; the oversized frames, the trickled requests
#: and the crowded examples come on top.
SHARES: Final = {"random": 0.18, "first": 0.28, "second": 0.32, "cuts": 0.14, "shapes": 0.08}
#: Frames near the 1 MiB cap cost about half a second each here: eight by default cover the
#: boundaries, and `make fuzz` runs one per 400 examples.
OVERSIZED: Final = max(8, EXAMPLES // 400)
#: A trickled request lasts past the request deadline: each example takes about a second.
TRICKLED: Final = max(12, EXAMPLES // 1000)
#: Examples run while another process holds every slot (each costs a shed and a refill).
CROWDED: Final = max(60, EXAMPLES // 50)
#: The request deadline of the receiver the trickled requests meet (the default is 5 s), and the
#: pause between their pieces: several pauses outlast the deadline, none comes near the idle bound.
TRICKLE_DEADLINE_S: Final = 0.3
TRICKLE_PAUSE_S: Final = 0.12


def count(share: str) -> int:
    """How many examples the test with this share runs."""
    fixed = {"oversized": OVERSIZED, "trickled": TRICKLED, "crowded": CROWDED}
    return fixed.get(share) or max(1, round(EXAMPLES * SHARES[share]))


#: A long run is split into runs of at most this many examples, each with its own fixed seed:
#: hypothesis keeps a tree of every example of a run in memory.
BATCH: Final = 20_000


def fuzz_settings(examples: int, *, derandomize: bool) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=derandomize,
        database=None,
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )


#: What follows a genuine hello: mostly messages, some under a goal id the session never granted.
SECOND_KINDS: Final = (
    ["message"] * 6 + ["scoped"] * 2 + ["status", "status", "hello", "json", "line"]
)
CAPABILITY_CHOICES: Final = ((CAPABILITY,), None, (), (CAPABILITY, "x"))
HELLO_IDS: Final = ("h1", "hello-request-1", "x" * 128)


def fresh_message(live: LiveReceiver) -> Obj:
    """A message no earlier example sent: new ids, new text, sent now."""
    serial = live.fresh("m")
    return message_obj(
        request_id=f"r{serial}", message_id=serial, text=f"fuzz text {serial}", sent_at=Now()
    )


def wire(draw_value: Json, now_ms: int) -> bytes:
    """The bytes of a frame body, with ``sentAt`` placeholders resolved at ``now_ms``."""
    return encode(resolve(draw_value, now_ms))


def following_frames(draw: st.DrawFn, live: LiveReceiver, now_ms: int) -> list[bytes]:
    """What a client writes after its first frame: messages, status queries, junk."""
    frames: list[bytes] = []
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.integers(0, 2))
        if kind == 0:
            frames.append(wire(fresh_message(live), now_ms))
        elif kind == 1:
            frames.append(encode(status_obj(request_id="s1", message_id=live.fresh("q"))))
        else:
            frames.append(draw(GARBAGE_LINES))
    return frames


@st.composite
def first_frame_streams(draw: st.DrawFn, live: LiveReceiver, pools: Pools) -> bytes:
    """A first frame of every kind (mostly a mutated hello), then whatever may follow."""
    now = live.now_ms()
    target = identity(live.target)
    kind = pick(draw, ["probe", "auth", "auth", "impostor", "replay", "misplaced", "json", "line"])
    if kind == "json":
        first = encode(draw(VALUES))
    elif kind == "line":
        first = draw(GARBAGE_LINES)
    elif kind == "misplaced":
        # A message or a status query where the hello belongs.
        query = status_obj(request_id="s", message_id="m")
        first = wire(mutate(draw, pick(draw, [fresh_message(live), query]), MESSAGE_POOLS), now)
    else:
        caps = pick(draw, CAPABILITY_CHOICES)
        rid = pick(draw, HELLO_IDS)
        if kind == "probe":
            base = hello_obj(target, request_id=rid, capabilities=caps)
        elif kind == "replay":
            # A genuine hello for another session (its token and identity), sent to this one.
            claim = pick(draw, live.valid_senders)
            base = hello_obj(live.other, sender=claim, request_id=rid, capabilities=caps)
        else:
            claim = pick(draw, live.valid_senders if kind == "auth" else live.impostors)
            base = hello_obj(target, sender=claim, request_id=rid, capabilities=caps)
        first = encode(mutate(draw, base, pools, nested=("target", "from")))
    return frame(draw, [first, *following_frames(draw, live, now)])


@st.composite
def second_frame_streams(draw: st.DrawFn, live: LiveReceiver) -> bytes:
    """A genuine authenticated hello, then a mutated second frame, then whatever may follow."""
    now = live.now_ms()
    sender = pick(draw, live.valid_senders)
    caps = pick(draw, CAPABILITY_CHOICES)
    hello = encode(
        hello_obj(identity(live.target), sender=sender, request_id="h2", capabilities=caps)
    )
    kind = pick(draw, SECOND_KINDS)
    if kind in ("message", "scoped"):
        message = fresh_message(live)
        if kind == "scoped":
            message = message.appended("goalId", pick(draw, ["forged-goal", "g" * 128]))
        second = wire(mutate(draw, message, MESSAGE_POOLS), now)
    elif kind == "status":
        # One of the sender's last committed ids (if it has that many), a new one, or a guess.
        committed = [*live.model.admitted, *live.model.refused_commits]
        mine = [mid for sid, mid in committed if sid == sender.instance_id][-5:]
        choice = draw(st.integers(0, 6))
        if choice < len(mine):
            message_id = mine[-1 - choice]
        else:
            message_id = live.fresh("q") if choice < 6 else "m1"
        query = status_obj(request_id="s2", message_id=message_id)
        second = wire(mutate(draw, query, MESSAGE_POOLS, most=2), now)
    elif kind == "hello":
        second = hello
    elif kind == "json":
        second = encode(draw(VALUES))
    else:
        second = draw(GARBAGE_LINES)
    rest = following_frames(draw, live, now)
    return frame(draw, [hello, second, *rest], cut_one_in=10)


@st.composite
def cut_conversations(draw: st.DrawFn, live: LiveReceiver) -> bytes:
    """A valid conversation (probe, message or status query) cut at any byte."""
    now = live.now_ms()
    target = identity(live.target)
    sender = pick(draw, live.valid_senders)
    kind = pick(draw, ["message", "message", "status", "probe"])
    if kind == "probe":
        frames = [encode(hello_obj(target, request_id="p3"))]
    else:
        hello = encode(hello_obj(target, sender=sender, request_id="h3"))
        second = (
            fresh_message(live)
            if kind == "message"
            else status_obj(request_id="s3", message_id=live.fresh("q"))
        )
        frames = [hello, wire(second, now)]
    stream = frame(draw, frames, cut_one_in=0)
    whole = draw(st.integers(0, 3)) == 0
    cut = position(draw, len(stream))
    return stream if whole else stream[:cut]


@st.composite
def oversized_streams(draw: st.DrawFn, live: LiveReceiver) -> bytes:
    """Frames of exactly ``cap + delta`` bytes (LF, BOM included), whole or unterminated, padded
    with spaces or 3-byte characters, sometimes with one invalid byte before or past the cap."""
    now = live.now_ms()
    target = identity(live.target)
    sender = pick(draw, live.valid_senders)
    delta = pick(draw, [-2, -1, 0, 1, 2, 3, 4096])
    bom = BOM if draw(st.booleans()) else b""
    kind = pick(draw, ["hello", "message", "cjk", "units"])
    units_delta = pick(draw, [-1, 0, 1])
    terminated = draw(st.booleans())
    bad_at = pick(draw, [None, None, None, FRAME_CAP - 1, FRAME_CAP, FRAME_CAP + 1])
    prefix = bom
    if kind == "hello":
        body = encode(hello_obj(target, request_id="big"))
    else:
        prefix += encode(hello_obj(target, sender=sender, request_id="h4")) + b"\n"
        message = fresh_message(live)
        text = str(message.get("text"))
        if kind == "cjk":
            room = FRAME_CAP + delta - len(wire(message, now)) - 1
            text = "字" * (room // 3) + "a" * (room % 3) + text
        elif kind == "units":
            # 1,000,000 UTF-16 units is the text limit; one more is refused as a bad frame.
            text += "a" * (1_000_000 + units_delta - len(text))
        body = wire(message.with_value("text", text), now)
    total = FRAME_CAP + delta - (len(bom) if kind == "hello" else 0)
    data = body + b" " * max(0, total - len(body) - 1) + (b"\n" if terminated else b"")
    if bad_at is not None:
        # One invalid byte: the last one within the cap, or one of the first ones past it.
        at = bad_at - (len(bom) if kind == "hello" else 0)
        if at < len(data):
            data = data[:at] + b"\xff" + data[at + 1 :]
    return prefix + data


@st.composite
def shape_streams(draw: st.DrawFn, live: LiveReceiver) -> bytes:
    """A first frame, or a second frame after a genuine authenticated hello, padded so that one
    count of its shape lands at, just short of or past its bound (see ``strategies.shaped``)."""
    now = live.now_ms()
    target = identity(live.target)
    sender = pick(draw, live.valid_senders)
    bounds = (MAX_STRINGS, MAX_CONTAINERS, MAX_SEPARATORS)
    if draw(st.booleans()):
        claim = sender if draw(st.booleans()) else None
        first = shaped(draw, hello_obj(target, sender=claim, request_id="h5"), bounds)
        frames = [first, *following_frames(draw, live, now)]
    else:
        hello = encode(hello_obj(target, sender=sender, request_id="h5"))
        kind = pick(draw, ["message", "message", "status"])
        base = (
            resolve(fresh_message(live), now)
            if kind == "message"
            else status_obj(request_id="s5", message_id=live.fresh("q"))
        )
        assert isinstance(base, Obj)
        frames = [hello, shaped(draw, base, bounds), *following_frames(draw, live, now)]
    return frame(draw, frames, cut_one_in=10)


@st.composite
def late_requests(draw: st.DrawFn, live: LiveReceiver) -> tuple[bytes, list[bytes]]:
    """A hello (mostly a good one) and a second frame without its LF, cut into pieces."""
    now = live.now_ms()
    target = identity(live.target)
    sender = pick(draw, live.valid_senders)
    claim = pick(draw, [sender, sender, None, pick(draw, live.impostors)])
    first = encode(hello_obj(target, sender=claim, request_id="h6")) + b"\n"
    kind = pick(draw, ["message", "message", "status", "line"])
    if kind == "message":
        second = wire(mutate(draw, fresh_message(live), MESSAGE_POOLS, most=1), now)
    elif kind == "status":
        second = encode(status_obj(request_id="s6", message_id=live.fresh("q")))
    else:
        second = draw(GARBAGE_LINES)
    second = second.replace(b"\n", b" ")
    cuts = sorted({position(draw, len(second)) for _ in range(draw(st.integers(3, 5)))})
    edges = [0, *cuts, len(second)]
    pieces = [second[a:b] for a, b in itertools.pairwise(edges) if b > a]
    return first, pieces


@st.composite
def _chunked(draw: st.DrawFn, streams: st.SearchStrategy[bytes]) -> tuple[bytes, list[bytes]]:
    stream = draw(streams)
    return stream, chunk(draw, stream)


def _run(live: LiveReceiver, streams: st.SearchStrategy[bytes], share: str) -> None:
    """Run the share's examples (derandomized in CI; seeded batches for a long run), then check
    the receiver's books."""
    total = count(share)
    sizes = [min(BATCH, total - start) for start in range(0, total, BATCH)]
    for batch, size in enumerate(sizes):

        @fuzz_settings(size, derandomize=len(sizes) == 1)
        @given(example=_chunked(streams))
        def run(example: tuple[bytes, list[bytes]]) -> None:
            live.check(*example)

        (run if len(sizes) == 1 else seed(batch)(run))()
    live.final_accounting()
    assert live.examples >= total


def test_fuzz_random_bytes_are_refused_and_admit_nothing(live: LiveReceiver) -> None:
    _run(live, RANDOM_STREAMS, "random")
    assert live.model.admitted == []


def test_fuzz_first_frames(live: LiveReceiver) -> None:
    others = [*live.valid_senders, *live.impostors]
    _run(live, first_frame_streams(live, hello_pools(identity(live.target), others)), "first")


def test_fuzz_second_frames_after_an_authenticated_hello(live: LiveReceiver) -> None:
    _run(live, second_frame_streams(live), "second")
    assert live.model.admitted, "no example admitted anything: the strategy is broken"
    assert live.model.refused_commits, "no forged goal id was committed: the strategy is broken"


def test_fuzz_valid_conversations_cut_anywhere_and_chunked(live: LiveReceiver) -> None:
    _run(live, cut_conversations(live), "cuts")
    assert live.model.admitted, "no example admitted anything: the strategy is broken"


def test_fuzz_frames_at_the_one_mebibyte_cap(live: LiveReceiver) -> None:
    _run(live, oversized_streams(live), "oversized")


def test_fuzz_frame_shapes_at_their_bounds(live: LiveReceiver) -> None:
    _run(live, shape_streams(live), "shapes")
    assert live.model.admitted, "no padded message within the bounds was admitted"


def test_fuzz_requests_trickled_past_the_request_deadline(locations: Locations) -> None:
    config = EndpointConfig(request_deadline_s=TRICKLE_DEADLINE_S)
    with live_receiver(locations, endpoint=config) as live:

        @fuzz_settings(count("trickled"), derandomize=True)
        @given(example=late_requests(live))
        def run(example: tuple[bytes, list[bytes]]) -> None:
            first, pieces = example
            live.check_late(first, pieces, TRICKLE_PAUSE_S)

        run()
        live.final_accounting()
        assert live.model.admitted == []
        assert live.endpoint_counters().request_deadline_cuts >= 1


def test_fuzz_while_another_process_holds_every_slot(live: LiveReceiver) -> None:
    """Every slot is taken (and retaken as soon as it is shed) by another process, in every
    phase; each example still gets exactly the model's replies: fairness gives it a slot."""
    pools = hello_pools(identity(live.target), [*live.valid_senders, *live.impostors])
    streams = st.one_of(first_frame_streams(live, pools), second_frame_streams(live))
    with crowd(live.target, MAX_CONNECTIONS):
        _run(live, streams, "crowded")
        assert live.endpoint_counters().shed >= 1
