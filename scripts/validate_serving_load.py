"""Score the serving-under-load simulator (docs/serving-load.md) on published load tests
(validation/gathered/serve-load.csv): each row's stated engine, GPU, TP, lengths and load (Poisson rate,
closed loop of N clients, or all requests at t=0) is simulated and the predicted TTFT and TPOT (the
statistic the source reports: mean or median) are printed beside the measured ones, with the median
error per source and over all scored rows.

No constant is fitted on these rows (the step cost is the packaged `serve` calibration, the scheduler
rules are read from the engines), so the leave-one-source-out error equals the in-sample error; the
script says so rather than computing a refit that does not exist.

    PYTHONPATH=src python scripts/validate_serving_load.py [--rows ID,ID] [--csv OUT]
"""
from __future__ import annotations

import argparse
import dataclasses
import csv
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from gpuplan import pipeline  # noqa: E402
from gpuplan.errors import GpuplanError  # noqa: E402

CSV = ROOT / "validation" / "gathered" / "serve-load.csv"
# Length shape of the ShareGPT benchmark workloads (vLLM / SGLang bench_serving): log-normal around the
# row's stated means, the spreads and the clips are ours (the benchmarks drop prompts over 1024 tokens and
# pairs over 2048), not fitted to any row.
SHAREGPT_CV = {"input": 1.0, "output": 1.0}
SHAREGPT_MAX = {"input": 1024, "output": 1024}
LIGHT_CLIENTS = 8          # closed loops up to this many clients count as light load in the offset diagnostic


# MLPerf's OpenOrca set (language/llama2-70b, processorca.py) keeps prompts up to 1024 tokens and the loadgen
# caps outputs at 1024: the same log-normal shape and clips as ShareGPT (our assumption, not fitted)
SHAPED = ("sharegpt", "openorca")


def replicas(row: dict) -> int:
    """Model copies the row's GPUs hold (MLPerf: e.g. 8 GPUs as 4 replicas of tp 2, the load split evenly)."""
    return max(1, int(row["gpus"]) // (int(row["tp"]) * int(row.get("pp") or 1)))


def scenario(row: dict, input_mean: float | None = None) -> dict:
    tp = int(row["tp"])
    load: dict = {"arrival": row["arrival"], "requests": int(row["requests"]), "seed": 0}
    if row["rate_per_s"]:   # the row's rate is the whole system's; one replica gets its share
        load["rate_per_s"] = float(row["rate_per_s"]) / replicas(row)
    if row["clients"]:
        load["clients"] = int(row["clients"])
    if row.get("warmup_requests"):             # requests the measurement leaves out (the row's notes say why)
        load["warmup_requests"] = int(row["warmup_requests"])
    if row.get("slo_ttft_p99_ms"):
        load.update(slo_ttft_s=float(row["slo_ttft_p99_ms"]) / 1e3, slo_tpot_s=float(row["slo_tpot_p99_ms"]) / 1e3,
                    slo_percentile=99)
    for k in ("input", "output"):
        mean = float(row[f"{k}_mean_tokens"]) if (k == "output" or input_mean is None) else input_mean
        if row["dataset"] in SHAPED:
            load[k] = {"dist": "lognormal", "mean": mean, "cv": SHAREGPT_CV[k], "min": 4, "max": SHAREGPT_MAX[k]}
        else:
            load[k] = {"dist": "fixed", "mean": mean}
    # the KV cache is stored in the weights' format for 16-bit and fp8 rows; 4-bit weight formats (mxfp4)
    # keep a bf16 cache
    kv = row["weights"] if row["weights"] in ("bf16", "fp16", "fp8") else "bf16"
    infer = {"engine": row["engine"], "weights": row["weights"], "kv_cache": kv,
             "prompt_len": 1024, "output_len": 256, "load": load}
    if row.get("max_num_seqs"):
        infer["max_num_seqs"] = int(row["max_num_seqs"])
    if row.get("gpu_memory_utilization"):
        infer["gpu_memory_utilization"] = float(row["gpu_memory_utilization"])
    if row.get("max_num_batched_tokens"):       # the engine's token budget per step, where the source sets it
        infer["max_num_batched_tokens"] = int(row["max_num_batched_tokens"])
    if row.get("capacity_scheduler"):           # TensorRT-LLM's capacity scheduler policy, where the source sets it
        infer["capacity_scheduler"] = row["capacity_scheduler"]
    if row.get("kv_cache"):                     # the KV-cache format, where the source states it
        infer["kv_cache"] = row["kv_cache"]
    if not overlaps_host(row):
        infer["async_scheduling"] = False
    if row["engine"] == "trtllm" and row["engine_version"].startswith(CPP_EXECUTOR):
        infer["trtllm_backend"] = "tensorrt"    # TensorRT engines under the C++ executor
    infer.update(engine_flags(row["engine_version"]))
    if row["engine"] == "vllm" and vllm_v0_engine(row["engine_version"]):
        infer["vllm_v0"] = True                 # the V0 LLMEngine: its host work, eager prompt steps (docs)
    if (row.get("http_front_end") or "").startswith("no"):   # an in-process client: no HTTP front end
        infer["front_end"] = False
    if parses_chat_template(row):
        infer["chat_template_parse"] = True
    return {"model": row["model"], "task": "infer",
            "hardware": {"gpu": row["gpu"], "count": tp},
            "parallel": {"tp": tp}, "infer": infer}


# engine command-line flags the source states beside the version (e.g. vLLM 0.6.0's "--num-scheduler-steps 10
# --max_model_len 4096"), as scenario fields
ENGINE_FLAGS = {"--num-scheduler-steps": "num_scheduler_steps", "--max_model_len": "max_model_len",
                "--max-model-len": "max_model_len"}


def engine_flags(version: str) -> dict:
    words = version.replace("(", " ").replace(")", " ").replace(",", " ").split()
    return {ENGINE_FLAGS[w]: int(words[i + 1]) for i, w in enumerate(words[:-1]) if w in ENGINE_FLAGS}


def vllm_v0_engine(version: str) -> bool:
    """The row ran vLLM's V0 engine: the version says so, or it predates 0.8 (V1 became the default in vLLM 0.8.0;
    infer.vllm_v0's own description)."""
    if "V0 engine" in version:
        return True
    parts = version.split()[0].split(".")
    return (int(parts[0]), int(parts[1])) < (0, 8)


# the first versions whose default overlaps the scheduler's host work with the GPU step (estimate/engine_host.py):
# vLLM 0.14.0 (async scheduling on by default), SGLang 0.4 (overlap scheduler); TensorRT-LLM 1.x's PyTorch
# backend (its overlap scheduler is on by default); not the C++ executor of the MLPerf / NIM rows (CPP_EXECUTOR)
OVERLAP_FROM = {"vllm": (0, 14), "sglang": (0, 4)}


# TensorRT-LLM served through TensorRT engines and the C++ executor (NIM's TensorRT-LLM profiles, NVIDIA's MLPerf
# harness) runs a synchronous loop: `Executor::Impl::executionLoop` (cpp/tensorrt_llm/executor/executorImpl.cpp)
# calls forwardSync (waits for the step in flight), then fetchNewRequests, then forwardAsync (schedules and launches
# the next step), so a request that arrives during a step joins the next one
CPP_EXECUTOR = ("NIM ", "TensorRT-LLM (NVIDIA MLPerf")


def parses_chat_template(row: dict) -> bool:
    """vLLM 0.11.0 parses the model's Jinja chat template for every chat request (estimate/engine_host.py,
    VLLM_CHAT_TEMPLATE_PARSE_S); gpt-oss goes through the harmony renderer instead (vllm 0.11.0
    entrypoints/openai/serving_chat.py: use_harmony = hf_config.model_type == "gpt_oss"), which skips it."""
    return (row["engine"] == "vllm" and row["engine_version"].split()[0] == "0.11.0"
            and row.get("endpoint") == "/v1/chat/completions" and not row["model"].startswith("gpt-oss"))


def overlaps_host(row: dict) -> bool:
    if row["engine"] == "trtllm" and row["engine_version"].startswith(CPP_EXECUTOR):
        return False
    first = OVERLAP_FROM.get(row["engine"])
    if first is None or "--async-scheduling" in row["engine_version"]:
        return True
    parts = row["engine_version"].split()[0].split(".")
    return (int(parts[0]), int(parts[1])) >= first


def predict(row: dict, search: bool = False, input_mean: float | None = None) -> dict:
    r = pipeline.resolve(scenario(row, input_mean))
    mem = pipeline.memory(r)
    return pipeline.serving_load(r, mem, search=search)


LIGHT = "light: Poisson below capacity, closed loops of <= 8"


def load_class(row: dict) -> str:
    """The residuals differ by how loaded the engine was; the summary splits them so."""
    if row.get("measured_max_rate_per_s"):
        return "MLPerf Server: Poisson at the highest valid rate"
    if row["arrival"] == "poisson" or (row["arrival"] == "closed" and int(row["clients"]) <= LIGHT_CLIENTS):
        return LIGHT
    if row["arrival"] == "closed":
        return "heavy closed loops (25-250 clients)"
    return "all requests at once (1000)"


def stat(block: dict, which: str) -> float:
    return block["mean"] if which == "mean" else block["p50"]


def _med(errs: list[float]) -> str:
    if not errs:
        return "   n/a"
    return f"{100 * statistics.median(abs(e) for e in errs):5.1f}%"


def offline_check(rows: list[dict], server_capacity: dict[str, float] | None = None) -> None:
    """MLPerf rows whose source also ran the Offline scenario on the same system: the predicted Offline
    throughput (the source's Offline batch, all requests queued) against the measured one tests the
    capacity alone; the Server run at the same share of the *predicted* Offline throughput as it ran at of
    the measured one then tests the latency model near saturation with that capacity error taken out.
    With `server_capacity` (row id -> predicted Server capacity, whole system) it also prints the
    Server-only gap: the measured valid Server rate as a share of the measured Offline throughput against
    the predicted Server capacity as a share of the predicted Offline throughput. NVIDIA's harness streams
    one response per token per request in Server and none in Offline (main_llm.cc: mIsStreaming =
    streaming && scenario != "Offline"), a cost gpuplan does not price.
    Diagnostic only: nothing is fitted or changed by it."""
    if not rows:
        return
    print("\nMLPerf Offline (the same systems' Offline runs, their own batch sizes): capacity, and the Server "
          "latency at the measured Server/Offline share of the predicted Offline throughput")
    for row in rows:
        n = replicas(row)
        scn = scenario(row)
        load = {k: v for k, v in scn["infer"]["load"].items() if k not in ("rate_per_s", "slo_ttft_s", "slo_tpot_s",
                                                                            "slo_percentile")}
        scn["infer"]["load"] = {**load, "arrival": "offline", "requests": OFFLINE_REQUESTS}
        scn["infer"]["max_num_seqs"] = int(row["offline_max_num_seqs"])
        r = pipeline.resolve(scn)
        off = pipeline.serving_load(r, pipeline.memory(r), search=False)["requests_per_s"] * n
        meas = float(row["offline_requests_per_s"])
        share = float(row["rate_per_s"]) / meas
        at = dict(row, rate_per_s=str(share * off))
        s = predict(at)
        print(f"  {row['id']} {row['gpu']} {n} x tp{row['tp']}: Offline predicted {off:6.1f} req/s, measured {meas:6.1f} "
              f"({100 * (off - meas) / meas:+.0f}%); Server at {100 * share:.1f}% of it: TTFT "
              f"{s['ttft_s']['mean'] * 1e3:.0f} ms (measured {float(row['ttft_ms']):.0f}), TPOT "
              f"{s['tpot_s']['mean'] * 1e3:.1f} ms (measured {float(row['tpot_ms']):.1f}), "
              f"{s['mean_in_system']:.0f} requests in a replica (measured, Little's law: "
              f"{float(row['requests_per_s']) / n * (float(row['ttft_ms']) + (float(row['output_mean_tokens']) - 1) * float(row['tpot_ms'])) / 1e3:.0f})")
        b, t, tpot = step_at_measured_batch(row)
        print(f"  {row['id']} step at the measured batch ({b:.0f} running, Little's law): priced {t * 1e3:.1f} ms, "
              f"measured TPOT {tpot * 1e3:.1f} ms ({100 * (t - tpot) / tpot:+.0f}%)")
        if server_capacity and row["id"] in server_capacity:
            cap = server_capacity[row["id"]]
            print(f"  {row['id']} Server-only gap: measured valid Server rate / measured Offline {100 * share:.0f}%, "
                  f"predicted Server capacity / predicted Offline {100 * cap / off:.0f}% (the Server run streams "
                  f"every token, the Offline run none; not priced)")


OFFLINE_REQUESTS = 20000     # per replica: enough that the fill-up and the drain are a small part of the run


def step_at_measured_batch(row: dict) -> tuple[float, float, float]:
    """The step the measured Server run took, priced by gpuplan at that run's own operating point, which takes the
    queueing out (near saturation a few per cent of step cost decide a factor of two in the batch). Little's law
    on the measured means gives the replica's running batch B = rate per replica x (TTFT + (output - 1) x TPOT);
    each of them decodes at the mean context of a running request (input + the length-biased half of the output,
    under the script's output-length assumption), and the prompts arriving during one measured TPOT ride in the
    step (whole, unchunked, as the harness runs them). Returns (B, priced step s, measured TPOT s).
    Diagnostic only."""
    from gpuplan.estimate.speed import serving_model
    n = replicas(row)
    rate = float(row["requests_per_s"]) / n
    ttft, tpot = float(row["ttft_ms"]) / 1e3, float(row["tpot_ms"]) / 1e3
    out, inp = float(row["output_mean_tokens"]), float(row["input_mean_tokens"])
    batch = rate * (ttft + (out - 1) * tpot)
    context = inp + out * (1 + SHAREGPT_CV["output"] ** 2) / 2
    r = pipeline.resolve(scenario(row))
    sv = serving_model(r.scenario, r.model, r.gpu, params=r.speed_params, network=r.network,
                       memory=pipeline.memory(r))
    prompts = rate * tpot
    t = sv.decode_step(batch, context)["time"] + prompts * sv.prefill_chunk(inp, compute_only=True,
                                                                            riding_with=batch)
    return batch, t, tpot


PER_SEQ_GRID_S = (0.0, 5e-6, 10e-6, 20e-6, 40e-6, 80e-6)


def per_seq_diagnostic(rows: list[dict]) -> None:
    """Diagnostic, not used by gpuplan: would a cost per running sequence per iteration (host work that grows
    with the batch — scheduling, sampling, detokenisation, one streamed chunk per request) explain the
    heavy-load residuals, and does one value transfer between sources? Each candidate c is added to every
    simulated iteration as c x (decoding requests); c is chosen on the other sources (median |error| of TTFT
    and TPOT together) and scored on the held-out one."""
    import gpuplan.estimate.load as load_mod
    base_cost = load_mod.step_cost
    res: dict[tuple[float, str], tuple[float, float]] = {}
    try:
        for c in PER_SEQ_GRID_S:
            class PerSeq:
                def __init__(self, base, c=c):
                    self.base, self.c = base, c
                    self.frontend_s = getattr(base, "frontend_s", 0.0)

                def attention(self, t, o):
                    return self.base.attention(t, o)

                def step(self, d, ctx, p, att):
                    return self.base.step(d, ctx, p, att) + self.c * d

                def decode_sum(self, d, ctx, k):
                    return self.base.decode_sum(d, ctx, k) + self.c * d * k
            load_mod.step_cost = lambda *args, _P=PerSeq, **kw: _P(base_cost(*args, **kw))
            for row in rows:
                s = predict(row)
                tt, pt = stat(s["ttft_s"], row["statistic"]) * 1e3, stat(s["tpot_s"], row["statistic"]) * 1e3
                res[(c, row["id"])] = ((tt - float(row["ttft_ms"])) / float(row["ttft_ms"]),
                                       (pt - float(row["tpot_ms"])) / float(row["tpot_ms"]))
    finally:
        load_mod.step_cost = base_cost
    print("\ndiagnostic, not used by gpuplan: a cost c per running sequence per iteration")
    srcs = sorted({r["source"] for r in rows})
    for c in PER_SEQ_GRID_S:
        per = "  ".join(f"{s_[:12]} {_med([res[(c, r['id'])][0] for r in rows if r['source'] == s_])}/"
                        f"{_med([res[(c, r['id'])][1] for r in rows if r['source'] == s_])}" for s_ in srcs)
        print(f"  c {c * 1e6:3.0f} us  all TTFT {_med([res[(c, r['id'])][0] for r in rows])} TPOT "
              f"{_med([res[(c, r['id'])][1] for r in rows])}   (TTFT/TPOT) {per}")
    for s_ in srcs:
        train = [r for r in rows if r["source"] != s_]
        test = [r for r in rows if r["source"] == s_]
        best = min(PER_SEQ_GRID_S, key=lambda c: statistics.median(
            [abs(res[(c, r["id"])][i]) for r in train for i in (0, 1)]))
        print(f"  held out {s_[:40]:40s} c {best * 1e6:3.0f} us  TTFT {_med([res[(0.0, r['id'])][0] for r in test])}"
              f" -> {_med([res[(best, r['id'])][0] for r in test])}  TPOT {_med([res[(0.0, r['id'])][1] for r in test])}"
              f" -> {_med([res[(best, r['id'])][1] for r in test])}")


CEILING_GRID_S = (0.0, 40e-6, 60e-6, 70e-6, 80e-6, 90e-6)
CEILING_SOURCE = ("GX01", "GX02")     # the unscored gpt-oss-20b rows: the ceiling is read off them, never the scored ones


def frontend_ceiling_diagnostic(rows: list[dict]) -> None:
    """Diagnostic, not used by gpuplan: is the heavy-load gap a throughput ceiling of the HTTP front end (one
    process that detokenises and streams one chunk per token per request: c seconds per chunk), i.e. a step
    the client sees as max(engine step, c x decoding requests)? c is read off the unscored gpt-oss-20b rows
    (GX01/GX02: the smallest grid value whose TPOT error is within 5 %) and applied to the scored rows that
    have an HTTP front end (not MLPerf's in-process harness)."""
    import gpuplan.estimate.load as load_mod
    base_cost = load_mod.step_cost

    class Ceiling:
        def __init__(self, base, c):
            self.base, self.c = base, c
            self.frontend_s = getattr(base, "frontend_s", 0.0)

        def attention(self, t, o):
            return self.base.attention(t, o)

        def step(self, d, ctx, p, att):
            return max(self.base.step(d, ctx, p, att), self.c * d)

        def decode_sum(self, d, ctx, k):
            return max(self.base.decode_sum(d, ctx, k), self.c * d * k)

    def errs(c: float, subset: list[dict]) -> dict[str, tuple[float, float]]:
        out = {}
        try:
            for row in subset:
                cc = 0.0 if (row.get("http_front_end") or "").startswith("no") else c
                load_mod.step_cost = lambda *args, _c=cc, **kw: Ceiling(base_cost(*args, **kw), _c)
                s = predict(row)
                tt, pt = stat(s["ttft_s"], row["statistic"]) * 1e3, stat(s["tpot_s"], row["statistic"]) * 1e3
                out[row["id"]] = ((tt - float(row["ttft_ms"])) / float(row["ttft_ms"]),
                                  (pt - float(row["tpot_ms"])) / float(row["tpot_ms"]))
        finally:
            load_mod.step_cost = base_cost
        return out

    with CSV.open(newline="", encoding="utf-8") as fh:
        src = [r for r in csv.DictReader(fh) if r["id"] in CEILING_SOURCE]
    print("\ndiagnostic, not used by gpuplan: a front-end throughput ceiling, step seen = max(step, c x decoding)")
    c_src = CEILING_GRID_S[-1]
    for c in CEILING_GRID_S:
        e = errs(c, src)
        print(f"  c {c * 1e6:3.0f} us per streamed chunk: " + "  ".join(f"{k} TPOT {100 * v[1]:+.0f}%" for k, v in e.items()))
        if max(abs(v[1]) for v in e.values()) <= 0.05:
            c_src = min(c_src, c)
    scored = [r for r in rows if r["scored"] == "yes"]
    e0, e1 = errs(0.0, scored), errs(c_src, scored)
    print(f"  read off {', '.join(CEILING_SOURCE)}: c = {c_src * 1e6:.0f} us; on the scored rows (TTFT / TPOT median |err|):")
    for name, ids in ([("all", [r["id"] for r in scored])]
                      + [(cls, [r["id"] for r in scored if load_class(r) == cls])
                         for cls in sorted({load_class(r) for r in scored})]):
        print(f"    {name[:44]:44s} {_med([e0[i][0] for i in ids])} / {_med([e0[i][1] for i in ids])} -> "
              f"{_med([e1[i][0] for i in ids])} / {_med([e1[i][1] for i in ids])}")


DECODE_CSV = ROOT / "validation" / "gathered" / "serve-decode-steps.csv"
# the GPUs a page's "H100" could be, by the catalog: the SXM it names, and the two other 80-94 GB Hopper boards
H100_CANDIDATES = ("h100-sxm", "h100-pcie", "h100-nvl")


def decode_step_row(step: dict, load_rows: dict[str, dict], gpu: str) -> dict:
    """The priced decode-only step of one serve-decode-steps.csv row on `gpu`: the row's model and case (its
    `load_row` of serve-load.csv, with the step's own engine, weights and KV format), at its stated batch or,
    where the pool sets it, the whole requests the KV pool holds on that GPU. Returns the batch, context,
    priced seconds and the bytes the step reads (weights + KV, one GPU)."""
    from gpuplan.estimate.speed import serving_model
    row = dict(load_rows[step["load_row"]])
    row.update(gpu=gpu, engine=step["engine"], engine_version=step["engine_version"], weights=step["weights"],
               kv_cache=step["kv_cache"])
    r = pipeline.resolve(scenario(row))
    scn = r.scenario
    if scn.infer.engine == "vllm" and scn.infer.max_num_seqs is None:   # as pipeline.serving_load sizes the pool
        from gpuplan.estimate.memory import engine_max_num_seqs
        seqs = engine_max_num_seqs(scn, int(r.gpu.usable_memory_bytes), 1 << 30)
        scn = scn.model_copy(update={"infer": scn.infer.model_copy(update={"max_num_seqs": seqs})})
        r = dataclasses.replace(r, scenario=scn)
    mem = pipeline.memory(r)
    sv = serving_model(scn, r.model, r.gpu, params=r.speed_params, network=r.network, memory=mem)
    context = float(step["input_tokens"]) + float(step["output_tokens"]) / 2.0
    batch = int(step["batch"]) if step["batch"] else max(1, int(sv.kv_capacity_tokens // context))
    d = sv.decode_step(batch, context)
    return {"batch": batch, "context": context, "priced_s": d["time"], "bytes": d["weights_bytes"] + d["kv_bytes"],
            "pool": sv.kv_capacity_tokens, "spec_bw": float(r.gpu.mem_bandwidth_bytes_per_s)}


def decode_step_check() -> None:
    """Diagnostic (docs/serving-load.md, "The H100 rows' own decode-only steps"): a step that decodes a full
    KV pool and no prompt reads the weights and the pool once, so its measured inter-token latency gives the
    card's delivered memory bandwidth independent of any compute efficiency. Priced on the row's GPU and, for
    an H100 row, on the catalog's other H100 boards."""
    with CSV.open(newline="", encoding="utf-8") as fh:
        load_rows = {r["id"]: r for r in csv.DictReader(fh)}
    with DECODE_CSV.open(newline="", encoding="utf-8") as fh:
        steps = list(csv.DictReader(fh))
    print("\ndecode-only steps (median ITL of a full KV pool, no prompt chunk; serve-decode-steps.csv): delivered "
          "bandwidth = bytes read / measured, and the priced step per candidate GPU")
    for st in steps:
        meas = float(st["median_itl_ms"]) / 1e3
        own = decode_step_row(st, load_rows, st["gpu"])
        bw = own["bytes"] / meas
        print(f"  {st['id']} {st['engine']:6s} {st['weights']:4s} on '{st['gpu']}': measured {meas * 1e3:5.1f} ms, "
              f"{own['bytes'] / 1e9:5.1f} GB read -> {bw / 1e12:4.2f} TB/s delivered "
              f"({100 * bw / own['spec_bw']:3.0f} % of its {own['spec_bw'] / 1e12:.2f} TB/s)")
        cands = H100_CANDIDATES if st["gpu"] in H100_CANDIDATES else (st["gpu"],)
        for g in cands:
            c = own if g == st["gpu"] else decode_step_row(st, load_rows, g)
            print(f"      priced as {g:14s} batch {c['batch']:3d} (pool {c['pool']:9,.0f} tokens)  {c['priced_s'] * 1e3:5.1f} ms"
                  f"  {100 * (c['priced_s'] - meas) / meas:+5.0f}%")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", help="comma-separated row ids (default: all)")
    ap.add_argument("-v", "--verbose", action="store_true", help="also print throughput, preemptions, KV pool")
    ap.add_argument("--csv", help="write the per-row predictions to this CSV file")
    ap.add_argument("--per-seq-diagnostic", action="store_true",
                    help="also fit, leave-one-source-out, a per-running-sequence cost per iteration (diagnostic "
                         "only, ~1 min: six more passes over the rows)")
    ap.add_argument("--frontend-ceiling-diagnostic", action="store_true",
                    help="also test a front-end throughput ceiling read off the unscored gpt-oss rows (diagnostic "
                         "only, ~1 min)")
    ap.add_argument("--decode-step-check", action="store_true",
                    help="also price the pages' decode-only steps (serve-decode-steps.csv) on the stated GPU and the "
                         "other H100 boards: the delivered memory bandwidth of the card that ran them")
    a = ap.parse_args(argv)
    want = set(a.rows.split(",")) if a.rows else None
    with CSV.open(newline="", encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if want is None or r["id"] in want]
    out = []
    print(f"{'id':5s} {'engine':7s} {'load':12s} {'stat':6s} {'TTFT pred':>10s} {'meas':>9s} {'err':>7s}  "
          f"{'TPOT pred':>9s} {'meas':>7s} {'err':>7s}  model / gpu")
    for row in rows:
        load = (f"{row['rate_per_s']} req/s" if row["arrival"] == "poisson" else
                f"closed:{row['clients']}" if row["arrival"] == "closed" else f"offline {row['requests']}")
        try:
            s = predict(row)
        except GpuplanError as exc:
            print(f"{row['id']:5s} SKIP {str(exc).splitlines()[0]}")
            continue
        tt, tm = stat(s["ttft_s"], row["statistic"]) * 1e3, float(row["ttft_ms"])
        pt, pm = stat(s["tpot_s"], row["statistic"]) * 1e3, float(row["tpot_ms"])
        rec = {"id": row["id"], "source": row["source"], "engine": row["engine"], "scored": row["scored"] == "yes",
               "ttft_pred_ms": tt, "ttft_meas_ms": tm, "ttft_err": (tt - tm) / tm,
               "tpot_pred_ms": pt, "tpot_meas_ms": pm, "tpot_err": (pt - pm) / pm,
               "preemptions": s["preemptions"], "kv_pool_tokens": s["policy"]["kv_pool_tokens"],
               "rps_pred": s["requests_per_s"], "load_class": load_class(row), "light": load_class(row) == LIGHT,
               "rps_meas": float(row["requests_per_s"]) if row["requests_per_s"] else None}
        out.append(rec)
        flag = "" if rec["scored"] else "  (not scored: " + row["scored"].removeprefix("no: ") + ")"
        print(f"{row['id']:5s} {row['engine']:7s} {load:12s} {row['statistic']:6s} {tt:10.1f} {tm:9.1f} "
              f"{100 * rec['ttft_err']:+6.0f}%  {pt:9.2f} {pm:7.2f} {100 * rec['tpot_err']:+6.0f}%  "
              f"{row['model']} {row['gpu']} tp{row['tp']}{flag}")
        if a.verbose:
            rm = rec["rps_meas"]
            print(f"      req/s pred {rec['rps_pred']:.2f} meas {rm if rm else '-'}  preemptions {rec['preemptions']}  "
                  f"KV pool {rec['kv_pool_tokens']:,} tokens  policy {s['policy']}")
            if rm and row["statistic"] == "mean":
                # Little's law on the means: requests decoding at once in a replica = its rate x (output - 1) x TPOT
                k, gaps = replicas(row), float(row["output_mean_tokens"]) - 1
                print(f"      decoding at once per replica (Little's law, rate x (output - 1) x mean TPOT): pred "
                      f"{rec['rps_pred'] / k * gaps * pt / 1e3:.0f} meas {rm / k * gaps * pm / 1e3:.0f}")
    scored = [r for r in out if r["scored"]]
    print()
    print(f"{'source':48s} {'n':>3s} {'TTFT median |err|':>18s} {'TPOT median |err|':>18s}")
    for src in sorted({r["source"] for r in scored}):
        rs = [r for r in scored if r["source"] == src]
        print(f"{src[:48]:48s} {len(rs):3d} {_med([r['ttft_err'] for r in rs]):>18s} "
              f"{_med([r['tpot_err'] for r in rs]):>18s}")
    for eng in sorted({r["engine"] for r in scored}):
        rs = [r for r in scored if r["engine"] == eng]
        print(f"{'  engine ' + eng:48s} {len(rs):3d} {_med([r['ttft_err'] for r in rs]):>18s} "
              f"{_med([r['tpot_err'] for r in rs]):>18s}")
    for cls in sorted({r["load_class"] for r in scored}):
        rs = [r for r in scored if r["load_class"] == cls]
        print(f"{'  ' + cls[:46]:48s} {len(rs):3d} {_med([r['ttft_err'] for r in rs]):>18s} "
              f"{_med([r['tpot_err'] for r in rs]):>18s}")
    print(f"{'all scored rows':48s} {len(scored):3d} {_med([r['ttft_err'] for r in scored]):>18s} "
          f"{_med([r['tpot_err'] for r in scored]):>18s}")
    print("leave-one-source-out = in-sample: no constant is fitted on these rows (the step cost is the packaged "
          "serve calibration).")
    light = [r for r in scored if r["light"]]
    srcs = sorted({r["source"] for r in light})
    if len(srcs) > 1:
        # diagnostic only (nothing ships): would a constant per-request TTFT offset (HTTP, chat template,
        # tokenisation, IPC, streaming — none modelled) explain the light-load TTFT gap? Fitted on the
        # other source(s), scored on the held-out one.
        print("\ndiagnostic, not used by gpuplan: a constant TTFT offset fitted leave-one-source-out on the "
              f"light-load rows (Poisson; closed loops of <= {LIGHT_CLIENTS} clients)")
        for src in srcs:
            train = [r["ttft_meas_ms"] - r["ttft_pred_ms"] for r in light if r["source"] != src]
            off = statistics.median(train)
            test = [(r["ttft_pred_ms"] + off - r["ttft_meas_ms"]) / r["ttft_meas_ms"] for r in light
                    if r["source"] == src]
            raw = [r["ttft_err"] for r in light if r["source"] == src]
            print(f"  held out {src[:44]:44s} offset {off:5.1f} ms  TTFT median |err| {_med(raw)} -> {_med(test)}")
    slo_rows = [row for row in rows if row.get("measured_max_rate_per_s")]
    if slo_rows:
        # MLPerf Server: the submitter's valid rate is the highest it found whose p99 TTFT and TPOT meet the
        # constraints; gpuplan's answer to the same question is max_rate_meeting_slo_per_s (one replica's,
        # times the replicas). Scored apart from the TTFT/TPOT medians above (a capacity, not a latency).
        print("\nMLPerf Server: highest rate meeting the p99 TTFT/TPOT constraints (whole system = replicas x one "
              "replica's), and the input-length sensitivity of the mean TTFT/TPOT (input mean 222.3 cited in the "
              "rows; spread not published)")
        server_capacity = {}
        for row in slo_rows:
            s = predict(row, search=True)
            n = replicas(row)
            server_capacity[row["id"]] = s["capacity_per_s"] * n
            got = (s.get("max_rate_meeting_slo_per_s") or 0.0) * n
            meas = float(row["measured_max_rate_per_s"])
            sens = []
            for inp in (150.0, 600.0):
                t = predict(row, input_mean=inp)
                sens.append(f"input {inp:.0f}: TTFT {t['ttft_s']['mean'] * 1e3:.0f} ms, TPOT "
                            f"{t['tpot_s']['mean'] * 1e3:.1f} ms")
            print(f"  {row['id']} {row['gpu']} {n} x tp{row['tp']}: predicted {got:6.1f} req/s, measured (valid) "
                  f"{meas:6.1f} req/s  {100 * (got - meas) / meas:+5.0f}%   capacity {s['capacity_per_s'] * n:.1f} req/s; "
                  + "; ".join(sens))
        offline_check([row for row in slo_rows if row.get("offline_requests_per_s")], server_capacity)
    if a.per_seq_diagnostic:
        per_seq_diagnostic([row for row in rows if row["scored"] == "yes"])
    if a.frontend_ceiling_diagnostic:
        frontend_ceiling_diagnostic(rows)
    if a.decode_step_check:
        decode_step_check()
    if a.csv:
        with open(a.csv, "w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, fieldnames=list(out[0]))
            w.writeheader()
            w.writerows(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
