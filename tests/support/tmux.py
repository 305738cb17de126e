"""A real terminal for a test: one command in a tmux server of its own.

The server is started with ``tmux -L <unique name>`` and no configuration file of the user's
(``-f`` names ours), so it never touches a tmux the user runs; :meth:`Terminal.close` kills it,
which ends what still runs in it, and removes its socket file. The screen is read with
``capture-pane``, so a test waits for what a person would see (:meth:`Terminal.wait_for`), never
for some time. The pane stays after its command ends (``remain-on-exit``), so its last screen can
still be read (tmux does not always know a dead pane's exit status: a test that needs it has its
shell print it).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final

from tests.support.bounds import MUST_HAPPEN_S

TMUX: Final = shutil.which("tmux")
#: How often the screen is captured again while waiting for something on it.
CAPTURE_EVERY_S: Final = 0.1
_SESSION: Final = "test"
_DROPPED: Final = frozenset({"TMUX", "TMUX_PANE", "COLUMNS", "LINES"})


class Terminal:
    """A ``width`` × ``height`` terminal running ``argv`` with ``env`` in ``cwd``."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str | os.PathLike[str],
        config_dir: Path,
        width: int = 160,
        height: int = 50,
    ) -> None:
        if TMUX is None:
            raise RuntimeError("tmux is not installed")
        self.socket = f"pcs-test-{uuid.uuid4().hex[:12]}"
        config = config_dir / f"{self.socket}.conf"
        # Our settings only: the pane outlives its command; no status line takes a row.
        config.write_text("set -g remain-on-exit on\nset -g status off\n", encoding="utf-8")
        # Not inside another tmux; and the terminal's size is the pane's, not one a variable left
        # by the test process claims (some libraries set COLUMNS and LINES when they find none).
        self._env = {key: value for key, value in env.items() if key not in _DROPPED}
        self._env.setdefault("TERM", "xterm-256color")
        self._config = str(config)
        self._tmux(
            "new-session",
            "-d",
            "-s",
            _SESSION,
            "-x",
            str(width),
            "-y",
            str(height),
            "-c",
            str(cwd),
            *argv,
            cwd=cwd,
        )
        #: Where the server listens: removed with it (kill-server leaves the socket file).
        self.socket_path = self._tmux("display-message", "-p", "#{socket_path}").strip()

    def _tmux(self, *args: str, cwd: str | os.PathLike[str] | None = None) -> str:
        assert TMUX is not None
        done = subprocess.run(
            [TMUX, "-L", self.socket, "-f", self._config, *args],
            env=self._env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=MUST_HAPPEN_S,
            check=False,
        )
        if done.returncode != 0:
            raise AssertionError(f"tmux {' '.join(args)} failed: {done.stderr.strip()}")
        return done.stdout

    def screen(self) -> str:
        """What the terminal shows now, one line per row (no styles)."""
        return self._tmux("capture-pane", "-p", "-t", _SESSION)

    def send_keys(self, *keys: str) -> None:
        """Type ``keys`` (tmux key names, or literal text with ``-l`` semantics for one char)."""
        self._tmux("send-keys", "-t", _SESSION, *keys)

    def wait_for(
        self,
        condition: str | re.Pattern[str] | Callable[[str], bool],
        *,
        timeout: float = MUST_HAPPEN_S,
    ) -> str:
        """The first screen on which ``condition`` holds (a text it shows, a compiled pattern
        searched, or a predicate); fails with the last screen after ``timeout``."""
        if isinstance(condition, str):
            text = condition

            def holds(screen: str) -> bool:
                return text in screen

        elif isinstance(condition, re.Pattern):
            pattern = condition

            def holds(screen: str) -> bool:
                return pattern.search(screen) is not None

        else:
            holds = condition

        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if holds(screen):
                return screen
            time.sleep(CAPTURE_EVERY_S)
        raise AssertionError(f"timed out waiting for {condition!r}; the screen was:\n{screen}")

    def close(self) -> None:
        """Kill the server (and whatever still runs in it)."""
        assert TMUX is not None
        subprocess.run(
            [TMUX, "-L", self.socket, "kill-server"],
            env=self._env,
            capture_output=True,
            timeout=MUST_HAPPEN_S,
            check=False,
        )
        if self.socket_path.endswith(f"/{self.socket}"):  # never anything but our own socket
            with contextlib.suppress(OSError):
                os.unlink(self.socket_path)
