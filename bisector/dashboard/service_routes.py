"""The endpoints `bisect serve` adds to the dashboard's app: submit and cancel (bearer token), a job's state, and a
bisect rendered as `bisect report|status` print it (what the `--server` client shows); and the browser's forms
(bisector/dashboard/actions.py).

    POST   /api/bisects                 a request (bisector/service/submission.py) -> 201 {id, status, owner}
    DELETE /api/bisects/{id}            cancel -> {id, status}; 409 when it has ended
    GET    /api/jobs/{id}               the job: {id, state, priority, submitted, started, finished, source, owner}
    GET    /api/bisects/{id}/rendered   ?view=report|status&format=text|markdown|json -> text/plain

The bearer token names the person (bisector/service/tokens.py): a submitted job is theirs, and only they or an admin
may cancel it. Write endpoints answer 401 without a token or with a wrong one (each says which), 403 for a
free-form command the server does not allow or another person's job, 400 for a bad request (naming the field), 404
for an unknown bisect; never a traceback. They read the Authorization header only, never a cookie: a page of another
site cannot make a browser send one. Every endpoint answers 413 to a body over the server's limit before reading it
(bisector/service/body_limit.py).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Body, FastAPI, Header, Query
from fastapi.responses import JSONResponse, PlainTextResponse

from bisector.dashboard.actions import add_actions
from bisector.dashboard.app import BisectId
from bisector.db.jobs import JobRecord
from bisector.service.body_limit import RequestBodyLimit
from bisector.service.render import FORMATS, VIEWS, render
from bisector.service.service import BisectService, NotYoursError
from bisector.service.submission import CommandNotAllowedError
from bisector.service.tokens import Person
from bisector.vocab.errors import StateError

NO_TOKEN = "no token given: this endpoint needs Authorization: Bearer TOKEN"
WRONG_TOKEN = "token not accepted: the bearer token is not this server's"


def add_service_routes(app: FastAPI, service: BisectService) -> None:
    app.add_middleware(RequestBodyLimit, max_bytes=service.config.max_request_bytes)
    tokens = service.config.tokens
    add_actions(app, service)

    def person_of(authorization: str | None) -> Person | JSONResponse:
        """Whose token the request carries, else the 401 that says what is wrong with it."""
        scheme, _, given = (authorization or "").strip().partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            problem = NO_TOKEN
        elif (person := tokens.who(given.strip())) is not None:
            return person
        else:
            problem = WRONG_TOKEN
        return JSONResponse({"detail": problem}, status_code=401, headers={"WWW-Authenticate": "Bearer"})

    @app.post("/api/bisects", status_code=201, summary="Queue a bisect (needs a bearer token; owned by its person)")
    def submit(body: Annotated[dict[str, Any], Body()], authorization: Annotated[str | None, Header()] = None) -> Any:
        person = person_of(authorization)
        if isinstance(person, JSONResponse):
            return person
        try:
            submitted = service.submit(body, person)
        except CommandNotAllowedError as exc:
            return JSONResponse({"detail": str(exc)}, status_code=403)
        return JSONResponse({"id": submitted.id, "status": submitted.status, "owner": submitted.owner}, status_code=201)

    @app.delete(
        "/api/bisects/{bisect_id}", summary="Cancel a queued or running bisect (its owner's or an admin's token)"
    )
    def cancel(bisect_id: BisectId, authorization: Annotated[str | None, Header()] = None) -> Any:
        person = person_of(authorization)
        if isinstance(person, JSONResponse):
            return person
        try:
            service.cancel(bisect_id, person)
        except NotYoursError as exc:
            return JSONResponse({"detail": str(exc)}, status_code=403)
        except StateError as exc:
            return JSONResponse({"detail": str(exc)}, status_code=409)
        return {"id": bisect_id, "status": "cancelled"}

    @app.get("/api/jobs/{bisect_id}", summary="A submitted bisect's place in the server's queue")
    def job(bisect_id: BisectId) -> dict[str, object]:
        return job_json(service.job(bisect_id))

    @app.get("/api/bisects/{bisect_id}/rendered", response_class=PlainTextResponse, summary="As bisect report|status")
    def rendered(
        bisect_id: BisectId,
        view: Annotated[str, Query(pattern=f"^({'|'.join(VIEWS)})$")] = "report",
        output_format: Annotated[str, Query(alias="format", pattern=f"^({'|'.join(FORMATS)})$")] = "text",
    ) -> PlainTextResponse:
        return PlainTextResponse(render(service.store, bisect_id, view, output_format))


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
