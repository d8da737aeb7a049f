"""--prune auto: the probe. Before the search, the bisect's build and test run once at the bad commit with the
probe hook in every Python process of the test (analysis/hook/_gpu_bisect_probe.py: line coverage, files opened,
directories listed, programs started) and the build under strace (bisector/runner/build_trace.py: the files its
processes opened, looked up or ran); what they recorded becomes repository paths (`Visibility`), and the candidates
are classified by what they change (bisector/core/prune.py). A build that could not be traced counts as reading any
file but docs, and the plan's note says why.

Where the probe cannot tell what the test sees, the plan is not applied and says why: the test runs in a container
image (the hook cannot reach it there, so no probe runs), the probe's step failed or was skipped, no Python process
of the test was followed, coverage.py could not run in the test's Python, no recorded file belongs to the
repository, or the test executed a file that is neither in the repository nor written by the run itself.
"""

from __future__ import annotations

import json
import os
import posixpath
import shlex
import shutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from bisector.analysis.kernel_trace import HOOK_DIR
from bisector.core.prune import DOC_SUFFIXES, PrunePlan, Visibility, plan_pruning, unpruned
from bisector.core.spec import BisectSpec
from bisector.db.store import Store
from bisector.runner.build_trace import BuildTrace, read_build_trace, traced_build
from bisector.runner.observer import ProgressObserver
from bisector.runner.side_runs import SideRunner
from bisector.vocab.domain import BisectRecord, SideRun, StepPurpose, Verdict
from bisector.vocab.errors import BisectError
from bisector.vocab.gitrepo import GitRepo
from bisector.vocab.images import container_reference
from bisector.vocab.paths import log_dir
from bisector.workers.node_files import UNSHIPPED_FILE

PROBE_ENV = "BISECT_PROBE_DIR"
PROBE_COVERAGE_ENV = "BISECT_PROBE_COVERAGE"
PYTHON_LAUNCHERS = ("python", "pytest", "torchrun")  # a run command starting one of these starts Python
MAX_BLAMED_FILES = 200  # executed files changed in the range whose lines are attributed (git blame each)


@dataclass
class Recording:
    """What the probe's processes recorded (absolute paths), merged."""

    cwds: set[str] = field(default_factory=set)
    reads: set[str] = field(default_factory=set)
    writes: set[str] = field(default_factory=set)
    listed: set[str] = field(default_factory=set)
    spawned: list[list[str]] = field(default_factory=list)
    lines: dict[str, set[int]] = field(default_factory=dict)  # file -> executed lines
    no_coverage: list[str] = field(default_factory=list)
    build: BuildTrace | None = None  # the traced build's, beside the test's (None: no build, or not traced)


def probe_env(out_dir: Path, base_env: Mapping[str, str]) -> dict[str, str]:
    """The variables that turn the probe on in every Python process of a step."""
    import coverage  # the probe's own: put on the test's path when its Python has none

    existing = [p for p in base_env.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(HOOK_DIR)]
    return {
        "PYTHONPATH": os.pathsep.join([str(HOOK_DIR), *existing]),
        PROBE_ENV: str(out_dir.absolute()),  # as the step's log path names its folder (workers/node_files.py)
        PROBE_COVERAGE_ENV: str(Path(coverage.__file__).resolve().parent.parent),
    }


def read_recording(out_dir: Path) -> Recording:
    recording = Recording()
    kinds: dict[str, set[str]] = {
        "cwd": recording.cwds, "read": recording.reads, "dlopen": recording.reads, "write": recording.writes,
        "list": recording.listed,
    }  # fmt: skip
    for path in sorted(out_dir.glob("files-*.jsonl")):
        for line in path.read_text(encoding="utf-8", errors="surrogateescape").splitlines():
            try:
                kind, value = json.loads(line)
            except ValueError:
                continue  # a process killed mid-line
            if kind in kinds and isinstance(value, str):
                kinds[kind].add(value)
            elif kind == "spawn" and isinstance(value, list):
                recording.spawned.append([str(v) for v in value])
            elif kind == "no-coverage":
                recording.no_coverage.append(str(value))
    from coverage import CoverageData

    for path in sorted(out_dir.glob("coverage.*")):
        data = CoverageData(str(path))
        data.read()
        for measured in data.measured_files():
            recording.lines.setdefault(measured, set()).update(data.lines(measured) or ())
    return recording


class Attribution:
    """Absolute paths of the probe's run as paths of the repository at the bad commit."""

    def __init__(self, recording: Recording, tracked: set[str]) -> None:
        self.tracked = tracked
        self.roots = _roots(recording, tracked)

    def relative(self, path: str) -> str | None:
        """The path inside the tree the step ran in ("" for its root), None outside it."""
        for root in self.roots:
            if path == root:
                return ""
            if path.startswith(root + "/"):
                return path[len(root) + 1 :]
        return None

    def installed_copy(self, path: str) -> str | None:
        """A tracked Python file this file outside the tree is a copy of (an installed package: pkg/mod.py)."""
        if not path.endswith(".py"):
            return None
        parts = path.split("/")
        for start in range(1, len(parts) - 1):
            suffix = "/".join(parts[start:])
            matches = [t for t in self.tracked if t == suffix or t.endswith("/" + suffix)]
            if matches:
                return matches[0] if len(matches) == 1 else None
        return None


def _roots(recording: Recording, tracked: set[str]) -> list[str]:
    """The trees the probe's processes ran in: for each process's working directory, the directory at or above it
    under which the most recorded paths are files of the repository. Deepest first."""
    recorded = recording.reads | set(recording.lines) | (recording.build.touched if recording.build else set())
    roots = set()
    for cwd in recording.cwds | ({recording.build.cwd} if recording.build else set()):
        best, score = "", 0
        candidate = cwd
        while True:
            prefix = candidate.rstrip("/") + "/"
            count = sum(1 for p in recorded if p.startswith(prefix) and p[len(prefix) :] in tracked)
            if count > score:
                best, score = candidate.rstrip("/") or "/", count
            parent = posixpath.dirname(candidate)
            if parent == candidate:
                break
            candidate = parent
        if score:
            roots.add(best)
    return sorted(roots, key=len, reverse=True)


def visibility(recording: Recording, tracked: set[str], spec: BisectSpec) -> Visibility | str:
    """What the test and build can see, or why the probe cannot tell."""
    if not recording.cwds:
        return "the probe followed no Python process of the test"
    if recording.no_coverage:
        return f"coverage.py could not run in the test's Python ({recording.no_coverage[0]})"
    where = Attribution(recording, tracked)
    if not where.roots:
        return "no file the test opened belongs to the repository"
    seen: set[str] = set()
    for path in recording.reads | set(recording.lines):
        relative = where.relative(path)
        if relative is None:
            if copy := where.installed_copy(path):
                seen.add(copy)
            continue
        if relative in tracked or _derived(relative) or path in recording.writes:
            seen.add(relative)
        elif path in recording.lines and not spec.test.build:
            return f"the test executed {relative}, which is not in the repository and which it did not write"
        else:
            seen.add(relative)  # a file the test looked for, or the build's output
    build = recording.build
    listed_paths = recording.listed | (build.listed if build else set())
    listed = {r for path in listed_paths if (r := where.relative(path)) is not None}
    built = {r for path in build.touched if (r := where.relative(path))} if build else set()
    programs = [shlex.split(spec.test.run)] if spec.test.run.strip() else []
    untraced_build = bool(spec.test.build) and build is None
    unfollowed = untraced_build or any(not _starts_python(argv) for argv in [*programs, *recording.spawned])
    for argv in [*programs, *recording.spawned]:
        seen.update(w.removeprefix("./") for w in argv if w.removeprefix("./") in tracked)
    inputs = spec.executor.image_inputs if spec.executor.image_recipe() else ()
    exempt = DOC_SUFFIXES if untraced_build and not inputs else Visibility.exempt
    return Visibility(
        frozenset(seen - {""}), frozenset(listed), tuple(inputs), frozenset(built), unfollowed, exempt=exempt
    )


def _derived(relative: str) -> bool:
    return "__pycache__" in relative.split("/") or relative.endswith(".pyc")


def _starts_python(argv: list[str]) -> bool:
    words = [w for w in argv if "=" not in w.split("/")[0] and w not in ("env", "exec", "time", "nice")]
    return bool(words) and os.path.basename(words[0]).startswith(PYTHON_LAUNCHERS)


def line_authors(repo: GitRepo, good: str, bad: str, recording: Recording, changed: Iterable[str]) -> frozenset[str]:
    """The candidates that last changed a line the test executed, in the executed files the range changes."""
    tracked_lines: dict[str, set[int]] = {}
    where = Attribution(recording, repo.files(bad))
    for path, lines in recording.lines.items():
        relative = where.relative(path)
        if relative is not None and relative in where.tracked:
            tracked_lines.setdefault(relative, set()).update(lines)
    authors: set[str] = set()
    for relative in sorted(set(changed) & set(tracked_lines))[:MAX_BLAMED_FILES]:
        owners = repo.line_authors(bad, relative, good)
        authors.update(sha for number, sha in owners.items() if number in tracked_lines[relative])
    return frozenset(authors)


def plan_from_recording(repo: GitRepo, spec: BisectSpec, good: str, bad: str, shas: list[str], out: Path) -> PrunePlan:
    """The classification of the candidates from the probe's files in `out`."""
    recording = read_recording(out)
    build = read_build_trace(out) if spec.test.build else None
    if isinstance(build, BuildTrace):
        recording.build = build
    seen = visibility(recording, repo.files(bad), spec)
    if isinstance(seen, str):
        return unpruned(seen)
    changes = repo.first_parent_changes(good, bad)
    changed = {c.path for cs in changes.values() for c in cs if not c.tree}
    authors = line_authors(repo, good, bad, recording, changed)
    plan = plan_pruning(shas, changes, replace(seen, line_authors=authors))
    if isinstance(build, str):
        why = f"the build was not traced ({build}), so any file but docs may be its input"
        return replace(plan, note=f"{plan.note}; {why}")
    return plan


def probe_and_plan(
    store: Store, runner_for: Callable[[BisectSpec], SideRunner], record: BisectRecord, observer: ProgressObserver
) -> PrunePlan:
    """Run the probe at the bad commit (through the side runner of a spec whose build is traced) and classify the
    candidates; never raises for a probe that goes wrong: the plan then says why it is not applied."""
    spec = BisectSpec.from_json(record.spec)
    if spec.test.paths:
        return unpruned("the paths after -- chose the candidates already")
    if image := container_reference(spec.executor.image_template, record.bad):
        # only the worktree is mounted in the image, and the hook's PYTHONPATH would replace the image's own
        return unpruned(f"the test runs in container image {image}, which the probe's hook does not reach")
    out = log_dir(store.identity, record.id) / "probe"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    try:
        env = probe_env(out, {**os.environ, **spec.test.env})
    except ImportError:
        return unpruned("coverage.py is not installed where gpu-bisect runs")
    observer.note(f"--prune auto: running the test once at {record.bad[:12]} under coverage")
    probe_spec = spec
    if spec.test.build:  # the command names the probe's folder: an image it builds is its own, never one reused
        probe_spec = replace(spec, test=replace(spec.test, build=traced_build(spec.test.build, PROBE_ENV, str(out))))
    (result,) = runner_for(probe_spec).run([SideRun(record.bad, StepPurpose.PROBE, env, "probe")])
    if result.verdict not in (Verdict.GOOD, Verdict.BAD):
        why = result.detail.splitlines()[0] if result.detail else result.verdict.value
        return unpruned(f"the probe at the bad commit did not complete ({result.verdict.value}: {why})")
    if (unshipped := out / UNSHIPPED_FILE).exists():
        return unpruned(f"the probe's files did not come back from {result.node}: {unshipped.read_text().strip()}")
    shas = store.candidates(record.id).shas()
    try:
        return plan_from_recording(GitRepo(record.repo), spec, record.good, record.bad, shas, out)
    except (BisectError, OSError, ValueError) as exc:
        return unpruned(f"the probe's record could not be read ({type(exc).__name__}: {exc})")
