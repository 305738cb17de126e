"""Where the shared contract material lives, relative to this checkout (never an absolute path)."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED = REPO_ROOT.parent / "shared"
REFERENCE = SHARED / "interop" / "reference-v2.2.1"
