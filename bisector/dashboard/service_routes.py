"""The endpoints `bisect serve` adds to the dashboard's app: submit and cancel (bearer token), a job's state, and a
bisect rendered as `bisect report|status` print it (what the `--server` client shows); and the browser's forms
(bisector/dashboard/actions.py).

    POST   /api/bisects                 a request (bisector/service/submission.py) -> 201 {id, status, owner}; with
                                        an Idempotency-Key header its person sent before, 200 and the job that
                                        submission made (a client's retry), never a second job
    DELETE /api/bisects/{id}            cancel the bisect and its reruns, the server's and `bisect run-at --bisect`
                                        ones on its store (of an ended bisect, its reruns) -> {id, status: the
                                        bisect's, ended_before: whether it had ended, reruns: the stopped reruns'
                                        shas}; 409 when it has ended and no rerun of it runs. ?wait_s=S: how long
                                        to wait for the reruns to stop, at most RERUN_STOP_WAIT_S (more: 422 {detail,
                                        max_wait_s}, nothing cancelled)
    POST   /api/bisects/{id}/rerun      {step: N} or {rev: REV}: the bisect's build and test run again there, in the
                                        background -> 202 {id, sha, status: started}; 409 while its last rerun runs
    POST   /api/bisects/{id}/marks      {rev, verdict, note?}: a commit's verdict by hand (`bisect mark`), given by
                                        the token's person -> {id, sha, step: its number in the report, verdict,
                                        reopened, message}
    POST   /api/bisects/{id}/resume     a bisect paused on a failing harness runs again: its job is queued again ->
                                        {id, resumed, state: the job's}; resumed false when its job was open
                                        already; 409 when the bisect has ended
    GET    /api/jobs/{id}               the job: {id, state, priority, submitted, started (its first start), finished,
                                        source, owner}
    GET    /api/bisects/{id}/rendered   ?view=report|status&format=text|markdown|json -> text/plain; &flags=FLAGS: how
                                        the reader's `bisect` reaches this server (`--server URL --token-file F`),
                                        put in the commands the text advises (default: --server and the URL the
                                        request came to)

The bearer token names the person (bisector/service/tokens.py): a submitted job is theirs, and only they or an admin
may cancel it, rerun at one of its commits, mark one (as the dashboard's buttons) or resume it. Write endpoints
answer 401 without a token or with a wrong one (each says which), 403 for a free-form command the server does not
allow or another person's job, 400 for a bad request (naming the field), 404 for an unknown bisect; never a
traceback. They read the Authorization header only, never a cookie: a page of another site cannot make a browser
send one. Every endpoint answers 413 to a body over the server's limit before reading it
(bisector/service/body_limit.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Body, Depends, FastAPI, Header, HTTPException, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from bisector.dashboard.actions import add_actions
from bisector.dashboard.app import BisectId, base_url
from bisector.db.jobs import JobRecord
from bisector.report.rendered import FORMATS, VIEWS, render
from bisector.report.resume import Commands
from bisector.service.body_limit import RequestBodyLimit
from bisector.service.service import BisectService, NotYoursError
from bisector.service.submission import CommandNotAllowedError, json_object
from bisector.service.tokens import Person
from bisector.vocab.domain import RERUN_STOP_WAIT_S
from bisector.vocab.errors import StateError

WaitS = Annotated[
    float, Query(ge=0, description=f"Seconds to wait for the reruns to stop (default and most: {RERUN_STOP_WAIT_S:g}).")
]

JsonBody = Annotated[Any, Body()]  # checked here (a JSON object), so anything else is a 400 that says so
SubmissionKey = Annotated[
    str | None,
    Header(min_length=1, max_length=200, description="The client's key for this submission: sent again, same job."),
]
FLAGS_MEANING = "How the reader's `bisect` reaches this server: the commands the text advises carry these flags."
MAX_FLAGS_CHARS = 2000
NO_TOKEN = "no token given: this endpoint needs Authorization: Bearer TOKEN"
WRONG_TOKEN = "token not accepted: the bearer token is not this server's"


def add_service_routes(app: FastAPI, service: BisectService) -> None:
    app.add_middleware(RequestBodyLimit, max_bytes=service.config.max_request_bytes)
    tokens = service.config.tokens
    add_actions(app, service)

    def token_person(authorization: Annotated[str | None, Header()] = None) -> Person:
        """Whose token the request carries, else the 401 that says what is wrong with it."""
        scheme, _, given = (authorization or "").strip().partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            problem = NO_TOKEN
        elif (person := tokens.who(given.strip())) is not None:
            return person
        else:
            problem = WRONG_TOKEN
        raise HTTPException(401, problem, headers={"WWW-Authenticate": "Bearer"})

    bearer = Depends(token_person)  # a default, not an annotation: the annotations are strings read in the module

    @app.post("/api/bisects", status_code=201, summary="Queue a bisect (needs a bearer token; owned by its person)")
    def submit(body: JsonBody = None, idempotency_key: SubmissionKey = None, person: Person = bearer) -> Any:
        try:
            submitted = service.submit(body, person, idempotency_key)
        except CommandNotAllowedError as exc:
            return JSONResponse({"detail": str(exc)}, status_code=403)
        answer = {"id": submitted.id, "status": submitted.status, "owner": submitted.owner}
        return JSONResponse(answer, status_code=200 if submitted.repeated else 201)

    @app.delete(
        "/api/bisects/{bisect_id}",
        summary="Cancel a queued or running bisect and its reruns (its owner's or an admin's token)",
    )
    def cancel(bisect_id: BisectId, wait_s: WaitS = RERUN_STOP_WAIT_S, person: Person = bearer) -> Any:
        if wait_s > RERUN_STOP_WAIT_S:
            detail = f"wait_s: at most {RERUN_STOP_WAIT_S:g} seconds on this server"
            return JSONResponse({"detail": detail, "max_wait_s": RERUN_STOP_WAIT_S}, status_code=422)

        def cancelled() -> dict[str, object]:
            outcome = service.cancel(bisect_id, person, wait_s)
            return {"id": bisect_id, "status": outcome.status.value, "ended_before": outcome.ended_before,
                    "reruns": list(outcome.reruns), "asked_to_stop": list(outcome.asked)}  # fmt: skip

        return acted(cancelled)

    @app.post(
        "/api/bisects/{bisect_id}/rerun", status_code=202,
        summary="Run the bisect's build and test again at its step N or a revision (its owner's or an admin's token)",
    )  # fmt: skip
    def rerun(bisect_id: BisectId, body: JsonBody = None, person: Person = bearer) -> Any:
        step, rev = (json_object(body).get(key) for key in ("step", "rev"))
        if step is not None and (not isinstance(step, int) or isinstance(step, bool) or step < 1):
            return JSONResponse({"detail": "step: a step's number, as the report numbers them"}, status_code=400)
        if rev is not None and not (isinstance(rev, str) and rev.strip()):
            return JSONResponse({"detail": "rev: a revision of the bisect's repository"}, status_code=400)
        return acted(lambda: {"id": bisect_id, "sha": service.rerun(bisect_id, person, step=step, rev=rev),
                              "status": "started"}, status_code=202)  # fmt: skip

    @app.post(
        "/api/bisects/{bisect_id}/marks", summary="Give a commit of the bisect a verdict by hand (as `bisect mark`)"
    )
    def mark(bisect_id: BisectId, body: JsonBody = None, person: Person = bearer) -> Any:
        fields = json_object(body)
        rev, verdict, note = fields.get("rev"), fields.get("verdict"), fields.get("note", "")
        for name, value in (("rev", rev), ("verdict", verdict)):
            if not (isinstance(value, str) and value.strip()):
                return JSONResponse({"detail": f"{name}: required, a string"}, status_code=400)
        if not isinstance(note, str):
            return JSONResponse({"detail": "note: a string"}, status_code=400)

        def marked() -> dict[str, object]:
            marked = service.mark(bisect_id, str(rev), str(verdict), note, person)
            outcome = marked.outcome
            return {"id": bisect_id, "sha": outcome.commit.sha, "step": outcome.number,
                    "verdict": outcome.verdict.value, "effect": outcome.effect.value, "reopened": outcome.reopened,
                    "message": marked.message}  # fmt: skip

        return acted(marked)

    @app.post(
        "/api/bisects/{bisect_id}/resume",
        summary="Run a bisect paused on a failing harness again (its owner's or an admin's token)",
    )
    def resume(bisect_id: BisectId, person: Person = bearer) -> Any:
        def resumed() -> dict[str, object]:
            outcome = service.resume(bisect_id, person)
            return {"id": bisect_id, "resumed": outcome.resumed, "state": outcome.state}

        return acted(resumed)

    @app.get("/api/jobs/{bisect_id}", summary="A submitted bisect's place in the server's queue")
    def job(bisect_id: BisectId) -> dict[str, object]:
        return job_json(service.job(bisect_id))

    @app.get("/api/bisects/{bisect_id}/rendered", response_class=PlainTextResponse, summary="As bisect report|status")
    def rendered(
        request: Request,
        bisect_id: BisectId,
        view: Annotated[str, Query(pattern=f"^({'|'.join(VIEWS)})$")] = "report",
        output_format: Annotated[str, Query(alias="format", pattern=f"^({'|'.join(FORMATS)})$")] = "text",
        flags: Annotated[str | None, Query(max_length=MAX_FLAGS_CHARS, description=FLAGS_MEANING)] = None,
    ) -> PlainTextResponse:
        commands = Commands(flags or f"--server {base_url(request)}")
        return PlainTextResponse(render(service.store, bisect_id, view, output_format, commands))


def acted(action: Callable[[], dict[str, object]], status_code: int = 200) -> JSONResponse:
    """An action on another person's job answers 403, one a bisect's state forbids 409 (other errors: the app's)."""
    try:
        return JSONResponse(action(), status_code=status_code)
    except NotYoursError as exc:
        return JSONResponse({"detail": str(exc)}, status_code=403)
    except StateError as exc:
        return JSONResponse({"detail": str(exc)}, status_code=409)


def job_json(job: JobRecord) -> dict[str, object]:
    return {
        "id": job.bisect_id,
        "state": job.state.value,
        "priority": job.priority,
        "submitted": job.submitted.isoformat(),
        "started": job.started.isoformat() if job.started else None,
        "finished": job.finished.isoformat() if job.finished else None,
        "source": job.source,
        "owner": job.owner,
    }
