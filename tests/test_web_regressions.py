"""Regressions found by the web sweep (2026-12-04): each test names the request, the symptom and the fix."""
from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from fastapi.testclient import TestClient  # noqa: E402

from gpuplan.web import create_app  # noqa: E402


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(isolation="thread"), raise_server_exceptions=False) as c:
        yield c


def error_of(r, status):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert {"what", "why", "fix", "matches", "close_matches", "message"} <= set(err)
    return err


SMALL = {"model": "qwen2.5-0.5b", "task": "infer"}


@pytest.mark.parametrize("method,path,body,route", [
    # an unknown GPU anywhere: the library's fix said "run `gpuplan gpus` ... or add a row with
    # use_user_catalog()/GPUPLAN_GPUS_CSV" -- a CLI command and a server-side setting a web client cannot use
    ("get", "/api/gpus/zzz", None, "GET /api/gpus"),
    ("post", "/api/estimate", {**SMALL, "hardware": {"gpu": "zzz"}}, "GET /api/gpus"),
    ("post", "/api/recommend", {"scenario": SMALL, "gpus": ["zzz"]}, "GET /api/gpus"),
    ("post", "/api/compare", {"scenario": SMALL, "gpus": ["zzz"]}, "GET /api/gpus"),
    # an unknown field in a recommend scenario: "`gpuplan schema` lists the fields"
    ("post", "/api/recommend", {"scenario": {**SMALL, "bogus": 1}}, "GET /api/schema"),
])
def test_web_errors_point_at_web_routes_not_cli_commands(client, method, path, body, route):
    r = client.get(path) if method == "get" else client.post(path, json=body)
    err = error_of(r, 400)
    text = " ".join((err["why"], err["fix"], err["message"]))
    assert "`gpuplan gpus`" not in text and "`gpuplan schema`" not in text
    assert "GPUPLAN_GPUS_CSV" not in text and "use_user_catalog" not in text
    assert route in err["fix"] or route in err["why"]


def test_web_pointers_leave_run_locally_advice_alone():
    # the web words only the error's hint (errors.CatalogHint) as a route; advice written for everyone, such as
    # running the CLI locally, is passed through as written
    from gpuplan.errors import InputError, CatalogHint
    from gpuplan.web.jobs import WebError
    err = InputError("x", "is too big.", "or run `gpuplan recommend` locally",
                     see=CatalogHint("presets", "the presets"))
    fix = WebError.of(err).body()["error"]["fix"]
    assert "`gpuplan recommend` locally" in fix
    assert 'GET /api/options lists the presets (its "presets")' in fix and "`gpuplan presets`" not in fix


# ---- hints: the error carries where to look as data, and each surface words it --------------------------
def _pointed_errors():
    from gpuplan.errors import InputError, CatalogHint, CommandHint, InputHint, UnsupportedError
    return [
        # (the error, the CLI's words, the web's words, the web body's `see`)
        (InputError("model 'x'", "is not bundled.", "use an HF id", see=CatalogHint("models", "the bundled models")),
         "Fix: use an HF id; `gpuplan models` lists the bundled models.",
         "Fix: use an HF id; GET /api/models lists the bundled models.",
         {"kind": "catalog", "name": "models", "route": "/api/models"}),
        (InputError("GPU 'm9'", "is not in the catalog.", see=CatalogHint("gpus", "the Apple parts", "apple"),
                    local_fix="or add a row with use_user_catalog()/GPUPLAN_GPUS_CSV"),
         "Fix: `gpuplan gpus apple` lists the Apple parts; or add a row with use_user_catalog()/GPUPLAN_GPUS_CSV.",
         "Fix: GET /api/gpus?filter=apple lists the Apple parts.",
         {"kind": "catalog", "name": "gpus", "route": "/api/gpus?filter=apple"}),
        (InputError("scenario", "'bogus' is not a scenario field.", "correct the field(s) named above",
                    see=CatalogHint("schema", "every field and its range")),
         "Fix: correct the field(s) named above; `gpuplan schema` lists every field and its range.",
         "Fix: correct the field(s) named above; GET /api/schema lists every field and its range.",
         {"kind": "catalog", "name": "schema", "route": "/api/schema"}),
        (UnsupportedError("launch engine 'vllm': task 'train'", "this engine serves models.",
                          "Engines that can: torchrun, hf.", see=InputHint("engine", "a training engine")),
         "Fix: Engines that can: torchrun, hf; set --engine to a training engine.",
         'Fix: Engines that can: torchrun, hf; set "engine" to a training engine.',
         {"kind": "field", "name": "engine", "route": None}),
        (UnsupportedError("infer.gpu_layers", "12 of 32 layers run on the CPU.",
                          see=CommandHint("estimate", "the memory of this plan")),
         "Fix: `gpuplan estimate` gives the memory of this plan.",
         "Fix: POST /api/estimate gives the memory of this plan.",
         {"kind": "request", "name": "estimate", "route": "/api/estimate"}),
        (InputError("hardware.count 512", "gives 9,000 placements.", "use fewer GPUs",
                    local_fix="`gpuplan rl-plan SCENARIO` on your own machine searches any count"),
         "Fix: use fewer GPUs; `gpuplan rl-plan SCENARIO` on your own machine searches any count.",
         "Fix: use fewer GPUs.", None),
    ]


@pytest.mark.parametrize("case", range(6))
def test_a_pointed_error_reads_right_on_both_surfaces(case):
    import pickle
    from gpuplan.web.app import _reply
    from gpuplan.web.jobs import WebError
    from gpuplan.web.workers import _failure
    err, cli, web, see = _pointed_errors()[case]
    assert err.message.endswith(cli)                               # the CLI (and the library) name the command
    body = WebError.of(err).body()["error"]
    assert body["message"].endswith(web) and body["see"] == see
    text = " ".join((body["what"], body["why"], body["fix"], body["message"]))
    assert "`gpuplan" not in text and "--" not in text and "GPUPLAN_GPUS_CSV" not in text
    # the process-isolated path (a worker's reply, pickled to the parent) keeps the same body
    reply = pickle.loads(pickle.dumps(_failure(err)))
    with pytest.raises(WebError) as raised:
        _reply(reply, None)
    assert raised.value.body() == WebError.of(err).body()


def test_a_library_error_in_a_request_carries_its_pointer_and_the_route_answers(client):
    # unknown GPU in an estimate: `see` names the catalog and a route that lists it
    err = error_of(client.post("/api/estimate", json={**SMALL, "hardware": {"gpu": "zzz"}}), 400)
    assert err["see"] == {"kind": "catalog", "name": "gpus", "route": "/api/gpus"}
    assert err["fix"] == "GET /api/gpus lists the ids."
    assert client.get(err["see"]["route"]).status_code == 200
    # an unknown field in a recommend scenario: the schema
    err = error_of(client.post("/api/recommend", json={"scenario": {**SMALL, "bogus": 1}}), 400)
    assert err["see"]["route"] == "/api/schema" and client.get("/api/schema").status_code == 200
    # the launch task mismatch names the request's field
    scn = {"model": "qwen2.5-0.5b", "task": "infer", "hardware": {"gpu": "l4", "count": 1}}
    err = error_of(client.post("/api/launch", json={"scenario": scn, "engine": "slurm"}), 422)
    assert err["see"] == {"kind": "field", "name": "engine", "route": None}
    # the web's own schema check points at the schema too; an error with nowhere to look carries no pointer
    err = error_of(client.post("/api/estimate", json={**SMALL, "hardware": {"gpu": "l4"}, "bogus": 1}), 422)
    assert err["see"] == {"kind": "catalog", "name": "schema", "route": "/api/schema"}
    assert err["fix"] == "correct the field(s) named above; GET /api/schema lists every scenario field."
    assert error_of(client.get("/api/nope"), 404)["see"] is None


def test_the_cli_says_the_command():
    from gpuplan.errors import UnknownNameError
    from gpuplan.hardware import get_gpu
    with pytest.raises(UnknownNameError) as raised:
        get_gpu("zzz")
    assert raised.value.message.endswith("Fix: `gpuplan gpus` lists the ids; or add a row with "
                                         "use_user_catalog()/GPUPLAN_GPUS_CSV.")


def test_huge_objective_weights_rank_as_their_ratio(client):
    # {"cost": 1e308, "time": 1e308}: the weights' sum overflowed to inf, every weighted score became 0 and the
    # plans came back in cost order (rtx-3060-ti first) instead of the order {"cost": 1, "time": 1} gives;
    # search/rank.score_fn now takes shares of the largest weight before summing
    def order(weights):
        r = client.post("/api/recommend", json={"scenario": SMALL, "objective": weights, "top": 5})
        assert r.status_code == 200, r.text
        return [p["summary"] for p in r.json()["plans"]]
    assert order({"cost": 1e308, "time": 1e308}) == order({"cost": 1, "time": 1})
    assert order({"cost": 1e308, "time": 1e307}) == order({"cost": 10, "time": 1})


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded", "text/json"])
@pytest.mark.parametrize("path,body", [
    ("/api/estimate", b'{"model": "qwen2.5-0.5b", "task": "infer", "hardware": {"gpu": "l4"}}'),
    ("/api/recommend", b'{"scenario": {"model": "qwen2.5-0.5b", "task": "infer"}}'),
])
def test_json_body_sent_without_json_content_type_names_the_header(client, content_type, path, body):
    # a valid JSON body sent as curl -d sends it (application/x-www-form-urlencoded), as text/plain or with no
    # Content-Type: FastAPI hands pydantic the raw bytes and the answer was a 422 "'(top level)' Input should be a
    # valid dictionary or object to extract fields from"; now a 415 that names the header and the fix
    r = client.post(path, content=body, headers={"content-type": content_type} if content_type else {})
    err = error_of(r, 415)
    assert err["what"] == "Content-Type header" and "application/json" in err["fix"]
    assert (content_type or "missing") in err["why"]
    ok = client.post(path, content=body, headers={"content-type": "application/json"})
    assert ok.status_code == 200, ok.text


def test_415_is_documented(client):
    spec = client.get("/openapi.json").json()
    assert "415" in spec["paths"]["/api/estimate"]["post"]["responses"]


def test_slurm_with_an_inner_engine_it_cannot_wrap_says_which_it_can(client):
    # /api/launch {"engine": "slurm", "inner": "trl"} on a training scenario answered "slurm wraps a training
    # engine." (trl is one) with "pass one of them as the inner engine: Engines that can: ..."; the set comes from
    # launch/slurm.LAUNCH_SCRIPT (the engines it writes a job step for)
    scn = {"model": "qwen2.5-0.5b", "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": 8}}
    err = error_of(client.post("/api/launch", json={"scenario": scn, "engine": "slurm", "inner": "trl"}), 422)
    assert "wraps a training engine" not in err["why"] and "'trl'" in err["why"]
    assert err["fix"] == "pass one of torchrun, hf, deepspeed, megatron as the inner engine."
    ok = client.post("/api/launch", json={"scenario": scn, "engine": "slurm", "inner": "hf"})
    assert ok.status_code == 200, ok.text


def test_launch_task_mismatch_names_the_request_field_not_the_cli_flag(client):
    # /api/launch {"engine": "slurm"} on an inference scenario: the fix said "pass --engine for a serving engine"
    scn = {"model": "qwen2.5-0.5b", "task": "infer", "hardware": {"gpu": "l4", "count": 1}}
    err = error_of(client.post("/api/launch", json={"scenario": scn, "engine": "slurm"}), 422)
    assert "--engine" not in err["fix"] and 'set "engine" to a serving engine' in err["fix"]


def test_rl_recommend_without_hardware_names_the_request_body(client):
    # /api/recommend on examples/grpo-7b-colocated.yaml without its hardware section: the error's 'what' was
    # "scenario (dict)" (the library's default source label) and its fix pointed at `gpuplan schema`
    import yaml
    with open("examples/grpo-7b-colocated.yaml") as f:
        scn = yaml.safe_load(f)
    scn.pop("hardware")
    # (since issue 20's ptuser pass an RL recommend without a GPU is refused first, as on the CLI: it places rollout
    # and training on one GPU type, which it does not choose, and compare weighs GPU types)
    err = error_of(client.post("/api/recommend", json={"scenario": scn}), 400)
    assert err["what"] == "recommend on an RL scenario" and "names no GPU" in err["why"] and "(dict)" not in err["what"]
    assert err["fix"].startswith("set hardware.gpu and hardware.count; POST /api/compare gives")
