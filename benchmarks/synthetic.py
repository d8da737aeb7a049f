"""Synthetic git histories with a known answer, for tests, benchmarks and trying the tool out.

Each commit carries a file `verdict` (good, bad, skip or buildfail) and a `test.sh` that turns it into an
exit code the way a real test would (0, 1, 125), optionally sleeping first. Written through
`git fast-import`, so thousands of commits take a second. Merges put side-branch commits on the
first-parent chain's second parents.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

TEST_SCRIPT = """#!/usr/bin/env bash
sleep "${SYNTHETIC_SLEEP_S:-%(sleep)s}"
case "$(cat verdict)" in
  good) echo "metric: 10.0"; exit 0 ;;
  bad) echo "metric: 5.0"; exit 1 ;;
  skip) echo "cannot test this one"; exit 125 ;;
esac
"""
BUILD_SCRIPT = """#!/usr/bin/env bash
if [ "$(cat verdict)" = buildfail ]; then echo "error: does not compile" >&2; exit 2; fi
echo built
"""
RUN_CMD = "bash test.sh"
BUILD_CMD = "bash build.sh"


@dataclass(frozen=True)
class SyntheticHistory:
    path: Path
    shas: list[str]  # first-parent chain, oldest first: shas[0] is good, shas[-1] is bad
    first_bad: int  # index into shas of the first bad commit
    side_shas: list[str]  # commits only on merged side branches


def _blob(data: str) -> str:
    raw = data.encode()
    return f"data {len(raw)}\n{data}"


def write_history(
    path: Path,
    verdicts: Sequence[str],
    *,
    sleep_s: float = 0.0,
    merge_every: int = 0,
    side_branches: dict[int, list[str]] | None = None,
    subject_prefix: str = "change",
) -> SyntheticHistory:
    """A repo whose first-parent chain has one commit per verdict (verdicts[0] should be 'good').

    With merge_every=k, every k-th commit is a merge of a one-commit side branch whose content
    matches the merge's own verdict, so bisecting along first parents still has one answer.
    side_branches={i: verdicts} makes commit i a merge of a branch with those commits (forked from i-1).
    """
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    stream: list[str] = []
    mark = 0
    marks: list[int] = []
    side_marks: list[int] = []
    timestamp = 1_700_000_000
    test_script = TEST_SCRIPT % {"sleep": sleep_s}
    for index, verdict in enumerate(verdicts):
        side_mark = None
        side = (side_branches or {}).get(index)
        if side is None and merge_every and index > 0 and index % merge_every == 0:
            side = [verdict]
        for offset, side_verdict in enumerate(side or []):
            mark += 1
            timestamp += 1
            stream += [
                "commit refs/heads/side",
                f"mark :{mark}",
                f"author Side Dev <side@example.com> {timestamp} +0000",
                f"committer Side Dev <side@example.com> {timestamp} +0000",
                _blob(f"side work {index}.{offset}"),
                f"from :{side_mark if side_mark else marks[-1]}",
                f"M 100644 inline side-{index}-{offset}.txt\n" + _blob(f"side {index}"),
                f"M 100644 inline verdict\n{_blob(side_verdict)}",
                "",
            ]
            side_mark = mark
            side_marks.append(side_mark)
        mark += 1
        timestamp += 1
        subject = (
            f"Merge pull request #{1000 + index} from dev/side-{index}"
            if side_mark
            else f"{subject_prefix} {index} (#{2000 + index})"
        )
        stream += [
            "commit refs/heads/main",
            f"mark :{mark}",
            f"author Dev {index % 7} <dev{index % 7}@example.com> {timestamp} +0000",
            f"committer Dev {index % 7} <dev{index % 7}@example.com> {timestamp} +0000",
            _blob(subject),
        ]
        if marks:
            stream.append(f"from :{marks[-1]}")
        if side_mark:
            stream.append(f"merge :{side_mark}")
        stream += [
            f"M 100644 inline verdict\n{_blob(verdict)}",
            f"M 100644 inline counter.txt\n{_blob(str(index))}",
        ]
        if index == 0:
            stream += [
                f"M 100755 inline test.sh\n{_blob(test_script)}",
                f"M 100755 inline build.sh\n{_blob(BUILD_SCRIPT)}",
            ]
        stream.append("")
        marks.append(mark)
    stream.append("done\n")
    subprocess.run(
        ["git", "fast-import", "--quiet", "--done", "--export-marks=.git/bisect-marks"],
        cwd=path,
        input="\n".join(stream).encode(),
        check=True,
    )
    marks_file = path / ".git" / "bisect-marks"
    sha_of = dict(line.split() for line in marks_file.read_text().splitlines())
    marks_file.unlink()
    subprocess.run(["git", "checkout", "-q", "-f", "main"], cwd=path, check=True)
    shas = [sha_of[f":{m}"] for m in marks]
    first_bad = next((i for i, v in enumerate(verdicts) if v == "bad"), len(verdicts))
    return SyntheticHistory(path, shas, first_bad, [sha_of[f":{m}"] for m in side_marks])


def culprit_history(path: Path, commits: int, culprit: int, **options: object) -> SyntheticHistory:
    """commits+1 commits on main: index 0 good, indexes >= culprit bad."""
    verdicts = ["good" if i < culprit else "bad" for i in range(commits + 1)]
    return write_history(path, verdicts, **options)  # type: ignore[arg-type]


PRUNE_BENCH = """import json
import sys

from stack import core

limits = json.load(open("stack/limits.json"))
speed = core.speed()
print(f"speed: {speed}")
sys.exit(0 if speed >= limits["min_speed"] else 1)
"""


@dataclass(frozen=True)
class FilesHistory:
    path: Path
    shas: list[str]  # oldest first: shas[0] is good, shas[-1] is bad
    culprit: int  # index into shas of the first bad commit


def write_files_history(path: Path, commits: Sequence[Mapping[str, str | None]]) -> list[str]:
    """A linear history, one commit per mapping of path -> content (None: delete); returns the SHAs, oldest first."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    stream: list[str] = []
    for index, files in enumerate(commits):
        stamp = 1_700_000_000 + index
        stream += ["commit refs/heads/main", f"mark :{index + 1}",
                   f"committer Dev <dev@example.com> {stamp} +0000", _blob(f"change {index}")]  # fmt: skip
        if index:
            stream.append(f"from :{index}")
        for name, content in files.items():
            stream.append(f"D {name}" if content is None else f"M 100644 inline {name}\n{_blob(content)}")
        stream.append("")
    stream.append("done\n")
    subprocess.run(["git", "fast-import", "--quiet", "--done", "--export-marks=.git/bisect-marks"], cwd=path,
                   input="\n".join(stream).encode(), check=True)  # fmt: skip
    marks_file = path / ".git" / "bisect-marks"
    sha_of = dict(line.split() for line in marks_file.read_text().splitlines())
    marks_file.unlink()
    subprocess.run(["git", "checkout", "-q", "-f", "main"], cwd=path, check=True)
    return [sha_of[f":{i + 1}"] for i in range(len(commits))]


def prune_history(path: Path, commits: int, relevant: int, culprit: int, *, culprit_file: str = "core") -> FilesHistory:
    """commits+1 commits: a Python test (bench.py: `python bench.py` exits 1 when stack/core.py's speed is below
    stack/limits.json's min_speed) and churn. Every commits//relevant-th commit touches what the test runs
    (stack/core.py); the others touch docs and modules it never imports. The commit at index culprit (one of the
    relevant ones) makes it fail: it lowers the speed (culprit_file "core") or raises the limit ("limits")."""
    step = max(commits // relevant, 1)
    assert culprit % step == 0, "the culprit is one of the relevant commits"
    history: list[dict[str, str | None]] = [{
        "bench.py": PRUNE_BENCH, "stack/__init__.py": "", "stack/limits.json": '{"min_speed": 5}\n',
        "stack/core.py": "def speed():\n    return 10\n", "README.md": "# stack\n", "docs/guide.md": "# guide\n",
        "other/table.json": "{}\n",
    }]  # fmt: skip
    for index in range(1, commits + 1):
        if index % step:
            kind = index % 3
            name = ("docs/guide.md", f"other/mod_{index % 7}.py", "other/table.json")[kind]
            history.append({name: f"# revision {index}\n" if kind < 2 else f'{{"revision": {index}}}\n'})
            continue
        bad = index >= culprit
        speed = 3 if bad and culprit_file == "core" else 10
        if index == culprit and culprit_file == "limits":
            history.append({"stack/limits.json": '{"min_speed": 20}\n'})
        else:
            history.append({"stack/core.py": f"# revision {index}\ndef speed():\n    return {speed}\n"})
    return FilesHistory(path, write_files_history(path, history), culprit)
