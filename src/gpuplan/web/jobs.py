"""What the web server computes, as plain functions of JSON-safe data.

The heavy ones (estimate, serving curve, launch files, recommend, compare) run in a worker process
(workers.py), so they are module-level functions whose arguments pickle and whose results are
JSON-safe. Nothing here imports FastAPI: a worker process stays light.

Also here: the model-safety rules (a client's ``model`` string is never a path or a URL) and the
error body, shared by the app and the workers.
"""
from __future__ import annotations

import inspect
import math
import re
from typing import Any, Callable
from urllib.parse import quote

from ..errors import (CatalogHint, CommandHint, GpuplanError, Hint, InputError, MissingExtraError, UnsupportedError,
                      close_matches)

MAX_CONFIG_LAYERS = 1024          # a pasted config with more layers than this is refused (per-layer loops)
DEFAULT_CONCURRENCIES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
EXCERPT_CHARS = 100               # the most of a client's input an error message quotes back
_HF_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_LAYER_KEYS = ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "num_decoder_layers")
_LONG_QUOTE = re.compile(r"'([^']{%d})[^']+'" % EXCERPT_CHARS)
_LONG_TOKEN = re.compile(r"\S{%d}\S+" % EXCERPT_CHARS)     # an unbroken run this long is echoed input
_FIELD_CAPS = {"what": 300, "why": 3000, "fix": 1000}
# Where this server lists each catalog a library error's hint names (errors.CatalogHint), and the query parameter
# that narrows the listing
_ROUTES = {"gpus": ("/api/gpus", "filter"), "models": ("/api/models", "search"), "schema": ("/api/schema", None),
           "presets": ("/api/options", None)}


# ---- errors ---------------------------------------------------------------------------------------------
def route_of(hint: CatalogHint) -> str:
    """The GET route that lists a hint's catalog here (with its filter where the route takes one)."""
    path, param = _ROUTES[hint.catalog]
    return path + (f"?{param}={quote(hint.filter)}" if hint.filter and param else "")


def web_words(hint: Hint) -> str:
    """A library error's hint as a web client acts on it: the listing's GET route, the request's field."""
    if isinstance(hint, CatalogHint):
        where = " (its \"presets\")" if hint.catalog == "presets" else ""
        return f"GET {route_of(hint)} lists {hint.shows}{where}"
    if isinstance(hint, CommandHint):
        return f"POST /api/{hint.command} gives {hint.gives}"
    return f'set "{hint.name}" to {hint.to}'


def see_json(hint: Hint | None) -> dict[str, Any] | None:
    """The error body's `see`: the hint as data (a catalog and its route, or a request field)."""
    if hint is None:
        return None
    if isinstance(hint, CatalogHint):
        return {"kind": "catalog", "name": hint.catalog, "route": route_of(hint)}
    if isinstance(hint, CommandHint):
        return {"kind": "request", "name": hint.command, "route": f"/api/{hint.command}"}
    return {"kind": "field", "name": hint.name, "route": None}


class WebError(Exception):
    """An error with an HTTP status and the fields of the JSON error body."""

    def __init__(self, status: int, what: str, why: str, fix: str = "", matches: list[str] | None = None,
                 headers: dict[str, str] | None = None, see: dict[str, Any] | None = None):
        super().__init__(f"{what}: {why}")
        self.status, self.what, self.why, self.fix, self.matches = status, what, why, fix, list(matches or [])
        self.headers, self.see = dict(headers or {}), see

    @classmethod
    def of(cls, err: GpuplanError) -> WebError:
        """A library error as the web says it: 501 for a missing extra, 422 for what gpuplan or the stack cannot do,
        400 for any other explained error (bad input, an unknown or ambiguous name); its hint as the route or
        field, advice only a local user can follow (a library call, an environment variable) left out."""
        status = 501 if isinstance(err, MissingExtraError) else 422 if isinstance(err, UnsupportedError) else 400
        return cls(status, err.what, err.why, err.fix_in(web_words, local=False), err.matches, see=see_json(err.see))

    def body(self) -> dict[str, Any]:
        return error_body(self.what, self.why, self.fix, self.matches, self.see)


def excerpt(text: Any, limit: int = EXCERPT_CHARS) -> str:
    """At most `limit` characters of a client's input, marked when cut."""
    text = str(text)
    return text if len(text) <= limit else text[:limit] + "…"


def _short(text: str, cap: int) -> str:
    """Quoted input longer than EXCERPT_CHARS is cut to an excerpt; the whole field is capped."""
    text = _LONG_QUOTE.sub(lambda m: f"'{m.group(1)}…'", str(text or ""))
    text = _LONG_TOKEN.sub(lambda m: m.group(0)[:EXCERPT_CHARS] + "…", text)
    return excerpt(text, cap)


def error_body(what: str, why: str, fix: str = "", matches: list[str] | None = None,
               see: dict[str, Any] | None = None) -> dict[str, Any]:
    what, why, fix = (_short(v, _FIELD_CAPS[k]) for k, v in (("what", what), ("why", why), ("fix", fix)))
    matches = [excerpt(m) for m in (matches or [])][:10]
    text = f"{what}: {why}" + (f" Close matches: {', '.join(matches)}." if matches else "") + (f" Fix: {fix}" if fix else "")
    return {"error": {"what": what, "why": why, "fix": fix, "matches": matches, "close_matches": matches,
                      "message": text, "see": see}}


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


# ---- model safety ---------------------------------------------------------------------------------------
def _layer_counts(cfg: Any, depth: int = 0):
    if depth > 4 or not isinstance(cfg, dict):
        return
    for k, v in cfg.items():
        if k in _LAYER_KEYS:
            yield k, v
        elif isinstance(v, dict):
            yield from _layer_counts(v, depth + 1)


def _safe_config(model: dict[str, Any]) -> dict[str, Any]:
    if not model:
        raise WebError(400, "model", "is an empty config object.",
                       "paste the whole config.json, or give a registry name (GET /api/models).")
    for key, value in _layer_counts(model):
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > MAX_CONFIG_LAYERS:
            raise WebError(400, f"model config '{excerpt(key)}'", f"is {excerpt(value)}; the web server accepts at "
                           f"most {MAX_CONFIG_LAYERS} layers.", "check the pasted config, or run the CLI locally.")
    return model


def safe_model(model: Any, *, allow_hub: bool) -> str | dict[str, Any]:
    """The model reference to hand to the library, or a 4xx error. Never a path, never a URL."""
    if isinstance(model, dict):
        return _safe_config(model)
    if not isinstance(model, str) or not model.strip():
        raise WebError(400, "model", "must be a registry name or a pasted config.json object.",
                       "GET /api/models lists the bundled models.")
    from ..models.registry import _index, registry
    key = model.strip()
    if key.lower() in _index():
        return key
    names = [e.name for e in registry()]
    short = excerpt(key)
    guess = key[:EXCERPT_CHARS]
    if _HF_ID.match(key) and ".." not in key:
        if allow_hub:
            return key      # resolved to a config dict by hub_config() in the worker
        raise WebError(400, f"model '{short}'", "is not in the bundled registry, and this server does not look up "
                       "Hugging Face repo ids (the operator can allow it with `gpuplan web --allow-hub`).",
                       "use a bundled model (GET /api/models), or paste the model's config.json object as 'model'.",
                       close_matches(guess.rsplit("/", 1)[-1], names))
    looks_like = ("a URL" if "://" in key or key.lower().startswith(("http:", "https:", "file:", "www.")) else
                  "a file path" if "/" in key or "\\" in key or key.startswith(("~", ".")) or key.endswith((".json", ".yaml", ".yml"))
                  else None)
    if looks_like:
        why = f"looks like {looks_like}; the web server never reads files or fetches URLs for a client."
        raise WebError(400, f"model '{short}'", why,
                       "use a bundled model name (GET /api/models) or paste the config.json object as 'model'.",
                       close_matches(guess.rsplit("/", 1)[-1], names))
    raise WebError(400, f"model '{short}'", "is not a bundled model name" +
                   (" or a Hugging Face repo id ('org/name')." if allow_hub else
                    " (Hugging Face Hub look-ups are off on this server)."),
                   "pick one from GET /api/models, or paste the model's config.json object as 'model'.",
                   close_matches(guess, names))


def hub_config(repo_id: str) -> dict[str, Any]:
    from ..models.registry import _from_hub
    cfg = dict(_from_hub(repo_id))
    cfg.setdefault("_name_or_path", repo_id)
    return cfg


def resolve_model(model: Any, *, allow_hub: bool) -> str | dict[str, Any]:
    """safe_model() plus the hub fetch (operator-enabled only); validates a pasted config."""
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
        raise WebError(400, "pasted model config", f"could not be read ({type(err).__name__}: {excerpt(err)}).",
                       "paste an unmodified Hugging Face config.json.") from None
    return ref


def safe_scenario(scn: Any, *, allow_hub: bool) -> Any:
    if scn.hardware.profile:
        raise WebError(400, "hardware.profile", "names a file, and the web API never reads files on the server.",
                       "use a calibration profile with the CLI (`gpuplan estimate --profile FILE`).")
    ref = resolve_model(scn.model, allow_hub=allow_hub)
    return scn if ref is scn.model else scn.model_copy(update={"model": ref})


def call_known(fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> Any:
    """Call fn with the keyword arguments it accepts (None values dropped), so a library signature
    that gains or loses an option does not turn into a server error."""
    params = inspect.signature(fn).parameters
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        accepted = kwargs
    else:
        accepted = {k: v for k, v in kwargs.items() if k in params}
    return fn(*args, **{k: v for k, v in accepted.items() if v is not None})


# ---- the heavy jobs (run in a worker process) ------------------------------------------------------------
def estimate_job(scenario: Any, allow_hub: bool) -> dict[str, Any]:
    from ..pipeline import evaluate
    scn = safe_scenario(scenario, allow_hub=allow_hub)
    est = evaluate(scn, allow_hub=False)
    out = est.to_json()
    from ..pipeline import load_not_simulated_note
    note = load_not_simulated_note(est.scenario, "POST /api/serving-curve (CLI: gpuplan serve) and sized for by "
                                                 "POST /api/recommend")
    if note:      # a load block the estimate does not run is said, not silently ignored
        out["warnings"] = [*out.get("warnings", []), note]
    try:
        from ..estimate.fit import fit_limits
        out["fit_limits"] = fit_limits(est.scenario, est.model, est.gpu.usable_memory_bytes)
    except ImportError:
        out["fit_limits"] = None
    return clean(out)


WEB_MAX_LOAD_REQUESTS = 20_000     # a serving-under-load simulation: ~1 s of CPU plus the capacity search


def serving_curve_job(scenario: Any, concurrencies: list[int] | None, allow_hub: bool) -> dict[str, Any]:
    from .. import pipeline
    scn = safe_scenario(scenario, allow_hub=allow_hub)
    if scn.task != "infer":
        raise InputError("serving curve", f"needs task 'infer', got '{excerpt(scn.task)}'.", "set \"task\": \"infer\".")
    r = pipeline.resolve(scn, allow_hub=False)
    est = pipeline.evaluate(r)      # the same memory (KV pool), profile and network as /api/estimate
    conc = sorted(set(concurrencies or DEFAULT_CONCURRENCIES))
    out = {"curve": pipeline.serving_curve(r, est.memory, conc), "warnings": list(est.warnings),
           "memory": est.memory.to_json(), "gpu": {"id": r.gpu.id, "name": r.gpu.name}, "model": r.model.name}
    load = scn.infer.load if scn.infer is not None else None
    if load is not None:
        if load.trace:
            raise WebError(400, "infer.load.trace", "names a file, and the web API never reads files on the server.",
                           "replay a trace with the CLI (`gpuplan serve SCENARIO --arrival trace:FILE`).")
        if load.requests > WEB_MAX_LOAD_REQUESTS:
            raise WebError(400, "infer.load.requests", f"is {load.requests:,}; the web server simulates at most "
                           f"{WEB_MAX_LOAD_REQUESTS:,} requests.", "use fewer requests, or the CLI.")
        # with the rate sweep, so the page can draw latency percentiles and goodput versus rate
        out["load"] = pipeline.serving_load(r, est.memory, sweep=True) if est.memory.fits else None
    return clean(out)


def launch_job(scenario: Any, engine: str, inner: str | None, include_estimate: bool, allow_hub: bool) -> dict[str, Any]:
    from .. import launch as lib_launch
    scn = safe_scenario(scenario, allow_hub=allow_hub)
    est, notes = None, []
    if include_estimate:
        try:
            from ..pipeline import evaluate
            est = evaluate(scn, allow_hub=False).to_json()
        except GpuplanError as err:
            notes.append(f"headers carry no estimate: {err.message_in(web_words, local=False)}")
    kwargs: dict[str, Any] = {"estimate": est}
    if inner:
        kwargs["inner"] = inner
    files = lib_launch.launch_files(scn, engine, **kwargs)
    return clean({"engine": lib_launch.engine_name(engine), "files": files, "notes": notes})


def _partial(scenario: dict[str, Any], allow_hub: bool) -> dict[str, Any]:
    part = dict(scenario)
    if "model" not in part:
        raise InputError("scenario", "names no model.", "add \"model\": a name from GET /api/models.")
    part["model"] = resolve_model(part["model"], allow_hub=allow_hub)
    return part


WEB_MAX_RL_PLACEMENTS = 256       # an RL placement search: ~25 ms of CPU per placement (64 GPUs give 236)


def recommend_job(scenario: dict[str, Any], options: dict[str, Any], allow_hub: bool) -> Any:
    from ..search import recommend as lib_recommend
    from ..search.recommend import is_rl
    part = _partial(scenario, allow_hub)
    if is_rl(part):
        # as `gpuplan recommend` on an RL scenario: the rl-plan placement search (search/cli.run_recommend)
        from ..scenario import scenario_from_dict
        from ..search.rl_search import plan_record, refuse_unapplied, rl_plan, to_fit
        refuse_unapplied("recommend on an RL scenario", _unapplied_fields(options, "top"), part)
        # validated here, so an error names the request ("scenario in the request body"), not "scenario (dict)"
        scn = scenario_from_dict(part, source="in the request body")
        rec, rows = rl_plan(scn, top=options.get("top"), max_placements=WEB_MAX_RL_PLACEMENTS)
        return clean(plan_record(rec, rows, to_fit(rec, scn)[1]))
    result = call_known(lib_recommend, (part,), {**options, "progress": False})
    return clean(result.to_json() if hasattr(result, "to_json") else result)


_BODY_FIELDS = ("objective", "top", "preset", "gpus")    # a search request's own fields; the rest are its constraints


def _unapplied_fields(options: dict[str, Any], *applied: str) -> list[str]:
    """The search request's settings an RL placement search would not apply, named as the request body names them."""
    return [k if k in _BODY_FIELDS else f"constraints.{k}" for k, v in options.items()
            if v is not None and k not in applied and not (k == "objective" and v == "cheapest")]


def compare_job(scenario: dict[str, Any], gpus: list[str], options: dict[str, Any], allow_hub: bool) -> dict[str, Any]:
    from ..search import compare as lib_compare
    from ..search import compare_record
    from ..search import recommend as lib_recommend
    from ..search.recommend import is_rl
    data = _partial(scenario, allow_hub)
    task = data.get("task") or "train"          # as `gpuplan compare --json` says it
    steps = options.pop("steps", None)
    if is_rl(data):       # as `gpuplan compare` on an RL scenario: each GPU type's cheapest placement
        from ..search.rl_search import DEFAULT_STEPS, refuse_unapplied
        refuse_unapplied("compare on an RL scenario", _unapplied_fields(options), data, needs_gpu=False)
        steps = steps or DEFAULT_STEPS
        return clean({"task": task, "steps": steps, "rows": lib_compare(
            data, list(gpus), steps=steps, max_placements=WEB_MAX_RL_PLACEMENTS)})
    if steps is not None:
        raise InputError("steps", f"prices RL placements; this scenario's objective is not RL ({task}).",
                         "leave steps out, or set train.objective to grpo, ppo or rloo.")
    params = inspect.signature(lib_recommend).parameters
    fixed = {k: v for k, v in {**options, "progress": False}.items() if k in params and v is not None}
    return clean({"task": task, "rows": [compare_record(r, task) for r in lib_compare(data, list(gpus), **fixed)]})


_WARM_SCENARIO = {"model": "qwen2.5-0.5b", "task": "infer", "hardware": {"gpu": "l4", "count": 1}}


def warm_up() -> None:
    """One small estimate and search in a fresh worker: loads the catalogs, registries and tables
    the first request would otherwise pay for (a few tenths of a second)."""
    from ..scenario import Scenario
    try:
        estimate_job(Scenario.model_validate(_WARM_SCENARIO), False)
        recommend_job(dict(_WARM_SCENARIO), {"top": 1}, False)
    except Exception:  # noqa: BLE001 - a warm-up failure only costs time later; the request reports it
        pass
