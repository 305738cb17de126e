"""The window of registration names a listing reads (spec §1.5), apart from the listing itself.

The file layer returns it and the listing consumes it. It lives on its own so that reading a peers
dir's names (``peers`` on an empty dir, the command line's identity files) does not import the
listing, and through it the registration models and pydantic (docs/performance.md, "Command-line
start-up").
"""

from __future__ import annotations

from typing import NamedTuple


class NameWindow(NamedTuple):
    """The registration names a listing reads, and how many it leaves unread (spec §1.5)."""

    #: At most the listing's limit, in directory order.
    names: list[str]
    #: Names past the limit: counted, never read.
    unread: int
