"""YAML tuning files read from libyaml's events (bisector/analysis/yaml_documents.py) give exactly what PyYAML's safe
loader gives: the same documents, the same errors."""

from __future__ import annotations

import math

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from bisector.analysis.tuning_files import diff_tuning_file, load_tuning_file
from bisector.analysis.yaml_documents import load_yaml_documents


def safe_loader_reads(text: str) -> object:
    try:
        return list(yaml.load_all(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError as exc:
        return type(exc)


def fold_reads(text: str) -> object:
    try:
        return load_yaml_documents(text)
    except yaml.YAMLError as exc:
        return type(exc)


def same(a: object, b: object) -> bool:
    """Equal, NaN equal to NaN."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


CASES = [
    "",
    "---\n",
    "a: 1\n---\n---\nb: [1, 2.5, .inf, -.inf, .nan, ~, null, yes, 'no', On, 0x1F, 0o17, 017, 1_000, 190:20:30]\n",
    "when: 2001-12-14\nat: 2001-12-14t21:59:43.10-05:00\n",
    "a: &x 1\nb: *x\n",  # anchors and aliases
    "base: &b {x: 1}\nderived:\n  <<: *b\n  y: 2\n",  # a merge key
    "<<: {a: 1}\n",
    "? [1, 2]\n: 3\n",  # a sequence as a key: refused
    "a: !!str 12\nb: !!float 1\n",  # explicit tags
    "a: ! 12\n",  # the non-specific tag
    "k:\n  - {x: 1, y: 'y'}\n  - - 1\n    - 2\n  - []\n  - {}\n",
    "1: a\n1.5: b\nnull: c\ntrue: d\n'1': e\n",
    "a: 1\na: 2\n",  # a repeated key: the last one wins
    "a: b: c\n",  # invalid
    "[1, {a: }]\n",
    "- Activation: true\n  DataType: 7\n  Sizes: [[128, 128, 1, 64], [1, 2, 3, 4]]\n- text: |\n    two\n    lines\n",
    "x: = \n",
]


@pytest.mark.parametrize("text", CASES)
def test_a_stream_reads_as_the_safe_loader_reads_it(text: str):
    assert same(fold_reads(text), safe_loader_reads(text))


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=8),
    st.sampled_from(["yes", "No", "on", "~", "0x10", "1e3", "2001-01-01", ".5", "<<", "=", "-", "a: b", "#c"]),
    st.dates().map(lambda d: d.isoformat()), st.dates(),
)  # fmt: skip
keys = st.one_of(st.text(max_size=6), st.integers(), st.booleans(), st.none(), st.sampled_from(["yes", "1.5"]))
documents = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4), max_leaves=25
)


@settings(max_examples=300, deadline=None)
@given(documents=st.lists(documents, min_size=1, max_size=3), flow=st.sampled_from([None, True, False]))
def test_any_dumped_documents_read_as_the_safe_loader_reads_them(documents: list[object], flow: bool | None):
    text = yaml.safe_dump_all(documents, default_flow_style=flow, allow_unicode=True)
    assert same(fold_reads(text), safe_loader_reads(text))


def test_a_tuning_file_of_many_repeated_values_diffs_to_the_one_entry_that_changed():
    rows = [f"- {{MacroTile: {64 * (i % 3 + 1)}, Valid: {str(i % 2 == 0).lower()}, Name: 'k{i}'}}" for i in range(60)]
    before = "\n".join(rows) + "\n"
    after = before.replace("{MacroTile: 64, Valid: false, Name: 'k3'}", "{MacroTile: 256, Valid: false, Name: 'k3'}")
    assert after != before
    findings = diff_tuning_file(
        "logic.yaml", load_tuning_file("logic.yaml", before), load_tuning_file("logic.yaml", after)
    )
    assert [(f.before, f.after) for f in findings] == [("64", "256")]
    assert findings[0].key.startswith("[3]")
    assert "MacroTile" in findings[0].key
