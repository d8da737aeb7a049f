"""Real JSON reports against docs/report-schema.md: every key documented, every documented key present, types."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from synthetic import write_history
from test_cli import bisect

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


def _flatten(value: object, path: str, schema: dict[str, list[str]], found: dict[str, list[object]]) -> None:
    """Every key below path that the schema documents keys under (`a.b`, `a[].b`, at any depth), with its values."""
    if isinstance(value, dict) and any(name.startswith(f"{path}.") for name in schema):
        items = [(f"{path}.{sub}", item) for sub, item in value.items()]
    elif isinstance(value, list) and any(name.startswith(f"{path}[].") for name in schema):
        items = [(f"{path}[].{sub}", item) for element in value for sub, item in element.items()]
    else:
        return
    for name, item in items:
        found.setdefault(name, []).append(item)
        _flatten(item, name, schema, found)


def check_against_schema(report: dict[str, object]) -> None:
    schema = documented()
    found: dict[str, list[object]] = {}
    for key, item in report.items():
        found.setdefault(key, []).append(item)
        _flatten(item, key, schema, found)
    assert sorted(set(found) - set(schema)) == [], "keys in the report that docs/report-schema.md lacks"
    parents = {name: name.rpartition(".")[0].removesuffix("[]") for name in schema}
    parents_present = {
        name for name, parent in parents.items()
        if not parent or (found.get(parent) and all(v not in (None, []) for v in found[parent]))
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


DISPATCH = """\
MMA_MIN_M = 16


def pick_kernel(n, k, m):
    if m >= MMA_MIN_M:
        return "mma"
    return "simt"
"""
CHECK = """\
import sys

sys.path.insert(0, "src")
from mylib.dispatch import pick_kernel

sys.exit(0 if pick_kernel(4096, 7168, 4) == "simt" else 1)
"""


def test_an_explained_bisect_matches_the_schema_and_each_row_says_what_the_traced_runs_made_of_it(tmp_path: Path):
    repo = tmp_path / "repo"
    (repo / "src" / "mylib").mkdir(parents=True)
    git = ["git", "-C", str(repo), "-c", "user.name=T", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    shas = []
    for message, files in (
        ("dispatch", {"src/mylib/__init__.py": "", "src/mylib/dispatch.py": DISPATCH, "check.py": CHECK}),
        ("docs", {"README.md": "a\n"}),
        ("MMA earlier", {"src/mylib/dispatch.py": DISPATCH.replace("m >= MMA_MIN_M", "m >= 2")}),
    ):
        for name, text in files.items():
            (repo / name).write_text(text)
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*git, "commit", "-q", "-m", message], check=True)
        shas.append(subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout)
    done = bisect(
        "start", "--repo", str(repo), "--good", shas[0].strip(), "--bad", "main", "--run", f"{sys.executable} check.py",
        "--format", "json", db=tmp_path / "b.db",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    check_against_schema(report)
    rows = report["explanation"]["static"]["findings"]
    assert [(row["name"], row["evidence"]) for row in rows] == [("pick_kernel", "runtime")]
    assert rows[0]["evidence_detail"] == "traced calls: mylib.dispatch:pick_kernel(4096, 7168, 4) 'simt' -> 'mma'"
