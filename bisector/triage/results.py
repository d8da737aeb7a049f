"""One CI run's results from a path: a JUnit XML file, a metrics JSON file, or a directory of both."""

from __future__ import annotations

from pathlib import Path

from bisector.triage.junit import read_junit
from bisector.triage.metrics import read_metrics
from bisector.triage.model import RunResults
from bisector.vocab.errors import InputError


def load_run(path: Path) -> RunResults:
    """A file is read by its suffix (.xml JUnit, .json metrics; else by its first character); a directory
    contributes all its *.xml and *.json files (not its subdirectories)."""
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in (".xml", ".json"))
        if not files:
            raise InputError(f"{path}: no *.xml or *.json results in this directory")
    elif path.is_file():
        files = [path]
    else:
        raise InputError(f"{path}: no such file or directory")
    run = RunResults()
    for file in files:
        if _is_json(file):
            read_metrics(file, run)
        else:
            read_junit(file, run)
    return run


def _is_json(path: Path) -> bool:
    if path.suffix in (".xml", ".json"):
        return path.suffix == ".json"
    try:
        with path.open("rb") as handle:
            head = handle.read(256).lstrip()
    except OSError as exc:
        raise InputError(f"{path}: {exc.strerror or exc}") from None
    return head.startswith((b"{", b"["))
