"""Large YAML tuning files diffed part by part (bisector/analysis/yaml_regions.py): the same rows as the whole parse
and diff_values, without parsing what both sides share; files the split cannot follow are left to the whole parse."""

from __future__ import annotations

import random

import pytest
import yaml
from analysis_history import History
from hypothesis import given, settings
from hypothesis import strategies as st

from bisector.analysis import FindingKind, explain
from bisector.analysis.tuning_files import parse_yaml_part
from bisector.analysis.values import Change, Node, diff_values, render
from bisector.analysis.yaml_regions import LARGE_YAML_BYTES, diff_large_yaml


def shown(changes: list[Change]) -> list[tuple[str, str | None, str | None]]:
    return [
        (c.key, None if c.before is None else render(c.before), None if c.after is None else render(c.after))
        for c in changes
    ]


def whole(before: str, after: str) -> list[tuple[str, str | None, str | None]]:
    return shown(list(diff_values(parse_yaml_part(before), parse_yaml_part(after))))


def split(before: str, after: str) -> list[tuple[str, str | None, str | None]] | None:
    changes = diff_large_yaml(before, after, parse_yaml_part, large_bytes=0, part_lines=0)
    return None if changes is None else shown(changes)


def logic_file(seed: int, sizes: int = 40, solutions: int = 6) -> list[object]:
    """A Tensile-style logic file: a version, names, a problem type, solutions (mappings with lists), the index
    order, and the exact logic (pairs of a size and [solution index, efficiency])."""
    rng = random.Random(seed)
    return [
        {"MinimumRequiredVersion": "4.31.0"},
        "aquavanjaram942",
        {"Architecture": "gfx942", "IsAPU": 0},
        ["Device 74a1", "Device 74b5"],
        {"Batched": True, "DataType": 0, "IndexAssignmentsA": [3, 0, 2], "Name": "Cijk_Alik_Bljk_SB"},
        [
            {
                "1LDSBuffer": rng.choice([0, 1]),
                "MacroTile0": rng.choice([64, 128, 256]),
                "MatrixInstruction": [32, 32, 8, 1, 1, rng.randint(1, 4)],
                "ProblemType": {"DataType": 0, "UseBeta": True},
                "SolutionIndex": index,
            }
            for index in range(solutions)
        ],
        [2, 3, 0, 1],
        [
            [
                [rng.choice([64, 128, 4096]), rng.randint(1, 9000), 1, 4096],
                [rng.randrange(solutions), round(rng.random() * 100, 2)],
            ]
            for _ in range(sizes)
        ],
        None,
        "DeviceEfficiency",
    ]


def dump(data: object, flow: bool | None = None) -> str:
    """As Tensile writes them (lists of scalars in flow style), or in block style throughout (flow=False)."""
    return yaml.safe_dump(data, default_flow_style=flow, sort_keys=False)


def mutate(data: list[object], rng: random.Random) -> None:
    """A tuning update: efficiencies and solution indices changed, sizes added or dropped, a solution's parameter
    changed, added or removed."""
    exact = data[7]
    solutions = data[5]
    assert isinstance(exact, list)
    assert isinstance(solutions, list)
    for _ in range(rng.randint(1, 4)):
        what = rng.randrange(6)
        if what == 0:
            exact[rng.randrange(len(exact))][1][1] = round(rng.random() * 100, 2)
        elif what == 1:
            exact[rng.randrange(len(exact))][1][0] = rng.randrange(len(solutions))
        elif what == 2:
            exact.insert(rng.randrange(len(exact)), [[rng.randint(1, 9000), 7, 1, 64], [0, 1.5]])
        elif what == 3 and len(exact) > 2:
            del exact[rng.randrange(len(exact))]
        elif what == 4:
            solutions[rng.randrange(len(solutions))]["MacroTile0"] = rng.choice([32, 512])
        elif what == 5:
            solution = solutions[rng.randrange(len(solutions))]
            if "StaggerU" in solution:
                del solution["StaggerU"]
            else:
                solution["StaggerU"] = rng.randint(0, 32)


@settings(max_examples=80, deadline=None)
@given(st.integers(min_value=0, max_value=10**6), st.sampled_from([None, False]))
def test_a_tuning_update_gives_the_rows_of_the_whole_parse(seed: int, flow: bool | None) -> None:
    rng = random.Random(seed)
    data = logic_file(seed)
    before = dump(data, flow)
    mutate(data, rng)
    after = dump(data, flow)

    assert split(before, after) == whole(before, after)


def test_the_compact_nested_layout_of_logic_files_is_split_to_the_changed_entry() -> None:
    before = dump(logic_file(1))
    data = logic_file(1)
    exact = data[7]
    assert isinstance(exact, list)
    exact[5][1][1] = 12.5
    after = dump(data)
    assert "- - - [" in before  # the exact logic's pairs, written compactly

    rows = split(before, after)

    assert rows == whole(before, after)
    assert rows is not None
    assert [key for key, _, _ in rows] == ["[7][5][1]"]


def test_parts_that_both_sides_share_are_not_parsed() -> None:
    data = logic_file(3, sizes=6000, solutions=40)
    before = dump(data)
    exact = data[7]
    assert isinstance(exact, list)
    exact[100][1][0] = 39
    after = dump(data)
    parsed: list[int] = []

    def counted(text: str) -> Node:
        parsed.append(len(text))
        return parse_yaml_part(text)

    changes = diff_large_yaml(before, after, counted)

    assert changes is not None
    assert shown(changes) == whole(before, after)
    assert 0 < sum(parsed) < len(before) // 50


def test_reformatted_parts_and_reordered_keys_give_no_rows() -> None:
    before = "- a: 1\n  b: [1, 2]\n- - x\n  - {p: 1}\n"
    after = "- b: [1,   2]\n  a: 1\n- - x\n  - {p: 1}\n"

    assert split(before, after) == whole(before, after) == []


@pytest.mark.parametrize(
    "text",
    [
        "- a: 1  # a comment\n- [1]\n",
        "- &anchor {a: 1}\n- *anchor\n",
        "- !!str 12\n- [1]\n",
        "- a: |\n    block\n- [1]\n",
        "- '1\n  2'\n- [1]\n",
        "- {a: 1}\n---\n- [1]\n",
        '- "quoted"\n- [1]\n',
        "- a:\n\t- 1\n",
    ],
    ids=["comment", "alias", "tag", "block scalar", "multi-line quote", "documents", "double quotes", "tab"],
)
def test_what_the_split_does_not_follow_is_left_to_the_whole_parse(text: str) -> None:
    assert split(text, text + "- [2]\n") is None


def test_a_differing_part_that_does_not_parse_is_left_to_the_whole_parse() -> None:
    before = "- a: [1, 2]\n- b: [3]\n"
    after = "- a: [1, 2\n- b: [3]\n"

    assert split(before, after) is None


def test_shapes_that_the_split_cannot_follow_are_parsed_whole_at_that_level() -> None:
    """A mapping whose sequence value sits at the key's own column, a value continued on the next line, a repeated
    key, an item less indented than its content: the part is parsed whole; the rows are still the whole parse's."""
    cases = [
        ("k:\n- 1\n- [2]\nm: {a: 1}\n", "k:\n- 1\n- [3]\nm: {a: 1}\n"),
        ("k: [1,\n  2]\nm: {a: 1}\n", "k: [1,\n  3]\nm: {a: 1}\n"),
        ("k: 1\nk: 2\nm: {a: 1}\n", "k: 1\nk: 3\nm: {a: 1}\n"),
        ("-   a: 1\n    b: [1]\n-  [2]\n", "-   a: 2\n    b: [1]\n-  [2]\n"),
    ]
    for before, after in cases:
        assert split(before, after) == whole(before, after) != []


def test_a_large_logic_file_changed_in_a_commit_gives_its_rows(history: History) -> None:
    """Through explain on a real history: a tuning file over LARGE_YAML_BYTES takes the split, with the rows
    the whole parse gives; one broken in the part that changed is a note, as before."""
    data = logic_file(7, sizes=6000, solutions=40)
    before = dump(data)
    assert len(before) > LARGE_YAML_BYTES
    exact = data[7]
    assert isinstance(exact, list)
    exact[4321][1][1] = 99.99
    after = dump(data)
    history.commit("tuning", {"logic/gfx942_SB.yaml": before})
    tuned = history.commit("retune", {"logic/gfx942_SB.yaml": after})
    broken = history.commit("broken", {"logic/gfx942_SB.yaml": after.replace("- - - [", "- - - [[", 1)})

    rows = [(f.key, f.before, f.after) for f in explain(history.path, tuned).table_findings]
    notes = [f for f in explain(history.path, broken).findings if f.kind is FindingKind.NOTE]

    assert rows == whole(before, after)
    assert [key for key, _, _ in rows] == ["[7][4321][1]"]
    assert [note.detail.split(":")[0] for note in notes] == [f"does not parse at {broken[:12]}"]
