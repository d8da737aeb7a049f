"""Demo history generator: a git repository of this kernel stack in which one commit causes the regression.

``init_demo_repo(path, commits=200, seed=0)`` writes a repository whose first-parent history from the good
endpoint (the tagged initial import, ``demo-good``) to the tip of ``main`` has ``commits`` commits of
realistic churn: docs, other kernels, tuning rows for other shapes, tests, CI files, merge commits of pull
request branches, PR numbers in subjects. Exactly one commit (at a seed-dependent position, never at either
end) moves the decoder's projections to MMA from m = 2 in ``_TUNED_MMA_MIN_M``, among unrelated lines. At
every commit, ``python -m kernels.bench accept-length --k 3`` run at the checkout's root imports that
checkout's own ``kernels/`` and measures its table: 4.0 before the culprit, below 4.0 from it on. The demo's
steps decode DEMO_PROMPTS of the bench's prompts, which shows that drop in a fraction of the time.

The history is written with one ``git fast-import`` stream with fixed names and dates, so a seed always gives
the same SHAs (for a given version of this package); 1000 commits take a few seconds. No torch here: the core
CLI imports this module.
"""

from __future__ import annotations

import argparse
import random
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from . import demo_build
from .demo_history import (
    BRANCH,
    CULPRIT_SHAPES,
    CULPRIT_SUBJECT,
    EXPECT,
    GOOD_TAG,
    METRIC_REGEX,
    SIDE_REF,
    STACK_FILES,
    TABLE_FILE,
    DemoHistory,
)

__all__ = [
    "BRANCH", "CULPRIT_SHAPES", "CULPRIT_SUBJECT", "EXPECT", "GOOD_TAG", "METRIC_REGEX", "STACK_FILES", "TABLE_FILE",
    "DemoError", "DemoRepo", "describe", "init_demo_repo", "main",
]  # fmt: skip


DEMO_PROMPTS = 4  # of the bench's 12 on a CPU: 3.44 from the culprit on (16 rounds), 4.0 before it


class DemoError(RuntimeError):
    """The demo repository cannot be written (target not empty, git missing or failing)."""


@dataclass(frozen=True)
class DemoRepo:
    """A generated demo repository and how to bisect it."""

    path: Path
    good: str  # full SHA of the good endpoint (tagged demo-good)
    bad: str  # full SHA of the tip of main
    culprit: str  # full SHA of the first bad commit
    culprit_subject: str
    commits: int  # first-parent commits in good..bad
    run_cmd: str  # run at the checkout's root, or at the image's copy of it with the image's venv python
    metric_regex: str  # one capture group: the metric
    expect: str  # the metric's condition for "good"
    build_cmd: str = demo_build.BUILD_CMD  # installs the stack into the image's venv and compiles its C piece
    image_inputs: tuple[str, ...] = demo_build.IMAGE_INPUTS  # the paths that key a commit's image


def init_demo_repo(path: Path, commits: int = 200, seed: int = 0, *, python: str | None = None) -> DemoRepo:
    """Write the demo repository at path (absent or empty) and return its endpoints and culprit.

    ``python`` is the interpreter in run_cmd (default: this one, which has the ``kernels`` extra).
    """
    if commits < 3:
        raise DemoError("the demo needs at least 3 commits between good and bad")
    path = Path(path)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise DemoError(f"{path} exists and is not an empty directory")
    if shutil.which("git") is None:
        raise DemoError("git is not on PATH")
    history = DemoHistory(random.Random(seed), commits)
    stream, culprit_mark = history.fast_import_stream()
    path.mkdir(parents=True, exist_ok=True)
    _git(path, "init", "-q", "-b", BRANCH)
    _git(path, "config", "core.autocrlf", "false")
    marks = path / ".git" / "demo-marks"
    _git(path, "fast-import", "--quiet", f"--export-marks={marks}", stdin=stream)
    mark_sha = dict(line.split() for line in marks.read_text().splitlines())
    marks.unlink()
    _git(path, "update-ref", "-d", SIDE_REF)
    _git(path, "checkout", "-q", "-f", BRANCH)
    good = mark_sha[f":{history.good_mark}"]
    bad = _git(path, "rev-parse", BRANCH).strip()
    culprit = mark_sha[f":{culprit_mark}"]
    counted = int(_git(path, "rev-list", "--first-parent", "--count", f"{good}..{bad}").strip())
    # On an image, its venv's interpreter (the stack is installed there); elsewhere this one (the kernels extra).
    interpreter = f'"${{BISECT_IMAGE_PYTHON:-{shlex.quote(python or sys.executable)}}}"'

    return DemoRepo(
        path=path.resolve(),
        good=good,
        bad=bad,
        culprit=culprit,
        culprit_subject=history.culprit_subject,
        commits=counted,
        run_cmd=f"{interpreter} -m kernels.bench accept-length --k 3 --set prompts={DEMO_PROMPTS}",
        metric_regex=METRIC_REGEX,
        expect=EXPECT,
    )


def describe(demo: DemoRepo) -> str:
    """What `bisect demo init` prints."""
    return "\n".join(
        [
            f"demo repository: {demo.path}",
            f"good: {demo.good}  ({GOOD_TAG})",
            f"bad:  {demo.bad}  ({BRANCH})",
            f"commits in good..bad (first parent): {demo.commits}",
            f"run: {demo.run_cmd}",
            f"metric: {demo.metric_regex}  expect: {demo.expect}",
        ]
    )


def _git(repo: Path, *args: str, stdin: bytes | None = None) -> str:
    env_free = ["-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null"]
    try:
        done = subprocess.run(
            ["git", *env_free, *args], cwd=repo, input=stdin, capture_output=True, check=False, timeout=300
        )
    except OSError as exc:
        raise DemoError(f"git {args[0]} failed: {exc}") from exc
    if done.returncode != 0:
        raise DemoError(f"git {args[0]} failed: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout.decode()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m kernels.demo init DIR [--commits N] [--seed S]``."""
    parser = argparse.ArgumentParser(prog="python -m kernels.demo")
    sub = parser.add_subparsers(dest="command", required=True)
    init = sub.add_parser("init", help="write the demo repository")
    init.add_argument("dir", type=Path)
    init.add_argument("--commits", type=int, default=200)
    init.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        demo = init_demo_repo(args.dir, args.commits, args.seed)
    except DemoError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(describe(demo))
    return 0


if __name__ == "__main__":
    sys.exit(main())
