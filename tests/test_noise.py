"""Repeats, flaky tests, comparative metrics, find-fix and confirmation, end to end through the coordinator."""

from __future__ import annotations

from pathlib import Path

from bisect_helpers import synthetic_spec
from synthetic import culprit_history, write_history

from bisector.db.store import Store
from bisector.runner.coordinator import Coordinator
from bisector.runner.wiring import make_executor
from bisector.vocab.domain import BisectStatus, StepPurpose


def coordinator(store: Store) -> Coordinator:
    return Coordinator(store, make_executor, poll_interval_s=0.05)


def flaky_run(tmp_path: Path, position: int, failures: int) -> str:
    """The commit at `position` fails its first `failures` runs, whatever it is; others run normally."""
    count = tmp_path / f"runs-at-{position}"
    return (
        f'if [ "$(cat counter.txt)" = {position} ]; then n=$(cat {count} 2>/dev/null || echo 0); '
        f"echo $((n + 1)) > {count}; if [ $n -lt {failures} ]; then echo flake; exit 1; fi; fi; bash test.sh"
    )


def noisy_metric_run(runs: Path, seed: int, good: float, bad: float, noise: float) -> str:
    """A metric around `good` or `bad` plus uniform noise within +-`noise`. The k-th run at a commit (k taken
    atomically under `runs`) draws random.Random("seed:position:k"): a seed fixes every commit's values,
    whatever order the runs start in."""
    runs.mkdir()
    return (
        f'p=$(cat counter.txt); k=0; until mkdir "{runs}/$p.$k" 2>/dev/null; do k=$((k + 1)); done; '
        "python3 -c \"import random, sys; v=open('verdict').read().strip(); r=random.Random(':'.join(sys.argv[1:])); "
        f"base={good} if v=='good' else {bad}; print('metric:', base + {noise} * (2 * r.random() - 1))\" "
        f"{seed} $p $k"
    )


def test_single_runs_trust_a_flake_and_repeats_do_not(tmp_path: Path, store: Store):
    history = culprit_history(tmp_path / "repo", 16, 12)
    # A good commit (position 8, the first probe) fails its first run: plain bisection blames it.
    plain = coordinator(store).start(
        synthetic_spec(history.path, history.shas[0], history.shas[-1], run=flaky_run(tmp_path / "a", 8, 1),
                       explain=False)
    )  # fmt: skip
    (tmp_path / "a").mkdir(exist_ok=True)
    assert plain.first_bad != history.shas[12]
    (tmp_path / "b").mkdir()
    repeated = coordinator(store).start(
        synthetic_spec(history.path, history.shas[0], history.shas[-1], run=flaky_run(tmp_path / "b", 8, 1),
                       repeat=3, explain=False, workers=1)
    )  # fmt: skip
    assert (repeated.status, repeated.first_bad) == (BisectStatus.FOUND, history.shas[12])
    assert repeated.extra.get("flake_seen") is True
    assert repeated.extra["confirmation"]["status"] == "confirmed"
    confirm_steps = [s for s in store.steps(repeated.id) if s.purpose is StepPurpose.CONFIRM]
    assert {s.sha for s in confirm_steps} <= {history.shas[11], history.shas[12]}


def test_adaptive_repeats_settle_a_disagreement(tmp_path: Path, store: Store):
    history = culprit_history(tmp_path / "repo", 8, 5)
    (tmp_path / "c").mkdir()
    record = coordinator(store).start(
        synthetic_spec(history.path, history.shas[0], history.shas[-1], run=flaky_run(tmp_path / "c", 4, 1),
                       repeat=2, max_repeat=6, explain=False, confirm=False)
    )  # fmt: skip
    assert record.first_bad == history.shas[5]
    runs_at_four = [s for s in store.steps(record.id) if s.sha == history.shas[4]]
    assert len(runs_at_four) > 2  # 1 fail + 1 pass disagreed, so more runs were asked


def test_noisy_metric_with_threshold_band_and_repeats(tmp_path: Path, store: Store, noise_seed: int):
    history = culprit_history(tmp_path / "repo", 20, 7)
    run = noisy_metric_run(tmp_path / "runs", noise_seed, 10.0, 8.0, 1.5)
    spec = synthetic_spec(
        history.path, history.shas[0], history.shas[-1], run=run, build=None,
        metric=r"metric: ([-0-9.]+)", expect=">= 9.0", noise_band=0.5, repeat=3, max_repeat=15, workers=3,
        explain=False,
    )  # fmt: skip
    record = coordinator(store).start(spec)
    assert (record.status, record.first_bad) == (BisectStatus.FOUND, history.shas[7])
    assert history.shas[7] in record.extra["decisions"]


def test_expect_auto_compares_with_the_endpoints(tmp_path: Path, store: Store, noise_seed: int):
    history = culprit_history(tmp_path / "repo", 12, 4)
    run = noisy_metric_run(tmp_path / "runs", noise_seed, 100.0, 90.0, 2.0)
    spec = synthetic_spec(
        history.path, history.shas[0], history.shas[-1], run=run, build=None,
        metric=r"metric: ([-0-9.]+)", expect="auto", direction="higher", repeat=5, max_repeat=20, workers=4,
        explain=False,
    )  # fmt: skip
    record = coordinator(store).start(spec)
    assert (record.status, record.first_bad) == (BisectStatus.FOUND, history.shas[4])
    measured = {s.verdict.value for s in store.steps(record.id) if s.verdict is not None}
    assert "measured" in measured


def test_find_fix_names_the_commit_that_fixed_it(tmp_path: Path, store: Store):
    verdicts = ["bad"] * 9 + ["good"] * 6
    history = write_history(tmp_path / "repo", verdicts)
    record = coordinator(store).start(
        synthetic_spec(history.path, history.shas[0], history.shas[-1], find_fix=True, explain=False)
    )
    assert (record.status, record.first_bad) == (BisectStatus.FOUND, history.shas[9])


def test_confirmation_catches_a_flaky_boundary_and_the_search_moves_on(tmp_path: Path, store: Store):
    history = culprit_history(tmp_path / "repo", 16, 12)
    (tmp_path / "d").mkdir()
    # Single runs with k-ary search: the good commit at 8 flakes once, so the search first ends at (7, 8).
    # Confirmation re-runs 8 against 7, sees 8 pass, and the search continues to the real culprit.
    spec = synthetic_spec(history.path, history.shas[0], history.shas[-1], run=flaky_run(tmp_path / "d", 8, 1),
                          strategy="kary", confirm=True, explain=False)  # fmt: skip
    record = coordinator(store).start(spec)
    assert (record.status, record.first_bad) == (BisectStatus.FOUND, history.shas[12])
    confirmed = {s.sha for s in store.steps(record.id) if s.purpose is StepPurpose.CONFIRM}
    assert {history.shas[7], history.shas[8], history.shas[11], history.shas[12]} <= confirmed
    assert record.extra["confirmation"]["status"] == "confirmed"


def test_a_worker_that_disagrees_and_fails_its_reference_check_is_quarantined(tmp_path: Path, store: Store):
    history = culprit_history(tmp_path / "repo", 12, 7)
    # thread-1 is a broken node: every test on it fails.
    run = 'if [ "$BISECT_WORKER" = thread-1 ]; then echo "wrong answer from a broken node"; exit 1; fi; bash test.sh'
    spec = synthetic_spec(history.path, history.shas[0], history.shas[-1], run=run, repeat=2, workers=2,
                          explain=False)  # fmt: skip
    record = coordinator(store).start(spec)
    assert (record.status, record.first_bad) == (BisectStatus.FOUND, history.shas[7])
    assert set(record.extra["quarantined"]) == {"thread-1"}
    references = [s for s in store.steps(record.id) if s.purpose is StepPurpose.REFERENCE]
    assert {s.worker for s in references} == {"thread-0", "thread-1"}


def _resume_with(store: Store, spec, prepare) -> object:
    from bisector.runner.coordinator import prepare_bisect

    bisect_id = prepare_bisect(store, spec)
    prepare(bisect_id)
    return coordinator(store).resume(bisect_id)


def test_steps_interrupted_by_a_killed_coordinator_do_not_count_as_failures(tmp_path: Path, store: Store):
    from datetime import UTC, datetime

    history = culprit_history(tmp_path / "repo", 10, 6)
    spec = synthetic_spec(history.path, history.shas[0], history.shas[-1], explain=False, max_attempts=3)

    def three_runs_in_flight_at_the_good_endpoint(bisect_id: int) -> None:
        for worker in ("thread-0", "thread-0", "thread-0"):
            store.start_step(bisect_id, history.shas[0], 1, worker, "vm", (), datetime.now(UTC))

    record = _resume_with(store, spec, three_runs_in_flight_at_the_good_endpoint)
    assert (record.status, record.first_bad) == (BisectStatus.FOUND, history.shas[6])


def test_an_endpoint_judged_only_by_a_quarantined_worker_is_tested_again(tmp_path: Path, store: Store):
    from datetime import UTC, datetime

    from bisector.vocab.domain import StepResult, Verdict

    history = culprit_history(tmp_path / "repo", 10, 6)
    spec = synthetic_spec(
        history.path, history.shas[0], history.shas[-1], explain=False, workers=2, verify_endpoints="first"
    )

    def good_endpoint_judged_by_a_quarantined_worker(bisect_id: int) -> None:
        step = store.start_step(bisect_id, history.shas[0], 1, "thread-1", "vm", (), datetime.now(UTC))
        store.finish_step(step, StepResult(step, history.shas[0], Verdict.GOOD, worker="thread-1"), datetime.now(UTC))
        store.update_extra(bisect_id, quarantined={"thread-1": "reference check failed"})

    record = _resume_with(store, spec, good_endpoint_judged_by_a_quarantined_worker)
    assert (record.status, record.first_bad) == (BisectStatus.FOUND, history.shas[6])
    at_good = [s for s in store.steps(record.id) if s.sha == history.shas[0]]
    assert [s.worker for s in at_good] == ["thread-1", "thread-0"]


def test_a_retry_is_placed_when_the_other_worker_is_quarantined(tmp_path: Path, store: Store):
    from datetime import UTC, datetime

    from bisector.vocab.domain import ErrorKind, StepResult, Verdict

    history = culprit_history(tmp_path / "repo", 4, 3)
    spec = synthetic_spec(history.path, history.shas[0], history.shas[-1], explain=False, workers=2)

    def an_error_on_the_only_trusted_worker(bisect_id: int) -> None:
        step = store.start_step(bisect_id, history.shas[2], 1, "thread-0", "vm", (), datetime.now(UTC))
        result = StepResult(step, history.shas[2], Verdict.ERROR, error_kind=ErrorKind.INFRA, worker="thread-0")
        store.finish_step(step, result, datetime.now(UTC))
        store.update_extra(bisect_id, quarantined={"thread-1": "reference check failed"})

    record = _resume_with(store, spec, an_error_on_the_only_trusted_worker)
    assert (record.status, record.first_bad) == (BisectStatus.FOUND, history.shas[3])


def test_reference_checks_cut_short_by_a_dead_coordinator_finish_on_resume(tmp_path: Path, store: Store):
    """thread-1 was under a reference check when the coordinator died: two runs of the good endpoint had come
    back wrong and a third was in flight. The resumed bisect runs that one again, and quarantines thread-1 once it
    too answers wrong (three wrong, none right, at one endpoint), with no need of the bad endpoint's runs."""
    from datetime import UTC, datetime

    from bisector.vocab.domain import StepResult, Verdict

    history = culprit_history(tmp_path / "repo", 12, 7)
    run = 'if [ "$BISECT_WORKER" = thread-1 ]; then echo "wrong answer from a broken node"; exit 1; fi; bash test.sh'
    spec = synthetic_spec(history.path, history.shas[0], history.shas[-1], run=run, workers=2, explain=False)
    good = history.shas[0]

    def check_under_way(bisect_id: int) -> None:
        now = datetime.now(UTC)
        for _ in range(2):
            step = store.start_step(bisect_id, good, 1, "thread-1", "vm", (), now, purpose=StepPurpose.REFERENCE)
            store.finish_step(step, StepResult(step, good, Verdict.BAD, worker="thread-1"), now)
        store.start_step(bisect_id, good, 1, "thread-1", "vm", (), now, purpose=StepPurpose.REFERENCE)
        store.update_extra(bisect_id, reference_checked=["thread-1"])

    record = _resume_with(store, spec, check_under_way)
    assert (record.status, record.first_bad) == (BisectStatus.FOUND, history.shas[7])
    assert "3 of 3 runs of the known good commit on thread-1 answered wrong" in record.extra["quarantined"]["thread-1"]
    references = [s for s in store.steps(record.id) if s.purpose is StepPurpose.REFERENCE]
    assert [s.verdict for s in references if s.sha == good] == [Verdict.BAD] * 2 + [Verdict.ERROR, Verdict.BAD]
    assert {s.worker for s in references} == {"thread-1"}
