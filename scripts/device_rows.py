"""Turn the JSON lines of scripts/measure_suite.py (a device run kept under validation/device/) into rows of
validation/gathered/measured.csv: the settings each scenario ran with and what the GPU measured, nothing predicted
(validate_gathered.py predicts them afresh each time).

    python3 scripts/device_rows.py validation/device/h200-2026-12-04-measure.jsonl \
        validation/device/h200-2026-12-04-kernels.jsonl > validation/gathered/measured.csv
"""
from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from gpuplan.local.measure import ATTN_IMPLEMENTATION, is_profiler_annotation  # noqa: E402

GiB = 2 ** 30
SOURCE = "gpuplan measure on a lent H200"
COLUMNS = ("id", "source", "source_url", "retrieved", "model", "gpu", "host_cpu", "task", "framework", "tool", "objective",
           "reference", "method", "precision",
           "master_weights", "optimizer", "optimizer_impl", "recompute", "attention", "seq_len", "micro_batch",
           "lora_rank", "engine", "weights", "prompt_len", "output_len", "concurrency", "step_time_s",
           "tokens_per_s_per_gpu", "peak_allocated_gib", "peak_reserved_gib", "peak_device_used_gib", "ttft_s",
           "tpot_s", "profiled_wall_s", "profiled_gpu_busy_s", "torch", "transformers", "notes")
SETTINGS = COLUMNS[COLUMNS.index("model"):COLUMNS.index("concurrency") + 1]     # what a scenario ran with
# HF decoding on the lent machine is bound by its host: its virtualised CPU enqueued one small CUDA op in 29 us
# (validation/device/h200-2026-12-04-expert_gemm.csv, host_enqueue_small_op), several times a bare-metal server's
# the lent machine's host (hardware/data/host_cpus.csv `lent-h200-vm`: its eager op timed there), which a scenario names
# as hardware.host_cpu (estimate/host_issue.py prices an eager training step's host issue time with it)
LENT_HOST = "lent-h200-vm"
HOST_NOTE = ("TPOT and TTFT not scored: bound by the lent machine's virtualised host (29 us to enqueue one small CUDA "
             "op; the profiled decode step is GPU-busy for a tenth of its wall time); its memory is scored")


def _r(x: float | None, nd: int = 4) -> str:
    return "" if x is None else f"{x:.{nd}g}"


def row(rec: dict, url: str, retrieved: str, versions: dict) -> dict:
    s, m = rec["scenario"], rec["measured"]
    t, i = s.get("train") or {}, s.get("infer") or {}
    ops = m.get("ops") or {}
    out = {"id": rec["id"], "source": SOURCE, "source_url": url, "retrieved": retrieved, "model": s["model"],
           "gpu": s["hardware"]["gpu"], "host_cpu": LENT_HOST, "task": s["task"], "framework": s["framework"],
           "peak_allocated_gib": _r(m["peak_allocated_bytes"] / GiB), "peak_reserved_gib": _r(m["peak_reserved_bytes"] / GiB),
           "peak_device_used_gib": _r(m["peak_device_used_bytes"] / GiB),
           "profiled_wall_s": _r(ops.get("wall_s")), "profiled_gpu_busy_s": _r(_busy(ops)), **versions}
    if t:
        out.update(tool=s.get("tool") or "", objective=t.get("objective") or "sft", reference=t.get("reference") or "",
                   method=t["method"], precision=t["precision"], master_weights=str(t["master_weights"]).lower(),
                   optimizer=t["optimizer"], optimizer_impl=t["optimizer_impl"], recompute=t["recompute"],
                   attention=measured_attention(t["attention"]), seq_len=t["seq_len"], micro_batch=t["micro_batch"],
                   lora_rank=t["lora_rank"] if t["method"] != "full" else "",
                   step_time_s=_r(m["step_time_s"]), tokens_per_s_per_gpu=_r(m["tokens_per_s_per_gpu"], 5),
                   notes=f"{m['steps']} timed steps after {m['warmup']} warm-up; random weights and tokens"
                         + _attention_note(t["attention"]))
    else:
        out.update(engine=i["engine"], weights=i["weights"], prompt_len=i["prompt_len"], output_len=i["output_len"],
                   concurrency=i["concurrency"], ttft_s=_r(m["ttft_s"]), tpot_s=_r(m["tpot_s"]), notes=HOST_NOTE)
    return out


def measured_attention(asked: str) -> str:
    """The scenario's attention as the run ran it: `gpuplan measure` builds `flash` with attn_implementation
    "sdpa" (local/measure.py ATTN_IMPLEMENTATION), whose explicit-mask path is priced differently (sliding-window
    models; estimate/attention_kernels.py MASKED_SDPA_KERNEL)."""
    return "sdpa" if ATTN_IMPLEMENTATION[asked] == "sdpa" else asked


def _attention_note(asked: str) -> str:
    if measured_attention(asked) == asked:
        return ""
    return ('; attention sdpa: gpuplan measure builds the model with attn_implementation="sdpa" '
            "(local/measure.py _build_model)")


def _busy(ops: dict) -> float | None:
    """Kernel time of the profiled step from its kernel list, annotations left out (the 2026-12-04 runs' measure
    counted 'Optimizer.step#AdamW.step' among the kernels; measure.is_profiler_annotation now leaves it out)."""
    if not ops or sum(o["calls"] for o in ops["top"]) < ops["kernel_launches"]:
        return None          # only the top kernels were kept: their sum is not the step's busy time
    return sum(o["device_s"] for o in ops["top"] if not is_profiler_annotation(o["op"]))


def main(argv: list[str] | None = None) -> int:
    paths = (argv if argv is not None else sys.argv[1:])
    w = csv.DictWriter(sys.stdout, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    seen: dict[tuple, str] = {}
    for p in paths:
        # the run's files share a prefix: h200-2026-12-04-measure.jsonl beside h200-2026-12-04-system.txt
        versions = _versions(Path(p).with_name(Path(p).name.rsplit("-", 1)[0] + "-system.txt"))
        url = f"validation/device/{Path(p).name}"
        for line in open(p, encoding="utf-8"):
            rec = json.loads(line)
            if rec.get("ok"):
                r = row(rec, url, "2026-12-04", versions)
                key = tuple(r.get(c, "") for c in SETTINGS)
                if key in seen:      # a profiled repeat of an earlier row: listed, not counted twice
                    r["notes"] = f"unscored: same settings as {seen[key]} (its kernel profile is kept here)"
                seen.setdefault(key, r["id"])
                w.writerow(r)
    return 0


def _versions(system: Path) -> dict:
    """torch / transformers versions from the run's system.txt: 'torch X cuda Y transformers Z peft W', or (the
    second 2026-12-04 run) the bare 'X Y Z W ...' line of torch, CUDA, transformers and peft versions."""
    try:
        lines = system.read_text().splitlines()
        words = next((ln for ln in lines if ln.startswith("torch ")), "").split()
        if words:
            return {"torch": words[1], "transformers": words[5]}
        bare = next(ln for ln in lines if "+cu" in ln.split(" ")[0]).split()
        return {"torch": bare[0], "transformers": bare[2]}
    except (OSError, StopIteration, IndexError):
        return {"torch": "", "transformers": ""}


if __name__ == "__main__":
    raise SystemExit(main())
