"""git's bisect-log format: `bisect log ID` writes it (so `git bisect replay` accepts it) and `bisect replay`
reads it. The lines, as `git bisect log` writes them:

    git bisect start '--term-old' 'fast' '--term-new' 'slow' '--' 'src'    (options only when given)
    # slow: [<sha>] <subject>
    git bisect slow <sha>
    # skip: [<sha>] <subject>
    git bisect skip <sha>
    # first slow commit: [<sha>] <subject>

A bisect that applied patches on every commit (`--cherry-pick`, `--patch`) says so in a comment after the start line:
its verdicts hold for the patched commits, which plain git does not make.

Each commit with a verdict appears once, with the verdict the search used (repeats and retries folded), the
endpoints first, then in the order the verdicts were reached.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from bisector.core.spec import DEFAULT_TERMS
from bisector.report.model import BisectReport, patches_line
from bisector.vocab.domain import BisectStatus, Commit, Verdict
from bisector.vocab.errors import InputError

_IGNORED_COMMANDS = ("terms", "reset", "visualize", "view", "log", "run", "next")


def sq_quote(value: str) -> str:
    """git's sq_quote: 'value' with ' and ! escaped, as `git bisect log` writes the start arguments."""
    return "'" + value.replace("'", "'\\''").replace("!", "'\\!'") + "'"


def render_git_log(report: BisectReport) -> str:
    old, new = report.terms
    args: list[str] = []
    if (old, new) != DEFAULT_TERMS:
        args += ["--term-old", old, "--term-new", new]
    if report.spec.test.paths:
        args += ["--", *report.spec.test.paths]
    lines = ["git bisect start" + "".join(" " + sq_quote(a) for a in args)]
    if report.spec.test.patches:
        lines.append(f"# not replayable by plain git: gpu-bisect applied {patches_line(report.spec)} on every commit")
    for commit, verdict in _git_order(report):
        word = report.word(verdict)
        lines += [f"# {word}: [{commit.sha}] {commit.subject}", f"git bisect {word} {commit.sha}"]
    record = report.record
    first_bad = report.commit(record.first_bad)
    if record.status is BisectStatus.FOUND and first_bad is not None:
        lines.append(f"# first {new} commit: [{first_bad.sha}] {first_bad.subject}")
    elif record.status is BisectStatus.AMBIGUOUS:
        lines.append("# only skipped commits left to test")
        lines += [f"# possible first {new} commit: [{c.sha}] {c.subject}" for c in _newest_first(report.suspects())]
    return "\n".join(lines) + "\n"


def _git_order(report: BisectReport) -> list[tuple[Commit, Verdict]]:
    """The decided commits in the order they were decided, except that the new-term (bad) marks go newest first:
    git keeps one bad ref, which each bad mark moves, so with parallel workers a newer commit found bad after
    an older one would move it back past the first bad commit."""
    new_term = report.terms[1]
    decided = [(commit, verdict) for commit, verdict, _ in report.decided_commits()]
    bad_slots = [i for i, (_, verdict) in enumerate(decided) if report.word(verdict) == new_term]
    bads = sorted((decided[i] for i in bad_slots), key=lambda item: -item[0].position)
    for slot, mark in zip(bad_slots, bads, strict=True):
        decided[slot] = mark
    return decided


def _newest_first(commits: list[Commit]) -> list[Commit]:
    return sorted(commits, key=lambda c: -c.position)


@dataclass(frozen=True)
class GitLogMark:
    state: str  # old | new | skip
    rev: str
    line: int


@dataclass
class GitLog:
    term_old: str | None = None
    term_new: str | None = None
    paths: tuple[str, ...] = ()
    marks: list[GitLogMark] = field(default_factory=list)


def parse_git_log(text: str, source: str = "log") -> GitLog:
    """Read a `git bisect log` (comments and blank lines ignored). Bad input: InputError naming the line."""
    log = GitLog()
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            words = shlex.split(line)
        except ValueError as exc:
            raise InputError(f"{source}:{number}: {exc}") from None
        if words[:2] == ["git-bisect"]:
            words = ["git", "bisect", *words[1:]]
        if words[:2] != ["git", "bisect"] or len(words) < 3:
            raise InputError(f"{source}:{number}: not a git bisect log line: {line}")
        command, args = words[2], words[3:]
        if command == "start":
            _read_start(log, args, f"{source}:{number}", number)
        elif command in _IGNORED_COMMANDS:
            continue
        else:
            state = _state(log, command, f"{source}:{number}")
            for rev in args:
                if ".." in rev:
                    raise InputError(f"{source}:{number}: ranges ({rev}) are not supported; list the commits")
                log.marks.append(GitLogMark(state, rev, number))
    return log


def _read_start(log: GitLog, args: list[str], where: str, number: int) -> None:
    revs: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            log.paths = tuple(args[index + 1 :])
            break
        name, eq, value = arg.partition("=")
        if name in ("--term-old", "--term-good", "--term-new", "--term-bad"):
            if not eq:
                index += 1
                if index >= len(args):
                    raise InputError(f"{where}: {name} needs a value")
                value = args[index]
            if name in ("--term-old", "--term-good"):
                log.term_old = value
            else:
                log.term_new = value
        elif arg in ("--no-checkout", "--first-parent"):
            pass
        elif arg.startswith("-"):
            raise InputError(f"{where}: unknown git bisect start option {arg}")
        else:
            revs.append(arg)
        index += 1
    if revs:  # git bisect start BAD [GOOD...]
        log.marks.append(GitLogMark("new", revs[0], number))
        log.marks += [GitLogMark("old", rev, number) for rev in revs[1:]]


def _state(log: GitLog, command: str, where: str) -> str:
    old = log.term_old or DEFAULT_TERMS[0]
    new = log.term_new or DEFAULT_TERMS[1]
    if command == "skip":
        return "skip"
    if command in (old, "old") or (command == "good" and log.term_old is None):
        return "old"
    if command in (new, "new") or (command == "bad" and log.term_new is None):
        return "new"
    raise InputError(f"{where}: unknown verdict {command!r} (this log's terms are {old} and {new})")


def read_git_log(path: str | Path) -> GitLog:
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from None
    return parse_git_log(text, str(path))
