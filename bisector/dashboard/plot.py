"""The bisect page's plot as data for an inline SVG: the metric against commit position.

Each sample of each search or confirmation step is a point (repeats give several points at one position);
steps without a metric sit on the bottom edge; cancelled steps measured nothing and are left out. The boundary
is drawn between the last good and the first bad commit (a band when the result is a range), the threshold of
`--expect` as a horizontal line.
"""

from __future__ import annotations

from dataclasses import dataclass

from bisector.report import BisectReport
from bisector.vocab.domain import BisectStatus, Verdict

WIDTH, HEIGHT = 760, 300
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 16, 36


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

    points = []
    for step in drawn:
        position = report.position(step.sha)
        if position < 0:
            continue
        verdict = step.verdict.value if step.verdict else "running"
        if step.samples:
            points += [Point(x_of(position), y_of(v), position, step.sha, verdict, v) for v in step.samples]
        else:
            points.append(Point(x_of(position), float(bottom_edge), position, step.sha, verdict, None))
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
    )
