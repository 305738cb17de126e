"""How much the frame decoder adds on top of parsing the JSON it carries.

Each case decodes wire bytes into parsed JSON objects twice, in alternation:

* **ours** — bytes fed to :class:`FrameDecoder` in the given chunks, events collected, each frame's
  text parsed with :func:`jsonwire.loads`;
* **floor** — the same frames, already split into one ``bytes`` per line (no framing work at all),
  each decoded from UTF-8 once and parsed with :func:`json.loads`.

The ratio ours / floor is the price of framing, streaming UTF-8 validation and the byte cap; the
target is at most 2. A second, stricter floor parses pre-decoded strings (no UTF-8 decoding) and
is shown for information.

Cases: one 1 MiB frame of CJK text in 64 KiB chunks; 10,000 small frames (250–450 bytes, shaped
like the reference's hello, message and response frames) in one buffer and in 4 KiB chunks; the
same small frames with non-ASCII text in a fifth of them.

Run ``python bench/codec.py`` (``--json`` for machine-readable output, ``--repeat N`` to change the
number of interleaved rounds). Timings use :func:`time.perf_counter` with the collector paused.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from pi_cross_session._internal.protocol import jsonwire
from pi_cross_session._internal.protocol.codec import NEED_DATA, Frame, FrameDecoder
from pi_cross_session._internal.protocol.limits import MAX_FRAME_BYTES

TARGET_RATIO = 2.0
SMALL_FRAMES = 10_000
SEED = 20240229


@dataclass(frozen=True)
class Case:
    name: str
    chunks: list[bytes]
    lines: list[bytes]
    expected: int


def chunked(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def big_frame() -> bytes:
    """One hello-shaped frame padded with CJK text to exactly the cap, its LF included."""
    head = '{"v":1,"type":"message","requestId":"r-1","messageId":"m-1","sentAt":1,"text":"'
    tail = '"}\n'
    room = MAX_FRAME_BYTES - len(head.encode()) - len(tail.encode())
    cjk, spill = divmod(room, 3)
    raw = (head + "中" * cjk + " " * spill + tail).encode()
    assert len(raw) == MAX_FRAME_BYTES
    return raw


def _uuid(rng: random.Random) -> str:
    h = f"{rng.getrandbits(128):032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _hex(rng: random.Random, chars: int) -> str:
    return f"{rng.getrandbits(chars * 4):0{chars}x}"


WORDS = [
    "the",
    "peer",
    "sent",
    "a",
    "short",
    "note",
    "about",
    "the",
    "build",
    "and",
    "next",
    "steps",
]
NON_ASCII = ["Grüße", "naïve", "中文消息", "テスト", "😀", "ĉu", "déjà", "𝄞"]


def small_frame(rng: random.Random, *, non_ascii: bool) -> bytes:
    """A frame shaped like the recorded ones, between 250 and 450 bytes with its LF."""
    kind = rng.randrange(3)
    peer = {"id": _uuid(rng), "instanceId": _hex(rng, 32)}
    if kind == 0:
        obj: dict[str, Any] = {
            "v": 1,
            "type": "hello",
            "capabilities": ["cancel-safe-queue-v1"],
            "requestId": _uuid(rng),
            "token": _hex(rng, 64),
            "target": peer,
        }
    elif kind == 1:
        obj = {
            "v": 1,
            "type": "response",
            "requestId": _uuid(rng),
            "ok": True,
            "status": "ready",
            "capabilities": ["cancel-safe-queue-v1"],
            "code": "ready",
            "state": "ready",
            "retryable": False,
            "next": "Ask the same incarnation for the message status later",
            "peer": {**peer, "pid": rng.randrange(1, 99999)},
        }
    else:
        obj = {
            "v": 1,
            "type": "message",
            "requestId": _uuid(rng),
            "messageId": _uuid(rng),
            "text": "",
            "summary": "a note",
            "sentAt": 1_795_941_860_117 + rng.randrange(10**6),
        }
    target = rng.randrange(250, 451)
    words: list[str] = []
    while True:
        pool = NON_ASCII + WORDS if non_ascii else WORDS
        words.append(rng.choice(pool))
        key = "text" if kind == 2 else "note"
        obj[key] = " ".join(words)
        raw = (jsonwire.dumps(obj) + "\n").encode()
        if len(raw) >= max(250, target - 8) or len(raw) >= 436:
            return raw


def small_stream(*, non_ascii_share: float) -> tuple[bytes, list[bytes]]:
    rng = random.Random(SEED)
    frames = [
        small_frame(rng, non_ascii=rng.random() < non_ascii_share) for _ in range(SMALL_FRAMES)
    ]
    assert all(250 <= len(f) <= 450 for f in frames), (min(map(len, frames)), max(map(len, frames)))
    return b"".join(frames), [f[:-1] for f in frames]


def build_cases() -> list[Case]:
    big = big_frame()
    ascii_stream, ascii_lines = small_stream(non_ascii_share=0.0)
    mixed_stream, mixed_lines = small_stream(non_ascii_share=0.2)
    return [
        Case("1 MiB frame, 64 KiB chunks", chunked(big, 65_536), [big[:-1]], 1),
        Case("10k small, one buffer", [ascii_stream], ascii_lines, SMALL_FRAMES),
        Case("10k small, 4 KiB chunks", chunked(ascii_stream, 4096), ascii_lines, SMALL_FRAMES),
        Case("10k small 20% non-ASCII, one buffer", [mixed_stream], mixed_lines, SMALL_FRAMES),
        Case(
            "10k small 20% non-ASCII, 4 KiB chunks",
            chunked(mixed_stream, 4096),
            mixed_lines,
            SMALL_FRAMES,
        ),
    ]


def ours(case: Case) -> list[Any]:
    decoder = FrameDecoder()
    loads = jsonwire.loads
    out: list[Any] = []
    for chunk in case.chunks:
        decoder.receive_data(chunk)
        *frames, last = decoder.events()
        out.extend(loads(frame.text) for frame in frames if isinstance(frame, Frame))
        assert last is NEED_DATA
    return out


def floor(case: Case) -> list[Any]:
    loads = json.loads
    return [loads(line.decode("utf-8")) for line in case.lines]


def parse_only_floor(texts: list[str]) -> list[Any]:
    loads = json.loads
    return [loads(text) for text in texts]


def timed(fn: Callable[[], list[Any]]) -> float:
    # The collector is paused so that neither side pays for a collection the other provoked.
    gc.disable()
    try:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start
    finally:
        gc.enable()


def run(repeat: int) -> list[dict[str, Any]]:
    results = []
    for case in build_cases():
        texts = [line.decode("utf-8") for line in case.lines]
        got = ours(case)
        assert len(got) == case.expected
        assert got == floor(case)
        runners: dict[str, Callable[[], list[Any]]] = {
            "ours": partial(ours, case),
            "floor": partial(floor, case),
            "parse_only": partial(parse_only_floor, texts),
        }
        samples: dict[str, list[float]] = {name: [] for name in runners}
        for round_ in range(repeat):
            # Alternate who goes first, so neither side always inherits a warm or cold cache.
            order = list(runners) if round_ % 2 == 0 else list(reversed(runners))
            gc.collect()
            for name in order:
                samples[name].append(timed(runners[name]))
        best = {k: min(v) for k, v in samples.items()}
        median = {k: statistics.median(v) for k, v in samples.items()}
        results.append(
            {
                "case": case.name,
                "frames": case.expected,
                "bytes": sum(map(len, case.chunks)),
                "chunks": len(case.chunks),
                "best_s": best,
                "median_s": median,
                "ratio_best": best["ours"] / best["floor"],
                "ratio_median": median["ours"] / median["floor"],
                "ratio_parse_only_best": best["ours"] / best["parse_only"],
                "ratio_parse_only_median": median["ours"] / median["parse_only"],
            }
        )
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    parser.add_argument("--repeat", type=int, default=9, help="interleaved rounds (default 9)")
    args = parser.parse_args(argv)
    results = run(args.repeat)
    worst = max(r["ratio_median"] for r in results)
    if args.json:
        print(json.dumps({"target_ratio": TARGET_RATIO, "cases": results}, indent=2))
    else:
        print(f"{args.repeat} interleaved rounds; ratio = ours / floor (target <= {TARGET_RATIO})")
        header = f"{'case':40} {'ours ms':>9} {'floor ms':>9} {'ratio':>6} {'med':>6} {'parse':>6}"
        print(header)
        print("-" * len(header))
        for r in results:
            best = r["best_s"]
            print(
                f"{r['case']:40} {best['ours'] * 1e3:9.2f} {best['floor'] * 1e3:9.2f}"
                f" {r['ratio_best']:6.2f} {r['ratio_median']:6.2f}"
                f" {r['ratio_parse_only_best']:6.2f}"
            )
        print(
            "ms and ratio: best of rounds; med: ratio of medians; "
            "parse: ratio to parsing pre-decoded text (stricter floor)"
        )
        print(f"worst median ratio: {worst:.2f} ({'ok' if worst <= TARGET_RATIO else 'OVER'})")
    return 0 if worst <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
