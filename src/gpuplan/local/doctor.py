"""What runs here: for a GPU (detected or named) and a GPU count, which bundled models fit for
inference (bf16, 4-bit), LoRA, QLoRA and full fine-tuning, with the first setting that fits.

For each model x task a short ladder of settings is tried, fastest first, stopping at the first one that
fits (all through gpuplan.api.estimate). A lower bound (the weights alone, sharded as far as the ladder
allows) skips hopeless cells without estimating, so the whole grid takes well under a second.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import GpuplanError
from ..units import GiB
from .detect import LocalSystem

TASKS = ("infer-bf16", "infer-int4", "lora", "qlora", "full")
TASK_LABELS = {"infer-bf16": "infer bf16", "infer-int4": "infer int4", "lora": "LoRA", "qlora": "QLoRA",
               "full": "full FT"}
# bytes per parameter that any setting of the task must keep on the GPUs (lower bound for skipping)
_MIN_BYTES_PER_PARAM = {"infer-bf16": 2.0, "infer-int4": 0.5, "lora": 2.0, "qlora": 0.5, "full": 2.0}

TRAIN_SEQ_LEN = 2048
INFER_PROMPT_LEN, INFER_OUTPUT_LEN = 2048, 512


@dataclass(frozen=True)
class FitCell:
    task: str
    fits: bool
    settings: dict[str, Any] = field(default_factory=dict)    # Scenario.replace() changes that made it fit
    peak_bytes: int | None = None                             # of the fitting setting, else of the leanest tried
    note: str = ""

    @property
    def settings_text(self) -> str:
        parts = []
        for section, kv in self.settings.items():
            for k, v in kv.items():
                parts.append(f"{k}={v}")
        return ", ".join(parts) or "defaults"


@dataclass(frozen=True)
class ModelRow:
    model: str
    params: int | None
    cells: tuple[FitCell, ...]


@dataclass(frozen=True)
class DoctorReport:
    gpu_id: str
    gpu_name: str
    count: int
    capacity_bytes: int
    rows: tuple[ModelRow, ...]
    system: LocalSystem | None = None
    assumptions: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"gpu": {"id": self.gpu_id, "name": self.gpu_name, "count": self.count,
                        "capacity_bytes_per_gpu": self.capacity_bytes},
                "system": self.system.to_json() if self.system else None,
                "assumptions": list(self.assumptions),
                "models": [{"model": r.model, "params": r.params,
                            "tasks": {c.task: {"fits": c.fits, "settings": c.settings, "settings_text": c.settings_text,
                                               "peak_bytes_per_gpu": c.peak_bytes, "note": c.note} for c in r.cells}}
                           for r in self.rows]}

    def render(self) -> str:
        out = []
        if self.system is not None:
            out.append(render_system(self.system))
            out.append("")
        out.append(f"What runs on {self.count} x {self.gpu_name} ({self.capacity_bytes / GiB:.1f} GiB each):")
        head = f"  {'model':<28}{'params':>8}  " + "".join(f"{TASK_LABELS[t]:<14}" for t in TASKS)
        out.append(head)
        for r in self.rows:
            cells = {c.task: c for c in r.cells}
            line = f"  {r.model[:27]:<28}{(r.params or 0) / 1e9:>7.1f}B  "
            for t in TASKS:
                c = cells.get(t)
                if c is None:
                    txt = ""
                elif c.fits:
                    txt = f"yes {c.peak_bytes / GiB:.0f}G" + ("*" if c.settings else "")
                elif c.peak_bytes is None and c.note.startswith("n/a"):
                    txt = "n/a"
                else:
                    txt = "no"
                line += f"{txt:<14}"
            out.append(line)
        out.append("")
        out.append("  yes N G = fits, predicted peak per GPU; * = needs the settings listed below; no = does not fit "
                   "with any setting tried.")
        groups: dict[tuple[str, str], list[str]] = {}
        for r in self.rows:
            for c in r.cells:
                if c.fits and c.settings:
                    groups.setdefault((TASK_LABELS[c.task], c.settings_text), []).append(r.model)
        if groups:
            out.append("  * Settings that made it fit:")
            for (task, text), models in groups.items():
                out.append(f"    {task} with {text}: {', '.join(models)}")
        out += [f"  Assumes {a}" for a in self.assumptions]
        return "\n".join(out)


def render_system(s: LocalSystem) -> str:
    from .oom import fmt_bytes
    lines = [f"Detected via {s.source}: driver {s.driver_version or '?'}, CUDA {s.cuda_version or '?'}"]
    for g in s.gpus:
        cid = g.catalog_id or "not in catalog"
        lines.append(f"  GPU {g.index}: {g.name} [{cid}]  total {fmt_bytes(g.total_bytes)}, free {fmt_bytes(g.free_bytes)}"
                     + (f", used {fmt_bytes(g.used_bytes)}" if g.used_bytes is not None else ""))
    lines.append(f"  Links: {s.interconnect_summary()}")
    lines += [f"  Note: {n}" for n in s.notes]
    return "\n".join(lines)


def _base(model: str, task: str, gpu: str, count: int) -> dict[str, Any]:
    hw = {"gpu": gpu, "count": count}
    if task.startswith("infer"):
        weights = "bf16" if task == "infer-bf16" else "awq-int4"
        return {"model": model, "task": "infer", "hardware": hw,
                "infer": {"weights": weights, "prompt_len": INFER_PROMPT_LEN, "output_len": INFER_OUTPUT_LEN,
                          "concurrency": 1}}
    return {"model": model, "task": "finetune", "hardware": hw,
            "train": {"method": task, "seq_len": TRAIN_SEQ_LEN, "micro_batch": 1}}


def _ladder(task: str, count: int) -> list[dict[str, Any]]:
    if task.startswith("infer"):
        return [{}] + ([{"parallel": {"tp": count}}] if count > 1 else [])
    if task in ("lora", "qlora"):
        return [{}, {"train": {"recompute": "full"}}]
    if count == 1:
        return [{"train": {"recompute": "selective"}}, {"train": {"recompute": "full"}},
                {"train": {"recompute": "full", "optimizer": "adamw-8bit"}},
                {"train": {"recompute": "full", "optimizer": "adamw-8bit"}, "parallel": {"offload": "optimizer", "zero": 1}}]
    z3 = {"zero": 3}
    return [{"parallel": z3, "train": {"recompute": "selective"}}, {"parallel": z3, "train": {"recompute": "full"}},
            {"parallel": {**z3, "offload": "optimizer"}, "train": {"recompute": "full"}}]


def _estimate_fn():
    from ..pipeline import evaluate as estimate
    return estimate


def what_runs(gpu: str, count: int = 1, *, models: list[str] | None = None, tasks: tuple[str, ...] = TASKS,
              estimate_fn: Callable[[Any], Any] | None = None, system: LocalSystem | None = None) -> DoctorReport:
    """Which models x tasks fit on `count` GPUs of catalog id `gpu`, with the first setting that fits."""
    from ..hardware import get_gpu
    from ..models import get_model, list_models
    from ..scenario import scenario_from_dict
    spec = get_gpu(gpu)
    est = estimate_fn or _estimate_fn()
    names = models or [e.name for e in list_models()]
    cap = int(spec.usable_memory_bytes)
    rows = []
    for name in names:
        try:
            m = get_model(name, allow_hub=False)
            params = int(m.params_total)
        except GpuplanError as err:
            rows.append(ModelRow(name, None, tuple(FitCell(t, False, note=f"n/a: {err.why}") for t in tasks)))
            continue
        cells = []
        for task in tasks:
            shards = count if (task == "full" or task.startswith("infer")) else 1
            bound = params * _MIN_BYTES_PER_PARAM[task] / shards
            if bound > cap:
                cells.append(FitCell(task, False, note=f"weights alone need at least {bound / GiB:.0f} GiB per GPU"))
                continue
            last_peak, note, fit = None, "", None
            for step in _ladder(task, count):
                try:
                    scn = scenario_from_dict(_base(name, task, spec.id, count))
                    if step:
                        scn = scn.replace(**step)
                    mem = est(scn).memory
                except GpuplanError as err:
                    note = f"n/a: {err.why}"
                    continue
                last_peak = int(mem.peak_bytes_per_gpu)
                if last_peak <= cap:
                    fit = FitCell(task, True, step, last_peak)
                    break
            cells.append(fit or FitCell(task, False, peak_bytes=last_peak,
                                        note=note if last_peak is None else "no setting tried fits"))
        rows.append(ModelRow(name, params, tuple(cells)))
    assumptions = (f"fine-tuning: seq_len {TRAIN_SEQ_LEN}, micro_batch 1, bf16, AdamW; inference: prompt "
                   f"{INFER_PROMPT_LEN} + output {INFER_OUTPUT_LEN} tokens, 1 sequence, vLLM defaults. "
                   "Change them with `gpuplan estimate`/`gpuplan memory` on your own scenario.",)
    return DoctorReport(spec.id, spec.name, count, cap, tuple(rows), system, assumptions)


def local_gpu_choice(system: LocalSystem) -> tuple[str | None, int]:
    """The catalog id most GPUs of this machine have, and how many have it."""
    ids = Counter(g.catalog_id for g in system.gpus if g.catalog_id)
    if not ids:
        return None, 0
    gid, n = ids.most_common(1)[0]
    return gid, n
