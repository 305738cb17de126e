"""The gateway's recent warnings and errors, kept for ``remote status`` and ``doctor``.

Every warning the remote plane logs (a lost connection, a bucket put back, a permission NATS
refused, a deployment that enforces nothing) goes to stderr as it happens; a person who looks
later asks the gateway's status instead. So the gateway keeps the last
:data:`~pi_cross_session._internal.protocol.remote.settings.REMOTE_PROBLEMS_KEPT` of them, each with
its time, and writes them into its snapshot. Bounded in count and in length, whatever repeats; the
text is the log line's, escaped by whoever prints it.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any, Final

from pi_cross_session._internal.protocol.remote.settings import (
    REMOTE_PROBLEM_CHARS,
    REMOTE_PROBLEMS_KEPT,
)

#: The remote plane's loggers, all below this one.
REMOTE_LOGGER: Final = "pi_cross_session._internal.plugin.remote"


class RecentProblems(logging.Handler):
    """A logging handler that keeps the last warnings and errors of the remote plane."""

    def __init__(self, kept: int = REMOTE_PROBLEMS_KEPT) -> None:
        super().__init__(logging.WARNING)
        self._ring: deque[dict[str, Any]] = deque(maxlen=kept)
        #: Warnings and errors seen since start, including those the ring no longer holds.
        self.seen = 0

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
        except Exception:  # a bad format string in a log call must not break the caller
            self.handleError(record)
            return
        if len(text) > REMOTE_PROBLEM_CHARS:
            text = text[: REMOTE_PROBLEM_CHARS - 1] + "\u2026"
        self.seen += 1
        self._ring.append(
            {
                "at": int(record.created * 1000),
                "level": record.levelname.lower(),
                "where": record.name.rpartition(".")[2],
                "text": text,
            }
        )

    def to_json(self) -> list[dict[str, Any]]:
        """Oldest first: ``at`` (epoch ms), ``level``, ``where`` (the module), ``text``."""
        return [dict(entry) for entry in self._ring]

    def attach(self) -> None:
        """Start keeping what the remote plane's loggers say."""
        logging.getLogger(REMOTE_LOGGER).addHandler(self)

    def detach(self) -> None:
        logging.getLogger(REMOTE_LOGGER).removeHandler(self)
