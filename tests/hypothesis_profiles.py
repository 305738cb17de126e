"""The suite's hypothesis profiles: ``default`` for ``make test``, ``long`` for ``make test-long``.

``PI_XS_HYPOTHESIS_PROFILE`` picks one (pytest's ``--hypothesis-profile`` works too); the root
conftest loads it before any test module is imported. ``long`` runs ten times the examples of
``default`` everywhere: plain ``@given`` tests through ``max_examples``, and tests that set their
own count through :func:`scaled`, which every explicit ``max_examples`` in the suite must use.

Neither profile has a per-example deadline, and neither fails a test because generating its data
was slow: both measure wall time, which another process on the machine can stretch at will.
"""

from __future__ import annotations

import os
from typing import Final

from hypothesis import HealthCheck, settings

ENV: Final = "PI_XS_HYPOTHESIS_PROFILE"
DEFAULT: Final = "default"
LONG: Final = "long"
#: Hypothesis's own default; ``scaled(n)`` is ``n`` under a profile with this many examples.
BASE_EXAMPLES: Final = 100
LONG_FACTOR: Final = 10

_COMMON: Final = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow],
    "print_blob": True,
}

settings.register_profile(DEFAULT, max_examples=BASE_EXAMPLES, **_COMMON)
settings.register_profile(LONG, max_examples=BASE_EXAMPLES * LONG_FACTOR, **_COMMON)


def load_from_environment() -> str:
    """Load the profile ``PI_XS_HYPOTHESIS_PROFILE`` names (``default`` when unset)."""
    name = os.environ.get(ENV, DEFAULT)
    settings.load_profile(name)
    return name


def scaled(examples: int) -> int:
    """``examples`` under the default profile, scaled like ``max_examples`` by the one in force.

    Call it at import time (in a ``@settings`` decorator or a module constant), when the
    profile chosen for this run is loaded.
    """
    return max(1, examples * settings.default.max_examples // BASE_EXAMPLES)
