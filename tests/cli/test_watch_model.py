"""``watch``'s state as tables: the sessions it shows, the changes it reports, the feed it keeps,
its filter and its pause (``cli/watch_model.py``, pure), and the words the line modes use for
them (``cli/journal_words.py``)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from pi_cross_session._internal.cli import journal_words
from pi_cross_session._internal.cli.watch_model import (
    ChangeKind,
    Registered,
    SessionView,
    WatchModel,
    changes,
    fold,
    session_view,
)
from pi_cross_session._internal.protocol.sanitize import dumps
from pi_cross_session._internal.security.io.journal import Direction, Event, EventKind, Party
from pi_cross_session._internal.security.io.journal_network import (
    InboundState,
    LiveGoal,
    LiveState,
)

A = "a" * 32
B = "b" * 32
C = "c" * 32
ALPHA = Party("alpha", A)
BETA = Party("beta", B)
GAMMA = Party("gamma", C)
M1 = "11111111-1111-4111-8111-111111111111"
M2 = "22222222-2222-4222-8222-222222222222"
#: A name a hostile peer chose: terminal escapes, a forged line, rich markup.
HOSTILE = "evil\x1b[2J\nforged [bold red]line[/]"


def live(instance_id: str = A, **fields: object) -> LiveState:
    data: dict[str, object] = {
        "at": 1,
        "instance_id": instance_id,
        "name": "alpha",
        "host": "inbox",
        "inbound": InboundState.OPEN,
    }
    data.update(fields)
    return LiveState(**data)  # type: ignore[arg-type]


def reg(instance_id: str = A, **fields: object) -> Registered:
    data: dict[str, object] = {
        "instance_id": instance_id,
        "name": "alpha",
        "status": "idle",
        "inbound": "accept",
    }
    data.update(fields)
    return Registered(**data)  # type: ignore[arg-type]


def event(
    kind: EventKind,
    *,
    at: int = 1000,
    message_id: str = M1,
    sender: Party = ALPHA,
    receiver: Party = BETA,
    writer: str = "sender",
    code: str | None = None,
    summary: str | None = None,
) -> Event:
    if writer == "sender":
        return Event(
            at, kind, message_id, sender, receiver, code=code, summary=summary,
            direction=Direction.OUT,
        )  # fmt: skip
    return Event(
        at, kind, message_id, receiver, sender, code=code, summary=summary, direction=Direction.IN
    )


# -- one session -----------------------------------------------------------------------------------

GOAL = LiveGoal("g-1", "ship the release")


@pytest.mark.parametrize(
    ("registered", "state", "kind", "inbound", "reason", "queue", "journaled", "machine"),
    [
        # A session of ours: what its live state says.
        (reg(), live(queue=3), "inbox", "open", None, 3, True, None),
        (reg(), live(host="pi-python"), "pi-python", "open", None, 0, True, None),
        (
            reg(),
            live(inbound=InboundState.LATCHED, reason="a turn failed"),
            "inbox",
            "latched",
            "a turn failed",
            0,
            True,
            None,
        ),
        # No live state (a Node session, or journaling off): the registration's policy, no kind.
        (reg(), None, None, "open", None, None, False, None),
        (reg(inbound="refuse"), None, None, "refusing", None, None, False, None),
        # A live state of another instance id is not this session's.
        (reg(), live(instance_id=B), None, "open", None, None, False, None),
        # A remote proxy: its machine; a live state beside it would not be its own.
        (reg(remote_machine="buildbox"), live(), None, "open", None, None, False, "buildbox"),
    ],
)
def test_a_session_is_shown_from_its_registration_and_its_live_state(
    registered: Registered,
    state: LiveState | None,
    kind: str | None,
    inbound: str,
    reason: str | None,
    queue: int | None,
    journaled: bool,
    machine: str | None,
) -> None:
    view = session_view(registered, state)
    assert (view.kind, view.inbound, view.reason, view.queue, view.journaled) == (
        kind,
        inbound,
        reason,
        queue,
        journaled,
    )
    assert view.remote_machine == machine
    # The registration names the session, whatever its live state says.
    assert view.name == registered.name


def test_the_registration_decides_the_name_and_the_status() -> None:
    view = session_view(reg(name="renamed", status="busy"), live(name="old"))
    assert (view.name, view.status) == ("renamed", "busy")


# -- changes ---------------------------------------------------------------------------------------

OPEN = session_view(reg(), live())
LATCHED = session_view(reg(), live(inbound=InboundState.LATCHED, reason="aborted"))
LATCHED_OTHER = session_view(reg(), live(inbound=InboundState.LATCHED, reason="failed"))
WITH_GOAL = session_view(reg(), live(goal=GOAL))
BUSY = session_view(reg(status="busy"), live(queue=4))
OTHER = session_view(reg(B, name="beta"), None)
OTHER_KIND = session_view(reg(), None)


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        ({}, {A: OPEN}, [ChangeKind.APPEARED]),
        ({A: OPEN}, {}, [ChangeKind.GONE]),
        ({A: OPEN}, {A: LATCHED}, [ChangeKind.INBOUND]),
        ({A: OTHER_KIND}, {A: OPEN}, [ChangeKind.KIND]),
        # A new reason for the same state is a change: it says something else now.
        ({A: LATCHED}, {A: LATCHED_OTHER}, [ChangeKind.INBOUND]),
        ({A: OPEN}, {A: WITH_GOAL}, [ChangeKind.GOAL]),
        ({A: WITH_GOAL}, {A: OPEN}, [ChangeKind.GOAL]),
        # Busy and idle, and the queue's depth, come and go all the time: shown, never reported.
        ({A: OPEN}, {A: BUSY}, []),
        ({A: OPEN}, {A: OPEN}, []),
        ({A: OPEN}, {B: OTHER}, [ChangeKind.APPEARED, ChangeKind.GONE]),
    ],
)
def test_what_changed_between_two_listings(
    before: dict[str, SessionView], after: dict[str, SessionView], expected: list[ChangeKind]
) -> None:
    found = changes(before, after, at=5)
    assert [change.what for change in found] == expected
    for change in found:
        assert change.at == 5
        if change.what in (ChangeKind.KIND, ChangeKind.INBOUND, ChangeKind.GOAL):
            assert change.before == before[change.session.instance_id]


def test_the_model_reports_each_change_once() -> None:
    model = WatchModel()
    assert [c.what for c in model.update_sessions([reg()], {A: live()}, 1)] == ["appeared"]
    assert model.update_sessions([reg()], {A: live()}, 2) == []
    latched = live(inbound=InboundState.LATCHED, reason="aborted")
    [change] = model.update_sessions([reg()], {A: latched}, 3)
    assert (change.what, change.session.inbound, change.session.reason) == (
        "inbound",
        "latched",
        "aborted",
    )
    assert [c.what for c in model.update_sessions([], {}, 4)] == ["gone"]


def test_a_new_session_without_live_state_is_reported_after_a_grace() -> None:
    model = WatchModel(appear_grace_ms=2_000)
    # Listed at once in the sessions panel; reported only when its kind is known, or late.
    assert model.update_sessions([reg()], {}, 0) == []
    assert [view.instance_id for view in model.sessions] == [A]
    assert model.update_sessions([reg()], {}, 1_999) == []
    [late] = model.update_sessions([reg()], {}, 2_000)
    assert (late.what, late.session.kind, late.session.journaled) == ("appeared", None, False)
    # Its live state came after all: the kind is reported as a change.
    [kind] = model.update_sessions([reg()], {A: live()}, 2_500)
    assert (kind.what, kind.session.kind, kind.before) == ("kind", "inbox", late.session)
    assert journal_words.session_line(kind).endswith("[aaaaaa] kind: node? → inbox")


def test_a_session_whose_live_state_follows_is_reported_once_with_its_kind() -> None:
    model = WatchModel(appear_grace_ms=2_000)
    assert model.update_sessions([reg()], {}, 0) == []
    [appeared] = model.update_sessions([reg()], {A: live()}, 1_000)
    assert (appeared.what, appeared.session.kind) == ("appeared", "inbox")
    # One that came and went within the grace was never reported, so its end is not either.
    assert model.update_sessions([reg(), reg(B)], {A: live()}, 1_100) == []
    assert model.update_sessions([reg()], {A: live()}, 1_200) == []


def test_a_remote_session_is_reported_at_once() -> None:
    [appeared] = WatchModel().update_sessions([reg(remote_machine="buildbox")], {}, 0)
    assert appeared.session.remote_machine == "buildbox"


def test_a_listing_that_changes_only_the_status_is_redrawn() -> None:
    model = WatchModel()
    model.update_sessions([reg()], {}, 1)
    version = model.version
    assert model.update_sessions([reg(status="busy")], {}, 2) == []
    assert model.version > version
    assert model.sessions[0].status == "busy"


# -- the feed --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("events", "sender_state", "receiver_state", "changed_at"),
    [
        ([event(EventKind.SENT)], "sent", None, 1000),
        (
            [
                event(EventKind.SENT, at=1000),
                event(EventKind.QUEUED, at=1001),
                event(EventKind.ADMITTED, at=1000, writer="receiver"),
                event(EventKind.QUEUED, at=1000, writer="receiver"),
                event(EventKind.SUBMITTED, at=1500, writer="receiver"),
                event(EventKind.DELIVERED, at=1600, writer="receiver"),
            ],
            "queued",
            "delivered",
            1600,
        ),
        # Each end's last word, whatever order the two journals are read in; the time is the
        # latest either end gave.
        (
            [
                event(EventKind.ADMITTED, at=1000, writer="receiver"),
                event(EventKind.REFUSED, at=1001, writer="receiver", code="rate_limited"),
                event(EventKind.SENT, at=999),
                event(EventKind.REFUSED, at=1002, code="rate_limited"),
            ],
            "refused rate_limited",
            "refused rate_limited",
            1002,
        ),
        (
            [event(EventKind.DROPPED, writer="receiver", code="dropped_shutdown")],
            None,
            "dropped (shutdown)",
            1000,
        ),
    ],
)
def test_a_message_row_keeps_each_ends_last_word(
    events: list[Event], sender_state: str | None, receiver_state: str | None, changed_at: int
) -> None:
    row = None
    for item in events:
        row = fold(row, item)
    assert row is not None
    assert (row.sender, row.receiver) == (ALPHA, BETA)
    shown = (
        None if row.sender_event is None else journal_words.state_word(row.sender_event),
        None if row.receiver_event is None else journal_words.state_word(row.receiver_event),
    )
    assert shown == (sender_state, receiver_state)
    assert row.changed_at == changed_at


def test_a_summary_stays_once_a_journal_kept_one() -> None:
    row = fold(None, event(EventKind.SENT, summary="build is green"))
    row = fold(row, event(EventKind.DELIVERED, writer="receiver"))
    assert row.summary == "build is green"


def test_one_row_per_message_and_sender() -> None:
    model = WatchModel()
    model.add_events(
        [
            event(EventKind.SENT, at=1),
            event(EventKind.ADMITTED, at=2, writer="receiver"),
            # Another sender chose the same message id: another message.
            event(EventKind.SENT, at=3, sender=GAMMA),
            event(EventKind.SENT, at=4, message_id=M2),
        ]
    )
    rows = model.rows()
    assert [(row.message_id, row.sender.instance_id) for row in rows] == [
        (M2, A),
        (M1, C),
        (M1, A),
    ]


def test_the_feed_keeps_the_newest_messages_only() -> None:
    model = WatchModel(max_messages=10)
    # Read in an order that is not time order (several journals, the oldest last).
    batch = [
        event(EventKind.SENT, at=at, message_id=f"{at:08d}-0000-4000-8000-000000000000")
        for at in [*range(500, 1000), *range(500)]
    ]
    for start in range(0, len(batch), 37):
        model.add_events(batch[start : start + 37])
        assert model.size <= 10
    assert [row.changed_at for row in model.rows()] == list(range(999, 989, -1))


def test_every_writer_of_an_event_has_a_journal() -> None:
    model = WatchModel()
    model.set_journaled({B})
    model.add_events([event(EventKind.SENT)])
    assert model.journaled == {A, B}


# -- filter and pause ------------------------------------------------------------------------------


def test_the_filter_cycles_through_the_live_sessions_and_back_to_all() -> None:
    model = WatchModel()
    model.update_sessions([reg(A), reg(B, name="beta")], {}, 1)
    model.add_events(
        [
            event(EventKind.SENT, at=1),  # alpha → beta
            event(EventKind.SENT, at=2, sender=GAMMA, receiver=ALPHA, message_id=M2),
        ]
    )
    seen = []
    for _ in range(3):
        model.cycle_filter()
        seen.append((model.wanted, [row.message_id for row in model.rows()]))
    assert seen == [(A, [M2, M1]), (B, [M1]), (None, [M2, M1])]


@pytest.mark.parametrize("wanted", ["beta", B, B[:8], B[:6]])
def test_session_names_a_session_by_name_id_or_its_start(wanted: str) -> None:
    model = WatchModel(wanted=wanted)
    model.update_sessions([reg(A), reg(B, name="beta")], {}, 1)
    model.add_events([event(EventKind.SENT, message_id=M1, receiver=GAMMA), event(EventKind.SENT)])
    [row] = model.rows()
    assert row.receiver == BETA
    view = model.filter_session()
    assert view is not None
    assert view.instance_id == B
    # The next session after the one it named, then all.
    model.cycle_filter()
    assert model.wanted is None


def test_a_start_too_short_names_no_session() -> None:
    model = WatchModel(wanted=B[:5])
    model.add_events([event(EventKind.SENT)])
    assert model.rows() == ()


def test_a_paused_feed_keeps_its_rows_and_still_takes_events_in() -> None:
    model = WatchModel()
    model.add_events([event(EventKind.SENT, at=1)])
    model.toggle_pause()
    assert model.paused
    model.add_events([event(EventKind.SENT, at=2, message_id=M2)])
    model.add_events([event(EventKind.DELIVERED, at=3, writer="receiver")])
    [frozen] = model.rows()
    assert frozen.receiver_event is None
    assert model.size == 2
    model.toggle_pause()
    rows = model.rows()
    assert [row.message_id for row in rows] == [M1, M2]
    assert rows[0].receiver_event is not None


def test_whatever_changes_the_screen_raises_the_version() -> None:
    model = WatchModel()
    steps = [
        lambda: model.add_events([event(EventKind.SENT)]),
        lambda: model.update_sessions([reg()], {}, 1),
        lambda: model.set_journaled({A, B}),
        model.toggle_pause,
        model.cycle_filter,
        lambda: model.note_listing_problem("cannot list"),
    ]
    for step in steps:
        version = model.version
        step()
        assert model.version > version, step
    version = model.version
    model.add_events([])
    model.set_journaled({A, B})
    model.update_sessions([reg()], {}, 2)
    assert model.version == version


# -- the words of the line and JSON modes ----------------------------------------------------------


@pytest.mark.parametrize(
    ("last", "known", "shown"),
    [
        (event(EventKind.DELIVERED, writer="receiver"), True, "delivered"),
        (event(EventKind.REFUSED, code="busy"), True, "refused busy"),
        (None, True, "-"),
        (None, False, "unknown (no journal)"),
    ],
)
def test_each_ends_view_in_words(last: Event | None, known: bool, shown: str) -> None:
    assert journal_words.side_view(last, known=known) == shown


def test_session_lines_say_what_changed_with_peer_strings_escaped() -> None:
    hostile = live(
        name=HOSTILE,
        host="inbox\x1b]0;x\x07",
        inbound=InboundState.LATCHED,
        reason="turn failed\x1b[31m\nforged",
        goal=LiveGoal("g", "objective\x1b[2J"),
    )
    model = WatchModel()
    [appeared] = model.update_sessions([reg(name=HOSTILE)], {A: hostile}, 0)
    text = journal_words.session_line(appeared)
    assert "\x1b" not in text
    assert "\n" not in text
    assert "session evil\\x1b[2J\\x0aforged [bold red]line[/] [aaaaaa] appeared: " in text
    assert "inbox\\x1b]0;x\\x…, idle, latched (turn failed\\x1b[31m\\x0aforged)" in text
    assert "goal “objective\\x1b[2J”" in text

    [reopened] = model.update_sessions([reg(name=HOSTILE)], {A: replace(hostile, reason=None,
        inbound=InboundState.OPEN)}, 0)  # fmt: skip
    assert journal_words.session_line(reopened).endswith(
        " inbound: latched (turn failed\\x1b[31m\\x0aforged) → open"
    )
    [gone] = model.update_sessions([], {}, 0)
    assert journal_words.session_line(gone).endswith("[aaaaaa] is gone")


def test_a_session_without_live_state_is_said_to_have_no_journal() -> None:
    [appeared] = WatchModel(appear_grace_ms=0).update_sessions([reg()], {}, 0)
    assert journal_words.session_line(appeared).endswith("appeared: node?, idle, open, no journal")
    [remote] = WatchModel().update_sessions([reg(remote_machine="buildbox")], {}, 0)
    assert journal_words.session_line(remote).endswith("appeared: remote (buildbox), idle, open")


def test_a_session_change_as_json() -> None:
    model = WatchModel()
    model.update_sessions([reg()], {A: live()}, 0)
    [change] = model.update_sessions([reg()], {A: live(goal=GOAL)}, 7)
    data = journal_words.session_json(change)
    assert data == {
        "change": "goal",
        "at": 7,
        "instanceId": A,
        "name": "alpha",
        "kind": "inbox",
        "remoteMachine": None,
        "status": "idle",
        "inbound": "open",
        "reason": None,
        "queue": 0,
        "goal": {"id": "g-1", "objective": "ship the release"},
        "journal": True,
        "was": {**data["was"], "goal": None},
    }
    assert data["was"]["name"] == "alpha"
    # Printed like the rest of the command line's JSON: a peer's escapes escaped.
    printed = dumps({"name": HOSTILE})
    assert "\x1b" not in printed
    assert json.loads(printed) == {"name": HOSTILE}


# -- what the listing makes of a registration ------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "cwd", "machine"),
    [
        # A gateway's proxy: the machine ends its name and starts its cwd (docs/remote.md).
        ("bob@buildbox", "buildbox:/home/bob/w", "buildbox"),
        # A local session merely named with an '@', or naming a machine its cwd does not.
        ("bob@buildbox", "/home/bob/w", None),
        ("bob@buildbox", "other:/w", None),
        ("bob", "buildbox:/w", None),
        ("bob@", ":/w", None),
    ],
)
def test_a_remote_proxy_is_told_by_its_name_and_cwd(
    name: str, cwd: str, machine: str | None
) -> None:
    from pi_cross_session._internal.cli.watch_cmd import remote_machine_of
    from pi_cross_session._internal.protocol.registration import PublicPeer

    peer = PublicPeer.model_validate(
        {
            "version": 2,
            "protocol": 1,
            "id": "s-1",
            "instanceId": A,
            "name": name,
            "cwd": cwd,
            "pid": 42,
            "startedAt": 1,
            "updatedAt": 1,
            "status": "idle",
            "inbound": "accept",
            "socketPath": "/tmp/x.sock",
        }
    )
    assert remote_machine_of(peer) == machine
