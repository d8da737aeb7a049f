"""A small repository whose build installs a Python package into the image's venv with uv and compiles a C
library with the compiler cache; its test prints the library's value as the metric. Helpers for tests/images."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from bisector.vocab.metric import Expectation, MetricSpec
from bisector.workers.executor import StepRequest
from bisector.workers.images.key import ImageRecipe

BUILD_SCRIPT = """#!/usr/bin/env bash
set -e
echo "build at $(cat version)" >> "${BUILD_COUNTER:-/dev/null}"
sleep "${BUILD_SLEEP_S:-0}"
if [ -e broken ]; then echo "error: lib.c does not compile"; exit 3; fi
if [ -n "${NETWORK_DOWN:-}" ]; then echo "pip: [Errno 111] Connection refused"; exit 1; fi
uv pip install --quiet --offline --no-deps --no-build-isolation -e ./pkg
$CC -c -fPIC -O1 -o lib.o lib.c  # a compile ccache can serve; the link is not cached
$CC -shared -o libvalue.so lib.o
echo built
"""
TEST_SCRIPT = """#!/usr/bin/env bash
# the package the build installed, from the image's venv; the base environment's packages seen from it too
exec python -c "
import ctypes, sys, sqlalchemy, tinypkg
assert sys.prefix == '$VIRTUAL_ENV', sys.prefix
print('metric:', ctypes.CDLL('./libvalue.so').value())
"
"""


def pyproject(name: str) -> str:
    """A setuptools package's pyproject.toml (pip and uv build it offline, with the base's setuptools)."""
    return (
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "{name}"\nversion = "0.1"\n'
    )


PYPROJECT = pyproject("tinypkg")
RUN_CMD = "bash test.sh"
METRIC = MetricSpec(regex=r"metric: ([0-9.]+)", expect=Expectation.parse(">= 8"))
BUILD_CMD = "bash build.sh"


@dataclass(frozen=True)
class ImageRepo:
    path: Path
    shas: list[str]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def commit(repo: Path, message: str, files: dict[str, str], remove: tuple[str, ...] = ()) -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    for name in remove:
        (repo / name).unlink()
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def init_repo(path: Path) -> None:
    """An empty repository on main with a committer configured."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "t@example.org")
    git(path, "config", "user.name", "t")


def make_image_repo(path: Path, values: tuple[int, ...] = (10, 10, 5)) -> ImageRepo:
    """One commit per value: lib.c returns it; the second commit of equal value changes only the README."""
    init_repo(path)
    shas = []
    for index, value in enumerate(values):
        files = {
            "lib.c": f"int value(void) {{ return {value}; }}\n",
            "version": f"{index}\n",
            "README": f"revision {index}\n",
        }
        if index == 0:
            files.update({"build.sh": BUILD_SCRIPT, "test.sh": TEST_SCRIPT, "pkg/pyproject.toml": PYPROJECT})
            files["pkg/tinypkg/__init__.py"] = "VALUE = 3\n"
        shas.append(commit(path, f"revision {index}", files))
    return ImageRepo(path, shas)


def image_request(
    repo: Path, sha: str, tmp: Path, step_id: int = 1, recipe: ImageRecipe | None = None, **env: str
) -> StepRequest:
    return StepRequest(
        step_id=step_id, bisect_id=1, sha=sha, attempt=1, repo=str(repo), run_cmd=RUN_CMD, build_cmd=BUILD_CMD,
        metric=METRIC, log_path=str(tmp / "logs" / f"step-{step_id}.log"),
        timeout_s=120, env=env, image=recipe or ImageRecipe("venv", ("lib.c", "build.sh", "pkg")),
    )  # fmt: skip


def run_at(repo: Path, rev: str, db: Path, *extra: str) -> dict[str, object]:
    """`bisect run-at REV --format json` with the image repository's build, test and metric (in process unless
    extra names another executor: the last --executor given wins)."""
    from bisect_helpers import run_cli  # tests/ is on the path of tests, not of want_image.py's workers

    done = run_cli("run-at", rev, "--repo", str(repo), "--build", BUILD_CMD, "--run", RUN_CMD,
                   "--metric", r"metric: ([0-9.]+)", "--expect", ">= 8", "--executor", "inprocess",
                   "--format", "json", *extra, db=db)  # fmt: skip
    assert done.returncode in (0, 3), done.stderr
    answer: dict[str, object] = json.loads(done.stdout)
    return answer
