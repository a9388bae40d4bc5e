"""Fake-tensor traces of post-training steps (validation/traces_posttrain.json): TRL's DPO step (policy +
reference over a paired batch, full fine-tune and LoRA), KTO step (unpaired batch, KL batch, reference), ORPO and
CPO/SimPO steps (paired, no reference) and GRPO training pass, on real model configs,
compared by tests/test_trace_posttrain.py with the memory engine (each within 5 %).

    PYTHONPATH=src python scripts/trace_posttrain.py [--write] [--only NAME]   (--only with --write updates that row)

Each case runs `gpuplan trace` (docs/trace.md; the post-training step is trace/_posttrain.py, written op for
op after TRL v1.9.0) for two iterations and records the traced peak, its components and the phase peaks.
Without --write it prints them next to the estimate.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from gpuplan.scenario import scenario_from_dict  # noqa: E402

OUT = ROOT / "validation" / "traces_posttrain.json"
H100 = {"gpu": "h100-sxm", "count": 1}


def _rl(prompts, group, prompt_len, new):
    return {"prompts_per_step": prompts, "group_size": group, "prompt_len": prompt_len, "max_new_tokens": new}


# micro_batch x GPUs = one optimizer step's sequences (no gradient accumulation: the trace runs one micro-step)
CASES = {
    "smollm-135m dpo full bf16 s1024 mb1": {
        "model": "smollm-135m", "task": "train", "hardware": H100,
        "train": {"objective": "dpo", "master_weights": False, "seq_len": 1024, "micro_batch": 1}},
    "smollm-135m dpo lora bf16 s1024 mb1": {
        "model": "smollm-135m", "task": "finetune", "hardware": H100,
        "train": {"objective": "dpo", "method": "lora", "master_weights": False, "seq_len": 1024, "micro_batch": 1}},
    "smollm-135m dpo full bf16 s2048 mb2 precomputed": {
        "model": "smollm-135m", "task": "train", "hardware": H100,
        "train": {"objective": "dpo", "reference": "precomputed", "master_weights": False, "seq_len": 2048,
                  "micro_batch": 2}},
    "smollm-135m grpo full bf16 p256 c768 mb2": {
        "model": "smollm-135m", "task": "train", "hardware": H100,
        "train": {"objective": "grpo", "master_weights": False, "micro_batch": 2, "rl": _rl(1, 2, 256, 768)}},
    "smollm-135m grpo full bf16 p768 c256 mb2": {
        "model": "smollm-135m", "task": "train", "hardware": H100,
        "train": {"objective": "grpo", "master_weights": False, "micro_batch": 2, "rl": _rl(1, 2, 768, 256)}},
    "qwen2.5-0.5b dpo full mw s1024 mb1": {
        "model": "qwen2.5-0.5b", "task": "train", "hardware": H100,
        "train": {"objective": "dpo", "master_weights": True, "seq_len": 1024, "micro_batch": 1}},
    "qwen2.5-0.5b dpo lora s2048 mb2 recompute": {
        "model": "qwen2.5-0.5b", "task": "finetune", "hardware": H100,
        "train": {"objective": "dpo", "method": "lora", "master_weights": False, "seq_len": 2048, "micro_batch": 2,
                  "recompute": "full"}},
    "smollm-135m kto full bf16 s1024 mb2": {
        "model": "smollm-135m", "task": "train", "hardware": H100,
        "train": {"objective": "kto", "master_weights": False, "seq_len": 1024, "micro_batch": 2}},
    "smollm-135m orpo full bf16 s1024 mb1": {
        "model": "smollm-135m", "task": "train", "hardware": H100,
        "train": {"objective": "orpo", "master_weights": False, "seq_len": 1024, "micro_batch": 1}},
    "smollm-135m simpo lora bf16 s1024 mb2": {
        "model": "smollm-135m", "task": "finetune", "hardware": H100,
        "train": {"objective": "simpo", "method": "lora", "master_weights": False, "seq_len": 1024, "micro_batch": 2}},
    "qwen2.5-0.5b kto lora s1024 mb4 recompute": {
        "model": "qwen2.5-0.5b", "task": "finetune", "hardware": H100,
        "train": {"objective": "kto", "method": "lora", "master_weights": False, "seq_len": 1024, "micro_batch": 4,
                  "recompute": "full"}},
    "qwen2.5-0.5b orpo full mw s1024 mb1": {
        "model": "qwen2.5-0.5b", "task": "train", "hardware": H100,
        "train": {"objective": "orpo", "master_weights": True, "seq_len": 1024, "micro_batch": 1}},
    "qwen2.5-0.5b grpo lora p512 c1536 mb4 recompute": {
        "model": "qwen2.5-0.5b", "task": "finetune", "hardware": H100,
        "train": {"objective": "grpo", "method": "lora", "master_weights": False, "micro_batch": 4,
                  "recompute": "full", "rl": _rl(1, 4, 512, 1536)}},
}


def estimated(scenario: dict) -> tuple[float, str]:
    """The memory engine's allocated peak (no runtime overhead: a trace is max_memory_allocated) and its
    phase. RL: the training GPU's phases (the trace runs no rollout engine)."""
    from gpuplan.estimate.memory import estimate_memory
    from gpuplan.estimate.rl import rl_stage_phases
    from gpuplan.models import get_model
    scn = scenario_from_dict(scenario)
    model = get_model(scn.model)
    if scn.train.objective in ("grpo", "ppo", "rloo"):
        phases, _, _, _ = rl_stage_phases(scn, model, 10 ** 15)
        totals = {k: sum(v.values()) for k, v in phases.items() if k != "rollout"}
        name = max(totals, key=totals.get)
        return totals[name], name
    est = estimate_memory(scn, model, 10 ** 15)
    return est.peak_bytes_per_gpu - est.components["runtime_overhead"], est.phase


def main() -> int:
    from gpuplan.trace import trace
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"write {OUT.relative_to(ROOT)}")
    ap.add_argument("--only", help="one case by name")
    a = ap.parse_args()
    out = []
    for name, scn in CASES.items():
        if a.only and name != a.only:
            continue
        r = trace(scenario_from_dict(scn)).to_json()
        est, phase = estimated(scn)
        row = {"name": name, "scenario": scn, "peak_bytes": r["peak_bytes"], "phase": r.get("phase"),
               "phases": r.get("phases"), "components": r.get("components"), "details": r.get("details")}
        out.append(row)
        print(f"{name}: traced {r['peak_bytes'] / 2**30:.3f} GiB ({r.get('phase')}), estimated {est / 2**30:.3f} GiB "
              f"({phase}), {100 * (est - r['peak_bytes']) / r['peak_bytes']:+.1f} %", flush=True)
    if a.write:
        if a.only:                     # one case: replace (or add) its row, keep the others
            kept = [r for r in json.loads(OUT.read_text()) if r["name"] != a.only]
            order = list(CASES)
            out = sorted(kept + out, key=lambda r: order.index(r["name"]) if r["name"] in order else len(order))
        OUT.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
