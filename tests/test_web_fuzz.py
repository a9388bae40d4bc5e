"""Seeded fuzz of the web API (issue 16): generated partial scenarios POSTed to /api/recommend and
scenarios to /api/estimate — mostly malformed or absurd (rejected before any search), plus a share
of small valid ones that run. Asserts: no 5xx, every 4xx body has the error shape, no request over
10 s, and no absurd value accepted. Deterministic: a fixed seed, the same cases every run."""
from __future__ import annotations

import collections
import copy
import json
import math
import random
import time

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from fastapi.testclient import TestClient  # noqa: E402

from gpuplan.web import create_app  # noqa: E402

SEED = 1616
CASES = 1100
MAX_SECONDS = 10.0

SMALL_MODELS = ["smollm2-135m-instruct", "qwen2.5-0.5b", "gpt2", "llama-3.2-1b", "qwen3-0.6b"]
GPUS = ["h100-sxm", "rtx-4090", "a100-sxm-80gb", "l4"]
BASES = [
    {"model": "qwen2.5-0.5b", "task": "finetune", "hardware": {"gpu": "rtx-4090", "count": 1},
     "train": {"method": "lora", "seq_len": 512}},
    {"model": "smollm2-135m-instruct", "task": "train", "hardware": {"gpu": "l4", "count": 1},
     "train": {"seq_len": 1024, "tokens": 1e8}},
    {"model": "gpt2", "task": "infer", "hardware": {"gpu": "l4", "count": 1},
     "infer": {"prompt_len": 512, "output_len": 128, "concurrency": 4}},
    {"model": "qwen3-0.6b", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 1},
     "infer": {"weights": "bf16", "concurrency": 8}},
]
# (section or "", field) a mutation may set
FIELDS = [("", "model"), ("", "task"), ("", "framework"), ("", "overhead_bytes"), ("", "unknown_key"),
          ("hardware", "gpu"), ("hardware", "count"), ("hardware", "gpus_per_node"), ("hardware", "network"),
          ("parallel", "tp"), ("parallel", "pp"), ("parallel", "zero"), ("parallel", "offload"), ("parallel", "ep"),
          ("train", "seq_len"), ("train", "micro_batch"), ("train", "method"), ("train", "tokens"),
          ("train", "recompute"), ("train", "global_batch"), ("train", "lora_rank"), ("train", "bogus"),
          ("infer", "prompt_len"), ("infer", "output_len"), ("infer", "concurrency"), ("infer", "weights"),
          ("infer", "kv_cache"), ("infer", "engine"), ("cost", "spot"), ("cost", "provider")]


def _deep(depth: int):
    value: object = 1
    for _ in range(depth):
        value = {"a": value}
    return value


def absurd(rng: random.Random):
    """A value no field should accept as is (or only after a clear check)."""
    return rng.choice([
        1e9, 10 ** 9, -1, 0, -0.5, 1e308, 10 ** 400, -(10 ** 400), float("inf"), float("-inf"), float("nan"),
        "", " ", "x" * rng.choice([65, 1000, 100_000]), "\u0000", "../../etc/passwd", "https://example.com/x",
        "🙂" * 50, [], {}, [[1, 2]], [{"a": 1}], _deep(rng.choice([5, 20, 200])), True, None,
        list(range(rng.choice([65, 500]))), [8] * rng.choice([2, 200]), "auto", "1e400", "NaN",
    ])


def plausible(rng: random.Random, section: str, name: str):
    """A value of the right type, possibly a list of options (with duplicates)."""
    pools = {"gpu": GPUS, "model": SMALL_MODELS, "task": ["train", "finetune", "infer"],
             "method": ["full", "lora", "qlora"], "weights": ["bf16", "fp8", "awq-int4"], "kv_cache": ["bf16", "fp8"],
             "engine": ["vllm", "sglang", "trtllm"], "recompute": ["none", "selective", "full"],
             "offload": ["none", "optimizer"], "framework": ["hf", "megatron"], "network": ["nvlink", "ib-400g"]}
    if name in pools:
        value = rng.choice(pools[name])
    elif name in ("spot",):
        value = rng.random() < 0.5
    else:
        value = rng.choice([1, 2, 4, 8, 128, 512, 1024])
    if section in ("hardware", "parallel", "train", "infer") and rng.random() < 0.3:
        return [value, value] + ([rng.choice(pools.get(name, [1, 2, 4]))] if rng.random() < 0.5 else [])
    return value


def mutate(rng: random.Random, scenario: dict) -> dict:
    out = copy.deepcopy(scenario)
    for _ in range(rng.randint(1, 3)):
        section, name = rng.choice(FIELDS)
        value = absurd(rng) if rng.random() < 0.75 else plausible(rng, section, name)
        holder = out if not section else out.setdefault(section, {})
        if not isinstance(holder, dict):
            continue
        holder[name] = value
    if rng.random() < 0.05:
        out[rng.choice(["hardware", "train", "infer", "parallel"])] = absurd(rng)
    return out


def case(rng: random.Random, i: int) -> tuple[str, object]:
    """(path, body) of the i-th request; about a fifth are valid small requests that really run."""
    base = rng.choice(BASES)
    valid = i % 5 == 0
    scn = copy.deepcopy(base) if valid else mutate(rng, base)
    if rng.random() < 0.5:
        return "/api/estimate", scn
    body: dict = {"scenario": scn}
    if not valid and rng.random() < 0.3:
        extra = rng.choice([("top", absurd(rng)), ("gpus", absurd(rng)), ("objective", absurd(rng)),
                            ("constraints", {"budget_usd": absurd(rng)}), ("surprise", 1)])
        body[extra[0]] = extra[1]
    if rng.random() < 0.03:
        return "/api/recommend", absurd(rng)                       # not even an object
    return "/api/recommend", body


def encode(body: object) -> bytes:
    return json.dumps(body, allow_nan=True).encode()          # NaN/Infinity literals on purpose


def _absurd(value: object, key: str = "") -> bool:
    """A non-finite or astronomically large number anywhere, or a GPU count of a million or more."""
    if isinstance(value, dict):
        return any(_absurd(v, str(k)) for k, v in value.items())
    if isinstance(value, list):
        return any(_absurd(v, key) for v in value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(value, float) and not math.isfinite(value):
        return True
    return abs(value) >= 1e300 or (key == "count" and value >= 10 ** 6)


def _absurd_accepted(body: object, status: int) -> bool:
    return status == 200 and _absurd(body)


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(workers=2, time_limit_s=MAX_SECONDS, per_client=4)) as c:
        yield c


def test_fuzz_recommend_and_estimate(client):
    rng = random.Random(SEED)
    statuses: collections.Counter = collections.Counter()
    slowest = (0.0, None)
    t_all = time.monotonic()
    for i in range(CASES):
        path, body = case(rng, i)
        data = encode(body)
        if len(data) > 200_000:
            data = data[:200_000]                               # a truncated (malformed) body: still must be a 4xx
        t0 = time.monotonic()
        r = client.post(path, content=data, headers={"content-type": "application/json"})
        took = time.monotonic() - t0
        slowest = max(slowest, (took, (path, data[:200])), key=lambda x: x[0])
        statuses[(path, r.status_code)] += 1
        assert r.status_code < 500, (i, path, data[:300], r.text[:500])
        assert took < MAX_SECONDS, (i, path, data[:300], took)
        if r.status_code >= 400:
            err = r.json()["error"]
            assert set(err) >= {"what", "why", "fix", "close_matches"}, (i, r.text[:300])
            assert err["what"] and err["why"]
            assert len(r.content) < 8000, (i, len(r.content))
        assert not _absurd_accepted(body, r.status_code), (i, path, data[:300])
    ok = sum(n for (p, s), n in statuses.items() if s == 200)
    print(f"\n{CASES} requests in {time.monotonic() - t_all:.1f} s; slowest {slowest[0]:.2f} s; "
          f"statuses {dict(sorted(statuses.items()))}")
    assert ok >= CASES // 10          # the valid share really ran, so the fuzz reaches the search
