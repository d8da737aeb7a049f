"""The HTTP client of `bisect submit|status|report|cancel|mark|resume|run-at --server URL` (httpx). Every failure is one
line."""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from bisector.vocab.domain import RERUN_STOP_WAIT_S
from bisector.vocab.errors import BisectError, InputError, StateError, UnknownBisectError

TIMEOUT_S = 120.0  # a submission fetches the repository first
VIEW_TIMEOUT_S = 15.0  # a status or report is read from the store; a Ctrl-C that comes just before the wait for it
# begins is seen only once the wait ends, so a read-only view waits no longer than this
TOKEN_VARIABLE = "BISECT_TOKEN"
# A submission whose answer never came (no connection, a timeout) is sent again with the same key, which the server
# answers with the job it made. Its attempts outlast a server's mirror fetch (GIT_TIMEOUT_S, 600 s), during which
# the retries wait for the first one's job.
SUBMIT_ATTEMPTS = 6
SUBMIT_RETRY_PAUSE_S = 1.0  # before each retry: time for a server that was restarting to listen again


class UnansweredError(InputError):
    """A request that got no answer: the server was not reached, or did not answer in time."""


def read_token(token_file: str | None) -> str | None:
    """The bearer token of --token-file, else $BISECT_TOKEN (None: neither). Also the servers' (core
    dependencies only: the client needs no dashboard extra)."""
    if token_file is None:
        return os.environ.get(TOKEN_VARIABLE) or None
    try:
        token = Path(token_file).read_text().strip()
    except OSError as exc:
        raise InputError(f"--token-file {token_file}: {exc.strerror}") from None
    if not token:
        raise InputError(f"--token-file {token_file} is empty")
    return token


class ServiceClient:
    def __init__(self, server: str, token: str | None = None, transport: httpx.BaseTransport | None = None) -> None:
        if not server.startswith(("http://", "https://")):
            raise InputError(f"--server {server!r}: an http:// or https:// URL")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.server = server.rstrip("/")
        self._client = httpx.Client(base_url=self.server, headers=headers, timeout=TIMEOUT_S, transport=transport)

    def submit(self, request: dict[str, Any]) -> dict[str, Any]:
        """{id, status} of the queued bisect: one job however many attempts it took (one key for them all)."""
        headers = {"Idempotency-Key": uuid.uuid4().hex}
        for _ in range(SUBMIT_ATTEMPTS - 1):
            with contextlib.suppress(UnansweredError):
                return self._json("POST", "/api/bisects", json=request, headers=headers)
            time.sleep(SUBMIT_RETRY_PAUSE_S)
        return self._json("POST", "/api/bisects", json=request, headers=headers)

    def cancel(self, bisect_id: int, wait_s: float | None = None) -> dict[str, Any]:
        """{id, status, ended_before, reruns, asked_to_stop} after the cancel: the bisect's status, whether it had
        ended, the shas of the reruns the cancel stopped and of those still running after its wait (wait_s: the
        server's default when None). A server refuses a wait over its most, stating it (max_wait_s; one before that
        field waited at most RERUN_STOP_WAIT_S): the cancel is then asked again with that wait, and the answer
        says so in wait_capped_s."""
        path = f"/api/bisects/{bisect_id}"
        response = self._send("DELETE", path, params={} if wait_s is None else {"wait_s": wait_s})
        most_s = _most_wait_s(response)
        if wait_s is not None and most_s is not None and most_s < wait_s:
            capped: dict[str, Any] = self._call("DELETE", path, params={"wait_s": most_s}).json()
            return {**capped, "wait_capped_s": most_s}
        answer: dict[str, Any] = self._checked(response).json()
        return answer

    def rerun(self, bisect_id: int, *, step: int | None = None, rev: str | None = None) -> dict[str, Any]:
        """{id, sha, status} of the rerun the server started (at the bisect's step N, or at rev)."""
        body = {"step": step} if step is not None else {"rev": rev}
        answer: dict[str, Any] = self._call("POST", f"/api/bisects/{bisect_id}/rerun", json=body).json()
        return answer

    def mark(self, bisect_id: int, rev: str, verdict: str, note: str) -> dict[str, Any]:
        """{id, sha, step, verdict, effect, reopened, message} of the verdict given (by the token's person)."""
        body = {"rev": rev, "verdict": verdict, "note": note}
        return self._json("POST", f"/api/bisects/{bisect_id}/marks", json=body)

    def resume(self, bisect_id: int) -> dict[str, Any]:
        """{id, resumed, state}: whether the bisect's job was queued again (False: it was open already), its state."""
        return self._json("POST", f"/api/bisects/{bisect_id}/resume")

    def rendered(self, bisect_id: int, view: str, output_format: str, flags: str) -> str:
        """The bisect's report or status; flags: how this client's `bisect` reaches the server (in the commands the
        text advises)."""
        params = {"view": view, "format": output_format, "flags": flags}
        return self._call("GET", f"/api/bisects/{bisect_id}/rendered", params=params, timeout=VIEW_TIMEOUT_S).text

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> ServiceClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        answer: dict[str, Any] = self._call(method, path, **kwargs).json()
        return answer

    def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return self._checked(self._send(method, path, **kwargs))

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return self._client.request(method, path, **kwargs)
        except httpx.ReadTimeout:
            waited_s = kwargs.get("timeout", TIMEOUT_S)
            raise UnansweredError(f"{self.server} took the request but gave no answer within {waited_s:g} s") from None
        except httpx.TransportError as exc:
            raise UnansweredError(f"cannot reach {self.server}: {exc}") from None
        except httpx.HTTPError as exc:
            raise InputError(f"cannot reach {self.server}: {exc}") from None

    def _checked(self, response: httpx.Response) -> httpx.Response:
        """The response, unless it is an error: then that error as one line."""
        if response.status_code < 400:
            return response
        try:
            detail = str(response.json().get("detail", response.text))
        except ValueError:
            detail = response.text.strip()
        error: type[BisectError] = InputError
        if response.status_code == 404:
            error = UnknownBisectError
        elif response.status_code == 409:
            error = StateError
        raise error(f"{self.server}: {response.status_code} {detail}")


def _most_wait_s(response: httpx.Response) -> float | None:
    """The most a server waits, when the response is its refusal of a longer wait (422); None otherwise."""
    if response.status_code != 422:
        return None
    try:
        stated = response.json().get("max_wait_s", RERUN_STOP_WAIT_S)
    except (ValueError, AttributeError):
        return None
    return float(stated) if isinstance(stated, int | float) and not isinstance(stated, bool) else None
