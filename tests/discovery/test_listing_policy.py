"""What a listing does with each registration (protocol/listing_policy.py), as tables.

One row per combination of facts a listing can reach, from the file name to the reap; the facts
a listing never gathers (a later stage once a bucket is decided) are checked to change nothing.
"""

from __future__ import annotations

import dataclasses
import errno
import itertools
from collections.abc import Callable, Iterator

import pytest

from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.errors import CrossSessionError
from pi_cross_session._internal.protocol.io.discovery import Listing
from pi_cross_session._internal.protocol.listing_policy import (
    Answer,
    Facts,
    Read,
    Reap,
    Verdict,
    at_limit,
    judge,
    newest_first,
    probe_failure,
    read_failure,
)
from pi_cross_session._internal.protocol.paths import locations_for
from pi_cross_session._internal.protocol.registration import Registration, build_registration

VALID = Facts(read=Read.VALID)
SILENT = dataclasses.replace(VALID, answer=Answer.SILENT)
FAULT = dataclasses.replace(VALID, answer=Answer.FAULT)


def dead(failed: Facts, reap: Reap | None = None) -> Facts:
    return dataclasses.replace(failed, pid_dead=True, reap=reap)


#: name: (facts, verdict)
ROWS: dict[str, tuple[Facts, Verdict]] = {
    # the name
    "a name that is no registration's is invalid": (Facts(named=False), Verdict.INVALID),
    "a name that is no registration's is invalid, never self": (
        Facts(named=False, is_self=True),
        Verdict.INVALID,
    ),
    "our own registration is never read": (Facts(is_self=True), Verdict.SELF),
    "another session's registration is read": (Facts(), Verdict.READ),
    # the read
    "a file the checks refuse is unsafe": (Facts(read=Read.UNSAFE), Verdict.UNSAFE),
    "a vanished or refused file is unreadable": (Facts(read=Read.UNREADABLE), Verdict.UNREADABLE),
    "bad content is invalid": (Facts(read=Read.INVALID), Verdict.INVALID),
    "a read we were too short to make is unchecked": (
        Facts(read=Read.SHORTAGE),
        Verdict.UNCHECKED,
    ),
    "a valid registration is probed": (VALID, Verdict.PROBE),
    # the probe
    "a peer answering ready is live": (
        dataclasses.replace(VALID, answer=Answer.READY),
        Verdict.LIVE,
    ),
    "a probe we were too short to make is unchecked, never hidden or reaped": (
        dataclasses.replace(VALID, answer=Answer.SHORTAGE),
        Verdict.UNCHECKED,
    ),
    "a silent peer's pid is asked about": (SILENT, Verdict.ASK_KERNEL),
    "a faulted probe's peer's pid is asked about": (FAULT, Verdict.ASK_KERNEL),
    # the kernel
    "a silent peer not proven dead is hidden": (
        dataclasses.replace(SILENT, pid_dead=False),
        Verdict.HIDDEN,
    ),
    "a faulted probe's peer not proven dead is hidden": (
        dataclasses.replace(FAULT, pid_dead=False),
        Verdict.HIDDEN,
    ),
    "a silent peer proven dead is to be reaped": (dead(SILENT), Verdict.REAP),
    "a faulted probe's peer proven dead is to be reaped": (dead(FAULT), Verdict.REAP),
    # the reap
    "a silent dead peer whose files went is reaped": (dead(SILENT, Reap.REMOVED), Verdict.REAPED),
    "a silent dead peer behind a busy lock is deferred": (
        dead(SILENT, Reap.LOCK_BUSY),
        Verdict.REAP_DEFERRED,
    ),
    "a silent dead peer behind a broken lock is deferred": (
        dead(SILENT, Reap.LOCK_FAILED),
        Verdict.REAP_DEFERRED,
    ),
    "a silent dead peer whose removal failed is deferred": (
        dead(SILENT, Reap.REMOVE_FAILED),
        Verdict.REAP_DEFERRED,
    ),
    "a faulted dead peer whose files went is reaped": (dead(FAULT, Reap.REMOVED), Verdict.REAPED),
    "a faulted dead peer behind a busy lock is deferred": (
        dead(FAULT, Reap.LOCK_BUSY),
        Verdict.REAP_DEFERRED,
    ),
    "a faulted dead peer behind a broken lock is deferred": (
        dead(FAULT, Reap.LOCK_FAILED),
        Verdict.REAP_DEFERRED,
    ),
    "a faulted dead peer whose removal failed is deferred": (
        dead(FAULT, Reap.REMOVE_FAILED),
        Verdict.REAP_DEFERRED,
    ),
}


@pytest.mark.parametrize("name", list(ROWS))
def test_a_registration_goes_where_the_table_says(name: str) -> None:
    facts, verdict = ROWS[name]
    assert judge(facts) is verdict


#: Each step and the facts it may find out, from the facts that led to it.
NEXT: dict[Verdict, Callable[[Facts], list[Facts]]] = {
    Verdict.READ: lambda facts: [dataclasses.replace(facts, read=r) for r in Read],
    Verdict.PROBE: lambda facts: [dataclasses.replace(facts, answer=a) for a in Answer],
    Verdict.ASK_KERNEL: lambda facts: [
        dataclasses.replace(facts, pid_dead=dead) for dead in (False, True)
    ],
    Verdict.REAP: lambda facts: [dataclasses.replace(facts, reap=r) for r in Reap],
}


def reachable() -> Iterator[Facts]:
    """Every combination of facts a listing can gather, following the policy's own steps."""
    pending = [Facts(named=n, is_self=s) for n, s in itertools.product((False, True), repeat=2)]
    while pending:
        facts = pending.pop()
        yield facts
        step = NEXT.get(judge(facts))
        if step is not None:
            pending.extend(step(facts))


def test_the_table_has_every_combination_a_listing_can_reach() -> None:
    assert {facts for facts, _ in ROWS.values()} == set(reachable())


def test_every_step_finds_out_one_fact_and_every_other_verdict_is_a_bucket() -> None:
    assert {verdict for verdict in Verdict if not verdict.final} == NEXT.keys()
    assert {verdict for _, verdict in ROWS.values()} == set(Verdict)


def test_each_bucket_but_live_and_self_is_a_listing_counter() -> None:
    counters = {f.name for f in dataclasses.fields(Listing)}
    buckets = {v.value for v in Verdict if v.final} - {Verdict.LIVE.value, Verdict.SELF.value}
    assert buckets <= counters


def test_facts_past_a_bucket_change_nothing() -> None:
    later = itertools.product((None, *Read), (None, *Answer), (None, False, True), (None, *Reap))
    for (facts, verdict), (read, answer, pid_dead, reap) in itertools.product(
        ROWS.values(), list(later)
    ):
        if not verdict.final:
            continue
        known = {k: v for k, v in dataclasses.asdict(facts).items() if v is not None}
        extra = dataclasses.replace(facts, read=read, answer=answer, pid_dead=pid_dead, reap=reap)
        extra = dataclasses.replace(extra, **known)
        assert judge(extra) is verdict, (facts, extra)


def err(code: str, *, cause: BaseException | None = None) -> CrossSessionError:
    exc = CrossSessionError("x", code=code)
    exc.__cause__ = cause
    return exc


def chained(exc: BaseException, cause: BaseException) -> BaseException:
    exc.__cause__ = cause
    return exc


@pytest.mark.parametrize(
    ("exc", "read"),
    [
        pytest.param(err(Code.UNSAFE_ENDPOINT), Read.UNSAFE, id="refused by the file checks"),
        pytest.param(
            err(Code.UNSAFE_ENDPOINT, cause=OSError(errno.EMFILE, "x")),
            Read.UNSAFE,
            id="the checks' refusal wins over a shortage behind it",
        ),
        pytest.param(err("EMFILE"), Read.SHORTAGE, id="out of descriptors"),
        pytest.param(err("ENFILE"), Read.SHORTAGE, id="the system out of descriptors"),
        pytest.param(err("ENOMEM"), Read.SHORTAGE, id="out of memory"),
        pytest.param(
            err("EIO", cause=OSError(errno.ENOBUFS, "x")),
            Read.SHORTAGE,
            id="a shortage behind another code",
        ),
        pytest.param(err("ENOENT"), Read.UNREADABLE, id="vanished"),
        pytest.param(err("EACCES"), Read.UNREADABLE, id="the OS refused"),
    ],
)
def test_a_failed_read_is_classified(exc: CrossSessionError, read: Read) -> None:
    assert read_failure(exc) is read


@pytest.mark.parametrize(
    ("exc", "answer"),
    [
        pytest.param(OSError(errno.EMFILE, "x"), Answer.SHORTAGE, id="out of descriptors"),
        pytest.param(err("ENOBUFS"), Answer.SHORTAGE, id="out of buffers, coded"),
        pytest.param(
            chained(RuntimeError("broken"), OSError(errno.ENOMEM, "x")),
            Answer.SHORTAGE,
            id="a shortage wrapped",
        ),
        pytest.param(RuntimeError("bug"), Answer.FAULT, id="a bug in the probe"),
        pytest.param(OSError(errno.ECONNREFUSED, "x"), Answer.FAULT, id="any other OS error"),
    ],
)
def test_a_probe_that_raised_is_classified(exc: BaseException, answer: Answer) -> None:
    assert probe_failure(exc) is answer


@pytest.mark.parametrize(
    ("taken", "limit", "full"),
    [
        pytest.param(0, 512, False, id="empty"),
        pytest.param(511, 512, False, id="one short of the limit"),
        pytest.param(512, 512, True, id="at the limit: more may exist"),
        pytest.param(3, 3, True, id="a small limit reached"),
    ],
)
def test_a_window_is_at_its_limit_once_full(taken: int, limit: int, full: bool) -> None:
    assert at_limit(taken, limit) is full


LOCATIONS = locations_for("/tmp/xs-fixture/agent", 0)


def registration(instance_id: str, updated_at: int) -> Registration:
    return build_registration(
        session_id="6ca36b18-705f-4149-8b6b-60fe95514bad",
        session_name=None,
        instance_id=instance_id,
        cwd="/",
        pid=4242,
        started_at=updated_at,
        updated_at=updated_at,
        status="idle",
        inbound="accept",
        socket_path=LOCATIONS.socket_path(instance_id),
        token="0123456789abcdef" * 4,
    )


def test_live_peers_come_newest_first_ties_by_instance_id() -> None:
    older = registration("a" * 32, 1_000)
    tied_b = registration("b" * 32, 2_000)
    tied_c = registration("c" * 32, 2_000)
    ordered = sorted([tied_c, older, tied_b], key=newest_first)
    assert [r.instance_id for r in ordered] == [tied_b.instance_id, tied_c.instance_id, "a" * 32]
