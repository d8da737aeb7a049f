"""Ad hoc runs (`bisect run-at`): any command at any commit, on the commit's worker image, stored.

An ad hoc run is stored as a bisect row of its own (good = bad = the commit, extra.kind = "adhoc", status failed
with the message "ad hoc run ...": it names no culprit and is never resumed; extra.outcome: its runs' verdict,
or "mixed"); its runs are steps of purpose rerun, each with the image it ran on. So `bisect report ID` and the
step logs work for it as for any bisect; `bisect list` shows it as "adhoc <outcome>" (e.g. "adhoc bad"), while a
status filter and `bisect stats` leave it out (good = bad: it is no bisect).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from bisector.core.spec import BisectSpec
from bisector.db.store import Store
from bisector.runner.pipeline import step_request
from bisector.vocab.domain import BisectStatus, StepPurpose, StepResult, Verdict
from bisector.vocab.paths import log_dir
from bisector.workers.executor import Executor

ADHOC_KIND = "adhoc"
POLL_S = 0.5


@dataclass(frozen=True)
class AdHocRun:
    bisect_id: int
    sha: str
    results: list[StepResult]

    @property
    def verdict(self) -> str:
        """The runs' verdict when they agree, else "mixed"."""
        verdicts = {r.verdict.value for r in self.results}
        return verdicts.pop() if len(verdicts) == 1 else "mixed"

    @property
    def metric(self) -> float | None:
        samples = [s for r in self.results for s in r.samples]
        return statistics.median(samples) if samples else None

    def to_json(self) -> dict[str, object]:
        image = next((r.image for r in self.results if r.image is not None), None)
        first = self.results[0] if self.results else None
        return {
            "id": self.bisect_id,
            "sha": self.sha,
            "verdict": self.verdict,
            "metric": self.metric,
            "samples": [s for r in self.results for s in r.samples],
            "image": None if image is None else image.summary(),
            "build_s": first.build_s if first else 0.0,
            "runs": [
                {
                    "verdict": r.verdict.value, "samples": list(r.samples), "exit_code": r.exit_code,
                    "run_s": round(r.run_s, 3), "log": r.log_path, "detail": r.detail,
                    "image": None if r.image is None else r.image.summary(),
                }
                for r in self.results
            ],
        }  # fmt: skip


def run_at(store: Store, spec: BisectSpec, sha: str, make_executor: Callable[[BisectSpec], Executor]) -> AdHocRun:
    """Run spec's build (on the image) and test spec.search.repeat times at sha; store the row, the steps and
    the images."""
    now = datetime.now(UTC)
    bisect_id = store.create_bisect(spec.repo, sha, sha, spec.to_json(), now)
    store.update_extra(bisect_id, kind=ADHOC_KIND)
    logs = log_dir(store.identity, bisect_id)
    metric = spec.metric_spec()
    results: list[StepResult] = []
    try:
        with make_executor(spec) as executor:
            pending = repeat = spec.search.repeat
            running = 0
            while pending or running:
                while pending and executor.free_slots():
                    step_id = store.start_step(bisect_id, sha, repeat - pending + 1, "", "", (), datetime.now(UTC),
                                               purpose=StepPurpose.RERUN)  # fmt: skip
                    request = step_request(
                        spec,
                        bisect_id=bisect_id, step_id=step_id, sha=sha, attempt=repeat - pending + 1,
                        repo=spec.repo, metric=metric, log_path=str(logs / f"step-{step_id}-{sha[:12]}.log"),
                    )  # fmt: skip
                    executor.submit(request)
                    pending -= 1
                    running += 1
                for result in executor.poll(POLL_S):
                    store.finish_step(result.step_id, result, datetime.now(UTC))
                    results.append(result)
                    running -= 1
    finally:
        verdicts = ", ".join(r.verdict.value for r in results) or "no result"
        if results:  # the list shows it as "adhoc <outcome>", not as a failed bisect
            store.update_extra(bisect_id, outcome=AdHocRun(bisect_id, sha, results).verdict)
        store.set_status(
            bisect_id, BisectStatus.FAILED, finished=datetime.now(UTC),
            message=f"ad hoc run at {sha[:12]} (bisect run-at): {verdicts}",
        )  # fmt: skip
    return AdHocRun(bisect_id, sha, sorted(results, key=lambda r: r.step_id))


def adhoc_spec(spec: BisectSpec) -> BisectSpec:
    """An ad hoc run uses images unless the configuration chose otherwise, and never searches or explains."""
    return replace(
        spec,
        search=replace(spec.search, confirm=False),
        executor=replace(spec.executor, workers=min(spec.executor.workers, spec.search.repeat)),
        analysis=replace(spec.analysis, explain=False, minimize=False),
    )


def decided(verdict: str) -> bool:
    return verdict in (Verdict.GOOD.value, Verdict.BAD.value, Verdict.MEASURED.value)
