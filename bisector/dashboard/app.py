"""The dashboard's FastAPI app: HTML pages, the JSON API they use, and step logs. Nothing here writes.

Every parameter is validated: bad values answer 400 (our checks, and a body that is not JSON) or 422 (FastAPI's type
checks) with one readable message naming the parameter, unknown bisects 404, an unreachable database 503; never a
traceback.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query, Request
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from bisector.dashboard.logs import LogAccessError, read_log, relative_log_path
from bisector.dashboard.plot import build_plot
from bisector.db.jobs import JobQueue
from bisector.db.queries import BisectFilter
from bisector.db.store import Store
from bisector.report import BisectReport, report_json, steps_json
from bisector.report.history import (
    MAX_LIMIT,
    compute_stats,
    culprit_label,
    find_bisects,
    log_tail,
    parse_filter,
    summary_json,
)
from bisector.report.resume import LOCAL
from bisector.report.text import fmt_date
from bisector.service.tokens import TokenBook
from bisector.vocab.errors import BisectError, StoreError, UnknownBisectError

PACKAGE_DIR = Path(__file__).parent
TOKEN_COOKIE = "bisect_token"
DASHBOARD_NO_TOKEN = "no token given: send Authorization: Bearer TOKEN, or open a page with ?token=TOKEN once"
DASHBOARD_WRONG_TOKEN = "token not accepted: the token is not this dashboard's"
NOT_JSON = "the request body is not JSON"
MAX_ID = 2**31 - 1
BisectId = Annotated[int, PathParam(ge=1, le=MAX_ID, description="The bisect's id.")]
Text = Annotated[str | None, Query(max_length=200)]


@dataclass(frozen=True)
class ListQuery:
    """The bisect list's query, filtered as `bisect list` filters: the list API's and the list page's."""

    where: BisectFilter
    filters: dict[str, str | None]  # repo, status, metric, culprit, since, owner: as given (the page's form shows them)
    limit: int


def list_query(
    repo: Text = None,
    status: Text = None,
    metric: Text = None,
    culprit: Text = None,
    since: Text = None,
    owner: Text = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 50,
) -> ListQuery:
    """The query of a request; InputError (a 400) names a bad value."""
    filters = {"repo": repo, "status": status, "metric": metric, "culprit": culprit, "since": since, "owner": owner}
    return ListQuery(parse_filter(repo, status, metric, culprit, since, owner=owner), filters, limit)


ListQueryParam = Annotated[ListQuery, Depends(list_query)]


@dataclass(frozen=True)
class DashboardSettings:
    db_url: str | None  # None: the default store
    log_dir: Path  # step logs are served only from below this folder
    tokens: TokenBook | None  # when set, every request needs one (Authorization: Bearer, or the cookie ?token= or
    # the login form sets)


def create_app(settings: DashboardSettings, store: Store) -> FastAPI:
    """The app over an open store (the caller opens it first, so that a bad URL fails before serving)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            store.close()

    # No /docs page: FastAPI's Swagger UI loads its assets from a CDN. The OpenAPI schema is served.
    app = FastAPI(
        title="gpu-bisect dashboard",
        version="1",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url="/api/openapi.json",
    )
    app.state.store = store
    templates = Jinja2Templates(directory=PACKAGE_DIR / "templates")
    app.state.templates = templates  # the service's pages (bisector/dashboard/actions.py) render with it too
    templates.env.globals["culprit_label"] = culprit_label
    templates.env.globals["fmt_date"] = fmt_date
    app.mount("/static", StaticFiles(directory=PACKAGE_DIR / "static"), name="static")
    _add_error_handlers(app)
    if settings.tokens is not None:
        _require_token(app, settings.tokens)

    def store_of(request: Request) -> Store:
        store: Store = request.app.state.store
        return store

    # --- JSON API ------------------------------------------------------------------------------------

    @app.get("/api/bisects", summary="Bisects, newest first, filtered as `bisect list` filters")
    def api_bisects(request: Request, query: ListQueryParam) -> list[dict[str, object]]:
        return [summary_json(s) for s in find_bisects(store_of(request), query.where, query.limit)]

    @app.get("/api/bisects/{bisect_id}", summary="One bisect's report (as `bisect report --format json`)")
    def api_bisect(request: Request, bisect_id: BisectId) -> dict[str, object]:
        return report_json(BisectReport.load(store_of(request), bisect_id))

    @app.get("/api/bisects/{bisect_id}/steps", summary="A bisect's status, progress and steps with log tails")
    def api_steps(request: Request, bisect_id: BisectId) -> dict[str, object]:
        return _steps_json(BisectReport.load(store_of(request), bisect_id), settings.log_dir)

    @app.get("/api/stats", summary="Per repository and metric aggregates, and bisects per week")
    def api_stats(request: Request, repo: Text = None, since: Text = None) -> dict[str, object]:
        return compute_stats(store_of(request), parse_filter(repo=repo, since=since)).to_json()

    @app.get("/logs/{log_path:path}", response_class=PlainTextResponse, summary="A step log, from the log folder")
    def logs(log_path: Annotated[str, PathParam(max_length=1000)]) -> PlainTextResponse:
        return PlainTextResponse(read_log(settings.log_dir, log_path))

    # --- pages ---------------------------------------------------------------------------------------

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def list_page(request: Request, query: ListQueryParam) -> Response:
        summaries = find_bisects(store_of(request), query.where, query.limit)
        context = {"summaries": summaries, "filters": query.filters, "limit": query.limit}
        return templates.TemplateResponse(request, "list.html", context)

    @app.get("/bisects/{bisect_id}", response_class=HTMLResponse, include_in_schema=False)
    def bisect_page(request: Request, bisect_id: BisectId) -> Response:
        store = store_of(request)
        report = BisectReport.load(store, bisect_id)
        context = {
            "report": report,
            "findings": _finding_rows(report),
            "conclusion": report.explanation.conclusion if report.explanation else None,
            "data": report_json(report),
            "plot": build_plot(report),
            "steps": _steps_json(report, settings.log_dir)["steps"],
            "queued": JobQueue(store).waiting(bisect_id) is not None,  # a server's job that waits for a slot
            "commands": LOCAL,  # how the page's reader resumes it (a server's pages: with --server)
        }
        return templates.TemplateResponse(request, "bisect.html", context)

    @app.get("/stats", response_class=HTMLResponse, include_in_schema=False)
    def stats_page(request: Request, repo: Text = None, since: Text = None) -> Response:
        stats = compute_stats(store_of(request), parse_filter(repo=repo, since=since))
        peak = max((count for _, count in stats.weekly), default=0)
        context = {"stats": stats, "peak": peak, "filters": {"repo": repo, "since": since}}
        return templates.TemplateResponse(request, "stats.html", context)

    return app


def _finding_rows(report: BisectReport) -> list[dict[str, object]]:
    """The explanation's rows, each static one with its evidence (confirmed at run time first)."""
    if report.explanation is None:
        return []
    from bisector.analysis import finding_rows  # only for a bisect that has an explanation

    return finding_rows(report.explanation)


def _steps_json(report: BisectReport, log_dir: Path) -> dict[str, object]:
    steps = []
    for step in steps_json(report):
        relative = relative_log_path(log_dir, str(step["log_path"])) if step["log_path"] else None
        step["log_url"] = f"/logs/{relative}" if relative else None
        step["log_tail"] = log_tail(log_dir / relative) if relative else None
        steps.append(step)
    done = sum(1 for s in steps if s["verdict"] != "running")
    return {
        "id": report.record.id,
        "status": report.record.status.value,
        "progress": {"steps": len(steps), "finished": done, "running": len(steps) - done},
        "steps": steps,
    }


def _add_error_handlers(app: FastAPI) -> None:
    def answer(request: Request, status: int, message: str) -> Response:
        if request.url.path.startswith(("/api/", "/logs/")):
            return JSONResponse({"detail": message}, status_code=status)
        return PlainTextResponse(f"{status}: {message}\n", status_code=status)

    async def on_bisect_error(request: Request, exc: Exception) -> Response:
        if isinstance(exc, UnknownBisectError):
            return answer(request, 404, str(exc))
        if isinstance(exc, LogAccessError):
            return answer(request, exc.status, str(exc))
        if isinstance(exc, StoreError):
            return answer(request, 503, str(exc))
        return answer(request, 400, str(exc))

    async def on_validation_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        if any(e["type"] == "json_invalid" for e in exc.errors()):
            return answer(request, 400, NOT_JSON)
        return answer(request, 422, "; ".join(_problem(e) for e in exc.errors()) or "invalid request")

    app.add_exception_handler(BisectError, on_bisect_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)


def _problem(error: Any) -> str:
    """A validation error as `name: message`, the name the parameter's (its location, `query` or `body`, left out),
    or the message alone where the error is about the whole of it."""
    name = ".".join(str(part) for part in error["loc"][1:] if str(part))
    return f"{name}: {error['msg']}" if name else str(error["msg"])


def _open_path(path: str) -> bool:
    """Reachable without a token: the login form, where a browser gives one, and the style it uses."""
    return path == "/login" or path.startswith("/static/")


def _require_token(app: FastAPI, tokens: TokenBook) -> None:
    @app.middleware("http")
    async def check_token(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        if _open_path(request.url.path):
            return await call_next(request)
        given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        given = given or request.query_params.get("token") or request.cookies.get(TOKEN_COOKIE, "")
        if tokens.who(given) is None:
            detail = DASHBOARD_WRONG_TOKEN if given else DASHBOARD_NO_TOKEN
            return JSONResponse({"detail": detail}, status_code=401, headers={"WWW-Authenticate": "Bearer"})
        response = await call_next(request)
        if request.query_params.get("token"):
            set_token_cookie(request, response, given)
        return response


def base_url(request: Request) -> str:
    """This server's URL as the request reached it (what a `bisect --server` of the same reader would give)."""
    return str(request.base_url).rstrip("/")


def set_token_cookie(request: Request, response: Response, token: str) -> None:
    """The browser keeps the token for its session: HttpOnly (no script reads it), SameSite=Strict (no other
    site's request carries it), Secure when served over https."""
    secure = request.url.scheme == "https"
    response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict", secure=secure)
