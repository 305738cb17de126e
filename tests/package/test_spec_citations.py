"""Every section the code cites exists in the repository's own specification (docs/spec/).

Two forms are used, and only these: ``spec §N`` cites docs/spec/wire.md (the wire and
discovery contract) and ``goal-scoped-v1 §N`` cites docs/spec/goal-grants.md (goal grants).
A bare ``§N`` could be either: it fails here, as does a number neither document has.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPECS = {
    "spec": ROOT / "docs" / "spec" / "wire.md",
    "goal-scoped-v1": ROOT / "docs" / "spec" / "goal-grants.md",
}
SECTION_SIGN = "\u00a7"  # written escaped, so that this file cites nothing itself
CITATION = re.compile(SECTION_SIGN + r"(\d+(?:\.\d+)*)")
FORM = re.compile(r"(spec|goal-scoped-v1) $", re.IGNORECASE)
HEADING = re.compile(r"^#+\s*" + SECTION_SIGN + r"?(\d+(?:\.\d+)*)\.?\s", re.MULTILINE)
#: Places where the sign is data, not a citation: the golden vectors name their spec items.
DATA = {("tests/wire/test_vectors_framing.py", f'f"{SECTION_SIGN}10 item {{item}}"')}


def sections(path: Path) -> set[str]:
    return set(HEADING.findall(path.read_text(encoding="utf-8")))


def citations() -> list[tuple[str, int, str, str | None]]:
    """Every ``§N`` in src/ and tests/: where, the number, and which document (None: unsaid)."""
    found = []
    for folder in ("src", "tests"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if any(relative == where and snippet in line for where, snippet in DATA):
                    continue
                for match in CITATION.finditer(line):
                    form = FORM.search(line[: match.start()])
                    found.append((relative, number, match.group(1), form and form.group(1).lower()))
    return found


def test_both_specifications_are_in_the_repository() -> None:
    for path in SPECS.values():
        assert path.is_file(), path
        assert len(sections(path)) > 10, path


def test_every_citation_says_which_document_and_names_a_section_it_has() -> None:
    known = {name: sections(path) for name, path in SPECS.items()}
    found = citations()
    assert found  # the scan sees the citations, so an empty failure list means something
    unsaid = [f"{where}:{line} {number}" for where, line, number, form in found if form is None]
    assert not unsaid, "cite 'spec §N' or 'goal-scoped-v1 §N':\n" + "\n".join(unsaid)
    missing = [
        f"{where}:{line} {form} {number}"
        for where, line, number, form in found
        if form is not None and number not in known[form]
    ]
    assert not missing, "no such section:\n" + "\n".join(missing)


@pytest.mark.parametrize("folder", ["src", "tests", "docs", "bench"])
def test_nothing_points_outside_the_repository(folder: str) -> None:
    outside = re.compile(r"\.\./shared|shared/spec|host-pi-python\.md|STYLE\.md|DESIGN\.md")
    hits = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / folder).rglob("*"))
        if path.suffix in {".py", ".md"} and path.resolve() != Path(__file__).resolve()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if outside.search(line)
    ]
    assert not hits, hits
