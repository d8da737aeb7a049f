"""The coordinator against real git histories, a real SQLite store and real test processes."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest
from bisect_helpers import synthetic_spec
from synthetic import SyntheticHistory, culprit_history, write_history

from bisector.core.records import EndpointCheck, SearchRecords
from bisector.core.spec import BisectSpec
from bisector.db.store import NewStep, Store
from bisector.report.json_report import report_json
from bisector.report.model import BisectReport
from bisector.report.text import range_rows
from bisector.runner.coordinator import Coordinator, prepare_bisect, utc_now
from bisector.runner.manual import MarkEffect, mark_commit
from bisector.runner.wiring import make_executor
from bisector.vocab.domain import BisectRecord, BisectStatus, Commit, ErrorKind, StepPurpose, StepRecord, Verdict
from bisector.vocab.errors import ExecutorError, RepoError, StateError
from bisector.vocab.gitrepo import GitRepo
from bisector.workers.executor import Assignment, StepRequest
from bisector.workers.inprocess import InProcessExecutor


def coordinator(store: Store) -> Coordinator:
    return Coordinator(store, make_executor, poll_interval_s=0.05)


@pytest.mark.parametrize(("commits", "culprit", "workers"), [(1, 1, 1), (2, 1, 1), (2, 2, 2), (17, 9, 3), (17, 1, 4)])
def test_names_the_first_bad_commit(tmp_path: Path, store: Store, commits: int, culprit: int, workers: int):
    history = culprit_history(tmp_path / "repo", commits, culprit)
    spec = synthetic_spec(history.path, history.shas[0][:8], "main", workers=workers)
    record = coordinator(store).start(spec)
    assert record.status is BisectStatus.FOUND
    assert record.first_bad == history.shas[culprit]
    assert record.last_good == history.shas[culprit - 1]
    steps = store.steps(record.id)
    assert all(s.verdict is not None for s in steps)
    tested = {s.sha for s in steps}
    checks = SearchRecords.from_extra(record.extra).endpoints
    for name, sha, rests_on in (("good", history.shas[0], culprit == 1), ("bad", history.shas[-1], culprit == commits)):
        # Lazily an endpoint runs when the answer rests on it (every probe bad, or every one good); with several
        # workers also early, in a slot no probe can use. The record says which ran.
        assert (sha in tested) == (checks[name] is not EndpointCheck.ASSUMED)
        if rests_on:
            assert sha in tested
        elif workers == 1:
            assert sha not in tested


def test_thousand_commits_with_local_worker_processes(tmp_path: Path, store: Store):
    history = culprit_history(tmp_path / "repo", 1000, 637, merge_every=40)
    spec = synthetic_spec(history.path, history.shas[0], history.shas[-1], workers=3, executor="local")
    record = coordinator(store).start(spec)
    assert (record.status, record.first_bad) == (BisectStatus.FOUND, history.shas[637])
    decided = [s for s in store.steps(record.id) if s.verdict in (Verdict.GOOD, Verdict.BAD)]
    assert len(decided) <= 2 + 3 * 7  # endpoints + about log4(1000) rounds of 3


def test_merge_heavy_history_follows_first_parents(tmp_path: Path, store: Store):
    verdicts = ["good"] * 30 + ["bad"] * 30
    history = write_history(tmp_path / "repo", verdicts, merge_every=3)
    record = coordinator(store).start(synthetic_spec(history.path, history.shas[0], history.shas[-1], workers=2))
    assert record.first_bad == history.shas[30]
    candidates = store.candidates(record.id)
    assert candidates.shas() == history.shas
    described = candidates.described()  # the ends of the range and what the search tested
    assert {c.position for c in described} >= {0, 1, 59, 30}
    merges = {c.position for c in described if c.subject.startswith("Merge pull request")}
    assert merges == {c.position for c in described if c.position % 3 == 0 and c.position > 0}
    assert all(c.pr is not None for c in described if c.position > 0)


def test_exit_125_and_build_failures_are_skipped(tmp_path: Path, store: Store):
    verdicts = ["good"] * 8 + ["skip", "buildfail", "good", "bad", "skip"] + ["bad"] * 7
    history = write_history(tmp_path / "repo", verdicts)
    record = coordinator(store).start(synthetic_spec(history.path, history.shas[0], history.shas[-1]))
    assert (record.status, record.first_bad) == (BisectStatus.FOUND, history.shas[11])
    details = {s.sha: s for s in store.steps(record.id)}
    for index, reason in ((8, "exited 125"), (9, "build failed")):
        if history.shas[index] in details:
            assert details[history.shas[index]].verdict is Verdict.SKIP
            assert reason in details[history.shas[index]].detail


def test_skip_beside_the_culprit_names_the_range(tmp_path: Path, store: Store):
    verdicts = ["good"] * 5 + ["skip", "skip", "bad"] + ["bad"] * 5
    history = write_history(tmp_path / "repo", verdicts)
    record = coordinator(store).start(synthetic_spec(history.path, history.shas[0], history.shas[-1]))
    assert record.status is BisectStatus.AMBIGUOUS
    assert (record.last_good, record.first_bad) == (history.shas[4], history.shas[7])
    assert "3 commits" in record.message


def test_infrastructure_errors_are_retried_and_never_bad(tmp_path: Path, store: Store):
    history = culprit_history(tmp_path / "repo", 9, 5)
    flaky = tmp_path / "flaky-count"
    # The first two runs of the commit at position 4 hit "Connection refused", then it runs normally.
    run = (
        f'if [ "$(cat counter.txt)" = 4 ] && [ "$(cat {flaky} 2>/dev/null || echo 0)" -lt 2 ]; then '
        f"echo $(( $(cat {flaky} 2>/dev/null || echo 0) + 1 )) > {flaky}; "
        'echo "ConnectionRefusedError: [Errno 111] Connection refused" >&2; exit 1; fi; bash test.sh'
    )
    spec = synthetic_spec(history.path, history.shas[0], history.shas[-1], run=run, workers=2)
    record = coordinator(store).start(spec)
    assert (record.status, record.first_bad) == (BisectStatus.FOUND, history.shas[5])
    at_four = [s for s in store.steps(record.id) if s.sha == history.shas[4] and s.purpose is StepPurpose.SEARCH]
    assert [s.verdict for s in at_four] == [Verdict.ERROR, Verdict.ERROR, Verdict.GOOD]
    assert all(s.error_kind is ErrorKind.INFRA for s in at_four[:2])
    assert at_four[1].worker != at_four[0].worker  # retried on another worker


def test_timeouts_kill_the_step_and_exhaust_to_a_skip(tmp_path: Path, store: Store):
    history = culprit_history(tmp_path / "repo", 6, 3)
    run = 'if [ "$(cat counter.txt)" = 2 ]; then sleep 30 & sleep 30; fi; bash test.sh'
    spec = synthetic_spec(history.path, history.shas[0], history.shas[-1], run=run, timeout_s=1.0, max_attempts=2)
    record = coordinator(store).start(spec)
    steps_at_two = [s for s in store.steps(record.id) if s.sha == history.shas[2]]
    assert [s.error_kind for s in steps_at_two] == [ErrorKind.TIMEOUT, ErrorKind.TIMEOUT]
    assert all(s.run_s is not None and s.run_s < 10 for s in steps_at_two)
    assert record.status is BisectStatus.AMBIGUOUS  # 2 untestable beside the culprit at 3
    assert (record.last_good, record.first_bad) == (history.shas[1], history.shas[3])


def test_endpoint_mismatch_stops_with_the_measured_values(tmp_path: Path, store: Store):
    history = culprit_history(tmp_path / "repo", 5, 3)
    spec = synthetic_spec(
        history.path, history.shas[4], history.shas[5], run="bash test.sh", metric=r"metric: ([0-9.]+)", expect=">= 8"
    )
    record = coordinator(store).start(spec)
    assert record.status is BisectStatus.ENDPOINTS_MISMATCH
    assert "good endpoint" in record.message
    assert "metric 5" in record.message


@pytest.mark.parametrize(
    ("verdicts", "verify"), [(["buildfail", "good", "bad"], "first"), (["buildfail", "bad", "bad"], "lazy")]
)
def test_untestable_endpoint_fails_clearly(tmp_path: Path, store: Store, verdicts: list[str], verify: str):
    """Lazily, only an endpoint the answer rests on is run (here every probe is bad: the good end)."""
    history = write_history(tmp_path / "repo", verdicts)
    spec = synthetic_spec(history.path, history.shas[0], history.shas[-1], verify_endpoints=verify)
    record = coordinator(store).start(spec)
    assert record.status is BisectStatus.FAILED
    assert "cannot be tested" in record.message
    assert "build failed" in record.message


def test_bad_ranges_are_refused_before_anything_is_stored(tmp_path: Path, store: Store):
    history = culprit_history(tmp_path / "repo", 5, 3)
    for good, bad, message in (
        (history.shas[3], history.shas[1], "not an ancestor"),
        (history.shas[2], history.shas[2], "empty range"),
        ("nosuchref", "main", "unknown revision"),
    ):
        with pytest.raises(RepoError, match=message):
            coordinator(store).start(synthetic_spec(history.path, good, bad))
    assert store.list_bisects() == []


def test_a_good_commit_that_came_in_through_a_merge_is_refused(tmp_path: Path, store: Store):
    """The range is bad's first-parent chain down to good: a good on a merged branch is named, with the main-line
    commit to use instead (the oldest listed commit's first parent), and nothing is stored."""
    repo = tmp_path / "repo"

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True)
        return done.stdout.strip()

    def commit(message: str) -> str:
        git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "-m", message)
        return git("rev-parse", "HEAD")

    repo.mkdir()
    git("init", "-q", "-b", "main")
    c0 = commit("c0")
    git("checkout", "-q", "-b", "side")
    b1 = commit("b1")
    git("checkout", "-q", "main")
    commit("c1")
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "merge", "-q", "--no-ff", "-m", "c2: merge", "side")
    tip = commit("c3")
    with pytest.raises(RepoError, match=f"not on the first-parent chain.*e.g. {c0[:12]}"):
        coordinator(store).start(synthetic_spec(repo, b1, tip))
    assert store.list_bisects() == []
    commits = GitRepo(repo).range_for_bisect(c0, tip)  # from the main line: the merge is one candidate
    assert [(c.position, c.subject) for c in commits.described()] == [(0, "c0"), (1, "c1"), (2, "c2: merge"), (3, "c3")]
    assert (commits[0].sha, commits[-1].sha) == (c0, tip)


def test_resume_refuses_a_finished_bisect(tmp_path: Path, store: Store):
    history = culprit_history(tmp_path / "repo", 3, 2)
    record = coordinator(store).start(synthetic_spec(history.path, history.shas[0], history.shas[-1]))
    with pytest.raises(StateError, match="already found"):
        coordinator(store).resume(record.id)


def _created_without_candidates(store: Store, spec: BisectSpec) -> BisectRecord:
    """A bisect whose creation was cut short after its row was stored, before its candidates were."""
    repo = GitRepo(spec.repo)
    bisect_id = store.create_bisect(str(repo.root), repo.resolve(spec.good), repo.resolve(spec.bad), spec.to_json(),
                                    utc_now())  # fmt: skip
    return store.get_bisect(bisect_id)


def test_resume_lists_candidates_a_cut_short_creation_had_not_stored(tmp_path: Path, store: Store):
    history = culprit_history(tmp_path / "repo", 17, 9)
    spec = synthetic_spec(history.path, history.shas[0], history.shas[-1], workers=2)
    bisect_id = _created_without_candidates(store, spec).id
    assert len(store.candidates(bisect_id)) == 0
    record = coordinator(store).resume(bisect_id)
    assert (record.status, record.first_bad) == (BisectStatus.FOUND, history.shas[9])
    assert store.candidates(bisect_id).shas() == history.shas


def test_store_missing_candidates_only_when_missing_and_listable(tmp_path: Path, store: Store):
    from bisector.runner.coordinator import store_missing_candidates

    history = culprit_history(tmp_path / "repo", 5, 3)
    record = _created_without_candidates(store, synthetic_spec(history.path, history.shas[0], history.shas[-1]))
    assert store_missing_candidates(store, record)
    assert store.candidates(record.id).shas() == history.shas
    assert not store_missing_candidates(store, record)  # there already
    gone = _created_without_candidates(store, synthetic_spec(history.path, history.shas[0], history.shas[-1]))
    subprocess.run(["rm", "-rf", str(history.path)], check=True)
    assert not store_missing_candidates(store, gone)  # the repository is gone: nothing to list, no error
    assert len(store.candidates(gone.id)) == 0


def test_start_stores_the_candidates(tmp_path: Path, store: Store):
    history = culprit_history(tmp_path / "repo", 5, 3)
    record = coordinator(store).start(synthetic_spec(history.path, history.shas[0], history.shas[-1]))
    assert store.candidates(record.id).shas() == history.shas


@pytest.mark.parametrize("kind", ["found", "endpoints mismatch", "all parents"])
def test_candidates_are_stored_before_the_first_step(tmp_path: Path, store: Store, kind: str):
    """The candidates are stored before any step is sent; a merged branch's, before the branch's first step."""
    verdicts = ["good"] * 3 + ["bad"] * 3
    if kind == "endpoints mismatch":
        verdicts = ["bad"] * 6
    branches = {3: ["good", "bad"]} if kind == "all parents" else {}
    history = write_history(tmp_path / "repo", verdicts, side_branches=branches)
    spec = synthetic_spec(history.path, history.shas[0], history.shas[-1], all_parents=kind == "all parents")
    with _CandidatesWatchingStore.open(f"sqlite:///{tmp_path / 'watched.db'}") as watched:
        record = Coordinator(watched, make_executor, poll_interval_s=0.05).start(spec)
        stored = watched.candidates(record.id).shas()
        steps = watched.steps(record.id)
    expected = BisectStatus.ENDPOINTS_MISMATCH if kind == "endpoints mismatch" else BisectStatus.FOUND
    assert record.status is expected
    assert stored[: len(history.shas)] == history.shas
    assert len(stored) == len(history.shas) + len(branches.get(3, []))
    position = {sha: i for i, sha in enumerate(stored)}
    for step, known in zip(steps, watched.candidates_at_start, strict=True):  # each step's commit was listed
        assert position[step.sha] < known
    assert all(watched.described_at_start)  # and described
    if kind == "all parents":
        assert record.first_bad == history.side_shas[1]


class _CandidatesWatchingStore(Store):
    """A real store that notes, each time steps start, how many candidates are stored and whether each step's
    commit is described."""

    candidates_at_start: list[int]
    described_at_start: list[bool]

    def start_steps(self, bisect_id: int, new_steps: Sequence[NewStep]) -> list[int]:
        candidates = self.candidates(bisect_id)
        self.candidates_at_start = [*getattr(self, "candidates_at_start", []), *[len(candidates)] * len(new_steps)]
        described = [getattr(candidates.commit(step.sha), "described", False) for step in new_steps]
        self.described_at_start = [*getattr(self, "described_at_start", []), *described]
        return super().start_steps(bisect_id, new_steps)


def _git_details(repo: Path, sha: str) -> tuple[str, str, datetime]:
    shown = ["git", "-C", str(repo), "log", "-1", "--format=%s%x1f%an <%ae>%x1f%ct", sha]
    subject, author, timestamp = subprocess.run(shown, capture_output=True, text=True, check=True).stdout.split("\x1f")
    return subject, author, datetime.fromtimestamp(int(timestamp), tz=UTC)


def test_a_long_range_stores_the_details_of_the_commits_it_shows_and_no_others(tmp_path: Path, store: Store):
    history = culprit_history(tmp_path / "repo", 300, 217, merge_every=7)
    record = coordinator(store).start(synthetic_spec(history.path, history.shas[0], history.shas[-1], workers=3))
    assert record.first_bad == history.shas[217]
    candidates = store.candidates(record.id)
    assert candidates.shas() == history.shas
    tested = {candidates.position[s.sha] for s in store.steps(record.id)}
    shown = candidates.shown(tested, 217)
    assert {0, 1, 216, 217, 218, 299, 300} <= set(shown)
    assert len(shown) < 40
    described = candidates.described()
    assert [c.position for c in described] == shown
    for commit in described:
        assert (commit.subject, commit.author, commit.date) == _git_details(history.path, commit.sha)
    report = BisectReport.load(store, record.id)
    assert all(row.described for row in range_rows(report) if isinstance(row, Commit))
    assert report_json(report)["first_bad"]["subject"] == _git_details(history.path, history.shas[217])[0]  # type: ignore[index]
    assert record.message.endswith(_git_details(history.path, history.shas[217])[0])

    untested = next(p for p in range(100, 200) if p not in tested)  # a person's verdict that agrees with the answer
    marked = mark_commit(store, record.id, history.shas[untested], "good")
    assert (marked.effect, marked.reopened) == (MarkEffect.AGREES, False)
    assert store.candidates(record.id)[untested].described
    reopening = mark_commit(store, record.id, history.shas[217], "good")  # the answer's first bad commit
    assert (reopening.effect, reopening.why) == (MarkEffect.REOPENED, "good at or after the first bad commit")
    assert store.get_bisect(record.id).status is BisectStatus.RUNNING


def test_resume_after_a_kill_between_creation_and_the_first_step(tmp_path: Path, store: Store):
    history = culprit_history(tmp_path / "repo", 120, 77)
    spec = synthetic_spec(history.path, history.shas[0], history.shas[-1], workers=2)
    bisect_id = prepare_bisect(store, spec)  # what a coordinator killed right after creating the bisect leaves
    assert store.steps(bisect_id) == []
    candidates = store.candidates(bisect_id)
    assert (candidates.shas(), [c.position for c in candidates.described()]) == (history.shas, candidates.shown())
    record = coordinator(store).resume(bisect_id)
    assert (record.status, record.first_bad) == (BisectStatus.FOUND, history.shas[77])
    candidates = store.candidates(bisect_id)
    assert candidates.shas() == history.shas
    assert all(candidates.commit(s.sha).described for s in store.steps(bisect_id))  # type: ignore[union-attr]
    assert candidates[77].subject == _git_details(history.path, history.shas[77])[0]


def test_all_parents_descends_into_a_bad_merge(tmp_path: Path, store: Store):
    # Commit 6 on main merges a 5-commit branch whose third commit is the culprit.
    verdicts = ["good"] * 6 + ["bad"] * 6
    history = write_history(tmp_path / "repo", verdicts, side_branches={6: ["good", "good", "bad", "bad", "bad"]})
    first_parent = coordinator(store).start(synthetic_spec(history.path, history.shas[0], history.shas[-1]))
    assert first_parent.first_bad == history.shas[6]  # the merge, seen along first parents
    record = coordinator(store).start(
        synthetic_spec(history.path, history.shas[0], history.shas[-1], all_parents=True, workers=2)
    )
    assert (record.status, record.first_bad) == (BisectStatus.FOUND, history.side_shas[2])
    assert record.last_good == history.side_shas[1]
    assert len(store.candidates(record.id)) == len(history.shas) + 5


def test_all_parents_names_the_merge_when_the_branch_alone_is_good(tmp_path: Path, store: Store):
    verdicts = ["good"] * 4 + ["bad"] * 4
    history = write_history(tmp_path / "repo", verdicts, side_branches={4: ["good", "good"]})
    record = coordinator(store).start(synthetic_spec(history.path, history.shas[0], history.shas[-1], all_parents=True))
    assert (record.status, record.first_bad) == (BisectStatus.FOUND, history.shas[4])


def test_all_parents_through_a_back_merge_lists_and_tests_each_commit_once(tmp_path: Path, store: Store):
    """side forked from main at f, merged main back (m2, whose merge itself breaks the test) and was merged into main
    (m1). Descending into m2 lists main's a and b again: they keep their positions and verdicts."""
    repo = tmp_path / "repo"

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
                              check=True, capture_output=True, text=True)  # fmt: skip
        return done.stdout.strip()

    def commit(message: str, **files: str) -> str:
        for name, text in files.items():
            (repo / name).write_text(text)
        git("add", "-A")
        git("commit", "-qm", message)
        return git("rev-parse", "HEAD")

    repo.mkdir()
    git("init", "-q", "-b", "main")
    good = commit("g", **{"test.sh": 'test "$(cat verdict)" = good\n', "verdict": "good\n"})
    fork = commit("f", **{"f.txt": "f\n"})
    commit("a", **{"a.txt": "a\n"})
    commit("b", **{"b.txt": "b\n"})
    git("checkout", "-q", "-b", "side", fork)
    commit("s1", **{"s.txt": "1\n"})
    git("merge", "-q", "--no-ff", "--no-commit", "main")
    back_merge = commit("m2: merge main back", verdict="bad\n")
    commit("s2", **{"s.txt": "2\n"})
    git("checkout", "-q", "main")
    commit("c", **{"c.txt": "c\n"})
    git("merge", "-q", "--no-ff", "-m", "m1: merge side", "side")
    tip = commit("d", **{"d.txt": "d\n"})
    record = coordinator(store).start(synthetic_spec(repo, good, tip, build=None, all_parents=True, workers=1))
    assert (record.status, record.first_bad) == (BisectStatus.FOUND, back_merge)
    listed = store.candidates(record.id).shas()
    assert len(listed) == len(set(listed)) == 10
    tested = [s.sha for s in store.steps(record.id) if s.purpose is StepPurpose.SEARCH]
    assert len(tested) == len(set(tested))


def test_all_parents_explains_a_branch_culprit_against_its_own_parent(tmp_path: Path, store: Store):
    """The branch forked from c1 and merged at c5: its first commit is found bad against c4 (the merge's
    first parent), but its own change is c1 -> b1; c2..c4 on main must not be part of the explanation."""
    repo = tmp_path / "repo"

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True)
        return done.stdout.strip()

    def commit(message: str, **files: str) -> str:
        for name, text in files.items():
            (repo / name).write_text(text)
        git("add", "-A")
        git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", message)
        return git("rev-parse", "HEAD")

    repo.mkdir()
    git("init", "-q", "-b", "main")
    c0 = commit("c0", **{"test.sh": 'test "$(cat verdict)" = good\n', "verdict": "good\n", "main.txt": "0\n"})
    c1 = commit("c1", **{"main.txt": "1\n"})
    for i in (2, 3, 4):
        commit(f"c{i}", **{"main.txt": f"{i}\n"})
    git("checkout", "-q", "-b", "side", c1)
    b1 = commit("b1: the culprit", verdict="bad\n")
    commit("b2", **{"side.txt": "2\n"})
    git("checkout", "-q", "main")
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "merge", "-q", "--no-ff", "-m", "c5: merge", "side")
    tip = commit("c6", **{"main.txt": "6\n"})
    # trace_kernels: traced re-runs run even though nothing in this repository can be traced
    spec = synthetic_spec(repo, c0, tip, build=None, all_parents=True, explain=True, trace_kernels=True)
    record = coordinator(store).start(spec)
    assert (record.status, record.first_bad) == (BisectStatus.FOUND, b1)
    traced = {s.sha for s in store.steps(record.id) if s.purpose is StepPurpose.TRACE}
    assert traced == {c1, b1}  # not the merge's first parent c4


class _FailingAtSubmit(InProcessExecutor):
    """Runs steps for real, then cannot send the n-th one (a worker pool that went away)."""

    def __init__(self, repo: str, workers: int, fail_at: int) -> None:
        super().__init__(repo, workers)
        self.submitted = 0
        self.fail_at = fail_at

    def submit(self, request: StepRequest) -> Assignment:
        self.submitted += 1
        if self.submitted == self.fail_at:
            raise ExecutorError("the worker pool went away")
        return super().submit(request)


def _start_until_a_submit_fails(
    tmp_path: Path, store: Store, workers: int, fail_at: int
) -> tuple[SyntheticHistory, int, list[StepRecord]]:
    """A bisect (culprit 23 of 40) whose executor cannot send its fail_at-th step: the history, bisect id, steps."""
    history = culprit_history(tmp_path / "repo", 40, 23)
    spec = synthetic_spec(history.path, history.shas[0], history.shas[-1], workers=workers, verify_endpoints="first")
    executor = _FailingAtSubmit(str(history.path), workers=workers, fail_at=fail_at)
    with pytest.raises(ExecutorError, match="went away"):
        Coordinator(store, make_executor, poll_interval_s=0.05).start(spec, executor)
    (record,) = store.list_bisects()
    return history, record.id, store.steps(record.id)


def test_results_that_came_back_are_stored_when_the_loop_fails(tmp_path: Path, store: Store):
    """Results are written right after the next probes go out; an error in between must not lose them."""
    _, _, steps = _start_until_a_submit_fails(tmp_path, store, workers=1, fail_at=4)
    assert len(steps) == 4  # the endpoints and one probe ran; the fourth was stored, then could not be sent
    assert [s.verdict for s in steps[:3]] == [Verdict.GOOD, Verdict.BAD, Verdict.GOOD]
    assert (steps[3].verdict, steps[3].error_kind) == (Verdict.ERROR, ErrorKind.INTERRUPTED)  # not running
    assert "never sent" in steps[3].detail


def test_a_round_that_could_not_all_be_sent_leaves_no_phantom_running_steps(tmp_path: Path, store: Store):
    """A round's steps are recorded together, then sent; when the executor fails partway, the rest are stored as
    interrupted (never sent): not shown as running, not counted against their commits, and resume re-runs them."""
    history, bisect_id, steps = _start_until_a_submit_fails(tmp_path, store, workers=4, fail_at=2)
    assert len(steps) == 4  # the first round: one sent, then the executor failed
    assert steps[0].verdict is None  # sent and running when the coordinator stopped
    assert [(s.verdict, s.error_kind) for s in steps[1:]] == [(Verdict.ERROR, ErrorKind.INTERRUPTED)] * 3
    resumed = coordinator(store).resume(bisect_id)
    assert (resumed.status, resumed.first_bad) == (BisectStatus.FOUND, history.shas[23])
