"""The HTTP API and the page: thin shells over the library functions.

Safety rules of web mode (a client is not trusted):

* nothing a client sends makes the server read a file or fetch a URL: a ``model`` string must be
  a bundled registry name (or, only when the operator started the server with ``allow_hub``, a
  Hugging Face repo id); anything else is rejected. A model can also be pasted as a config.json
  object. Static files are a fixed list loaded at start-up.
* bounded work: request bodies are limited in size and must arrive within a read time limit (408);
  option lists in a search request are deduplicated and bounded before any search runs
  (bodies.py); each heavy computation (estimate, serving curve, launch files, recommend, compare)
  runs in a pre-started worker process that is killed at the time limit (504) and capped in memory
  (413), see workers.py; each client may have only a few computations in flight (429) and the
  server only a bounded queue (503). Lists and look-ups answer in-process.
* every error is JSON ``{"error": {"what", "why", "fix", "matches", "close_matches", "see"}}`` and quotes at
  most a short excerpt of the client's input; user errors are 4xx, and an unexpected failure is a
  500 with no internals (the traceback goes to the server log only);
* the CLI binds to 127.0.0.1 by default and then accepts only loopback Host headers.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import json
import logging
import math
import threading
from dataclasses import dataclass
from importlib import resources
from typing import Annotated, Any, Callable, Literal, Optional, get_args

from fastapi import Body, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import AfterValidator, BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from .. import __version__
from ..errors import CatalogHint, GpuplanError
from ..scenario import Scenario
from . import jobs
from .bodies import BodyError, CompareRequest, LaunchRequest, RecommendRequest, ServingCurveRequest, check_scenario
from .jobs import WebError, clean, error_body, excerpt, resolve_model
from .workers import DEFAULT_MEMORY_LIMIT, Deadline, WorkerPool, check_server_options

log = logging.getLogger("gpuplan.web")

MAX_BODY_BYTES = 256 * 1024
BODY_TIMEOUT_S = 10.0             # a request body must arrive within this (slow clients get 408)
TIME_LIMIT_S = 30.0
WORKERS = 4
QUEUE_WAIT_S = 5.0
PER_CLIENT = 2                    # heavy computations in flight per client address
QUEUE_FACTOR = 2                  # at most WORKERS * QUEUE_FACTOR heavy requests waiting for a worker
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]", "::1")
_STATIC = {"index.html": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8",
           "style.css": "text/css; charset=utf-8", "favicon.svg": "image/svg+xml"}
_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
_WARM = ("gpuplan.api", "gpuplan.search", "gpuplan.launch", "gpuplan.estimate.speed", "gpuplan.web.jobs:warm_up")


# ---- errors ---------------------------------------------------------------------------------------------
def _internal() -> WebError:
    return WebError(500, "internal error", "the server failed while handling this request; this is a gpuplan bug.",
                    "report it with the request that caused it (the server log has the details).")


def _unavailable(feature: str) -> WebError:
    return WebError(501, feature, "is not available in this version of gpuplan.", "upgrade gpuplan.")


def _too_slow(limit: float) -> WebError:
    return WebError(504, "computation", f"took longer than the server's limit of {limit:g} s and was stopped.",
                    "narrow the request (fewer GPUs, counts or options to search), or run the CLI locally.")


def _busy(retry_s: int) -> WebError:
    return WebError(503, "server", "is busy with other computations.", f"retry in {retry_s} s.",
                    headers={"Retry-After": str(retry_s)})


class SeeDetail(BaseModel):
    kind: Literal["catalog", "field", "request"]
    name: str
    route: str | None


class ErrorDetail(BaseModel):
    what: str
    why: str
    fix: str
    matches: list[str]
    close_matches: list[str]
    message: str
    see: SeeDetail | None = None


class ErrorBody(BaseModel):
    error: ErrorDetail


_STATUS_TEXT = {400: "bad input (a field's value, an unknown name, a malformed request)",
                404: "no such model, GPU or path", 405: "method not allowed (the Allow header lists the right one)",
                408: "the request body did not arrive within the read time limit",
                413: "the request body, or the computation's memory, is over the server's limit",
                415: "the request body was not sent as JSON (Content-Type: application/json)",
                422: "the request body does not match the schema, or is over a bound on work",
                429: "this client already has the most computations in flight (see Retry-After)",
                500: "a gpuplan bug (no internals in the body)", 501: "feature not available in this version",
                503: "the server is busy (see Retry-After)", 504: "the computation took longer than the time limit"}
ERRORS = {code: {"model": ErrorBody, "description": text} for code, text in _STATUS_TEXT.items()}


# ---- JSON -----------------------------------------------------------------------------------------------
def json_response(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    text = json.dumps(clean(obj), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return Response(text.encode("utf-8"), status_code=status, media_type="application/json", headers=headers)


def _json_bytes(obj: Any) -> Response:
    """A worker's result: already JSON-safe."""
    text = json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return Response(text.encode("utf-8"), media_type="application/json")


def _raise_for(err: BaseException) -> None:
    """Turn an exception of a library call into the WebError to answer."""
    if isinstance(err, (GpuplanError, WebError)):
        raise err
    if isinstance(err, ImportError):
        if (err.name or "").startswith("gpuplan"):
            raise _unavailable(err.name) from None
        log.error("import failed in web request", exc_info=err)
        raise _internal() from None
    if isinstance(err, MemoryError):
        raise _too_big() from None
    log.error("unexpected error in web request", exc_info=err)
    raise _internal() from None


def _too_big(limit: int | None = None) -> WebError:
    size = f" of {limit / 1024 ** 3:g} GiB" if limit else ""
    return WebError(413, "computation", f"needed more memory than the server's per-request limit{size}; the request "
                    "is too large for this server.", "narrow it: fewer GPUs, counts or option lists, a shorter "
                    "sequence, or run the CLI locally.")


# ---- in-process runner (fast calls; and heavy ones when the app runs without worker processes) -----------
class Runner:
    """Runs library calls in worker threads: bounded concurrency, a wait limit and a time limit.
    A thread cannot be stopped: its slot stays taken until the call really ends."""

    def __init__(self, workers: int, time_limit_s: float, queue_wait_s: float):
        self.pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="gpuplan-web")
        self.slots = threading.BoundedSemaphore(workers)
        self.time_limit_s, self.queue_wait_s = time_limit_s, queue_wait_s

    async def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.queue_wait_s
        while not self.slots.acquire(blocking=False):
            if loop.time() > deadline:
                raise _busy(max(1, math.ceil(self.queue_wait_s)))
            await asyncio.sleep(0.01)
        try:
            fut = self.pool.submit(fn, *args, **kwargs)
        except RuntimeError:
            self.slots.release()
            raise WebError(503, "server", "is shutting down.", "retry later.") from None
        fut.add_done_callback(lambda _f: self.slots.release())
        try:
            return await asyncio.wait_for(asyncio.wrap_future(fut), self.time_limit_s)
        except asyncio.TimeoutError:
            raise _too_slow(self.time_limit_s) from None
        except Exception as err:  # noqa: BLE001 - every failure becomes an explained answer
            _raise_for(err)

    def shutdown(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


# ---- heavy computations: per-client and global bounds, then a worker process ----------------------------
@dataclass
class Settings:
    allow_hub: bool = False
    max_body_bytes: int = MAX_BODY_BYTES
    time_limit_s: float = TIME_LIMIT_S
    workers: int = WORKERS
    queue_wait_s: float = QUEUE_WAIT_S
    per_client: int = PER_CLIENT
    body_timeout_s: float = BODY_TIMEOUT_S
    memory_limit: int | None = DEFAULT_MEMORY_LIMIT
    isolation: str = "process"


class Compute:
    """Admission (per client, then a bounded queue) and dispatch of the heavy jobs."""

    def __init__(self, s: Settings, threads: Runner):
        self.s, self.threads = s, threads
        self.pool = WorkerPool(s.workers, memory_limit=s.memory_limit, warm=_WARM) if s.isolation == "process" else None
        self.in_flight: dict[str, int] = {}
        self.waiting = 0

    def _admit(self, client: str) -> None:
        if self.in_flight.get(client, 0) >= self.s.per_client:
            retry = max(1, math.ceil(min(self.s.time_limit_s, 10.0)))
            raise WebError(429, "client", f"already has {self.s.per_client} computations in flight on this server "
                           f"(the limit per client).", f"wait for them to finish; retry in {retry} s.",
                           headers={"Retry-After": str(retry)})
        if self.waiting >= self.s.workers * QUEUE_FACTOR:
            raise _busy(max(1, math.ceil(self.s.queue_wait_s)))

    async def __call__(self, request: Request, fn: Callable[..., Any], *args: Any) -> Response:
        client = request.client.host if request.client else "unknown"
        self._admit(client)
        self.in_flight[client] = self.in_flight.get(client, 0) + 1
        held: list = []         # a worker being restarted after this client's request still counts for it
        try:
            if self.pool is None:
                return json_response(await self.threads(fn, *args))
            return _json_bytes(await self._on_worker(fn, args, held))
        finally:
            if held and held[0] is not None:
                held[0].add_done_callback(lambda _t: self._release(client))
            else:
                self._release(client)

    def _release(self, client: str) -> None:
        self.in_flight[client] -= 1
        if not self.in_flight[client]:
            del self.in_flight[client]

    async def _on_worker(self, fn: Callable[..., Any], args: tuple, held: list) -> Any:
        self.waiting += 1
        try:
            worker = await self.pool.acquire(self.s.queue_wait_s)
        finally:
            self.waiting -= 1
        if worker is None:
            raise _busy(max(1, math.ceil(self.s.queue_wait_s)))
        try:
            reply, replacement = await self.pool.run(worker, fn, args, {}, self.s.time_limit_s)
        except Deadline as stop:
            held.append(stop.replacement)
            raise _too_slow(self.s.time_limit_s) from None
        held.append(replacement)
        return _reply(reply, self.s.memory_limit)

    async def start(self) -> None:
        if self.pool is not None:
            await self.pool.start()

    def shutdown(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()


def _reply(reply: tuple, memory_limit: int | None) -> Any:
    kind = reply[0]
    if kind == "ok":
        return reply[1]
    if kind == "error":
        raise WebError(*reply[1:6], see=reply[6])
    if kind == "memory":
        raise _too_big(memory_limit)
    if kind == "died":
        raise WebError(503, "computation", "ended abnormally (the worker process stopped); it was not completed.",
                       "retry; if it happens again, narrow the request or run the CLI locally.",
                       headers={"Retry-After": "1"})
    raise _internal()
# ---- ASGI guard: host check, body limit and read time, security headers, last-resort 500 ----------------
def _is_loopback_ip(name: str) -> bool:
    import ipaddress
    try:
        return ipaddress.ip_address(name.strip("[]")).is_loopback
    except ValueError:
        return False


def host_name(host: str) -> str:
    """The name part of a Host header value ('[::1]:8000' -> '[::1]', 'a.b:80' -> 'a.b')."""
    host = host.strip().lower()
    if host.startswith("["):
        return host.split("]", 1)[0] + "]"
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class Guard:
    def __init__(self, app: Any, *, max_body_bytes: int, allowed_hosts: tuple[str, ...] | None,
                 body_timeout_s: float = BODY_TIMEOUT_S):
        self.app, self.max_body_bytes, self.body_timeout_s = app, max_body_bytes, body_timeout_s
        self.allowed_hosts = tuple(host_name(h) if h.startswith("[") else h.lower() for h in allowed_hosts) \
            if allowed_hosts else None
        # bound to loopback: any loopback address literal is as safe as the names (no DNS rebinding)
        self.loopback_ok = bool(allowed_hosts) and any(h in LOOPBACK_HOSTS or _is_loopback_ip(h) for h in allowed_hosts)

    async def _send_error(self, send, err: WebError, extra: list[tuple[bytes, bytes]] = ()) -> None:
        body = json.dumps(err.body()).encode()
        await send({"type": "http.response.start", "status": err.status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                *extra, *_security_headers()]})
        await send({"type": "http.response.body", "body": body})

    def _host_ok(self, headers: dict[bytes, bytes]) -> bool:
        if self.allowed_hosts is None:
            return True
        name = host_name(headers.get(b"host", b"").decode("latin-1"))
        bare = name.strip("[]")
        return name in self.allowed_hosts or bare in self.allowed_hosts or (self.loopback_ok and _is_loopback_ip(bare))

    async def _read_body(self, receive, headers: dict[bytes, bytes]) -> list[bytes] | WebError | None:
        """The whole body, an error to answer, or None when the client went away."""
        limit = self.max_body_bytes
        too_big = WebError(413, "request body", f"is larger than the server's limit of {limit // 1024} KiB.",
                           "send a smaller request (a pasted config.json is a few KiB).")
        declared = headers.get(b"content-length")
        try:
            if declared is not None and int(declared) > limit:
                return too_big
        except ValueError:
            return WebError(400, "Content-Length header", "is not a number.", "send a valid request.")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.body_timeout_s
        chunks, size = [], 0
        while True:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except asyncio.TimeoutError:
                return WebError(408, "request body", f"did not arrive within the server's limit of "
                                f"{self.body_timeout_s:g} s.", "send the whole request at once.")
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return too_big
            chunks.append(chunk)
            if not message.get("more_body"):
                return chunks

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        if not self._host_ok(headers):
            return await self._send_error(send, WebError(
                400, "Host header", "is not one this server answers to (it listens on loopback only).",
                "open the page as http://127.0.0.1:PORT/ or start `gpuplan web --host` with the name you use."))
        inner_receive = receive
        if scope.get("method") in ("POST", "PUT", "PATCH"):
            chunks = await self._read_body(receive, headers)
            if chunks is None:
                return
            if isinstance(chunks, WebError):
                return await self._send_error(send, chunks, [(b"connection", b"close")])
            inner_receive = _replay(b"".join(chunks), receive)
        await self._forward(scope, inner_receive, send)

    async def _forward(self, scope, receive, send) -> None:
        started = False

        async def guarded_send(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message = {**message, "headers": [*message.get("headers", []), *_security_headers()]}
            await send(message)

        try:
            await self.app(scope, receive, guarded_send)
        except asyncio.CancelledError:
            # the server is stopping (Ctrl-C) and its grace time ran out: answer if we still can, and end
            # quietly; the computation's worker process is killed by the pool's shutdown
            if not started:
                with contextlib.suppress(Exception):
                    await self._send_error(send, WebError(503, "server", "is stopping.", "retry when it is back."))
        except Exception:
            log.exception("unhandled error in web request")
            if not started:
                await self._send_error(send, _internal())


def _replay(body: bytes, receive):
    replayed = False

    async def replay():
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()
    return replay


def _security_headers() -> list[tuple[bytes, bytes]]:
    return [(b"x-content-type-options", b"nosniff"), (b"x-frame-options", b"DENY"),
            (b"referrer-policy", b"no-referrer"), (b"content-security-policy", _CSP.encode()),
            (b"cache-control", b"no-store")]


def _vocab() -> dict[str, Any]:
    from .. import scenario as s
    from ..dtypes import KV_FORMAT_BITS, WEIGHT_FORMATS
    out: dict[str, Any] = {
        "tasks": list(get_args(s.Task)), "methods": list(get_args(s.Train.model_fields["method"].annotation)),
        "precisions": list(get_args(s.Precision)), "optimizers": list(get_args(s.Optimizer)),
        "recompute": list(get_args(s.Recompute)), "attention": list(get_args(s.Attention)),
        "offload": list(get_args(s.Offload)), "frameworks": list(get_args(s.Framework)),
        "infer_engines": list(get_args(s.Engine)), "weights": list(WEIGHT_FORMATS), "kv_cache": list(KV_FORMAT_BITS),
        "launch_engines": [], "train_launch_engines": [], "serve_launch_engines": [],
        "objectives": [], "presets": [],
    }
    try:
        from .. import launch
        out["launch_engines"] = list(launch.ENGINES)
        out["train_launch_engines"] = list(getattr(launch, "TRAIN_ENGINES", ()))
        out["serve_launch_engines"] = list(getattr(launch, "SERVE_ENGINES", ()))
    except ImportError:
        pass
    try:
        from ..search.rank import OBJECTIVES
        out["objectives"] = [o for o in OBJECTIVES if o != "weighted"]
    except ImportError:
        pass
    try:
        from ..search.presets import PRESETS
        out["presets"] = list(PRESETS)
        out["preset_summaries"] = {k: getattr(v, "summary", "") for k, v in PRESETS.items()}
    except ImportError:
        pass
    return out


@functools.lru_cache(maxsize=1)
def _model_summaries() -> tuple[dict[str, Any], ...]:
    from ..models import get_model, list_models
    out = []
    for e in list_models():
        try:
            m = get_model(e.name, allow_hub=False)
            out.append({"name": e.name, "hf_id": e.hf_id, "aliases": list(e.aliases), "model_type": m.model_type,
                        "params_total": m.params_total, "params_active": m.params_active,
                        "num_layers": m.num_layers, "hidden_size": m.hidden_size,
                        "max_position_embeddings": m.max_position, "is_moe": bool(m.is_moe)})
        except GpuplanError:      # a registry entry the spec reader cannot read yet: list it without numbers
            out.append({"name": e.name, "hf_id": e.hf_id, "aliases": list(e.aliases)})
    return tuple(out)


def _read_static() -> dict[str, bytes]:
    base = resources.files("gpuplan.web") / "static"
    files = {}
    for name in _STATIC:
        try:
            files[name] = (base / name).read_bytes()
        except (FileNotFoundError, OSError):
            pass
    return files


# ---- routes, grouped by concern ---------------------------------------------------------------------------
def _suggestions(e: dict[str, Any], path: str) -> list[str]:
    """Close matches for one error (scenario.error_suggestions), as the CLI gives them: a body that is a scenario
    (/api/estimate) or holds one under 'scenario' (the other plan routes)."""
    from ..scenario import error_suggestions
    loc = tuple(x for x in e.get("loc", ()) if not str(x).startswith("function-"))
    if loc[:1] == ("body",):
        loc = loc[1:]
    if path.rstrip("/") != "/api/estimate":
        if loc[:1] != ("scenario",):
            return []
        loc = loc[1:]
    return [excerpt(m, 60) for m in error_suggestions({**e, "loc": loc}, Scenario)]


def _validation_line(e: dict[str, Any]) -> tuple[str, str]:
    """(what, one line) for one pydantic error, quoting at most an excerpt of the client's input."""
    ctx = e.get("ctx") or {}
    if isinstance(ctx.get("error"), BodyError):
        return "request body", f"{ctx['error']}"
    loc = [excerpt(x, 40) for x in e.get("loc", ()) if not str(x).startswith("function-")]
    what = "request"
    if loc and loc[0] in ("body", "query", "path"):
        what = {"body": "request body", "query": "query parameter", "path": "URL path"}[loc[0]]
        loc = loc[1:]
    where = ".".join(loc) or "(top level)"
    kind = e.get("type", "")
    msg = str(e.get("msg", "is invalid")).removeprefix("Value error, ")
    if kind == "extra_forbidden":
        msg = "is not a known field (check the spelling; GET /api/schema lists the scenario fields)"
    elif kind == "missing":
        msg = "is required"
    elif kind == "json_invalid":
        msg = f"is not valid JSON ({excerpt(ctx.get('error', 'decode error'))})"
        where = "(body)"
    return what, f"'{where}' {excerpt(msg, 300)}"


def _add_error_handlers(app: FastAPI) -> None:
    """Always JSON, never a traceback."""
    @app.exception_handler(WebError)
    async def _web_error(_req: Request, err: WebError):
        return json_response(err.body(), err.status, err.headers or None)

    @app.exception_handler(GpuplanError)
    async def _gpuplan_error(_req: Request, err: GpuplanError):
        web = WebError.of(err)
        return json_response(web.body(), web.status)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(req: Request, err: RequestValidationError):
        if any(tuple(e.get("loc", ())) == ("body",) and isinstance(e.get("input"), (bytes, bytearray))
               for e in err.errors()[:20]):
            # FastAPI reads a body as JSON only under a JSON media type; any other (curl -d sends
            # application/x-www-form-urlencoded) hands pydantic the raw bytes, which read as "not an object"
            sent = excerpt(req.headers.get("content-type", ""), 60)
            return json_response(error_body("Content-Type header", (f"is '{sent}'" if sent else "is missing") +
                                            "; the API reads a request body only as JSON.",
                                            "send the header 'Content-Type: application/json' (curl: -H "
                                            "'Content-Type: application/json' --data @scenario.json)."), 415)
        lines, what, nears = [], "request", []
        for e in err.errors()[:20]:
            what, line = _validation_line(e)
            if line not in lines:
                lines.append(line)
                nears.append(_suggestions(e, req.url.path))
        matches = list(dict.fromkeys(m for near in nears for m in near))
        if len(lines) > 1:     # several fields: say which field each close match is for (as the CLI does)
            lines = [line + (f" (close: {', '.join(near)})" if near else "") for line, near in zip(lines, nears)]
        schema = CatalogHint("schema", "every scenario field")
        return json_response(error_body(what, "; ".join(lines) + ".",
                                        f"correct the field(s) named above; {jobs.web_words(schema)}.",
                                        matches, jobs.see_json(schema)), 422)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(req: Request, err: StarletteHTTPException):
        path = excerpt(req.url.path)
        if err.status_code == 404:
            body = error_body(f"path '{path}'", "is not an endpoint of this server.",
                              "GET /openapi.json lists the endpoints; the page is at /.")
        elif err.status_code == 405:
            allow = (err.headers or {}).get("Allow") or (err.headers or {}).get("allow") or ""
            body = error_body(f"method {excerpt(req.method, 20)} on '{path}'", "is not allowed" +
                              (f"; this path takes {allow}." if allow else "."),
                              "GET /openapi.json says which method each endpoint takes.")
        elif err.status_code == 400 and "parsing the body" in str(err.detail):
            body = error_body("request body", "could not be parsed as JSON (it may be nested too deeply).",
                              "send one JSON object; a scenario nests only a few levels.")
        else:
            body = error_body("request", excerpt(err.detail, 300), "check the request against GET /openapi.json.")
        return json_response(body, err.status_code, dict(err.headers or {}) or None)


def _add_page_routes(app: FastAPI, static: dict[str, bytes]) -> None:
    def _asset(name: str) -> Response:
        if name not in static:
            raise WebError(404, f"file '{name}'", "is not part of this installation.", "reinstall gpuplan[web].")
        return Response(static[name], media_type=_STATIC[name])

    @app.get("/", include_in_schema=False)
    async def page():
        return _asset("index.html")

    @app.get("/static/app.js", include_in_schema=False)
    async def app_js():
        return _asset("app.js")

    @app.get("/static/style.css", include_in_schema=False)
    async def style_css():
        return _asset("style.css")

    @app.get("/favicon.svg", include_in_schema=False)
    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon():
        return _asset("favicon.svg")


def _add_meta_routes(app: FastAPI, s: Settings, run: Runner) -> None:
    @app.get("/healthz", tags=["meta"], summary="liveness check", responses=ERRORS)
    async def healthz():
        return json_response({"status": "ok", "version": __version__})

    @app.get("/api/schema", tags=["meta"], summary="JSON schema of a scenario", responses=ERRORS)
    async def schema():
        return json_response(Scenario.model_json_schema())

    @app.get("/api/options", tags=["meta"], summary="vocabularies for forms: tasks, formats, engines, objectives",
             responses=ERRORS)
    async def options():
        data = await run(_vocab)
        data["allow_hub"] = s.allow_hub
        data["limits"] = {"max_body_bytes": s.max_body_bytes, "time_limit_s": s.time_limit_s,
                          "per_client": s.per_client, "body_timeout_s": s.body_timeout_s}
        return json_response(data)


def _add_lookup_routes(app: FastAPI, s: Settings, run: Runner) -> None:
    @app.get("/api/models", tags=["models"], summary="bundled models (optionally filtered)", responses=ERRORS)
    async def models(search: Annotated[Optional[str], Query(max_length=100, description="substring of name or HF id")] = None):
        items = await run(_model_summaries)
        if search:
            q = search.strip().lower()
            items = tuple(m for m in items if q in m["name"].lower() or q in m["hf_id"].lower()
                          or any(q in a.lower() for a in m.get("aliases", ())))
        return json_response({"models": list(items), "count": len(items)})

    @app.get("/api/models/{name:path}", tags=["models"], summary="one model: parameters, KV cache, FLOPs",
             responses=ERRORS)
    async def model(name: str, seq_len: Annotated[int, Query(gt=0, le=10_000_000)] = 2048):
        def work():
            from ..models import get_model
            ref = resolve_model(name, allow_hub=s.allow_hub)
            return get_model(ref, allow_hub=False).to_dict(seq_len)
        return json_response(await run(work))

    @app.get("/api/gpus", tags=["hardware"], summary="accelerators in the catalog (optionally filtered)",
             responses=ERRORS)
    async def gpus(filter: Annotated[Optional[str], Query(max_length=100, description="substring of id, name, vendor, family or segment")] = None):  # noqa: A002
        def work():
            from ..hardware import list_gpus
            return [g.to_dict() for g in list_gpus(filter)]
        items = await run(work)
        return json_response({"gpus": items, "count": len(items)})

    @app.get("/api/gpus/{gpu_id}", tags=["hardware"], summary="one accelerator's facts", responses=ERRORS)
    async def gpu(gpu_id: Annotated[str, Path(max_length=100)]):
        def work():
            from ..hardware import get_gpu
            return get_gpu(gpu_id).to_dict()
        return json_response(await run(work))


CheckedScenario = Annotated[Scenario, AfterValidator(check_scenario), Body()]


def _add_plan_routes(app: FastAPI, s: Settings, compute: Compute) -> None:
    hub = s.allow_hub

    @app.post("/api/estimate", tags=["plan"], responses=ERRORS,
              summary="memory, speed and cost of one scenario (DESIGN §3.2) plus what fits")
    async def estimate(request: Request, scenario: CheckedScenario):
        return await compute(request, jobs.estimate_job, scenario, hub)

    @app.post("/api/serving-curve", tags=["plan"], responses=ERRORS,
              summary="serving TTFT, TPOT and throughput versus concurrency")
    async def serving_curve(request: Request, req: ServingCurveRequest):
        return await compute(request, jobs.serving_curve_job, req.scenario, req.concurrencies, hub)

    @app.post("/api/launch", tags=["plan"], summary="launch configuration files for an engine", responses=ERRORS)
    async def launch(request: Request, req: LaunchRequest):
        return await compute(request, jobs.launch_job, req.scenario, req.engine, req.inner, req.include_estimate, hub)

    @app.post("/api/recommend", tags=["plan"], responses=ERRORS,
              summary="search GPUs x counts x layouts: ranked plans, Pareto front, rejections")
    async def recommend(request: Request, req: RecommendRequest):
        return await compute(request, jobs.recommend_job, req.scenario, req.options(), hub)

    @app.post("/api/compare", tags=["plan"], summary="one workload on several GPUs, side by side", responses=ERRORS)
    async def compare(request: Request, req: CompareRequest):
        return await compute(request, jobs.compare_job, req.scenario, list(req.gpus), req.options(), hub)


# ---- the app --------------------------------------------------------------------------------------------
def create_app(*, allow_hub: bool = False, max_body_bytes: int = MAX_BODY_BYTES, time_limit_s: float = TIME_LIMIT_S,
               workers: int = WORKERS, queue_wait_s: float = QUEUE_WAIT_S,
               allowed_hosts: tuple[str, ...] | list[str] | None = None, per_client: int = PER_CLIENT,
               body_timeout_s: float = BODY_TIMEOUT_S, memory_limit: int | None = DEFAULT_MEMORY_LIMIT,
               isolation: str = "process") -> FastAPI:
    """The FastAPI app. allow_hub: let clients name Hugging Face repo ids (the server then fetches
    their config.json). allowed_hosts: accepted Host header names (None: any; the CLI passes the
    loopback names and the bound address when it binds to loopback, which stops DNS-rebinding pages
    from using the API). isolation: "process" runs each heavy computation in a pre-started worker
    process that is killed at the time limit; "thread" runs it in a thread (cannot be stopped; for
    embedding and tests that replace library functions in-process)."""
    s = Settings(allow_hub, max_body_bytes, time_limit_s, workers, queue_wait_s, per_client, body_timeout_s,
                 memory_limit, isolation)
    check_server_options(time_limit_s=time_limit_s, workers=workers, queue_wait_s=queue_wait_s,
                         per_client=per_client, body_timeout_s=body_timeout_s, max_body_bytes=max_body_bytes,
                         isolation=isolation)
    threads = Runner(workers, time_limit_s, queue_wait_s)
    compute = Compute(s, threads)

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        await compute.start()           # worker processes start once, here, not per request
        try:
            yield
        finally:
            compute.shutdown()
            threads.shutdown()

    app = FastAPI(
        lifespan=lifespan, title="gpuplan", version=__version__,
        description="Plan LLM hardware: memory, speed, cost and what to choose. Errors are JSON "
                    "`{\"error\": {\"what\", \"why\", \"fix\", \"matches\", \"close_matches\"}}`.",
        docs_url=None, redoc_url=None,       # the hosted doc UIs load scripts from a CDN; the page is offline
    )
    app.state.allow_hub, app.state.runner, app.state.compute = allow_hub, threads, compute
    _add_error_handlers(app)
    _add_page_routes(app, _read_static())
    _add_meta_routes(app, s, threads)
    _add_lookup_routes(app, s, threads)
    _add_plan_routes(app, s, compute)
    app.add_middleware(Guard, max_body_bytes=max_body_bytes, body_timeout_s=body_timeout_s,
                       allowed_hosts=tuple(allowed_hosts) if allowed_hosts else None)
    return app
