"""The hypothesis profiles, and the conventions that keep ``make test`` fast and load-proof."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests import hypothesis_profiles as profiles

TESTS = Path(__file__).resolve().parent
#: A keyword argument (formatted code has no spaces around its ``=``) giving an example count as a
#: number rather than through ``scaled()``, or a per-example deadline other than ``None``.
LITERAL_COUNT = re.compile(r"\bmax_examples=\d")
#: A hypothesis deadline is milliseconds or a timedelta; other ``deadline=`` arguments are not it.
TIMED_DEADLINE = re.compile(r"\bdeadline=\s*(?:\d|timedelta\(|datetime\.timedelta\()")


@pytest.fixture
def restore_profile() -> Iterator[None]:
    """Tests here load other profiles; put back the one this run chose."""
    try:
        yield
    finally:
        profiles.load_from_environment()


def test_the_profile_in_force_is_the_one_the_environment_names() -> None:
    expected = settings.get_profile(os.environ.get(profiles.ENV, profiles.DEFAULT))
    assert settings.default.max_examples == expected.max_examples


@pytest.mark.parametrize("name", [profiles.DEFAULT, profiles.LONG])
def test_no_profile_measures_wall_time(name: str) -> None:
    profile = settings.get_profile(name)
    assert profile.deadline is None
    assert HealthCheck.too_slow in profile.suppress_health_check


@pytest.mark.usefixtures("restore_profile")
def test_long_runs_ten_times_the_examples_of_default() -> None:
    settings.load_profile(profiles.DEFAULT)
    assert (settings.default.max_examples, profiles.scaled(400)) == (100, 400)
    settings.load_profile(profiles.LONG)
    assert (settings.default.max_examples, profiles.scaled(400)) == (1000, 4000)


def test_every_explicit_example_count_scales_with_the_profile() -> None:
    offenders = [
        f"{path.relative_to(TESTS)}:{number}"
        for path in sorted(TESTS.rglob("*.py"))
        if path.name != "hypothesis_profiles.py"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if LITERAL_COUNT.search(line) or TIMED_DEADLINE.search(line)
    ]
    assert offenders == [], "use max_examples=scaled(n) and leave deadlines to the profile"
