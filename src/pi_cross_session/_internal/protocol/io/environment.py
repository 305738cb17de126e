"""This process's view of where sessions meet: the agent dir its environment names, its home dir
and its uid (spec §1.1, spec §2). The rules are :mod:`pi_cross_session._internal.protocol.paths`'s,
pure; this module only reads the environment, the account database and the process's uid to feed
them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pi_cross_session._internal.protocol.paths import (
    Locations,
    agent_dir_from,
    home_from,
    locations_for,
)

try:
    import pwd
except ImportError:  # pragma: no cover - not a POSIX system
    pwd = None  # type: ignore[assignment]


def resolve_uid(uid: int | None = None) -> int:
    """The uid in the runtime dir name: the override, else ``os.getuid()``, else 0 (no getuid)."""
    if uid is not None:
        return uid
    getuid = getattr(os, "getuid", None)
    return getuid() if getuid is not None else 0


def resolve_home(env: Mapping[str, str] | None = None) -> str:
    """The home dir as Node's ``os.homedir()`` finds it: ``$HOME`` as is, else the account's."""
    home = home_from(os.environ if env is None else env)
    if home is not None:
        # Node takes HOME verbatim, even when empty; Python's expanduser would turn "" into "/".
        return home
    if pwd is None:  # pragma: no cover - not a POSIX system
        return os.path.expanduser("~")
    try:
        return pwd.getpwuid(resolve_uid()).pw_dir
    except KeyError as exc:
        # Node throws here too; a relative "~/.pi/agent" would be a silent, wrong namespace.
        raise RuntimeError(
            "no home dir: HOME is unset and the account has no passwd entry"
        ) from exc


def resolve_agent_dir(env: Mapping[str, str] | None = None, home: str | None = None) -> str:
    """The agent dir of spec §1.1, as the exact string the namespace is computed from.

    ``env`` defaults to the process environment; ``home`` defaults to :func:`resolve_home` of that
    environment and is only looked up when it is needed.
    """
    environ = os.environ if env is None else env
    return agent_dir_from(environ, lambda: resolve_home(environ) if home is None else home)


def resolve(
    env: Mapping[str, str] | None = None, home: str | None = None, uid: int | None = None
) -> Locations:
    """All locations for an environment, home dir and uid (each defaults to this process's)."""
    return locations_for(resolve_agent_dir(env, home), resolve_uid(uid))
