"""Real JSON reports against docs/report-schema.md: every key documented, every documented key present, types."""

from __future__ import annotations

import json
import re
from pathlib import Path

from test_cli import bisect

from bisector.synthetic import write_history

ROOT = Path(__file__).resolve().parents[1]
_ROW = re.compile(r"^\| `([^`]+)` \| ([a-z|\\]+) \| .+ \|$")
_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
    "null": (type(None),),
}


def documented() -> dict[str, list[str]]:
    rows = {}
    for line in (ROOT / "docs" / "report-schema.md").read_text().splitlines():
        if match := _ROW.match(line):
            rows[match.group(1)] = match.group(2).replace("\\", "").split("|")
    return rows


def _flatten_root(report: dict[str, object], schema: dict[str, list[str]]) -> dict[str, list[object]]:
    found: dict[str, list[object]] = {}
    for key, item in report.items():
        found.setdefault(key, []).append(item)
        if isinstance(item, dict) and any(name.startswith(f"{key}.") for name in schema):
            for sub, value in item.items():
                found.setdefault(f"{key}.{sub}", []).append(value)
        if isinstance(item, list) and any(name.startswith(f"{key}[].") for name in schema):
            for element in item:
                for sub, value in element.items():
                    found.setdefault(f"{key}[].{sub}", []).append(value)
    return found


def check_against_schema(report: dict[str, object]) -> None:
    schema = documented()
    found = _flatten_root(report, schema)
    assert sorted(set(found) - set(schema)) == [], "keys in the report that docs/report-schema.md lacks"
    parents_present = {name for name in schema if "." not in name} | {
        name for name in schema if "." in name and found.get(name.split(".")[0].removesuffix("[]"))
        and all(v not in (None, []) for v in found[name.split(".")[0].removesuffix("[]")])
    }  # fmt: skip
    assert sorted(parents_present - set(found)) == [], "documented keys the report lacks"
    for name, values in found.items():
        allowed = tuple(t for kind in schema[name] for t in _TYPES[kind])
        for value in values:
            wrong_bool = isinstance(value, bool) and bool not in allowed
            assert isinstance(value, allowed), f"{name}: {value!r} is not {'|'.join(schema[name])}"
            assert not wrong_bool, f"{name}: {value!r} is not {'|'.join(schema[name])}"


def test_a_found_bisect_with_a_failed_step_matches_the_schema(tmp_path: Path):
    verdicts = ["good"] * 12 + ["buildfail"] + ["good"] * 3 + ["bad"] * 8
    history = write_history(tmp_path / "repo", verdicts)
    done = bisect(
        "start", "--repo", str(history.path), "--good", history.shas[0], "--bad", "main", "--run", "bash test.sh",
        "--build", "bash build.sh", "--format", "json", "--term-old", "fast", "--term-new", "slow",
        db=tmp_path / "b.db",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["schema_version"] == 2
    assert report["terms"] == {"old": "fast", "new": "slow"}
    assert [s["number"] for s in report["steps"]] == list(range(1, len(report["steps"]) + 1))
    check_against_schema(report)


def test_the_schema_check_catches_an_undocumented_and_a_missing_key(tmp_path: Path):
    history = write_history(tmp_path / "repo", ["good"] * 4 + ["bad"] * 4)
    done = bisect(
        "start", "--repo", str(history.path), "--good", history.shas[0], "--bad", "main", "--run", "bash test.sh",
        "--format", "json", db=tmp_path / "b.db",
    )  # fmt: skip
    report = json.loads(done.stdout)
    check_against_schema(report)
    for broken in ({**report, "surprise": 1}, {k: v for k, v in report.items() if k != "terms"}):
        try:
            check_against_schema(broken)
        except AssertionError:
            continue
        raise AssertionError("the schema check let a wrong report through")
