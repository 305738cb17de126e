"""A pytest plugin that fails the run when code under test reads beside the checkout.

The suite must pass from a bare clone, so nothing it runs may depend on a sibling of the checkout
(a contract folder, another project, a data dir one level up). An audit hook
(:func:`sys.addaudithook`) sees every ``open``, directory listing, glob, ``chdir`` and subprocess
working directory in this process; a path under the checkout's parent that is not under the
checkout is recorded. The test during which it happened fails at teardown, and a read during
collection fails the session.

When the checkout's parent is a root that everything shares (``/``, the temp dir, the home dir),
its other entries are the machine's, not siblings; then only ``<parent>/shared`` (where the
contract material sits beside a checkout) is watched. The interpreter's own prefixes are never
counted. Child processes are not watched here; ``tests/test_self_contained.py`` checks the source
of ``tests``, ``bench`` and ``demo`` statically instead.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

#: Audit events that name a path being read or entered, and which argument holds it.
PATH_EVENTS = {
    "open": 0,
    "os.listdir": 0,
    "os.scandir": 0,
    "glob.glob": 0,
    "os.chdir": 0,
    "subprocess.Popen": 2,  # (executable, args, cwd, env): the child's working directory
}


def _is_shared_root(path: str) -> bool:
    roots = (os.sep, tempfile.gettempdir(), os.path.expanduser("~"))
    return path in {os.path.realpath(root) for root in roots}


class Watcher:
    """Records every watched path that lies beside the checkout."""

    def __init__(self, repo_root: Path) -> None:
        root = str(repo_root)
        parent = os.path.dirname(root)
        self.repo = root + os.sep
        #: Whether the parent is everybody's (then only its ``shared`` entry is watched).
        self.parent_is_shared = _is_shared_root(parent)
        self.watched = (
            os.path.join(parent, "shared") + os.sep
            if self.parent_is_shared
            else parent.rstrip(os.sep) + os.sep
        )
        prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
        prefixes.update(p for p in sysconfig.get_paths().values() if p)
        self.exempt = tuple(sorted(p.rstrip(os.sep) + os.sep for p in prefixes))
        self._lock = threading.Lock()
        self._seen: list[str] = []

    def is_beside(self, path: str) -> bool:
        """Whether ``path`` (absolute, normalised) is a sibling's, not the checkout's."""
        candidate = path + os.sep
        return (
            candidate.startswith(self.watched)
            and not candidate.startswith(self.repo)
            and not candidate.startswith(self.exempt)
        )

    def audit(self, event: str, args: tuple[object, ...]) -> None:
        index = PATH_EVENTS.get(event)
        if index is None or len(args) <= index:
            return
        raw = args[index]
        if not isinstance(raw, str | bytes | os.PathLike):
            return  # a file descriptor, or no path at all
        try:
            path = os.path.abspath(os.fsdecode(os.fspath(raw)))
        except (TypeError, ValueError, OSError):
            return
        if self.is_beside(path):
            with self._lock:
                self._seen.append(f"{event}: {path}")

    def take(self) -> list[str]:
        """The paths recorded since the last call, forgetting them."""
        with self._lock:
            seen, self._seen = self._seen, []
        return seen


WATCHER = Watcher(REPO_ROOT)
sys.addaudithook(WATCHER.audit)


def _report(seen: list[str]) -> str:
    lines = "\n  ".join(seen)
    return f"read outside the checkout ({REPO_ROOT.name}); ship the data under tests/:\n  {lines}"


@pytest.fixture(autouse=True)
def _stay_inside_the_checkout() -> Iterator[None]:
    """Fail the test that read beside the checkout (what collection read fails the session)."""
    earlier = WATCHER.take()
    if earlier:
        pytest.fail(_report(earlier), pytrace=False)
    yield
    seen = WATCHER.take()
    if seen:
        pytest.fail(_report(seen), pytrace=False)


def pytest_collection_finish(session: pytest.Session) -> None:
    seen = WATCHER.take()
    if seen:
        raise pytest.UsageError(_report(seen))
