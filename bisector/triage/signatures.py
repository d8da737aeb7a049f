"""The catalogue of failure signatures: regexes over a failure's message and logs that name its class.

Order of matching: the operator's signatures (`--signatures FILE`) first, then the bisect's own
infrastructure patterns (`vocab.metric.DEFAULT_INFRA_PATTERNS`, the ones a bisect step retries), then the
CI-level ones below (timeouts, lost runners, driver errors), which say more about a CI run
than about a single bisect step. A file is TOML (`[[signature]]` tables) or YAML (a list, or a `signatures`
list), each entry {name, pattern, class} with class `infrastructure` or `flaky`:

    [[signature]]
    name = "artifact server down"
    pattern = "503 Service Unavailable"
    class = "infrastructure"
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bisector.triage.model import FailureClass
from bisector.vocab.errors import InputError
from bisector.vocab.metric import DEFAULT_INFRA_PATTERNS

CI_INFRA_PATTERNS: tuple[tuple[str, str], ...] = (
    ("lost runner", r"The runner has received a shutdown signal|lost communication with the server"),
    ("CUDA graph capture", r"CUDA graph capture|cudaErrorStreamCapture\w*|stream is capturing"),
    ("NCCL", r"\bNCCL\b.*(?:timeout|timed out)|Watchdog caught collective operation timeout|nccl\w*Error"),
    ("out of memory", r"\bout of memory\b|OutOfMemoryError"),
    ("GPU driver", r"\bXid\b|CUDA driver version is insufficient|GPU is lost"),
    ("timeout", r"Failed: Timeout >|\bTimeoutError\b|\bTimeoutExpired\b|timed out after \d"),  # last: the vaguest
)


@dataclass(frozen=True)
class Signature:
    name: str
    pattern: re.Pattern[str]
    failure_class: FailureClass

    def search(self, text: str) -> str | None:
        match = self.pattern.search(text)
        return match.group(0) if match else None


def builtin_signatures() -> list[Signature]:
    infra = FailureClass.INFRASTRUCTURE
    return [Signature("built-in", re.compile(p), infra) for p in DEFAULT_INFRA_PATTERNS] + [
        Signature(name, re.compile(p), infra) for name, p in CI_INFRA_PATTERNS
    ]


def load_signatures(path: Path) -> list[Signature]:
    """The operator's signatures from a TOML or YAML file (see the module doc)."""
    try:
        raw_text = path.read_text()
    except OSError as exc:
        raise InputError(f"--signatures {path}: {exc.strerror or exc}") from None
    try:
        data: Any = tomllib.loads(raw_text) if path.suffix == ".toml" else yaml.safe_load(raw_text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        raise InputError(f"--signatures {path}: does not parse ({str(exc).splitlines()[0]})") from None
    if isinstance(data, dict):
        data = data.get("signature", data.get("signatures"))
    if not isinstance(data, list) or not data:
        raise InputError(f"--signatures {path}: write a list of {{name, pattern, class}} entries")
    return [_signature(entry, index, path) for index, entry in enumerate(data, start=1)]


def _signature(entry: Any, index: int, path: Path) -> Signature:
    where = f"--signatures {path}: entry {index}"
    if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in ("name", "pattern", "class")):
        raise InputError(f"{where}: write name, pattern and class as strings")
    if entry["class"] not in (FailureClass.INFRASTRUCTURE, FailureClass.FLAKY):
        raise InputError(f"{where}: class must be infrastructure or flaky, not {entry['class']!r}")
    try:
        pattern = re.compile(entry["pattern"])
    except re.error as exc:
        raise InputError(f"{where}: pattern {entry['pattern']!r} is not a valid regex: {exc}") from None
    return Signature(entry["name"], pattern, FailureClass(entry["class"]))
