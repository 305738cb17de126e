"""Where the command line writes: stdout for results, stderr for everything else.

* **Robust streams.** A terminal or pipe that cannot encode a character (``PYTHONIOENCODING=ascii``,
  a C locale) gets a backslash escape instead of a traceback; JSON output then escapes every
  non-ASCII character as ``\\uXXXX``, so it stays valid JSON that reads back to the same value.
* **Safe text.** Everything printed passes the one sanitiser (:mod:`..protocol.sanitize`): callers
  hand over lines they built from sanitised parts, and JSON goes through :func:`sanitize.dumps`.
* **Progress only where a person watches.** Lines that only say "still working" go to stderr and
  only when stderr is a terminal; a script sees the result and nothing else.
* **Logging** goes to stderr, one sanitised line per record: warnings always, more with ``-v``.
"""

from __future__ import annotations

import io
import re
import sys
from typing import TYPE_CHECKING, Any, Final, TextIO

from pi_cross_session._internal.protocol import sanitize

if TYPE_CHECKING:
    import logging

PREFIX: Final = "pi-cross-session"
#: Erase the current terminal line (carriage return, then "erase to end of line").
_CLEAR_LINE: Final = "\r\x1b[K"
_NON_ASCII: Final = re.compile(r"[^\x00-\x7f]")


def prepare_streams() -> None:
    """Make stdout and stderr replace what they cannot encode instead of raising."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")


def _ascii_escape(match: re.Match[str]) -> str:
    point = ord(match.group())
    if point < 0x10000:
        return f"\\u{point:04x}"
    point -= 0x10000
    return f"\\u{0xD800 + (point >> 10):04x}\\u{0xDC00 + (point & 0x3FF):04x}"


def _encodes(text: str, stream: TextIO) -> bool:
    encoding = getattr(stream, "encoding", None) or "utf-8"
    try:
        text.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return False
    return True


class Console:
    """The command line's two output streams."""

    def __init__(
        self, out: TextIO | None = None, err: TextIO | None = None, *, verbosity: int = 0
    ) -> None:
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.verbosity = verbosity
        self._progress_shown = False
        self._logging = False

    def enable_logging(self) -> None:
        """Send log records to stderr (see :func:`setup_logging`); idempotent. Commands call it
        before they import what may log: a quick ``peers`` never imports logging at all."""
        if not self._logging:
            self._logging = True
            setup_logging(self.verbosity)

    @property
    def err_is_tty(self) -> bool:
        """True when a person watches stderr (progress is shown only then)."""
        isatty = getattr(self.err, "isatty", None)
        try:
            return bool(isatty and isatty())
        except ValueError:  # a closed stream
            return False

    def result(self, text: str) -> None:
        """A result line (or lines) on stdout."""
        self.out.write(text + "\n")
        self.out.flush()

    def json(self, value: Any, *, indent: int | None = 2) -> None:
        """One JSON document on stdout; unsafe characters escaped, and every non-ASCII one too
        when stdout cannot encode it."""
        text = sanitize.dumps(value, indent=indent)
        if not _encodes(text, self.out):
            # JSON has non-ASCII characters only inside strings, where \\uXXXX means the same.
            text = _NON_ASCII.sub(_ascii_escape, text)
        self.result(text)

    def problem(self, text: str) -> None:
        """A line for stderr: an error, a refusal, a note about waiting."""
        self._clear_progress()
        self.err.write(text + "\n")
        self.err.flush()

    def progress(self, text: str) -> None:
        """Replace the progress line on stderr (a terminal only; a no-op otherwise)."""
        if not self.err_is_tty:
            return
        self.err.write(_CLEAR_LINE + text)
        self.err.flush()
        self._progress_shown = True

    def milestone(self, text: str) -> None:
        """A progress line that stays (a terminal only): a state change while following."""
        if not self.err_is_tty:
            return
        self._clear_progress()
        self.err.write(text + "\n")
        self.err.flush()

    def done(self) -> None:
        """Remove a progress line that is still shown."""
        self._clear_progress()

    def _clear_progress(self) -> None:
        if self._progress_shown:
            self.err.write(_CLEAR_LINE)
            self.err.flush()
            self._progress_shown = False


def _safe_formatter() -> logging.Formatter:
    import logging

    class SafeFormatter(logging.Formatter):
        """One line per record, sanitised (a logged peer name cannot forge a line or drive the
        terminal); a traceback follows indented, with its unsafe characters escaped."""

        def format(self, record: logging.LogRecord) -> str:
            head = f"{PREFIX}: {record.levelname.lower()}: {record.name}: "
            text = head + sanitize.line(record.getMessage())
            if record.exc_info:
                trace = sanitize.block(self.formatException(record.exc_info))
                text += "\n" + "\n".join("    " + part for part in trace.split("\n"))
            return text

    return SafeFormatter()


def setup_logging(verbosity: int) -> None:
    """Warnings always, as sanitised lines on stderr; ``-v`` adds this package's info records,
    ``-vv`` its debug records."""
    import logging

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_safe_formatter())
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    if verbosity > 0:
        level = logging.DEBUG if verbosity >= 2 else logging.INFO
        logging.getLogger("pi_cross_session").setLevel(level)
