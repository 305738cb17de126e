"""JS-compatible text rules: UTF-16 length, well-formedness, trim, clean_line (spec §1.6,
spec §11)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pi_cross_session._internal.protocol.text import (
    JS_WHITESPACE,
    UNNAMED_SESSION,
    clean_line,
    clean_name,
    is_blank,
    is_well_formed,
    js_trim,
    utf16_length,
)


def test_utf16_length_counts_astral_characters_twice() -> None:
    assert utf16_length("") == 0
    assert utf16_length("abc") == 3
    assert utf16_length("中文") == 2
    assert utf16_length("😀") == 2
    assert utf16_length("a😀b") == 4


@given(st.text())
def test_utf16_length_matches_an_encoder(value: str) -> None:
    assert utf16_length(value) == len(value.encode("utf-16-le", "surrogatepass")) // 2


def test_well_formedness() -> None:
    assert is_well_formed("plain 😀")
    assert not is_well_formed("\ud800")
    assert not is_well_formed("a\udfffb")


def test_js_trim_uses_the_js_whitespace_set() -> None:
    assert js_trim("\ufeff\u3000 x \u2028\u00a0") == "x"
    assert js_trim("\u0085x\u001c") == "\u0085x\u001c"  # Python whitespace, not JS whitespace
    assert js_trim("\u180ex") == "\u180ex"  # no longer whitespace in JS
    assert is_blank(JS_WHITESPACE)
    assert not is_blank("\u200b")  # zero-width space is a format character, not whitespace


def test_clean_line_folds_controls_and_whitespace() -> None:
    assert clean_line("  a\t\tb\n\nc  ") == "a b c"
    assert clean_line("a\x00\x01b") == "a b"
    assert clean_line("a\u200b\u200bb") == "a b"  # Cf run becomes one space
    assert clean_line("x\u202ey") == "x y"  # bidi override cannot reorder a name
    assert clean_line("😀" * 300) == "😀" * 200
    assert clean_line("abcdef", 3) == "abc"


def test_clean_name_never_returns_empty() -> None:
    assert clean_name(None) == UNNAMED_SESSION
    assert clean_name(" \ufeff\u200b ") == UNNAMED_SESSION
    assert clean_name(" builder ") == "builder"
    assert clean_name("a" * 199 + " b") == "a" * 199


@given(st.text())
def test_clean_line_is_stable_and_bounded(value: str) -> None:
    once = clean_line(value)
    # Trim comes before the cut (as in the reference), so a cut may leave one trailing space.
    assert clean_line(once) == js_trim(once)
    assert len(once) <= 200
    assert "\n" not in once
