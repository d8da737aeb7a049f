"""The metrics JSON of a CI run into `MetricResult`s.

Format (one file per run, or several merged)::

    {
      "commit": "3f2a9c1",                 # optional: the commit the run tested
      "noise_band": "1%",                  # optional: default band of this file's metrics
      "metrics": {
        "test_decode_latency_ms": {"value": 51.4, "threshold": 51.0, "direction": "lower"},
        "accept_length": {"value": 3.46, "expect": ">= 4.0",      # `expect` instead of threshold+direction
                          "noise_band": "0.05",                   # optional, this metric only
                          "run": "python bench.py --accept",      # optional: what `--submit` bisects with
                          "pattern": "accept length: ([0-9.]+)"}  # optional: captures the value from its output
      }
    }

`direction` lower: the value passes when <= threshold (latency); higher: when >= threshold (throughput).
A noise band is absolute ("0.5") or relative to the threshold ("1%").
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from bisector.triage.model import MetricResult, RunResults
from bisector.vocab.errors import InputError
from bisector.vocab.metric import Direction, Expectation


def read_metrics(path: Path, into: RunResults) -> None:
    """Add the metrics and the recorded commit of one metrics JSON file to `into`."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("metrics"), dict):
        raise InputError(f'{path}: a metrics file is an object with a "metrics" object (see `bisect triage --help`)')
    into.sources.append(str(path))
    commit = data.get("commit")
    if commit is not None:
        if not isinstance(commit, str) or not commit.strip():
            raise InputError(f'{path}: "commit" must be a non-empty string')
        if into.commit and into.commit != commit.strip():
            raise InputError(f"{path} records commit {commit} but other results of the same run record {into.commit}")
        into.commit = commit.strip()
    default_band = _optional_str(data, "noise_band", path)
    for name, entry in data["metrics"].items():
        into.metrics[name] = _metric(str(name), entry, default_band, path)


def _metric(name: str, entry: Any, default_band: str | None, path: Path) -> MetricResult:
    where = f"{path}: metric {name!r}"
    if not isinstance(entry, dict):
        raise InputError(f'{where}: write {{"value": V, "threshold": T, "direction": "lower"|"higher"}}')
    value = _number(entry.get("value"), f"{where}: value")
    if "expect" in entry:
        expectation = Expectation.parse(str(entry["expect"]))
        threshold, direction = expectation.threshold, expectation.direction
    else:
        threshold = _number(entry.get("threshold"), f"{where}: threshold")
        try:
            direction = Direction(str(entry.get("direction")))
        except ValueError:
            raise InputError(f'{where}: "direction" must be "lower" or "higher" (or give "expect")') from None
    pattern = _optional_str(entry, "pattern", path)
    if pattern is not None:
        try:
            groups = re.compile(pattern).groups
        except re.error as exc:
            raise InputError(f"{where}: pattern {pattern!r} is not a valid regex: {exc}") from None
        if groups != 1:
            raise InputError(f"{where}: pattern {pattern!r} must have exactly one group around the number")
    return MetricResult(
        name=name,
        value=value,
        threshold=threshold,
        direction=direction,
        noise_band=_optional_str(entry, "noise_band", path) or default_band,
        run=_optional_str(entry, "run", path),
        pattern=pattern,
    )


def _number(raw: Any, what: str) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw):
        raise InputError(f"{what} must be a finite number, not {raw!r}")
    return float(raw)


def _optional_str(data: dict[str, Any], key: str, path: Path) -> str | None:
    raw = data.get(key)
    if raw is None:
        return None
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return str(raw)
    if not isinstance(raw, str):
        raise InputError(f"{path}: {key!r} must be a string, not {raw!r}")
    return raw
