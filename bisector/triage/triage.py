"""The triage of two CI runs: read both, sort the bad run's failures, list the suspects between them."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from bisector.triage.classify import DEFAULT_NOISE_BAND, Failure, NoiseBand, classify
from bisector.triage.model import FailureClass, RunResults
from bisector.triage.results import load_run
from bisector.triage.signatures import builtin_signatures, load_signatures
from bisector.triage.suspects import Suspect, rank_suspects
from bisector.vocab.errors import InputError
from bisector.vocab.gitrepo import GitRepo


@dataclass(frozen=True)
class TriageReport:
    repo: Path
    good: str  # full SHAs
    bad: str
    good_sources: list[str]
    bad_sources: list[str]
    noise_band: NoiseBand
    failures: list[Failure]
    suspects: list[Suspect]
    infra_patterns: tuple[str, ...] = ()  # the operator's infrastructure signatures: bisect steps retry them too

    def counts(self) -> dict[FailureClass, int]:
        counted = Counter(f.failure_class for f in self.failures)
        return {cls: counted.get(cls, 0) for cls in FailureClass}

    @property
    def regressions(self) -> list[Failure]:
        return [f for f in self.failures if f.failure_class is FailureClass.REGRESSION]


def triage_runs(
    good_results: Path,
    bad_results: Path,
    *,
    repo: str | Path = ".",
    good_rev: str | None = None,
    bad_rev: str | None = None,
    signatures_file: Path | None = None,
    noise_band: str = DEFAULT_NOISE_BAND,
) -> TriageReport:
    """Read both runs and triage the bad one. Commits given win over those the results record."""
    band = NoiseBand.parse(noise_band)
    own = load_signatures(signatures_file) if signatures_file else []
    signatures = own + builtin_signatures()
    good_run, bad_run = load_run(good_results), load_run(bad_results)
    git_repo = GitRepo(repo)
    good = git_repo.resolve(_revision("good", good_rev, good_run))
    bad = git_repo.resolve(_revision("bad", bad_rev, bad_run))
    if good != bad and not git_repo.is_ancestor(good, bad):
        raise InputError(f"the good run's commit {good[:12]} is not an ancestor of the bad run's {bad[:12]}")
    failures = classify(good_run, bad_run, signatures, band)
    regressions = [f for f in failures if f.failure_class is FailureClass.REGRESSION]
    return TriageReport(
        repo=git_repo.root,
        good=good,
        bad=bad,
        good_sources=good_run.sources,
        bad_sources=bad_run.sources,
        noise_band=band,
        failures=failures,
        suspects=rank_suspects(git_repo, good, bad, regressions),
        infra_patterns=tuple(s.pattern.pattern for s in own if s.failure_class is FailureClass.INFRASTRUCTURE),
    )


def _revision(side: str, given: str | None, run: RunResults) -> str:
    if given:
        return given
    if run.commit:
        return run.commit
    raise InputError(
        f"no {side} commit: give --{side} REV, or record it in the {side} results "
        f'(JUnit <property name="commit" value="..."/>, or "commit" in the metrics JSON)'
    )
