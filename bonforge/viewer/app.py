"""The viewer's web app: JSON endpoints that page on the server, an export endpoint, and the static page.

Every error a request can cause is a JSON ``{"error": "..."}`` with a 4xx status: unknown run, stage or
problem (404), a bad parameter, a refused query or one past a limit (400), a missing or wrong token, or a
request that does not come from the viewer's own page (403).

Only the viewer's own page may use the API (``_OwnPage``): a web page elsewhere that the user visits while
the viewer runs must not query the store, not even blind (a form post or an ``<img>`` needs no answer to
do harm). Every ``/api/`` request carries the page's key, a secret of this server written into the page
(a header for the page's own requests, ``?key=`` for an export link); a browser's ``Sec-Fetch-Site`` and
``Origin`` headers, when sent, must say same-origin; a POST body is JSON only. A page of another origin
cannot read the key (no CORS), cannot send the header without a preflight that is never granted, and
cannot reach the server under another name (the Host check against DNS rebinding).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import secrets
import time
from pathlib import Path
from typing import Callable
from urllib.parse import urlsplit

import duckdb
import pyarrow as pa
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from bonforge.errors import BonforgeError, StoreError
from bonforge.storage.store import StageStore
import bonforge.viewer.sql as sqlbox
import bonforge.viewer.views as views
import bonforge.viewer.open_views as open_views
from bonforge.viewer.catalog import Catalog, NotFound
from bonforge.viewer.sql_worker import SqlWorkers
from bonforge.viewer.views import BadRequest, ProblemFilter

STATIC = Path(__file__).parent / "static"
PAGE_MAX = 200
EXPORT_CAP = 100_000
LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")
COOKIE = "bonforge_view_token"
KEY_HEADER = "x-bonforge-key"
KEY_SLOT = '<meta name="bonforge-key" content="">'  # in index.html, filled with the server's key


def create_app(store: StageStore, token: str | None = None, hosts: tuple[str, ...] = LOOPBACK,
               copies: bool = True, limits: sqlbox.Limits = sqlbox.Limits(), key: str | None = None) -> Starlette:
    """The app over ``store``. With ``token``, every request must carry it (``?token=`` once, then the
    cookie the server sets); without one, only requests addressed to a loopback host name are answered
    (a web page elsewhere cannot reach the viewer through DNS rebinding). ``copies``: write the sorted
    copies that make one problem's page quick (``bonforge.viewer.catalog``). ``limits``: what one query
    may use. ``key``: the page's key (default: a fresh one; ``app.state.key``)."""
    cat = Catalog(store, copies=copies, memory_bytes=limits.memory_bytes)
    key = key or new_token()
    page = (STATIC / "index.html").read_text()
    if KEY_SLOT not in page:
        raise RuntimeError(f"{STATIC / 'index.html'} has no {KEY_SLOT}")
    page = page.replace(KEY_SLOT, f'<meta name="bonforge-key" content="{key}">')

    def endpoint(fn):
        async def handle(request: Request):
            from starlette.concurrency import run_in_threadpool

            request.state.body = await request.body()
            t0 = time.perf_counter()
            try:
                response = await run_in_threadpool(fn, cat, limits, request)
            except NotFound as e:
                response = _error(str(e), 404)
            except BonforgeError as e:
                response = _error(str(e), 400)
            except duckdb.OutOfMemoryException as e:
                response = _error("the request needs more than the viewer's memory limit "
                                  f"({sqlbox.size(limits.memory_bytes)}): "
                                  f"{sqlbox.line(e)}", 400)
            response.headers["Server-Timing"] = f"app;dur={1000 * (time.perf_counter() - t0):.2f}"
            return response
        return handle

    def index(request: Request) -> Response:
        return Response(page, media_type="text/html", headers={
            "Cache-Control": "no-store",  # the key is this server's: never a cached page of an earlier one
            "Content-Security-Policy": "frame-ancestors 'none'", "X-Frame-Options": "DENY",
            "Referrer-Policy": "no-referrer"})

    routes = [
        Route("/", index),
        Route("/api/runs", endpoint(_runs)),
        Route("/api/run", endpoint(_run)),
        Route("/api/problems", endpoint(_problems)),
        Route("/api/problem", endpoint(_problem)),
        Route("/api/genselect", endpoint(_genselect)),
        Route("/api/fusion", endpoint(_fusion)),
        Route("/api/open", endpoint(_open)),
        Route("/api/teachers", endpoint(_teachers)),
        Route("/api/labels", endpoint(_labels)),
        Route("/api/diff", endpoint(_diff)),
        Route("/api/sql", endpoint(_sql), methods=["POST"]),
        Route("/api/export", endpoint(_export)),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    middleware = [] if token else [Middleware(TrustedHostMiddleware, allowed_hosts=list(hosts))]
    middleware.append(Middleware(_OwnPage, key=key))

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        app.state.sql.close()
        cat.close()

    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
    app.state.catalog, app.state.key = cat, key
    app.state.sql = SqlWorkers(str(store.root), str(cat.cache), limits)
    if token:
        app.add_middleware(_TokenGate, token=token)
    return app


class _OwnPage:
    """Answers ``/api/`` requests of the viewer's own page only (see the module's docstring)."""

    def __init__(self, app, key: str):
        self.app, self.key = app, key

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith("/api/"):
            refused = self.refused(Request(scope))
            if refused:
                return await _error(*refused)(scope, receive, send)
        return await self.app(scope, receive, send)

    def refused(self, request: Request) -> tuple[str, int] | None:
        h = request.headers
        site = h.get("sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            return f"refused a {site} request: the viewer answers its own page only", 403
        origin = h.get("origin")
        if origin is not None and (origin == "null" or urlsplit(origin).netloc.lower() != h.get("host", "").lower()):
            return f"refused a request from {origin}: the viewer answers its own page only", 403
        given = h.get(KEY_HEADER) or (request.query_params.get("key", "") if _is_export(request) else "")
        if not secrets.compare_digest(given.encode(), self.key.encode()):
            return "this request lacks the viewer page's key: use the page (or `bonforge sql` in scripts)", 403
        if request.method == "POST" and h.get("content-type", "").split(";")[0].strip().lower() != "application/json":
            return "the body must be JSON (Content-Type: application/json)", 415
        return None


def _is_export(request: Request) -> bool:
    """An export is a link the page offers for download: its key may come as ``?key=``."""
    return request.method == "GET" and request.url.path == "/api/export"


class _TokenGate:
    """Refuses requests without the token; a request with ``?token=`` gets it as a cookie."""

    def __init__(self, app, token: str):
        self.app, self.token = app, token

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        request = Request(scope)
        given = request.query_params.get("token") or request.cookies.get(COOKIE) or ""
        if not secrets.compare_digest(given, self.token):
            return await _error("this viewer needs its token: open the URL it printed at start", 403)(
                scope, receive, send)
        if request.query_params.get("token"):
            async def send_cookie(message):
                if message["type"] == "http.response.start":
                    cookie = f"{COOKIE}={self.token}; Path=/; HttpOnly; SameSite=Strict"
                    message.setdefault("headers", []).append((b"set-cookie", cookie.encode()))
                await send(message)
            return await self.app(scope, receive, send_cookie)
        return await self.app(scope, receive, send)


def _error(message: str, status: int) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _json(obj) -> Response:
    return Response(json.dumps(obj, default=_default, ensure_ascii=False, allow_nan=False).encode(),
                    media_type="application/json")


def _default(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, bytes):
        return v.decode(errors="replace")
    return str(v)


# -- parameters ----------------------------------------------------------------------------------------


def _param(request: Request, name: str, default, parse: Callable, check: tuple[Callable, str]):
    """The query parameter ``name``: ``default`` when absent or empty, else ``parse`` of its text, which
    must pass ``check`` = (test, what a good value is); a bad one is refused naming both."""
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return default
    test, good = check
    try:
        value = parse(raw)
    except ValueError:
        value = None
    if value is None or not test(value):
        raise BadRequest(f"parameter {name!r} must be {good}, not {raw!r}")
    return value


def _between(low: int, high: int) -> tuple[Callable, str]:
    return (lambda v: low <= v <= high), f"an integer between {low} and {high}"


FINITE = (math.isfinite, "a finite number")


def _required(request: Request, name: str) -> str:
    value = request.query_params.get(name)
    if not value:
        raise BadRequest(f"parameter {name!r} is required")
    return value


def _filter(request: Request) -> ProblemFilter:
    q = request.query_params
    return ProblemFilter(
        teacher=q.get("teacher") or "*", min_rate=_param(request, "min", 0.0, float, FINITE),
        max_rate=_param(request, "max", 1.0, float, FINITE),
        kept=q.get("kept", ""), status=q.get("status", ""), majority=q.get("majority", ""),
        domain=q.get("domain", ""), q=q.get("q", ""),
        sort=q.get("sort") or "problem_id", desc=q.get("desc") in ("1", "true"),
    ).check()


def _the_run(cat: Catalog, request: Request) -> dict:
    return cat.run(request.query_params.get("run"))


# -- endpoints -----------------------------------------------------------------------------------------


def _runs(cat: Catalog, limits: sqlbox.Limits, request: Request):
    return _json({"store": str(cat.store.root), "runs": views.run_list(cat)})


def _run(cat: Catalog, limits: sqlbox.Limits, request: Request):
    return _json(views.run_summary(cat, _the_run(cat, request)))


def _problems(cat: Catalog, limits: sqlbox.Limits, request: Request):
    page = _param(request, "page", 0, int, _between(0, 10**9))
    size = _param(request, "size", 50, int, _between(1, PAGE_MAX))
    return _json(views.problems_page(cat, _the_run(cat, request), _filter(request), page, size))


def _problem(cat: Catalog, limits: sqlbox.Limits, request: Request):
    return _json(views.problem(cat, _the_run(cat, request), _required(request, "id")))


def _genselect(cat: Catalog, limits: sqlbox.Limits, request: Request):
    return _json(views.genselect(cat, _the_run(cat, request), _required(request, "id")))


def _fusion(cat: Catalog, limits: sqlbox.Limits, request: Request):
    return _json(views.fusion(cat, _the_run(cat, request), _required(request, "id")))


def _open(cat: Catalog, limits: sqlbox.Limits, request: Request):
    return _json(open_views.open_problem(cat, _the_run(cat, request), _required(request, "id")))


def _teachers(cat: Catalog, limits: sqlbox.Limits, request: Request):
    return _json(views.teachers(cat, _the_run(cat, request)))


def _labels(cat: Catalog, limits: sqlbox.Limits, request: Request):
    q = request.query_params
    page = _param(request, "page", 0, int, _between(0, 10**9))
    size = _param(request, "size", 50, int, _between(1, PAGE_MAX))
    return _json(views.label_disagreements(cat, _the_run(cat, request), q.get("teacher", ""), q.get("way", ""),
                                           page, size))


def _diff(cat: Catalog, limits: sqlbox.Limits, request: Request):
    """Two runs' verdicts (or scores) side by side (``bonforge.report.diff``, as `bonforge diff --json`)."""
    from bonforge.report.diff import diff, resolve

    q = request.query_params
    runs = []
    for name in ("a", "b"):
        try:
            runs.append(resolve(cat.store, _required(request, name)))
        except StoreError as e:
            raise NotFound(str(e)) from None
    limit = _param(request, "limit", 50, int, _between(0, PAGE_MAX))
    return _json(diff(cat.store, *runs, q.get("stage") or None, q.get("teacher") or None, limit, limits.memory_bytes))


def _query(request: Request, run: dict, text: str, cap: int) -> tuple[pa.Table, bool]:
    """The SQL box's query, in the run's worker process (``bonforge.viewer.sql_worker``)."""
    return request.app.state.sql.query(run, text, cap)


def _sql(cat: Catalog, limits: sqlbox.Limits, request: Request):
    try:
        body = json.loads(request.state.body or b"null")
    except ValueError:
        body = None
    if not isinstance(body, dict) or not isinstance(body.get("sql"), str):
        raise BadRequest('the body must be a JSON object {"sql": "SELECT ...", "run": ..., "page": ...}')
    page, size = body.get("page") or 0, 100
    if not isinstance(page, int) or page < 0:
        raise BadRequest(f"page must be an integer >= 0, not {page!r}")
    run = cat.run(body.get("run"))
    table, more = _query(request, run, body["sql"], limits.rows)
    rows = table.slice(page * size, size).to_pylist()
    return _json({"columns": table.column_names, "types": [str(t) for t in table.schema.types], "rows": rows,
                  "total": table.num_rows, "capped": more, "page": page, "size": size, "run_id": run.run_id})


FORMATS = {"csv": "text/csv", "json": "application/json", "parquet": "application/vnd.apache.parquet"}


def _export(cat: Catalog, limits: sqlbox.Limits, request: Request):
    fmt = request.query_params.get("format", "csv")
    if fmt not in FORMATS:
        raise BadRequest(f"format must be csv, json or parquet, not {fmt!r}")
    view = _required(request, "view")
    run = _the_run(cat, request)
    if view == "problems":
        table = views.problems_table(cat, run, _filter(request), EXPORT_CAP)
    elif view == "problem":
        table = views.candidates_table(cat, run, _required(request, "id"))
    elif view == "genselect":
        table = pa.Table.from_pylist(views.genselect(cat, run, _required(request, "id"))["prompts"])
    elif view == "fusion":
        table = pa.Table.from_pylist([views.fusion(cat, run, _required(request, "id"))["fusion"]])
    elif view == "sql":
        table, _ = _query(request, run, _required(request, "q"), EXPORT_CAP)
    else:
        raise BadRequest(f"cannot export view {view!r}; choose problems, problem, genselect, fusion or sql")
    name = f"bonforge-{view}-{run.run_id}.{fmt}"
    return Response(_encode(table, fmt), media_type=FORMATS[fmt],
                    headers={"Content-Disposition": f'attachment; filename="{name}"'})


def _encode(table: pa.Table, fmt: str) -> bytes:
    if fmt == "json":
        lines = (json.dumps(r, default=_default, ensure_ascii=False) for r in table.to_pylist())
        return ("\n".join(lines) + "\n").encode()
    sink = io.BytesIO()
    if fmt == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, sink)
    else:
        import pyarrow.csv as pcsv

        pcsv.write_csv(_flat(table), sink)
    return sink.getvalue()


def _flat(table: pa.Table) -> pa.Table:
    """Nested columns (lists, maps) as JSON text: CSV has no other way to hold them."""
    cols = []
    for col in table.columns:
        if pa.types.is_nested(col.type):
            col = pa.array([None if v is None else json.dumps(v, default=_default) for v in col.to_pylist()],
                           pa.string())
        cols.append(col)
    return pa.Table.from_arrays(cols, names=table.column_names)


def new_token() -> str:
    return secrets.token_urlsafe(24)
