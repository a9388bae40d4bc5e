"""Run every memory validation case (validation/memory_cases.py) through the memory engine.

Prints a per-row table (estimate, measured, relative error, phase, main components), the median and
P90 absolute relative error overall and per source, the must-(not)-fit checks, and writes
docs/validation-memory.md (a section the lead merges into docs/validation.md).

    PYTHONPATH=src python scripts/validate_memory.py [--no-write]
"""
from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "validation"))

import memory_cases  # noqa: E402
from memory_cases import Case  # noqa: E402

from gpuplan.estimate.memory import estimate_memory  # noqa: E402
from gpuplan.models import get_model  # noqa: E402
from gpuplan.scenario import scenario_from_dict  # noqa: E402

# Usable (NVML) memory of the GPUs the cases use, as a fallback when the hardware module is missing.
_FALLBACK_USABLE_MIB = {"rtx-4090": 24564, "rtx-a6000": 49140, "a100-sxm-80gb": 81920, "a100-sxm-40gb": 40960,
                        "a10g": 23028, "v100-sxm2-32gb": 32510}

DOC = ROOT / "docs" / "validation-memory.md"
EXPLAIN_ABOVE = 0.20


def usable_bytes(gpu_id: str) -> int:
    try:
        from gpuplan.hardware import get_gpu
        return int(get_gpu(gpu_id).usable_memory_bytes)
    except ImportError:
        return _FALLBACK_USABLE_MIB[gpu_id] * 2**20


@dataclass
class Result:
    case: Case
    estimate_bytes: float | None = None     # the number compared (allocated-level, total or model states)
    peak_bytes: float | None = None
    capacity_bytes: float | None = None
    phase: str = ""
    components: dict | None = None
    rel_error: float | None = None
    passed: bool | None = None              # fit/oom/formula checks
    error: str | None = None

    @property
    def scored(self) -> bool:
        c = self.case
        return (c.skip is None and c.suspect is None and c.expect == "value" and self.rel_error is not None)


def run_case(case: Case) -> Result:
    res = Result(case)
    if case.skip:
        return res
    try:
        scn = scenario_from_dict(memory_cases.scenario_for(case, case.gpu), f"case {case.id}")
        model = get_model(scn.model)
        cap = usable_bytes(case.gpu)
        est = estimate_memory(scn, model, cap)
    except Exception as err:  # a case that cannot be estimated is itself a finding
        res.error = f"{type(err).__name__}: {err}"
        return res
    comps = dict(est.components)
    res.peak_bytes, res.capacity_bytes, res.phase, res.components = est.peak_bytes_per_gpu, cap, est.phase, comps
    if case.compare == "allocated":
        res.estimate_bytes = est.peak_bytes_per_gpu - comps["runtime_overhead"]
    elif case.compare == "model_states":
        # the optimizer-step phase holds exactly weights + gradients + optimizer states (+ a fused step's 0 temp)
        res.estimate_bytes = est.phases["optimizer_step"] - comps["runtime_overhead"]
    else:
        res.estimate_bytes = est.peak_bytes_per_gpu
    if case.expect == "oom":
        res.passed = est.peak_bytes_per_gpu > cap
    elif case.expect == "fit":
        res.passed = est.peak_bytes_per_gpu <= cap
    if case.measured_bytes:
        res.rel_error = (res.estimate_bytes - case.measured_bytes) / case.measured_bytes
        if case.expect == "formula":
            formula = memory_cases.zero_formula_bytes(case)
            res.passed = abs(res.estimate_bytes - formula) / formula <= 0.01
    return res


def run_all() -> list[Result]:
    return [run_case(c) for c in memory_cases.build_cases()]


def percentile(values: list[float], q: float) -> float:
    v = sorted(values)
    if not v:
        return float("nan")
    k = (len(v) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def summary(results: list[Result]) -> dict[str, dict[str, float]]:
    groups: dict[str, list[float]] = {"all": []}
    for r in results:
        if r.scored:
            groups["all"].append(abs(r.rel_error))
            groups.setdefault(r.case.source, []).append(abs(r.rel_error))
    return {k: dict(n=len(v), median=statistics.median(v) if v else float("nan"), p90=percentile(v, 0.9),
                    bias=statistics.median([x for x in _signed(results, k)]) if v else float("nan"))
            for k, v in groups.items()}


def _signed(results: list[Result], group: str) -> list[float]:
    return [r.rel_error for r in results if r.scored and (group == "all" or r.case.source == group)]


def _main_components(comps: dict, n: int = 3) -> str:
    items = sorted(((k, v) for k, v in comps.items() if v > 0), key=lambda kv: -kv[1])[:n]
    return ", ".join(f"{k[:5]} {v / 1e9:.1f}" for k, v in items)


def _gb(x: float | None) -> str:
    return "-" if x is None else f"{x / 1e9:.2f}"


def _diagnose(r: Result) -> str:
    """Short physical reading of a large miss from the estimate's own breakdown and the case's notes."""
    c, comps = r.case, r.components or {}
    bits = []
    if r.rel_error is not None and r.rel_error > 0:
        big = [k for k in ("optimizer_states", "gradients", "activations", "logits", "temporary") if comps.get(k, 0) > 0]
        if any("Paged" in u or "optimizer_in_bwd" in u for u in c.unmodelled):
            bits.append("over: the engine holds full gradients and optimizer states on the GPU at an optimizer-step "
                        "phase; the run freed gradients in backward and/or kept (paged) states outside the allocator")
        elif any("offload" in u.lower() for u in c.unmodelled):
            bits.append("over: CPU offload (params/activations) not modelled")
        else:
            bits.append("over: " + ", ".join(f"{k} {comps[k] / 1e9:.1f} GB" for k in big))
    elif r.rel_error is not None:
        bits.append("under: measured exceeds weights+activations+loss block as modelled")
    return "; ".join(bits)


def table_lines(results: list[Result]) -> list[str]:
    head = "| row | source | model | method | GPUs | compare | measured GB | estimate GB | error | phase | main components (GB) | note |"
    lines = [head, "|" + "---|" * 12]
    for r in results:
        c, row = r.case, r.case.row
        if c.skip:
            note = "skipped: " + c.skip
        elif r.error:
            note = "engine error: " + r.error
        elif c.expect in ("oom", "fit"):
            want = "must not fit" if c.expect == "oom" else "must fit"
            note = f"{want}: peak {_gb(r.peak_bytes)} vs usable {_gb(r.capacity_bytes)} -> {'PASS' if r.passed else 'FAIL'}"
        elif c.expect == "formula":
            note = "formula check " + ("PASS" if r.passed else "FAIL")
        elif c.suspect:
            note = "not scored: " + c.suspect
        else:
            note = ""
        err = "-" if r.rel_error is None else f"{r.rel_error * 100:+.1f}%"
        lines.append(f"| {c.id} | {c.source} | {row.get('model', '')} | {row.get('method', '')} | {row.get('gpus', '')} "
                     f"{row.get('gpu_type', '')} | {c.compare} | {_gb(c.measured_bytes)} | {_gb(r.estimate_bytes)} | "
                     f"{err} | {r.phase} | {_main_components(r.components) if r.components else ''} | {note} |")
    return lines


ANALYSIS = """
### Systematic discrepancies (engine physics, reported to the engine owner)

These are the patterns behind the large misses; each names the physical reason and the engine change
that would fix it. Row-level notes follow in the table of explained rows.

1. **Optimizer in backward and paged optimizers are not modelled** (torchtune `*_full_single_device`,
   `7B_full_low_memory`; litgpt QLoRA adapters). torchtune's `optimizer_in_bwd=True` registers a
   per-parameter hook that runs the optimizer and frees each gradient as soon as it is produced: there
   is no full gradient buffer and no separate optimizer-step phase. bitsandbytes' *Paged* optimizers
   allocate their states with `cudaMallocManaged`, outside PyTorch's caching allocator, so
   `max_memory_allocated`/`active_bytes` never see them (they migrate to the host under pressure).
   The engine puts weights + full gradients + states on the GPU at `optimizer_step`. Fix: a
   `train.optimizer_in_backward` flag (gradients: one parameter's worth; no step phase; states stay)
   and a `paged` optimizer attribute whose states are reported as a separate, non-allocator component
   (counted against capacity only above the free memory, never in the allocator-level number).
2. **Pure-bf16 adapters** (torchtune and litgpt `bf16-true`): both build LoRA A/B in the model dtype
   (2 bytes), while the engine hard-codes peft's fp32 adapters (`adapter_bytes=4` for the saved
   adapter inputs and 4-byte adapter weights/grads/states). With `master_weights: false` the adapter
   dtype should follow `train.precision`; peft (HF) stays fp32 unless `autocast_adapter_dtype=False`.
   Effect on activations: each adapted linear saves a 4-byte copy of its input instead of 2 bytes.
3. **Chunked / fused loss** (torchtune `CEWithChunkedOutputLoss`, litgpt `lm_head_chunk_size=128` +
   `chunked_cross_entropy`): the engine's loss block is 14 bytes x vocab x tokens (HF: bf16 logits +
   fp32 upcast + fp32 grad). With chunking only the bf16 logits (2 B) plus one chunk in fp32 are alive;
   torchtune's `LinearCrossEntropyLoss`/compiled chunks keep even less. Fix: a `train.loss` option
   (`full` | `chunked` | `fused-linear`) with 14 / ~2 + 12/chunks / ~0 bytes per vocab per token.
4. **torch.compile** fuses elementwise chains (RMSNorm fp32 upcast, SiLU*up, rotary) so their
   intermediates are not saved: torchtune measures -15 % peak for 3B at 2x4096 tokens. The `hf`
   profile is eager HF; a `compile` switch (or a torchtune/litgpt profile) should drop the fp32 norm
   copies and the separate act(gate) tensor (about 8h + 2i bytes per token per layer).
5. **CPU offload of parameters and activations** (torchtune 70B full with `fsdp_cpu_offload`, activation
   offloading): with FSDP CPU offload the GPU holds only the all-gathered layer(s) and activations; the
   engine keeps something of the sharded weights; activation offloading (torchtune) moves saved
   activations to pinned host memory per layer.
6. **bitsandbytes 4-bit linears save their input** (every litgpt `bnb.nf4` row and torchtune's older
   QLoRA rows are 20-35 % low): `MatMul4Bit.forward` stores `ctx.tensors = (A, B)` whenever the input
   needs a gradient, although the weight is frozen, so every quantized linear keeps its 16-bit input
   for backward. The engine's `frozen_base` drops base-linear inputs for QLoRA as it rightly does for
   a frozen `nn.Linear` in LoRA. Fix: for `method: qlora` count each base linear's input
   (2 x (h for q/k/v, a*d for o, h for gate/up, i for down) bytes per token per layer; tensors shared by
   q/k/v and by gate/up count once). That also turns the Falcon-40B nf4 OOM row (M082, 42.1 vs 42.9 GB)
   into the OOM it was.
7. **litgpt FSDP runs hold one unsharded bf16 copy of the model** (resource-tables FSDP rows 43-75 % low;
   M104/M106/M122/M126 OOM rows estimated to fit): peak ~ full bf16 weights + the sharded model + a
   little (7B on 2 GPUs: 13.5 + 6.7 + ~2 = 22.2 GB measured; 13B on 4: 26 + 6.5 + ~3 = 35.6 GB). This is
   the full-state-dict checkpoint load/save (`state_dict_type="full"`), not a training phase; the engine
   could add a `load` phase for FSDP = full 16-bit weights + the shard when the framework loads/saves
   full state dicts on the GPU.
8. **Source rows that cannot come from their stated config**: three litgpt full-fine-tune rows
   (Llama-3.2-1B/3B, Phi-3-mini) report less than the 8 bytes/param that bf16 weights + grads + AdamW
   moments need; they are listed but not scored. litgpt's 4xA10G `lora.yaml` rows use the yaml's
   `devices: 1` (identical peaks on 1 and 4 GPUs).
"""


def explained_lines(results: list[Result]) -> list[str]:
    lines = ["| row | error | why (settings the source used / did not report; physics) |", "|---|---|---|"]
    for r in results:
        c = r.case
        if r.rel_error is None or c.expect != "value" or abs(r.rel_error) <= EXPLAIN_ABOVE:
            continue
        why = []
        if c.suspect:
            why.append("NOT SCORED: " + c.suspect)
        why.append(_diagnose(r))
        if c.unmodelled:
            why.append("not modelled: " + "; ".join(c.unmodelled))
        asm = [a for a in c.assumptions if not a.startswith("compared with")]
        if asm:
            why.append("assumed: " + "; ".join(asm))
        lines.append(f"| {c.id} | {r.rel_error * 100:+.1f}% | " + " ".join(w.rstrip('.') + '.' for w in why if w) + " |")
    return lines


def write_doc(results: list[Result]) -> None:
    s = summary(results)
    checks = [r for r in results if r.case.expect in ("oom", "fit", "formula")]
    skipped = [r for r in results if r.case.skip]
    suspect = [r for r in results if r.case.suspect]
    out = ["## Memory: published measurements", "",
           "Generated by `scripts/validate_memory.py` from `validation/memory_cases.py` (one case per scoreable "
           "row of `validation/public/memory.csv`); do not edit by hand.", "",
           "What is compared: torchtune and litgpt report PyTorch's allocator peak "
           "(`active_bytes.all.peak` / `max_memory_allocated`), so the estimate shown is the peak minus "
           "`runtime_overhead` (CUDA context, workspaces, NCCL, allocator reserve). OOM rows must not fit: the "
           "whole peak, overhead included, must exceed the GPU's usable (NVML) memory. The ZeRO paper's Figure 1 "
           "values are compared with weights+gradients+optimizer_states.", "",
           "| set | rows scored | median abs error | P90 abs error | median signed error |", "|---|---|---|---|---|"]
    for k, v in s.items():
        out.append(f"| {k} | {v['n']} | {v['median'] * 100:.1f}% | {v['p90'] * 100:.1f}% | {v['bias'] * 100:+.1f}% |")
    npass = sum(1 for r in checks if r.passed)
    out += ["", f"Fit / OOM / formula checks: {npass} of {len(checks)} pass. Skipped rows: {len(skipped)} "
            f"(unsupported model family or fine-tuning method). Rows not scored because the published number is "
            f"below an engine-independent floor of the stated config: {len(suspect)}.", "",
            "### Every row", ""] + table_lines(results)
    out += ["", f"### Rows worse than {EXPLAIN_ABOVE:.0%}, explained", ""] + explained_lines(results)
    out += [ANALYSIS.strip("\n"), ""]
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text("\n".join(out) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--no-write", action="store_true", help="print only; do not write docs/validation-memory.md")
    args = ap.parse_args(argv)
    results = run_all()
    print(f"{'row':5} {'source':17} {'model':22} {'method':26} {'meas GB':>8} {'est GB':>8} {'err':>8} {'phase':15} components / note")
    for r in results:
        c = r.case
        note = ""
        if c.skip:
            note = "SKIP " + c.skip[:70]
        elif r.error:
            note = "ERROR " + r.error[:90]
        elif c.expect in ("oom", "fit", "formula"):
            note = f"{c.expect.upper()} check {'PASS' if r.passed else 'FAIL'} (peak {_gb(r.peak_bytes)} / cap {_gb(r.capacity_bytes)})"
        elif c.suspect:
            note = "NOT SCORED (below floor) " + _main_components(r.components)
        else:
            note = _main_components(r.components or {})
        err = "" if r.rel_error is None else f"{r.rel_error * 100:+.1f}%"
        print(f"{c.id:5} {c.source:17} {c.row.get('model', '')[:22]:22} {c.row.get('method', '')[:26]:26} "
              f"{_gb(c.measured_bytes):>8} {_gb(r.estimate_bytes):>8} {err:>8} {r.phase:15} {note}")
    print()
    for k, v in summary(results).items():
        print(f"{k:18} n={v['n']:3d}  median |err| {v['median'] * 100:5.1f}%  P90 {v['p90'] * 100:5.1f}%  "
              f"median signed {v['bias'] * 100:+.1f}%")
    if not args.no_write:
        write_doc(results)
        print(f"\nwrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
