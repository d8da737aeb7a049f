"""Synthetic git histories with a known answer, for tests, benchmarks and trying the tool out.

Each commit carries a file `verdict` (good, bad, skip or buildfail) and a `test.sh` that turns it into an
exit code the way a real test would (0, 1, 125), optionally sleeping first. Written through
`git fast-import`, so thousands of commits take a second. Merges put side-branch commits on the
first-parent chain's second parents.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
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
