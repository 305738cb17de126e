"""pi-cross-session: authenticated local messaging between agent sessions on one machine.

For a tool, three calls (see ``docs/api.md``)::

    import pi_cross_session as pxs

    peers = await pxs.list_peers()                          # who is live
    report = await pxs.send("reviewer", "Build is green")   # an honest receipt
    await pxs.run_inbox(handle)                             # receive, one message at a time

What a program may import is this package's names and :mod:`pi_cross_session.sanitize`;
everything else lives in :mod:`pi_cross_session._internal` and may change without notice.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

__all__ = [
    "CrossSessionError",
    "DeliveryOutcome",
    "InboxMessage",
    "Peers",
    "PublicPeer",
    "SendOutcome",
    "SendReport",
    "__version__",
    "list_peers",
    "run_inbox",
    "send",
]

if TYPE_CHECKING:
    from pi_cross_session._internal.api import (
        CrossSessionError,
        DeliveryOutcome,
        InboxMessage,
        Peers,
        PublicPeer,
        SendOutcome,
        SendReport,
        list_peers,
        run_inbox,
        send,
    )


def __getattr__(name: str) -> object:
    # Every module of the package imports this one first, the command line's quick ``peers``
    # and ``paths`` included; importing the library here would cost them the event loop,
    # pydantic's models and the runtime (docs/api.md, "Importing"). So the library loads on
    # first use of one of its names.
    if name in __all__:
        return getattr(importlib.import_module("pi_cross_session._internal.api"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
