"""The decision core through the coordinator, over a scripted executor: real git, real store, no processes."""

from __future__ import annotations

import itertools
import random
import subprocess
from pathlib import Path

import pytest
from scripted_bisect import scripted_bisect
from synthetic import SyntheticHistory

from bisector.core.records import EndpointCheck, SearchRecords
from bisector.db.store import Store
from bisector.report.model import BisectReport
from bisector.vocab.domain import BisectStatus, ErrorKind, StepPurpose, StepResult, Verdict
from bisector.workers.scripted import BAD, GOOD, LOST, SILENT, SKIP, Answer, Script, ScriptedExecutor, table


def test_lazy_endpoints_at_one_worker_run_what_git_bisect_runs(tmp_path: Path, store: Store):
    """A clean bisect at --workers 1 runs no endpoint the answer does not rest on: as many runs as git's."""
    done = scripted_bisect(tmp_path, store, 40, 23)
    assert (done.record.status, done.record.first_bad) == (BisectStatus.FOUND, done.history.shas[23])
    assert 0 not in done.positions()
    assert 40 not in done.positions()
    git_runs = _git_bisect_run_count(done.history.path, done.history.shas[0], done.history.shas[-1])
    assert len(done.steps) == git_runs
    checks = SearchRecords.from_extra(done.record.extra).endpoints
    assert checks == {"good": EndpointCheck.ASSUMED, "bad": EndpointCheck.ASSUMED}
    report = BisectReport.load(store, done.record.id)
    assert "the good endpoint and the bad endpoint taken as given, not run" in " ".join(report.noise_lines())
    assert {c.position for c, _, _ in report.decided_commits()} >= {0, 40}  # as git's log marks them


@pytest.mark.parametrize(("culprit", "endpoint"), [(1, 0), (40, 40)])
def test_lazy_endpoints_run_the_one_the_answer_rests_on(tmp_path: Path, store: Store, culprit: int, endpoint: int):
    done = scripted_bisect(tmp_path, store, 40, culprit)
    assert done.record.first_bad == done.history.shas[culprit]
    assert done.positions().count(endpoint) == 1
    assert done.positions()[-1] == endpoint  # only once every probe had said the same
    checks = SearchRecords.from_extra(done.record.extra).endpoints
    assert checks["good" if endpoint == 0 else "bad"] is EndpointCheck.TESTED_LAZILY
    lines = BisectReport.load(store, done.record.id).noise_lines()
    assert any("run only because the answer rested on it" in line for line in lines)


def _parts(lo: int, hi: int, probes: list[int]) -> list[int]:
    """Suspects per part when probes split the candidates (lo, hi]: the first bad commit lies in one part."""
    cuts = [lo, *sorted(probes), hi]
    return [b - a for a, b in itertools.pairwise(cuts)]


def test_lazy_endpoints_at_eight_workers_run_no_endpoint_when_probes_settle_it(tmp_path: Path, store: Store):
    """W=8: no slot goes to an endpoint while probes have a use for it, each round splits the candidates into
    nine parts sized for the fewest rounds on average (an endpoint not run counts as one more suspect beside
    it), and probes on both sides of the culprit settle it."""
    done = scripted_bisect(tmp_path, store, 200, 117, workers=8)
    assert (done.record.status, done.record.first_bad) == (BisectStatus.FOUND, done.history.shas[117])
    assert not {0, 200} & set(done.positions())
    first, second, *rest = done.rounds()
    assert len(first) == len(second) == 8
    assert _parts(0, 200, first) == [80, 9, 9, 9, 9, 9, 9, 9, 57]  # part_sizes(202, 8, 9), less the endpoints
    lo = max(p for p in first if p < 117)
    hi = min(p for p in first if p >= 117)
    assert _parts(lo, hi, second) == [1] * 9  # (116, 125]
    assert not rest
    assert not [s for s in done.steps if s.verdict is Verdict.CANCELLED]
    checks = SearchRecords.from_extra(done.record.extra).endpoints
    assert checks == {"good": EndpointCheck.ASSUMED, "bad": EndpointCheck.ASSUMED}
    report = BisectReport.load(store, done.record.id)
    assert "the good endpoint and the bad endpoint taken as given, not run" in " ".join(report.noise_lines())


@pytest.mark.parametrize(
    ("culprit", "answers", "end", "name"), [(1, {0: [BAD]}, 0, "good"), (81, {81: [GOOD]}, 81, "bad")]
)
def test_a_wrong_endpoint_at_eight_workers_is_caught_when_the_answer_rests_on_it(
    tmp_path: Path, store: Store, culprit: int, answers: dict[int, list[Answer]], end: int, name: str
):
    """81 suspects: 9 probes' parts of 9, then 8 probes inside the last part fill every slot; they all say the
    same, so the answer rests on the endpoint beside them, which is run alone, says otherwise: a mismatch."""
    done = scripted_bisect(tmp_path, store, 81, culprit, answers, workers=8)
    assert done.record.status is BisectStatus.ENDPOINTS_MISMATCH
    assert f"the {name} endpoint {done.history.shas[end][:12]} tested" in done.record.message
    assert [len(r) for r in done.rounds()] == [8, 8, 1]
    assert done.rounds()[-1] == [end]
    assert 81 - end not in done.positions()  # the other endpoint was never needed
    checks = SearchRecords.from_extra(done.record.extra).endpoints
    assert checks == {name: EndpointCheck.TESTED_LAZILY, "good" if name == "bad" else "bad": EndpointCheck.ASSUMED}
    lines = " ".join(BisectReport.load(store, done.record.id).noise_lines())
    assert f"the {name} endpoint run only because the answer rested on it" in lines


def test_lazy_endpoints_take_the_slots_no_probe_can_use(tmp_path: Path, store: Store):
    """Five commits at W=8: four probes leave four slots idle, so both endpoints run in the same round."""
    done = scripted_bisect(tmp_path, store, 5, 3, workers=8)
    assert (done.record.status, done.record.first_bad) == (BisectStatus.FOUND, done.history.shas[3])
    assert [sorted(r) for r in done.rounds()] == [[0, 1, 2, 3, 4, 5]]
    checks = SearchRecords.from_extra(done.record.extra).endpoints
    assert checks == {"good": EndpointCheck.TESTED_SPARE, "bad": EndpointCheck.TESTED_SPARE}
    lines = " ".join(BisectReport.load(store, done.record.id).noise_lines())
    assert "the good endpoint and the bad endpoint run early, in a slot no probe could use" in lines


def test_a_flake_seen_at_eight_workers_has_both_endpoints_verified_before_the_answer(tmp_path: Path, store: Store):
    """Lazily nothing runs the endpoints of this range, until 143 (a first-round probe, after the culprit) answers
    good: a flake; from then on noise is expected, so both endpoints are verified before the answer."""
    done = scripted_bisect(tmp_path, store, 200, 117, {143: [GOOD, BAD]}, workers=8)
    assert 143 in done.rounds()[0]
    assert (done.record.status, done.record.first_bad) == (BisectStatus.FOUND, done.history.shas[117])
    assert {0, 200} <= set(done.positions())
    records = SearchRecords.from_extra(done.record.extra)
    assert records.flake_seen
    assert records.endpoints == {"good": EndpointCheck.TESTED, "bad": EndpointCheck.TESTED}


class _Trickling(ScriptedExecutor):
    """Reports one result per poll: a round's results that come back moments apart."""

    def poll(self, timeout_s: float) -> list[StepResult]:
        ready = [(step_id, step) for step_id, step in self.running.items() if not step.answer.never]
        if ready:
            step_id, step = ready[0]
            self._report(step_id, step.answer)
        out, self.done = self.done, []
        return out


def test_a_round_that_comes_back_one_result_at_a_time_is_decided_as_one(tmp_path: Path, store: Store):
    """The loop waits for the rest of a batch before deciding, so the next round splits what all of it left:
    no probe is placed on part of a round's results (it would land where the others' results make it useless).
    Steps still out whose results can no longer matter are stopped, so their slots join the next round."""
    batched = scripted_bisect(tmp_path / "batched", store, 200, 117, workers=8)
    trickled = scripted_bisect(tmp_path / "trickled", store, 200, 117, workers=8, executor_type=_Trickling)
    assert trickled.record.first_bad == trickled.history.shas[117]
    assert [sorted(r) for r in trickled.rounds()] == [sorted(r) for r in batched.rounds()]
    cancelled = {trickled.history.shas.index(s.sha) for s in trickled.steps if s.verdict is Verdict.CANCELLED}
    assert 134 in cancelled  # the first round's probes after 125 (bad, reported before them) no longer mattered
    assert all(p > 117 for p in cancelled)  # only probes after a bad one: 117 is bad, probed in the second round


def test_lazy_endpoint_that_contradicts_is_a_mismatch(tmp_path: Path, store: Store):
    done = scripted_bisect(tmp_path, store, 20, 1, {0: [BAD]})
    assert done.record.status is BisectStatus.ENDPOINTS_MISMATCH
    assert "the good endpoint" in done.record.message


def test_verify_first_runs_both_endpoints_first(tmp_path: Path, store: Store):
    done = scripted_bisect(tmp_path, store, 20, 7, verify_endpoints="first")
    assert done.positions()[:2] == [0, 20]
    assert done.record.first_bad == done.history.shas[7]


def test_noisy_good_endpoint_one_sided_flakes_do_not_stop_the_bisect(tmp_path: Path, store: Store):
    """--strategy noisy, the good endpoint fails 25% of its runs at random (its first run here): more runs
    there, never endpoints_mismatch from one run."""
    rng = random.Random(7)
    good_end = [BAD, *(BAD if rng.random() < 0.25 else GOOD for _ in range(30))]
    done = scripted_bisect(tmp_path, store, 30, 17, {0: good_end}, strategy="noisy", workers=2)
    assert (done.record.status, done.record.first_bad) == (BisectStatus.FOUND, done.history.shas[17])
    assert done.positions().count(0) >= 2  # the contradicting run asked for more


def test_a_truly_bad_good_endpoint_is_a_mismatch_once_established(tmp_path: Path, store: Store):
    done = scripted_bisect(tmp_path, store, 30, 17, {0: [BAD]}, strategy="noisy", workers=2)
    assert done.record.status is BisectStatus.ENDPOINTS_MISMATCH
    assert done.positions().count(0) >= 5  # established at the bisect's confidence, not by one run


def test_not_reproducible_through_the_coordinator(tmp_path: Path, store: Store):
    """A boundary whose two sides fail equally often in re-runs: flaky, not a culprit."""
    flip = [GOOD, BAD] * 30
    done = scripted_bisect(
        tmp_path, store, 16, 8, {7: flip, 8: [BAD, GOOD] * 30}, strategy="kary", confirm=True, workers=2
    )
    assert done.record.status is BisectStatus.NOT_REPRODUCIBLE
    assert SearchRecords.from_extra(done.record.extra).confirmation is not None
    assert set(done.positions(StepPurpose.CONFIRM)) == {7, 8}


def test_a_worker_with_wrong_answers_is_quarantined(tmp_path: Path, store: Store):
    """scripted-1 answers bad everywhere: the workers disagree, the reference runs show it, it is set aside."""

    def broken_node(history: SyntheticHistory) -> Script:
        def script(sha: str, run: int, worker: str) -> Answer:
            return BAD if worker == "scripted-1" or history.shas.index(sha) >= 9 else GOOD

        return script

    done = scripted_bisect(tmp_path, store, 16, 9, script=broken_node, workers=2, repeat=2)
    assert (done.record.status, done.record.first_bad) == (BisectStatus.FOUND, done.history.shas[9])
    assert set(SearchRecords.from_extra(done.record.extra).quarantined) == {"scripted-1"}
    assert {s.worker for s in done.steps if s.purpose is StepPurpose.REFERENCE} >= {"scripted-1"}


def test_a_confirmation_pair_is_run_again_when_its_worker_disappears(tmp_path: Path, store: Store):
    """The first confirmation run at the parent loses its worker: the whole pair runs again on another."""
    done = scripted_bisect(tmp_path, store, 16, 8, {7: [GOOD, LOST, GOOD]}, confirm=True, workers=2,
                           verify_endpoints="first")  # fmt: skip
    assert (done.record.status, done.record.first_bad) == (BisectStatus.FOUND, done.history.shas[8])
    confirm = [s for s in done.steps if s.purpose is StepPurpose.CONFIRM]
    lost = next(s for s in confirm if s.error_kind is not None)
    after = [s for s in confirm if s.id > lost.id]
    assert lost.worker not in {s.worker for s in after}
    assert {done.history.shas[7], done.history.shas[8]} <= {s.sha for s in after}
    assert done.record.extra["confirmation"]["status"] == "confirmed"


def test_a_step_that_never_answers_is_given_up_on_and_repeated_ones_pause(tmp_path: Path, store: Store):
    """The watchdog stores a silent step as stalled (a harness failure: never the commit's fault); three in a
    row pause the bisect for `bisect resume`."""
    done = scripted_bisect(tmp_path, store, 40, 23, {20: [SILENT]}, timeout_s=0.01, watchdog_grace_s=0.0)
    assert done.record.status is BisectStatus.PAUSED
    assert [s.error_kind for s in done.steps] == [ErrorKind.STALLED] * 3
    assert done.positions() == [20, 20, 20]


def test_skips_beside_the_boundary_are_ambiguous(tmp_path: Path, store: Store):
    done = scripted_bisect(tmp_path, store, 16, 8, {7: [SKIP]}, workers=3)
    assert done.record.status is BisectStatus.AMBIGUOUS
    assert done.record.last_good == done.history.shas[6]


@pytest.mark.parametrize("workers", [1, 4])
def test_a_test_that_cannot_run_anywhere_ends_at_the_good_endpoint_not_after_every_commit(
    tmp_path: Path, store: Store, workers: int
):
    """Lazily, a skip makes both endpoints due: an untestable good endpoint ends the bisect (failed, saying so)
    after a round or two, where it used to probe every commit first."""
    done = scripted_bisect(tmp_path, store, 40, 23, script=lambda _: table({}, lambda _sha: SKIP), workers=workers)
    assert done.record.status is BisectStatus.FAILED
    assert "the good endpoint" in done.record.message
    assert "cannot be tested" in done.record.message
    assert 0 in done.positions()
    assert len(done.steps) <= 2 * workers + 2
    checks = SearchRecords.from_extra(done.record.extra).endpoints
    assert checks["good"] is EndpointCheck.TESTED


def test_one_skip_in_a_clean_bisect_costs_the_two_endpoint_runs_at_most(tmp_path: Path, store: Store):
    done = scripted_bisect(tmp_path, store, 40, 23, {20: [SKIP]})
    assert (done.record.status, done.record.first_bad) == (BisectStatus.FOUND, done.history.shas[23])
    assert {0, 40} <= set(done.positions())
    git_runs = _git_bisect_run_count(done.history.path, done.history.shas[0], done.history.shas[-1])
    assert len(done.steps) <= git_runs + 3  # the skip, then its neighbour, and the two endpoints


def _git_bisect_run_count(repo: Path, good: str, bad: str) -> int:
    """How many times `git bisect run` runs the test on this range."""
    counter = repo.parent / "git-runs"
    counter.write_text("")
    run = f"echo x >> {counter}; bash test.sh"
    subprocess.run(["git", "bisect", "start", bad, good], cwd=repo, check=True, capture_output=True)
    try:
        subprocess.run(["git", "bisect", "run", "bash", "-c", run], cwd=repo, check=True, capture_output=True)
    finally:
        subprocess.run(["git", "bisect", "reset"], cwd=repo, check=True, capture_output=True)
    return len(counter.read_text().splitlines())


@pytest.mark.parametrize(
    ("strategy", "advice"),
    [
        (None, "the noisy search took over; `--repeat N` runs every probe N times from the start"),
        ("kary", "--strategy kary trusted every run: `--strategy noisy` or `--repeat N` weighs repeated runs"),
    ],
)
def test_a_flake_seen_says_the_test_looks_flaky_and_warns_only_of_goods_after_the_answer(
    tmp_path: Path, store: Store, strategy: str | None, advice: str
):
    """80, a first-round probe before the culprit, fails once (then passes): contradicted by the goods after it. The
    report says so with advice, whether or not anything explains the culprit; the answer warns of goods after the
    first bad commit only, never of the goods before it that contradict the flake."""
    options = {"strategy": strategy} if strategy else {}
    done = scripted_bisect(tmp_path, store, 200, 117, {80: [BAD, GOOD]}, workers=8, **options)
    assert 80 in done.rounds()[0]
    assert (done.record.status, done.record.first_bad) == (BisectStatus.FOUND, done.history.shas[117])
    assert "tested good after" not in done.record.message, done.record.message
    lines = BisectReport.load(store, done.record.id).noise_lines()
    assert f"flaky results were seen (a commit tested both ways): the test looks flaky; {advice}" in lines


def test_a_good_after_the_first_bad_commit_is_named_as_not_monotonic(tmp_path: Path, store: Store):
    done = scripted_bisect(tmp_path, store, 200, 117, {134: [GOOD, BAD]}, workers=8)
    assert done.record.first_bad == done.history.shas[117]
    assert done.record.message.endswith(
        f"; warning: tested good after the first bad commit: {done.history.shas[134][:12]} (not monotonic)"
    )
