"""Webhook notifications: a finished bisect's report, POSTed as JSON with a Markdown body.

Payload: the report's JSON (`bisect report ID --format json`) with one more key, `markdown`, the report as
`--format markdown` prints it (ready to paste into a PR or an issue). Delivery never raises into the
caller: connection errors, timeouts and 5xx answers are retried (`attempts` in all, with a doubling pause),
4xx answers are not, redirects are not followed (a POST would become a GET), and the outcome comes back as
a `Delivery`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from bisector.vocab.errors import BisectError, InputError

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_ATTEMPTS = 3
FIRST_PAUSE_S = 0.5


@dataclass(frozen=True)
class Delivery:
    url: str
    delivered: bool
    attempts: int
    status_code: int | None = None  # the last HTTP answer, None when none came
    error: str = ""  # why it was not delivered

    def summary(self) -> str:
        if self.delivered:
            return f"report posted to {self.url} (HTTP {self.status_code}, attempt {self.attempts})"
        return f"could not post the report to {self.url} after {self.attempts} attempt(s): {self.error}"


def check_webhook_url(url: str) -> str:
    """The URL itself, or InputError when it is not an http(s) URL with a host (checked before any work)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(f"--notify {url!r}: give an http:// or https:// URL")
    return url


def report_payload(store: Any, bisect_id: int) -> dict[str, Any]:
    """The report of a bisect as the webhook receives it. The report module is imported here only."""
    from bisector.report import BisectReport, render_json, render_markdown

    report = BisectReport.load(store, bisect_id)
    payload: dict[str, Any] = json.loads(render_json(report))
    payload["markdown"] = render_markdown(report)
    return payload


def post_json(
    url: str,
    payload: dict[str, Any],
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    attempts: int = DEFAULT_ATTEMPTS,
    first_pause_s: float = FIRST_PAUSE_S,
    transport: httpx.BaseTransport | None = None,
) -> Delivery:
    """POST payload to url; retried on connection errors, timeouts and 5xx; never raises."""
    error, status = "", None
    with httpx.Client(timeout=timeout_s, transport=transport) as client:
        for attempt in range(1, attempts + 1):
            try:
                answer = client.post(url, json=payload, headers={"User-Agent": "gpu-bisect"})
            except httpx.TransportError as exc:
                error, status = f"{type(exc).__name__}: {exc}", None
            except (httpx.HTTPError, httpx.InvalidURL) as exc:
                return Delivery(url, False, attempt, None, f"{type(exc).__name__}: {exc}")
            else:
                status = answer.status_code
                if answer.is_success:
                    return Delivery(url, True, attempt, status)
                error = f"HTTP {status} {answer.reason_phrase}".rstrip()
                if status < 500:
                    return Delivery(url, False, attempt, status, error)
            if attempt < attempts:
                time.sleep(first_pause_s * 2 ** (attempt - 1))
    return Delivery(url, False, attempts, status, error)


def notify_finished(store: Any, bisect_id: int, url: str, **options: Any) -> Delivery:
    """Post the finished bisect's report to the webhook at url (options: those of `post_json`); never raises."""
    try:
        payload = report_payload(store, bisect_id)
    except BisectError as exc:
        return Delivery(url, False, 0, None, f"no report for bisect {bisect_id}: {exc}")
    return post_json(url, payload, **options)
