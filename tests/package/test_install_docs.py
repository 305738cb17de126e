"""The install lines of the README and docs install what a user has, and name real distributions.

pi-cross-session is on no package index, so a ``pip install`` line that names it by its index name
(``pip install 'pi-cross-session[mcp]'``) fails for every reader: it must install a path (``.``,
``'.[mcp]'``, ``-e '.[pi-python]'``) or a wheel ``make dist`` built, named as that build names it.
And pi-python's distributions are ``pi-agent-core-lc``, ``pi-agent-harness-lc`` and
``pi-agent-cli-lc`` (the last one gives the ``pi-agent-cli`` command): any name of theirs the docs
give as something to install must be the one ``pyproject.toml`` depends on.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path
from typing import Final

import pi_cross_session
from tests.data_paths import REPO_ROOT

OURS: Final = "pi-cross-session"
#: A pip argument that is a path or a file, not a name looked up on an index.
LOCAL: Final = re.compile(r"^(\.|/|~|dist/)|\.whl(\[|$)|\.tar\.gz$")
PIP_INSTALL: Final = re.compile(r"pip install ([^`\n#]*)")
#: A distribution named with extras, as a requirement (``name[extra]``).
WITH_EXTRAS: Final = re.compile(r"(?<![\w./-])([A-Za-z][\w.-]*)\[[\w,-]+\]")
#: pi-python's names: a distribution (``-lc``) or the command ``pi-agent-cli``.
HOST_NAME: Final = re.compile(r"(?<![\w-])pi-agent-[a-z]+(?:-lc)?(?![\w-])")
#: ``pi-agent-cli``, the command, written where a distribution to install belongs.
COMMAND_AS_DISTRIBUTION: Final = re.compile(
    r"(?i)(next to|python environment as|install(ed)?) `pi-agent-cli`"
)


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def host_distributions() -> set[str]:
    """The distributions of pi-python that ``pyproject.toml`` depends on."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    requirements = [r for extra in project["optional-dependencies"].values() for r in extra]
    names = {normalized(re.match(r"[\w.-]+", r).group(0)) for r in requirements}  # type: ignore[union-attr]
    return {name for name in names if name.startswith("pi-agent-")}


def documents() -> list[Path]:
    return [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]


def problems(text: str, hosts: set[str], version: str) -> list[str]:
    """Every install line or host name in ``text`` that a user could not install as written."""
    found: list[str] = []
    for match in PIP_INSTALL.finditer(text):
        for argument in shlex.split(match.group(1).strip().replace("…", "VERSION")):
            if argument.startswith("-"):
                continue
            if LOCAL.search(argument):
                wheel = re.search(r"dist/(pi_cross_session-[^/\[]*\.whl)", argument)
                expected = f"pi_cross_session-{version}-py3-none-any.whl"
                if wheel and wheel.group(1) not in (expected, "pi_cross_session-VERSION.whl"):
                    found.append(f"{match.group(0)!r}: `make dist` builds {expected}")
                continue
            name = normalized(re.match(r"[\w.-]*", argument).group(0))  # type: ignore[union-attr]
            if name == OURS:
                found.append(f"{match.group(0)!r}: {OURS} is on no index; install '.' or a wheel")
            elif name.startswith("pi-agent-") and name not in hosts:
                found.append(f"{match.group(0)!r}: pi-python's distributions are {sorted(hosts)}")
    for match in WITH_EXTRAS.finditer(text):
        name = normalized(match.group(1))
        if name == OURS:
            found.append(f"{match.group(0)!r}: {OURS} is on no index; say '.[extra]' or a wheel")
        elif name.startswith("pi-agent-") and name not in hosts:
            found.append(f"{match.group(0)!r}: pi-python's distributions are {sorted(hosts)}")
    for match in HOST_NAME.finditer(text):
        name = match.group(0)
        if name != "pi-agent-cli" and name not in hosts:
            found.append(f"{name!r}: pi-python's distributions are {sorted(hosts)}")
    found.extend(
        f"{match.group(0)!r}: `pi-agent-cli` is the command; its distribution is pi-agent-cli-lc"
        for match in COMMAND_AS_DISTRIBUTION.finditer(text)
    )
    return found


def test_every_install_line_installs_a_path_or_a_wheel_and_names_real_host_distributions() -> None:
    hosts = host_distributions()
    assert hosts == {"pi-agent-core-lc", "pi-agent-harness-lc", "pi-agent-cli-lc"}
    found = {
        str(path.relative_to(REPO_ROOT)): problems(
            path.read_text(encoding="utf-8"), hosts, pi_cross_session.__version__
        )
        for path in documents()
    }
    assert {path: lines for path, lines in found.items() if lines} == {}
    # The docs do say how to install: the README from a clone and from a built wheel.
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert "pip install '.[pi-python]'" in readme
    wheel = f"dist/pi_cross_session-{pi_cross_session.__version__}-py3-none-any.whl"
    assert f"pip install '{wheel}[pi-python]'" in readme


def test_the_check_catches_the_lines_a_new_user_could_not_follow() -> None:
    """The lines the docs once had each fail; what they say now passes."""
    hosts = {"pi-agent-core-lc", "pi-agent-harness-lc", "pi-agent-cli-lc"}
    for bad in (
        "pip install 'pi-cross-session[pi-python]'",
        "Install it with the extra: `pip install 'pi-cross-session[remote]'` (`nats-py`",
        "pip install pi-cross-session",
        "Install `pi-cross-session[pi-python]` into the environment",
        "install it next to `pi-agent-cli` and every session gets the tools",
        "Install the package into the same Python environment as `pi-agent-cli`:",
        "pip install 'pi-agent-core[anthropic]'",
        "pip install pi-agent-cli",
        "pip install 'dist/pi_cross_session-0.0.9-py3-none-any.whl[mcp]'",
    ):
        assert problems(bad, hosts, "0.1.0"), bad
    for good in (
        "pip install .",
        "pip install -e '.[pi-python]'    # editable",
        "pip install 'dist/pi_cross_session-0.1.0-py3-none-any.whl[pi-python]'",
        "a built wheel, `pip install 'dist/pi_cross_session-….whl[remote]'`:",
        "pip install 'pi-agent-core-lc[anthropic]'    # or [openai], [deepseek]",
        "the `pi-agent-cli` of the environment where you installed pi-cross-session",
        "`PI_CROSS_SESSION_NAME=NEW` in the environment of `pi-agent-cli` (one launch)",
        'pi-agent-cli -p "/peers"',
    ):
        assert problems(good, hosts, "0.1.0") == [], good
