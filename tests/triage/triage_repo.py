"""Real git repositories and result files for the triage tests (imported by name)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "Dev",
        "GIT_AUTHOR_EMAIL": "dev@example.com",
        "GIT_COMMITTER_NAME": "Dev",
        "GIT_COMMITTER_EMAIL": "dev@example.com",
    }
    done = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def commit(repo: Path, subject: str, files: dict[str, str], author: str = "Dev <dev@example.com>") -> str:
    for name, content in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(content)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--author", author, "-m", subject)
    return git(repo, "rev-parse", "HEAD")


def init_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    return path


@dataclass(frozen=True)
class ServingRepo:
    path: Path
    good: str
    docs: str  # touches docs only
    gemm: str  # touches kernels/gemm.py, which the regression's traceback names
    serving: str  # the bad commit, touches serving code only


def serving_repo(path: Path) -> ServingRepo:
    repo = init_repo(path)
    good = commit(repo, "Initial serving stack", {"kernels/gemm.py": "MMA_MIN_M = 16\n", "serving/app.py": "x = 1\n"})
    docs = commit(repo, "Document the scheduler (#11)", {"docs/scheduler.md": "# scheduler\n"}, "Ann <ann@example.com>")
    gemm = commit(repo, "Tune the GEMM dispatch threshold (#12)", {"kernels/gemm.py": "MMA_MIN_M = 8\n"})
    serving = commit(repo, "Refactor the serving loop (#13)", {"serving/app.py": "x = 2\n"}, "Bo <bo@example.com>")
    return ServingRepo(repo, good, docs, gemm, serving)


def results(tmp: Path, fixture: str, commit_sha: str, name: str | None = None) -> Path:
    """A fixture with its @COMMIT@ placeholder filled, written under tmp."""
    target = tmp / (name or fixture)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text((FIXTURES / fixture).read_text().replace("@COMMIT@", commit_sha))
    return target


TEST_CALC = """import pytest

from calc import add


def test_add():
    assert add(2, 2) == 4


@pytest.mark.parametrize("n", [1, 2, 3])
def test_double(n):
    assert add(n, n) == 2 * n
"""
BENCH = "print(f\"latency_ms: {float(open('latency.txt').read()):g}\")\n"


@dataclass(frozen=True)
class CalcRepo:
    """A small project whose pytest tests regress at `broken` and whose latency regresses at `slow`."""

    path: Path
    shas: list[str]  # oldest first: shas[0] good, shas[-1] bad

    @property
    def slow(self) -> str:
        return self.shas[1]

    @property
    def broken(self) -> str:
        return self.shas[3]


def calc_repo(path: Path) -> CalcRepo:
    repo = init_repo(path)
    shas = [
        commit(
            repo,
            "Add calc (#20)",
            {
                "calc.py": "def add(a, b):\n    return a + b\n",
                "tests/test_calc.py": TEST_CALC,
                "bench.py": BENCH,
                "latency.txt": "50\n",
            },
        ),
        commit(repo, "Slow down the decode path (#21)", {"latency.txt": "80\n"}),
        commit(repo, "Document calc (#22)", {"README.md": "calc\n"}),
        commit(repo, "Fast path for add (#23)", {"calc.py": "def add(a, b):\n    return a + b + (a > 1)\n"}),
        commit(repo, "More docs (#24)", {"README.md": "calc, more\n"}),
    ]
    return CalcRepo(repo, shas)


def pytest_junit(repo: Path, sha: str, target: Path, *options: str) -> Path:
    """Run the repository's tests at sha for real, writing JUnit XML to target (outside the repository)."""
    import sys

    git(repo, "checkout", "-q", sha)
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={target}", *options, "tests"],
        cwd=repo, capture_output=True, text=True, check=False,
    )  # fmt: skip
    git(repo, "checkout", "-q", "main")
    return target


OPS = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
TEST_OPS = """from ops import add, sub


def test_add():
    assert add(2, 2) == 4


def test_sub():
    assert sub(2, 2) == 0


class TestOps:
    def test_both(self):
        assert sub(add(1, 2), 2) == 1
"""


@dataclass(frozen=True)
class ImportRepo:
    """Tests that all pass at `good`; `broken` renames a function tests/test_ops.py imports and makes
    tests/gpu/conftest.py import a missing module, so pytest cannot collect either; `docs` follows it."""

    path: Path
    good: str
    broken: str
    docs: str


def import_repo(path: Path) -> ImportRepo:
    repo = init_repo(path)
    good = commit(
        repo,
        "Add ops (#30)",
        {
            "ops.py": OPS,
            "tests/test_ops.py": TEST_OPS,
            "tests/test_other.py": "def test_other():\n    pass\n",
            "tests/gpu/conftest.py": "",
            "tests/gpu/test_kernel.py": "def test_kernel():\n    pass\n",
        },
    )
    broken = commit(
        repo,
        "Rename sub, require triton_missing on GPUs (#31)",
        {"ops.py": OPS.replace("def sub", "def subtract"), "tests/gpu/conftest.py": "import triton_missing\n"},
    )
    docs = commit(repo, "Document ops (#32)", {"README.md": "ops\n"})
    return ImportRepo(repo, good, broken, docs)
