"""The state of files a test looks at: sync helpers for async test bodies, and tree snapshots.

Kept out of async bodies because ruff's ASYNC240 forbids blocking file calls there: ``exists``,
``listdir``, ``mode_of`` and ``write_text``; :func:`tree_state` snapshots a tree to prove a command
changed nothing, and :func:`leftovers` names the files and sockets sessions left behind.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pi_cross_session._internal.protocol import paths


def exists(path: str | os.PathLike[str]) -> bool:
    """``lexists``: kept out of async test bodies (ruff's ASYNC240)."""
    return os.path.lexists(path)


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Create or overwrite a file (a sync helper for async test bodies)."""
    Path(path).write_text(text)


def listdir(path: str | os.PathLike[str]) -> list[str]:
    """Sorted entries of a dir (a sync helper for async test bodies)."""
    return sorted(os.listdir(path))


def mode_of(path: str | os.PathLike[str]) -> int:
    """Permission bits of ``path`` itself (never following a symlink)."""
    return stat.S_IMODE(os.lstat(path).st_mode)


def tree_state(
    *roots: str | os.PathLike[str], rewritten: Iterable[str] = ()
) -> dict[str, tuple[Any, ...]]:
    """Everything under ``roots`` as ``path -> (type, mode, uid, size, mtime_ns, link)``.

    Symlinks are recorded, not followed; a missing root is recorded as missing. A dir's mtime is
    recorded too, so even a file created and removed again inside it shows. ``rewritten`` names
    files a live session rewrites on its own (its registration, at every heartbeat): their times
    and sizes, and their dir's time, are left out, since they change whatever the test does.
    """
    state: dict[str, tuple[Any, ...]] = {}
    moving = {os.fspath(path) for path in rewritten}
    moving_dirs = {os.path.dirname(path) for path in moving}

    def record(path: str) -> os.stat_result | None:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            state[path] = ("missing",)
            return None
        link = os.readlink(path) if stat.S_ISLNK(st.st_mode) else None
        size = st.st_size if stat.S_ISREG(st.st_mode) else None
        changes = path in moving or path in moving_dirs
        state[path] = (
            stat.S_IFMT(st.st_mode),
            stat.S_IMODE(st.st_mode),
            st.st_uid,
            None if path in moving else size,
            None if changes else st.st_mtime_ns,
            link,
        )
        return st

    def walk(path: str) -> None:
        st = record(path)
        if st is not None and stat.S_ISDIR(st.st_mode):
            for name in sorted(os.listdir(path)):
                walk(os.path.join(path, name))

    for root in roots:
        walk(os.fspath(root))
    return state


def leftovers(locations: paths.Locations, keep: Sequence[str] = ()) -> list[str]:
    """Registration files, temp files and sockets not belonging to the instance ids in ``keep``."""
    found: list[str] = []
    for directory in (locations.peers_dir, locations.runtime_dir):
        try:
            names = sorted(os.listdir(directory))
        except FileNotFoundError:
            continue
        for name in names:
            if name.startswith(".") and name.endswith(".lock"):
                continue  # the reap lock of listings: part of the dir, not a leftover
            stem = name.split(".", 1)[0]
            if stem in keep and not name.startswith("."):
                continue
            found.append(os.path.join(directory, name))
    return found
