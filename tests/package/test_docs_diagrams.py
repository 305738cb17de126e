"""The docs draw what the code has: the conversations' state diagrams in docs/protocol.md are their
transition tables edge for edge, and every module and class docs/architecture.md names exists."""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from enum import Enum
from typing import Final

import pytest

from pi_cross_session._internal.protocol.client_conversation import CLIENT_TRANSITIONS
from pi_cross_session._internal.protocol.server_conversation import SERVER_TRANSITIONS
from tests.data_paths import REPO_ROOT

DOCS: Final = REPO_ROOT / "docs"
#: A Mermaid block: its first line names the table it draws (``%% table: NAME``).
BLOCK: Final = re.compile(r"```mermaid\n%% table: (\w+)\n(.*?)```", re.DOTALL)
#: One edge of a state diagram: ``source --> target : input``.
EDGE: Final = re.compile(r"^\s*(\S+)\s*-->\s*(\S+)\s*(?::\s*(\S+))?\s*$")

Edge = tuple[str, str, str]


def drawn_tables(text: str) -> dict[str, str]:
    return {match.group(1): match.group(2) for match in BLOCK.finditer(text)}


def parse_edges(block: str) -> set[Edge]:
    """The labelled edges of a state diagram, as (state, input, next state); the entry and exit
    arrows (``[*]``) are drawing, not transitions."""
    edges: set[Edge] = set()
    for line in block.splitlines():
        match = EDGE.match(line)
        if match is None:
            continue
        source, target, label = match.groups()
        if "[*]" in (source, target):
            continue
        assert label is not None, f"an edge without its input: {line.strip()}"
        edges.add((source, label, target))
    return edges


def table_edges(table: Mapping[tuple[Enum, Enum], object]) -> set[Edge]:
    edges: set[Edge] = set()
    for (state, event), step in table.items():
        target = step[0] if isinstance(step, tuple) else step
        assert isinstance(target, Enum)
        edges.add((str(state.value), str(event.value), str(target.value)))
    return edges


TABLES: Final[dict[str, Mapping[tuple[Enum, Enum], object]]] = {
    "SERVER_TRANSITIONS": SERVER_TRANSITIONS,  # type: ignore[dict-item]
    "CLIENT_TRANSITIONS": CLIENT_TRANSITIONS,  # type: ignore[dict-item]
}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_the_state_diagram_is_the_transition_table(name: str) -> None:
    blocks = drawn_tables((DOCS / "protocol.md").read_text(encoding="utf-8"))
    assert name in blocks, f"docs/protocol.md draws no diagram of {name}"
    drawn = parse_edges(blocks[name])
    table = table_edges(TABLES[name])
    assert drawn - table == set(), "drawn but not in the code's table"
    assert table - drawn == set(), "in the code's table but not drawn"


def test_the_diagram_reader_sees_a_missing_or_extra_edge() -> None:
    block = "stateDiagram-v2\n    [*] --> a\n    a --> b : go\n    b --> a : back\n    b --> [*]\n"
    assert parse_edges(block) == {("a", "go", "b"), ("b", "back", "a")}
    assert parse_edges(block.replace("    b --> a : back\n", "")) == {("a", "go", "b")}
    with pytest.raises(AssertionError):
        parse_edges("stateDiagram-v2\n    a --> b\n")


#: ``pi_cross_session.x.y:Name`` (or ``Name.attribute``) as the architecture page writes them.
REFERENCE: Final = re.compile(r"\b(pi_cross_session(?:\.\w+)+):(\w+(?:\.\w+)*)")
#: A bare module, ``pi_cross_session.x.y``, not followed by a ``:``.
MODULE: Final = re.compile(r"\b(pi_cross_session(?:\.\w+)+)\b(?!:)")


def architecture_references() -> tuple[set[tuple[str, str]], set[str]]:
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    return set(REFERENCE.findall(text)), set(MODULE.findall(text))


def test_the_architecture_page_names_real_modules_and_classes() -> None:
    references, modules = architecture_references()
    assert len(references) >= 20, "the page's diagrams name the classes they pass through"
    missing: list[str] = []
    for module_name, dotted in sorted(references):
        thing: object = importlib.import_module(module_name)
        for part in dotted.split("."):
            if not hasattr(thing, part):
                missing.append(f"{module_name}:{dotted}")
                break
            thing = getattr(thing, part)
    for module_name in sorted(modules):
        try:
            importlib.import_module(module_name)
        except ModuleNotFoundError:
            missing.append(module_name)
    assert missing == []
