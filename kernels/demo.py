"""Demo history generator: a git repository of this kernel stack in which one commit causes the regression.

``init_demo_repo(path, commits=200, seed=0)`` writes a repository whose first-parent history from the good
endpoint (the tagged initial import, ``demo-good``) to the tip of ``main`` has ``commits`` commits of
realistic churn: docs, other kernels, tuning rows for other shapes, tests, CI files, merge commits of pull
request branches, PR numbers in subjects. Exactly one commit (at a seed-dependent position, never at either
end) moves the decoder's projections to MMA from m = 2 in ``_TUNED_MMA_MIN_M``, among unrelated lines. At
every commit, ``python -m kernels.bench accept-length --k 3`` run at the checkout's root imports that
checkout's own ``kernels/`` and measures its table: 4.0 before the culprit, below 4.0 from it on.

The history is written with one ``git fast-import`` stream with fixed names and dates, so a seed always gives
the same SHAs (for a given version of this package); 1000 commits take a few seconds. No torch here: the core
CLI imports this module.
"""

from __future__ import annotations

import argparse
import random
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kernels import demo_build

GOOD_TAG = "demo-good"
BRANCH = "main"
_SIDE_REF = "refs/demo-side"  # pull request branches are written here, then the ref is deleted
METRIC_REGEX = r"accept length: ([0-9.]+)"
EXPECT = ">= 4.0"

# The files of the stack that the bench needs, copied from this installed package.
STACK_FILES = (
    "__init__.py",
    "bench.py",
    "cpu_gemm.py",
    "fixed_order.py",
    "gemm_bench.py",
    "model.py",
    "native.py",
    "probe.py",
    "tiny_gemm.py",
    "trace.py",
    "triton_gemm.py",
    "triton_kernels.py",
)
TABLE_FILE = "kernels/tiny_gemm.py"

# The decoder's projections (both configurations): the culprit moves these to MMA from m = 2.
CULPRIT_SHAPES = ((144, 1024), (144, 7168), (896, 1024), (896, 7168), (1536, 128))
CULPRIT_SUBJECT = "[Perf] [NVIDIA] gemm: Tiny GEMM as SIMT + mma.sync templates with batch-size dispatch"

_START_EPOCH = 1788220800  # 2026-09-01 00:00 UTC
_ROW = re.compile(r"^\s*\((\d+),\s*(\d+)\):\s*([A-Za-z_0-9]+),\s*(?:#\s*(.*))?$")
_TABLE_OPEN = "_TUNED_MMA_MIN_M: dict[tuple[int, int], int] = {\n"

_AUTHORS = (
    ("Mingyi Lu", "mingyi.lu@example.com"),
    ("Priya Raman", "priya.raman@example.com"),
    ("Jonas Keller", "jkeller@example.com"),
    ("Ana Souza", "ana.souza@example.com"),
    ("Wei Zhang", "wzhang@example.com"),
    ("Fatima Haddad", "fhaddad@example.com"),
    ("Tomasz Nowak", "tnowak@example.com"),
    ("Kenji Sato", "kenji.sato@example.com"),
    ("Olivia Brown", "olivia.brown@example.com"),
    ("Rahul Mehta", "rmehta@example.com"),
    ("Lea Martin", "lea.martin@example.com"),
    ("Diego Alvarez", "dalvarez@example.com"),
)
_LOGINS = ("mlu", "praman", "jkeller", "asouza", "wzhang", "fhaddad", "tnowak", "ksato", "obrown", "rmehta")

# Tuning rows for shapes the decoder never uses, and the values churn moves them through.
_OTHER_ROWS: tuple[tuple[tuple[int, int], tuple[str, ...], str], ...] = (
    ((256, 7168), ("8", "6", "12", "8"), "DeepSeek-V3 router"),
    ((384, 7168), ("8", "16", "12"), "DeepSeek-V4.1 router"),
    ((2112, 7168), ("4", "8", "6"), "DeepSeek-V4.1 q_a/kv_a fused projection"),
    ((160, 5120), ("4", "2", "SIMT_ONLY"), "dots3 router"),
    ((512, 4096), ("8", "16"), "beam-search rescoring head"),
    ((7168, 256), ("2", "4"), "DeepSeek-V4.1 shared expert down"),
    ((64, 2880), ("SIMT_ONLY", "16"), "gpt-oss router"),
    ((3072, 1536), ("2", "4"), "Qwen3 kv projection"),
    ((1024, 2048), ("4", "8"), "dots3 gate"),
)
_OTHER_KERNELS = ("rope", "silu_and_mul", "topk_softmax", "rms_norm_ref", "fp8_quant", "moe_align")
_DOCS = ("docs/dispatch.md", "docs/kernels.md", "docs/tuning.md", "docs/ci.md", "README.md")
_AREAS = ("NVIDIA", "AMD", "NPU", "CI", "Docs")


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


@dataclass
class _Commit:
    subject: str
    body: str
    author: tuple[str, str]
    changes: dict[str, str]
    timestamp: int
    mark: int = 0
    parents: list[int] = field(default_factory=list)


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
    history = _History(random.Random(seed), commits)
    stream, culprit_mark = history.fast_import_stream()
    path.mkdir(parents=True, exist_ok=True)
    _git(path, "init", "-q", "-b", BRANCH)
    _git(path, "config", "core.autocrlf", "false")
    marks = path / ".git" / "demo-marks"
    _git(path, "fast-import", "--quiet", f"--export-marks={marks}", stdin=stream)
    mark_sha = dict(line.split() for line in marks.read_text().splitlines())
    marks.unlink()
    _git(path, "update-ref", "-d", _SIDE_REF)
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
        run_cmd=f"{interpreter} -m kernels.bench accept-length --k 3",
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


def _stack_sources() -> dict[str, str]:
    here = Path(__file__).resolve().parent
    return {f"kernels/{name}": (here / name).read_text(encoding="utf-8") for name in STACK_FILES}


def _parse_table(source: str) -> dict[tuple[int, int], tuple[str, str]]:
    start = source.index(_TABLE_OPEN) + len(_TABLE_OPEN)
    end = source.index("\n}\n", start)
    rows: dict[tuple[int, int], tuple[str, str]] = {}
    for line in source[start:end].splitlines():
        match = _ROW.match(line)
        if match:
            rows[(int(match[1]), int(match[2]))] = (match[3], match[4] or "")
    return rows


def _render_table(source: str, rows: dict[tuple[int, int], tuple[str, str]]) -> str:
    start = source.index(_TABLE_OPEN) + len(_TABLE_OPEN)
    end = source.index("\n}\n", start)
    lines = []
    for (n, k), (value, comment) in sorted(rows.items()):
        lines.append(f"    ({n}, {k}): {value},  # {comment}" if comment else f"    ({n}, {k}): {value},")
    return source[:start] + "\n".join(lines) + source[end:]


class _History:
    """The commits of the demo, built deterministically from one Random."""

    def __init__(self, rng: random.Random, commits: int) -> None:
        self.rng = rng
        self.commits = commits
        self.sources = _stack_sources()
        installed = _parse_table(self.sources[TABLE_FILE])
        self.other_shapes = {shape for shape, _, _ in _OTHER_ROWS}
        # The initial import has the decoder's rows (pinned to SIMT) and only part of the other rows.
        self.table = {s: row for s, row in installed.items() if s not in self.other_shapes}
        self.table.update({s: (values[0], note) for s, values, note in _OTHER_ROWS[:2]})
        self.pr = 47_600 + rng.randrange(50)
        self.clock = _START_EPOCH
        self.files: dict[str, str] = {}
        self.kernel_versions: dict[str, int] = {}
        self.good_mark = 0
        self.culprit_subject = ""

    def _tick(self) -> int:
        self.clock += self.rng.randrange(1800, 5 * 3600)
        return self.clock

    def _next_pr(self) -> int:
        self.pr += self.rng.randrange(1, 12)
        return self.pr

    def _author(self) -> tuple[str, str]:
        return self.rng.choice(_AUTHORS)

    def _table_source(self) -> str:
        return _render_table(self.sources[TABLE_FILE], self.table)

    def initial(self) -> _Commit:
        changes = {**self.sources, TABLE_FILE: self._table_source()}
        changes.update(
            {
                "README.md": _README,
                ".gitignore": "__pycache__/\n*.pyc\n.pytest_cache/\n*.o\n*.so\n*.egg-info/\n",
                **demo_build.FILES,
                "CHANGELOG.md": "# Changelog\n\n## Unreleased\n",
                ".github/workflows/ci.yml": _ci_yaml("v4", "3.11", 30),
                "docs/dispatch.md": _DISPATCH_DOC,
                "tests/test_tiny_gemm.py": _TEST_TINY_GEMM,
            }
        )
        return _Commit(
            subject="Import the tiny GEMM stack with the decoder benchmark (#47512)",
            body="SIMT kernel for small m, per-shape tuning table, CPU twins and the accept-length bench.",
            author=_AUTHORS[0],
            changes=changes,
            timestamp=self._tick(),
        )

    def churn(self) -> _Commit:
        kinds: dict[str, tuple[int, Callable[[], _Commit]]] = {
            "docs": (5, self._churn_docs),
            "kernel": (5, self._churn_kernel),
            "tune": (3, self._churn_tune),
            "test": (3, self._churn_test),
            "ci": (2, self._churn_ci),
            "changelog": (2, self._churn_changelog),
        }
        kind = self.rng.choices(list(kinds), weights=[weight for weight, _ in kinds.values()])[0]
        return kinds[kind][1]()

    def _commit(self, subject: str, changes: dict[str, str], body: str = "") -> _Commit:
        return _Commit(f"{subject} (#{self._next_pr()})", body, self._author(), changes, self._tick())

    def _churn_docs(self) -> _Commit:
        doc = self.rng.choice(_DOCS)
        current = self.files.get(doc, f"# {Path(doc).stem.replace('_', ' ').title()}\n")
        topic = self.rng.choice(_DOC_TOPICS)
        text = current + f"\n## {topic}\n\n{self.rng.choice(_DOC_SENTENCES)}\n"
        verb = self.rng.choice(["Document", "Clarify", "Expand", "Fix typos in"])
        return self._commit(f"[Docs] {verb} {topic[0].lower()}{topic[1:]}", {doc: text})

    def _churn_kernel(self) -> _Commit:
        name = self.rng.choice(_OTHER_KERNELS)
        version = self.kernel_versions.get(name, 0) + 1
        self.kernel_versions[name] = version
        area = self.rng.choice(_AREAS[:3])
        action = "Add" if version == 1 else self.rng.choice(["Vectorize", "Tune", "Fix edge case in", "Refactor"])
        path = f"kernels/ops/{name}.py"
        changes = {path: _other_kernel(name, version, self.rng.randrange(2, 9) * 32)}
        if "kernels/ops/__init__.py" not in self.files:
            changes["kernels/ops/__init__.py"] = '"""Other kernels of the stack (not used by the decoder bench)."""\n'
        return self._commit(f"[Perf] [{area}] {name}: {action.lower()} reference kernel", changes)

    def _churn_tune(self) -> _Commit:
        shape, values, note = self.rng.choice(_OTHER_ROWS)
        current = self.table.get(shape)
        choices = [v for v in values if current is None or v != current[0]]
        value = self.rng.choice(choices)
        self.table[shape] = (value, note)
        what = "pin to SIMT" if value == "SIMT_ONLY" else f"MMA from {value}"
        gpu = self.rng.choice(["H100", "H200", "B200", "H20", "MI300X"])
        return self._commit(
            f"[Tune] gemm: {shape[0]}x{shape[1]} ({note}): {what} on {gpu}", {TABLE_FILE: self._table_source()}
        )

    def _churn_test(self) -> _Commit:
        if not self.kernel_versions:
            return self._churn_kernel()
        name = self.rng.choice(sorted(self.kernel_versions))
        path = f"tests/test_{name}.py"
        cases = self.rng.randrange(2, 6)
        return self._commit(f"[Test] {name}: cover {cases} more shapes", {path: _test_file(name, cases)})

    def _churn_ci(self) -> _Commit:
        checkout = self.rng.choice(["v4", "v5"])
        python = self.rng.choice(["3.11", "3.12"])
        minutes = self.rng.choice([20, 30, 45, 60])
        return self._commit(
            f"[CI] Run unit tests on Python {python} with a {minutes}-minute timeout",
            {".github/workflows/ci.yml": _ci_yaml(checkout, python, minutes)},
        )

    def _churn_changelog(self) -> _Commit:
        current = self.files.get("CHANGELOG.md", "# Changelog\n\n## Unreleased\n")
        entry = self.rng.choice(_DOC_SENTENCES)
        return self._commit("[Misc] Update the changelog", {"CHANGELOG.md": current + f"- {entry}\n"})

    def culprit(self) -> _Commit:
        for shape in CULPRIT_SHAPES:
            note = self.table.get(shape, ("", ""))[1].split(":")[0]
            self.table[shape] = ("2", f"{note}: MMA from 2 (cost model, B300)" if note else "cost model, B300")
        self.table[(7168, 256)] = ("4", "DeepSeek-V4.1 shared expert down")
        changes = {
            TABLE_FILE: self._table_source(),
            "docs/dispatch.md": self.files.get("docs/dispatch.md", _DISPATCH_DOC) + _CULPRIT_DOC,
            "tests/test_tiny_gemm_mma.py": _TEST_MMA,
            "CHANGELOG.md": self.files.get("CHANGELOG.md", "") + "- gemm: mma.sync template for the tiny GEMM\n",
        }
        commit = self._commit(CULPRIT_SUBJECT, changes, body=_CULPRIT_BODY)
        self.culprit_subject = commit.subject
        return commit

    def fast_import_stream(self) -> tuple[bytes, int]:
        """The whole history as a fast-import stream, and the culprit's mark."""
        out: list[bytes] = []
        mark = 0

        def emit(commit: _Commit, ref: str) -> int:
            nonlocal mark
            mark += 1
            commit.mark = mark
            name, email = commit.author
            message = commit.subject + (f"\n\n{commit.body}" if commit.body else "") + "\n"
            lines = [
                f"commit {ref}",
                f"mark :{mark}",
                f"author {name} <{email}> {commit.timestamp} +0000",
                f"committer {name} <{email}> {commit.timestamp} +0000",
            ]
            out.append(("\n".join(lines) + "\n").encode() + _data(message))
            if commit.parents:
                out.append(f"from :{commit.parents[0]}\n".encode())
                out.extend(f"merge :{p}\n".encode() for p in commit.parents[1:])
            for file_path, content in sorted(commit.changes.items()):
                out.append(f"M 100644 inline {file_path}\n".encode() + _data(content))
            out.append(b"\n")
            return mark

        first = self.initial()
        self.files.update(first.changes)
        self.good_mark = emit(first, f"refs/heads/{BRANCH}")
        out.append(f"reset refs/tags/{GOOD_TAG}\nfrom :{self.good_mark}\n\n".encode())
        low, high = max(1, self.commits // 5), max(2, self.commits - self.commits // 5)
        culprit_at = self.rng.randrange(low, high)
        merges = set(self.rng.sample(range(1, self.commits + 1), k=max(1, self.commits // 25)))
        merges.discard(culprit_at)
        merges.discard(self.commits)
        tip, culprit_mark = self.good_mark, 0
        for position in range(1, self.commits + 1):
            if position == culprit_at:
                commit = self.culprit()
            elif position in merges:
                tip = self._merge(emit, tip)
                continue
            else:
                commit = self.churn()
            commit.parents = [tip]
            self.files.update(commit.changes)
            tip = emit(commit, f"refs/heads/{BRANCH}")
            if position == culprit_at:
                culprit_mark = tip
        out.append(b"done\n")
        return b"".join(out), culprit_mark

    def _merge(self, emit: Callable[[_Commit, str], int], tip: int) -> int:
        """A pull request branch of 1-3 commits off the current tip, merged with a merge commit."""
        login = self.rng.choice(_LOGINS)
        name = self.rng.choice(_OTHER_KERNELS)
        branch = f"{login}/{name.replace('_', '-')}-{self.rng.randrange(100, 999)}"
        pr = self._next_pr()
        side_tip, touched = tip, {}
        for step in range(self.rng.randrange(1, 4)):
            version = self.kernel_versions.get(name, 0) + 1
            self.kernel_versions[name] = version
            changes = {f"kernels/ops/{name}.py": _other_kernel(name, version, 64 * (step + 1))}
            if step == 0:
                changes[f"tests/test_{name}.py"] = _test_file(name, 2 + step)
            commit = _Commit(
                f"{name}: {['initial version', 'address review', 'fix lint'][step]}",
                "",
                self._author(),
                changes,
                self._tick(),
                parents=[side_tip],
            )
            touched.update(changes)
            side_tip = emit(commit, _SIDE_REF)
        merge = _Commit(
            f"Merge pull request #{pr} from {branch}",
            f"[Perf] {name}: faster reference path",
            self._author(),
            touched,
            self._tick(),
            parents=[tip, side_tip],
        )
        self.files.update(touched)
        return emit(merge, f"refs/heads/{BRANCH}")


def _data(text: str) -> bytes:
    raw = text.encode()
    return f"data {len(raw)}\n".encode() + raw + b"\n"


def _other_kernel(name: str, version: int, block: int) -> str:
    return (
        f'"""Reference {name.replace("_", " ")} kernel (revision {version}); not used by the decoder bench."""\n\n'
        f"BLOCK = {block}\n\n\n"
        f"def launch_config(n: int) -> tuple[int, int]:\n"
        f"    return (n + BLOCK - 1) // BLOCK, BLOCK\n"
    )


def _test_file(name: str, cases: int) -> str:
    sizes = ", ".join(str(64 * (i + 1)) for i in range(cases))
    return (
        f"import pytest\n\nfrom kernels.ops import {name}\n\n\n"
        f"@pytest.mark.parametrize('n', [{sizes}])\n"
        f"def test_{name}_grid_covers(n):\n"
        f"    blocks, block = {name}.launch_config(n)\n"
        f"    assert blocks * block >= n\n"
    )


def _ci_yaml(checkout: str, python: str, minutes: int) -> str:
    return (
        "name: ci\non: [push, pull_request]\njobs:\n  unit:\n    runs-on: ubuntu-latest\n"
        f"    timeout-minutes: {minutes}\n    steps:\n      - uses: actions/checkout@{checkout}\n"
        f"      - uses: actions/setup-python@v5\n        with:\n          python-version: '{python}'\n"
        "      - run: pip install torch numpy pytest\n      - run: python -m pytest -q tests\n"
        "      - run: python -m kernels.bench accept-length --k 3\n"
    )


_README = """# tiny-gemm-stack (gpu-bisect demo)

A small kernel stack: a tiny GEMM with a SIMT and an MMA kernel, a per-shape dispatch table
(`kernels/tiny_gemm.py`, `_TUNED_MMA_MIN_M`) and a self-speculative decoder benchmark.

    python -m kernels.bench accept-length --k 3     # 4.0000 when dispatch is batch invariant
    python -m kernels.probe batch-invariance
"""

_DISPATCH_DOC = """# Tiny GEMM dispatch

Each (N, K) row of `_TUNED_MMA_MIN_M` says from which m the MMA kernel is used. Shapes that decode
(m = 1) and speculative verify (m = k + 1) both run must stay on one kernel for both.
"""

_CULPRIT_DOC = """
## MMA templates

Small-m GEMMs now switch to an mma.sync template once the cost model predicts it faster; the
thresholds come from B300 runs.
"""

_CULPRIT_BODY = (
    "Adds an mma.sync template next to the SIMT kernel and dispatches per shape by batch size.\n"
    "Thresholds for shapes without a tuned row come from the B300 cost model."
)

_TEST_TINY_GEMM = """from kernels import tiny_gemm


def test_table_rows_are_positive():
    assert all(v >= 1 for v in tiny_gemm.tuned_table().values())
"""

_TEST_MMA = """from kernels import tiny_gemm


def test_mma_threshold_is_reported():
    assert tiny_gemm.threshold_for(896, 7168).mma_min_m >= 1
"""

_DOC_TOPICS = (
    "Tuning a new shape",
    "Reading the dispatch trace",
    "SIMT kernel tiles",
    "CPU fallbacks",
    "Split-K on Hopper",
    "Nightly accept-length job",
    "Adding a router shape",
    "Batch invariance",
    "Profiling small-m GEMMs",
)
_DOC_SENTENCES = (
    "Run the probe before and after changing a row, and paste its output in the pull request.",
    "Tile sizes are part of the numerics: keep them fixed per shape, never per batch size.",
    "The nightly job fails when the accept length drops below the threshold on any prompt set.",
    "Use KERNELS_DISPATCH_TRACE to see which kernel each projection used in a run.",
    "Rows pinned to SIMT stay batch invariant at every m; rows with a threshold do not.",
    "Split-K partials are added in a fixed order so the output does not depend on scheduling.",
    "Router shapes of new models go through the cost model until someone tunes them.",
    "Benchmarks use L2-flushed timings so the weights come from HBM.",
)


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
