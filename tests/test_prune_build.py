"""--prune auto with --build: the probe's build runs under strace (bisector/runner/build_trace.py), and what it read
decides which commits can change the build. A real `cc` compiles src/kernel.c (with include/config.h) into the
kernel.so that the test loads; commits touching files neither the build nor the test saw leave the search. Where
strace is missing or cannot trace, every file but docs stays a build input and the report says why."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from synthetic import write_files_history

from bisector.core.prune import Reach
from bisector.core.records import SearchRecords
from bisector.core.spec import BisectSpec
from bisector.db.store import Store
from bisector.runner.build_trace import BuildTrace, read_build_trace, traced_build
from bisector.runner.coordinator import Coordinator
from bisector.runner.wiring import make_executor
from bisector.vocab.domain import BisectStatus, StepPurpose

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
needs_strace = pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace (.ci/run installs it)")

BUILD = "cc -shared -fPIC -Iinclude -o kernel.so src/kernel.c"
TEST = """import ctypes
import sys

speed = ctypes.CDLL("./kernel.so").speed()
print(f"speed: {speed}")
sys.exit(0 if speed >= 5 else 1)
"""
KERNEL = '#include "config.h"\nint speed(void) { return %d * SCALE; }\n'
CULPRIT = 24


def kernel_history(path: Path) -> list[str]:
    """41 commits: the culprit (24) changes only src/kernel.c; every 8th touches include/config.h (a comment); the
    others touch a C file the build never compiles, a data file, a script nothing runs, or docs."""
    commits: list[dict[str, str | None]] = [{
        "bench.py": TEST, "src/kernel.c": KERNEL % 10, "include/config.h": "#define SCALE 1\n",
        "src/unused.c": "int unused(void) { return 0; }\n", "data/table.csv": "a,b\n", "tools/gen.sh": "echo\n",
        "README.md": "# kernel\n",
    }]  # fmt: skip
    churn = ("src/unused.c", "data/table.csv", "tools/gen.sh", "README.md")
    for index in range(1, 41):
        if index == CULPRIT:
            commits.append({"src/kernel.c": KERNEL % 3})
        elif index % 8 == 0:
            commits.append({"include/config.h": f"/* revision {index} */\n#define SCALE 1\n"})
        else:
            commits.append({churn[index % 4]: f"/* revision {index} */\n"})
    return write_files_history(path, commits)


def bisect(store: Store, repo: Path, shas: list[str], **options: object):
    values = {"repo": str(repo), "good": shas[0], "bad": shas[-1], "run": f"{sys.executable} bench.py",
              "build": BUILD, "executor": "inprocess", "timeout_s": 120.0, "explain": False, **options}  # fmt: skip
    return Coordinator(store, make_executor, poll_interval_s=0.05).start(BisectSpec.from_options(values))


@needs_strace
@pytest.mark.parametrize(
    ("executor", "image"), [("inprocess", "none"), ("local", "none"), ("local", "venv")]
)  # venv: the build runs in the image's folder, the test in a copy of it
def test_a_culprit_in_a_compiled_source_is_found_and_what_the_build_never_read_is_pruned(
    tmp_path: Path, store: Store, executor: str, image: str
):
    shas = kernel_history(tmp_path / "repo")
    off = bisect(store, tmp_path / "repo", shas, executor=executor, image=image)
    auto = bisect(store, tmp_path / "repo", shas, executor=executor, image=image, prune="auto")
    assert off.first_bad == auto.first_bad == shas[CULPRIT]
    plan = SearchRecords.from_extra(auto.extra).pruning
    assert plan is not None
    assert plan.applied, plan.note
    assert "not traced" not in plan.note
    assert plan.commits[shas[CULPRIT]].reach is Reach.BUILD_INPUTS
    assert plan.commits[shas[CULPRIT]].paths == ("src/kernel.c",)
    assert plan.commits[shas[CULPRIT]].same_as is None
    for index in (8, 16, 32):  # a header the compiler read
        assert plan.commits[shas[index]].reach is Reach.BUILD_INPUTS
        assert plan.commits[shas[index]].same_as is None
    untouched = [i for i in range(1, 40) if i != CULPRIT and i % 8]
    assert all(plan.commits[shas[i]].reach is Reach.UNSEEN for i in untouched)
    assert plan.removed() == {shas[i] for i in untouched}
    search = [s for s in store.steps(auto.id) if s.purpose is StepPurpose.SEARCH]
    assert len(search) < sum(1 for s in store.steps(off.id) if s.purpose is StepPurpose.SEARCH)
    assert not {s.sha for s in search} & plan.removed()


def path_without_strace(tmp_path: Path) -> str:
    """A PATH holding every program of this one but strace (links in one folder)."""
    folder = tmp_path / "no-strace-bin"
    folder.mkdir()
    for directory in os.environ["PATH"].split(os.pathsep):
        for entry in Path(directory or ".").glob("*") if Path(directory or ".").is_dir() else ():
            link = folder / entry.name
            if entry.name != "strace" and not link.exists() and os.access(entry, os.X_OK):
                link.symlink_to(entry.resolve())
    return str(folder)


def path_with_failing_strace(tmp_path: Path) -> str:
    """This PATH behind a strace that cannot trace (as in a container without ptrace)."""
    folder = tmp_path / "failing-strace-bin"
    folder.mkdir()
    fake = folder / "strace"
    fake.write_text("#!/bin/sh\necho 'strace: PTRACE_TRACEME: Operation not permitted' >&2\nexit 1\n")
    fake.chmod(0o755)
    return f"{folder}{os.pathsep}{os.environ['PATH']}"


@pytest.mark.parametrize(
    ("make_path", "why"),
    [(path_without_strace, "strace is not installed on"), (path_with_failing_strace, "Operation not permitted")],
)
def test_a_build_strace_cannot_follow_keeps_every_file_but_docs_as_its_input_and_says_why(
    tmp_path: Path, store: Store, make_path, why: str
):
    shas = kernel_history(tmp_path / "repo")
    record = bisect(store, tmp_path / "repo", shas, prune="auto", env={"PATH": make_path(tmp_path)})
    assert (record.status, record.first_bad) == (BisectStatus.FOUND, shas[CULPRIT])
    plan = SearchRecords.from_extra(record.extra).pruning
    assert plan is not None
    assert plan.applied
    assert "the build was not traced" in plan.note
    assert why in plan.note
    assert plan.commits[shas[CULPRIT]].reach is Reach.BUILD_INPUTS
    not_docs = [i for i in range(1, 40) if i % 8 and i % 4 != 3]  # src/unused.c, data, a script: maybe read
    assert all(plan.commits[shas[i]].same_as is None for i in not_docs)
    docs = [i for i in range(1, 40) if i % 4 == 3]
    assert all(plan.commits[shas[i]].same_as is not None for i in docs)


@needs_strace
def test_the_trace_resolves_paths_through_cd_subshells_and_children(tmp_path: Path):
    tree = tmp_path / "tree"
    (tree / "src").mkdir(parents=True)
    (tree / "inc").mkdir()
    (tree / "src" / "g.c").write_text('#include "a.h"\nint g(void) { return X; }\n')
    (tree / "inc" / "a.h").write_text("#define X 1\n")
    (tree / "data.txt").write_text("data\n")
    (tree / "never.txt").write_text("never\n")
    build = (
        "cd src && cc -I../inc -c g.c -o ../g.o && (cd .. && cat data.txt >/dev/null); ls ../inc >/dev/null; "
        f'{sys.executable} -c \'import os; open("../data.txt").close(); print(os.environ.get("BISECT_PROBE_DIR"))\'; '
        "exit 3"
    )
    out = tmp_path / "probe"
    env = {**os.environ, "BISECT_PROBE_DIR": str(out)}
    done = subprocess.run(["bash", "-c", traced_build(build, "BISECT_PROBE_DIR", "t")], cwd=tree, env=env,
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 3  # the build's own status
    assert done.stdout.strip() == "None"  # the build's processes do not record into the probe's folder
    trace = read_build_trace(out)
    assert isinstance(trace, BuildTrace)
    assert trace.cwd == str(tree.resolve())
    inside = {os.path.relpath(p, tree.resolve()) for p in trace.touched if p.startswith(str(tree.resolve()))}
    assert {"src/g.c", "inc/a.h", "data.txt", "g.o"} <= inside
    assert "never.txt" not in inside
    assert str((tree / "inc").resolve()) in trace.listed


def test_a_probe_folder_without_a_build_trace_says_no_build_ran(tmp_path: Path):
    assert "ran no build" in str(read_build_trace(tmp_path))
