"""``pi-cross-session watch``: the live sessions of this agent dir and the messages between them.

Three ways to show the same things (the state is :class:`~.watch_model.WatchModel`'s):

* **Full screen** when stdout is a terminal and rich (the ``watch`` extra) is installed: the
  sessions and the feed, redrawn in the alternate screen only when something changed
  (:mod:`.watch_view`). Keys are read from stdin in cbreak mode, without blocking: ``f`` cycles
  the session filter, ``p`` pauses the feed, ``q`` quits. The terminal is always restored.
* **Lines** when stdout is not a terminal, or rich is missing: one line per event
  (:func:`~.journal_words.event_line`) and one per session change, flushed as they happen.
* **JSON Lines** with ``--json``: ``{"type": "event", …}`` and ``{"type": "session", …}``.

Where it reads (all of it read-only; it creates nothing, not even the agent dir):

* each session's journal through a :class:`~pi_cross_session._internal.security.io.
  journal_network.JournalFollower`, polled every :data:`POLL_S`; the journal dirs are listed again
  when their root changes (and every :data:`DIRS_S`), so a new session's journal is followed from
  the next poll;
* the live sessions through the same listing ``peers`` makes (it probes liveness; no git lookup),
  with each session's ``live.json``, every :data:`LISTING_S`, on a thread of its own so that a slow
  probe never holds up the feed or the keys.

The full view starts with the history the journals hold (the newest messages fill the feed); the
line and JSON modes print what happens from the moment watch started. Ctrl-C, SIGTERM and SIGHUP
end it cleanly (exit 0).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import logging
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from types import FrameType
from typing import TYPE_CHECKING, Any, Final

from pi_cross_session._internal.cli import exits, journal_words
from pi_cross_session._internal.cli.console import PREFIX, Console
from pi_cross_session._internal.cli.peers_cmd import anything_to_list
from pi_cross_session._internal.cli.watch_model import (
    Registered,
    SessionChange,
    Skipped,
    WatchModel,
)
from pi_cross_session._internal.protocol import paths
from pi_cross_session._internal.protocol.io import environment
from pi_cross_session._internal.protocol.sanitize import line
from pi_cross_session._internal.security.io.journal import (
    Direction,
    Event,
    journal_dir,
    names_session,
)
from pi_cross_session._internal.security.io.journal_network import (
    JournalFollower,
    LiveState,
    journal_root,
    read_live_state,
    session_dirs,
)

if TYPE_CHECKING:
    from pi_cross_session._internal.protocol.registration import PublicPeer

logger = logging.getLogger(__name__)

#: How often each followed journal is read for new events (an event is shown well within 1 s).
POLL_S: Final = 0.25
#: How often the journal dirs are listed again even when their root looks unchanged (a dir made
#: within the root's timestamp granularity is still found).
DIRS_S: Final = 1.0
#: How often the live sessions are listed and probed, and their ``live.json`` read.
LISTING_S: Final = 1.0
#: The full view redraws at most this often (events arriving in a burst make one redraw).
MIN_REDRAW_S: Final = 0.1
#: What to install when rich is missing. The package is on no index, so the extra is named as a
#: clone installs it; rich itself is all the extra adds.
EXTRA_HINT: Final = (
    "the 'watch' extra: pip install '.[watch]' in a clone, or pip install 'rich>=13.7'"
)

_QUIT_KEYS: Final = frozenset({"q", "Q"})
_STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: What writing to a terminal that hung up fails with.
_TERMINAL_GONE: Final = frozenset({errno.EIO, errno.ENXIO, errno.EPIPE, errno.EBADF})


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


# -- the live sessions -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One listing: the live sessions, their live states by instance id, a problem if it failed."""

    at: int
    registered: tuple[Registered, ...] = ()
    live: dict[str, LiveState] = field(default_factory=dict)
    problem: str | None = None


def remote_machine_of(peer: PublicPeer) -> str | None:
    """The machine a gateway's proxy stands for: its name ends ``@machine`` and its cwd starts
    ``machine:`` (docs/remote.md, "Proxies"); ``None`` for a session of this machine."""
    if "@" not in peer.name:
        return None
    # Imported here: only a name with an '@' needs the remote plane's names.
    from pi_cross_session._internal.protocol.remote.envelope import machine_of_name

    machine = machine_of_name(peer.name)
    if machine is None or not peer.cwd.startswith(f"{machine}:"):
        return None
    return line(machine, 32)  # as the command line's other words name a machine


def _live_peers(locations: paths.Locations) -> list[PublicPeer]:
    """The live sessions as ``peers`` lists them (probed, dead ones reaped), without git: a
    missing or empty peers dir is answered without the probes or an event loop."""
    if not os.path.lexists(locations.peers_dir) or not anything_to_list(locations):
        return []
    import anyio

    from pi_cross_session._internal.plugin.peer_listing import list_live

    return list(anyio.run(partial(list_live, locations, with_git=False)).peers)


def take_snapshot(locations: paths.Locations) -> Snapshot:
    """List the live sessions and read each local one's ``live.json`` (never raises)."""
    at = _now_ms()
    try:
        peers = _live_peers(locations)
    except Exception as exc:  # a listing that fails is said on screen; watch stays up
        from pi_cross_session._internal.protocol.errors import CrossSessionError

        if not isinstance(exc, CrossSessionError):
            logger.warning("listing the live sessions failed", exc_info=True)
        return Snapshot(at, problem=f"cannot list the live sessions: {exc}")
    registered: list[Registered] = []
    live: dict[str, LiveState] = {}
    for peer in peers:
        machine = remote_machine_of(peer)
        registered.append(
            Registered(peer.instance_id, peer.name, peer.status, peer.inbound, machine)
        )
        if machine is None:
            state = read_live_state(journal_dir(locations.agent_dir, peer.instance_id))
            if state is not None:
                live[peer.instance_id] = state
    return Snapshot(at, tuple(registered), live)


class Lister:
    """Takes a :class:`Snapshot` every :data:`LISTING_S` on its own thread; :meth:`take` hands
    out the newest one not taken yet."""

    def __init__(self, locations: paths.Locations) -> None:
        self._locations = locations
        self._latest: Snapshot | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="watch-listing", daemon=True)

    def start(self) -> None:
        """Begin listing."""
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            snapshot = take_snapshot(self._locations)
            with self._lock:
                self._latest = snapshot
            self._stop.wait(LISTING_S)

    def take(self) -> Snapshot | None:
        """The newest snapshot since the last call, if any."""
        with self._lock:
            snapshot, self._latest = self._latest, None
        return snapshot

    def stop(self) -> None:
        """Stop listing (a listing in progress ends first: its probes have deadlines)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)


# -- the journals ----------------------------------------------------------------------------------


class Journals:
    """Every session's journal, followed: new events at each :meth:`poll`, and what was skipped.

    With ``since`` (epoch ms), events older than it are not handed out (the line and JSON modes
    print what happens from their start on)."""

    def __init__(self, agent_dir: str, *, since: int | None = None) -> None:
        self.agent_dir = agent_dir
        self.since = since
        self._followers: dict[str, JournalFollower] = {}
        self._dirs_at = float("-inf")
        self._root = journal_root(agent_dir)
        self._root_stamp: int | None = None
        #: What the followers of journals that went had skipped (the totals never go down).
        self._gone = Skipped()

    @property
    def journaled(self) -> frozenset[str]:
        """The instance ids whose journal dir was found."""
        return frozenset(self._followers)

    def has_journal(self, instance_id: str) -> bool:
        """True when ``instance_id`` has a journal dir (looked up when not yet followed: a
        session's dir may be younger than the last listing of dirs)."""
        if instance_id in self._followers:
            return True
        try:
            return os.path.isdir(journal_dir(self.agent_dir, instance_id))
        except ValueError:
            return False

    def refresh(self, now: float) -> None:
        """List the journal dirs again when the root changed (a session's dir was made or
        removed: one ``stat`` tells) or, whatever it says, when :data:`DIRS_S` has passed."""
        try:
            stamp: int | None = os.stat(self._root).st_mtime_ns
        except OSError:
            stamp = None
        if stamp == self._root_stamp and now - self._dirs_at < DIRS_S:
            return
        self._root_stamp = stamp
        self._dirs_at = now
        found = session_dirs(self.agent_dir)
        for instance_id in list(self._followers):
            if instance_id not in found:
                gone = self._followers.pop(instance_id)
                self._gone = Skipped(
                    self._gone.lines + gone.skipped,
                    self._gone.bytes + gone.skipped_bytes,
                    self._gone.unreadable + (gone.unreadable is not None),
                )
        for instance_id, directory in found.items():
            if instance_id not in self._followers:
                self._followers[instance_id] = JournalFollower(directory)

    def poll(self) -> list[Event]:
        """The events every journal gained, in time order."""
        events: list[Event] = []
        for follower in self._followers.values():
            events.extend(follower.poll())
        if self.since is not None:
            since = self.since
            events = [event for event in events if event.at >= since]
        # A sender and its receiver often write in the same millisecond: the send first.
        events.sort(key=lambda event: (event.at, event.direction is Direction.IN))
        return events

    def skipped(self) -> Skipped:
        """The totals of what the readers passed over."""
        followers = self._followers.values()
        return Skipped(
            self._gone.lines + sum(f.skipped for f in followers),
            self._gone.bytes + sum(f.skipped_bytes for f in followers),
            self._gone.unreadable + sum(f.unreadable is not None for f in followers),
        )

    def unreadable(self) -> list[tuple[str, str]]:
        """The journal dirs that are not ours to read, with why (for ``-v``)."""
        return [(f.directory, f.unreadable) for f in self._followers.values() if f.unreadable]


# -- stopping --------------------------------------------------------------------------------------


class Stop:
    """Whether watch was asked to stop: a plain flag, which a signal handler may set. (A
    :class:`threading.Event` may not be: its lock may be held by the very wait the handler
    interrupted, and setting it there deadlocks.)"""

    def __init__(self) -> None:
        self.requested = False

    def set(self) -> None:
        """Ask the loop to end at its next turn."""
        self.requested = True


@contextlib.contextmanager
def stop_on_signals(stop: Stop) -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP set ``stop`` instead of raising in the middle of a write; the
    previous handlers come back at the end."""

    def handler(number: int, frame: FrameType | None) -> None:
        del number, frame
        stop.set()

    previous = {number: signal.signal(number, handler) for number in _STOP_SIGNALS}
    try:
        yield
    finally:
        for number, old in previous.items():
            signal.signal(number, old)


# -- lines and JSON --------------------------------------------------------------------------------


class Printer:
    """The line and JSON modes: one line (or object) per event and per session change."""

    def __init__(self, console: Console, journals: Journals, *, as_json: bool) -> None:
        self.console = console
        self.journals = journals
        self.as_json = as_json
        self._said_skipped: Skipped = Skipped()

    def event(self, event: Event, wanted: str | None) -> None:
        """Print one event (unless the filter leaves it out)."""
        if wanted is not None and not any(
            names_session(wanted, end.name, end.instance_id) for end in (event.session, event.peer)
        ):
            return
        journaled = {event.session.instance_id}
        if self.journals.has_journal(event.peer.instance_id):
            journaled.add(event.peer.instance_id)
        if self.as_json:
            data = journal_words.event_json(event, journaled=journaled)
            self.console.json({"type": "event", **data}, indent=None)
        else:
            self.console.result(journal_words.event_line(event, journaled=journaled))

    def session(self, change: SessionChange, wanted: str | None) -> None:
        """Print one session change (unless the filter leaves it out)."""
        if wanted is not None and not change.session.matches(wanted):
            return
        if self.as_json:
            self.console.json(
                {"type": "session", **journal_words.session_json(change)}, indent=None
            )
        else:
            self.console.result(journal_words.session_line(change))

    def skipped(self, skipped: Skipped) -> None:
        """Say on stderr what the readers passed over, each time it grows."""
        if skipped == self._said_skipped:
            return
        self._said_skipped = skipped
        note = journal_words.skipped_note(skipped.lines, skipped.bytes, skipped.unreadable)
        if note is not None:
            self.console.problem(f"{PREFIX} watch: {note}")
            if self.console.verbosity > 0:
                for directory, why in self.journals.unreadable():
                    where = f"{line(directory)}: {line(why)}"
                    self.console.problem(f"{PREFIX} watch: not read: {where}")


def _print_lines(
    console: Console,
    locations: paths.Locations,
    wanted: str | None,
    *,
    as_json: bool,
    since: int,
) -> int:
    journals = Journals(locations.agent_dir, since=since)
    model = WatchModel(wanted=wanted)
    printer = Printer(console, journals, as_json=as_json)
    stop = Stop()
    lister = Lister(locations)
    with stop_on_signals(stop):
        lister.start()
        try:
            while not stop.requested:
                journals.refresh(time.monotonic())
                for event in journals.poll():
                    printer.event(event, wanted)
                snapshot = lister.take()
                if snapshot is not None:
                    _take_listing(model, snapshot, journals, printer.session, wanted)
                printer.skipped(journals.skipped())
                time.sleep(POLL_S)  # a stop signal is seen at the next turn, within POLL_S
        except BrokenPipeError:
            _quiet_stdout()  # the reader went away (``watch | head``): nothing left to do
        finally:
            lister.stop()
    return exits.EXIT_OK


def _take_listing(
    model: WatchModel,
    snapshot: Snapshot,
    journals: Journals,
    on_change: Callable[[SessionChange, str | None], None] | None,
    wanted: str | None,
) -> None:
    model.note_listing_problem(snapshot.problem)
    if snapshot.problem is not None:
        return  # keep showing the last sessions known rather than none
    found = model.update_sessions(snapshot.registered, snapshot.live, snapshot.at)
    model.set_journaled(journals.journaled | set(snapshot.live))
    if on_change is not None:
        for change in found:
            on_change(change, wanted)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so that the flush at exit does not fail a second time."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


# -- the full view ---------------------------------------------------------------------------------


class FooterLog(logging.Handler):
    """Keeps the last warning logged for the footer: on the alternate screen, a line written to
    stderr would land in the middle of the view."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.last: str | None = None
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.last = f"warning: {record.getMessage()}"
        self.count += 1


@contextlib.contextmanager
def logs_to_footer() -> Iterator[FooterLog]:
    """Route log records to a :class:`FooterLog` while the view is up."""
    root = logging.getLogger()
    saved = root.handlers[:]
    footer = FooterLog()
    root.handlers[:] = [footer]
    try:
        yield footer
    finally:
        root.handlers[:] = saved


@contextlib.contextmanager
def cbreak(fd: int | None) -> Iterator[bool]:
    """Read keys one at a time without echo (cbreak: Ctrl-C still signals); the terminal's
    settings are put back whatever happens. Yields False when ``fd`` is not a terminal."""
    if fd is None or not os.isatty(fd):
        yield False
        return
    import termios
    import tty

    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd, termios.TCSANOW)
        yield True
    finally:
        # A terminal that hung up has no settings left to restore.
        with contextlib.suppress(termios.error, OSError):
            termios.tcsetattr(fd, termios.TCSAFLUSH, saved)


def read_keys(fd: int, timeout: float) -> str:
    """The keys typed within ``timeout`` seconds ("" when none): waits on ``fd`` with select, so
    the loop never blocks on a read."""
    ready, _, _ = select.select([fd], [], [], max(timeout, 0.0))
    if not ready:
        return ""
    try:
        data = os.read(fd, 64)
    except (BlockingIOError, InterruptedError):
        return ""
    if not data:
        raise EOFError  # stdin closed: no more keys will come
    return data.decode("utf-8", "replace")


def home_relative(path: str) -> str:
    """``path`` with the user's home dir said ``~`` (the title has room for little)."""
    home = os.path.expanduser("~")
    if home not in ("", "/", "~") and path.startswith(home.rstrip("/") + "/"):
        return "~" + path[len(home.rstrip("/")) :]
    return path


def _stdin_fd() -> int | None:
    try:
        return sys.stdin.fileno()
    except (AttributeError, ValueError, OSError):
        return None


def _full_view(
    console: Console, locations: paths.Locations, wanted: str | None, rich_console: Any
) -> int:
    from rich.live import Live

    from pi_cross_session._internal.cli import watch_view

    journals = Journals(locations.agent_dir)
    model = WatchModel(wanted=wanted)
    stop = Stop()
    lister = Lister(locations)
    resized = Stop()
    keys_fd = _stdin_fd()

    def on_resize(number: int, frame: FrameType | None) -> None:
        del number, frame
        resized.set()  # a plain flag, as for the stop signals

    shown_dir = home_relative(locations.agent_dir)

    def draw(note: str | None) -> Any:
        return watch_view.render(
            model, agent_dir=shown_dir, height=rich_console.size.height, note=note
        )

    old_winch = signal.signal(signal.SIGWINCH, on_resize)
    try:
        with (
            stop_on_signals(stop),
            logs_to_footer() as footer,
            cbreak(keys_fd) as keys,
            Live(
                draw(None),
                console=rich_console,
                screen=True,
                auto_refresh=False,
                redirect_stdout=False,
                redirect_stderr=False,
            ) as live,
        ):
            lister.start()
            try:
                _view_loop(
                    model,
                    journals,
                    lister,
                    live,
                    stop,
                    resized,
                    keys_fd if keys else None,
                    draw,
                    footer,
                )
            finally:
                lister.stop()
    except OSError as exc:
        if not stop.requested and exc.errno not in _TERMINAL_GONE:
            raise
        # The terminal hung up: there is no screen left to give back, and nobody to tell.
        return exits.EXIT_OK
    finally:
        signal.signal(signal.SIGWINCH, old_winch)
    note = journal_words.skipped_note(
        model.skipped.lines, model.skipped.bytes, model.skipped.unreadable
    )
    if note is not None:
        console.problem(f"{PREFIX} watch: {note}")
    return exits.EXIT_OK


def _view_loop(
    model: WatchModel,
    journals: Journals,
    lister: Lister,
    live: Any,
    stop: Stop,
    resized: Stop,
    keys_fd: int | None,
    draw: Callable[[str | None], Any],
    footer: FooterLog,
) -> None:
    drawn = (model.version, footer.count)
    drawn_at = 0.0
    next_poll = 0.0
    while not stop.requested:
        now = time.monotonic()
        if now >= next_poll:
            next_poll = now + POLL_S
            journals.refresh(now)
            model.set_journaled(journals.journaled)  # bounded: the dirs there now
            model.add_events(journals.poll())
            model.note_skipped(journals.skipped())
            snapshot = lister.take()
            if snapshot is not None:
                _take_listing(model, snapshot, journals, None, None)
        state = (model.version, footer.count)
        if (state != drawn and now - drawn_at >= MIN_REDRAW_S) or resized.requested:
            resized.requested = False
            live.update(draw(footer.last), refresh=True)
            drawn, drawn_at = state, now
        # Sleep until the next poll, or until a redraw held back by MIN_REDRAW_S is due.
        deadline = next_poll if state == drawn else min(next_poll, drawn_at + MIN_REDRAW_S)
        wait = min(max(0.0, deadline - time.monotonic()), POLL_S)
        if keys_fd is None:
            time.sleep(wait)
            continue
        try:
            typed = read_keys(keys_fd, wait)
        except EOFError:
            # End of input on a terminal in cbreak mode (where Ctrl-D is a key like any other)
            # is a hangup: whoever watched is gone.
            stop.set()
            continue
        for key in typed:
            if key in _QUIT_KEYS:
                stop.set()
            elif key in ("f", "F"):
                model.cycle_filter()
            elif key in ("p", "P"):
                model.toggle_pause()


# -- the command -----------------------------------------------------------------------------------


def _rich_console() -> Any | None:
    """A rich console for the full view, or ``None`` when rich is not installed."""
    try:
        from rich.console import Console as RichConsole
    except ImportError:
        return None
    return RichConsole(highlight=False, markup=False, emoji=False)


def run(args: argparse.Namespace, console: Console) -> int:
    """Watch until q, Ctrl-C, SIGTERM or SIGHUP."""
    since = _now_ms()  # the line and JSON modes print what happens from here on
    locations = environment.resolve()
    wanted: str | None = args.session
    if args.json:
        return _print_lines(console, locations, wanted, as_json=True, since=since)
    if not _is_tty(console.out):
        return _print_lines(console, locations, wanted, as_json=False, since=since)
    rich_console = _rich_console()
    if rich_console is None:
        console.problem(
            f"{PREFIX} watch: the full-screen view needs rich ({EXTRA_HINT}); printing lines"
        )
        return _print_lines(console, locations, wanted, as_json=False, since=since)
    return _full_view(console, locations, wanted, rich_console)


def _is_tty(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:
        return False


__all__ = [
    "EXTRA_HINT",
    "Journals",
    "Lister",
    "Snapshot",
    "remote_machine_of",
    "run",
    "take_snapshot",
]
