"""Dates as revisions (the last first-parent commit by a day's end, by committer date) and a bisect's link, on a
real repository built with fixed commit dates, through the CLI, the service's submission, the report, the
dashboard's page and the webhook."""

from __future__ import annotations

import html
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from bisect_helpers import run_cli
from dashboard.server import running_dashboard  # a real `bisect dashboard` process
from triage.webhook import webhook  # a real HTTP receiver

from bisector.service.config import ServiceConfig
from bisector.service.submission import build_submission
from bisector.vocab.errors import InputError
from bisector.vocab.revdates import date_limit, resolve_dated

LINK = "https://ci.example.org/runs/42?job=nightly&x=<1>"


@dataclass(frozen=True)
class DatedRepo:
    path: Path
    sha: dict[str, str]  # name -> SHA


def _git(repo: Path, *args: str, when: str = "") -> str:
    env = {**os.environ, "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z"}  # author dates mislead: committer dates decide
    if when:
        env["GIT_COMMITTER_DATE"] = when
    done = subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@e", *args],
                          capture_output=True, text=True, check=True, env=env)  # fmt: skip
    return done.stdout.strip()


def _commit(repo: Path, state: str, when: str, message: str) -> str:
    (repo / "state").write_text(f"{state} {message}\n")
    _git(repo, "add", "state")
    _git(repo, "commit", "-qm", message, when=when)
    return _git(repo, "rev-parse", "HEAD")


@pytest.fixture
def dated(tmp_path: Path) -> DatedRepo:
    """main, first parent: c1 Oct 1, c2 Oct 5 10:00, c3 Oct 5 23:12, merge Oct 6 (of side, committed Oct 5 23:30),
    c4 Oct 20, c5 Oct 27 (the culprit: state bad), c6 Oct 28 10:00, c7 Oct 29. All times UTC."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "test.sh").write_text("grep -q '^ok ' state\n")
    _git(repo, "add", "test.sh")
    sha = {"c1": _commit(repo, "ok", "2026-10-01T12:00:00Z", "c1")}
    sha["c2"] = _commit(repo, "ok", "2026-10-05T10:00:00Z", "c2")
    _git(repo, "checkout", "-qb", "side")
    (repo / "side").write_text("side\n")
    _git(repo, "add", "side")
    _git(repo, "commit", "-qm", "side", when="2026-10-05T23:30:00Z")
    sha["side"] = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "-q", "main")
    sha["c3"] = _commit(repo, "ok", "2026-10-05T23:12:00Z", "c3")
    _git(repo, "merge", "-q", "--no-ff", "-m", "merge side", "side", when="2026-10-06T09:00:00Z")
    sha["merge"] = _git(repo, "rev-parse", "HEAD")
    sha["c4"] = _commit(repo, "ok", "2026-10-20T12:00:00Z", "c4")
    sha["c5"] = _commit(repo, "bad", "2026-10-27T12:00:00Z", "c5")
    sha["c6"] = _commit(repo, "bad", "2026-10-28T10:00:00Z", "c6")
    sha["c7"] = _commit(repo, "bad", "2026-10-29T10:00:00Z", "c7")
    return DatedRepo(repo, sha)


def _resolved(dated: DatedRepo, **values: str) -> dict[str, object]:
    return resolve_dated(dated.path, values)


def test_a_day_is_its_end_in_utc_and_the_line_is_first_parent_by_committer_date(dated: DatedRepo) -> None:
    values = _resolved(dated, good="2026-10-05", bad="2026-10-28")
    # the side commit (23:30) is later than c3 (23:12) but only on the merge's second parent
    assert (values["good"], values["bad"]) == (dated.sha["c3"], dated.sha["c6"])
    assert values["dates"] == {
        "bad": {"given": "2026-10-28", "sha": dated.sha["c6"], "committed": "2026-10-28T10:00:00+00:00"},
        "good": {"given": "2026-10-05", "sha": dated.sha["c3"], "committed": "2026-10-05T23:12:00+00:00"},
    }
    assert _resolved(dated, good="2026-10-06", bad="main")["good"] == dated.sha["merge"]


def test_a_zone_or_an_offset_moves_the_day_s_end(dated: DatedRepo) -> None:
    # Berlin's Oct 5 ends at 21:59:59 UTC: before c3
    assert _resolved(dated, good="2026-10-05 Europe/Berlin", bad="main")["good"] == dated.sha["c2"]
    assert _resolved(dated, good="2026-10-05T18:00+02:00", bad="main")["good"] == dated.sha["c2"]
    assert _resolved(dated, good="2026-10-05T23:20Z", bad="2026-10-28T08:00+02:00")["bad"] == dated.sha["c5"]
    assert _resolved(dated, good="2026-10-05T23:20", bad="main")["good"] == dated.sha["c3"]  # naive: UTC


def test_good_s_line_is_the_bad_revision_s(dated: DatedRepo) -> None:
    values = _resolved(dated, good="2026-10-06", bad="side")  # side's own first-parent line: side, c2, c1
    assert values["good"] == dated.sha["side"]
    assert values["dates"] == {
        "good": {"given": "2026-10-06", "sha": dated.sha["side"], "committed": "2026-10-05T23:30:00+00:00"}
    }


def test_a_ref_named_as_a_date_wins(dated: DatedRepo) -> None:
    _git(dated.path, "tag", "2026-10-05", dated.sha["c1"])
    assert _resolved(dated, good="2026-10-05", bad="main") == {"good": "2026-10-05", "bad": "main"}


@pytest.mark.parametrize("text", ["2026-13-05", "2026-10-05 Mars/Olympus", "2026-10-05T18:00+02:00 Europe/Berlin"])
def test_a_malformed_date_is_refused(text: str) -> None:
    with pytest.raises(InputError, match="2026-1"):
        date_limit(text)


def test_shas_and_branches_are_not_dates() -> None:
    for text in ("20261005", "main", "1a2b3c4d", "2026-10-05~2"):
        assert date_limit(text) is None


def start_args(dated: DatedRepo, *extra: str) -> list[str]:
    return ["start", "--repo", str(dated.path), "--run", "bash test.sh", "--executor", "inprocess", "--no-explain",
            *extra]  # fmt: skip


def test_start_with_dates_and_a_link_reports_them_and_keeps_the_resolved_range(dated: DatedRepo, tmp_path: Path):
    db = tmp_path / "b.db"
    with webhook() as hook:
        done = run_cli(*start_args(dated, "--good", "2026-10-05", "--bad", "2026-10-28", "--link", LINK,
                                   "--notify", hook.url, "--format", "json"), db=db)  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["good"], report["bad"]) == (dated.sha["c3"], dated.sha["c6"])
    assert report["first_bad"]["sha"] == dated.sha["c5"]
    assert report["link"] == LINK
    assert report["dates"]["good"] == {
        "given": "2026-10-05", "sha": dated.sha["c3"], "committed": "2026-10-05T23:12:00+00:00"
    }  # fmt: skip
    assert (report["spec"]["good"], report["spec"]["bad"]) == (dated.sha["c3"], dated.sha["c6"])  # resume is exact
    payload = hook.posts[-1][1]
    assert payload["link"] == LINK
    assert payload["dates"] == report["dates"]
    assert f"**Link:** <{LINK.replace('<', '%3C').replace('>', '%3E')}>" in payload["markdown"]

    text = run_cli("report", "1", db=db).stdout
    assert f"good 2026-10-05 -> {dated.sha['c3'][:12]} (2026-10-05 23:12 UTC)" in text
    assert f"bad 2026-10-28 -> {dated.sha['c6'][:12]} (2026-10-28 10:00 UTC)" in text
    assert f"link: {LINK}" in text
    markdown = run_cli("report", "1", "--format", "markdown", db=db).stdout
    assert f"**Good:** 2026-10-05 -> {dated.sha['c3'][:12]} (2026-10-05 23:12 UTC)" in markdown

    with running_dashboard(f"sqlite:///{db}", tmp_path / "logs") as base:
        page = httpx.get(f"{base}/bisects/1", timeout=60.0).text
    assert f'<a id="link" href="{html.escape(LINK)}" rel="noopener noreferrer">{html.escape(LINK)}</a>' in page
    assert "<1>" not in page
    assert f'2026-10-05 → <span class="sha">{dated.sha["c3"][:12]}</span>' in page


def test_a_date_before_the_first_commit_is_one_line_and_exit_2(dated: DatedRepo, tmp_path: Path) -> None:
    done = run_cli(*start_args(dated, "--good", "2025-01-01", "--bad", "main"), db=tmp_path / "b.db")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "bisect: error: --good 2025-01-01: no commit of main's first-parent line was committed by 2025-01-01 23:59 UTC "
        "(before the repository's first commit)"
    )


@pytest.mark.parametrize("link", ["ftp://x/y", "javascript:alert(1)", "https://a b", "https://"])
def test_a_link_is_one_http_url(dated: DatedRepo, tmp_path: Path, link: str) -> None:
    done = run_cli(*start_args(dated, "--good", "c1", "--bad", "main", "--link", link), db=tmp_path / "b.db")
    assert done.returncode == 2
    assert done.stderr.strip() == f"bisect: error: --link {link!r}: give one http:// or https:// URL"
    assert not (tmp_path / "b.db").exists()


def test_bisect_toml_takes_a_date_quoted_or_not(dated: DatedRepo) -> None:
    from bisector.runner.config import build_spec

    (dated.path / "bisect.toml").write_text('good = 2026-10-05\nbad = "2026-10-28T08:00+02:00"\nrun = "bash test.sh"\n')
    spec = build_spec(dated.path, {})
    assert (spec.good, spec.bad) == (dated.sha["c3"], dated.sha["c5"])
    assert spec.dates["bad"]["given"] == "2026-10-28T08:00+02:00"


def test_the_service_api_takes_dates_and_a_link(dated: DatedRepo, tmp_path: Path) -> None:
    config = ServiceConfig(allowed_repos=(str(dated.path),), mirror_dir=tmp_path / "m", allow_commands=True)
    body = {"repo": str(dated.path), "good": "2026-10-05", "bad": "2026-10-28", "run": "bash test.sh", "link": LINK}
    spec = build_submission(config, dated.path, str(dated.path), body).spec
    assert (spec.good, spec.bad, spec.link) == (dated.sha["c3"], dated.sha["c6"], LINK)
    assert spec.dates["bad"]["given"] == "2026-10-28"
