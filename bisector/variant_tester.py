"""Tests culprit-minimisation variants with a shell command in one scratch worktree (the analysis's
VariantTester, run where the coordinator runs)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from bisector.analysis.minimize import Variant
from bisector.vocab.domain import Verdict
from bisector.vocab.gitrepo import GitRepo
from bisector.vocab.metric import MetricSpec, judge_run
from bisector.workers.process import run_shell


class ShellVariantTester:
    """Tests variants one after another in one scratch worktree with a shell command (bash -c, cwd the
    worktree), judged as a bisect step is: by the metric when one is given, else by the exit code (0 good,
    125 skip, 1-127 bad; a timeout or a signal is an error). Output goes to log_path."""

    def __init__(
        self,
        repo_path: str | os.PathLike[str],
        worktree: Path,
        command: str,
        *,
        metric: MetricSpec | None = None,
        timeout_s: float = 600.0,
        env: Mapping[str, str] | None = None,
        log_path: Path | None = None,
    ) -> None:
        self.repo = GitRepo(os.fspath(repo_path))
        self.worktree, self.command, self.timeout_s = worktree, command, timeout_s
        self.metric = metric or MetricSpec()
        self.env = dict(os.environ if env is None else env)
        self.log_path = log_path or worktree.with_name(worktree.name + ".log")

    def __call__(self, variants: Sequence[Variant]) -> list[Verdict]:
        return [self.test_one(variant) for variant in variants]

    def test_one(self, variant: Variant) -> Verdict:
        self.repo.ensure_worktree(self.worktree, variant.sha)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            log.write(f"# variant {variant.sha} units {' '.join(variant.units) or '(none)'}\n".encode())
            log.flush()
            env = {**self.env, "BISECT_SHA": variant.sha}
            scan = self.metric.scan()
            outcome = run_shell(self.command, self.worktree, env, log, self.timeout_s, metric_scan=scan)
        # Judged on the run's own output (as it streamed, and its bounded window), never on the log read back.
        output = outcome.output.text()
        return judge_run(
            self.metric, outcome.exit_code, output, self.worktree, timed_out=outcome.timed_out, scan=scan
        ).verdict
