"""Error bars: the relative error to expect on a number, from the validation residuals of its kind of
scenario (estimate/data/uncertainty.csv, written by scripts/make_uncertainty.py).

Each row of the table is one category of one quantity (memory, speed, cost) with the median and P90 of
|predicted − measured| / measured over the runs of that category, how many runs and sources they come
from, and whether they were held out (no constant fitted on them) or in-sample. Where a category has
held-out runs, those give the error bar; otherwise the in-sample residuals do and the bar says so.
A scenario outside every validated category gets no bar and says why.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from ..scenario import RL_OBJECTIVES

PACKAGED_FILE = "estimate/data/uncertainty.csv"


@dataclass(frozen=True)
class Uncertainty:
    """Expected relative error of one figure: `typical` is the median |error| of its category, `p90` the
    90th percentile; both None when the scenario is outside every validated category."""
    quantity: str                  # memory | speed | cost
    category: str | None           # e.g. "training, sharded (FSDP/ZeRO-3)"
    typical: float | None
    p90: float | None
    runs: int = 0
    sources: int = 0
    basis: str = ""                # held-out | in-sample | none

    def to_json(self) -> dict[str, Any]:
        return {"quantity": self.quantity, "category": self.category, "relative_typical": self.typical,
                "relative_p90": self.p90, "runs": self.runs, "sources": self.sources, "basis": self.basis}

    def text(self) -> str:
        return bar_text(self.to_json())


def bar_text(u: dict[str, Any]) -> str:
    """'±x % typical, ±y % P90 (category, n held-out runs, m sources)' from an error bar's JSON form
    (`Uncertainty.to_json`), so the estimate's text and the launch files' headers read alike."""
    if u.get("relative_typical") is None:
        return f"no error bar: {u.get('category') or 'outside every validated category'}"
    runs, sources = u.get("runs", 0), u.get("sources", 0)
    return (f"±{100 * u['relative_typical']:.0f} % typical, ±{100 * (u.get('relative_p90') or 0):.0f} % P90 "
            f"({u.get('category')}, {runs} {u.get('basis', '')} run{'' if runs == 1 else 's'}, "
            f"{sources} source{'' if sources == 1 else 's'})")


@lru_cache(maxsize=1)
def table() -> dict[tuple[str, str], dict[str, str]]:
    text = resources.files("gpuplan").joinpath(PACKAGED_FILE).read_text(encoding="utf-8")
    return {(r["quantity"], r["category"]): r for r in csv.DictReader(text.splitlines())}


# ---- categories (the same functions label validation rows and user scenarios) -------------------

def memory_category(task: str, method: str | None, zero: int, dp: int, engine: str | None,
                    objective: str = "sft") -> str:
    if task == "infer":
        # HF's memory is its weights, cache and activations; a serving engine's is the pool it preallocates (its
        # memory-utilization share): another mechanism, so another category
        return "inference, HF transformers" if engine == "hf" else "inference"
    if objective in RL_OBJECTIVES:      # a rollout engine beside the trainer: its own kind of peak
        return "post-training RL (rollout engine + training)"
    if objective not in (None, "sft"):  # a frozen reference or teacher, pairs through the model, a reward head
        return "post-training (preference, distillation, reward model)"
    if method in ("lora", "qlora"):
        return "fine-tuning, LoRA/QLoRA"
    return "training, sharded (FSDP/ZeRO-3)" if (zero >= 3 and dp > 1) else "training, unsharded or ZeRO-1/2"


def speed_category(task: str, engine: str | None = None, moe: bool = False, objective: str = "sft") -> str:
    """A mixture-of-experts training run is its own category: its routed-expert GEMMs, all-to-all and
    load imbalance are mechanisms dense runs do not exercise, so dense residuals would understate its bar.
    Post-training steps likewise: an RL step is mostly rollout generation, a DPO step runs a reference model."""
    if task != "infer":
        if objective in RL_OBJECTIVES:
            return "post-training RL step (rollout + training)"
        if objective != "sft":
            return "post-training step (preference, distillation, reward model)"
        return "training tokens/s, mixture-of-experts" if moe else "training tokens/s"
    if engine == "llama.cpp":
        return "serving, llama.cpp"
    if engine == "hf":
        return "serving, HF transformers eager"
    return "serving, batched engines (vLLM, SGLang, TensorRT-LLM)"


def lookup(quantity: str, category: str) -> Uncertainty:
    row = table().get((quantity, category))
    if row is None or not row["relative_typical"]:
        return Uncertainty(quantity, f"{category}: no validated runs of this kind", None, None, basis="none")
    return Uncertainty(quantity, category, float(row["relative_typical"]), float(row["relative_p90"]),
                       int(row["runs"]), int(row["sources"]), row["basis"])


def for_scenario(scn: Any, moe: bool = False) -> dict[str, Uncertainty]:
    """Error bars of a scenario's memory, speed and cost figures (`moe`: the model routes tokens to
    experts). Cost is time × a catalog price, so its bar is the speed bar (prices are quoted, not
    predicted)."""
    task = scn.task
    t, inf, p = scn.train, scn.infer, scn.parallel
    engine = inf.engine if inf is not None else None
    objective = getattr(t, "objective", "sft") if t is not None else "sft"
    mem = lookup("memory", memory_category(task, t.method if t else None, p.zero, scn.dp, engine, objective))
    spd = lookup("speed", speed_category(task, engine, moe, objective))
    cost = Uncertainty("cost", spd.category, spd.typical, spd.p90, spd.runs, spd.sources, spd.basis)
    return {"memory": mem, "speed": spd, "cost": cost}
