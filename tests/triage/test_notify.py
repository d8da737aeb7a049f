"""Webhook notifications against a real HTTP server on 127.0.0.1: delivery, retries, unreachable hosts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bisect_helpers import run_cli
from synthetic import culprit_history
from webhook import closed_port_url, webhook

from bisector.db.store import Store
from bisector.runner.notify import check_webhook_url, notify_finished, post_json
from bisector.vocab.errors import InputError


def start_args(history, *extra: str) -> list[str]:
    return [
        "start", "--repo", str(history.path), "--good", history.shas[0], "--bad", "main", "--run", "bash test.sh",
        "--executor", "inprocess", "--workers", "2", "--no-explain", *extra,
    ]  # fmt: skip


@pytest.fixture
def finished_bisect(tmp_path: Path):
    """A store with one found bisect (a real run of `bisect start`)."""
    history = culprit_history(tmp_path / "repo", 8, 5)
    db = tmp_path / "b.db"
    done = run_cli(*start_args(history), db=db)
    assert done.returncode == 0, done.stderr
    return history, db


def test_posts_the_report_json_with_a_markdown_body(finished_bisect):
    history, db = finished_bisect
    with webhook() as hook, Store.open(f"sqlite:///{db}") as store:
        delivery = notify_finished(store, 1, hook.url)
    assert (delivery.delivered, delivery.attempts, delivery.status_code) == (True, 1, 200)
    [(path, payload)] = hook.posts
    assert path == "/hooks/bisect"
    assert payload["status"] == "found"
    assert payload["first_bad"]["sha"] == history.shas[5]
    assert payload["markdown"].startswith("### gpu-bisect #1: found")
    assert history.shas[5][:12] in payload["markdown"]


def test_a_5xx_is_retried_until_it_is_delivered(finished_bisect):
    _, db = finished_bisect
    with webhook(500, 503) as hook, Store.open(f"sqlite:///{db}") as store:
        delivery = notify_finished(store, 1, hook.url, first_pause_s=0.01)
    assert (delivery.delivered, delivery.attempts) == (True, 3)
    assert hook.answers == [500, 503, 200]
    assert len(hook.posts) == 3


def test_a_4xx_is_not_retried_and_nothing_raises():
    with webhook(404) as hook:
        delivery = post_json(hook.url, {"x": 1}, first_pause_s=0.01)
    assert (delivery.delivered, delivery.attempts, delivery.status_code) == (False, 1, 404)
    assert "HTTP 404" in delivery.summary()


def test_a_redirect_is_not_followed_nor_retried():
    with webhook(301) as hook:
        delivery = post_json(hook.url, {"x": 1}, first_pause_s=0.01)
    assert (delivery.delivered, delivery.attempts, delivery.status_code) == (False, 1, 301)
    assert len(hook.posts) == 1


def test_persistent_5xx_gives_up_after_the_attempts():
    with webhook(500, 500, 500, 500) as hook:
        delivery = post_json(hook.url, {"x": 1}, attempts=3, first_pause_s=0.01)
    assert (delivery.delivered, delivery.attempts, delivery.status_code) == (False, 3, 500)
    assert len(hook.posts) == 3


def test_an_unreachable_port_is_an_outcome_not_an_exception():
    delivery = post_json(closed_port_url(), {"x": 1}, attempts=2, first_pause_s=0.01)
    assert (delivery.delivered, delivery.attempts, delivery.status_code) == (False, 2, None)
    assert "ConnectError" in delivery.error


def test_an_unknown_bisect_is_an_outcome_too(tmp_path: Path):
    with webhook() as hook, Store.open(f"sqlite:///{tmp_path / 'empty.db'}") as store:
        delivery = notify_finished(store, 42, hook.url)
    assert not delivery.delivered
    assert "no report for bisect 42" in delivery.error
    assert hook.posts == []


@pytest.mark.parametrize("url", ["ftp://example.com/x", "not a url", "http://"])
def test_webhook_urls_are_checked(url: str):
    with pytest.raises(InputError, match="give an http:// or https:// URL"):
        check_webhook_url(url)


def test_bisect_start_notify_posts_the_finished_report(tmp_path: Path):
    history = culprit_history(tmp_path / "repo", 8, 3)
    with webhook(500) as hook:
        done = run_cli(*start_args(history, "--notify", hook.url, "--format", "json"), db=tmp_path / "b.db")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["first_bad"]["sha"] == history.shas[3]
    assert hook.answers == [500, 200]
    assert hook.posts[-1][1]["first_bad"]["sha"] == history.shas[3]
    assert "report posted to" in done.stderr


def test_bisect_start_with_an_unreachable_webhook_warns_and_keeps_its_exit_code(tmp_path: Path):
    history = culprit_history(tmp_path / "repo", 8, 3)
    done = run_cli(*start_args(history, "--notify", closed_port_url()), db=tmp_path / "b.db")
    assert done.returncode == 0, done.stderr
    assert "bisect: warning: bisect 1: could not post the report to http://127.0.0.1:" in done.stderr
    assert "after 3 attempt(s): ConnectError" in done.stderr
    assert "Traceback" not in done.stderr


def test_bisect_start_refuses_a_bad_webhook_url_before_running(tmp_path: Path):
    history = culprit_history(tmp_path / "repo", 8, 3)
    done = run_cli(*start_args(history, "--notify", "ftp://x"), db=tmp_path / "b.db")
    assert done.returncode == 2
    assert done.stderr.strip() == "bisect: error: --notify 'ftp://x': give an http:// or https:// URL"
    assert not (tmp_path / "b.db").exists()
