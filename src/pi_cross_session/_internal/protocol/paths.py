"""Where a session publishes itself and listens: agent dir, namespace, runtime dir, endpoint names.

Every string here must equal, byte for byte, what the reference peer computes (spec §1.1, spec §1.2,
spec §2): readers recompute a peer's socket path from their own agent dir and compare it with the
registered one, and the namespace is a hash of the agent-dir string itself. A single differing
character (a trailing slash, a doubled slash, a symlinked alias) makes the two sides invisible to
each other.

The module is sans-IO in the sense that matters for tests: the process environment, the home
directory and the uid are read only by :func:`resolve_agent_dir`, :func:`resolve_home` and
:func:`resolve_uid`, and only when the caller passes no override. Nothing here touches the file
system.

Decisions the contract leaves open, and what we chose:

* ``PI_CODING_AGENT_DIR=""`` counts as unset (the reference tests the variable for truthiness).
* ``~/rest`` becomes ``home + "/rest"``: plain concatenation, "home plus the rest", with no
  normalisation. So ``~/`` alone gives the home dir *with* a trailing slash, a different string (and
  namespace) from ``~``. ``os.path.join`` would be wrong here: it drops the home dir when the rest
  starts with another slash (``~//x``).
* Any other value is used verbatim: no ``realpath``, no normalisation, a trailing slash is kept.
* The default ``<home>/.pi/agent`` and the peers dir ``<agentDir>/peers`` are joined the way Node's
  ``path.join`` does it (:func:`node_join`), which *does* normalise (``/home//alice/`` gives
  ``/home/alice/.pi/agent``).
* An environment value that is not valid UTF-8 is decoded with replacement characters, as Node
  decodes its environment, so both sides hash the same text.
* Paths are POSIX paths. Only the Windows pipe *name* is computed (:meth:`Locations.pipe_name`);
  the reference's win32 path joining is not reproduced because this package does not run there.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from pi_cross_session._internal.protocol.text import is_well_formed

#: The environment variable that overrides the agent dir (``<APP_NAME upper>_CODING_AGENT_DIR``).
AGENT_DIR_ENV: Final = "PI_CODING_AGENT_DIR"
#: Hard-coded by the reference: ``TMPDIR`` and ``XDG_RUNTIME_DIR`` are deliberately not consulted.
RUNTIME_PARENT: Final = "/tmp"
#: Hex characters of the agent-dir digest that name the namespace.
NAMESPACE_CHARS: Final = 12

#: A runtime (instance) id: 32 lowercase hex characters.
INSTANCE_ID_RE: Final = re.compile(r"[0-9a-f]{32}")
_REGISTRATION_FILE: Final = re.compile(rf"({INSTANCE_ID_RE.pattern})\.json")


def is_instance_id(value: str) -> bool:
    """True for a well-formed runtime id: exactly 32 lowercase hex characters."""
    # fullmatch, not ``$``: Python's ``$`` also matches before a trailing newline.
    return INSTANCE_ID_RE.fullmatch(value) is not None


def instance_id_from_filename(filename: str) -> str | None:
    """The instance id a registration file name stands for, or ``None`` if a listing skips it.

    Only ``<32 lowercase hex>.json`` counts; temp files (leading dot) and anything else do not.
    """
    match = _REGISTRATION_FILE.fullmatch(filename)
    return match.group(1) if match else None


def _require_instance_id(instance_id: str) -> None:
    # An id that is not 32 hex could carry "/" or ".." into a path; callers validate first.
    if not is_instance_id(instance_id):
        raise ValueError("an instance id is 32 lowercase hex characters")


def node_normalize(path: str) -> str:
    """Node's ``path.posix.normalize``: resolve ``.``/``..`` and slash runs lexically.

    Unlike :func:`posixpath.normpath` it folds a leading ``//`` to ``/`` and keeps a trailing slash.
    """
    if not path:
        return "."
    absolute = path.startswith("/")
    trailing = path.endswith("/")
    segments: list[str] = []
    for segment in path.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if segments and segments[-1] != "..":
                segments.pop()
            elif not absolute:
                segments.append("..")
            continue
        segments.append(segment)
    body = "/".join(segments)
    if not body:
        if absolute:
            return "/"
        return "./" if trailing else "."
    if trailing:
        body += "/"
    return "/" + body if absolute else body


def node_join(*parts: str) -> str:
    """Node's ``path.posix.join``: drop empty parts, join with ``/``, then normalise."""
    joined = "/".join(part for part in parts if part)
    return node_normalize(joined) if joined else "."


def _as_node_reads(value: str) -> str:
    """The text Node would see for an environment value Python decoded with ``surrogateescape``."""
    if is_well_formed(value):
        return value
    try:
        raw = value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        # Not from the OS (surrogates outside the escape range): read them as JS would.
        return js_to_well_formed(value)
    return raw.decode("utf-8", "replace")


def js_to_well_formed(value: str) -> str:
    """``String.prototype.toWellFormed``: each lone surrogate becomes U+FFFD.

    This is also what Node does when it encodes a string as UTF-8 (for a hash or a file name).
    """
    if is_well_formed(value):
        return value
    # A UTF-16 round trip joins surrogates that form a pair and replaces the lone ones.
    units = value.encode("utf-16-le", "surrogatepass")
    return units.decode("utf-16-le", "replace")


def namespace_for(agent_dir: str) -> str:
    """First 12 hex characters of the SHA-256 of the agent dir's UTF-8 (spec §2)."""
    return hashlib.sha256(js_to_well_formed(agent_dir).encode("utf-8")).hexdigest()[
        :NAMESPACE_CHARS
    ]


@dataclass(frozen=True, slots=True)
class Locations:
    """Every discovery and endpoint location of one agent dir, for one uid.

    Build it with :func:`~pi_cross_session._internal.protocol.io.environment.resolve` (from this
    process's environment) or :func:`locations_for`. The runtime dir and peers dir are shared by
    every session of the agent dir; :meth:`socket_path`, :meth:`registration_path` and
    :meth:`pipe_name` name the things that belong to one incarnation.
    """

    agent_dir: str
    namespace: str
    uid: int
    runtime_dir: str
    peers_dir: str

    def socket_path(self, instance_id: str) -> str:
        """POSIX socket of an incarnation: ``<runtime dir>/<instanceId>.sock``."""
        _require_instance_id(instance_id)
        return f"{self.runtime_dir}/{instance_id}.sock"

    def registration_path(self, instance_id: str) -> str:
        """Registration file of an incarnation: ``<agentDir>/peers/<instanceId>.json``."""
        _require_instance_id(instance_id)
        return node_join(self.peers_dir, f"{instance_id}.json")

    def pipe_name(self, instance_id: str) -> str:
        r"""Windows named pipe of an incarnation: ``\\.\pipe\pi-peer-<namespace>-<instanceId>``.

        It does not depend on the user name, matching the reference's 2.2.0 format.
        """
        _require_instance_id(instance_id)
        return rf"\\.\pipe\pi-peer-{self.namespace}-{instance_id}"


def runtime_dir_for(namespace: str, uid: int) -> str:
    """``/tmp/pi-peers-<uid>-<namespace>``: the private dir holding every socket of a namespace."""
    return f"{RUNTIME_PARENT}/pi-peers-{uid}-{namespace}"


def agent_dir_from(environ: Mapping[str, str], home: Callable[[], str]) -> str:
    """The agent dir of spec §1.1 for an environment: the exact string the namespace is computed
    from. ``home`` is asked only when the environment does not name the dir outright."""
    configured = _as_node_reads(environ.get(AGENT_DIR_ENV, ""))
    if configured and configured != "~" and not configured.startswith("~/"):
        return configured
    home_dir = home()
    if configured == "~":
        return home_dir
    if configured:
        return home_dir + configured[1:]
    return node_join(home_dir, ".pi", "agent")


def home_from(environ: Mapping[str, str]) -> str | None:
    """The home dir as Node's ``os.homedir()`` reads it from the environment: ``$HOME`` as is
    (even empty), or ``None`` when unset (then the account database decides)."""
    home = environ.get("HOME")
    return None if home is None else _as_node_reads(home)


def locations_for(agent_dir: str, uid: int) -> Locations:
    """Every location of an agent dir for a uid."""
    namespace = namespace_for(agent_dir)
    return Locations(
        agent_dir=agent_dir,
        namespace=namespace,
        uid=uid,
        runtime_dir=runtime_dir_for(namespace, uid),
        peers_dir=node_join(agent_dir, "peers"),
    )
