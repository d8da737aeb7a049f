"""The one scanner of comments and string literals (bisector/analysis/source_text.py), per language."""

from __future__ import annotations

import pytest

from bisector.analysis.source_text import Language, blanked, spans


def test_c_comments_blanked_strings_kept_unless_asked() -> None:
    text = 'int a = 1; // one\nconst char* s = "// no";  /* two\nlines */ int b;\n'
    assert blanked(text, Language.C, strings=False) == (
        'int a = 1;       \nconst char* s = "// no";        \n         int b;\n'
    )
    assert blanked(text, Language.C).splitlines()[1] == 'const char* s = "     ";        '


def test_c_literals_end_at_their_line_and_chars_are_literals() -> None:
    text = "char q = '\"'; // quote\nconst char* open = \"no end\nint x; // x\n"
    assert [span.comment for span in spans(text, Language.C)] == [False, True, False, True]
    assert blanked(text, Language.C, strings=False) == (
        "char q = '\"';         \nconst char* open = \"no end\nint x;     \n"
    )


def test_rust_nested_comments_raw_strings_chars_and_lifetimes() -> None:
    text = "fn f<'a>(x: &'a str) { /* a /* nested */ still */ let s = r#\"{ \"}\" }\"#; let c = '}'; }\n"
    code = blanked(text, Language.RUST)
    assert code.count("{") == 1
    assert code.count("}") == 1
    assert "<'a>" in code
    assert "&'a str" in code
    assert 'r#"' in code
    assert '"#' in code


def test_rust_strings_with_escapes_and_line_comments() -> None:
    text = 'let s = "a \\" // b"; // c\nlet t = b"x";\n'
    assert blanked(text, Language.RUST) == 'let s = "         ";     \nlet t = b" ";\n'


def test_cmake_line_and_bracket_comments_outside_quotes() -> None:
    text = 'set(A "x#y") # tail\n#[[ block\n(comment) ]] set(B 1)\n#[=[ ]] still ]=]set(C 2)\n'
    assert blanked(text, Language.CMAKE, strings=False) == (
        'set(A "x#y")       \n         \n             set(B 1)\n                 set(C 2)\n'
    )


@pytest.mark.parametrize("language", list(Language))
def test_every_language_keeps_length_and_newlines(language: Language) -> None:
    text = 'a # b // c /* d */ \'e\' "f"\n#[[ g ]]\n"""h\ni"""\n'
    for strings in (True, False):
        out = blanked(text, language, strings=strings)
        assert len(out) == len(text)
        assert out.count("\n") == text.count("\n")
