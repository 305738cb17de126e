"""The port between the session runtime and an agent host.

A host (pi-python, a headless inbox, a test double) gives the runtime the few things it needs
through :class:`HostPort`, and reports what happens in the session by calling the runtime:

* ``on_turn(event)`` — every turn event, translated into the vocabulary of
  :mod:`pi_cross_session._internal.security.turns` (preparing, abandoned, started, opened by, our
  message started, model replied, aborted, ended with a stop reason). That module's docstring says
  when to report each; the adapter keeps no turn state of its own beyond what its host needs
  translating (pi-python's synthetic command runs, say), and reads the runtime's ``turns`` when it
  must know whether a turn runs;
* ``on_session_info_changed()`` — name or cwd changed.

The port is deliberately small: anything a host cannot provide is a gap its adapter documents and
works around, never a reason for the runtime to guess.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol, runtime_checkable

from pi_cross_session._internal.security.admission import Delivery


class HostPort(Protocol):
    """What the runtime needs from a host session."""

    @property
    def session_id(self) -> str:
        """The host's session id; it survives a reload of the extension."""
        ...

    @property
    def session_name(self) -> str | None:
        """The name the user gave the session, if any."""
        ...

    @property
    def cwd(self) -> str:
        """The session's working directory."""
        ...

    def is_idle(self) -> bool:
        """True when the host runs no turn; return True when the host cannot tell."""
        ...

    def submit(self, delivery: Delivery, content: str) -> None:
        """Put an inbound message into the conversation so that it starts a turn when idle.

        ``content`` is the framed text the model reads. Must not block; raise on failure (the
        runtime then latches the inbox and reports ``injection_failed``).
        """
        ...

    def notify(self, text: str) -> None:
        """Show one line to the local user (never to the model)."""
        ...


@runtime_checkable
class HoldsReceipts(Protocol):
    """A host whose submission call returns before the hand-over is done: the MCP host in push
    mode writes the notification afterwards. The receipt of a message it took waits for that."""

    def hold_receipt(self, sender_instance_id: str, message_id: str) -> Awaitable[bool] | None:
        """What the ``submitted`` receipt of that message waits for: ``True`` once it is handed
        over, ``False`` if that failed (no receipt is given then); ``None``: nothing to wait
        for."""
        ...
