"""Where the suite's recorded test data lives: inside this checkout, and nowhere else.

Everything the tests replay ships under ``tests/vectors``; nothing here may point outside the
repository (``tests/test_self_contained.py`` checks that no test reads beyond it).
"""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
VECTORS = REPO_ROOT / "tests" / "vectors"
#: Traffic recorded from the Node reference peer v2.2.1 (see its README).
REFERENCE = VECTORS / "reference-v2.2.1"
