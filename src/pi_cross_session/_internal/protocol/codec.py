"""Framing: turning a byte stream into frame texts, and one frame text into bytes.

The wire carries one JSON document per line, UTF-8 encoded, each line ended by a LF (spec §3.1).
This module knows nothing of JSON, sockets, clocks or event loops: bytes go in through
:meth:`FrameDecoder.receive_data`, events come out of :meth:`FrameDecoder.next_event` (one at a
time) or :meth:`FrameDecoder.events` (all that are ready). Whoever owns the socket moves the bytes.

Events
------

* :class:`Frame` — the text of one complete line, without its LF, and the raw bytes it used.
* :data:`NEED_DATA` — nothing more can be decoded until more bytes (or EOF) arrive.
* :class:`ConnectionClosed` — EOF was received; ``partial`` says an unterminated line was dropped.
* :class:`Fault` — the peer broke the framing rules; the decoder is failed for good.

The reader rules, and how they are kept
---------------------------------------

* **A frame is the bytes up to a LF.** 0x0A never occurs inside a multi-byte UTF-8 sequence, so
  splitting the raw bytes on it is exact, and the search only ever looks at bytes it has not seen:
  the bytes of a pending (unterminated) frame are known to hold no LF, so they are never rescanned.
* **The byte cap is per frame and counts raw bytes**: the LF, frame 1's BOM and a still-incomplete
  multi-byte tail all count. The check runs where the bytes accumulate, so a frame is refused the
  moment its count passes the cap, long before any LF, and a pending frame never holds more than
  ``max_frame_bytes`` bytes.
* **UTF-8 is decoded strictly, as a stream.** The bytes of a pending frame go through one
  incremental strict decoder as they arrive; each byte is decoded exactly once, so feeding a frame
  one byte at a time costs O(n) overall, and the decoded pieces are joined once, when the LF comes.
  A byte that cannot begin or continue valid UTF-8 faults as soon as it is seen; a sequence still
  incomplete when its LF arrives faults then. Encoded surrogates (``ED A0 80``) are invalid.
* **Which fault wins is a property of the bytes, not of how they were chunked.** A frame is judged
  on its first ``max_frame_bytes`` raw bytes: invalid UTF-8 seen among them, or an empty line, is
  ``invalid_frame``; otherwise a frame that runs past them is ``message_too_large``. Any split of
  the same stream into chunks therefore yields the same events.
* **A BOM (EF BB BF) is removed only at the very start of the connection**, even when it arrives
  split across chunks, and it counts against frame 1's budget. A BOM at the start of a later frame
  stays in its text (the JSON layer then refuses it).
* **An empty line is a fault** (``invalid_frame``): zero bytes before the LF, or only frame 1's
  BOM. A line holding just ``\\r`` is not empty; a trailing ``\\r`` stays in the text, where JSON
  reads it as whitespace.
* **Frames come out in order, and a fault never overtakes them**: the frames completed before the
  bad bytes are returned first, then the fault. After a fault, or after EOF, every call returns that
  same final event and further bytes are ignored.

Speed
-----

Most chunks hold whole frames and nothing is pending. Then the chunk is cut at its last LF, that
region is split on LF in one call, the sizes are checked in bulk (``min``/``max``) and the lines
are decoded with ``map``: no per-byte Python code and no per-frame search. Only when something in
the region is wrong does the decoder fall back to a frame-by-frame walk, which finds the first bad
frame and reports it after the good ones. A large frame arriving in many chunks costs one
incremental decode per chunk and a single join, never a re-join of a growing buffer.

The encoder, :func:`encode_frame`, refuses anything a conforming reader would fault on, before a
byte is written: an empty body, a LF or lone surrogate in it, a leading U+FEFF, or a frame over
the cap.
"""

from __future__ import annotations

import codecs
from collections import deque
from dataclasses import dataclass
from enum import Enum
from typing import Final, TypeAlias

from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.errors import FrameTooLargeError, LocalProtocolError
from pi_cross_session._internal.protocol.limits import MAX_FRAME_BYTES

__all__ = [
    "BOM",
    "NEED_DATA",
    "ConnectionClosed",
    "Event",
    "Fault",
    "Frame",
    "FrameDecoder",
    "NeedData",
    "encode_frame",
]

#: The UTF-8 byte order mark; stripped only at the very start of a connection.
BOM: Final = b"\xef\xbb\xbf"

_LF: Final = b"\n"
_NL: Final = "\n"
_NEW_UTF8_DECODER: Final = codecs.getincrementaldecoder("utf-8")


class NeedData(Enum):
    """The type of :data:`NEED_DATA` (an enum with one member, so ``is`` checks narrow it)."""

    NEED_DATA = "NEED_DATA"

    def __repr__(self) -> str:
        return "NEED_DATA"


#: Returned when no event can be produced until more bytes, or EOF, are received.
NEED_DATA: Final = NeedData.NEED_DATA


@dataclass(frozen=True, slots=True)
class Frame:
    """One complete frame.

    ``text`` is the decoded line without its LF (a trailing ``\\r`` is kept). ``raw_bytes`` is what
    the frame used on the wire: its bytes, its LF and, for frame 1, a stripped BOM.
    """

    text: str
    raw_bytes: int


@dataclass(frozen=True, slots=True)
class ConnectionClosed:
    """EOF was received; ``partial`` says an unterminated frame was pending (it is dropped)."""

    partial: bool


@dataclass(frozen=True, slots=True)
class Fault:
    """The peer broke the framing rules; the decoder reports this same fault from now on.

    ``code`` is :attr:`Code.MESSAGE_TOO_LARGE` or :attr:`Code.INVALID_FRAME`. ``detail`` is our own
    wording and never quotes the peer's bytes, so it is safe to log or to put in a reply.
    """

    code: Code
    detail: str


#: Everything :meth:`FrameDecoder.next_event` can return.
Event: TypeAlias = Frame | ConnectionClosed | Fault | NeedData

_INVALID_UTF8: Final = "the frame is not valid UTF-8"
_INCOMPLETE_UTF8: Final = "the frame ends inside a UTF-8 sequence"
_EMPTY_LINE: Final = "an empty line is not a frame"


def _utf8_detail(exc: UnicodeDecodeError) -> str:
    """Our wording for a decoding failure; the same bytes get the same words however chunked."""
    # Only a frame's final decode can end mid-sequence; a bad byte fails wherever it is seen.
    return _INCOMPLETE_UTF8 if exc.reason == "unexpected end of data" else _INVALID_UTF8


def _is_dead_tail(tail: bytes) -> bool:
    """True for ``ED A0``..``ED BF``: the start of an encoded surrogate.

    CPython's decoder only refuses such a sequence once its third byte arrives; no third byte can
    make it valid, so we refuse it when its second byte is seen, as the rule "invalid as soon as
    seen" asks.
    """
    return len(tail) == 2 and tail[0] == 0xED and tail[1] >= 0xA0


class FrameDecoder:
    """Incremental, sans-IO decoder of the line framing (spec §3.1).

    Feed bytes with :meth:`receive_data` (``b""`` is EOF) and read events with :meth:`next_event`
    or :meth:`events`. The work is done as bytes are received, each byte once: the bytes of a
    pending frame are LF-free by construction, so the LF search only ever covers new data (the
    search offset is the start of the newest chunk). Reading events only hands them out.

    A receive loop needs nothing else::

        decoder = FrameDecoder()
        while True:
            decoder.receive_data(await read_some_bytes())  # b"" once the peer has closed
            *frames, last = decoder.events()
            for frame in frames:
                handle(frame)
            if last is not NEED_DATA:  # a Fault or ConnectionClosed: reading is over
                break

    Complete frames wait in the decoder until they are read; a caller that feeds without reading
    keeps them in memory. A pending, unterminated frame never holds more than ``max_frame_bytes``.
    """

    __slots__ = (
        "_at_start",
        "_end",
        "_eof",
        "_head",
        "_max",
        "_pending",
        "_pieces",
        "_ready",
        "_utf8",
    )

    def __init__(self, *, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        """``max_frame_bytes`` caps one frame's raw bytes, its LF included."""
        if max_frame_bytes < 1:
            raise ValueError("max_frame_bytes must be at least 1")
        self._max = max_frame_bytes
        self._ready: deque[Frame] = deque()
        # The final event (a Fault, or ConnectionClosed after EOF); once set, decoding has stopped.
        self._end: Fault | ConnectionClosed | None = None
        self._eof = False
        # Until three bytes (or a mismatch) decide whether the connection starts with a BOM, the
        # first bytes wait here. They are all valid UTF-8 prefixes, so waiting hides no fault.
        self._at_start = True
        self._head = b""
        # The pending frame: raw bytes counted so far (BOM included), text decoded so far, and
        # the decoder holding an incomplete multi-byte tail between chunks.
        self._pending = 0
        self._pieces: list[str] = []
        self._utf8 = _NEW_UTF8_DECODER("strict")

    # -- public API ------------------------------------------------------------------------------

    @property
    def pending_bytes(self) -> int:
        """Raw bytes of the frame in progress (not yet ended by a LF), its BOM included."""
        return self._pending + len(self._head)

    def receive_data(self, data: bytes) -> None:
        """Take the next bytes from the peer; ``b""`` means the peer closed (EOF).

        Peer errors never raise here: they become a :class:`Fault` event. Bytes received after a
        fault are ignored. Receiving anything after EOF is a bug of the caller and raises
        :class:`LocalProtocolError`.
        """
        if self._eof:
            raise LocalProtocolError("receive_data() called after EOF was received")
        if not data:
            self._receive_eof()
            return
        if self._end is not None:
            return
        if type(data) is not bytes:
            data = bytes(data)
        if self._at_start:
            rest = self._take_bom(data)
            if not rest:
                return
            data = rest
        if self._pending:
            self._continue(data)
        else:
            self._split(data, 0)

    def next_event(self) -> Event:
        """The next event: a :class:`Frame`, else the final event if there is one, else NEED_DATA.

        Once a :class:`Fault` or :class:`ConnectionClosed` is returned, every later call returns
        the same object.
        """
        if self._ready:
            return self._ready.popleft()
        if self._end is not None:
            return self._end
        return NEED_DATA

    def events(self) -> list[Event]:
        """Every event ready now: the complete frames, in order, then exactly one more event.

        The last item is never a :class:`Frame`: it is :data:`NEED_DATA` (feed more bytes), or the
        final :class:`Fault` / :class:`ConnectionClosed` (stop reading). The list is never empty.
        """
        ready = self._ready
        out: list[Event] = [*ready]
        ready.clear()
        out.append(NEED_DATA if self._end is None else self._end)
        return out

    # -- decoding --------------------------------------------------------------------------------

    def _take_bom(self, data: bytes) -> bytes | None:
        """Strip a connection-initial BOM; return the bytes left to decode, or None to wait."""
        head = self._head + data
        if len(head) < len(BOM) and BOM.startswith(head):
            # Still undecided. These bytes belong to frame 1 whatever they turn out to be, so
            # they count against its budget now.
            self._head = head
            if len(head) > self._max:
                self._fail_too_large()
            return None
        self._at_start = False
        self._head = b""
        if not head.startswith(BOM):
            return head
        self._pending = len(BOM)
        if self._pending > self._max:
            self._fail_too_large()
            return None
        return head[len(BOM) :]

    def _continue(self, data: bytes) -> None:
        """Extend the pending frame with ``data``, and finish it if a LF arrived."""
        lf = data.find(_LF)
        if lf < 0:
            self._grow(data)
            return
        total = self._pending + lf + 1
        if total > self._max:
            self._fail_over_cap(data[: self._max - self._pending])
            return
        try:
            last = self._utf8.decode(data[:lf], True)
        except UnicodeDecodeError as exc:
            self._fail(Code.INVALID_FRAME, _utf8_detail(exc))
            return
        pieces = self._pieces
        pieces.append(last)
        text = "".join(pieces)
        pieces.clear()
        self._pending = 0
        if not text:
            self._fail(Code.INVALID_FRAME, _EMPTY_LINE)
            return
        self._ready.append(Frame(text, total))
        if lf + 1 < len(data):
            self._split(data, lf + 1)

    def _grow(self, data: bytes) -> None:
        """Add LF-free ``data`` to the pending frame (which may be starting now)."""
        room = self._max - self._pending
        if len(data) > room:
            self._fail_over_cap(data[:room])
            return
        if not self._feed_utf8(data):
            return
        self._pending += len(data)

    def _feed_utf8(self, data: bytes) -> bool:
        """Decode more of the pending frame; on invalid UTF-8, fail and return False."""
        try:
            piece = self._utf8.decode(data)
        except UnicodeDecodeError:
            self._fail(Code.INVALID_FRAME, _INVALID_UTF8)
            return False
        # Only a chunk ending in A0..BF can leave an encoded surrogate's first two bytes behind.
        if 0xA0 <= data[-1] <= 0xBF and _is_dead_tail(self._utf8.getstate()[0]):
            self._fail(Code.INVALID_FRAME, _INVALID_UTF8)
            return False
        if piece:
            self._pieces.append(piece)
        return True

    def _split(self, data: bytes, start: int) -> None:
        """Decode ``data[start:]`` with nothing pending: whole frames first, then the tail."""
        last_lf = data.rfind(_LF, start)
        if last_lf < 0:
            self._grow(data[start:] if start else data)
            return
        if not self._split_fast(data, start, last_lf):
            self._split_careful(data, start, last_lf)
            if self._end is not None:
                return
        if last_lf + 1 < len(data):
            self._grow(data[last_lf + 1 :])

    def _split_fast(self, data: bytes, start: int, last_lf: int) -> bool:
        """Emit the whole frames of ``data[start:last_lf + 1]`` if they are all good.

        Returns False, having emitted nothing, when the region needs the careful walk (invalid
        UTF-8, an empty line, or an oversized frame somewhere in it).
        """
        raws = data[start:last_lf].split(_LF)
        sizes = [len(raw) + 1 for raw in raws]
        if min(sizes) == 1 or max(sizes) > self._max:
            return False
        try:
            # One decode per line. Decoding the region in one call and splitting the string is
            # slower: one astral character anywhere widens the whole region to four bytes per
            # character before it is cut up.
            lines = list(map(bytes.decode, raws))
        except UnicodeDecodeError:
            return False
        self._ready.extend(map(Frame, lines, sizes))
        return True

    def _split_careful(self, data: bytes, start: int, last_lf: int) -> None:
        """Walk the whole frames one by one, emitting good ones until the first bad one faults."""
        maxb = self._max
        ready = self._ready
        find = data.find
        while start <= last_lf:
            lf = find(_LF, start, last_lf + 1)
            size = lf - start + 1
            if size > maxb:
                self._fail_over_cap(data[start : start + maxb])
                return
            if size == 1:
                self._fail(Code.INVALID_FRAME, _EMPTY_LINE)
                return
            try:
                text = data[start:lf].decode("utf-8")
            except UnicodeDecodeError as exc:
                self._fail(Code.INVALID_FRAME, _utf8_detail(exc))
                return
            ready.append(Frame(text, size))
            start = lf + 1

    # -- endings ---------------------------------------------------------------------------------

    def _fail_over_cap(self, admissible: bytes) -> None:
        """The current frame passed the cap; ``admissible`` is the rest of its first max bytes.

        Invalid UTF-8 among those bytes was there before the cap was passed, so it wins; this
        keeps the verdict independent of how the stream was chunked.
        """
        if admissible and not self._feed_utf8(admissible):
            return
        self._fail_too_large()

    def _fail_too_large(self) -> None:
        self._fail(
            Code.MESSAGE_TOO_LARGE, f"the frame is longer than {self._max} bytes with its newline"
        )

    def _fail(self, code: Code, detail: str) -> None:
        if self._end is None:
            self._end = Fault(code, detail)
        self._drop_pending()

    def _receive_eof(self) -> None:
        self._eof = True
        if self._end is None:
            self._end = ConnectionClosed(partial=self.pending_bytes > 0)
        self._drop_pending()

    def _drop_pending(self) -> None:
        self._pending = 0
        self._pieces = []
        self._head = b""
        self._utf8.reset()


def encode_frame(body: str, *, max_frame_bytes: int = MAX_FRAME_BYTES) -> bytes:
    """Encode one frame body (a JSON text) as UTF-8 plus LF, ready to write.

    Raises :class:`LocalProtocolError` for a body no conforming reader would take back unchanged
    as one frame (empty, holding a LF or a lone surrogate, or starting with U+FEFF, which a reader
    strips from frame 1 and which no JSON text starts with), and :class:`FrameTooLargeError`
    (``message_too_large``) when the encoded frame, LF included, exceeds ``max_frame_bytes``.
    Both are raised before anything could be sent.
    """
    if not body:
        raise LocalProtocolError("an empty frame body would be an empty line")
    if _NL in body:
        raise LocalProtocolError("a frame body must not contain a line feed")
    if body[0] == "\ufeff":
        raise LocalProtocolError("a frame body must not start with a byte order mark")
    try:
        raw = body.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise LocalProtocolError("a frame body must not contain a lone surrogate") from exc
    size = len(raw) + 1
    if size > max_frame_bytes:
        raise FrameTooLargeError(
            f"the frame would be {size} bytes with its newline; the limit is {max_frame_bytes}"
        )
    return raw + _LF
