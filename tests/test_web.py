"""HTTP API: every endpoint's happy path, bad input as 4xx JSON, the web-mode safety rules, and
a bounded fuzz of the OpenAPI document (schemathesis when installed, Hypothesis always)."""
from __future__ import annotations

import collections
import json

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from fastapi.testclient import TestClient  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from gpuplan.web import create_app  # noqa: E402

TRAIN = {"model": "llama-3.2-1b", "task": "train", "hardware": {"gpu": "h100-sxm", "count": 8},
         "train": {"seq_len": 4096, "micro_batch": 2, "tokens": 1e10}, "parallel": {"zero": 3}}
FINETUNE = {"model": "llama-3.1-8b", "task": "finetune", "hardware": {"gpu": "rtx-4090"},
            "train": {"method": "qlora", "seq_len": 2048}}
INFER = {"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "h100-sxm"},
         "infer": {"weights": "fp8", "concurrency": 16}}
FUZZ = dict(deadline=None, database=None, suppress_health_check=list(HealthCheck))
STATUS_SEEN: collections.Counter = collections.Counter()


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(time_limit_s=30)) as c:
        yield c


def error_of(r, status: int | tuple[int, ...]) -> dict:
    """The JSON error body of a response that must have one of these statuses."""
    statuses = (status,) if isinstance(status, int) else status
    assert r.status_code in statuses, (r.status_code, r.text[:500])
    assert r.headers["content-type"].startswith("application/json")
    err = r.json()["error"]
    assert set(err) >= {"what", "why", "fix", "matches"}
    assert err["what"] and err["why"]
    assert "Traceback" not in r.text and 'File "' not in r.text
    return err


# ---- meta ----------------------------------------------------------------------------------------------
def test_healthz_schema_openapi(client):
    assert client.get("/healthz").json()["status"] == "ok"
    schema = client.get("/api/schema").json()
    assert "hardware" in schema["properties"] and "model" in schema["properties"]
    doc = client.get("/openapi.json").json()
    paths = set(doc["paths"])
    for p in ("/api/models", "/api/models/{name}", "/api/gpus", "/api/gpus/{gpu_id}", "/api/estimate",
              "/api/recommend", "/api/compare", "/api/launch", "/api/serving-curve", "/api/schema", "/healthz"):
        assert p in paths, p


def test_options_lists_vocabularies(client):
    o = client.get("/api/options").json()
    assert o["tasks"] == ["train", "finetune", "infer"]
    assert "awq-int4" in o["weights"] and "vllm" in o["infer_engines"]
    assert o["allow_hub"] is False
    assert o["limits"]["max_body_bytes"] == 256 * 1024


def test_page_and_assets_are_offline(client):
    page = client.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    html = page.text
    assert "/static/app.js" in html and "/static/style.css" in html
    for asset in ("/static/app.js", "/static/style.css", "/favicon.svg"):
        r = client.get(asset)
        assert r.status_code == 200, asset
        # no CDN, no external fonts or scripts
        for needle in ("http://", "https://", "//cdn", "fonts.googleapis"):
            text = r.text.replace("http://www.w3.org/2000/svg", "")
            assert needle not in text, (asset, needle)
    assert "https://" not in html and "http://" not in html
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp
    assert page.headers["x-content-type-options"] == "nosniff"


def test_docs_ui_is_off(client):
    # Swagger/ReDoc pull scripts from a CDN: not served, so the page stays offline
    error_of(client.get("/docs"), 404)
    error_of(client.get("/redoc"), 404)


# ---- models and GPUs -----------------------------------------------------------------------------------
def test_models_list_and_search(client):
    all_models = client.get("/api/models").json()
    assert all_models["count"] == len(all_models["models"]) > 20
    found = client.get("/api/models", params={"search": "llama-3.1"}).json()["models"]
    assert found and all("llama-3.1" in m["name"] for m in found)
    m = next(m for m in found if m["name"] == "llama-3.1-8b")
    assert 7.9e9 < m["params_total"] < 8.1e9


def test_model_detail(client):
    d = client.get("/api/models/llama-3.1-8b", params={"seq_len": 4096}).json()
    assert d["num_layers"] == 32 and d["kv_cache_bytes_per_token"] == 131072
    assert d["flops_seq_len"] == 4096
    # HF id of a bundled model resolves from the registry (no hub access needed)
    assert client.get("/api/models/meta-llama/Llama-3.1-8B").json()["name"] == "llama-3.1-8b"


def test_model_unknown_has_close_matches(client):
    err = error_of(client.get("/api/models/llama-3.1-8"), 400)
    assert "llama-3.1-8b" in err["matches"]


def test_model_bad_query(client):
    error_of(client.get("/api/models/llama-3.1-8b", params={"seq_len": -1}), 422)
    error_of(client.get("/api/models/llama-3.1-8b", params={"seq_len": "many"}), 422)


def test_gpus_list_and_detail(client):
    gpus = client.get("/api/gpus", params={"filter": "h100"}).json()["gpus"]
    assert {"h100-sxm", "h100-pcie"} <= {g["id"] for g in gpus}
    g = client.get("/api/gpus/h100-sxm").json()
    assert g["id"] == "h100-sxm" and g["usable_memory_bytes"] > 80e9


def test_gpu_unknown_and_ambiguous(client):
    err = error_of(client.get("/api/gpus/h100"), 400)
    assert "h100-sxm" in err["matches"]
    err = error_of(client.get("/api/gpus/not-a-gpu"), 400)
    assert "catalog" in err["why"]


# ---- estimate --------------------------------------------------------------------------------------------
def test_estimate_train_contract(client):
    r = client.post("/api/estimate", json=TRAIN)
    assert r.status_code == 200, r.text
    e = r.json()
    mem = e["memory"]
    assert set(mem["components"]) == {"weights", "gradients", "optimizer_states", "activations", "logits", "kv_cache",
                                      "temporary", "runtime_overhead"}
    assert sum(mem["components"].values()) == mem["peak_bytes_per_gpu"]
    assert mem["fits"] is (mem["peak_bytes_per_gpu"] <= mem["capacity_bytes_per_gpu"])
    assert e["performance"]["step_time_s"] > 0 and e["performance"]["ttft_s"] is None
    assert e["cost"]["usd_per_hour"] > 0
    assert e["scenario"]["hardware"]["count"] == 8 and e["gpu"]["id"] == "h100-sxm"
    assert "max_micro_batch" in e["fit_limits"]


def test_estimate_finetune_and_infer(client):
    ft = client.post("/api/estimate", json=FINETUNE)
    assert ft.status_code == 200, ft.text
    # NF4 base: the frozen weights take well under half of their 16-bit size
    assert ft.json()["memory"]["components"]["weights"] < 0.4 * 2 * 8.03e9
    inf = client.post("/api/estimate", json=INFER).json()
    assert inf["performance"]["tpot_s"] > 0 and inf["performance"]["step_time_s"] is None
    assert inf["memory"]["components"]["kv_cache"] > 0
    assert inf["fit_limits"]["max_concurrency"] > 16


def test_estimate_pasted_config(client):
    cfg = client.get("/api/models/qwen2.5-0.5b").json()
    assert cfg["model_type"] == "qwen2"
    config = {"model_type": "llama", "hidden_size": 512, "intermediate_size": 1408, "num_hidden_layers": 4,
              "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 32000, "_name_or_path": "tiny-llama"}
    r = client.post("/api/estimate", json={"model": config, "hardware": {"gpu": "rtx-4090"}})
    assert r.status_code == 200, r.text
    assert r.json()["model"]["num_layers"] == 4


@pytest.mark.parametrize("body, status, word", [
    ({"model": "llama-3.1-8b"}, 422, "hardware"),                                           # missing field
    ({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"}, "task": "pretrain"}, 422, "task"),
    ({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"}, "colour": 1}, 422, "colour"),  # unknown field
    ({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "count": 0}}, 422, "count"),
    ({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "count": 3}, "parallel": {"tp": 2}}, 422, "divide"),
    ({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"}, "task": "infer", "infer": {"weights": "int3"}}, 400, "int3"),
    ({"model": "llama-3.1-8b", "hardware": {"gpu": "h100"}}, 400, "ambiguous"),
    ({"model": "lama-3.1-8b", "hardware": {"gpu": "h100-sxm"}}, 400, "bundled"),
    ({"model": "", "hardware": {"gpu": "h100-sxm"}}, (400, 422), "model"),
    ({"model": {}, "hardware": {"gpu": "h100-sxm"}}, 400, "empty"),
    ({"model": {"model_type": "llama", "hidden_size": "big"}, "hardware": {"gpu": "h100-sxm"}}, 400, "hidden_size"),
    ({"model": {"model_type": "llama", "num_hidden_layers": 10 ** 9}, "hardware": {"gpu": "h100-sxm"}}, 400, "layers"),
    ([1, 2, 3], 422, "object"),
    ("llama", 422, ""),
])
def test_estimate_bad_input(client, body, status, word):
    err = error_of(client.post("/api/estimate", json=body), status)
    assert word.lower() in json.dumps(err).lower()


def test_estimate_invalid_json(client):
    r = client.post("/api/estimate", content=b'{"model": "llama-3.1-8b", ', headers={"content-type": "application/json"})
    err = error_of(r, 422)
    assert "json" in err["why"].lower()


def test_unknown_route_and_method(client):
    error_of(client.get("/api/nothing"), 404)
    error_of(client.get("/api/estimate"), 405)


# ---- safety ---------------------------------------------------------------------------------------------
PATHS = ["/etc/passwd", "../../etc/passwd", "./config.json", "~/.ssh/id_rsa", "C:\\Windows\\win.ini", "config.json",
         "/tmp", "models/llama/config.json", "scenario.yaml", "..", "/proc/self/environ"]
URLS = ["http://169.254.169.254/latest/meta-data/", "https://example.com/config.json", "file:///etc/passwd",
        "ftp://example.com/x", "www.example.com/config.json", "//example.com/config.json"]
# Hub ids that are not bundled (meta-llama/Llama-4-Scout-17B-16E was the example until it was bundled)
HUB_IDS = ["zai-org/GLM-4.5-Air", "mistralai/Mistral-Small-24B", "someone/private-model"]


@pytest.mark.parametrize("model", PATHS + URLS + HUB_IDS)
def test_model_strings_that_are_not_registry_names_are_refused(client, model, tmp_path, monkeypatch):
    # a config file that *does* exist on the server must not be read either
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    monkeypatch.chdir(tmp_path)
    for r in (client.post("/api/estimate", json={"model": model, "hardware": {"gpu": "h100-sxm"}}),
              client.post("/api/launch", json={"scenario": {"model": model, "hardware": {"gpu": "h100-sxm"}}, "engine": "torchrun"}),
              client.post("/api/recommend", json={"scenario": {"model": model, "task": "infer"}}),
              client.post("/api/serving-curve", json={"scenario": {"model": model, "task": "infer", "hardware": {"gpu": "h100-sxm"}}}),
              client.post("/api/compare", json={"scenario": {"model": model, "task": "infer"}, "gpus": ["h100-sxm"]})):
        err = error_of(r, 400)
        assert err["what"].startswith("model")
        assert "never reads" in err["why"] or "bundled" in err["why"] or "does not look up" in err["why"]


def test_existing_file_is_not_read(client, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2,
                               "num_attention_heads": 4, "intermediate_size": 512, "vocab_size": 1000}))
    for ref in (str(cfg), str(tmp_path)):
        err = error_of(client.post("/api/estimate", json={"model": ref, "hardware": {"gpu": "h100-sxm"}}), 400)
        assert "file path" in err["why"]
        error_of(client.get(f"/api/models/{ref.lstrip('/')}"), 400)


def test_hub_ids_refused_without_allow_hub_and_not_fetched(client, monkeypatch):
    import gpuplan.models.registry as reg

    def boom(*a, **k):  # the hub must not even be tried
        raise AssertionError("hub fetch attempted")
    monkeypatch.setattr(reg, "_from_hub", boom)
    err = error_of(client.post("/api/estimate", json={"model": "zai-org/GLM-4.5-Air",   # not bundled
                                                      "hardware": {"gpu": "h100-sxm"}}), 400)
    assert "--allow-hub" in err["why"]


def test_allow_hub_fetches_only_repo_ids(monkeypatch):
    import gpuplan.models.registry as reg
    asked = []
    cfg = {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
           "intermediate_size": 512, "vocab_size": 1000}

    def fake_hub(repo_id):
        asked.append(repo_id)
        return dict(cfg)
    monkeypatch.setattr(reg, "_from_hub", fake_hub)
    with TestClient(create_app(allow_hub=True, isolation="thread")) as c:   # the fake hub lives in this process
        assert c.get("/api/options").json()["allow_hub"] is True
        r = c.post("/api/estimate", json={"model": "someone/tiny", "hardware": {"gpu": "rtx-4090"}})
        assert r.status_code == 200, r.text
        assert r.json()["model"]["num_layers"] == 2
        for bad in ("/etc/passwd", "../x/y", "https://example.com/a/b", "a/b/c", "someone/../x"):
            error_of(c.post("/api/estimate", json={"model": bad, "hardware": {"gpu": "rtx-4090"}}), 400)
    assert asked == ["someone/tiny"]


def test_oversize_body_rejected(client):
    big = {"model": {"model_type": "llama", "padding": "x" * (300 * 1024)}, "hardware": {"gpu": "h100-sxm"}}
    err = error_of(client.post("/api/estimate", json=big), 413)
    assert "256 KiB" in err["why"]


def test_oversize_body_without_content_length_rejected(client):
    def chunks():
        for _ in range(40):
            yield b" " * 8192
    err = error_of(client.post("/api/estimate", content=chunks(), headers={"content-type": "application/json"}), 413)
    assert "limit" in err["why"]


def test_time_limit_returns_504_json(monkeypatch):
    """Thread isolation (the library call is replaced in this process); the process pool's own
    504 and kill are in test_web_hardening.py."""
    import time as _time

    import gpuplan.pipeline as api
    monkeypatch.setattr(api, "evaluate", lambda *a, **k: _time.sleep(2))
    with TestClient(create_app(time_limit_s=0.3, isolation="thread")) as c:
        err = error_of(c.post("/api/estimate", json=INFER), 504)
        assert "limit" in err["why"]


def test_busy_server_returns_503_json(monkeypatch):
    import threading

    import gpuplan.pipeline as api
    gate = threading.Event()
    monkeypatch.setattr(api, "evaluate", lambda *a, **k: gate.wait(5))
    app = create_app(time_limit_s=0.2, workers=1, queue_wait_s=0.2, isolation="thread")
    with TestClient(app) as c:
        error_of(c.post("/api/estimate", json=INFER), 504)       # the slot stays taken while the thread runs
        err = error_of(c.post("/api/estimate", json=INFER), 503)
        assert "busy" in err["why"]
        gate.set()


def test_internal_error_is_json_without_internals(monkeypatch):
    import gpuplan.pipeline as api

    def broken(*a, **k):
        raise ZeroDivisionError("secret internal detail /srv/gpuplan/x.py")
    monkeypatch.setattr(api, "evaluate", broken)
    with TestClient(create_app(isolation="thread")) as c:
        r = c.post("/api/estimate", json=INFER)
        err = error_of(r, 500)
        assert "secret" not in r.text and "ZeroDivision" not in r.text and "x.py" not in r.text
        assert "bug" in err["why"]


def test_host_header_check():
    with TestClient(create_app(allowed_hosts=("127.0.0.1", "localhost")), base_url="http://127.0.0.1:8000") as c:
        assert c.get("/healthz").status_code == 200
        assert c.get("/healthz", headers={"host": "localhost:8000"}).status_code == 200
        error_of(c.get("/healthz", headers={"host": "evil.example:8000"}), 400)
        error_of(c.post("/api/estimate", json=INFER, headers={"host": "attacker.test"}), 400)


# ---- serving curve, launch, recommend, compare ----------------------------------------------------------
def test_serving_curve(client):
    r = client.post("/api/serving-curve", json={"scenario": INFER, "concurrencies": [1, 4, 64, 4, 512]})
    assert r.status_code == 200, r.text
    curve = r.json()["curve"]
    assert [p["concurrency"] for p in curve] == [1, 4, 64, 512]
    assert curve[1]["output_tokens_per_s"] > curve[0]["output_tokens_per_s"]
    assert all({"ttft_s", "tpot_s", "fits"} <= set(p) for p in curve)
    default = client.post("/api/serving-curve", json={"scenario": INFER}).json()["curve"]
    assert len(default) >= 8


def test_serving_curve_bad_input(client):
    err = error_of(client.post("/api/serving-curve", json={"scenario": TRAIN}), 400)
    assert "infer" in err["why"]
    error_of(client.post("/api/serving-curve", json={"scenario": INFER, "concurrencies": [0]}), 422)
    error_of(client.post("/api/serving-curve", json={"scenario": INFER, "concurrencies": list(range(1, 200))}), 422)
    error_of(client.post("/api/serving-curve", json={"scenario": INFER, "concurrencies": []}), 422)


def test_launch(client):
    r = client.post("/api/launch", json={"scenario": INFER, "engine": "vllm"})
    assert r.status_code == 200, r.text
    files = r.json()["files"]
    assert files and any("vllm" in text for text in files.values())
    r = client.post("/api/launch", json={"scenario": TRAIN, "engine": "torchrun", "include_estimate": False})
    assert r.status_code == 200, r.text
    assert r.json()["files"]


def test_launch_bad_input(client):
    err = error_of(client.post("/api/launch", json={"scenario": INFER, "engine": "vlm"}), 400)
    assert "vllm" in err["matches"]
    error_of(client.post("/api/launch", json={"scenario": INFER}), 422)
    error_of(client.post("/api/launch", json={"scenario": TRAIN, "engine": "vllm"}), (400, 422))


def test_recommend(client):
    r = client.post("/api/recommend", json={"scenario": {"model": "llama-3.1-8b", "task": "infer"}, "top": 3,
                                            "constraints": {"max_gpus": 8, "tpot_s": 0.05}})
    assert r.status_code == 200, r.text
    rec = r.json()
    assert 1 <= len(rec["plans"]) <= 3 and rec["pareto"] and isinstance(rec["rejected"], list)
    plan = rec["plans"][0]
    assert plan["estimate"]["memory"]["fits"] and plan["scenario"]["hardware"]["count"] <= 8
    assert all(r["reason"] for r in rec["rejected"])


def test_recommend_takes_a_scenario_with_a_load_section(client):
    # examples/serve-load-llama-70b.yaml, which `gpuplan recommend` sizes for its rate and p99 SLO: its
    # infer.load is one sub-section (an object), not a list of options, and the web search takes it too
    import yaml
    from gpuplan.search import recommend
    with open("examples/serve-load-llama-70b.yaml") as f:
        scn = yaml.safe_load(f)
    r = client.post("/api/recommend", json={"scenario": scn, "top": 1})
    assert r.status_code == 200, r.text
    plan = r.json()["plans"][0]
    cli = recommend(scn, top=1, progress=False).to_json()["plans"][0]
    assert plan["summary"] == cli["summary"] and plan["estimate"]["performance"] == cli["estimate"]["performance"]
    bad = {**scn, "infer": {**scn["infer"], "load": {**scn["infer"]["load"], "rate_per_s": -1}}}
    err = error_of(client.post("/api/recommend", json={"scenario": bad}), 422)
    assert "infer.load" in err["why"]



def test_recommend_an_rl_scenario_answers_as_the_cli_does(client, capsys):
    # `gpuplan recommend` on a GRPO file runs the rl-plan placement search; the web route gives the same
    # record (it used to answer 400 pointing at rl-plan), and refuses a GPU count with too many placements
    import yaml
    from gpuplan.cli import main
    with open("examples/grpo-7b-colocated.yaml") as f:
        scn = yaml.safe_load(f)
    assert main(["recommend", "examples/grpo-7b-colocated.yaml", "--top", "3", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)["result"]
    r = client.post("/api/recommend", json={"scenario": scn, "top": 3})
    assert r.status_code == 200, r.text
    assert r.json() == cli
    assert len(cli["plans"]) == 3 and cli["plans"][0]["placement"] in ("colocated", "split") and cli["whatif"]
    big = {**scn, "hardware": {**scn["hardware"], "count": 512}}
    err = error_of(client.post("/api/recommend", json={"scenario": big}), 400)
    # the web names what its client can do; running `gpuplan rl-plan` locally is the CLI's advice only
    assert err["what"] == "hardware.count 512" and err["fix"] == "use fewer GPUs."


def test_compare_and_recommend_an_rl_scenario_answer_as_the_cli_does(client, capsys):
    """One pipeline: compare on an RL scenario gives each GPU type's cheapest placement on both surfaces, and both
    refuse the search settings an RL placement search would silently drop."""
    import yaml
    from gpuplan.cli import main
    with open("examples/grpo-7b-colocated.yaml", encoding="utf-8") as f:
        scn = yaml.safe_load(f)
    assert main(["compare", "examples/grpo-7b-colocated.yaml", "--gpus", "h100-sxm,a100-sxm-80gb", "--steps", "200",
                 "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)["result"]
    r = client.post("/api/compare", json={"scenario": scn, "gpus": ["h100-sxm", "a100-sxm-80gb"], "steps": 200})
    assert r.status_code == 200, r.text
    assert r.json() == cli and cli["steps"] == 200 and [row["gpu"] for row in cli["rows"]] == ["h100-sxm", "a100-sxm-80gb"]
    assert cli["rows"][0]["fits"] and cli["rows"][0]["usd_total"] > 0
    err = error_of(client.post("/api/recommend", json={"scenario": scn, "gpus": ["l40s"],
                                                       "constraints": {"budget_usd": 500}}), 400)
    assert "gpus" in err["what"] and "constraints.budget_usd" in err["what"]
    assert err["see"] == {"kind": "request", "name": "compare", "route": "/api/compare"} and "`gpuplan" not in err["fix"]
    err = error_of(client.post("/api/compare", json={"scenario": {**scn, "train": {"method": "full"}},
                                                     "gpus": ["h100-sxm"], "steps": 10}), 400)
    assert err["what"] == "steps"

def test_recommend_bad_input(client):
    err = error_of(client.post("/api/recommend", json={"scenario": {"model": "llama-3.1-8b"}, "preset": "cheap"}), 400)
    assert "preset" in err["what"]
    error_of(client.post("/api/recommend", json={"scenario": {"task": "infer"}}), 400)
    error_of(client.post("/api/recommend", json={"scenario": {"model": "llama-3.1-8b"}, "top": 0}), 422)
    error_of(client.post("/api/recommend", json={"scenario": {"model": "llama-3.1-8b"}, "constraints": {"budget": 5}}), 422)
    error_of(client.post("/api/recommend", json={"scenario": {"model": "llama-3.1-8b", "task": "cook"}}), 400)


def test_compare(client):
    r = client.post("/api/compare", json={"scenario": {"model": "llama-3.1-8b", "task": "infer"},
                                          "gpus": ["h100-sxm", "rtx-4090"]})
    assert r.status_code == 200, r.text
    rows = r.json()["rows"]
    assert [row["gpu"] for row in rows] == ["h100-sxm", "rtx-4090"]
    err = error_of(client.post("/api/compare", json={"scenario": {"model": "llama-3.1-8b"}, "gpus": ["h100"]}), 400)
    assert "h100-sxm" in err["matches"]
    error_of(client.post("/api/compare", json={"scenario": {"model": "llama-3.1-8b"}, "gpus": []}), 422)


# ---- fuzz -----------------------------------------------------------------------------------------------
def _call(client, kw: dict):
    r = client.request(kw["method"], kw["url"], headers=kw.get("headers"), params=kw.get("params"),
                       json=kw.get("json"), content=None if "json" in kw else kw.get("content"))
    return r


def _operations():
    schemathesis = pytest.importorskip("schemathesis")
    schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(time_limit_s=30))
    return schema, [(op.ok().path, op.ok().method.upper()) for op in schema.get_all_operations()]


def test_openapi_fuzz_with_schemathesis(client):
    """Schema-driven requests (schemathesis strategies, ~50 per operation): zero 5xx, errors are JSON."""
    schema, ops = _operations()
    assert len(ops) >= 12
    seen: collections.Counter = collections.Counter()
    for path, method in ops:
        examples = 10 if method == "GET" and "{" not in path else 50

        @settings(max_examples=examples, **FUZZ)
        @given(schema[path][method].as_strategy())
        def fuzz(case):
            r = _call(client, case.as_transport_kwargs(base_url="http://testserver"))
            seen[(method, path, r.status_code)] += 1
            assert r.status_code < 500, (path, r.status_code, r.text[:300])
            if r.status_code >= 400:
                error_of(r, r.status_code)
        fuzz()
    STATUS_SEEN.update(seen)
    print("\nschemathesis requests per (method, path, status):", dict(sorted(seen.items())))


MODELS = ["llama-3.2-1b", "qwen2.5-0.5b", "smollm2-135m-instruct", "gemma-2-2b", "gpt2", "mixtral-8x7b-v0.1",
          "deepseek-v2-lite", "qwen3-30b-a3b", "llama-3.1-8b"]
GPUS = ["h100-sxm", "rtx-4090", "a100-sxm-80gb", "mi300x", "l4", "t4", "tpu-v5e", "m3-max", "gaudi3", "b200"]


@st.composite
def scenarios(draw):
    task = draw(st.sampled_from(["train", "finetune", "infer"]))
    count = draw(st.sampled_from([1, 2, 4, 8, 16, 64]))
    s: dict = {"model": draw(st.sampled_from(MODELS)), "task": task,
               "hardware": {"gpu": draw(st.sampled_from(GPUS)), "count": count},
               "framework": draw(st.sampled_from(["hf", "megatron", "torchtitan", "deepspeed"]))}
    par = draw(st.fixed_dictionaries({}, optional={
        "tp": st.sampled_from([1, 2, 4, 8]), "pp": st.sampled_from([1, 2, 4]), "zero": st.integers(0, 3),
        "offload": st.sampled_from(["none", "optimizer", "optimizer+params"]), "ep": st.sampled_from([1, 2, 4])}))
    if par:
        s["parallel"] = par
    if task == "infer":
        s["infer"] = draw(st.fixed_dictionaries({}, optional={
            "weights": st.sampled_from(["bf16", "fp8", "awq-int4", "gptq-int4", "nf4", "gguf-q4_k_m", "int8", "mxfp4"]),
            "kv_cache": st.sampled_from(["bf16", "fp8", "q8_0"]),
            "engine": st.sampled_from(["vllm", "sglang", "trtllm", "llama.cpp", "hf"]),
            "prompt_len": st.integers(1, 200_000), "output_len": st.integers(1, 20_000),
            "concurrency": st.integers(1, 4096), "gpu_memory_utilization": st.floats(0.05, 1.0)}))
    else:
        s["train"] = draw(st.fixed_dictionaries({}, optional={
            "method": st.sampled_from(["full", "lora", "qlora"]), "precision": st.sampled_from(["bf16", "fp16", "fp32", "fp8"]),
            "optimizer": st.sampled_from(["adamw", "adamw-8bit", "sgd", "adafactor", "lion"]),
            "seq_len": st.integers(1, 262_144), "micro_batch": st.integers(1, 256),
            "global_batch": st.integers(1, 65_536), "recompute": st.sampled_from(["none", "selective", "full"]),
            "attention": st.sampled_from(["flash", "sdpa", "eager"]), "lora_rank": st.integers(1, 1024),
            "tokens": st.floats(1, 1e14)}))
    return s


@settings(max_examples=50, **FUZZ)
@given(scenarios())
def test_estimate_fuzz_with_real_names(client, scenario):
    """Hypothesis: valid names, random settings -> 200 with a consistent breakdown, or a 4xx JSON error."""
    r = client.post("/api/estimate", json=scenario)
    STATUS_SEEN[("POST", "/api/estimate (real names)", r.status_code)] += 1
    assert r.status_code < 500, (scenario, r.text[:500])
    if r.status_code == 200:
        mem = r.json()["memory"]
        assert sum(mem["components"].values()) == mem["peak_bytes_per_gpu"]
    else:
        error_of(r, r.status_code)


@settings(max_examples=25, **FUZZ)
@given(scenarios(), st.data())
def test_launch_and_curve_fuzz_with_real_names(client, scenario, data):
    engines = ["vllm", "sglang", "trtllm", "llama.cpp"] if scenario["task"] == "infer" else \
        ["torchrun", "hf", "deepspeed", "megatron", "slurm"]
    engine = data.draw(st.sampled_from(engines))
    r = client.post("/api/launch", json={"scenario": scenario, "engine": engine, "include_estimate": False})
    STATUS_SEEN[("POST", "/api/launch (real names)", r.status_code)] += 1
    assert r.status_code < 500, (scenario, engine, r.text[:500])
    if r.status_code >= 400:
        error_of(r, r.status_code)
    if scenario["task"] == "infer":
        r = client.post("/api/serving-curve", json={"scenario": scenario, "concurrencies": [1, 8, 64]})
        STATUS_SEEN[("POST", "/api/serving-curve (real names)", r.status_code)] += 1
        assert r.status_code < 500, (scenario, r.text[:500])


@pytest.fixture(scope="module", autouse=True)
def _report_fuzz_counts():
    yield
    if STATUS_SEEN:
        print("\nweb fuzz requests per (method, path, status):")
        for key, n in sorted(STATUS_SEEN.items()):
            print(f"  {key[0]} {key[1]} -> {key[2]}: {n}")


# ---- CLI ------------------------------------------------------------------------------------------------
def test_cli_parser_defaults_to_loopback():
    import argparse

    from gpuplan.web import cli
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    cli.add_parser(sub)
    args = parser.parse_args(["web"])
    assert (args.host, args.port, args.allow_hub) == ("127.0.0.1", 8000, False)
    assert args.func is cli.run
    args = parser.parse_args(["web", "--host", "0.0.0.0", "--port", "9000", "--allow-hub"])
    assert (args.host, args.port, args.allow_hub) == ("0.0.0.0", 9000, True)
    assert cli.is_loopback("127.0.0.1") and cli.is_loopback("localhost") and cli.is_loopback("::1")
    assert not cli.is_loopback("0.0.0.0") and not cli.is_loopback("192.168.1.2")


def test_cli_without_web_extra_prints_pip_command(monkeypatch, capsys):
    import argparse
    import sys

    from gpuplan.web import cli
    monkeypatch.setitem(sys.modules, "uvicorn", None)       # import uvicorn -> ImportError
    rc = cli.run(argparse.Namespace(host="127.0.0.1", port=8000, allow_hub=False, time_limit=30.0, workers=4))
    assert rc == 2
    assert "pip install '.[web]'" in capsys.readouterr().err


def test_cli_serves_on_loopback_only(monkeypatch):
    import argparse

    import uvicorn

    from gpuplan.web import cli
    seen = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: seen.update(kw, app=app))
    assert cli.run(argparse.Namespace(host="127.0.0.1", port=8123, allow_hub=False, time_limit=5.0, workers=2)) == 0
    assert seen["host"] == "127.0.0.1" and seen["port"] == 8123
    with TestClient(seen["app"], base_url="http://127.0.0.1:8123") as c:
        assert c.get("/healthz").status_code == 200
        error_of(c.get("/healthz", headers={"host": "rebind.attacker.example"}), 400)


def test_calibration_profile_path_is_refused(client, tmp_path):
    """A scenario's hardware.profile names a file; the web API never reads server files."""
    p = tmp_path / "profile.json"
    p.write_text("{}")
    body = {"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "h100-sxm", "profile": str(p)}}
    r = client.post("/api/estimate", json=body)
    assert r.status_code == 400 and "never reads files" in r.json()["error"]["why"]
