"""The HTTP API and the page: thin shells over the library functions.

Safety rules of web mode (a client is not trusted):

* nothing a client sends makes the server read a file or fetch a URL: a ``model`` string must be
  a bundled registry name (or, only when the operator started the server with ``allow_hub``, a
  Hugging Face repo id); anything else is rejected. A model can also be pasted as a config.json
  object. Static files are a fixed list loaded at start-up.
* request bodies are limited in size, each computation runs in a worker thread with a time
  limit, and the number of computations at once is bounded (503 when busy, 504 when too slow);
* every error is JSON ``{"error": {"what", "why", "fix", "matches"}}``; user errors are 4xx, and
  an unexpected failure is a 500 with no internals (the traceback goes to the server log only);
* the CLI binds to 127.0.0.1 by default and then accepts only loopback Host headers.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import inspect
import json
import logging
import math
import re
import threading
from importlib import resources
from typing import Annotated, Any, Callable, Optional, Union, get_args

from fastapi import Body, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from .. import __version__
from ..errors import (GpuplanError, InputError, MissingExtraError,
                      UnsupportedError, close_matches)
from ..scenario import Scenario

log = logging.getLogger("gpuplan.web")

MAX_BODY_BYTES = 256 * 1024
TIME_LIMIT_S = 30.0
WORKERS = 4
QUEUE_WAIT_S = 5.0
MAX_CONFIG_LAYERS = 1024          # a pasted config with more layers than this is refused (per-layer loops)
DEFAULT_CONCURRENCIES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]", "::1")
_HF_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_LAYER_KEYS = ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "num_decoder_layers")
_STATIC = {"index.html": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8",
           "style.css": "text/css; charset=utf-8", "favicon.svg": "image/svg+xml"}
_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


# ---- errors ---------------------------------------------------------------------------------------------
class WebError(Exception):
    """An error with an HTTP status and the four fields of the JSON error body."""

    def __init__(self, status: int, what: str, why: str, fix: str = "", matches: list[str] | None = None):
        super().__init__(f"{what}: {why}")
        self.status, self.what, self.why, self.fix, self.matches = status, what, why, fix, list(matches or [])

    def body(self) -> dict[str, Any]:
        return error_body(self.what, self.why, self.fix, self.matches)


def error_body(what: str, why: str, fix: str = "", matches: list[str] | None = None) -> dict[str, Any]:
    text = f"{what}: {why}" + (f" Close matches: {', '.join(matches)}." if matches else "") + (f" Fix: {fix}" if fix else "")
    return {"error": {"what": what, "why": why, "fix": fix, "matches": list(matches or []), "message": text}}


def status_for(err: GpuplanError) -> int:
    if isinstance(err, MissingExtraError):
        return 501
    if isinstance(err, UnsupportedError):
        return 422
    return 400        # InputError, UnknownNameError, AmbiguousNameError and any other explained error


def _internal() -> WebError:
    return WebError(500, "internal error", "the server failed while handling this request; this is a gpuplan bug.",
                    "report it with the request that caused it (the server log has the details).")


def _unavailable(feature: str) -> WebError:
    return WebError(501, feature, "is not available in this version of gpuplan.", "upgrade gpuplan.")


# ---- JSON -----------------------------------------------------------------------------------------------
def clean(obj: Any) -> Any:
    """JSON-safe copy: non-finite floats become null, tuples lists, unknown objects strings."""
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [clean(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):      # numpy scalars
        try:
            return clean(obj.item())
        except Exception:
            pass
    if hasattr(obj, "to_json") and callable(obj.to_json):
        return clean(obj.to_json())
    return str(obj)


def json_response(obj: Any, status: int = 200) -> Response:
    text = json.dumps(clean(obj), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return Response(text.encode("utf-8"), status_code=status, media_type="application/json")


# ---- model safety ---------------------------------------------------------------------------------------
def _layer_counts(cfg: Any, depth: int = 0):
    if depth > 4 or not isinstance(cfg, dict):
        return
    for k, v in cfg.items():
        if k in _LAYER_KEYS:
            yield k, v
        elif isinstance(v, dict):
            yield from _layer_counts(v, depth + 1)


def safe_model(model: Any, *, allow_hub: bool) -> str | dict[str, Any]:
    """The model reference to hand to the library, or a 4xx error. Never a path, never a URL."""
    if isinstance(model, dict):
        if not model:
            raise WebError(400, "model", "is an empty config object.",
                           "paste the whole config.json, or give a registry name (GET /api/models).")
        for key, value in _layer_counts(model):
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > MAX_CONFIG_LAYERS:
                raise WebError(400, f"model config '{key}'", f"is {value}; the web server accepts at most "
                               f"{MAX_CONFIG_LAYERS} layers.", "check the pasted config, or run the CLI locally.")
        return model
    if not isinstance(model, str) or not model.strip():
        raise WebError(400, "model", "must be a registry name or a pasted config.json object.",
                       "GET /api/models lists the bundled models.")
    from ..models.registry import _index, registry
    key = model.strip()
    if key.lower() in _index():
        return key
    names = [e.name for e in registry()]
    if _HF_ID.match(key) and ".." not in key:
        if allow_hub:
            return key      # resolved to a config dict by hub_config() in a worker thread
        raise WebError(400, f"model '{key}'", "is not in the bundled registry, and this server does not look up "
                       "Hugging Face repo ids (the operator can allow it with `gpuplan web --allow-hub`).",
                       "use a bundled model (GET /api/models), or paste the model's config.json object as 'model'.",
                       close_matches(key.rsplit("/", 1)[-1], names))
    looks_like = ("a URL" if "://" in key or key.lower().startswith(("http:", "https:", "file:", "www.")) else
                  "a file path" if "/" in key or "\\" in key or key.startswith(("~", ".")) or key.endswith((".json", ".yaml", ".yml"))
                  else None)
    if looks_like:
        why = f"looks like {looks_like}; the web server never reads files or fetches URLs for a client."
        raise WebError(400, f"model '{key[:200]}'", why,
                       "use a bundled model name (GET /api/models) or paste the config.json object as 'model'.",
                       close_matches(key.rsplit("/", 1)[-1], names))
    raise WebError(400, f"model '{key[:200]}'", "is not a bundled model name" +
                   (" or a Hugging Face repo id ('org/name')." if allow_hub else
                    " (Hugging Face Hub look-ups are off on this server)."),
                   "pick one from GET /api/models, or paste the model's config.json object as 'model'.",
                   close_matches(key, names))


def hub_config(repo_id: str) -> dict[str, Any]:
    from ..models.registry import _from_hub
    cfg = dict(_from_hub(repo_id))
    cfg.setdefault("_name_or_path", repo_id)
    return cfg


def resolve_model(model: Any, *, allow_hub: bool) -> str | dict[str, Any]:
    """safe_model() plus the hub fetch (operator-enabled only); validates a pasted config. Worker thread."""
    from ..models import get_model
    ref = safe_model(model, allow_hub=allow_hub)
    if isinstance(ref, str):
        from ..models.registry import _index
        if ref.lower() in _index():
            return ref
        ref = hub_config(ref)
    try:
        get_model(ref, allow_hub=False)
    except GpuplanError:
        raise
    except Exception as err:   # a pasted config with the wrong types
        raise WebError(400, "pasted model config", f"could not be read ({type(err).__name__}: {str(err)[:200]}).",
                       "paste an unmodified Hugging Face config.json.") from None
    return ref


def safe_scenario(scn: Scenario, *, allow_hub: bool) -> Scenario:
    if scn.hardware.profile:
        raise WebError(400, "hardware.profile", "names a file, and the web API never reads files on the server.",
                       "use a calibration profile with the CLI (`gpuplan estimate --profile FILE`).")
    ref = resolve_model(scn.model, allow_hub=allow_hub)
    return scn if ref is scn.model else scn.model_copy(update={"model": ref})


# ---- worker pool with time limit ------------------------------------------------------------------------
class Runner:
    """Runs library calls in worker threads: bounded concurrency, a wait limit and a time limit."""

    def __init__(self, workers: int, time_limit_s: float, queue_wait_s: float):
        self.pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="gpuplan-web")
        self.slots = threading.BoundedSemaphore(workers)
        self.time_limit_s, self.queue_wait_s = time_limit_s, queue_wait_s

    async def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.queue_wait_s
        while not self.slots.acquire(blocking=False):
            if loop.time() > deadline:
                raise WebError(503, "server", "is busy with other computations.", "retry in a few seconds.")
            await asyncio.sleep(0.01)
        try:
            fut = self.pool.submit(fn, *args, **kwargs)
        except RuntimeError:
            self.slots.release()
            raise WebError(503, "server", "is shutting down.", "retry later.") from None
        # the slot is freed when the thread really ends, so a runaway computation keeps counting
        fut.add_done_callback(lambda _f: self.slots.release())
        try:
            return await asyncio.wait_for(asyncio.wrap_future(fut), self.time_limit_s)
        except asyncio.TimeoutError:
            raise WebError(504, "computation", f"took longer than the server's limit of {self.time_limit_s:g} s.",
                           "narrow the request (fewer GPUs or options to search), or run the CLI locally.") from None
        except (GpuplanError, WebError):
            raise
        except ImportError as err:
            if (err.name or "").startswith("gpuplan"):
                raise _unavailable(err.name) from None
            log.exception("import failed in web request")
            raise _internal() from None
        except Exception:
            log.exception("unexpected error in web request")
            raise _internal() from None

    def shutdown(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


# ---- ASGI guard: host check, body limit, security headers, last-resort 500 -------------------------------
class Guard:
    def __init__(self, app: Any, *, max_body_bytes: int, allowed_hosts: tuple[str, ...] | None):
        self.app, self.max_body_bytes = app, max_body_bytes
        self.allowed_hosts = tuple(h.lower() for h in allowed_hosts) if allowed_hosts else None

    async def _send_error(self, send, err: WebError) -> None:
        body = json.dumps(err.body()).encode()
        await send({"type": "http.response.start", "status": err.status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                *_security_headers()]})
        await send({"type": "http.response.body", "body": body})

    def _host_ok(self, headers: dict[bytes, bytes]) -> bool:
        if self.allowed_hosts is None:
            return True
        host = headers.get(b"host", b"").decode("latin-1").strip().lower()
        name = host.rsplit(":", 1)[0] if host.count(":") == 1 or host.startswith("[") and "]:" in host else host
        return name in self.allowed_hosts

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        if not self._host_ok(headers):
            return await self._send_error(send, WebError(
                400, "Host header", "is not one this server answers to (it listens on loopback only).",
                "open the page as http://127.0.0.1:PORT/ or start `gpuplan web --host` with the name you use."))
        if scope.get("method") in ("POST", "PUT", "PATCH"):
            limit = self.max_body_bytes
            too_big = WebError(413, "request body", f"is larger than the server's limit of {limit // 1024} KiB.",
                               "send a smaller request (a pasted config.json is a few KiB).")
            declared = headers.get(b"content-length")
            try:
                if declared is not None and int(declared) > limit:
                    return await self._send_error(send, too_big)
            except ValueError:
                return await self._send_error(send, WebError(400, "Content-Length header", "is not a number.", ""))
            chunks, size = [], 0
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    return await self._send_error(send, too_big)
                chunks.append(chunk)
                if not message.get("more_body"):
                    break
            replayed = False

            async def replay():
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
                return await receive()
            inner_receive = replay
        else:
            inner_receive = receive

        started = False

        async def guarded_send(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message = {**message, "headers": [*message.get("headers", []), *_security_headers()]}
            await send(message)

        try:
            await self.app(scope, inner_receive, guarded_send)
        except Exception:
            log.exception("unhandled error in web request")
            if not started:
                await self._send_error(send, _internal())


def _security_headers() -> list[tuple[bytes, bytes]]:
    return [(b"x-content-type-options", b"nosniff"), (b"x-frame-options", b"DENY"),
            (b"referrer-policy", b"no-referrer"), (b"content-security-policy", _CSP.encode()),
            (b"cache-control", b"no-store")]


# ---- request bodies -------------------------------------------------------------------------------------
class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


Concurrency = Annotated[int, Field(gt=0, le=100_000)]


class ServingCurveRequest(_Body):
    scenario: Scenario = Field(description="an inference scenario (task: infer)")
    concurrencies: Optional[list[Concurrency]] = Field(
        None, min_length=1, max_length=64, description=f"concurrent requests to evaluate; default {list(DEFAULT_CONCURRENCIES)}")


class LaunchRequest(_Body):
    scenario: Scenario
    engine: str = Field(max_length=64, description="launch engine: torchrun, hf, deepspeed, megatron, vllm, sglang, trtllm, llama.cpp, slurm")
    inner: Optional[str] = Field(None, max_length=64, description="for engine slurm: the training engine it wraps")
    include_estimate: bool = Field(True, description="put the plan's predicted memory/speed/cost in the file headers")


class ConstraintsBody(_Body):
    budget_usd: Optional[float] = Field(None, ge=0, description="most the whole run may cost")
    budget_usd_per_hour: Optional[float] = Field(None, ge=0)
    deadline_days: Optional[float] = Field(None, gt=0, description="training must finish within this")
    max_gpus: Optional[int] = Field(None, gt=0, le=4096)
    owned: Optional[dict[Annotated[str, Field(max_length=64)], Annotated[int, Field(gt=0, le=100_000)]]] = Field(
        None, max_length=16, description="GPUs you own: {gpu id: count}; the search uses only these")
    providers: Optional[list[Annotated[str, Field(max_length=64)]]] = Field(None, max_length=32)
    spot: Optional[bool] = None
    ttft_s: Optional[float] = Field(None, gt=0, description="serving: time-to-first-token target")
    tpot_s: Optional[float] = Field(None, gt=0, description="serving: time-per-output-token target")
    requests_per_s: Optional[float] = Field(None, gt=0)
    tokens_per_s: Optional[float] = Field(None, gt=0)
    min_headroom: Optional[float] = Field(None, ge=0, lt=1, description="share of GPU memory to leave free")


Objective = Union[Annotated[str, Field(max_length=64)], dict[Annotated[str, Field(max_length=32)], float]]


class RecommendRequest(_Body):
    scenario: dict[str, Any] = Field(description="partial scenario: model and task, plus any settings you fix; hardware "
                                                 "and layout may be left out, or given as lists of allowed values")
    objective: Optional[Objective] = Field(None, description="cheapest, fastest, cost_per_token, or weights like {\"cost\": 0.5, \"time\": 0.5}")
    top: int = Field(10, ge=1, le=100, description="how many plans to return")
    preset: Optional[str] = Field(None, max_length=64, description="use case: research-budget, startup, enterprise-serving, large-pretraining")
    gpus: Optional[list[Annotated[str, Field(max_length=64)]]] = Field(None, min_length=1, max_length=64, description="GPU ids to search (default: the catalog)")
    constraints: ConstraintsBody = Field(default_factory=ConstraintsBody)


class CompareRequest(_Body):
    scenario: dict[str, Any] = Field(description="the workload: model, task and settings (hardware count optional)")
    gpus: list[Annotated[str, Field(max_length=64)]] = Field(min_length=1, max_length=16, description="GPU ids to compare")
    objective: Optional[Objective] = None
    preset: Optional[str] = Field(None, max_length=64)
    constraints: ConstraintsBody = Field(default_factory=ConstraintsBody)


def call_known(fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> Any:
    """Call fn with the keyword arguments it accepts (None values dropped), so a library signature
    that gains or loses an option does not turn into a server error."""
    params = inspect.signature(fn).parameters
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        accepted = kwargs
    else:
        accepted = {k: v for k, v in kwargs.items() if k in params}
    return fn(*args, **{k: v for k, v in accepted.items() if v is not None})


# ---- the app --------------------------------------------------------------------------------------------
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


def create_app(*, allow_hub: bool = False, max_body_bytes: int = MAX_BODY_BYTES, time_limit_s: float = TIME_LIMIT_S,
               workers: int = WORKERS, queue_wait_s: float = QUEUE_WAIT_S,
               allowed_hosts: tuple[str, ...] | list[str] | None = None) -> FastAPI:
    """The FastAPI app. allow_hub: let clients name Hugging Face repo ids (the server then fetches
    their config.json). allowed_hosts: accepted Host header names (None: any; the CLI passes the
    loopback names when it binds to loopback, which stops DNS-rebinding pages from using the API)."""
    run = Runner(workers, time_limit_s, queue_wait_s)
    static = _read_static()
    @contextlib.asynccontextmanager
    async def lifespan(_app):
        yield
        run.shutdown()

    app = FastAPI(
        lifespan=lifespan, title="gpuplan", version=__version__,
        description="Plan LLM hardware: memory, speed, cost and what to choose. Errors are JSON "
                    "`{\"error\": {\"what\", \"why\", \"fix\", \"matches\"}}`.",
        docs_url=None, redoc_url=None,       # the hosted doc UIs load scripts from a CDN; the page is offline
    )
    app.state.allow_hub = allow_hub
    app.state.runner = run

    # -- error handlers: always JSON, never a traceback
    @app.exception_handler(WebError)
    async def _web_error(_req: Request, err: WebError):
        return json_response(err.body(), err.status)

    @app.exception_handler(GpuplanError)
    async def _gpuplan_error(_req: Request, err: GpuplanError):
        return json_response(error_body(err.what, err.why, err.fix, err.matches), status_for(err))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_req: Request, err: RequestValidationError):
        lines, what = [], "request"
        for e in err.errors()[:20]:
            loc = [str(x) for x in e.get("loc", ()) if not str(x).startswith("function-")]
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
                msg = f"is not valid JSON ({(e.get('ctx') or {}).get('error', 'decode error')})"
                where = "(body)"
            line = f"'{where}' {msg}"
            if line not in lines:
                lines.append(line)
        return json_response(error_body(what, "; ".join(lines) + ".",
                                        "correct the field(s) named above; GET /api/schema lists every scenario field."),
                             422)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(req: Request, err: StarletteHTTPException):
        if err.status_code == 404:
            body = error_body(f"path '{req.url.path[:200]}'", "is not an endpoint of this server.",
                              "GET /openapi.json lists the endpoints; the page is at /.")
        elif err.status_code == 405:
            body = error_body(f"method {req.method} on '{req.url.path[:200]}'", "is not allowed.",
                              "GET /openapi.json says which method each endpoint takes.")
        else:
            body = error_body("request", str(err.detail)[:300], "")
        return json_response(body, err.status_code)

    # -- page
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

    # -- API
    @app.get("/healthz", tags=["meta"], summary="liveness check")
    async def healthz():
        return json_response({"status": "ok", "version": __version__})

    @app.get("/api/schema", tags=["meta"], summary="JSON schema of a scenario")
    async def schema():
        return json_response(Scenario.model_json_schema())

    @app.get("/api/options", tags=["meta"], summary="vocabularies for forms: tasks, formats, engines, objectives")
    async def options():
        data = await run(_vocab)
        data["allow_hub"] = allow_hub
        data["limits"] = {"max_body_bytes": max_body_bytes, "time_limit_s": time_limit_s}
        return json_response(data)

    @app.get("/api/models", tags=["models"], summary="bundled models (optionally filtered)")
    async def models(search: Annotated[Optional[str], Query(max_length=100, description="substring of name or HF id")] = None):
        items = await run(_model_summaries)
        if search:
            s = search.strip().lower()
            items = tuple(m for m in items if s in m["name"].lower() or s in m["hf_id"].lower()
                          or any(s in a.lower() for a in m.get("aliases", ())))
        return json_response({"models": list(items), "count": len(items)})

    @app.get("/api/models/{name:path}", tags=["models"], summary="one model: parameters, KV cache, FLOPs")
    async def model(name: str, seq_len: Annotated[int, Query(gt=0, le=10_000_000)] = 2048):
        def work():
            from ..models import get_model
            ref = resolve_model(name, allow_hub=allow_hub)
            return get_model(ref, allow_hub=False).to_dict(seq_len)
        return json_response(await run(work))

    @app.get("/api/gpus", tags=["hardware"], summary="accelerators in the catalog (optionally filtered)")
    async def gpus(filter: Annotated[Optional[str], Query(max_length=100, description="substring of id, name, vendor, family or segment")] = None):  # noqa: A002
        def work():
            from ..hardware import list_gpus
            return [g.to_dict() for g in list_gpus(filter)]
        items = await run(work)
        return json_response({"gpus": items, "count": len(items)})

    @app.get("/api/gpus/{gpu_id}", tags=["hardware"], summary="one accelerator's facts")
    async def gpu(gpu_id: Annotated[str, Path(max_length=100)]):
        def work():
            from ..hardware import get_gpu
            return get_gpu(gpu_id).to_dict()
        return json_response(await run(work))

    @app.post("/api/estimate", tags=["plan"], summary="memory, speed and cost of one scenario (DESIGN §3.2) plus what fits")
    async def estimate(scenario: Annotated[Scenario, Body()]):
        def work():
            from ..api import estimate as lib_estimate
            scn = safe_scenario(scenario, allow_hub=allow_hub)
            est = lib_estimate(scn, allow_hub=False)
            out = est.to_json()
            try:
                from ..estimate.fit import fit_limits
                out["fit_limits"] = fit_limits(est.scenario, est.model, est.gpu.usable_memory_bytes)
            except ImportError:
                out["fit_limits"] = None
            return out
        return json_response(await run(work))

    @app.post("/api/serving-curve", tags=["plan"], summary="serving TTFT, TPOT and throughput versus concurrency")
    async def serving_curve(req: ServingCurveRequest):
        def work():
            from ..api import resolve, software_warnings
            from ..estimate.speed import serving_curve as curve
            scn = safe_scenario(req.scenario, allow_hub=allow_hub)
            if scn.task != "infer":
                raise InputError("serving curve", f"needs task 'infer', got '{scn.task}'.", "set \"task\": \"infer\".")
            r = resolve(scn, allow_hub=False)
            warnings = software_warnings(r)
            conc = sorted(set(req.concurrencies or DEFAULT_CONCURRENCIES))
            return {"curve": curve(r.scenario, r.model, r.gpu, conc), "warnings": list(warnings),
                    "gpu": {"id": r.gpu.id, "name": r.gpu.name}, "model": r.model.name}
        return json_response(await run(work))

    @app.post("/api/launch", tags=["plan"], summary="launch configuration files for an engine")
    async def launch(req: LaunchRequest):
        def work():
            from .. import launch as lib_launch
            scn = safe_scenario(req.scenario, allow_hub=allow_hub)
            est, notes = None, []
            if req.include_estimate:
                try:
                    from ..api import estimate as lib_estimate
                    est = lib_estimate(scn, allow_hub=False).to_json()
                except GpuplanError as err:
                    notes.append(f"headers carry no estimate: {err.message}")
            kwargs: dict[str, Any] = {"estimate": est}
            if req.inner:
                kwargs["inner"] = req.inner
            files = lib_launch.launch_files(scn, req.engine, **kwargs)
            return {"engine": req.engine, "files": files, "notes": notes}
        return json_response(await run(work))

    def _partial(scenario: dict[str, Any]) -> dict[str, Any]:
        part = dict(scenario)
        if "model" not in part:
            raise InputError("scenario", "names no model.", "add \"model\": a name from GET /api/models.")
        part["model"] = resolve_model(part["model"], allow_hub=allow_hub)
        return part

    @app.post("/api/recommend", tags=["plan"], summary="search GPUs x counts x layouts: ranked plans, Pareto front, rejections")
    async def recommend(req: RecommendRequest):
        def work():
            from ..search import recommend as lib_recommend
            fixed = {"objective": req.objective, "top": req.top, "preset": req.preset, "gpus": req.gpus,
                     "progress": False, **req.constraints.model_dump(exclude_none=True)}
            result = call_known(lib_recommend, (_partial(req.scenario),), fixed)
            return result.to_json() if hasattr(result, "to_json") else result
        return json_response(await run(work))

    @app.post("/api/compare", tags=["plan"], summary="one workload on several GPUs, side by side")
    async def compare(req: CompareRequest):
        def work():
            from ..search import compare as lib_compare
            fixed = {"objective": req.objective, "preset": req.preset, "progress": False,
                     **req.constraints.model_dump(exclude_none=True)}
            from ..search import recommend as lib_recommend
            params = inspect.signature(lib_recommend).parameters
            fixed = {k: v for k, v in fixed.items() if k in params and v is not None}
            rows = lib_compare(_partial(req.scenario), list(req.gpus), **fixed)
            return {"rows": rows}
        return json_response(await run(work))

    return _wrap(app, max_body_bytes, allowed_hosts)


def _wrap(app: FastAPI, max_body_bytes: int, allowed_hosts) -> FastAPI:
    app.add_middleware(Guard, max_body_bytes=max_body_bytes,
                       allowed_hosts=tuple(allowed_hosts) if allowed_hosts else None)
    return app
