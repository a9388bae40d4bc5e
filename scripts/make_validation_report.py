"""Generate docs/validation.md from the checks themselves (never edit that file by hand).

Sections:
1. parameter counts vs params.csv and transformers' meta device;
2. memory vs our fake-tensor traces (validation/traces.json);
3. memory vs published measurements (scripts/validate_memory.py -> docs/validation-memory.md);
4. speed vs published runs (scripts/calibrate_speed.py --doc -> docs/validation-speed.md: the packaged factors, no refit);
0. error bars, leave-one-source-out beside in-sample (scripts/make_uncertainty.py), and the gathered runs
   (scripts/validate_gathered.py);
5. the traced scenarios (benchmarks/trace_table.py -> docs/trace-table.md; slow, so it is rerun
   only with --retrace);
6. measurements on a real GPU (only when a GPU was available).

Usage: python scripts/make_validation_report.py [--retrace]
"""
from __future__ import annotations

import csv
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "scripts"))

from gpuplan.models import get_model  # noqa: E402

DOCS = ROOT / "docs"
GiB = 2 ** 30


def _p90(values: list[float]) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(round(0.9 * (len(v) - 1))))]


def params_section() -> list[str]:
    rows = list(csv.DictReader(open(ROOT / "validation" / "public" / "params.csv", encoding="utf-8")))
    out = ["## 1. Parameter counts", "",
           "Every public row of `validation/public/params.csv` (published or exact checkpoint counts), "
           "and every bundled config against `AutoModelForCausalLM.from_config` on the meta device "
           "(tests/test_models_meta.py). Tolerance: exact.", "",
           "| model | gpuplan total | params.csv | gpuplan active | params.csv active | match |",
           "|---|---:|---:|---:|---:|---|"]
    exact = 0
    for r in rows:
        m = get_model(r["hf_repo"])
        ok = m.params_total == int(r["computed_total_params"]) and m.params_active == int(r["computed_active_params"])
        exact += ok
        out.append(f"| {r['model']} | {m.params_total:,} | {int(r['computed_total_params']):,} | "
                   f"{m.params_active:,} | {int(r['computed_active_params']):,} | {'exact' if ok else 'DIFFERS'} |")
    out += ["", f"{exact} of {len(rows)} rows exact. Where the published checkpoint total is larger, the difference "
            "is stored buffers (GPT-2 causal masks, Llama-2 `inv_freq`) or, for DeepSeek-V3, the MTP layer and FP8 "
            "scales that the HF class does not build (see docs/model.md §1).", ""]
    return out


def traces_section() -> list[str]:
    from compare_traces import compare
    traces = json.loads((ROOT / "validation" / "traces.json").read_text())
    rows = compare(traces)
    errs = [abs(r["rel"]) for r in rows]
    out = ["## 2. Memory vs fake-tensor traces", "",
           "The analytical estimate (runtime overhead excluded, since a trace equals "
           "`torch.cuda.max_memory_allocated`) against `gpuplan trace` of the same scenario "
           "(HF transformers, torch 2.13, fake CPU tensors; docs/trace.md). Target: median ≤ 2 %, max ≤ 5 % "
           "(tests/test_memory_traces.py).", "",
           f"**{len(rows)} traces: median |error| {100 * statistics.median(errs):.2f} %, "
           f"P90 {100 * _p90(errs):.2f} %, max {100 * max(errs):.2f} %.**", "",
           "| scenario | traced GiB | estimated GiB | error | phase (trace / estimate) |", "|---|---:|---:|---:|---|"]
    for r in rows:
        out.append(f"| {r['name']} | {r['traced'] / GiB:.2f} | {r['estimated'] / GiB:.2f} | {100 * r['rel']:+.1f} % "
                   f"| {r['phase_trace']} / {r['phase_est']} |")
    out += ["", "QLoRA traces dequantize NF4 and run a frozen linear (as torchao does), so they are compared with "
            "`qlora_backend: torchao`; bitsandbytes' 4-bit matmul also keeps its 16-bit input, which the default "
            "`qlora_backend: bitsandbytes` counts.", ""]
    return out


def inference_section() -> list[str]:
    from gpuplan.estimate.memory import _kv_per_token_rank, estimate_memory, inference_weight_bytes
    from gpuplan.hardware import get_gpu
    from gpuplan.scenario import scenario_from_dict
    rows = []
    for model, fmt, pub, src in (("llama-3-8b", "gguf-q4_k_m", 4.58, "I433"), ("llama-3-8b", "gguf-f16", 14.96, "I434"),
                                 ("llama-3-70b", "gguf-q4_k_m", 39.59, "I435"), ("llama-3-70b", "gguf-f16", 131.42, "I436")):
        est = inference_weight_bytes(get_model(model), fmt) / GiB
        rows.append((f"{model} {fmt} file (GiB)", pub, est, src))
    scn = scenario_from_dict({"model": "llama-2-7b-hf", "task": "infer", "hardware": {"gpu": "a100-sxm-80gb"}})
    kv = estimate_memory(scn, get_model("llama-2-7b-hf"), get_gpu("a100-sxm-80gb").usable_memory_bytes).limits
    rows.append(("vLLM KV pool, Llama-2-7B, A100-80GB (tokens)", 7351 * 16, kv["kv_tokens"], "vllm PR #2031"))
    per_tok = _kv_per_token_rank(get_model("qwen3-235b-a22b"), "bf16", tp=4, pp=1)
    rows.append(("vLLM tokens in 8.11 GiB, Qwen3-235B TP4", 178880, 8.11 * GiB / per_tok, "vllm issue #21348"))
    scn = scenario_from_dict({"model": "qwen3-235b-a22b", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 4},
                              "parallel": {"tp": 4}, "infer": {"weights": "fp8-block", "max_num_seqs": 1024}})
    pool = estimate_memory(scn, get_model("qwen3-235b-a22b"), get_gpu("h100-sxm").usable_memory_bytes).limits
    rows.append(("vLLM KV pool, Qwen3-235B-FP8 TP4 H100, defaults (GiB) [not asserted]", 8.11,
                 pool["kv_pool_bytes"] / GiB, "vllm issue #21348"))
    out = ["## 3b. Serving memory vs published numbers", "",
           "Golden checks in tests/test_inference_memory.py (sources and tolerances in its docstring).", "",
           "| quantity | published | gpuplan | error | source |", "|---|---:|---:|---:|---|"]
    for name, pub, est, src in rows:
        out.append(f"| {name} | {pub:,.2f} | {est:,.2f} | {100 * (est - pub) / pub:+.1f} % | {src} |")
    out += ["", "Not asserted: vLLM 0.2.x kept ~13 GiB per GPU outside PyTorch at TP 4 (Llama-2-70B, same PR); "
            "we model 256 MiB of NCCL buffers, so for that old version our pool is ~50 % larger. The Qwen3-235B "
            "pool (one public log, vLLM V1 defaults: 8192-token profile forward, 1024-request dummy sampler) is "
            "over-estimated: CUDA-graph and compile buffers of a 94-layer MoE and TP-4 communication buffers "
            "are larger than the 512 MiB + 256 MiB we model.", ""]
    return out


def _run(cmd: list[str]) -> None:
    subprocess.run([sys.executable, *cmd], cwd=ROOT, check=True, capture_output=True,
                   env={**__import__("os").environ, "PYTHONPATH": str(ROOT / "src")})


def _include(path: Path, title: str, fallback: str) -> list[str]:
    if not path.exists():
        return [title, "", fallback, ""]
    text = path.read_text().strip().splitlines()
    # demote the included file's headings by one level under our numbered section
    body = [("#" + line) if line.startswith("#") else line for line in text]
    if body and body[0].startswith("##"):
        body = body[1:]
    return [title, ""] + body + [""]


def main(argv: list[str]) -> None:
    retrace = "--retrace" in argv
    if retrace:
        _run(["benchmarks/trace_table.py"])
    _run(["scripts/validate_memory.py"])
    _run(["scripts/calibrate_speed.py", "--doc"])
    _run(["scripts/make_uncertainty.py"])
    gathered = subprocess.run([sys.executable, "scripts/validate_gathered.py"], cwd=ROOT, check=True,
                              capture_output=True, text=True,
                              env={**__import__("os").environ, "PYTHONPATH": str(ROOT / "src")}).stdout
    lines = ["# Validation report", "",
             "Generated by `python scripts/make_validation_report.py` from the same checks the tests run; do not "
             "edit by hand. Scored rows are measurements (or exact counts); estimates and rules of thumb in the "
             "public files serve only as sanity bounds. A separate held-out set is checked by the maintainers.", ""]
    lines += _include(DOCS / "validation-uncertainty.md", "## 0. What to expect on a run gpuplan has not seen",
                      "(run scripts/make_uncertainty.py)")
    lines += ["#### Gathered runs (validation/gathered; no factor fitted on them except where its README says)", "",
              "```", *gathered.rstrip().splitlines(), "```", ""]
    lines += params_section()
    lines += traces_section()
    lines += _include(DOCS / "validation-memory.md", "## 3. Memory vs published measurements",
                      "(run scripts/validate_memory.py)")
    lines += inference_section()
    lines += _include(DOCS / "validation-speed.md", "## 4. Speed vs published runs", "(run scripts/calibrate_speed.py)")
    lines += _include(DOCS / "trace-table.md", "## 5. Traced scenarios", "(run benchmarks/trace_table.py)")
    lines += ["## 6. On a real GPU", "",
              "Measured on a lent H200 (2026-12-04): what ran, its scripts and its results beside the predictions are in "
              "docs/device-runs.md (raw outputs under validation/device/). `gpuplan calibrate` and `gpuplan measure` "
              "(docs/local.md) produce the profile and the measured-vs-predicted table; the trace-vs-"
              "`max_memory_reserved` gap they record is what the runtime overhead component models.", ""]
    (DOCS / "validation.md").write_text("\n".join(lines))
    print(f"wrote {DOCS / 'validation.md'}")


if __name__ == "__main__":
    main(sys.argv[1:])
