"""Git metadata of the peers' working directories, for listings (spec §6.1).

A listing shows, for each live peer, the git worktree, branch and HEAD of its cwd. The reference
runs ``git -C <cwd> rev-parse --show-toplevel HEAD --abbrev-ref HEAD`` once per peer; with a hundred
peers that is a hundred processes per listing, and a listing runs before every send. Here the
answer is read from git's own files instead, and the subprocess is kept as the fallback for
whatever the reader does not understand.

How a batch is resolved (:func:`resolve_git_info`):

1. identical cwds are looked up once;
2. every lookup runs in **one** worker thread, which stops taking new cwds when the overall budget
   (:data:`~pi_cross_session._internal.protocol.io.git_settings.GIT_TIMEOUT_S`) is spent;
3. a cwd the reader cannot settle (:class:`NeedsGit`) is handed to the real ``git`` command, a few
   at a time, within what is left of the same budget, with its output capped;
4. whatever is not settled when the budget runs out is ``None``, as any failure of git would be.

What the fast reader does, and where it gives up (:func:`read_git_files`):

* The cwd is made physical with ``realpath`` (git ``chdir``\\ s into it and reads the result back),
  then each dir from there up is checked for ``.git``: a dir, or a file ``gitdir: <path>`` (linked
  worktrees, submodules, ``--separate-git-dir``). Like git, the walk stops at a filesystem boundary
  and continues past a ``.git`` dir that is not a repository.
* ``HEAD`` is ``ref: refs/heads/<name>`` or a bare object id; the branch is resolved through the
  loose ref file, then ``packed-refs``, both in the common dir (``commondir`` for linked
  worktrees). A branch that exists in neither is unborn, which git reports as a failure: ``None``.
* The branch is shortened like ``--abbrev-ref`` does, and only when the short name cannot be
  ambiguous: if any ref git would also try for that short name exists (a tag of the same name, a
  remote, a file of that name in the git dir), git decides.
* Given to git instead: reftable or any repository extension besides the object format,
  ``core.bare``, a ``core.worktree`` that moves the top level, config includes, a symlinked
  ``HEAD`` or ref, a symbolic ref chain, any file of an unexpected type or size, a cwd inside a
  git dir, a repository not owned by our uid (git's ``safe.directory`` rules decide), and any of
  ``GIT_CEILING_DIRECTORIES`` / ``GIT_DISCOVERY_ACROSS_FILESYSTEM`` set in our environment.

Security. The cwd comes from another session's registration, so a hostile repository must not be
able to run code here or stall a listing. The reader only ``stat``\\ s and reads plain files: it
never executes anything, every read is capped in size, opened non-blocking and refused unless it is
a regular file (a FIFO or a device cannot hang it), and any file it does not recognise ends in
``None`` or the fallback. The fallback runs exactly the reference's command (which reads the
repository's config but runs no hooks) with repository-selecting variables such as ``GIT_DIR``
removed from its environment, optional locks off and prompts disabled, under the batch deadline and
the output cap.

Deviations from the reference, on purpose: an empty or relative cwd gives ``None`` (``git -C ""``
would describe the *lister's* own directory), and this process's ``GIT_DIR``-like variables never
redirect the lookup of a peer's cwd.
"""

from __future__ import annotations

import logging
import os
import re
import stat
import subprocess
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Final

import anyio
from anyio.abc import ByteReceiveStream

from pi_cross_session._internal.protocol import sanitize
from pi_cross_session._internal.protocol.io.git_settings import (
    GIT_OUTPUT_CAP_BYTES,
    GIT_TIMEOUT_S,
    MAX_GIT_CONFIG_BYTES,
    MAX_GIT_PACKED_REFS_BYTES,
    MAX_GIT_SMALL_FILE_BYTES,
    MAX_GIT_SUBPROCESSES,
)
from pi_cross_session._internal.protocol.registration import GitInfo, parse_git_output

__all__ = [
    "NeedsGit",
    "git_rev_parse",
    "read_git_files",
    "resolve_git_info",
]

logger = logging.getLogger(__name__)


#: The reader stops taking cwds at the deadline; the thread is abandoned only this much later.
_THREAD_GRACE_S: Final = 0.25

#: The variables ``git rev-parse --local-env-vars`` lists: they point git at a repository (or
#: change how it reads one) and belong to this process, never to a peer's cwd.
_REPOSITORY_ENV: Final = frozenset(
    {
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_COMMON_DIR",
        "GIT_CONFIG",
        "GIT_CONFIG_COUNT",
        "GIT_CONFIG_PARAMETERS",
        "GIT_DIR",
        "GIT_GRAFT_FILE",
        "GIT_IMPLICIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_NO_REPLACE_OBJECTS",
        "GIT_OBJECT_DIRECTORY",
        "GIT_PREFIX",
        "GIT_REPLACE_REF_BASE",
        "GIT_SHALLOW_FILE",
        "GIT_WORK_TREE",
    }
)
#: Variables of ours that change how git discovers a repository; the reader leaves those to git.
_DISCOVERY_ENV: Final = ("GIT_CEILING_DIRECTORIES", "GIT_DISCOVERY_ACROSS_FILESYSTEM")

_HEX_LENGTH: Final = {"sha1": 40, "sha256": 64}
_HEADS: Final = b"refs/heads/"
#: Extensions that change nothing about where HEAD and branches live.
_HARMLESS_EXTENSIONS: Final = frozenset({"noop", "noop-v1", "partialclone", "preciousobjects"})
#: What ``check_refname_format`` forbids inside a ref name (plus NUL and DEL).
_BAD_REF_CHARS: Final = re.compile(rb"[\x00-\x20\x7f~^:?*\[\\]")
_TRUE: Final = frozenset({"true", "yes", "on", "1", ""})
_FALSE: Final = frozenset({"false", "no", "off", "0"})


@dataclass(frozen=True, slots=True)
class NeedsGit:
    """The fast reader met something it does not understand; ``reason`` says what (for logs)."""

    reason: str


class _UnsureError(Exception):
    """Internal: abandon the fast path for this cwd and ask git."""


# -- small, safe reads -----------------------------------------------------------------------------


def _read_capped(path: str, cap: int) -> bytes | None:
    """A regular file's bytes (at most ``cap``), ``None`` if it does not exist.

    Opened non-blocking and checked through the descriptor, so a FIFO, socket or device planted
    under a git name fails fast instead of hanging the worker thread.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _UnsureError(f"{os.path.basename(path)} is not a regular file")
        if st.st_size > cap:
            raise _UnsureError(f"{os.path.basename(path)} is larger than {cap} bytes")
        chunks: list[bytes] = []
        remaining = cap + 1
        while remaining > 0:
            chunk = os.read(fd, remaining)
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > cap:
        raise _UnsureError(f"{os.path.basename(path)} grew past {cap} bytes")
    return data


def _lstat(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _is_dir(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return False


def _owned_by_us(path: str) -> bool:
    st = _lstat(path)
    return st is not None and st.st_uid == os.geteuid()


def _as_text(path: str) -> str:
    """A path as git's output would read once decoded as UTF-8 by the reference (Node)."""
    return os.fsencode(path).decode("utf-8", "replace")


# -- repository layout ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Repo:
    worktree: str
    gitdir: str
    commondir: str


@dataclass(frozen=True, slots=True)
class _Config:
    hex_length: int
    worktree: str | None


def _common_dir(gitdir: str) -> str:
    raw = _read_capped(os.path.join(gitdir, "commondir"), MAX_GIT_SMALL_FILE_BYTES)
    if raw is None:
        return gitdir
    text = os.fsdecode(raw.rstrip(b"\r\n"))
    if not text or "\n" in text:
        raise _UnsureError("commondir is not one path")
    return os.path.normpath(os.path.join(gitdir, text))


def _looks_like_head(gitdir: str) -> bool:
    """git's ``validate_headref``: a symbolic ref under ``refs/`` or an object id."""
    head = os.path.join(gitdir, "HEAD")
    st = _lstat(head)
    if st is None:
        return False
    if stat.S_ISLNK(st.st_mode):
        raise _UnsureError("HEAD is a symbolic link")
    raw = _read_capped(head, MAX_GIT_SMALL_FILE_BYTES)
    if raw is None:
        return False
    if raw.startswith(b"ref:"):
        return raw[4:].lstrip().startswith(b"refs/")
    return re.match(rb"[0-9a-fA-F]{40}", raw) is not None


def _is_git_directory(gitdir: str) -> bool:
    """git's ``is_git_directory``: a valid HEAD, and ``objects``/``refs`` in the common dir."""
    if not _looks_like_head(gitdir):
        return False
    common = _common_dir(gitdir)
    return _is_dir(os.path.join(common, "objects")) and _is_dir(os.path.join(common, "refs"))


def _read_gitfile(path: str) -> str:
    """The git dir a ``.git`` file points to; anything but a plain ``gitdir: <path>`` is unsure."""
    raw = _read_capped(path, MAX_GIT_SMALL_FILE_BYTES)
    if raw is None or not raw.startswith(b"gitdir: "):
        raise _UnsureError(".git file is not 'gitdir: <path>'")
    target = raw[len(b"gitdir: ") :].rstrip(b"\r\n")
    if not target or b"\n" in target or b"\x00" in target:
        raise _UnsureError(".git file does not hold one path")
    gitdir = os.path.join(os.path.dirname(path), os.fsdecode(target))
    if not _is_dir(gitdir) or not _is_git_directory(gitdir):
        raise _UnsureError(".git file points to something that is not a git dir")
    return os.path.realpath(gitdir)


def _discover(start: str, env: Mapping[str, str]) -> _Repo | None:
    """Walk up from ``start`` (a physical dir) like git's discovery; ``None`` if not in a repo."""
    device = os.stat(start).st_dev
    current = start
    while True:
        dotgit = os.path.join(current, ".git")
        try:
            st = os.stat(dotgit)
        except (FileNotFoundError, NotADirectoryError):
            st = None
        if st is not None:
            if stat.S_ISDIR(st.st_mode):
                if _is_git_directory(dotgit):
                    if not (_owned_by_us(current) and _owned_by_us(dotgit)):
                        raise _UnsureError("not owned by us: git's safe.directory rules decide")
                    return _Repo(current, dotgit, _common_dir(dotgit))
                # git moves on past a .git dir that is not a repository; so do we.
            elif stat.S_ISREG(st.st_mode):
                gitdir = _read_gitfile(dotgit)
                if not all(_owned_by_us(p) for p in (dotgit, current, gitdir)):
                    raise _UnsureError("not owned by us: git's safe.directory rules decide")
                return _Repo(current, gitdir, _common_dir(gitdir))
            else:
                raise _UnsureError(".git is neither a file nor a dir")
        # A bare repository, or a cwd inside a git dir: --show-toplevel has rules of its own there.
        if _lstat(os.path.join(current, "HEAD")) is not None and _is_git_directory(current):
            raise _UnsureError("the cwd is inside a git dir or a bare repository")
        parent = os.path.dirname(current)
        if parent == current:
            return None
        if os.stat(parent).st_dev != device:
            if env.get("GIT_DISCOVERY_ACROSS_FILESYSTEM"):
                raise _UnsureError("GIT_DISCOVERY_ACROSS_FILESYSTEM is set")
            return None  # git stops at a filesystem boundary too
        current = parent


def _parse_bool(value: str) -> bool:
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise _UnsureError("a config boolean git would have to interpret")


def _read_config(commondir: str) -> _Config:
    """The few repository settings that change what ``rev-parse`` prints; the rest is ignored.

    A deliberately small reader: a line it cannot split plainly into ``key = value`` inside a
    section that matters (quotes, continuations, includes) makes it give up.
    """
    raw = _read_capped(os.path.join(commondir, "config"), MAX_GIT_CONFIG_BYTES)
    if raw is None:
        return _Config(_HEX_LENGTH["sha1"], None)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _UnsureError("config is not UTF-8") from None
    section = ""
    version = 0
    object_format = "sha1"
    worktree: str | None = None
    for raw_line in text.splitlines():
        line = raw_line.strip()
        if not line or line[0] in "#;":
            continue
        if line.endswith("\\"):
            raise _UnsureError("config has a continued line")
        if line.startswith("["):
            header, sep, rest = line[1:].partition("]")
            rest = rest.strip()
            if not sep or (rest and rest[0] not in "#;"):
                raise _UnsureError("config has a section header git would have to interpret")
            section = header.strip().lower()
            if section.startswith("include"):
                raise _UnsureError("config includes other files")
            continue
        if section not in ("core", "extensions"):
            continue
        key, has_value, value = line.partition("=")
        key = key.strip().lower()
        if section == "core" and key not in ("bare", "worktree", "repositoryformatversion"):
            continue
        value = value.strip() if has_value else ""
        if '"' in value or "#" in value or ";" in value:
            raise _UnsureError(f"a value of {section}.{key} git would have to interpret")
        if section == "core":
            if key == "bare" and _parse_bool(value):
                raise _UnsureError("core.bare is set")
            if key == "worktree":
                worktree = value
            elif key == "repositoryformatversion":
                if value not in ("0", "1"):
                    raise _UnsureError("repository format version git would have to interpret")
                version = int(value)
        elif key == "objectformat":
            object_format = value.lower()
            if object_format not in _HEX_LENGTH:
                raise _UnsureError("unknown object format")
        elif key == "worktreeconfig":
            if _parse_bool(value):
                raise _UnsureError("per-worktree config is enabled")
        elif key == "refstorage":
            if value.lower() != "files":
                raise _UnsureError("refs are not stored as files (reftable?)")
        elif key not in _HARMLESS_EXTENSIONS:
            raise _UnsureError(f"repository extension {key!r}")
    if object_format != "sha1" and version < 1:
        raise _UnsureError("an object format extension in a version 0 repository")
    return _Config(_HEX_LENGTH[object_format], worktree)


# -- refs ------------------------------------------------------------------------------------------


def _check_ref_name(name: bytes) -> None:
    """git's ``check_refname_format``, enough to keep a name inside the refs dir and well formed."""
    if (
        _BAD_REF_CHARS.search(name)
        or b".." in name
        or b"@{" in name
        or name.endswith((b"/", b".", b".lock"))
        or b"//" in name
        or any(part.startswith(b".") or part.endswith(b".lock") for part in name.split(b"/"))
    ):
        raise _UnsureError("a ref name git would refuse")


def _object_id(raw: bytes, hex_length: int) -> str:
    """The object id a HEAD or loose ref holds (``<hex>`` then end or whitespace)."""
    oid = raw[:hex_length]
    rest = raw[hex_length:]
    if re.fullmatch(rb"[0-9a-f]+", oid) is None or len(oid) != hex_length:
        raise _UnsureError("not a lowercase object id of the repository's length")
    if rest and not rest[:1].isspace():
        raise _UnsureError("junk after an object id")
    return oid.decode("ascii")


def _loose_ref(commondir: str, name: bytes, hex_length: int) -> str | None:
    path = os.path.join(commondir, os.fsdecode(name))
    st = _lstat(path)
    if st is None or stat.S_ISDIR(st.st_mode):
        return None
    if not stat.S_ISREG(st.st_mode):
        raise _UnsureError("a ref that is not a regular file (a symlink?)")
    raw = _read_capped(path, MAX_GIT_SMALL_FILE_BYTES)
    if raw is None:
        return None
    if raw.startswith(b"ref:"):
        raise _UnsureError("a symbolic ref chain")
    return _object_id(raw, hex_length)


def _packed_refs(commondir: str, names: Iterable[bytes], hex_length: int) -> dict[bytes, str]:
    """Object ids of ``names`` found in ``packed-refs`` (each line: ``<hex> SP <name> LF``)."""
    raw = _read_capped(os.path.join(commondir, "packed-refs"), MAX_GIT_PACKED_REFS_BYTES)
    found: dict[bytes, str] = {}
    if raw is None:
        return found
    if not raw.endswith(b"\n"):
        raw += b"\n"
    for name in names:
        # A plain substring search beats splitting millions of lines; the match is then checked
        # to be a whole ``<hex> <name>`` line.
        needle = b" " + name + b"\n"
        start = raw.find(needle)
        while start >= 0:
            line_start = start - hex_length
            if line_start >= 0 and (line_start == 0 or raw[line_start - 1 : line_start] == b"\n"):
                found[name] = _object_id(raw[line_start:start] + b" ", hex_length)
                break
            start = raw.find(needle, start + 1)
    return found


def _shadowing_refs(short: bytes) -> tuple[bytes, ...]:
    """The other refs git's ``--abbrev-ref`` tries for ``short`` (``ref_rev_parse_rules``).

    If any of them exists, git prints a longer, unambiguous name (``heads/<short>``).
    """
    return (
        short,
        b"refs/" + short,
        b"refs/tags/" + short,
        b"refs/remotes/" + short,
        b"refs/remotes/" + short + b"/HEAD",
    )


def _branch_and_head(repo: _Repo, config: _Config) -> tuple[str | None, str] | None:
    head_path = os.path.join(repo.gitdir, "HEAD")
    raw = _read_capped(head_path, MAX_GIT_SMALL_FILE_BYTES)
    if raw is None:
        raise _UnsureError("HEAD vanished")
    if not raw.startswith(b"ref:"):
        return None, _object_id(raw, config.hex_length)
    target = raw[4:].strip()
    if not target.startswith(_HEADS) or len(target) == len(_HEADS):
        raise _UnsureError("HEAD points outside refs/heads")
    _check_ref_name(target)
    short = target[len(_HEADS) :]
    # Anything at all under a shadowing name (even a dir, or a file git would find broken) sends
    # the case to git: being unsure costs one process, being wrong shows a wrong branch.
    shadows = _shadowing_refs(short)
    for place in {repo.gitdir, repo.commondir}:
        for shadow in shadows:
            if _lstat(os.path.join(place, os.fsdecode(shadow))) is not None:
                raise _UnsureError("the short branch name may be ambiguous")
    head = _loose_ref(repo.commondir, target, config.hex_length)
    # Root-level names (the first shadow) are never packed.
    packed = _packed_refs(repo.commondir, (target, *shadows[1:]), config.hex_length)
    if any(name != target for name in packed):
        raise _UnsureError("the short branch name may be ambiguous")
    if head is None:
        head = packed.get(target)
    if head is None:
        return None  # unborn branch: git cannot resolve HEAD and fails
    return short.decode("utf-8", "replace"), head


def _read(cwd: str, env: Mapping[str, str], cache: dict[str, GitInfo | None]) -> GitInfo | None:
    if not os.path.isabs(cwd):
        return None
    start = os.path.realpath(cwd)
    if not _is_dir(start):
        return None
    repo = _discover(start, env)
    if repo is None:
        return None
    key = f"{repo.worktree}\0{repo.gitdir}"
    if key in cache:
        return cache[key]
    config = _read_config(repo.commondir)
    if config.worktree is not None:
        configured = os.path.realpath(os.path.join(repo.gitdir, config.worktree))
        if configured != repo.worktree:
            raise _UnsureError("core.worktree moves the top level")
    resolved = _branch_and_head(repo, config)
    info = None
    if resolved is not None:
        branch, head = resolved
        info = GitInfo(worktree=_as_text(repo.worktree), branch=branch, head=head)
    cache[key] = info
    return info


def _settle(
    cwd: str, env: Mapping[str, str], cache: dict[str, GitInfo | None]
) -> GitInfo | NeedsGit | None:
    for name in _DISCOVERY_ENV:
        if env.get(name):
            return NeedsGit(f"{name} is set")
    try:
        return _read(cwd, env, cache)
    except _UnsureError as exc:
        return NeedsGit(str(exc))
    except (ValueError, UnicodeError):
        return None  # an embedded NUL or an unencodable path: git could not be given it either
    except OSError as exc:
        return NeedsGit(f"{exc.strerror or exc.__class__.__name__} while reading git files")


def read_git_files(cwd: str, *, env: Mapping[str, str] | None = None) -> GitInfo | NeedsGit | None:
    """What ``git rev-parse --show-toplevel HEAD --abbrev-ref HEAD`` would say about ``cwd``.

    Reads git's files only; blocking (run it in a worker thread) and bounded in what it reads.
    Returns :class:`~pi_cross_session._internal.protocol.registration.GitInfo`, ``None`` where git
    would fail (not a repository, missing cwd, unborn branch) or :class:`NeedsGit` when only git
    itself can tell. ``env`` (default: this process's) is consulted for the discovery variables
    only. Never raises.
    """
    return _settle(cwd, os.environ if env is None else env, {})


def _read_batch(cwds: list[str], budget_s: float) -> dict[str, GitInfo | NeedsGit | None]:
    deadline = time.monotonic() + budget_s
    # Peers often share a repository (several sessions, several subdirs): read it once.
    cache: dict[str, GitInfo | None] = {}
    results: dict[str, GitInfo | NeedsGit | None] = {}
    for cwd in cwds:
        if time.monotonic() >= deadline:
            break  # the rest stays unresolved: None
        results[cwd] = _settle(cwd, os.environ, cache)
    return results


# -- the git command -------------------------------------------------------------------------------


def _git_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in _REPOSITORY_ENV}
    # Never wait for a credential prompt, never take the index lock on the peer's repository.
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["GIT_OPTIONAL_LOCKS"] = "0"
    return env


async def _receive_capped(stream: ByteReceiveStream, cap: int) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        try:
            chunk = await stream.receive()
        except anyio.EndOfStream:
            return b"".join(chunks)
        size += len(chunk)
        if size > cap:
            return None
        chunks.append(chunk)


async def git_rev_parse(
    cwd: str,
    *,
    timeout_s: float = GIT_TIMEOUT_S,
    output_cap_bytes: int = GIT_OUTPUT_CAP_BYTES,
    git: str = "git",
) -> GitInfo | None:
    """Run the reference's command for ``cwd``: ``None`` on any failure, timeout or overflow.

    ``git -C <cwd> rev-parse --show-toplevel HEAD --abbrev-ref HEAD``, stdout capped at
    ``output_cap_bytes`` and the whole run at ``timeout_s``; the process is killed if it overruns
    either. Never blocks the event loop and never raises for git's sake.
    """
    if not os.path.isabs(cwd):
        return None
    argv = [git, "-C", cwd, "rev-parse", "--show-toplevel", "HEAD", "--abbrev-ref", "HEAD"]
    with anyio.move_on_after(timeout_s):
        try:
            process = await anyio.open_process(
                argv, stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_git_env()
            )
        except (OSError, ValueError):
            return None  # no git on PATH, or a cwd the OS cannot take
        try:
            if process.stdout is None:
                return None
            output = await _receive_capped(process.stdout, output_cap_bytes)
            if output is None:
                return None
            if await process.wait() != 0:
                return None
            return parse_git_output(output.decode("utf-8", "replace"))
        finally:
            if process.returncode is None:
                process.kill()
            # Reap it even when we are being cancelled; a killed git exits at once.
            with anyio.move_on_after(1.0, shield=True):
                await process.aclose()
    return None


# -- the batch -----------------------------------------------------------------------------------


async def resolve_git_info(
    cwds: Iterable[str],
    *,
    timeout_s: float = GIT_TIMEOUT_S,
    output_cap_bytes: int = GIT_OUTPUT_CAP_BYTES,
    max_subprocesses: int = MAX_GIT_SUBPROCESSES,
    git: str = "git",
) -> dict[str, GitInfo | None]:
    """Git metadata for every distinct cwd, all of it within ``timeout_s``.

    The fast reader runs over every cwd in one worker thread; cwds it leaves to git are run through
    :func:`git_rev_parse`, at most ``max_subprocesses`` at a time, in the time that is left. A cwd
    not settled in time maps to ``None``. The returned dict has an entry for every distinct cwd.
    """
    unique = list(dict.fromkeys(cwds))
    results: dict[str, GitInfo | None] = dict.fromkeys(unique)
    if not unique:
        return results
    started = anyio.current_time()
    fast: dict[str, GitInfo | NeedsGit | None] = {}
    # The reader checks the clock between cwds; abandoning the thread is the last resort for a
    # file system that hangs inside one system call (a dead network mount): the listing goes on
    # and the thread ends whenever the kernel lets it.
    with anyio.move_on_after(timeout_s + _THREAD_GRACE_S):
        fast = await anyio.to_thread.run_sync(
            partial(_read_batch, unique, timeout_s), abandon_on_cancel=True
        )
    slow: list[str] = []
    for cwd, outcome in fast.items():
        if isinstance(outcome, NeedsGit):
            # The cwd is a peer's string: escaped, so it cannot forge a log line.
            logger.debug(
                "git metadata of %s needs git: %s",
                sanitize.line(cwd),
                sanitize.line(str(outcome.reason)),
            )
            slow.append(cwd)
        else:
            results[cwd] = outcome
    remaining = timeout_s - (anyio.current_time() - started)
    if not slow or remaining <= 0:
        return results
    limiter = anyio.CapacityLimiter(max_subprocesses)

    async def run_one(cwd: str) -> None:
        async with limiter:
            results[cwd] = await git_rev_parse(
                cwd, timeout_s=remaining, output_cap_bytes=output_cap_bytes, git=git
            )

    with anyio.move_on_after(remaining):
        async with anyio.create_task_group() as group:
            for cwd in slow:
                group.start_soon(run_one, cwd)
    return results
