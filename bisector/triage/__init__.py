"""CI triage: read two CI runs (JUnit XML, metrics JSON), sort the bad run's failures into infrastructure,
flaky or regression, rank the suspect commits between them, and plan one bisect per regression.

readers (`junit`, `metrics`, `results`) -> `classify` (with `signatures`) -> `suspects` -> `render`;
`triage.triage_runs` is the one call that does it all; `submit` turns regressions into bisects.
"""

from bisector.triage.classify import Failure, NoiseBand
from bisector.triage.model import FailureClass
from bisector.triage.render import render_triage_json, render_triage_markdown, triage_json
from bisector.triage.triage import TriageReport, triage_runs

__all__ = [
    "Failure",
    "FailureClass",
    "NoiseBand",
    "TriageReport",
    "render_triage_json",
    "render_triage_markdown",
    "triage_json",
    "triage_runs",
]
