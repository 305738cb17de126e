"""Which failures mean "a kernel resource ran out", through every wrapping they arrive in, and the
growing, bounded pause after them."""

from __future__ import annotations

import errno

import anyio
import pytest

from pi_cross_session._internal.protocol.errors import CrossSessionError
from pi_cross_session._internal.protocol.pressure import Backoff, failure_name, shortage


def raised_from(outer: BaseException, inner: BaseException) -> BaseException:
    """``outer`` as if raised ``from inner``."""
    try:
        try:
            raise inner
        except BaseException as exc:
            raise outer from exc
    except BaseException as caught:
        return caught


@pytest.mark.parametrize("number", [errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM])
def test_resource_errnos_are_a_shortage_bare_wrapped_or_coded(number: int) -> None:
    name = errno.errorcode[number]
    bare = OSError(number, "no more")
    assert shortage(bare) == name
    # anyio's listener: BrokenResourceError raised from the accept OSError.
    assert shortage(raised_from(anyio.BrokenResourceError(), bare)) == name
    # The file layer: an error whose code is the errno name.
    assert shortage(CrossSessionError("could not open", code=name)) == name


@pytest.mark.parametrize(
    "exc",
    [
        OSError(errno.ECONNABORTED, "aborted"),
        OSError(errno.ENOENT, "missing"),
        anyio.BrokenResourceError(),
        CrossSessionError("nope", code="ENOSPC"),
        ValueError("EMFILE"),  # words are not errnos
    ],
)
def test_other_failures_are_not(exc: BaseException) -> None:
    assert shortage(exc) is None


def test_failure_names_come_from_errnos_never_from_messages() -> None:
    assert failure_name(OSError(errno.EPROTO, "peer text here")) == "EPROTO"
    assert failure_name(raised_from(anyio.BrokenResourceError(), OSError(errno.EINVAL, "x"))) == (
        "EINVAL"
    )
    assert failure_name(anyio.BrokenResourceError()) == "BrokenResourceError"


def test_a_cyclic_chain_ends() -> None:
    first, second = OSError(errno.ENOENT, "a"), OSError(errno.ENOENT, "b")
    first.__cause__, second.__cause__ = second, first
    assert shortage(first) is None


def test_backoff_doubles_up_to_its_bound_and_resets() -> None:
    backoff = Backoff(0.01, 0.05)
    assert [backoff.next_delay() for _ in range(5)] == [0.01, 0.02, 0.04, 0.05, 0.05]
    assert backoff.in_a_row == 5
    backoff.reset()
    assert (backoff.next_delay(), backoff.in_a_row) == (0.01, 1)


@pytest.mark.parametrize(("first", "most"), [(0.0, 1.0), (0.5, 0.1), (-1.0, 1.0)])
def test_backoff_bounds_must_make_sense(first: float, most: float) -> None:
    with pytest.raises(ValueError, match="first_s"):
        Backoff(first, most)
