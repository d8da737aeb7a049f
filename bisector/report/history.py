"""Looking back over many bisects: validated filters, lists, statistics and log tails.

The CLI (`bisect list|show|stats`) and the dashboard's JSON API both call these, so a filter means the
same everywhere and bad values fail the same way (InputError, one line).
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from bisector.db.queries import BisectFilter, BisectSummary, list_bisects, stats_rows
from bisector.db.store import Store
from bisector.runner.log_retention import pruned_note
from bisector.vocab.domain import BisectStatus
from bisector.vocab.errors import BisectError, InputError
from bisector.vocab.gitrepo import GitRepo

MAX_LIMIT = 1000
TOP_N = 5  # entries of each "most frequent" list
LOG_TAIL_LINES = 20
LOG_TAIL_MAX_BYTES = 64 * 1024
_SHA_PREFIX = re.compile(r"[0-9a-f]{7,64}")
_PR = re.compile(r"(?:#|pr)?(\d{1,6})", re.IGNORECASE)
_RELATIVE = re.compile(r"(\d{1,5})([hdw])")
_UNCLEAR = (BisectStatus.AMBIGUOUS, BisectStatus.NOT_REPRODUCIBLE)


def parse_filter(
    repo: str | None = None,
    status: str | None = None,
    metric: str | None = None,
    culprit: str | None = None,
    since: str | None = None,
    now: datetime | None = None,
    owner: str | None = None,
) -> BisectFilter:
    """A BisectFilter from user text (empty strings mean no filter); InputError names a bad value."""
    culprit_sha, culprit_pr = parse_culprit(culprit) if culprit else (None, None)
    return BisectFilter(
        repo=stored_repo(repo) if repo else None,
        status=parse_status(status) if status else None,
        metric=metric or None,
        culprit_sha=culprit_sha,
        culprit_pr=culprit_pr,
        since=parse_since(since, now) if since else None,
        owner=owner or None,
    )


def stored_repo(text: str) -> str:
    """The repository as `bisect start` stores it: a path of this host inside a git repository names the
    repository's root (`--repo .`, `--repo ../stack` as given to start); anything else (a path on another host of a
    team's store) is matched as written."""
    path = Path(text).expanduser()
    if path.is_dir():
        with contextlib.suppress(BisectError):
            return str(GitRepo(str(path)).root)
    return text


def parse_status(text: str) -> BisectStatus:
    try:
        return BisectStatus(text.strip().lower())
    except ValueError:
        known = ", ".join(s.value for s in BisectStatus)
        raise InputError(f"status {text!r}: expected one of {known}") from None


def parse_culprit(text: str) -> tuple[str | None, int | None]:
    """`#123`, `pr123` or a number of up to 6 digits is a PR; 7 to 64 hex digits are a SHA prefix."""
    text = text.strip()
    pr = _PR.fullmatch(text)
    if pr is not None:
        return None, int(pr.group(1))
    if _SHA_PREFIX.fullmatch(text.lower()):
        return text.lower(), None
    raise InputError(f"culprit {text!r}: expected a commit SHA (7 to 64 hex digits) or a PR (#123)")


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """An ISO date or datetime (UTC unless it has an offset), or an age: 12h, 7d, 4w."""
    text = text.strip()
    relative = _RELATIVE.fullmatch(text)
    if relative is not None:
        amount, unit = int(relative.group(1)), relative.group(2)
        delta = {"h": timedelta(hours=amount), "d": timedelta(days=amount), "w": timedelta(weeks=amount)}[unit]
        return (now or datetime.now(UTC)) - delta
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise InputError(f"since {text!r}: expected a date (2026-11-01), a datetime, or an age (12h, 7d, 4w)") from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def check_limit(limit: int) -> int:
    if not 1 <= limit <= MAX_LIMIT:
        raise InputError(f"limit {limit}: expected 1 to {MAX_LIMIT}")
    return limit


def find_bisects(store: Store, where: BisectFilter, limit: int) -> list[BisectSummary]:
    """The newest `limit` bisects that match, newest first."""
    with store.reading() as conn:
        return list_bisects(conn, where, check_limit(limit))


def culprit_label(summary: BisectSummary) -> str:
    """What the "first bad" column shows: a SHA only for a found culprit; a range when the bisect narrowed one
    down without naming a commit; `-` otherwise."""
    if summary.status is BisectStatus.FOUND and summary.first_bad:
        return summary.first_bad[:12]
    if summary.first_bad and summary.last_good:
        return f"range {summary.last_good[:10]}..{summary.first_bad[:10]}"
    return "-"


def summary_json(summary: BisectSummary) -> dict[str, object]:
    duration = (summary.finished - summary.created).total_seconds() if summary.finished else None
    return {
        "id": summary.id,
        "repo": summary.repo,
        "metric": summary.metric,
        "status": summary.status_label,  # an ad hoc run's: "adhoc <outcome>"
        "adhoc_outcome": summary.adhoc_outcome,
        "created": summary.created.isoformat(),
        "finished": summary.finished.isoformat() if summary.finished else None,
        "duration_s": duration,
        "good": summary.good,
        "bad": summary.bad,
        "first_bad": summary.first_bad if summary.status is BisectStatus.FOUND else None,
        "range": [summary.last_good, summary.first_bad] if summary.status is not BisectStatus.FOUND else None,
        "culprit": culprit_label(summary),
        "culprit_subject": summary.culprit_subject if summary.status is BisectStatus.FOUND else None,
        "culprit_author": summary.culprit_author if summary.status is BisectStatus.FOUND else None,
        "culprit_pr": summary.culprit_pr if summary.status is BisectStatus.FOUND else None,
        "steps": summary.steps,
        "steps_running": summary.steps_running,
        "message": summary.message,
        "owner": summary.owner,
    }


@dataclass(frozen=True)
class GroupStats:
    """The statistics of one (repository, metric) pair."""

    repo: str
    metric: str
    bisects: int
    found: int
    running: int
    median_time_to_culprit_s: float | None  # over found bisects: finished - created
    gpu_hours: float  # sum over finished steps of vocab.cost.gpu_seconds / 3600 (a CPU-only step adds 0)
    unclear_share: float | None  # ambiguous or not reproducible, of the finished bisects
    top_files: list[tuple[str, int]]
    top_tables: list[tuple[str, int]]
    top_authors: list[tuple[str, int]]

    def to_json(self) -> dict[str, object]:
        return {
            "repo": self.repo,
            "metric": self.metric,
            "bisects": self.bisects,
            "found": self.found,
            "running": self.running,
            "median_time_to_culprit_s": self.median_time_to_culprit_s,
            "gpu_hours": round(self.gpu_hours, 6),
            "unclear_share": self.unclear_share,
            "top_files": [{"file": name, "bisects": count} for name, count in self.top_files],
            "top_tables": [{"table": name, "bisects": count} for name, count in self.top_tables],
            "top_authors": [{"author": name, "bisects": count} for name, count in self.top_authors],
        }


@dataclass(frozen=True)
class Stats:
    groups: list[GroupStats]
    weekly: list[tuple[date, int]]  # Monday of each week -> bisects created that week, oldest first, no gaps

    def to_json(self) -> dict[str, object]:
        return {
            "groups": [group.to_json() for group in self.groups],
            "weekly": [{"week": week.isoformat(), "bisects": count} for week, count in self.weekly],
        }


def compute_stats(store: Store, where: BisectFilter) -> Stats:
    with store.reading() as conn:
        rows = stats_rows(conn, where, TOP_N)
    groups = []
    for key, statuses in sorted(rows.statuses.items()):
        finished = sum(count for status, count in statuses.items() if status.is_terminal())
        unclear = sum(statuses.get(status, 0) for status in _UNCLEAR)
        groups.append(
            GroupStats(
                repo=key[0],
                metric=key[1],
                bisects=sum(statuses.values()),
                found=statuses.get(BisectStatus.FOUND, 0),
                running=statuses.get(BisectStatus.RUNNING, 0),
                median_time_to_culprit_s=rows.median_culprit_s.get(key),
                gpu_hours=rows.gpu_seconds.get(key, 0.0) / 3600,
                unclear_share=unclear / finished if finished else None,
                top_files=rows.files.get(key, []),
                top_tables=rows.tables.get(key, []),
                top_authors=rows.authors.get(key, []),
            )
        )
    return Stats(groups, bisects_per_week(rows.weekly))


def bisects_per_week(counts: dict[date, int]) -> list[tuple[date, int]]:
    """Every week (keyed by its Monday) from the first to the last with bisects, zeros included."""
    if not counts:
        return []
    week, last = min(counts), max(counts)
    weeks = []
    while week <= last:
        weeks.append((week, counts.get(week, 0)))
        week += timedelta(weeks=1)
    return weeks


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str | None:
    """The last `lines` lines of a log (read from its last LOG_TAIL_MAX_BYTES; none for 0); where the log retention
    removed it, the note it left; None when it cannot be read."""
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(max(0, size - LOG_TAIL_MAX_BYTES))
            data = handle.read(LOG_TAIL_MAX_BYTES)
    except OSError:
        return pruned_note(path)
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:]) if lines > 0 else ""
