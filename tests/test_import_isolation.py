"""gpu-bisect's own packages stay out of the user's test: one import name, `bisector`.

Kernel repositories often have folders named kernels/, db/, workers/ or vocab/. Installed where the test's Python
sees it, gpu-bisect must not answer those imports in their place (a namespace folder loses to a regular package
anywhere on sys.path; a regular one loses when the script's folder, not the root, leads sys.path).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OWN_FOLDERS = ("kernels", "db", "workers", "vocab")

CHECK = """\
import os, sys
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the root last, as old scripts do
import kernels.mine, db, workers.mine, vocab.mine
print("value:", kernels.mine.VALUE + db.LIMIT + workers.mine.VALUE + vocab.mine.VALUE)
sys.exit(0 if kernels.mine.VALUE == 1 else 1)
"""


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return done.stdout.strip()


def _repo_with_the_tools_folder_names(repo: Path, commits: int, culprit: int) -> list[str]:
    """kernels/ and workers/ as namespace folders, db/ and vocab/ as regular packages; the culprit flips a value."""
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    for folder in OWN_FOLDERS:
        (repo / folder).mkdir()
    (repo / "db" / "__init__.py").write_text("LIMIT = 10\n")
    (repo / "vocab" / "__init__.py").write_text("")
    (repo / "vocab" / "mine.py").write_text("VALUE = 100\n")
    (repo / "workers" / "mine.py").write_text("VALUE = 1000\n")
    (repo / "tools").mkdir()
    (repo / "tools" / "check.py").write_text(CHECK)
    shas = []
    for index in range(commits):
        (repo / "kernels" / "mine.py").write_text(f"VALUE = {2 if index >= culprit else 1}\n# {index}\n")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"c{index}")
        shas.append(_git(repo, "rev-parse", "HEAD"))
    return shas


def test_a_repository_with_folders_named_like_the_tools_packages_bisects_right(tmp_path: Path):
    shas = _repo_with_the_tools_folder_names(tmp_path / "repo", 9, 5)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}  # gpu-bisect as installed
    env.update(BISECT_GPUS="", BISECT_DATA_DIR=str(tmp_path / "data"), BISECT_CACHE_DIR=str(tmp_path / "cache"))
    done = subprocess.run(
        [sys.executable, "-m", "bisector", "start", "--repo", str(tmp_path / "repo"), "--good", shas[0],
         "--bad", shas[-1], "--run", f"{sys.executable} tools/check.py", "--no-explain", "--format", "json",
         "--db", f"sqlite:///{tmp_path / 'store.db'}"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["first_bad"]["sha"] == shas[5]


def _copy_of_the_checkout(target: Path) -> Path:
    """The files git would commit now, links as links: built apart from the checkout (no build/ left in it)."""
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        check=True, capture_output=True,
    ).stdout  # fmt: skip
    for name in filter(None, listed.decode().split("\0")):
        source = ROOT / name
        if not source.exists() and not source.is_symlink():
            continue  # deleted in the working tree
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            (target / name).symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, target / name)
    return target


@pytest.mark.slow
def test_the_wheel_installs_one_top_level_package_with_its_data(tmp_path: Path):
    source = _copy_of_the_checkout(tmp_path / "src")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"),
         str(source)],
        check=True, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top == {"bisector"}
    for folder in OWN_FOLDERS:
        assert f"bisector/{folder}/__init__.py" in names
    assert "bisector/db/alembic.ini" in names
    assert any(name.startswith("bisector/db/migrations/versions/") for name in names)
    assert "bisector/dashboard/templates/bisect.html" in names
