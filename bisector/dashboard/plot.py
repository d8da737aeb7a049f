"""The bisect page's plot as data for an inline SVG (the metric against commit position), and its table of the
commits tested with the statistic that decided each.

Each sample of each search or confirmation step is a point (repeats give several points at one position, spread a
little sideways so that none hides another); steps without a metric sit on the bottom edge; cancelled steps measured
nothing and are left out. The boundary is drawn between the last good and the first bad commit (a band when the
result is a range), the threshold of `--expect` as a horizontal line; with `--expect auto`, which judges each commit
against the endpoints' samples, each endpoint's samples as a horizontal band (lowest to highest) with its median.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from bisector.core.merges import MergeDescent
from bisector.core.strategies.base import SearchState
from bisector.core.strategies.noisy import NoisyBisect, is_consistent
from bisector.report import BisectReport
from bisector.vocab.domain import BisectStatus, Verdict

WIDTH, HEIGHT = 760, 300
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 16, 36
SPREAD_PX = 10  # the samples of one commit lie across this width, centred on its position


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    position: int
    sha: str
    verdict: str  # a Verdict value, or "running"
    value: float | None  # None: the step printed no metric


@dataclass(frozen=True)
class Tick:
    at: float  # pixels along the axis
    label: str


@dataclass(frozen=True)
class EndpointBand:
    """One endpoint's samples, which `--expect auto` judges every other commit against."""

    name: str  # "good" or "bad": the endpoint (--good, --bad)
    term: str  # its state in the bisect's terms
    y_top: float
    y_bottom: float
    y_median: float
    low: float
    high: float
    median: float
    n: int


@dataclass(frozen=True)
class CommitRow:
    """A commit the search tested: its verdict and what decided it."""

    position: int
    sha: str
    verdict: str  # a Verdict value (its style), "" while undecided
    term: str  # the verdict in the bisect's terms, "undecided" while undecided
    goods: int  # the runs (or decided sample sets) observed each way
    bads: int
    samples: tuple[float, ...]
    median: float | None
    p_value: float | None  # of the test behind a statistical decision (stats.Decision)
    posterior_new: float | None  # P(the commit is in the new state): the noisy search's posterior, once flakes showed
    decided_by: str  # in words: the decision's reason, the posterior, the runs, or the endpoint's role


@dataclass(frozen=True)
class Plot:
    width: int
    height: int
    left: int
    top: int
    right_edge: int
    bottom_edge: int
    points: list[Point]
    boundary_x: float | None  # between last good and first bad (found) or the middle of the range
    band: tuple[float, float] | None  # x from..to of the range an unnamed result leaves
    boundary_positions: tuple[int, int] | None  # (last good, first bad) positions
    threshold_y: float | None
    threshold: float | None
    x_ticks: list[Tick]
    y_ticks: list[Tick]
    bands: list[EndpointBand]
    commits: list[CommitRow]


def build_plot(report: BisectReport) -> Plot:
    count = max(len(report.candidates), 2)
    right_edge, bottom_edge = WIDTH - RIGHT, HEIGHT - BOTTOM
    expect = report.spec.metric_spec().expect
    threshold = expect.threshold if expect is not None else None
    drawn = [s for s in report.evidence if s.verdict is not Verdict.CANCELLED]
    values = [v for s in drawn for v in s.samples]
    if threshold is not None:
        values.append(threshold)
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    if high - low < 1e-12:
        low, high = low - 1.0, high + 1.0
    pad = (high - low) * 0.08
    low, high = low - pad, high + pad

    def x_of(position: float) -> float:
        return LEFT + (right_edge - LEFT) * position / (count - 1)

    def y_of(value: float) -> float:
        return bottom_edge - (bottom_edge - TOP) * (value - low) / (high - low)

    placed = [(report.position(s.sha), s) for s in drawn if report.position(s.sha) >= 0]
    per_position = Counter(p for p, step in placed for _ in step.samples or (None,))
    seen: defaultdict[int, int] = defaultdict(int)
    points = []
    for position, step in placed:
        verdict = step.verdict.value if step.verdict else "running"
        for value in step.samples or (None,):
            shared, index = per_position[position], seen[position]
            seen[position] += 1
            x = x_of(position) + (SPREAD_PX * (index / (shared - 1) - 0.5) if shared > 1 else 0.0)
            y = y_of(value) if value is not None else float(bottom_edge)
            points.append(Point(x, y, position, step.sha, verdict, value))
    boundary_x = band = positions = None
    first_bad, last_good = report.commit(report.record.first_bad), report.commit(report.record.last_good)
    if first_bad is not None and last_good is not None:
        positions = (last_good.position, first_bad.position)
        boundary_x = x_of((last_good.position + first_bad.position) / 2)
        if report.record.status is not BisectStatus.FOUND:
            band = (x_of(last_good.position), x_of(first_bad.position))
    step_x = max(1, (count - 1) // 8)
    x_ticks = [Tick(x_of(p), str(p)) for p in range(0, count, step_x)]
    y_ticks = [Tick(y_of(low + (high - low) * i / 4), f"{low + (high - low) * i / 4:.4g}") for i in range(5)]
    return Plot(
        width=WIDTH,
        height=HEIGHT,
        left=LEFT,
        top=TOP,
        right_edge=right_edge,
        bottom_edge=bottom_edge,
        points=points,
        boundary_x=boundary_x,
        band=band,
        boundary_positions=positions,
        threshold_y=y_of(threshold) if threshold is not None else None,
        threshold=threshold,
        x_ticks=x_ticks,
        y_ticks=y_ticks,
        bands=_endpoint_bands(report, y_of) if report.spec.test.comparative else [],
        commits=commit_rows(report),
    )


def _endpoint_bands(report: BisectReport, y_of: Callable[[float], float]) -> list[EndpointBand]:
    bands = []
    for name, position, term in (("good", 0, report.terms[0]), ("bad", report.ledger.bad_position, report.terms[1])):
        samples = report.ledger.view(position).samples
        if samples:
            low, high, median = min(samples), max(samples), statistics.median(samples)
            bands.append(EndpointBand(name, term, y_of(high), y_of(low), y_of(median), low, high, median, len(samples)))
    return bands


def commit_rows(report: BisectReport) -> list[CommitRow]:
    """The commits the search tested, by position, each with its verdict and the statistic that decided it."""
    ledger = report.ledger
    positions = sorted(p for p in ledger.tested() if p < len(report.candidates))
    posterior = _posterior_new(report, positions)
    rows = []
    for position in positions:
        sha, view = report.candidates[position].sha, ledger.view(position)
        state = report.state_of(sha)
        decision = view.decision or {}
        p_value = decision.get("p_value")
        rows.append(
            CommitRow(
                position=position, sha=sha, verdict=state.value if state else "",
                term=report.word(state) if state else "undecided",
                goods=view.goods, bads=view.bads, samples=view.samples,
                median=statistics.median(view.samples) if view.samples else None,
                p_value=float(p_value) if isinstance(p_value, int | float) else None,
                posterior_new=posterior.get(position), decided_by=_decided_by(report, position, decision, posterior),
            )
        )  # fmt: skip
    return rows


def _posterior_new(report: BisectReport, positions: list[int]) -> dict[int, float]:
    """P(in the new state) per tested position, by the noisy search's posterior over the search's own order (pruned
    commits left out, a merged branch's commits where its descent put them): only where it decided, once the results
    contradicted each other (before that the search trusts every verdict)."""
    ledger, records = report.ledger, report.records
    pruned = records.pruning.removed() if records.pruning else frozenset()
    order = MergeDescent(ledger, records.merge_phases, ledger.spec.search.all_parents, pruned).order()
    index_of = {position: index for index, position in enumerate(order)}
    tested = [p for p in positions if p in index_of]
    views = {p: ledger.view(p) for p in tested}
    observed = {index_of[p]: (v.goods, v.bads) for p, v in views.items() if v.goods + v.bads}
    if not records.flake_seen or len(order) < 2 or is_consistent(len(order), observed):
        return {}
    verdicts = {index_of[p]: v for p in tested if (v := ledger.verdict(p)) is not None}
    posterior = NoisyBisect().posterior(SearchState(len(order), verdicts, frozenset(), observed))
    return {p: posterior.cdf(index_of[p]) for p in tested}


def _decided_by(report: BisectReport, position: int, decision: dict[str, object], posterior: dict[int, float]) -> str:
    old, new = report.terms
    view = report.ledger.view(position)
    if decision:
        return str(decision.get("reason", ""))
    if position in posterior:
        return f"P({new}) = {posterior[position]:.3f} by the posterior over the first {new} commit"
    role = report.ledger.role(position)
    if role is not None and report.spec.test.comparative:
        name, side = ("good", old) if role is Verdict.GOOD else ("bad", new)
        return f"the {name} endpoint: its samples define the {side} side"
    if view.goods + view.bads > 1:
        return f"runs: {view.goods} {old}, {view.bads} {new}"
    return ""
