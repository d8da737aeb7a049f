"""Endpoint verification: when an endpoint's role (good end, bad end) is established, contradicted, or assumed.

Plain runs (no repeats, no noise expected or seen): one run at an endpoint is its verdict, as for any commit;
one that contradicts the endpoint's role is a mismatch. With noise (repeats, the noisy strategy, a flake seen)
a contradicting run (or a metric's sample on the other side) asks for more runs there: the endpoint contradicts
its role only once its runs say so at the bisect's confidence (a one-sided binomial test against a fair coin at
ENDPOINT_ALPHA), and keeps its role once most of its runs agree with it. After MAX_ENDPOINT_RUNS the majority
decides (a tie keeps the role).

When: `lazy` (the default, at any number of workers) runs an endpoint when the conclusion rests on it (every
probe bad: the good end; every probe good: the bad end), so a clean bisect runs no more steps than `git bisect
run` and no round gives a probe's slot to an endpoint; a slot no probe can use goes to an endpoint the candidates
still reach (no probe good yet, or none bad), which the conclusion may come to rest on. `--verify-endpoints
first` runs both before relying on them, and so does any bisect that expects noise (the rules above need them).
"""

from __future__ import annotations

import math

from bisector.core.confirm import DEFAULT_ALPHA
from bisector.core.judge import CommitView
from bisector.vocab.domain import Verdict

ENDPOINT_ALPHA = DEFAULT_ALPHA
MAX_ENDPOINT_RUNS = 16


def binomial_tail(k: int, n: int) -> float:
    """P(X >= k) for X ~ Binomial(n, 1/2): how likely k or more of n runs contradict by chance alone."""
    return float(sum(math.comb(n, i) for i in range(k, n + 1))) / float(2**n)


def endpoint_verdict(view: CommitView, role: Verdict, *, noisy: bool) -> tuple[Verdict | None, int]:
    """(verdict, more runs wanted) of an endpoint whose role is GOOD or BAD, from its observations (runs, a metric's
    samples on each side, a person's verdict weighing as many runs); runs that never contradict the role stand."""
    agree, contra = (view.goods, view.bads) if role is Verdict.GOOD else (view.bads, view.goods)
    if not noisy or view.verdict is Verdict.SKIP or not contra or view.more_runs:
        return view.verdict, view.more_runs
    opposite = Verdict.BAD if role is Verdict.GOOD else Verdict.GOOD
    runs = agree + contra
    if binomial_tail(contra, runs) < ENDPOINT_ALPHA:
        return opposite, 0
    if agree > contra:
        return role, 0
    if runs >= MAX_ENDPOINT_RUNS:
        return (role if agree == contra else opposite), 0
    return None, 1


def depends_on(last_good: int, first_bad: int, last: int) -> tuple[bool, bool]:
    """(good end, bad end): which endpoints a conclusion (last_good, first_bad), indexes into the search's
    order, rests on. Every probe bad puts the boundary at the good end; every probe good, at the bad end."""
    return last_good == 0, first_bad == last
