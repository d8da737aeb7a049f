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
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from xml.parsers import expat

from bisector.triage.model import CaseResult, Outcome, RunResults
from bisector.vocab.errors import InputError

COMMIT_PROPERTIES = frozenset({"commit", "git_commit", "git-commit", "git_sha", "sha", "revision"})
RETRY_TAGS = frozenset({"rerun", "rerunFailure", "rerunError", "flakyFailure", "flakyError"})
MAX_TEXT_CHARS = 16_000  # per case: the head and the tail of its messages and logs are kept
HALF_TEXT = MAX_TEXT_CHARS // 2
TEXT_PIECE_CHARS = 1 << 16


def read_junit(path: Path, into: RunResults) -> None:
    """Add the test cases and the recorded commit of one JUnit XML file to `into`. The file is read as a stream:
    memory holds one test case at a time, the text of each element bounded as it arrives (an attribute's value
    is held whole, as expat reads it)."""
    stream = _CaseStream(path, lambda element: _take(element, path, into))
    parser = expat.ParserCreate()
    parser.buffer_text = True  # text comes in pieces of up to buffer_size characters, not one per line
    parser.buffer_size = TEXT_PIECE_CHARS
    parser.StartElementHandler = stream.start
    parser.EndElementHandler = stream.end
    parser.CharacterDataHandler = stream.data
    try:
        with path.open("rb") as handle:
            parser.ParseFile(handle)
    except (expat.ExpatError, OSError) as exc:
        raise InputError(f"{path}: not readable JUnit XML ({exc})") from None
    into.sources.append(str(path))


class _CaseStream:
    """pyexpat's handlers: each `<testcase>` and `<property>` is built, handed to `take` when it ends and dropped
    with every other element outside a test case once it ends. The text of an element keeps its head and tail."""

    def __init__(self, path: Path, take: Callable[[ET.Element], None]) -> None:
        self._path = path
        self._take = take
        self._builder = ET.TreeBuilder()
        self._open: list[ET.Element] = []
        self._text = _BoundedText()

    def start(self, tag: str, attrs: dict[str, str]) -> None:
        if not self._open and tag not in ("testsuite", "testsuites"):
            raise InputError(f"{self._path}: not JUnit XML (the root element is <{tag}>, not <testsuite(s)>)")
        self._flush()
        self._open.append(self._builder.start(tag, attrs))

    def data(self, text: str) -> None:
        self._text.add(text)

    def end(self, tag: str) -> None:
        self._flush()
        element = self._builder.end(tag)
        self._open.pop()
        if tag in ("testcase", "property"):
            self._take(element)
        if self._open and not any(ancestor.tag == "testcase" for ancestor in self._open):
            self._open[-1].remove(element)

    def _flush(self) -> None:
        if self._text.head:
            self._builder.data(self._text.text())
            self._text = _BoundedText()


class _BoundedText:
    """Text arriving in pieces, of which the first and the last HALF_TEXT characters are kept."""

    def __init__(self) -> None:
        self.head = ""
        self.tail: list[str] = []
        self.tail_chars = 0
        self.elided = 0

    def add(self, piece: str) -> None:
        if len(self.head) < HALF_TEXT:
            room = HALF_TEXT - len(self.head)
            self.head, piece = self.head + piece[:room], piece[room:]
        self.tail.append(piece)
        self.tail_chars += len(piece)
        if self.tail_chars > 4 * HALF_TEXT:
            self._trim()

    def text(self) -> str:
        self._trim()
        return self.head + (f"\n[... {self.elided} characters elided ...]\n" if self.elided else "") + self.tail[0]

    def _trim(self) -> None:
        tail = "".join(self.tail)
        self.elided += max(0, len(tail) - HALF_TEXT)
        self.tail = [tail[-HALF_TEXT:]]
        self.tail_chars = len(self.tail[0])


def _take(element: ET.Element, path: Path, into: RunResults) -> None:
    if element.tag == "property":
        if element.get("name", "").lower() in COMMIT_PROPERTIES and element.get("value"):
            _set_commit(into, element.get("value", "").strip(), path)
        return
    attempt = _attempt(element)
    earlier = into.cases.get(attempt.name)  # an earlier appearance of the case, in this file or an earlier one
    if earlier is not None:
        attempt = replace(
            attempt,
            failed_attempts=attempt.failed_attempts + earlier.failed_attempts + earlier.outcome.is_failure(),
            message=attempt.message or earlier.message,
            text=_bounded("\n".join(text for text in (earlier.text, attempt.text) if text)),
        )
    into.cases[attempt.name] = attempt


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


def _attempt(case: ET.Element) -> CaseResult:
    """One appearance of a test case; its rerun elements are its failed attempts before the final one."""
    outcome, detail = _outcome(case)
    retries = [child for child in case if child.tag in RETRY_TAGS]
    message = ""
    for element in [*retries, detail]:
        if element is not None:
            message = _first_line(element) or message
    texts = [text for child in case.iter() for text in (child.get("message", ""), child.text or "")]
    return CaseResult(
        name=_case_name(case),
        classname=case.get("classname", ""),
        case=case.get("name", ""),
        file=case.get("file", ""),
        outcome=outcome,
        message=message,
        text=_bounded("\n".join(t for t in texts if t.strip())),
        failed_attempts=len(retries),
    )


def _bounded(text: str) -> str:
    bounded = _BoundedText()
    bounded.add(text)
    return bounded.text()
