"""Two real pi-python sessions talking to each other, each in its own process.

"alpha" and "beta" are each a real ``AgentHarness`` with this extension loaded and a scripted fake
chat model (demo/agent_session.py). They share a private, temporary agent dir; each has its own
temporary pi home (never ``~/.pi`` or ``~/.pi-python``); all of it is removed at the end.

* Act 1: alpha's user asks it to hand a task to beta; alpha lists the sessions and sends; beta's
  turn starts from the framed peer message, and beta answers alpha the same way.
* Act 2: beta is busy in a long tool call; alpha's message is ``queued`` and starts beta's next
  turn once the running one has ended.
* Act 3: beta's turn is aborted while a message waits: the abort latch drops it
  (``dropped_cancelled``), refuses new ones (``stopped``) until ``/cross-session-resume``.
* Act 4: alpha's user starts a goal and binds beta to it; beta's goal-scoped messages are
  ``submitted`` although alpha's lifetime budget is spent (an unscoped one is refused
  ``budget_exhausted``) and cost beta nothing in the end; once alpha's user completes the goal,
  beta's next scoped message is refused ``goal_not_authorized``.

The sessions run with lifetime budgets far below the contract's 256 (:data:`BUDGETS`), so that
act 4 can go past one in a few messages.

Each act prints both transcripts, the receipts and ``/cross-session-status``; the demo exits
non-zero if any expectation fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pi_cross_session._internal.protocol.io import environment

HERE = Path(__file__).resolve().parent
SESSION = HERE / "agent_session.py"
BOLD = "\033[1m" if sys.stdout.isatty() else ""
PLAIN = "\033[0m" if sys.stdout.isatty() else ""
#: How long an act waits for an expected event. Generous: a loaded machine may take many seconds
#: to start a Python process, and the wait ends at once when the event comes.
WAIT_S = 60.0
PEER_HEADER = "Message from another session"
#: Each session's lifetime message budget (the contract's is 256). Every send attempt and every
#: unscoped message admitted costs a unit: acts 1–3 spend 6 of alpha's (5 sends, beta's answer)
#: and 5 of beta's (its answer, 4 messages admitted), so act 4 starts with alpha's budget spent
#: and 3 units left to beta. Act 4 checks this first.
BUDGETS = {"alpha": 6, "beta": 8}
#: Act 4: beta's goal-scoped reports (more than beta's budget has units left) …
GOAL_WORK = (
    "reproduced the failure in test_parser.py",
    "found the cause: the tokenizer drops a trailing comment",
    "fixed the tokenizer",
    "added a regression test",
    "the whole parser suite passes",
    "nothing left to do; ready for your review",
)
ROUNDS = len(GOAL_WORK)
#: … and after this many of them, one unscoped note.
NOTE_AFTER = 3

Event = dict[str, Any]


class ActError(Exception):
    """An act's expectation did not hold."""


def heading(title: str) -> None:
    print(f"\n{BOLD}== {title}{PLAIN}", flush=True)


def short(text: str, limit: int = 110) -> str:
    line = " ⏎ ".join(part for part in text.strip().splitlines() if part)
    return line if len(line) <= limit else line[: limit - 1] + "…"


class Session:
    """One ``agent_session.py`` process: its events, and the control lines it is sent."""

    def __init__(self, name: str, root: Path, env: dict[str, str]) -> None:
        self.name = name
        home, work = root / f"pi-home-{name}", root / f"work-{name}"
        home.mkdir()
        work.mkdir()
        command = [sys.executable, str(SESSION), "--name", name, "--cwd", str(work)]
        self.process = subprocess.Popen(
            [*command, "--budget", str(BUDGETS[name])],
            env={**env, "PI_HOME": str(home)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.events: list[Event] = []
        self.stderr: list[str] = []
        self._lock = threading.Lock()
        self._new: queue.Queue[None] = queue.Queue()
        self.mark = 0
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()
        self.ready: Event = {}
        self.address = "?"

    def wait_ready(self) -> None:
        self.ready = self.wait_for(lambda e: e["event"] == "ready")
        self.address = str(self.ready["publishedName"])

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                event = {"event": "output", "line": line.rstrip()}
            with self._lock:
                self.events.append(event)
            self._new.put(None)
        self._new.put(None)

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr.append(line.rstrip())

    def send(self, **control: Any) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(control) + "\n")
        self.process.stdin.flush()

    def since(self, start: int) -> list[Event]:
        with self._lock:
            return list(self.events[start:])

    def wait_for(self, predicate: Callable[[Event], bool], start: int | None = None) -> Event:
        """The first event from ``start`` (default: this act's mark) that matches."""
        start = self.mark if start is None else start
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            for event in self.since(start):
                if predicate(event):
                    return event
            if self.process.poll() is not None and self._new.empty():
                tail = "\n".join(self.stderr[-20:])
                raise ActError(
                    f"{self.name} exited early (code {self.process.returncode}):\n{tail}"
                )
            with contextlib.suppress(queue.Empty):
                self._new.get(timeout=0.1)
        raise ActError(f"{self.name}: the expected event did not come within {WAIT_S:g} s")

    def index_of(self, event: Event) -> int:
        with self._lock:
            return next(i for i, e in enumerate(self.events) if e is event)

    def turn_end(self, turn: int) -> Event:
        return self.wait_for(lambda e: e["event"] == "turn_end" and e["turn"] == turn)

    def turn_start(self, provenance: str) -> Event:
        return self.wait_for(lambda e: e["event"] == "turn_start" and e["provenance"] == provenance)

    def command(self, text: str, *, hidden: bool = False) -> str:
        """Run a slash command; a ``hidden`` one is left out of the transcript (printed apart)."""
        start = len(self.since(0))
        self.send(prompt=text)
        event = self.wait_for(lambda e: e["event"] == "command" and e["command"] == text, start)
        if hidden:
            event["hidden"] = True
        return str(event["output"])

    def status(self) -> dict[str, Any]:
        """``/cross-session-status --json``, parsed."""
        data: dict[str, Any] = json.loads(self.command("/cross-session-status --json"))
        return data

    def receipt(self, start: int) -> dict[str, Any]:
        """The details of the next ``send_pi_message`` result after event ``start``."""
        event = self.wait_for(
            lambda e: e["event"] == "tool_result" and e["tool"] == "send_pi_message", start
        )
        details: dict[str, Any] = event.get("details") or {}
        return details

    def stop(self) -> int:
        if self.process.poll() is None:
            try:
                self.send(exit=True)
                return self.process.wait(timeout=15)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
        return self.process.wait()


# -- printing --------------------------------------------------------------------------------


def stop_reasons(reasons: list[Any]) -> str:
    """``toolUse, stop``; a run of more than two equal reasons as ``toolUse ×16``."""
    runs: list[list[Any]] = []
    for reason in reasons:
        if runs and runs[-1][0] == reason:
            runs[-1][1] += 1
        else:
            runs.append([reason, 1])
    parts = [f"{r} ×{n}" if n > 2 else ", ".join([str(r)] * n) for r, n in runs]
    return ", ".join(parts)


def describe(event: Event) -> str | None:
    """One transcript line for an event, or None for events not worth a line."""
    kind = event["event"]
    if kind == "turn_start":
        who = "the user" if event["provenance"] == "user" else f"a PEER ({event.get('from')})"
        line = f"▶ turn {event['turn']} starts, opened by {who}"
        if event["provenance"] == "peer":
            line += f" — custom message {event.get('customType')!r}, id {event.get('messageId')}"
        return line
    if kind == "model_input":
        if event["role"] == "system" or event["role"] == "tool":
            return None  # the tool's result has its own line
        text = event["text"]
        if text.startswith(PEER_HEADER):
            # Header, the opening marker, the fenced text, the closing marker, the notice.
            lines = text.splitlines()
            body = short(" ".join(lines[2:-2]) if len(lines) > 4 else text, 90)
            notice = short(lines[-1], 60) if lines else ""
            return f"  model reads: {lines[0]}\n           …  {body}\n           …  {notice}"
        return f"  model reads ({event['role']}): {short(text)}"
    if kind == "model_reply":
        if "tool" in event:
            return f"  model calls {event['tool']}({short(json.dumps(event['args']), 100)})"
        return f"  model says: {short(event['text'])}"
    if kind == "tool_result":
        details = event.get("details") or {}
        flag = " [error]" if event["isError"] else ""
        if event["tool"] == "send_pi_message":
            status = details.get("status")
            return f"  ← send_pi_message{flag}: status={status!r} · {short(event['text'], 80)}"
        return f"  ← {event['tool']}{flag}: {short(event['text'])}"
    if kind == "tool_waiting":
        return f"  … {event['tool']} is running (the turn stays busy)"
    if kind == "aborting":
        return "  ✖ the user aborts the running turn"
    if kind == "turn_end":
        return f"■ turn {event['turn']} ends ({stop_reasons(event['stopReasons'])})"
    if kind == "command":
        body = "\n".join(f"      {line}" for line in event["output"].splitlines()[:14])
        return f"$ {event['command']}\n{body}"
    if kind == "notice":
        return f"  (notice to the user: {short(event['text'], 90)})"
    if kind in ("error", "output"):
        return f"  !! {event}"
    return None


def transcript(session: Session) -> None:
    print(f"  -- {session.name} ({session.address}) --")
    for event in session.since(session.mark):
        if event["event"] == "command" and (
            event["command"].endswith("--json") or event.get("hidden")
        ):
            continue  # the demo's own checks; the readable form is printed below
        line = describe(event)
        if line is not None:
            for part in line.splitlines():
                print(f"  {session.name:>5} | {part}")


def show_status(session: Session) -> dict[str, Any]:
    """Print ``/cross-session-status`` as the user sees it; return its ``--json`` form."""
    print(f"  {session.name:>5} $ /cross-session-status")
    for line in session.command("/cross-session-status").splitlines():
        print(f"  {'':>5}     {line}")
    return session.status()


def receipts(pairs: list[tuple[str, dict[str, Any]]]) -> None:
    print("  receipts:")
    for label, details in pairs:
        shown = {k: details.get(k) for k in ("status", "messageId", "retryable") if k in details}
        print(f"    {label}: {json.dumps(shown)}")


def expect(condition: bool, what: str, failures: list[str]) -> None:
    print(f"  {'✓' if condition else '✗ FAILED:'} {what}")
    if not condition:
        failures.append(what)


def verdict(failures: list[str], began: float, passed: str) -> int:
    """Print how the demo ended and how long it took; the process's exit status."""
    took = time.monotonic() - began
    if failures:
        print(f"\n{BOLD}demo FAILED ({len(failures)} expectation(s), {took:.1f} s){PLAIN}")
        for failure in failures:
            print(f"  - {failure}")
        return 1
    print(f"\n{BOLD}{passed} ({took:.1f} s){PLAIN}")
    return 0


def start_act(*sessions: Session) -> None:
    for session in sessions:
        session.mark = len(session.since(0))


def finish_act(title: str, sessions: tuple[Session, ...], extra: Callable[[], None]) -> None:
    print(f"\n  {BOLD}transcripts{PLAIN}")
    for session in sessions:
        transcript(session)
    extra()


# -- the acts ----------------------------------------------------------------------------------


def send_call(
    target: str, message: str, summary: str, goal_id: str | None = None
) -> dict[str, Any]:
    args = {"target": target, "message": message, "summary": summary}
    if goal_id is not None:
        args["goalId"] = goal_id
    return {"name": "send_pi_message", "args": args}


def goal_call(action: str, **args: Any) -> dict[str, Any]:
    return {"name": "peer_goal", "args": {"action": action, **args}}


#: The lines of ``/cross-session-status`` act 4 is about.
GOAL_STATUS_LINES = (
    "Budget:",
    "Refused:",
    "Goal:",
    "  bound peers:",
    "  last ended:",
    "  confirmed",
)


def goal_status_lines(session: Session, when: str, text: str) -> None:
    print(f"  {session.name:>5} $ /cross-session-status   ({when}; budget and goal lines)")
    for line in text.splitlines():
        if line.startswith(GOAL_STATUS_LINES):
            print(f"  {'':>5}     {line}")


def act1(alpha: Session, beta: Session, failures: list[str]) -> None:
    heading("Act 1: alpha hands a task to beta, beta reports back")
    start_act(alpha, beta)
    task = "Please list the TODOs left in parser.py and tell me how many there are."
    alpha.send(
        script=[
            {"on": "user", "call": {"name": "list_pi", "args": {}}},
            {"on": "tool:list_pi", "call": send_call(beta.address, task, "TODOs in parser.py")},
            {"on": "tool:send_pi_message", "say": "I asked beta to count the TODOs."},
            {"on": "peer", "say": "Beta reports 3 TODOs in parser.py; noted."},
        ]
    )
    beta.send(
        script=[
            {
                "on": "peer",
                "contains": "TODOs",
                "call": send_call(alpha.address, "3 TODOs left in parser.py.", "TODO count"),
            },
            {"on": "tool:send_pi_message", "say": "Answered alpha."},
        ]
    )
    alpha.send(prompt=f"Ask the session {beta.address} to count the TODOs in parser.py.")
    first = alpha.receipt(alpha.mark)
    beta_turn = beta.turn_start("peer")
    reply = beta.receipt(beta.mark)
    beta.wait_for(lambda e: e["event"] == "turn_end")
    alpha_peer = alpha.turn_start("peer")
    alpha.wait_for(
        lambda e: e["event"] == "turn_end" and e["turn"] == alpha_peer["turn"],
    )
    listing = alpha.wait_for(lambda e: e["event"] == "tool_result" and e["tool"] == "list_pi")
    framed = beta.wait_for(
        lambda e: e["event"] == "model_input" and e["text"].startswith(PEER_HEADER)
    )

    def extra() -> None:
        receipts([("alpha → beta", first), ("beta → alpha", reply)])
        print("  the peer message exactly as beta's model read it:")
        for line in framed["text"].splitlines():
            print(f"    | {line}")
        show_status(alpha)
        show_status(beta)
        print("  checks:")
        expect(beta.address in listing["text"], "alpha's list_pi shows beta", failures)
        expect(first.get("status") == "submitted", "alpha's send is submitted", failures)
        expect(
            beta_turn["provenance"] == "peer" and beta_turn.get("from") == alpha.address,
            "beta's turn starts from alpha's peer message (a custom 'cross-session' message)",
            failures,
        )
        expect(
            f'"{alpha.address}"' in framed["text"].splitlines()[0]
            and task in framed["text"]
            and "not by your user" in framed["text"],
            "beta's model reads it framed as peer text (header, text, notice)",
            failures,
        )
        expect(
            reply.get("status") in ("submitted", "queued"),
            f"beta's answer is accepted ({reply.get('status')})",
            failures,
        )
        expect(
            alpha_peer["provenance"] == "peer", "a turn starts on alpha from the answer", failures
        )

    finish_act("act 1", (alpha, beta), extra)


def act2(alpha: Session, beta: Session, failures: list[str]) -> None:
    heading("Act 2: beta is busy; alpha's message is queued, then starts beta's next turn")
    start_act(alpha, beta)
    beta.send(
        script=[
            {"on": "user", "call": {"name": "long_job", "args": {}}},
            {"on": "tool:long_job", "say": "The long job is done."},
            {"on": "peer", "contains": "CI", "say": "Thanks, I saw that CI is green."},
        ]
    )
    alpha.send(
        script=[
            {"on": "user", "call": send_call(beta.address, "FYI: CI is green again.", "CI green")},
            {"on": "tool:send_pi_message", "say": "Told beta."},
        ]
    )
    beta.send(prompt="Run the long job.")
    user_turn = beta.turn_start("user")
    beta.wait_for(lambda e: e["event"] == "tool_waiting")
    alpha.send(prompt="Tell beta that CI is green.")
    queued = alpha.receipt(alpha.mark)
    alpha.wait_for(lambda e: e["event"] == "turn_end")
    beta.send(release=True)
    ended = beta.turn_end(user_turn["turn"])
    peer_turn = beta.turn_start("peer")
    beta.turn_end(peer_turn["turn"])

    def extra() -> None:
        receipts([("alpha → beta (beta busy)", queued)])
        show_status(alpha)
        status = show_status(beta)
        print("  checks:")
        expect(
            queued.get("status") == "queued", "alpha's send while beta is busy is queued", failures
        )
        expect(
            beta.index_of(ended) < beta.index_of(peer_turn),
            "the queued message starts a new turn only after beta's turn ended",
            failures,
        )
        expect(
            peer_turn.get("messageId") == queued.get("messageId"),
            "that turn opens with the queued message",
            failures,
        )
        states = {m["messageId"]: m["state"] for m in status.get("messages", [])}
        expect(
            states.get(queued.get("messageId")) == "submitted",
            "beta's status shows it submitted",
            failures,
        )

    finish_act("act 2", (alpha, beta), extra)


def act3(alpha: Session, beta: Session, failures: list[str]) -> None:
    heading("Act 3: an abort latches beta's inbox until /cross-session-resume")
    start_act(alpha, beta)
    beta.send(
        script=[
            {"on": "user", "call": {"name": "long_job", "args": {}}},
            {"on": "peer", "contains": "back", "say": "Welcome back, alpha."},
        ]
    )
    messages = [
        ("One more thing about the release notes.", "release notes", "Queued for beta."),
        ("Are you there?", "ping", "Beta's inbox is stopped; it refused the message."),
        ("You are back: the release is tomorrow.", "release date", "Delivered to beta."),
    ]
    rules: list[dict[str, Any]] = []
    for text, summary, answer in messages:
        rules.append({"on": "user", "call": send_call(beta.address, text, summary)})
        rules.append({"on": "tool:send_pi_message", "say": answer})
    alpha.send(script=rules)

    def alpha_sends(prompt: str) -> dict[str, Any]:
        start = len(alpha.since(0))
        alpha.send(prompt=prompt)
        details = alpha.receipt(start)
        alpha.wait_for(lambda e: e["event"] == "turn_end", start)
        return details

    beta.send(prompt="Run the long job again.")
    user_turn = beta.turn_start("user")
    beta.wait_for(lambda e: e["event"] == "tool_waiting")
    queued = alpha_sends("Send beta a note about the release notes.")
    beta.send(abort=True)
    ended = beta.turn_end(user_turn["turn"])
    beta.command("/cross-session-status")  # shown in beta's transcript
    latched = beta.status()
    stopped = alpha_sends("Ask beta whether it is there.")
    resumed = beta.command("/cross-session-resume")
    after = alpha_sends("Tell beta the release date.")
    peer_turn = beta.turn_start("peer")
    beta.turn_end(peer_turn["turn"])

    def extra() -> None:
        receipts(
            [
                ("alpha → beta (beta busy)", queued),
                ("alpha → beta (after the abort)", stopped),
                ("alpha → beta (after resume)", after),
            ]
        )
        states = {m["messageId"]: m["state"] for m in latched.get("messages", [])}
        print(
            f"  beta status right after the abort: stopped={latched.get('stopped')}, "
            f"queued message → {states.get(queued.get('messageId'))}"
        )
        show_status(alpha)
        status = show_status(beta)
        print("  checks:")
        expect(queued.get("status") == "queued", "the first send is queued (beta busy)", failures)
        expect(ended["stopReasons"][-1:] == ["aborted"], "beta's turn ends aborted", failures)
        expect(
            latched.get("stopped") is True
            and states.get(queued.get("messageId")) == "dropped_cancelled",
            "the latch drops the queued message (dropped_cancelled) and closes the inbox",
            failures,
        )
        expect(stopped.get("status") == "stopped", "the next send is refused 'stopped'", failures)
        expect(resumed.startswith("Inbox reopened"), "/cross-session-resume reopens", failures)
        expect(after.get("status") == "submitted", "a later send is submitted", failures)
        expect(
            peer_turn.get("messageId") == after.get("messageId"),
            "and starts a turn on beta",
            failures,
        )
        expect(status.get("stopped") is False, "beta's inbox is open again", failures)

    finish_act("act 3", (alpha, beta), extra)


def act4(alpha: Session, beta: Session, failures: list[str]) -> None:
    heading("Act 4: a goal — beta's scoped messages go past the budget until alpha completes it")
    start_act(alpha, beta)
    alpha_before, beta_before = alpha.status(), beta.status()
    print(
        f"  budgets left: alpha {alpha_before.get('remainingBudget')} of {BUDGETS['alpha']}, "
        f"beta {beta_before.get('remainingBudget')} of {BUDGETS['beta']} "
        f"(acts 1–3 spent the rest; the contract's budget is 256)"
    )
    beta_id = str(beta.ready["instanceId"])
    objective = "Make the parser test suite pass again."
    alpha.send(
        script=[
            {"on": "user", "contains": "goal", "call": goal_call("start", objective=objective)},
            {"on": "tool:peer_goal", "call": {"name": "list_pi", "args": {}}},
            {
                "on": "tool:list_pi",
                "call": goal_call("bind", goalId="{{goalId}}", peerIds=[beta_id]),
            },
            {"on": "tool:peer_goal", "say": "Goal started; beta is bound to it."},
        ]
    )
    start = len(alpha.since(0))
    alpha.send(prompt=f"Start a goal to make the parser tests pass, and bind {beta.address} to it.")
    started = alpha.wait_for(
        lambda e: e["event"] == "tool_result" and e["tool"] == "peer_goal", start
    )
    bound = alpha.wait_for(
        lambda e: e["event"] == "tool_result" and e["tool"] == "peer_goal",
        alpha.index_of(started) + 1,
    )
    alpha.wait_for(lambda e: e["event"] == "turn_end", start)
    goal_id = str((bound.get("details") or {}).get("goalId"))
    bound_text = alpha.command("/cross-session-status", hidden=True)

    # The demo tells beta the goal id, as it tells each model its peer's address.
    steps: list[tuple[str, str, str | None]] = [
        (f"step {i}/{ROUNDS} [goal]", f"Step {i}/{ROUNDS}: {done}.", goal_id)
        for i, done in enumerate(GOAL_WORK, 1)
    ]
    steps.insert(
        NOTE_AFTER, ("a side note [no goal]", "Unrelated: the CI cache is cold today.", None)
    )
    steps.append(("after complete [goal]", "One more idea: shall I tidy the lexer too?", goal_id))
    rules: list[dict[str, Any]] = [
        {"on": "user", "contains": goal_id, "call": {"name": "long_job", "args": {}}}
    ]
    for index, (label, text, scoped) in enumerate(steps):
        rules.append({"on": "tool:long_job", "call": send_call(alpha.address, text, label, scoped)})
        last = index == len(steps) - 1
        rules.append(
            {"on": "tool:send_pi_message", "say": "Alpha's goal is over; I stop here."}
            if last
            else {"on": "tool:send_pi_message", "call": {"name": "long_job", "args": {}}}
        )
    beta.send(script=rules)
    alpha.send(
        script=[
            {"on": "peer", "contains": f"Step {i}/{ROUNDS}", "say": f"Noted step {i}."}
            for i in range(1, ROUNDS + 1)
        ]
        + [
            {
                "on": "user",
                "contains": "complete",
                "call": goal_call("complete", goalId="{{goalId}}"),
            },
            {"on": "tool:peer_goal", "say": "Goal complete; beta's grant has ended."},
        ]
    )

    # Beta works (long_job) between its reports; each is released once alpha's turn for the
    # previous one has ended, so that every report finds alpha idle.
    cursor = len(beta.since(0))
    beta.send(prompt=f"Work on alpha's goal {goal_id} and report each step to {alpha.address}.")
    sent: list[tuple[str, Event, Event | None]] = []
    completed: Event = {}
    for index, (label, _text, _scoped) in enumerate(steps):
        waiting = beta.wait_for(lambda e: e["event"] == "tool_waiting", cursor)
        if index == len(steps) - 1:
            mark = len(alpha.since(0))
            alpha.send(prompt="The parser tests pass now: complete the goal.")
            completed = alpha.wait_for(
                lambda e: e["event"] == "tool_result" and e["tool"] == "peer_goal", mark
            )
            alpha.wait_for(lambda e: e["event"] == "turn_end", mark)
        cursor = beta.index_of(waiting) + 1
        beta.send(release=True)
        result = beta.wait_for(
            lambda e: e["event"] == "tool_result" and e["tool"] == "send_pi_message", cursor
        )
        details = result.get("details") or {}
        turn = None
        if details.get("status") == "submitted":
            message_id = details["messageId"]
            turn = alpha.wait_for(
                lambda e, m=message_id: e["event"] == "turn_start" and e.get("messageId") == m
            )
            alpha.turn_end(turn["turn"])
        sent.append((label, result, turn))
        cursor = beta.index_of(result) + 1
    beta.wait_for(lambda e: e["event"] == "turn_end", cursor)
    framed = alpha.wait_for(
        lambda e: e["event"] == "model_input" and e["text"].startswith(PEER_HEADER)
    )

    def extra() -> None:
        print("  receipts (beta → alpha; beta's budget left after each send):")
        for label, result, _turn in sent:
            details = result.get("details") or {}
            shown = {k: details.get(k) for k in ("status", "messageId")}
            print(f"    {label:<22} {json.dumps(shown)} · beta budget {result.get('budget')}")
        print("  a scoped message as alpha's model read it (the notice replaces the usual one):")
        for line in framed["text"].splitlines():
            print(f"    | {line}")
        ended_text = alpha.command("/cross-session-status")
        goal_status_lines(alpha, "after the bind", bound_text)
        goal_status_lines(alpha, "at the end", ended_text)
        final = alpha.status()
        print("  checks:")
        expect(
            alpha_before.get("remainingBudget") == 0 and beta_before.get("remainingBudget") == 3,
            "the act starts with alpha's budget spent and 3 units left to beta",
            failures,
        )
        start_view = started.get("details") or {}
        expect(
            start_view.get("objective") == objective and bool(start_view.get("goalId")),
            "alpha's user turn starts the goal (peer_goal start)",
            failures,
        )
        expect(
            (bound.get("details") or {}).get("peerIds") == [beta_id]
            and f"Goal: {goal_id}" in bound_text
            and f"bound peers: {beta_id[:8]}" in bound_text,
            "and binds beta by its runtime id (peer_goal bind); alpha's status shows it",
            failures,
        )
        scoped = [(r, t) for label, r, t in sent[:-1] if label.endswith("[goal]")]
        expect(
            len(scoped) == ROUNDS
            and all((r.get("details") or {}).get("status") == "submitted" for r, _ in scoped),
            f"all {ROUNDS} scoped reports are submitted, though alpha's budget is 0",
            failures,
        )
        expect(
            all(
                t is not None and t["provenance"] == "peer" and t.get("from") == beta.address
                for _, t in scoped
            )
            and f"bound to the goal {goal_id}" in framed["text"],
            "each starts a turn on alpha, framed as the work of a peer bound to the goal",
            failures,
        )
        note = next(r for label, r, _ in sent if label.endswith("[no goal]"))
        note_details = note.get("details") or {}
        expect(
            note_details.get("status") == "budget_exhausted"
            and note_details.get("messageWritten") is True
            and (final.get("refusals") or {}).get("budget_exhausted") == 1,
            "beta's unscoped note is refused budget_exhausted by alpha (the receiver)",
            failures,
        )
        left = beta_before.get("remainingBudget", 0)
        budgets = [r.get("budget") for r, _ in scoped]
        expect(
            budgets == [left] * NOTE_AFTER + [left - 1] * (ROUNDS - NOTE_AFTER)
            and note.get("budget") == left - 1,
            f"beta's budget is refunded for each scoped send: {ROUNDS} sent with {left} units "
            "left, only the unscoped note cost one",
            failures,
        )
        expect(
            final.get("remainingBudget") == 0
            and final.get("admitted", 0) - alpha_before.get("admitted", 0) == ROUNDS,
            f"alpha admitted the {ROUNDS} scoped reports and its budget stayed at 0",
            failures,
        )
        expect(
            (completed.get("details") or {}).get("goalId", "?") is None
            and "Goal: none" in ended_text
            and f"last ended: {goal_id} (completed)" in ended_text,
            "alpha's user completes the goal (peer_goal complete)",
            failures,
        )
        last = sent[-1][1].get("details") or {}
        expect(
            last.get("status") == "goal_not_authorized"
            and (final.get("refusals") or {}).get("goal_not_authorized") == 1,
            "beta's next scoped send is refused goal_not_authorized by alpha",
            failures,
        )

    finish_act("act 4", (alpha, beta), extra)


def main() -> int:
    began = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="xs-agents-demo-"))
    agent_dir = root / "agent"
    agent_dir.mkdir()
    env = {
        **os.environ,
        "PI_CODING_AGENT_DIR": str(agent_dir),
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("PI_CROSS_SESSION_INBOUND", None)
    runtime_dir = environment.resolve(env={"PI_CODING_AGENT_DIR": str(agent_dir)}).runtime_dir
    sessions: list[Session] = []
    failures: list[str] = []
    try:
        heading("Two pi-python sessions start, each in its own process")
        sessions = [Session(name, root, env) for name in ("alpha", "beta")]
        alpha, beta = sessions
        try:
            for session in sessions:
                session.wait_ready()
                ready = session.ready
                print(
                    f"  {session.name}: pid {ready['pid']}, publishes as {session.address} "
                    f"[{str(ready['instanceId'])[:8]}], session {ready['sessionId']}"
                )
            print(
                f"  lifetime message budgets, lowered for the demo: alpha {BUDGETS['alpha']}, "
                f"beta {BUDGETS['beta']} units (the contract's is 256)"
            )
        except ActError as exc:
            failures.append(f"start: {exc}")
            print(f"  ✗ FAILED: {exc}")
        for act in () if failures else (act1, act2, act3, act4):
            try:
                act(alpha, beta, failures)
            except ActError as exc:
                failures.append(f"{act.__name__}: {exc}")
                print(f"  ✗ FAILED: {exc}")
                for session in sessions:
                    transcript(session)
                break
        heading("Both sessions close; their registrations and sockets are removed")
        for session in sessions:
            print(f"  {session.name} exited with {session.stop()}")
            if session.process.returncode != 0:
                failures.append(f"{session.name} exited with {session.process.returncode}")
        left = sorted(p.name for p in (agent_dir / "peers").glob("*.json"))
        sockets = sorted(p.name for p in Path(runtime_dir).glob("*.sock"))
        print(f"  registrations left: {left or 'none'}; sockets left: {sockets or 'none'}")
        if left or sockets:
            failures.append("registrations or sockets were left behind")
    finally:
        for session in sessions:
            session.stop()
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(runtime_dir, ignore_errors=True)
    return verdict(failures, began, "demo finished: all expectations held")


if __name__ == "__main__":
    raise SystemExit(main())
