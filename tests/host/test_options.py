"""plugin/options.py: sources, precedence, and failing closed on a bad value."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from pi_cross_session._internal.plugin.options import (
    INBOUND_ENTRY_TYPE,
    NAME_ENTRY_TYPE,
    InboundSource,
    NameSource,
    load_options,
    name_entry,
    session_choice,
    session_entry,
    session_name_choice,
)


def write_config(home: Path, text: str) -> None:
    (home / "agent.toml").write_text(text, encoding="utf-8")


def test_default_is_accept(tmp_path: Path) -> None:
    options = load_options(tmp_path, env={})
    assert (options.inbound, options.inbound_source, options.warnings) == (
        "accept",
        InboundSource.DEFAULT,
        (),
    )


@pytest.mark.parametrize("value", ["accept", "refuse"])
def test_env_sets_inbound(tmp_path: Path, value: str) -> None:
    options = load_options(tmp_path, env={"PI_CROSS_SESSION_INBOUND": value})
    assert (options.inbound, options.inbound_source) == (value, InboundSource.ENV)
    assert options.warnings == ()


@pytest.mark.parametrize("value", ["", "Accept", "yes", "accept "])
def test_an_invalid_env_value_refuses_and_says_so(tmp_path: Path, value: str) -> None:
    write_config(tmp_path, '[cross_session]\ninbound = "accept"\n')
    options = load_options(tmp_path, env={"PI_CROSS_SESSION_INBOUND": value})
    assert options.inbound == "refuse"
    assert options.inbound_source is InboundSource.ENV
    [warning] = options.warnings
    assert "PI_CROSS_SESSION_INBOUND" in warning
    assert "refused until it is fixed" in warning


def test_agent_toml_table(tmp_path: Path) -> None:
    write_config(tmp_path, 'permission = "ask"\n[cross_session]\ninbound = "refuse"\n')
    options = load_options(tmp_path, env={})
    assert (options.inbound, options.inbound_source) == ("refuse", InboundSource.CONFIG)


def test_env_wins_over_agent_toml(tmp_path: Path) -> None:
    write_config(tmp_path, '[cross_session]\ninbound = "refuse"\n')
    options = load_options(tmp_path, env={"PI_CROSS_SESSION_INBOUND": "accept"})
    assert (options.inbound, options.inbound_source) == ("accept", InboundSource.ENV)


@pytest.mark.parametrize("value", ['"maybe"', "true", "1", '["accept"]'])
def test_an_invalid_config_value_refuses(tmp_path: Path, value: str) -> None:
    write_config(tmp_path, f"[cross_session]\ninbound = {value}\n")
    options = load_options(tmp_path, env={})
    assert (options.inbound, options.inbound_source) == ("refuse", InboundSource.CONFIG)
    assert len(options.warnings) == 1


@pytest.mark.parametrize("text", ["[cross_session\n", "cross_session = 3\n", "\xff"])
def test_an_unreadable_config_refuses(tmp_path: Path, text: str) -> None:
    write_config(tmp_path, text)
    options = load_options(tmp_path, env={})
    assert options.inbound == "refuse"
    [warning] = options.warnings
    assert "could not read" in warning
    # An explicit env value still decides; the warning stays.
    options = load_options(tmp_path, env={"PI_CROSS_SESSION_INBOUND": "accept"})
    assert options.inbound == "accept"
    assert len(options.warnings) == 1


def test_gate_adjustments(tmp_path: Path) -> None:
    write_config(
        tmp_path, '[cross_session]\ngated_tools_add = ["deploy"]\ngated_tools_remove = "x"\n'
    )
    options = load_options(tmp_path, env={})
    assert options.gated_tools_add == ("deploy",)
    assert options.gated_tools_remove == ()
    [warning] = options.warnings
    assert "gated_tools_remove" in warning
    assert options.inbound == "accept"  # a bad gate list does not touch inbound


def test_a_session_choice_wins_over_everything(tmp_path: Path) -> None:
    options = load_options(tmp_path, env={"PI_CROSS_SESSION_INBOUND": "accept"})
    saved = session_entry("refuse", changed_at_ms=1)
    entries = [
        SimpleNamespace(customType=INBOUND_ENTRY_TYPE, data=saved),
        {"customType": "other", "data": {"inbound": "accept"}},
        SimpleNamespace(customType=INBOUND_ENTRY_TYPE, data={"inbound": "bogus"}),
    ]
    choice = session_choice(entries)
    assert choice == "refuse"
    chosen = options.with_session_choice(choice)
    assert (chosen.inbound, chosen.inbound_source) == ("refuse", InboundSource.SESSION)
    assert options.with_session_choice(None) is options


# -- the session's name ----------------------------------------------------------------------


def test_no_name_option_leaves_the_host_its_name(tmp_path: Path) -> None:
    options = load_options(tmp_path, env={})
    assert (options.name, options.name_source) == (None, NameSource.HOST)


def test_env_names_the_session_cleaned_as_the_wire_does(tmp_path: Path) -> None:
    write_config(tmp_path, '[cross_session]\nname = "from-config"\n')
    options = load_options(tmp_path, env={"PI_CROSS_SESSION_NAME": "  build\tbot\n"})
    assert (options.name, options.name_source) == ("build bot", NameSource.ENV)
    assert options.warnings == ()


def test_agent_toml_names_the_session(tmp_path: Path) -> None:
    write_config(tmp_path, '[cross_session]\nname = "reviewer"\n')
    options = load_options(tmp_path, env={"PI_CROSS_SESSION_NAME": ""})  # empty: unset
    assert (options.name, options.name_source) == ("reviewer", NameSource.CONFIG)


@pytest.mark.parametrize(
    ("env", "config", "warning"),
    [
        ({"PI_CROSS_SESSION_NAME": " \u200b "}, "", "PI_CROSS_SESSION_NAME sets a blank"),
        ({}, "name = 42\n", "[cross_session] name in agent.toml must be a non-blank string"),
        ({}, 'name = "\\t"\n', "[cross_session] name in agent.toml must be a non-blank string"),
    ],
    ids=["blank-env", "not-a-string", "blank-config"],
)
def test_a_bad_name_is_ignored_and_said(
    tmp_path: Path, env: dict[str, str], config: str, warning: str
) -> None:
    write_config(tmp_path, "[cross_session]\n" + config)
    options = load_options(tmp_path, env=env)
    assert (options.name, options.name_source) == (None, NameSource.HOST)
    assert options.inbound == "accept"  # a name is not a security setting: nothing fails closed
    assert any(warning in text for text in options.warnings), options.warnings


def test_a_name_chosen_in_the_session_wins(tmp_path: Path) -> None:
    options = load_options(tmp_path, env={"PI_CROSS_SESSION_NAME": "env"})
    entries = [
        {"customType": NAME_ENTRY_TYPE, "data": name_entry("first", changed_at_ms=1)},
        {"customType": NAME_ENTRY_TYPE, "data": {"name": "   "}},  # not ours: skipped
        SimpleNamespace(customType=NAME_ENTRY_TYPE, data=name_entry("second", changed_at_ms=2)),
    ]
    chosen = options.with_session_name(session_name_choice(entries))
    assert (chosen.name, chosen.name_source) == ("second", NameSource.SESSION)
    assert options.with_session_name(None) == options
