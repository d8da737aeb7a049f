"""The browser's actions on a `bisect serve`: log in, submit, cancel, resume, rerun a step, mark a commit (HTML
forms).

    GET  /login, POST /login            the token, given once per browser session; POST /logout forgets it
    GET  /submit, POST /submit          a bisect over the server's repositories and recipes -> its page
    POST /bisects/{id}/cancel           as DELETE /api/bisects/{id}: the bisect and its reruns
    POST /bisects/{id}/resume           as POST /api/bisects/{id}/resume: a paused bisect runs again
    POST /bisects/{id}/rerun            step=N: that step's commit run again (a rerun step of the bisect)
    POST /bisects/{id}/mark             rev, verdict (good, bad or the bisect's terms, skip), note: as `bisect mark`

The login keeps the token in an HttpOnly, SameSite=Strict cookie (Secure over https) beside a session cookie, a
random number drawn at login. Every POST is refused (403, nothing done) unless its Origin (or, without one, its
Referer) is this server's, and, past the login, unless its form carries the session's CSRF token: an HMAC of the
session number under the server's key (kept in its data directory, so a form survives a restart), put in the
forms of the pages. A page of another origin (another port of the same host is the same site, so SameSite alone
does not keep its requests out) can make a browser send the cookies but cannot read the CSRF token. Who may do
what is the API's rule: the token names the person, who acts on their own jobs only unless an admin.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import parse_qs, quote

from fastapi import FastAPI, Query, Request
from fastapi.responses import PlainTextResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from starlette.concurrency import run_in_threadpool

from bisector.dashboard.app import TOKEN_COOKIE, BisectId, base_url, set_token_cookie
from bisector.report.resume import Commands
from bisector.service.service import BisectService, NotYoursError
from bisector.service.submission import CommandNotAllowedError
from bisector.service.tokens import Person
from bisector.vocab.errors import BisectError, StateError, UnknownBisectError

SESSION_COOKIE = "bisect_session"
CSRF_FIELD = "csrf"
NOT_LOGGED_IN = "not logged in: give your token at /login first"
FOREIGN_ORIGIN = "refused: the request does not come from this server's pages"
BAD_CSRF = "refused: the form's CSRF token is not this session's (reload the page)"
WRONG_TOKEN = "token not accepted: it is not one of this server's"
MAX_NUMBER_DIGITS = 9  # a form's step or priority: longer digit strings are refused, never parsed


@dataclass(frozen=True)
class Session:
    person: Person
    csrf: str


class RefusedError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def add_actions(app: FastAPI, service: BisectService) -> None:
    templates: Jinja2Templates = app.state.templates

    def csrf_of(number: str) -> str:
        return hmac.new(service.config.form_key, number.encode(), hashlib.sha256).hexdigest()

    def session_of(request: Request) -> Session | None:
        number = request.cookies.get(SESSION_COOKIE)
        person = service.config.tokens.who(request.cookies.get(TOKEN_COOKIE, ""))
        return Session(person, csrf_of(number)) if number and person is not None else None

    def page_context(request: Request) -> dict[str, Any]:
        # this server's pages advise the commands that reach it, in place of those of the store's reader
        commands = Commands(f"--server {base_url(request)}")
        return {"actions": True, "session": session_of(request), "csrf_field": CSRF_FIELD,
                "reruns": service.scheduler.reruns(), "commands": commands}  # fmt: skip

    templates.context_processors.append(page_context)

    async def checked_form(request: Request, *, logged_in: bool = True) -> tuple[dict[str, str], Session | None]:
        """The form of a same-origin POST (and its session, which it needs unless logged_in is False);
        RefusedError otherwise, before anything is done."""
        if not same_origin(request):
            raise RefusedError(403, FOREIGN_ORIGIN)
        form = {
            name: values[-1] for name, values in parse_qs((await request.body()).decode("utf-8", "replace")).items()
        }
        if not logged_in:
            return form, None
        session = session_of(request)
        if session is None:
            raise RefusedError(401, NOT_LOGGED_IN)
        if not hmac.compare_digest(form.get(CSRF_FIELD, "").encode(), session.csrf.encode()):
            raise RefusedError(403, BAD_CSRF)
        return form, session

    @app.middleware("http")
    async def deny_framing(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        response = await call_next(request)
        response.headers["X-Frame-Options"] = "DENY"  # no other page frames ours to have its buttons clicked
        return response

    @app.exception_handler(RefusedError)
    async def on_refused(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RefusedError)
        return PlainTextResponse(f"{exc.status}: {exc}\n", status_code=exc.status)

    @app.get("/login", include_in_schema=False)
    def login_page(request: Request, next_path: Annotated[str, Query(alias="next", max_length=1000)] = "/") -> Response:
        return templates.TemplateResponse(request, "login.html", {"next": local_path(next_path), "problem": None})

    @app.post("/login", include_in_schema=False)
    async def login(request: Request) -> Response:
        form, _ = await checked_form(request, logged_in=False)
        token, target = form.get("token", "").strip(), local_path(form.get("next", "/"))
        if service.config.tokens.who(token) is None:
            context = {"next": target, "problem": WRONG_TOKEN if token else "no token given"}
            return templates.TemplateResponse(request, "login.html", context, status_code=401)
        response = RedirectResponse(target, status_code=303)
        set_token_cookie(request, response, token)
        secure = request.url.scheme == "https"
        response.set_cookie(SESSION_COOKIE, secrets.token_urlsafe(32), httponly=True, samesite="strict", secure=secure)
        return response

    @app.post("/logout", include_in_schema=False)
    async def logout(request: Request) -> Response:
        await checked_form(request)
        response = RedirectResponse("/", status_code=303)
        response.delete_cookie(TOKEN_COOKIE)
        response.delete_cookie(SESSION_COOKIE)
        return response

    @app.get("/submit", include_in_schema=False)
    def submit_page(request: Request) -> Response:
        if session_of(request) is None:
            return RedirectResponse(f"/login?next={quote('/submit')}", status_code=303)
        return submit_form(request, {}, None)

    def submit_form(request: Request, given: dict[str, str], problem: str | None, status: int = 200) -> Response:
        context = {
            "repos": service.mirrors.allowed,
            "recipes": sorted(service.config.recipes),
            "allow_commands": service.config.allow_commands,
            "given": given,
            "problem": problem,
        }
        return templates.TemplateResponse(request, "submit.html", context, status_code=status)

    @app.post("/submit", include_in_schema=False)
    async def submit(request: Request) -> Response:
        form, session = await checked_form(request)
        assert session is not None
        try:
            submitted = await run_in_threadpool(service.submit, submission_request(form), session.person)
        except BisectError as exc:
            return submit_form(request, form, str(exc), 403 if isinstance(exc, CommandNotAllowedError) else 400)
        return RedirectResponse(f"/bisects/{submitted.id}", status_code=303)

    @app.post("/bisects/{bisect_id}/cancel", include_in_schema=False)
    async def cancel(request: Request, bisect_id: BisectId) -> Response:
        _, session = await checked_form(request)
        assert session is not None
        return await acted(bisect_id, lambda: service.cancel(bisect_id, session.person))

    @app.post("/bisects/{bisect_id}/resume", include_in_schema=False)
    async def resume(request: Request, bisect_id: BisectId) -> Response:
        _, session = await checked_form(request)
        assert session is not None
        return await acted(bisect_id, lambda: service.resume(bisect_id, session.person))

    @app.post("/bisects/{bisect_id}/rerun", include_in_schema=False)
    async def rerun(request: Request, bisect_id: BisectId) -> Response:
        form, session = await checked_form(request)
        assert session is not None
        step = form.get("step", "").strip()
        if not (step.isdigit() and len(step) <= MAX_NUMBER_DIGITS):
            raise RefusedError(400, "step: a step's number, as the steps table numbers them")
        return await acted(bisect_id, lambda: service.rerun(bisect_id, session.person, step=int(step)))

    @app.post("/bisects/{bisect_id}/mark", include_in_schema=False)
    async def mark(request: Request, bisect_id: BisectId) -> Response:
        form, session = await checked_form(request)
        assert session is not None
        rev, verdict, note = (form.get(name, "").strip() for name in ("rev", "verdict", "note"))
        if not rev or not verdict:
            raise RefusedError(400, "a mark needs a commit (rev) and a verdict")
        return await acted(bisect_id, lambda: service.mark(bisect_id, rev, verdict, note, session.person))


async def acted(bisect_id: int, action: Callable[[], object]) -> Response:
    """Do the action (in a worker thread: it reads and writes the store) and go back to the bisect's page;
    RefusedError with the status the API would answer."""
    try:
        await run_in_threadpool(action)
    except NotYoursError as exc:
        raise RefusedError(403, str(exc)) from None
    except UnknownBisectError as exc:
        raise RefusedError(404, str(exc)) from None
    except StateError as exc:
        raise RefusedError(409, str(exc)) from None
    except BisectError as exc:
        raise RefusedError(400, str(exc)) from None
    return RedirectResponse(f"/bisects/{bisect_id}", status_code=303)


def same_origin(request: Request) -> bool:
    """Whether the request's Origin, or without one its Referer, is this server's own (as the browser reached it:
    scheme and Host). Neither: refused, as a browser sends one of them with every form POST."""
    own = f"{request.url.scheme}://{request.headers.get('host', '')}"
    origin = request.headers.get("origin")
    if origin is not None:
        return origin == own
    referer = request.headers.get("referer", "")
    return referer == own or referer.startswith(own + "/")


def local_path(target: str) -> str:
    """A path of this server to go to after the login (never another site: `//host` and `http:` are refused)."""
    return target if target.startswith("/") and not target.startswith(("//", "/\\")) else "/"


def submission_request(form: dict[str, str]) -> dict[str, object]:
    """The submit form as the API's request: the fields given, the priority as a number."""
    request: dict[str, object] = {
        name: form[name].strip()
        for name in ("repo", "good", "bad", "recipe", "link", "run")
        if form.get(name, "").strip()
    }
    priority = form.get("priority", "").strip()
    if priority:
        # a number as a number; anything else as given, for check_request to name
        request["priority"] = int(priority) if priority.isdigit() and len(priority) <= MAX_NUMBER_DIGITS else priority
    return request
