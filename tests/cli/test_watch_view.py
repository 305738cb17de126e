"""``watch``'s full-screen view drawn by rich (``cli/watch_view.py``): a peer's strings are shown
as typed, escaped, never read as markup; what the screen says of a paused feed, a latched inbox,
an end with no journal and what was skipped; and that only the full view imports rich."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pi_cross_session._internal.cli.watch_model import Registered, Skipped, WatchModel
from pi_cross_session._internal.security.io.journal import Direction, Event, EventKind, Party
from pi_cross_session._internal.security.io.journal_network import InboundState, LiveState

rich_console = pytest.importorskip("rich.console")

from pi_cross_session._internal.cli import watch_view  # noqa: E402 (only with rich)

A = "a" * 32
B = "b" * 32
N = "c" * 32
MESSAGE = "4f1c2d3e-1111-4111-8111-111111111111"
HOSTILE = "evil\x1b[2J[bold red]loud[/] name"


def screen(model: WatchModel, *, height: int = 30, width: int = 160) -> str:
    with open(os.devnull, "w") as sink:
        console = rich_console.Console(
            width=width, height=height, record=True, color_system=None, file=sink
        )
        console.print(watch_view.render(model, agent_dir="/home/dev/.pi/agent", height=height))
    return str(console.export_text())


def sample() -> WatchModel:
    model = WatchModel()
    model.update_sessions(
        [
            Registered(A, HOSTILE, "idle", "accept"),
            Registered(B, "beta", "busy", "accept"),
            Registered(N, "node-one", "idle", "refuse"),
        ],
        {
            A: LiveState(1, A, "x", "inbox", InboundState.OPEN),
            B: LiveState(
                1, B, "beta", "pi-python", InboundState.LATCHED, queue=2, reason="turn failed"
            ),
        },
        1,
    )
    sender = Party(HOSTILE, A)
    model.add_events(
        [
            Event(
                1_000,
                EventKind.SENT,
                MESSAGE,
                sender,
                Party("beta", B),
                summary="[link=http://x]click[/link]\x1b]0;t\x07",
                direction=Direction.OUT,
            ),
            Event(
                1_001,
                EventKind.DELIVERED,
                MESSAGE,
                Party("beta", B),
                sender,
                direction=Direction.IN,
            ),
            Event(
                1_002,
                EventKind.REFUSED,
                "5f1c2d3e-1111-4111-8111-111111111111",
                sender,
                Party("node-one", N),
                code="busy",
                direction=Direction.OUT,
            ),
        ]
    )
    model.set_journaled({A, B})
    return model


def test_peer_strings_are_shown_as_typed_and_escaped() -> None:
    text = screen(sample())
    assert "\x1b" not in text
    # Markup in a name or summary is text, not style or a link: in the sessions, in the feed.
    lines = text.splitlines()
    [session] = [line for line in lines if "inbox" in line and "[aaaaaa]" in line]
    [row] = [line for line in lines if MESSAGE[:8] in line]
    assert "evil\\x1b[2J[bold red]loud[/] name [aaaaaa]" in session
    assert "evil\\x1b[2J[bold red]lo… [aaaaaa]" in row  # a feed cell is shorter
    assert "[link=http://x]click[/link]\\x1b]0;t\\x07" in row


def test_the_sessions_and_the_feed_say_what_each_side_saw() -> None:
    text = screen(sample())
    assert "3 live sessions" in text
    beta = next(
        line for line in text.splitlines() if "beta [bbbbbb]" in line and "pi-python" in line
    )
    assert "busy" in beta
    assert "latched (turn failed)" in beta
    assert " 2 " in beta
    node = next(line for line in text.splitlines() if line.lstrip().startswith("node?"))
    assert "refusing" in node
    assert "no journal" in node
    first = next(line for line in text.splitlines() if MESSAGE[:8] in line)
    assert "sent" in first
    assert "delivered" in first
    refused = next(line for line in text.splitlines() if "5f1c2d3e" in line)
    assert "refused busy" in refused
    assert "unknown (no journal)" in refused


def test_paused_filtered_and_skipped_are_said() -> None:
    model = sample()
    model.toggle_pause()
    model.cycle_filter()
    model.note_skipped(Skipped(lines=3, bytes=1_000))
    text = screen(model)
    assert "PAUSED (p resumes)" in text
    assert "feed: evil\\x1b[2J[bold red]loud[/] name [aaaaaa]" in text
    assert "skipped 3 lines that were not events, 1,000 bytes of files larger" in text
    assert "f filter  p pause  q quit" in text


def test_the_feed_fits_the_screen_and_the_footer_stays() -> None:
    model = WatchModel()
    model.add_events(
        Event(
            at,
            EventKind.SENT,
            f"{at:08d}-1111-4111-8111-111111111111",
            Party("a", A),
            Party("b", B),
            direction=Direction.OUT,
        )
        for at in range(100)
    )
    text = screen(model, height=20)
    lines = text.rstrip("\n").splitlines()
    assert len(lines) <= 20
    assert "q quit" in lines[-1]
    assert "of 100 messages shown" in lines[-1]
    # The newest first.
    assert "00000099" in text
    assert "00000000" not in text


def test_only_the_full_view_imports_rich() -> None:
    code = (
        "import sys\n"
        "from pi_cross_session._internal.cli import watch_cmd, watch_model, journal_words\n"
        "from pi_cross_session._internal.cli import log_cmd\n"
        "assert not [m for m in sys.modules if m.split('.')[0] == 'rich'], 'rich imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
