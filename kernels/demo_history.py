"""The demo repository's history, built deterministically from one Random: the commits (churn, pull request
merges, the culprit among unrelated lines), their files and texts, and the git fast-import stream that writes
them. ``kernels.demo`` writes it to disk and says how to bisect it. No torch here: the core CLI imports this.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import demo_build
from .demo_texts import (
    AREAS,
    AUTHORS,
    CULPRIT_BODY,
    CULPRIT_DOC,
    DISPATCH_DOC,
    DOC_SENTENCES,
    DOC_TOPICS,
    DOCS,
    LOGINS,
    OTHER_KERNELS,
    OTHER_ROWS,
    README,
    TEST_MMA,
    TEST_TINY_GEMM,
    ci_yaml,
    other_kernel,
    test_file,
)

GOOD_TAG = "demo-good"
BRANCH = "main"
SIDE_REF = "refs/demo-side"  # pull request branches are written here, then the ref is deleted
METRIC_REGEX = r"accept length: ([0-9.]+)"
EXPECT = ">= 4.0"

# The files of the stack that the bench needs, copied from this installed package.
STACK_FILES = (
    "__init__.py",
    "bench.py",
    "cli_input.py",
    "cpu_gemm.py",
    "fixed_order.py",
    "gemm_bench.py",
    "kernel_kind.py",
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


@dataclass
class _Commit:
    subject: str
    body: str
    author: tuple[str, str]
    changes: dict[str, str]
    timestamp: int
    mark: int = 0
    parents: list[int] = field(default_factory=list)


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


class DemoHistory:
    """The commits of the demo, built deterministically from one Random."""

    def __init__(self, rng: random.Random, commits: int) -> None:
        self.rng = rng
        self.commits = commits
        self.sources = _stack_sources()
        installed = _parse_table(self.sources[TABLE_FILE])
        self.other_shapes = {shape for shape, _, _ in OTHER_ROWS}
        # The initial import has the decoder's rows (pinned to SIMT) and only part of the other rows.
        self.table = {s: row for s, row in installed.items() if s not in self.other_shapes}
        self.table.update({s: (values[0], note) for s, values, note in OTHER_ROWS[:2]})
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
        return self.rng.choice(AUTHORS)

    def _table_source(self) -> str:
        return _render_table(self.sources[TABLE_FILE], self.table)

    def initial(self) -> _Commit:
        changes = {**self.sources, TABLE_FILE: self._table_source()}
        changes.update(
            {
                "README.md": README,
                ".gitignore": "__pycache__/\n*.pyc\n.pytest_cache/\n*.o\n*.so\n*.egg-info/\n",
                **demo_build.FILES,
                "CHANGELOG.md": "# Changelog\n\n## Unreleased\n",
                ".github/workflows/ci.yml": ci_yaml("v4", "3.11", 30),
                "docs/dispatch.md": DISPATCH_DOC,
                "tests/test_tiny_gemm.py": TEST_TINY_GEMM,
            }
        )
        return _Commit(
            subject="Import the tiny GEMM stack with the decoder benchmark (#47512)",
            body="SIMT kernel for small m, per-shape tuning table, CPU twins and the accept-length bench.",
            author=AUTHORS[0],
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
        doc = self.rng.choice(DOCS)
        current = self.files.get(doc, f"# {Path(doc).stem.replace('_', ' ').title()}\n")
        topic = self.rng.choice(DOC_TOPICS)
        text = current + f"\n## {topic}\n\n{self.rng.choice(DOC_SENTENCES)}\n"
        verb = self.rng.choice(["Document", "Clarify", "Expand", "Fix typos in"])
        return self._commit(f"[Docs] {verb} {topic[0].lower()}{topic[1:]}", {doc: text})

    def _churn_kernel(self) -> _Commit:
        name = self.rng.choice(OTHER_KERNELS)
        version = self.kernel_versions.get(name, 0) + 1
        self.kernel_versions[name] = version
        area = self.rng.choice(AREAS[:3])
        action = "Add" if version == 1 else self.rng.choice(["Vectorize", "Tune", "Fix edge case in", "Refactor"])
        path = f"kernels/ops/{name}.py"
        changes = {path: other_kernel(name, version, self.rng.randrange(2, 9) * 32)}
        if "kernels/ops/__init__.py" not in self.files:
            changes["kernels/ops/__init__.py"] = '"""Other kernels of the stack (not used by the decoder bench)."""\n'
        return self._commit(f"[Perf] [{area}] {name}: {action.lower()} reference kernel", changes)

    def _churn_tune(self) -> _Commit:
        shape, values, note = self.rng.choice(OTHER_ROWS)
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
        return self._commit(f"[Test] {name}: cover {cases} more shapes", {path: test_file(name, cases)})

    def _churn_ci(self) -> _Commit:
        checkout = self.rng.choice(["v4", "v5"])
        python = self.rng.choice(["3.11", "3.12"])
        minutes = self.rng.choice([20, 30, 45, 60])
        return self._commit(
            f"[CI] Run unit tests on Python {python} with a {minutes}-minute timeout",
            {".github/workflows/ci.yml": ci_yaml(checkout, python, minutes)},
        )

    def _churn_changelog(self) -> _Commit:
        current = self.files.get("CHANGELOG.md", "# Changelog\n\n## Unreleased\n")
        entry = self.rng.choice(DOC_SENTENCES)
        return self._commit("[Misc] Update the changelog", {"CHANGELOG.md": current + f"- {entry}\n"})

    def culprit(self) -> _Commit:
        for shape in CULPRIT_SHAPES:
            note = self.table.get(shape, ("", ""))[1].split(":")[0]
            self.table[shape] = ("2", f"{note}: MMA from 2 (cost model, B300)" if note else "cost model, B300")
        self.table[(7168, 256)] = ("4", "DeepSeek-V4.1 shared expert down")
        changes = {
            TABLE_FILE: self._table_source(),
            "docs/dispatch.md": self.files.get("docs/dispatch.md", DISPATCH_DOC) + CULPRIT_DOC,
            "tests/test_tiny_gemm_mma.py": TEST_MMA,
            "CHANGELOG.md": self.files.get("CHANGELOG.md", "") + "- gemm: mma.sync template for the tiny GEMM\n",
        }
        commit = self._commit(CULPRIT_SUBJECT, changes, body=CULPRIT_BODY)
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
        login = self.rng.choice(LOGINS)
        name = self.rng.choice(OTHER_KERNELS)
        branch = f"{login}/{name.replace('_', '-')}-{self.rng.randrange(100, 999)}"
        pr = self._next_pr()
        side_tip, touched = tip, {}
        for step in range(self.rng.randrange(1, 4)):
            version = self.kernel_versions.get(name, 0) + 1
            self.kernel_versions[name] = version
            changes = {f"kernels/ops/{name}.py": other_kernel(name, version, 64 * (step + 1))}
            if step == 0:
                changes[f"tests/test_{name}.py"] = test_file(name, 2 + step)
            commit = _Commit(
                f"{name}: {['initial version', 'address review', 'fix lint'][step]}",
                "",
                self._author(),
                changes,
                self._tick(),
                parents=[side_tip],
            )
            touched.update(changes)
            side_tip = emit(commit, SIDE_REF)
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
