"""Markers for tests that need what only Linux gives (written once, used where needed)."""

from __future__ import annotations

import sys

import pytest


def linux_only(reason: str) -> pytest.MarkDecorator:
    """Skip the marked test off Linux, saying what it needs."""
    return pytest.mark.skipif(not sys.platform.startswith("linux"), reason=reason)


#: The kernel reports the connecting pid of a Unix socket (``SO_PEERCRED``).
needs_peercred = linux_only("needs SO_PEERCRED peer credentials")
