"""Task ownership evidence: which goal each task belongs to, kept as a journal (goal-scoped-v1 §3).

While a goal is active, what a task-creating call creates belongs to that goal. The host adapter
notes the call before it runs (:meth:`TaskEvidence.note`) and attributes what its result names
(:meth:`TaskEvidence.settle`); a bind may name existing handles too. The evidence outlives its
goal (it only ever *revokes*: a handle of an ended goal is never driven by a new goal's members),
and is written to the host's session journal through ``on_record`` as plain entries, so that a
reload reads it back (:meth:`TaskEvidence.restore`). It never restores a grant.

**Bounded, failing closed.** At most ``max_evidence`` handles and as many pending call notes are
kept. Eviction prefers the evidence of ended goals; anything dropped is counted
(:attr:`TaskEvidence.evicted`), and the count travels with the journal, because once evidence was
lost a handle with no known owner may be an old goal's, and consumers must treat it so.

Journal entries, in the order :meth:`TaskEvidence.export` writes them:

* ``{"evictedEvidence": n}`` — evidence an earlier copy lost (first, when non-zero);
* ``{"kind", "id", "goalId", "confirmed"}`` — a handle's owner (:func:`ownership_entry`);
* ``{"callId", "goalId"}`` — a call noted and still waiting for its result (:func:`call_entry`);
* ``{"callId", "goalId", "settled": true}`` — that call's result came (:func:`settled_entry`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from pi_cross_session._internal.security.goals.bounds import (
    MAX_CALL_ID_CHARS,
    MAX_GOAL_EVIDENCE,
)
from pi_cross_session._internal.security.goals.errors import GoalError, GoalErrorCode
from pi_cross_session._internal.security.goals.ids import valid_id


class TaskKind(StrEnum):
    """Kinds of task handle a goal can own (a mesh run, a sub-agent)."""

    RUN = "run"
    AGENT = "agent"


@dataclass(frozen=True, slots=True)
class TaskHandle:
    """A task created by a task-creating tool; ``id`` matches ``[A-Za-z0-9_-]{1,128}``."""

    kind: TaskKind
    id: str


@dataclass(frozen=True, slots=True)
class TaskOwnership:
    """Evidence that ``handle`` was created under ``goal_id``; ``confirmed`` once the tool ran."""

    handle: TaskHandle
    goal_id: str
    confirmed: bool


@dataclass(frozen=True, slots=True)
class EvidenceImport:
    """What a restore did: entries taken and entries skipped as malformed."""

    imported: int
    rejected: int


class TaskEvidence:
    """The ownership of task handles and the notes of task-creating calls still running.

    ``active`` tells which goal is active now (its evidence is evicted last); ``on_record`` is told
    every new piece of evidence as a journal entry, never what was restored.
    """

    def __init__(
        self,
        *,
        active: Callable[[], str | None],
        max_evidence: int = MAX_GOAL_EVIDENCE,
        on_record: Callable[[dict[str, object]], None] | None = None,
    ) -> None:
        self._active = active
        self._max = max_evidence
        self._on_record = on_record
        self._owners: OrderedDict[TaskHandle, TaskOwnership] = OrderedDict()
        # Task-creating calls noted before they ran: call id -> the goal active then.
        self._calls: OrderedDict[str, str] = OrderedDict()
        self._evicted = 0

    # -- queries ----------------------------------------------------------------------------------

    @property
    def evicted(self) -> int:
        """Entries dropped to stay within the bound (ownership and call notes alike)."""
        return self._evicted

    def __len__(self) -> int:
        """Task handles with recorded ownership (call notes are not counted)."""
        return len(self._owners)

    def owner_of(self, handle: TaskHandle) -> str | None:
        """The goal ``handle`` was created under (pending or confirmed), or ``None``."""
        known = self._owners.get(handle)
        return None if known is None else known.goal_id

    def ownership(self, handle: TaskHandle) -> TaskOwnership | None:
        """The full evidence for ``handle``, or ``None``."""
        return self._owners.get(handle)

    def noted_goal(self, call_id: str) -> str | None:
        """The goal a pending task-creating call was noted under, if any."""
        return self._calls.get(call_id)

    def mentions(self, goal_id: str) -> bool:
        """True when some evidence or a pending call names ``goal_id`` (so it is never minted)."""
        return goal_id in self._calls.values() or any(
            o.goal_id == goal_id for o in self._owners.values()
        )

    # -- recording --------------------------------------------------------------------------------

    def note(self, call_id: str, goal_id: str) -> bool:
        """Note that what call ``call_id`` creates belongs to ``goal_id``; False for a call id
        that is not a short non-empty string (nothing is noted then)."""
        if not isinstance(call_id, str) or not 0 < len(call_id) <= MAX_CALL_ID_CHARS:
            return False
        self._calls[call_id] = goal_id
        self._calls.move_to_end(call_id)
        self._trim_calls()
        self._tell(call_entry(call_id, goal_id))
        return True

    def settle(self, call_id: str, handle: TaskHandle | None) -> str | None:
        """A noted call finished; ``handle`` is what it created (``None``: it failed or created
        nothing). The handle is attributed to the goal noted before the call ran, even when that
        goal has ended since (evidence, never a grant). Returns the handle's owner."""
        goal_id = self._calls.pop(call_id, None)
        if goal_id is None:
            return None
        owner = None if handle is None else self.attribute(handle, goal_id)
        # Journaled, so that a replay does not take the call for one still waiting for its result
        # (which would count as lost evidence for ever once there were more than the bound).
        self._tell(settled_entry(call_id, goal_id))
        return owner

    def attribute(self, handle: TaskHandle, goal_id: str) -> str:
        """Record confirmed evidence that ``handle`` belongs to ``goal_id``; the first owner on
        record wins. Returns the owner."""
        check_handle(handle)
        if not valid_id(goal_id):
            raise GoalError(GoalErrorCode.INVALID, "a goal id is malformed")
        known = self._owners.get(handle)
        if known is not None:
            if not known.confirmed and known.goal_id == goal_id:
                self._owners[handle] = TaskOwnership(handle, goal_id, confirmed=True)
                self._tell(ownership_entry(self._owners[handle]))
            return known.goal_id
        self.remember(TaskOwnership(handle, goal_id, confirmed=True))
        return goal_id

    def remember(self, ownership: TaskOwnership, *, restored: bool = False) -> None:
        """Keep ``ownership`` (replacing what was known of its handle), evicting past the bound;
        journaled unless it was ``restored`` from the journal."""
        self._owners[ownership.handle] = ownership
        while len(self._owners) > self._max:
            self._evict_one()
        if not restored:
            self._tell(ownership_entry(ownership))

    # -- the journal ------------------------------------------------------------------------------

    def export(self) -> tuple[dict[str, object], ...]:
        """All evidence as journal entries, oldest first: the loss marker, ownership entries,
        then the notes of calls whose result is still due (so that a late result after a reload
        is still attributed)."""
        lost = () if not self._evicted else ({"evictedEvidence": self._evicted},)
        return (
            *lost,
            *(ownership_entry(o) for o in self._owners.values()),
            *(call_entry(call_id, goal_id) for call_id, goal_id in self._calls.items()),
        )

    def restore(
        self, data: Iterable[Mapping[str, object]], *, seen_goal: Callable[[str], None]
    ) -> EvidenceImport:
        """Read journal entries back. Every goal id they name is passed to ``seen_goal`` (the
        state machine remembers it as ended). Malformed entries are skipped and counted; an
        entry for a handle already known keeps the earlier owner."""
        imported = rejected = 0
        entries = list(data)
        settled = {note[0] for note in map(_parse_settled, entries) if note is not None}
        for entry in entries:
            done = _parse_settled(entry)
            if done is not None:
                seen_goal(done[1])
                imported += 1
                continue
            note = _parse_call_note(entry)
            if note is not None:
                call_id, goal_id = note
                seen_goal(goal_id)
                if call_id not in settled:
                    self._calls.setdefault(call_id, goal_id)
                    self._trim_calls()
                imported += 1
                continue
            lost = _parse_evicted(entry)
            if lost is not None:
                self._evicted += lost
                imported += 1
                continue
            parsed = _parse_evidence(entry)
            if parsed is None:
                rejected += 1
                continue
            seen_goal(parsed.goal_id)
            if parsed.handle not in self._owners:
                self.remember(parsed, restored=True)
            imported += 1
        return EvidenceImport(imported, rejected)

    # -- internals --------------------------------------------------------------------------------

    def _trim_calls(self) -> None:
        # A forgotten call note is lost evidence like an evicted ownership entry: what its late
        # result creates will look unowned, so consumers must know to fail closed.
        while len(self._calls) > self._max:
            self._calls.popitem(last=False)
            self._evicted += 1

    def _tell(self, entry: dict[str, object]) -> None:
        if self._on_record is not None:
            self._on_record(entry)

    def _evict_one(self) -> None:
        # Evict evidence of ended goals first (oldest first): the active goal's records are what
        # lets its scoped turns drive their own tasks. Eviction is counted, see ``evicted``.
        active = self._active()
        victim = next((h for h, o in self._owners.items() if o.goal_id != active), None)
        if victim is None:
            victim = next(iter(self._owners))
        del self._owners[victim]
        self._evicted += 1


def check_handle(handle: TaskHandle) -> None:
    """Raise ``invalid_goal`` unless ``handle`` is a task handle with a well-formed id."""
    if not isinstance(handle, TaskHandle) or not valid_id(handle.id):
        raise GoalError(GoalErrorCode.INVALID, "a task handle id is malformed")


def ownership_entry(ownership: TaskOwnership) -> dict[str, object]:
    """The journal entry recording that a task handle belongs to a goal."""
    return {
        "kind": ownership.handle.kind.value,
        "id": ownership.handle.id,
        "goalId": ownership.goal_id,
        "confirmed": ownership.confirmed,
    }


def call_entry(call_id: str, goal_id: str) -> dict[str, object]:
    """The journal entry written before a task-creating call runs: what it creates belongs to
    ``goal_id`` (the handle follows in an :func:`ownership_entry` once the result names it)."""
    return {"callId": call_id, "goalId": goal_id}


def _parse_evicted(entry: Mapping[str, object]) -> int | None:
    """The count of an ``{"evictedEvidence": n}`` marker (evidence an earlier copy lost)."""
    if not isinstance(entry, Mapping) or set(entry) != {"evictedEvidence"}:
        return None
    count = entry["evictedEvidence"]
    return count if type(count) is int and count > 0 else None


def settled_entry(call_id: str, goal_id: str) -> dict[str, object]:
    """The journal entry written when a noted call's result came (whatever it created)."""
    return {"callId": call_id, "goalId": goal_id, "settled": True}


def _parse_settled(entry: Mapping[str, object]) -> tuple[str, str] | None:
    if not isinstance(entry, Mapping) or entry.get("settled") is not True:
        return None
    return _parse_call_note({k: v for k, v in entry.items() if k != "settled"})


def _parse_call_note(entry: Mapping[str, object]) -> tuple[str, str] | None:
    if not isinstance(entry, Mapping) or "callId" not in entry or "settled" in entry:
        return None
    call_id, goal_id = entry.get("callId"), entry.get("goalId")
    if not (isinstance(call_id, str) and 0 < len(call_id) <= MAX_CALL_ID_CHARS):
        return None
    if not valid_id(goal_id):
        return None
    assert isinstance(goal_id, str)
    return call_id, goal_id


def _parse_evidence(entry: Mapping[str, object]) -> TaskOwnership | None:
    if not isinstance(entry, Mapping):
        return None
    kind, handle_id, goal_id = entry.get("kind"), entry.get("id"), entry.get("goalId")
    confirmed = entry.get("confirmed", True)
    if not (isinstance(kind, str) and isinstance(handle_id, str) and isinstance(goal_id, str)):
        return None
    if (
        kind not in _TASK_KINDS
        or not valid_id(handle_id)
        or not valid_id(goal_id)
        or not isinstance(confirmed, bool)
    ):
        return None
    return TaskOwnership(TaskHandle(TaskKind(kind), handle_id), goal_id, confirmed)


_TASK_KINDS: Final = frozenset(k.value for k in TaskKind)


__all__ = [
    "EvidenceImport",
    "TaskEvidence",
    "TaskHandle",
    "TaskKind",
    "TaskOwnership",
    "call_entry",
    "check_handle",
    "ownership_entry",
    "settled_entry",
]
