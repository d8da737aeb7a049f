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
