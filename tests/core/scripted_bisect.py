"""Bisects over a real git history and a real store whose steps a ScriptedExecutor answers from a table."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bisect_helpers import synthetic_spec
from synthetic import SyntheticHistory, culprit_history

from bisector.db.store import Store
from bisector.runner.coordinator import Coordinator
from bisector.vocab.domain import BisectRecord, StepPurpose, StepRecord
from bisector.workers.scripted import BAD, GOOD, Answer, Script, ScriptedExecutor, table


@dataclass(frozen=True)
class Scripted:
    history: SyntheticHistory
    record: BisectRecord
    executor: ScriptedExecutor
    steps: list[StepRecord]

    def positions(self, purpose: StepPurpose = StepPurpose.SEARCH) -> list[int]:
        """The first-parent positions of the steps of this purpose, in the order they started."""
        index = {sha: i for i, sha in enumerate(self.history.shas)}
        return [index[s.sha] for s in self.steps if s.purpose is purpose]

    def rounds(self) -> list[list[int]]:
        """The positions of the search steps, grouped by the pass that sent them (one start time each)."""
        index = {sha: i for i, sha in enumerate(self.history.shas)}
        grouped: dict[object, list[int]] = {}
        for step in self.steps:
            if step.purpose is StepPurpose.SEARCH:
                grouped.setdefault(step.started, []).append(index[step.sha])
        return list(grouped.values())


def scripted_bisect(
    tmp_path: Path,
    store: Store,
    commits: int,
    culprit: int,
    answers: Mapping[int, Sequence[Answer]] | None = None,
    *,
    script: Callable[[SyntheticHistory], Script] | None = None,
    workers: int = 1,
    watchdog_grace_s: float | None = None,
    executor_type: type[ScriptedExecutor] = ScriptedExecutor,
    **spec: object,
) -> Scripted:
    """commits + 1 positions, shas[0] good, shas[culprit] the first bad; answers: runs at a position in order
    (the last repeats); other positions answer by which side of the culprit they lie. script: made from the
    history, instead of the table."""
    history = culprit_history(tmp_path / "repo", commits, culprit)
    index = {sha: i for i, sha in enumerate(history.shas)}
    listed = {history.shas[p]: list(a) for p, a in (answers or {}).items()}
    scripted = script(history) if script else table(listed, lambda sha: BAD if index[sha] >= culprit else GOOD)
    executor = executor_type(scripted, workers=workers)
    values: dict[str, object] = {"workers": workers, "explain": False, **spec}
    bisect_spec = synthetic_spec(history.path, history.shas[0], history.shas[-1], **values)
    coordinator = Coordinator(store, lambda _: executor, poll_interval_s=0.001, watchdog_grace_s=watchdog_grace_s)
    record = coordinator.start(bisect_spec, executor)
    return Scripted(history, record, executor, store.steps(record.id))
