"""Dates as revisions: `--bad 2026-10-28` is the last commit of HEAD's first-parent chain committed by that day's
end, `--good 2026-10-05` the last of the bad revision's chain by then (committer dates: when a commit was on the
line). A name that is a revision of the repository (a tag called 2026-10-05) stays that revision.

A date is YYYY-MM-DD (its end), or an ISO datetime (YYYY-MM-DDTHH:MM[:SS], an offset or Z); either may end with
an IANA zone (`2026-10-05 Europe/Berlin`). UTC when neither offset nor zone is given.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime, time, tzinfo
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from bisector.vocab.errors import InputError, RepoError
from bisector.vocab.gitrepo import GitRepo

_DATE = re.compile(
    r"(?P<day>\d{4}-\d{2}-\d{2})(?P<clock>[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"
    r"(?: (?P<zone>[A-Za-z][A-Za-z0-9_+-]*(?:/[A-Za-z0-9_+-]+)*))?"
)


def date_limit(text: str) -> datetime | None:
    """The instant a date names (a day: its last microsecond), aware; None when text is not written as a date.
    A date-shaped text that names no real day or zone is refused."""
    match = _DATE.fullmatch(text.strip())
    if match is None:
        return None
    zone: tzinfo = UTC
    if match["zone"]:
        try:
            zone = ZoneInfo(match["zone"])
        except (ZoneInfoNotFoundError, ValueError):
            raise InputError(f"{text!r}: unknown time zone {match['zone']!r} (e.g. Europe/Berlin, UTC)") from None
    try:
        if match["clock"] is None:
            day_end = datetime.combine(datetime.fromisoformat(match["day"]).date(), time.max)
            return day_end.replace(tzinfo=zone)
        moment = datetime.fromisoformat(match["day"] + "T" + match["clock"][1:])
    except ValueError:
        raise InputError(f"{text!r} is not a date (write 2026-10-05 or 2026-10-05T18:00+02:00)") from None
    if moment.tzinfo is not None and match["zone"]:
        raise InputError(f"{text!r}: give an offset or a zone, not both")
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=zone)


def resolve_dated(repo_root: str | Path, values: Mapping[str, object]) -> dict[str, object]:
    """values (flat options) with a dated good or bad replaced by the commit it names, and `dates` recording
    {which: {given, sha, committed}} for each. Bad first: good's line is the bad revision's."""
    dates: dict[str, dict[str, str]] = {}
    resolved = dict(values)
    for which, line in (("bad", "HEAD"), ("good", None)):
        given = values.get(which)
        if not isinstance(given, str) or not _DATE.fullmatch(given.strip()):
            continue
        repo = GitRepo(repo_root)
        if _is_revision(repo, given):
            continue
        until = date_limit(given)
        assert until is not None
        chain = line or str(resolved["bad"])
        found = repo.first_parent_at(chain, until)
        if found is None:
            why = repo.shallow_note() or " (before the repository's first commit)"
            raise InputError(
                f"--{which} {given}: no commit of {chain}'s first-parent line was committed by "
                f"{until.astimezone(UTC):%Y-%m-%d %H:%M} UTC{why}"
            )
        sha, committed = found
        resolved[which] = sha
        dates[which] = {"given": given, "sha": sha, "committed": committed.isoformat()}
    if dates:
        resolved["dates"] = dates
    return resolved


def _is_revision(repo: GitRepo, name: str) -> bool:
    try:
        repo.resolve(name)
    except RepoError:
        return False
    return True


def describe_date(entry: Mapping[str, str]) -> str:
    """'2026-10-05 -> 1a2b3c4d5e6f (2026-10-05 23:12 UTC)'."""
    committed = datetime.fromisoformat(entry["committed"]).astimezone(UTC)
    return f"{entry['given']} -> {entry['sha'][:12]} ({committed:%Y-%m-%d %H:%M} UTC)"
