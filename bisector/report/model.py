"""BisectReport: one bisect as the store has it, and the answers every rendering shares.

Steps are numbered 1..N within the bisect, in the order they started; search steps (and a person's marks) are
counted apart from side runs (traced re-runs, confirmation, reference runs, reruns, minimisation variants).
"""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from bisector.core.judge import RESULT_VERDICTS
from bisector.core.ledger import EVIDENCE_PURPOSES, Ledger
from bisector.core.options import StrategyName
from bisector.core.records import EndpointCheck, SearchRecords
from bisector.core.spec import BisectSpec
from bisector.core.terms import new_verdict, old_verdict, term_of
from bisector.db.step_table import RERUN_DIED_DETAIL
from bisector.db.store import Store
from bisector.report.resume import Commands, neutral_words
from bisector.runner.reruns import dead_rerun_commits
from bisector.vocab.commit_range import CommitRange
from bisector.vocab.cost import step_gpu_seconds
from bisector.vocab.domain import (
    CANCELLED_DETAIL,
    NOT_NEEDED,
    BisectRecord,
    BisectStatus,
    Commit,
    ErrorKind,
    StepPurpose,
    StepRecord,
    Verdict,
)
from bisector.vocab.errors import InputError, RepoError
from bisector.vocab.gitrepo import GitRepo
from bisector.vocab.images import container_reference
from bisector.vocab.patches import Patch, PatchKind, apply_command, patched_tree
from bisector.vocab.paths import log_dir
from bisector.vocab.submodules import GITMODULES
from bisector.workers.container_engine import built_reference, reproduce_in_container
from bisector.workers.images.key import container_recipe
from bisector.workers.pool import PREEMPTED, RERUN_OF

if TYPE_CHECKING:
    from bisector.analysis import Explanation

FAILED_VERDICTS = (Verdict.ERROR, Verdict.SKIP)
TESTED_VERDICTS = (*RESULT_VERDICTS, Verdict.SKIP)  # a step that ended on one tested its commit (as the ledger counts)
SIDE_RUN_WORDS = {
    StepPurpose.TRACE: "traced re-run(s) for the explanation",
    StepPurpose.CONFIRM: "confirmation run(s) of the first bad commit and the last good one",
    StepPurpose.REFERENCE: "reference run(s) of the endpoints on a suspect worker",
    StepPurpose.RERUN: "rerun(s) asked with `bisect run-at --bisect`",
    StepPurpose.MINIMIZE: "minimisation variant(s)",
}


@dataclass(frozen=True)
class UnsearchedMerge:
    """A merge the first-parent search named as the first bad commit, and the commits it brought in (reachable from
    its other parents, not from its first), which that search never tests."""

    merge: str
    first_parent: str
    commits: int

    @property
    def words(self) -> str:
        return (
            f"merge {self.merge[:12]} brought {self.commits} commit(s) that were not searched "
            "(the search follows first parents)"
        )


@dataclass(frozen=True)
class ReproduceTarget:
    sha: str
    why: str  # e.g. "the first bad commit", "the good endpoint, which tested bad"


def _stored_explanation(store: Store, bisect_id: int) -> Explanation | None:
    """The bisect's stored explanation; the analysis code is imported only for a bisect that has findings."""
    if not store.findings(bisect_id):
        return None
    from bisector.explain import stored_explanation

    return stored_explanation(store, bisect_id)


def _with_found_logs(steps: list[StepRecord], folder: Path) -> list[StepRecord]:
    """Steps stored as interrupted by another process (`resume`, a stop signal) have no log path: the log their
    test began, named by the step's id, is found in the bisect's log folder."""
    found = []
    for step in steps:
        if step.error_kind is ErrorKind.INTERRUPTED and not step.log_path:
            logs = sorted(folder.glob(f"step-{step.id}-*.log"))
            step = replace(step, log_path=str(logs[0])) if logs else step
        found.append(step)
    return found


def _dead_reruns_interrupted(steps: list[StepRecord], dead: Mapping[str, datetime]) -> list[StepRecord]:
    """The running rerun steps at the commits of gone reruns (each with when its rerun was last seen) shown as the
    next writing command will store them (reruns.end_dead_reruns), without writing: a view, served from a read-only
    store too, never writes."""
    return [
        replace(
            step,
            verdict=Verdict.ERROR,
            error_kind=ErrorKind.INTERRUPTED,
            detail=RERUN_DIED_DETAIL,
            finished=max(step.started, dead[step.sha]),
        )
        if step.verdict is None and step.purpose is StepPurpose.RERUN and step.sha in dead
        else step
        for step in steps
    ]


@dataclass(frozen=True)
class BisectReport:
    record: BisectRecord
    spec: BisectSpec
    candidates: CommitRange
    steps: list[StepRecord]
    explanation: Explanation | None = None

    @classmethod
    def load(cls, store: Store, bisect_id: int) -> BisectReport:
        record = store.get_bisect(bisect_id)
        record = replace(record, message=neutral_words(record.message, bisect_id))
        steps = [replace(step, detail=neutral_words(step.detail, bisect_id)) for step in store.steps(bisect_id)]
        steps = _dead_reruns_interrupted(steps, dead_rerun_commits(record.extra, datetime.now(UTC)))
        return cls(
            record,
            BisectSpec.from_json(record.spec),
            store.candidates(bisect_id),
            _with_found_logs(steps, log_dir(store.identity, bisect_id)),
            _stored_explanation(store, bisect_id),
        )

    # --- lookups ---------------------------------------------------------------------------------------------

    @property
    def terms(self) -> tuple[str, str]:
        """(old, new): the words for the good endpoint's state and the bad endpoint's (good/bad unless given)."""
        return self.spec.search.terms()

    def commit(self, sha: str | None) -> Commit | None:
        """The candidate with this SHA, with its details where it is described."""
        return self.candidates.commit(sha) if sha else None

    def position(self, sha: str) -> int:
        """The commit's position among the candidates; -1 for one outside them (a minimisation variant)."""
        return self.candidates.position.get(sha, -1)

    def position_label(self, sha: str) -> str:
        """The position as the step tables print it: "-" for a commit outside the candidates."""
        position = self.position(sha)
        return str(position) if position >= 0 else "-"

    @cached_property
    def _numbers(self) -> dict[int, int]:
        return {step.id: number for number, step in enumerate(self.steps, start=1)}

    def step(self, number: int) -> StepRecord:
        """Step `number` as the report numbers it (`bisect run-at --bisect ID --step N`)."""
        if not 1 <= number <= len(self.steps):
            raise InputError(f"--step {number}: bisect {self.record.id} has steps 1..{len(self.steps)}")
        return self.steps[number - 1]

    def number(self, step: StepRecord) -> int:
        """The step's number within this bisect, 1..N in the order the steps started."""
        return self._numbers[step.id]

    def word(self, verdict: Verdict | None) -> str:
        """A verdict in the bisect's terms."""
        return term_of(self.spec, verdict)

    # --- evidence --------------------------------------------------------------------------------------------

    @cached_property
    def evidence(self) -> list[StepRecord]:
        """The steps the search judged by: search, confirmation and manual steps of workers not quarantined."""
        quarantined = self.records.quarantined
        return [s for s in self.steps if s.purpose in EVIDENCE_PURPOSES and s.worker not in quarantined]

    @cached_property
    def search_steps(self) -> list[StepRecord]:
        return [s for s in self.steps if s.purpose is StepPurpose.SEARCH]

    @cached_property
    def manual_steps(self) -> list[StepRecord]:
        return [s for s in self.steps if s.purpose is StepPurpose.MANUAL]

    @cached_property
    def side_runs(self) -> Counter[StepPurpose]:
        """How many steps of each side purpose (not search, not manual) the bisect ran."""
        return Counter(s.purpose for s in self.steps if s.purpose not in (StepPurpose.SEARCH, StepPurpose.MANUAL))

    @cached_property
    def failures(self) -> list[StepRecord]:
        """Steps that failed (errors, skips): each is reported with its reason and its log."""
        return [s for s in self.steps if s.verdict in FAILED_VERDICTS]

    def decided_step(self, sha: str | None) -> StepRecord | None:
        decided = [s for s in self.evidence if s.sha == sha and s.verdict in (Verdict.GOOD, Verdict.BAD)]
        return decided[-1] if decided else None

    def metric(self, sha: str | None) -> float | None:
        step = self.decided_step(sha)
        return step.metric if step else None

    @cached_property
    def records(self) -> SearchRecords:
        """The search's stored decisions (quarantines, confirmation, flakes, endpoint checks)."""
        return SearchRecords.from_extra(self.record.extra)

    @cached_property
    def ledger(self) -> Ledger:
        """Every commit judged by the search's own rule (bisector/core/ledger.py), from the stored steps."""
        noisy = self.spec.search.strategy == "noisy" or self.spec.search.repeat_limit > 1 or self.records.flake_seen
        return Ledger(self.spec, self.candidates, self.record.bad, self.steps, self.records.quarantined, noisy=noisy)

    def given(self, sha: str) -> Verdict | None:
        """An endpoint the search took as given, never running it (lazily: the answer did not rest on it): its
        role, as `git bisect start BAD GOOD` takes it."""
        name = {self.record.good: "good", self.record.bad: "bad"}.get(sha)
        if name is None or self.records.endpoints.get(name) is not EndpointCheck.ASSUMED:
            return None
        return Verdict.GOOD if name == "good" else Verdict.BAD

    def state_of(self, sha: str) -> Verdict | None:
        """The commit's verdict for the search as a test outcome (GOOD / BAD / SKIP), None while undecided; an
        endpoint taken as given has its role."""
        verdict = self.ledger.verdict_of(sha) or self.given(sha)
        if verdict is None or verdict is Verdict.SKIP:
            return verdict
        return old_verdict(self.spec) if verdict is Verdict.GOOD else new_verdict(self.spec)

    def decided_commits(self) -> list[tuple[Commit, Verdict, datetime]]:
        """Each commit the search has a verdict for, with the verdict and when its last evidence finished, in the
        order they were decided (the endpoints first, those taken as given too)."""
        out = []
        for sha in [self.candidates[p].sha for p in self.ledger.tested() if p < len(self.candidates)]:
            commit, verdict = self.commit(sha), self.state_of(sha)
            finished = [s.finished for s in self.evidence if s.sha == sha and s.finished is not None]
            if commit is not None and verdict is not None and finished:
                out.append((commit, verdict, max(finished)))
        for sha in (self.record.good, self.record.bad):
            commit, verdict = self.commit(sha), self.state_of(sha)
            if self.given(sha) is not None and commit is not None and verdict is not None:
                out.append((commit, verdict, self.record.created))
        endpoints = {self.record.bad: 0, self.record.good: 1}
        return sorted(out, key=lambda item: (endpoints.get(item[0].sha, 2), item[2], item[0].position))

    # --- the answer ------------------------------------------------------------------------------------------

    def suspects(self) -> list[Commit]:
        """With an ambiguous result, the commits that could be the first bad one."""
        first_bad, last_good = self.commit(self.record.first_bad), self.commit(self.record.last_good)
        if first_bad is None or last_good is None:
            return []
        return [self.candidates[p] for p in range(last_good.position + 1, first_bad.position + 1)]

    def boundary(self) -> tuple[Commit | None, Commit | None]:
        """(latest commit known old, earliest later commit known new) from the evidence so far: a running
        bisect's range still open; the answer once it is finished."""
        old, new = old_verdict(self.spec), new_verdict(self.spec)
        ends = [p for p in (0, self.position(self.record.bad)) if p >= 0]  # an endpoint may be taken as given
        known = [self.candidates[p] for p in sorted({*self.ledger.tested(), *ends}) if p < len(self.candidates)]
        olds = [c for c in known if self.state_of(c.sha) is old]
        last_old = max(olds, key=lambda c: c.position, default=None)
        floor = last_old.position if last_old else -1
        news = [c for c in known if c.position > floor and self.state_of(c.sha) is new]
        return last_old, min(news, key=lambda c: c.position, default=None)

    @cached_property
    def unsearched_merge(self) -> UnsearchedMerge | None:
        """The found first bad commit as a merge that brought commits, searched without --all-parents (which descends
        into it); None otherwise, and where the repository is not on this machine."""
        merge = self.record.first_bad
        if self.record.status is not BisectStatus.FOUND or merge is None or self.spec.search.all_parents:
            return None
        try:
            repo = GitRepo(self.record.repo)
            commits = repo.merged_count(merge)
            return UnsearchedMerge(merge, repo.parents(merge)[0], commits) if commits else None
        except RepoError:
            return None

    def first_bad_words(self) -> str:
        """What the report calls record.first_bad: "first bad commit" for the answer, else "first commit known bad"
        (ambiguous: one of the suspects may be the first bad one; not reproducible: the confirmation failed)."""
        new = self.terms[1]
        return f"first {new} commit" if self.record.status is BisectStatus.FOUND else f"first commit known {new}"

    def reproduce_target(self) -> ReproduceTarget:
        """The step that matters most: a failing endpoint, else the first bad commit, else the bad endpoint."""
        old_term, new_term = self.terms
        record = self.record
        if record.status in (BisectStatus.ENDPOINTS_MISMATCH, BisectStatus.FAILED):
            good_state, bad_state = self.state_of(record.good), self.state_of(record.bad)
            if good_state is not None and good_state is not old_verdict(self.spec):
                return ReproduceTarget(record.good, f"the {old_term} endpoint, which tested {self.word(good_state)}")
            if bad_state is not None and bad_state is not new_verdict(self.spec):
                return ReproduceTarget(record.bad, f"the {new_term} endpoint, which tested {self.word(bad_state)}")
            for sha, which in ((record.good, old_term), (record.bad, new_term)):
                if any(s.sha == sha for s in self.failures):
                    return ReproduceTarget(sha, f"the {which} endpoint, which failed")
        if record.first_bad:
            return ReproduceTarget(record.first_bad, f"the {self.first_bad_words()}")
        return ReproduceTarget(record.bad, f"the {new_term} endpoint")

    def reproduce(self) -> str:
        sha = self.reproduce_target().sha
        step = self.decided_step(sha) or next((s for s in reversed(self.steps) if s.sha == sha and s.gpus), None)
        test = self.spec.test
        container = container_reference(self.spec.executor.image_template, sha)
        if container is not None and not (step and step.image and step.image.get("source") == "artifact"):
            container = built_reference(container, container_recipe(test.build, test.patches, test.env))
        gpus = tuple(step.gpus) if step else ()
        return reproduce_command(
            self.record.repo, sha, test.build, test.run, dict(test.env), gpus, container, test.patches,
            has_submodules(self.record.repo, sha, test.patches),
        )  # fmt: skip

    # --- totals ----------------------------------------------------------------------------------------------

    @property
    def gpu_seconds(self) -> float:
        return sum(step_gpu_seconds(s) for s in self.steps)

    @property
    def slot_seconds(self) -> float:
        return sum(duration(s) for s in self.steps if s.purpose is not StepPurpose.MANUAL)

    @property
    def wall_s(self) -> float | None:
        if self.record.finished is None:
            return None
        return (self.record.finished - self.record.created).total_seconds()

    def noise_lines(self) -> list[str]:
        """Repeats, flakes, quarantines, the confirmation and endpoints not run, in plain words, when any."""
        lines, records, search = [], self.records, self.spec.search
        if search.repeat_limit > 1:
            lines.append(
                f"each tested commit ran {search.repeat} time(s), up to {search.repeat_limit} while its "
                "verdict was uncertain"
            )
        if records.flake_seen:
            lines.append(
                f"flaky results were seen (a commit tested both ways): the test looks flaky; {self._flaky_advice()}"
            )
        lines += [f"worker {worker} was set aside: {why}" for worker, why in sorted(records.quarantined.items())]
        if (confirmation := records.confirmation) is not None:
            lines.append(
                f"confirmation (the {self.first_bad_words()} re-run against the last {self.terms[0]} commit): "
                f"{confirmation.status.value}, "
                f"{confirmation.reason} (confidence {confirmation.confidence:.3f})"
            )
        return lines + self.endpoint_lines()

    def _flaky_advice(self) -> str:
        search = self.spec.search
        if search.strategy is StrategyName.KARY:
            return "--strategy kary trusted every run: `--strategy noisy` or `--repeat N` weighs repeated runs"
        if search.strategy is None and search.repeat_limit == 1:
            return "the noisy search took over; `--repeat N` runs every probe N times from the start"
        return "the noisy search weighed the runs"

    def endpoint_lines(self) -> list[str]:
        """Which endpoints were not run (taken as given, or judged by hand), run only because the answer rested on
        them, or run early in a slot no probe could use."""
        checks = self.records.endpoints
        lines = []
        reasons = {
            EndpointCheck.ASSUMED: "taken as given, not run: the answer did not rest on {it}",
            EndpointCheck.TESTED_LAZILY: "run only because the answer rested on {it}",
            EndpointCheck.TESTED_SPARE: "run early, in a slot no probe could use, as the answer could rest on {it}",
            EndpointCheck.MARKED: "not run: judged by hand (`bisect mark`, or the log `bisect replay` read)",
        }
        for check, why in reasons.items():
            names = [name for name in ("good", "bad") if checks.get(name) is check]
            if names:
                old, new = self.terms  # the endpoints' roles: --good is the old state's, also with --find-fix
                ends = " and ".join(f"the {old if n == 'good' else new} endpoint" for n in names)
                lines.append(f"{ends} {why.format(it='it' if len(names) == 1 else 'them')}")
        return lines

    def work_sentence(self) -> str:
        """What the bisect did, in plain words: search steps apart from side runs, time, the verdict rule."""
        whys = Counter(_stopped_why(s.detail) for s in self.search_steps if s.verdict is Verdict.CANCELLED)
        if len(whys) == 1:
            notes = [f"{whys.total()} stopped early, {next(iter(whys))}"]
        else:
            notes = [f"{whys.total()} stopped early: {', '.join(f'{n} {why}' for why, n in whys.most_common())}"]
        notes = notes if whys else []
        if errors := sum(1 for s in self.search_steps if s.verdict is Verdict.ERROR):
            notes.append(f"{errors} ended in an infrastructure error: no verdict")
        dropped = f" ({'; '.join(notes)})" if notes else ""
        parts = [
            f"{len(self.candidates)} commits in range; {len(self.search_steps)} search step(s) tested them{dropped}"
        ]
        if self.manual_steps:
            parts.append(f"{len(self.manual_steps)} verdict(s) given by hand")
        side = [f"{count} {SIDE_RUN_WORDS.get(p, p.value + ' run(s)')}" for p, count in sorted(self.side_runs.items())]
        if side:
            parts.append("besides: " + ", ".join(side))
        if built := self.records.built_ahead:
            tested = len(set(built) & {s.sha for s in self.search_steps if s.verdict in TESTED_VERDICTS})
            parts.append(f"{len(built)} image(s) built ahead of their steps, {tested} of them then tested")
        took = "still running" if self.wall_s is None else f"took {self.wall_s:.1f} s"
        time_line = (
            f"{took}; the steps ran {self.slot_seconds:.1f} s in all on workers ({self.gpu_seconds:.1f} GPU-seconds)"
        )
        return "; ".join(parts) + ". " + time_line[0].upper() + time_line[1:] + "."

    def rule_sentence(self) -> str:
        old, new = self.terms
        if self.spec.test.expect == "auto":
            rule = f"a commit's samples are compared with both endpoints' ({self.spec.search.direction} is better)"
        elif self.spec.test.expect:
            rule = f"the test passes when its metric is {self.spec.test.expect}"
        else:
            rule = "the test passes when it exits 0"
        state = f"passing is {new}, failing {old} (--find-fix)" if self.spec.search.find_fix else f"passing is {old}"
        return f"Verdicts: {rule}; {state}."


def unsearched_merge_advice(report: BisectReport, commands: Commands) -> tuple[UnsearchedMerge, str] | None:
    """The merge named as the culprit with what it brought that was not searched (BisectReport.unsearched_merge), and
    the command that searches that; None where nothing is unsearched. commands: how the reader runs it."""
    merge = report.unsearched_merge
    if merge is None:
        return None
    return merge, commands.search_merge(report.record, report.spec, merge.merge, merge.first_parent)


def duration(step: StepRecord) -> float:
    return (step.finished - step.started).total_seconds() if step.finished else 0.0


def given_lines(spec: BisectSpec) -> list[str]:
    """What the bisect was given beside its range: each date's commit ('good 2026-10-05 -> 1a2b3c4d5e6f (...)'), its
    link and the patches applied on every commit."""
    from bisector.vocab.revdates import describe_date

    lines = [f"{which} {describe_date(spec.dates[which])}" for which in ("good", "bad") if which in spec.dates]
    lines += [f"link: {spec.link}"] if spec.link else []
    return lines + ([f"applied on every commit: {patches_line(spec)}"] if spec.test.patches else [])


def patches_line(spec: BisectSpec) -> str:
    """The patches applied on every commit, in order: '--cherry-pick REV (SHA), --patch FILE'."""
    return ", ".join(patch.label for patch in spec.test.patches)


def one_line(detail: str) -> str:
    """A step's detail as one whole line: its first non-empty line, uncut."""
    return next((line.strip() for line in detail.splitlines() if line.strip()), "")


def pr_suffix(commit: Commit) -> str:
    """' (PR #n)' when the subject does not show the PR number already."""
    if commit.pr is None or f"#{commit.pr}" in commit.subject:
        return ""
    return f" (PR #{commit.pr})"


def has_submodules(repo: str, sha: str, patches: Sequence[Patch] = ()) -> bool:
    """Whether sha's tree with the patches applied has a .gitmodules, where the repository is on this machine (False
    where not). The patched tree is made (objects written into the repository) only where a patch changes
    .gitmodules; False where such a patch does not apply."""
    try:
        opened = GitRepo(repo)
        changed = any(_changes_gitmodules(opened, patch) for patch in patches)
        return opened.tree_hash(patched_tree(opened, sha, patches) if changed else sha, GITMODULES) is not None
    except RepoError:
        return False


def _changes_gitmodules(repo: GitRepo, patch: Patch) -> bool:
    """Whether the patch may change .gitmodules: a cherry-picked commit that changes it, a patch file whose headers
    name it."""
    if patch.kind is PatchKind.COMMIT:
        return GITMODULES in repo.changed_paths(patch.content)
    headers = ("diff --git ", "--- ", "+++ ", "rename ", "copy ")
    return any(line.startswith(headers) and GITMODULES in line for line in patch.content.splitlines())


def reproduce_command(
    repo: str, sha: str, build_cmd: str | None, run_cmd: str, env: dict[str, str], gpus: tuple[int, ...] = (),
    container: str | None = None, patches: Sequence[Patch] = (), submodules: bool = False,
) -> str:  # fmt: skip
    """A shell command line that re-runs one step by hand in a fresh worktree: the patches applied, then (submodules:
    the patched tree has some) its submodules checked out at the commits that tree records, fetched from their URLs;
    its build and test on the host with CUDA_VISIBLE_DEVICES for its GPUs, or (container: the commit's image
    reference) the engine's command that ran its test in a container (workers/container_engine.py)."""
    workdir = f"/tmp/bisect-repro-{sha[:12]}"
    host_env = dict(env) if container or not gpus else {**env, "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus))}
    exports = "".join(f"{k}={shlex.quote(v)} " for k, v in sorted(host_env.items()))
    parts = [
        f"git -C {shlex.quote(repo)} worktree add --detach {workdir} {sha}",
        f"cd {workdir}",
        *map(apply_command, patches),
        *(["git submodule update --init --recursive"] if submodules else []),
    ]
    if container is not None:
        return " && ".join([*parts, exports + reproduce_in_container(container, workdir, env, gpus, run_cmd)])
    if build_cmd:
        parts.append(f"{exports}bash -c {shlex.quote(build_cmd)}")
    parts.append(f"{exports}bash -c {shlex.quote(run_cmd)}")
    return " && ".join(parts)


def _stopped_why(detail: str) -> str:
    """Why a search step was stopped, from its stored detail (before 2026-12-03 a worker's bare "cancelled")."""
    if detail.startswith(PREEMPTED):
        return "to give a rerun a slot" if RERUN_OF in detail else "to give another bisect a slot"
    why = detail.split(" (")[0]
    return NOT_NEEDED if why in ("", CANCELLED_DETAIL) else why
