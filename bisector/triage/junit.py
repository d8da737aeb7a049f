"""JUnit XML (pytest --junitxml, Maven Surefire, most CI tools) into `CaseResult`s.

Accepted: a `<testsuite>` root or a `<testsuites>` root holding several (nested ones too); per test case
`<failure>`, `<error>`, `<skipped>`, `<system-out>`, `<system-err>`. Retries: rerun elements inside a case
(pytest-rerunfailures' `<rerun>`/`<rerunFailure>`/`<rerunError>`, Surefire's `<flakyFailure>`/`<flakyError>`)
and a case that appears several times (each appearance one attempt, in file order; across the files of a
directory, in their name order) both count as failed attempts before the final one. The run's commit is
read from a `<property name="commit" value="...">` of a suite (also `git_commit`, `sha`, `revision`).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

from bisector.triage.model import CaseResult, Outcome, RunResults
from bisector.vocab.errors import InputError

COMMIT_PROPERTIES = frozenset({"commit", "git_commit", "git-commit", "git_sha", "sha", "revision"})
RETRY_TAGS = frozenset({"rerun", "rerunFailure", "rerunError", "flakyFailure", "flakyError"})
MAX_TEXT_CHARS = 16_000  # per case: the head and the tail of its messages and logs are kept


def read_junit(path: Path, into: RunResults) -> None:
    """Add the test cases and the recorded commit of one JUnit XML file to `into`."""
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as exc:
        raise InputError(f"{path}: not readable JUnit XML ({exc})") from None
    if root.tag not in ("testsuite", "testsuites"):
        raise InputError(f"{path}: not JUnit XML (the root element is <{root.tag}>, not <testsuite(s)>)")
    into.sources.append(str(path))
    for prop in root.iter("property"):
        if prop.get("name", "").lower() in COMMIT_PROPERTIES and prop.get("value"):
            _set_commit(into, prop.get("value", "").strip(), path)
    attempts: dict[str, list[ET.Element]] = {}
    for case in root.iter("testcase"):
        attempts.setdefault(_case_name(case), []).append(case)
    for name, elements in attempts.items():
        merged = _merged(name, elements)
        earlier = into.cases.get(name)  # the same case in an earlier file of the run: earlier attempts
        if earlier is not None:
            merged = replace(
                merged,
                failed_attempts=merged.failed_attempts + earlier.failed_attempts + earlier.outcome.is_failure(),
                message=merged.message or earlier.message,
                text=_bounded(f"{earlier.text}\n{merged.text}"),
            )
        into.cases[name] = merged


def _set_commit(into: RunResults, commit: str, path: Path) -> None:
    if into.commit and into.commit != commit:
        raise InputError(f"{path} records commit {commit} but other results of the same run record {into.commit}")
    into.commit = commit


def _case_name(case: ET.Element) -> str:
    classname, name = case.get("classname", ""), case.get("name", "")
    return f"{classname}::{name}" if classname else name


def _outcome(case: ET.Element) -> tuple[Outcome, ET.Element | None]:
    for tag, outcome in (("error", Outcome.ERROR), ("failure", Outcome.FAILED), ("skipped", Outcome.SKIPPED)):
        found = case.find(tag)
        if found is not None:
            return outcome, found
    return Outcome.PASSED, None


def _first_line(element: ET.Element | None) -> str:
    if element is None:
        return ""
    text = element.get("message") or (element.text or "")
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _merged(name: str, elements: list[ET.Element]) -> CaseResult:
    failed_attempts = 0
    message = ""
    texts: list[str] = []
    for index, case in enumerate(elements):
        outcome, detail = _outcome(case)
        retries = [child for child in case if child.tag in RETRY_TAGS]
        failed_attempts += len(retries) + (1 if outcome.is_failure() and index < len(elements) - 1 else 0)
        for element in [*retries, detail]:
            if element is not None and element.tag != "skipped":
                message = _first_line(element) or message
        for child in case.iter():
            texts += [child.get("message", ""), child.text or ""]
    last = elements[-1]
    final, detail = _outcome(last)
    if detail is not None:
        message = _first_line(detail) or message
    return CaseResult(
        name=name,
        classname=last.get("classname", ""),
        case=last.get("name", ""),
        file=last.get("file", ""),
        outcome=final,
        message=message,
        text=_bounded("\n".join(t for t in texts if t.strip())),
        failed_attempts=failed_attempts,
    )


def _bounded(text: str) -> str:
    if len(text) <= MAX_TEXT_CHARS:
        return text
    half = MAX_TEXT_CHARS // 2
    return f"{text[:half]}\n[... {len(text) - MAX_TEXT_CHARS} characters elided ...]\n{text[-half:]}"
