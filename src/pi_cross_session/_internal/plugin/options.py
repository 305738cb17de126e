"""The extension's options: where they come from, which one wins, and what a bad one means.

pi-python has no flags for extensions (host gap 7), so the reference's ``--cross-session-inbound``
becomes, from the narrowest scope to the widest (the first one set wins):

1. **this session's choice**, made with ``/cross-session-inbound accept|refuse`` and saved in the
   session itself (a custom entry, see :data:`INBOUND_ENTRY_TYPE`), so it holds when the session is
   resumed and nowhere else;
2. the environment variable :data:`INBOUND_ENV` (one launch of the agent);
3. ``inbound = "accept" | "refuse"`` in the ``[cross_session]`` table of ``<pi home>/agent.toml``
   (every session of this user; pi-python's own config loader ignores tables it does not know);
4. the contract's default, ``accept``.

The narrowest scope wins because it is the most deliberate: a choice typed into this very session
beats a default meant for all of them. ``/cross-session-status`` shows which source decided.

**Why the session choice is saved in the session, not in a file under the pi home.** A file would
make one session's ``refuse`` silently apply to every later session of the user, which is a
surprise nobody asked for; the session's own record is scoped exactly to the session it was typed
in, needs no file of ours (so nothing to create with the right mode, lock or clean up), and goes
away with the session. Global defaults belong in ``agent.toml``, which the user edits on purpose.

**Fail closed.** A value other than exactly ``accept`` or ``refuse`` at any level — or an
``agent.toml`` that cannot be read or parsed — means ``refuse``, and :attr:`PluginOptions.warnings`
holds a sentence telling the user why. The invalid level is not skipped in favour of a wider one:
the user meant *something* there, and we cannot know it was ``accept``.

**The session's name** follows the same order, narrowest first: ``/cross-session-name NEW`` in
this session (saved in the session, :data:`NAME_ENTRY_TYPE`, until changed again), then
:data:`NAME_ENV`, then ``name = "..."`` in the ``[cross_session]`` table, then the host's own
session name, then the contract's default (``pi-`` and the session id's start). A name is cleaned
as the wire cleans names (spec §1.6); one that is blank once cleaned, or not a string, is ignored
with a warning (a name is not a security setting, so there is nothing to fail closed about).

The same table may also adjust the tool-call gate (:mod:`pi_cross_session._internal.security.gate`):
``gated_tools_add = ["name", ...]`` gates more tools in peer-started turns, and
``gated_tools_remove = [...]`` stops gating some. Only the local user's own file can do this.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Final, Literal

from pi_cross_session._internal.plugin.render import host_commands
from pi_cross_session._internal.protocol.text import clean_line, clean_name, is_blank

#: Environment variable naming the inbound policy for one launch.
INBOUND_ENV: Final = "PI_CROSS_SESSION_INBOUND"
#: pi-python's settings file under its home, and our table in it.
CONFIG_FILE_NAME: Final = "agent.toml"
CONFIG_TABLE: Final = "cross_session"
#: Custom entry type under which ``/cross-session-inbound`` saves its choice in the session.
INBOUND_ENTRY_TYPE: Final = "cross-session-inbound"
#: Environment variable naming the session for one launch.
NAME_ENV: Final = "PI_CROSS_SESSION_NAME"
#: Custom entry type under which ``/cross-session-name`` saves its choice in the session.
NAME_ENTRY_TYPE: Final = "cross-session-name"
#: A settings file larger than this is not read (a real one is a few KiB).
MAX_CONFIG_BYTES: Final = 1_048_576
#: Gate adjustments kept from the config, at most (a list of tool names, not a data store).
MAX_GATE_NAMES: Final = 256

Inbound = Literal["accept", "refuse"]


class InboundSource(StrEnum):
    """Which level decided the inbound policy."""

    DEFAULT = "default"
    ENV = "env"
    CONFIG = "config"
    SESSION = "session"


class NameSource(StrEnum):
    """Which level named the session."""

    HOST = "host"
    ENV = "env"
    CONFIG = "config"
    SESSION = "session"


@dataclass(frozen=True, slots=True)
class PluginOptions:
    """The extension's effective options and what the user should be told about them."""

    inbound: Inbound = "accept"
    inbound_source: InboundSource = InboundSource.DEFAULT
    gated_tools_add: tuple[str, ...] = ()
    gated_tools_remove: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    #: The session's name from our options (cleaned), or ``None`` to use the host's.
    name: str | None = None
    name_source: NameSource = NameSource.HOST

    def with_session_name(self, name: str | None) -> PluginOptions:
        """Apply a name chosen in the session (the narrowest scope wins)."""
        if name is None:
            return self
        return replace(self, name=name, name_source=NameSource.SESSION)

    def with_session_choice(self, choice: Inbound | None) -> PluginOptions:
        """Apply a choice saved in the session (the narrowest scope wins)."""
        if choice is None:
            return self
        return replace(self, inbound=choice, inbound_source=InboundSource.SESSION)


def parse_name(value: object) -> str | None:
    """A session name as it will be published (cleaned as the wire cleans names), or ``None``
    when ``value`` is not a string or is blank."""
    # Cleaned first: a name of only control or format characters is as blank as spaces.
    if not isinstance(value, str) or is_blank(clean_line(value)):
        return None
    return clean_name(value)


def parse_inbound(value: object) -> Inbound | None:
    """``accept`` or ``refuse`` exactly; anything else is ``None`` (invalid)."""
    if value == "accept":
        return "accept"
    if value == "refuse":
        return "refuse"
    return None


@dataclass(frozen=True, slots=True)
class _Table:
    inbound: object = None
    has_inbound: bool = False
    name: object = None
    has_name: bool = False
    unreadable: str | None = None
    add: tuple[str, ...] = ()
    remove: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


def _names(table: Mapping[str, object], key: str) -> tuple[tuple[str, ...], str | None]:
    value = table.get(key)
    if value is None:
        return (), None
    if (
        isinstance(value, list)
        and len(value) <= MAX_GATE_NAMES
        and all(isinstance(item, str) and item for item in value)
    ):
        return tuple(str(item) for item in value), None
    return (), host_commands.invalid_config_entry(
        key, f"a list of at most {MAX_GATE_NAMES} tool names"
    )


def _read_table(path: Path) -> _Table:
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        return _Table()
    except OSError as exc:
        return _Table(unreadable=exc.strerror or type(exc).__name__)
    if len(raw) > MAX_CONFIG_BYTES:
        return _Table(unreadable=f"larger than {MAX_CONFIG_BYTES} bytes")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        return _Table(unreadable=str(exc))
    table = data.get(CONFIG_TABLE)
    if table is None:
        return _Table()
    if not isinstance(table, dict):
        return _Table(unreadable=f"[{CONFIG_TABLE}] is not a table")
    add, add_problem = _names(table, "gated_tools_add")
    remove, remove_problem = _names(table, "gated_tools_remove")
    return _Table(
        inbound=table.get("inbound"),
        has_inbound="inbound" in table,
        name=table.get("name"),
        has_name="name" in table,
        add=add,
        remove=remove,
        warnings=tuple(w for w in (add_problem, remove_problem) if w is not None),
    )


def load_options(home: Path | str, *, env: Mapping[str, str] | None = None) -> PluginOptions:
    """Read the environment and ``<home>/agent.toml``; never raises for a bad setting."""
    environ = os.environ if env is None else env
    path = Path(home) / CONFIG_FILE_NAME
    table = _read_table(path)
    warnings = list(table.warnings)
    if table.unreadable is not None:
        warnings.append(host_commands.unreadable_config(str(path), table.unreadable))

    inbound: Inbound
    raw_env = environ.get(INBOUND_ENV)
    if raw_env is not None:
        source = InboundSource.ENV
        parsed = parse_inbound(raw_env)
        if parsed is None:
            warnings.append(host_commands.invalid_inbound_option(INBOUND_ENV, raw_env))
        inbound = parsed or "refuse"
    elif table.unreadable is not None:
        source, inbound = InboundSource.CONFIG, "refuse"
    elif table.has_inbound:
        source = InboundSource.CONFIG
        parsed = parse_inbound(table.inbound)
        if parsed is None:
            warnings.append(
                host_commands.invalid_inbound_option(f"{path} [{CONFIG_TABLE}]", table.inbound)
            )
        inbound = parsed or "refuse"
    else:
        source, inbound = InboundSource.DEFAULT, "accept"
    name, name_source = _name(environ, table, warnings)
    return PluginOptions(
        inbound=inbound,
        inbound_source=source,
        gated_tools_add=table.add,
        gated_tools_remove=table.remove,
        warnings=tuple(warnings),
        name=name,
        name_source=name_source,
    )


def _name(
    environ: Mapping[str, str], table: _Table, warnings: list[str]
) -> tuple[str | None, NameSource]:
    """The session name from the environment, else the config; a bad one is ignored, and said."""
    raw_env = environ.get(NAME_ENV)
    if raw_env:  # an empty variable counts as unset
        parsed = parse_name(raw_env)
        if parsed is not None:
            return parsed, NameSource.ENV
        warnings.append(host_commands.invalid_name_option(NAME_ENV))
    if table.has_name:
        parsed = parse_name(table.name)
        if parsed is not None:
            return parsed, NameSource.CONFIG
        warnings.append(host_commands.invalid_config_entry("name", "a non-blank string"))
    return None, NameSource.HOST


def session_choice(entries: Iterable[object]) -> Inbound | None:
    """The last valid inbound choice saved in a session's custom entries, if any.

    Entries come from the host as objects or dicts with ``customType`` and ``data``; a malformed
    one is skipped (it cannot have been written by us, and a guess would be worse than none).
    """
    choice: Inbound | None = None
    for data in entry_data(entries, INBOUND_ENTRY_TYPE):
        parsed = parse_inbound(data.get("inbound"))
        if parsed is not None:
            choice = parsed
    return choice


def entry_data(entries: Iterable[object], custom_type: str) -> list[Mapping[str, object]]:
    """The ``data`` of each of a session's custom entries of ``custom_type``, in order.

    Entries come from the host as objects or dicts with ``customType`` and ``data``; one whose
    data is not an object is skipped.
    """
    found: list[Mapping[str, object]] = []
    for entry in entries:
        if _get(entry, "customType") != custom_type:
            continue
        data = _get(entry, "data")
        if isinstance(data, Mapping):
            found.append(data)
    return found


def session_name_choice(entries: Iterable[object]) -> str | None:
    """The last valid name saved with ``/cross-session-name`` in a session, if any."""
    choice: str | None = None
    for data in entry_data(entries, NAME_ENTRY_TYPE):
        parsed = parse_name(data.get("name"))
        if parsed is not None:
            choice = parsed
    return choice


def name_entry(name: str, *, changed_at_ms: int) -> dict[str, object]:
    """The data saved for a ``/cross-session-name`` choice."""
    return {"name": name, "changedAt": changed_at_ms}


def session_entry(value: Inbound, *, changed_at_ms: int) -> dict[str, object]:
    """The data saved for a ``/cross-session-inbound`` choice."""
    return {"inbound": value, "changedAt": changed_at_ms}


def _get(entry: object, name: str) -> object:
    if isinstance(entry, Mapping):
        return entry.get(name)
    return getattr(entry, name, None)


__all__ = [
    "CONFIG_FILE_NAME",
    "CONFIG_TABLE",
    "INBOUND_ENTRY_TYPE",
    "INBOUND_ENV",
    "MAX_CONFIG_BYTES",
    "MAX_GATE_NAMES",
    "NAME_ENTRY_TYPE",
    "NAME_ENV",
    "Inbound",
    "InboundSource",
    "NameSource",
    "PluginOptions",
    "load_options",
    "name_entry",
    "parse_inbound",
    "parse_name",
    "session_choice",
    "session_entry",
    "session_name_choice",
]
