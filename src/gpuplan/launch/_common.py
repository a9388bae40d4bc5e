"""Shared pieces of the launch generators: the plan context, headers and name translation.

Our names (DESIGN §3.1) are translated to each engine's spelling here or in the engine module,
once, at the boundary. Every emitted file starts with a header holding the plan's predicted
memory, speed and cost and the gpuplan version:

* shell, Python, TOML, YAML, sbatch: `#` comment lines (after the shebang where there is one);
* JSON has no comments: the first key of the top-level object is `"_gpuplan"`, an object with the
  same content. Our own scripts drop that key before handing the rest to a strict parser
  (TrainingArguments, LoraConfig, BitsAndBytesConfig); DeepSpeed ignores unknown top-level keys.
"""
from __future__ import annotations

import csv
import json
import math
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import __version__
from ..errors import Hint, InputError, InputHint, UnsupportedError
from ..estimate.uncertainty import bar_text
from ..models import ModelSpec, get_model
from ..scenario import Scenario

GIB = 2 ** 30
DEFAULT_GPUS_PER_NODE = 8

TRAIN_ENGINES = ("torchrun", "hf", "deepspeed", "megatron", "trl", "verl", "openrlhf", "llama-factory", "axolotl", "unsloth", "mlx-lm",
                 "slurm")
SERVE_ENGINES = ("vllm", "sglang", "trtllm", "llama.cpp")

# train.objective -> what each training engine's files run (the trainer each module writes; docs/launch.md's table).
# torchrun/hf/deepspeed/megatron (and slurm around them) write a supervised (next-token) loss only.
ENGINE_OBJECTIVES: dict[str, tuple[str, ...]] = {
    "torchrun": ("sft",), "hf": ("sft",), "deepspeed": ("sft",), "megatron": ("sft",), "slurm": ("sft",),
    "trl": ("dpo", "ipo", "grpo"), "verl": ("grpo", "ppo", "rloo"), "openrlhf": ("grpo", "rloo", "ppo"),
    "llama-factory": ("sft", "dpo", "ipo", "orpo", "simpo", "kto", "reward"),
    "axolotl": ("sft", "dpo", "ipo", "orpo", "kto", "simpo"), "unsloth": ("sft", "dpo"), "mlx-lm": ("sft",),
}


def objective_engines(objective: str) -> tuple[str, ...]:
    """The training engines whose launch files run `objective` (ENGINE_OBJECTIVES), in TRAIN_ENGINES order."""
    return tuple(e for e in TRAIN_ENGINES if objective in ENGINE_OBJECTIVES.get(e, ()))


# ---- hardware facts (lightly; the catalog module may not be there yet) ------------------------

@dataclass(frozen=True)
class GpuInfo:
    id: str
    vendor: str
    family: str
    has_fp8: bool
    has_bf16: bool


_NO_BF16_FAMILIES = {"volta", "turing", "pascal"}


def gpu_info(name: str) -> GpuInfo | None:
    """Vendor/family/fp8/bf16 support of a catalog GPU, or None when it cannot be looked up.

    Uses `gpuplan.hardware.get_gpu` when that module exists; otherwise reads the bundled catalog
    CSV by exact id or alias (case-insensitive). Never guesses by substring."""
    try:
        from ..hardware import get_gpu  # type: ignore[attr-defined]
    except Exception:
        get_gpu = None
    if get_gpu is not None:
        try:
            g = get_gpu(name)
            fam = str(getattr(g, "family", "")).lower()
            vendor = str(getattr(g, "vendor", "") or "").strip()
            peaks = getattr(g, "peak_flops_per_s", None)
            peaks = dict(peaks) if isinstance(peaks, Mapping) else {}
            has_bf16 = bool(peaks.get("bf16")) if peaks else fam not in _NO_BF16_FAMILIES
            return GpuInfo(g.id, vendor, fam, bool(peaks.get("fp8")), has_bf16)
        except Exception:
            pass
    return _gpu_from_csv(name)


_NVIDIA_FAMILIES = {"volta", "turing", "ampere", "ada", "hopper", "blackwell"}


def _gpu_from_csv(name: str) -> GpuInfo | None:
    try:
        from importlib import resources
        text = (resources.files("gpuplan.hardware") / "data" / "gpus.csv").read_text(encoding="utf-8")
    except Exception:
        return None
    key = name.strip().lower()
    for row in csv.DictReader(text.splitlines()):
        names = {row["id"].lower(), *(a.strip().lower() for a in (row.get("aliases") or "").split(";") if a.strip())}
        if key in names:
            fam = (row.get("family") or "").lower()
            return GpuInfo(row["id"], row.get("vendor") or "", fam, bool((row.get("fp8_tflops") or "").strip()),
                           fam not in _NO_BF16_FAMILIES)
    return None


# ---- the plan context ------------------------------------------------------------------------

@dataclass(frozen=True)
class Plan:
    scenario: Scenario
    spec: ModelSpec
    engine: str
    estimate: dict | None
    gpus_per_node: int
    nodes: int
    model_ref: str            # what the engine loads: HF id, local path, or a placeholder
    gpu: GpuInfo | None

    @property
    def s(self) -> Scenario:
        return self.scenario

    @property
    def multi_node(self) -> bool:
        return self.nodes > 1

    @property
    def count(self) -> int:
        return self.scenario.hardware.count

    @property
    def procs_per_node(self) -> int:
        return min(self.count, self.gpus_per_node)

    # ---- training batch arithmetic ----
    @property
    def micro_batch(self) -> int:
        return self.scenario.train.micro_batch  # type: ignore[union-attr]

    @property
    def global_batch(self) -> int:
        t = self.scenario.train
        return t.global_batch or t.micro_batch * self.scenario.dp  # type: ignore[union-attr]

    @property
    def grad_accum(self) -> int:
        from ..estimate.layout import grad_accum_steps
        return grad_accum_steps(self.global_batch, self.micro_batch, self.scenario.dp, strict=True)

    @property
    def train_steps(self) -> int | None:
        t = self.scenario.train
        if t is None or t.tokens is None:
            return None
        return max(1, math.ceil(t.tokens / (self.global_batch * t.seq_len)))

    @property
    def plan_line(self) -> str:
        s, p = self.scenario, self.scenario.parallel
        lay = f"dp{s.dp} tp{p.tp} pp{p.pp}" + (f" cp{p.cp}" if p.cp > 1 else "") + (f" ep{p.ep}" if p.ep > 1 else "")
        if s.is_training:
            t = s.train
            what = f"{s.task} ({t.method}, {t.precision}, zero {p.zero}, offload {p.offload}, recompute {t.recompute})"
        else:
            i = s.infer
            what = f"infer (weights {i.weights}, kv {i.kv_cache}, concurrency {i.concurrency})"
        model = s.model if isinstance(s.model, str) else self.spec.name
        return (f"{model} {what} on {self.count}x {s.hardware.gpu} "
                f"({self.nodes} node{'s' if self.nodes > 1 else ''} x {self.procs_per_node}; {lay})")


def make_plan(scenario: Scenario, engine: str, estimate: dict | None) -> Plan:
    from ..pipeline import stored_weights_default
    spec = get_model(scenario.model)  # type: ignore[arg-type]
    scenario, _ = stored_weights_default(scenario, spec)     # the weights the estimate priced (pipeline.resolve)
    hw = scenario.hardware
    gpn = hw.gpus_per_node or DEFAULT_GPUS_PER_NODE
    if hw.count > gpn and hw.count % gpn:
        raise InputError("hardware.count", f"{hw.count} GPUs do not fill whole nodes of {gpn} GPUs.",
                         "set hardware.count to a multiple of hardware.gpus_per_node.")
    nodes = max(1, math.ceil(hw.count / gpn))
    if spec.hf_id:
        ref = spec.hf_id
    elif isinstance(scenario.model, str):
        ref = scenario.model
    else:
        ref = "/path/to/model"
    return Plan(scenario, spec, engine, estimate, gpn, nodes, ref, gpu_info(hw.gpu))


def reward_ref(name: str) -> str:
    """What an RL engine loads for the reward model: its HF id when the registry knows one, else the name."""
    return get_model(name).hf_id or name


# ---- checks shared by engines ------------------------------------------------------------------

def unsupported(plan: Plan, what: str, why: str, alternatives: list[str] | tuple[str, ...], fix: str = "",
                see: Hint | None = None) -> UnsupportedError:
    objective = plan.s.train.objective if plan.s.is_training and plan.s.train is not None else None
    # never name a training engine whose files would run another objective than the plan's (issue 20: hf for DPO
    # wrote a supervised script)
    alts = ", ".join(a for a in alternatives if a != plan.engine and (
        objective is None or a not in ENGINE_OBJECTIVES or objective in ENGINE_OBJECTIVES[a]))
    fix = fix.strip()
    joined = fix.endswith(" or")          # "use bf16, or" continues with the engines that can
    if alts:
        tail = f"use an engine that can: {alts}." if joined else f"Engines that can: {alts}."
        text = f"{fix} {tail}" if fix else tail
    else:                                 # no engine to name: end the sentence instead of leaving "..., or"
        text = fix.removesuffix(" or").rstrip(",; ") + "." if joined else fix
    return UnsupportedError(f"launch engine '{plan.engine}': {what}", why, text, see=see)


def require_objective(plan: Plan, why: str | None = None) -> None:
    """Refuse a train.objective this engine's files do not run, naming the engines whose files do."""
    obj = plan.s.train.objective
    if obj in ENGINE_OBJECTIVES.get(plan.engine, (obj,)):
        return
    can = objective_engines(obj)
    why = why or (f"the files written for this engine train the supervised (sft) loss; they have no {obj} trainer, "
                  "so they would run SFT under a post-training estimate.")
    own = ENGINE_OBJECTIVES.get(plan.engine, ())
    fix = f"use objective {' / '.join(own)}, or" if can else (
        f"no launch engine here writes {obj}; `gpuplan estimate` still prices the run, but write its trainer "
        "yourself (or use objective sft).")
    raise unsupported(plan, f"train.objective '{obj}'", why, can, fix)


def require_training(plan: Plan) -> None:
    if not plan.s.is_training:
        raise unsupported(plan, "task 'infer'", "this engine launches training, not serving.", SERVE_ENGINES,
                          see=InputHint("engine", "a serving engine"))


def require_serving(plan: Plan) -> None:
    if plan.s.is_training:
        raise unsupported(plan, f"task '{plan.s.task}'", "this engine serves models; it does not train them.",
                          ("torchrun", "hf", "deepspeed", "megatron"), see=InputHint("engine", "a training engine"))


def check_train_precision(plan: Plan) -> None:
    t, g = plan.s.train, plan.gpu
    if g is None:
        return
    if t.precision == "bf16" and not g.has_bf16:
        raise UnsupportedError(f"train.precision 'bf16' on {g.id}",
                               f"{g.family} GPUs have no bf16 tensor math.", "use train.precision: fp16 (loss scaling) or fp32.")
    if t.precision == "fp8" and not g.has_fp8:
        raise UnsupportedError(f"train.precision 'fp8' on {g.id}", f"{g.family} GPUs have no fp8 tensor cores.",
                               "use bf16, or an Ada/Hopper/Blackwell GPU.")


def check_serve_precision(plan: Plan) -> None:
    i, g = plan.s.infer, plan.gpu
    if g is None:
        return
    if i.kv_cache.startswith("fp8") and not g.has_fp8 and plan.engine in ("trtllm",):
        raise UnsupportedError(f"infer.kv_cache '{i.kv_cache}' on {g.id}", f"{plan.engine} needs fp8 hardware for an fp8 KV cache.",
                               "use kv_cache: bf16 or fp16.")
    if i.weights.startswith("fp8") and not g.has_fp8 and plan.engine in ("trtllm", "sglang"):
        raise UnsupportedError(f"infer.weights '{i.weights}' on {g.id}", f"{g.family} GPUs have no fp8 tensor cores.",
                               "use bf16 or a 4-bit weight format (awq-int4, gptq-int4).")


def max_model_len(plan: Plan) -> int:
    i = plan.s.infer
    return i.max_model_len or (i.prompt_len + i.output_len)


# ---- headers ---------------------------------------------------------------------------------

def _gib(x: Any) -> str:
    return f"{x / GIB:.2f} GiB" if isinstance(x, (int, float)) else "n/a"


def _num(x: Any, fmt: str) -> str | None:
    return None if x is None else format(x, fmt)


def _duration(s: float) -> str:
    if s >= 86400:
        return f"{s / 86400:.1f} days"
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    return f"{s:.0f} s"


def estimate_lines(estimate: dict | None) -> list[str]:
    if not estimate:
        return ["predicted memory, speed and cost: not estimated (run `gpuplan estimate SCENARIO` for numbers)"]
    mem = estimate.get("memory") or {}
    perf = estimate.get("performance") or {}
    cost = estimate.get("cost") or {}
    lines = []
    fits = mem.get("fits")
    lines.append(f"predicted memory: {_gib(mem.get('peak_bytes_per_gpu'))} peak per GPU of "
                 f"{_gib(mem.get('capacity_bytes_per_gpu'))} usable"
                 + ("" if fits is None else (" (fits)" if fits else " (DOES NOT FIT)")) + _error_bar(mem))
    comps = mem.get("components") or {}
    parts = [f"{k} {v / GIB:.2f}" for k, v in comps.items() if isinstance(v, (int, float)) and v]
    if parts:
        lines.append("  breakdown (GiB): " + ", ".join(parts))
    speed = _present(perf, (
        ("step_time_s", lambda v: f"step {v:.3f} s"),
        ("tokens_per_s_per_gpu", lambda v: f"{v:,.0f} tokens/s per GPU"),
        ("mfu", lambda v: f"MFU {v * 100:.1f}%"),
        ("time_to_train_s", lambda v: f"time to train {_duration(v)}"),
        ("ttft_s", lambda v: f"TTFT {v * 1000:.1f} ms"),
        ("tpot_s", lambda v: f"TPOT {v * 1000:.2f} ms"),
        ("output_tokens_per_s", lambda v: f"{v:,.0f} output tokens/s")))
    lines.append("predicted speed: " + (", ".join(speed) + _error_bar(perf) if speed else "not estimated"))
    money = _present(cost, (
        ("usd_per_hour", lambda v: f"${v:,.2f}/h"),
        ("usd_total", lambda v: f"${v:,.0f} total"),
        ("usd_per_million_tokens", lambda v: f"${v:,.3f} per million tokens")))
    lines.append("predicted cost: " + (", ".join(money) + _error_bar(cost) if money else "not estimated"))
    return lines


def _error_bar(section: dict) -> str:
    """'; error bar ±x % typical, ...' from a section's `uncertainty` (as `gpuplan estimate` prints it)."""
    u = section.get("uncertainty")
    if not u:
        return ""
    text = bar_text(u)
    return f"; {text}" if u.get("relative_typical") is None else f"; error bar {text}"


def _present(values: dict, formats) -> list[str]:
    """The formatted values that are present (a key that does not apply is None, not 0)."""
    return [fmt(values[key]) for key, fmt in formats if values.get(key) is not None]


def header_lines(plan: Plan, notes: list[str] | tuple[str, ...] = ()) -> list[str]:
    from .facts import written_for
    lines = [f"generated by gpuplan {__version__} (engine: {plan.engine}); edit freely",
             f"plan: {plan.plan_line}"]
    target = written_for(plan.engine)
    if target:
        lines.append(f"written for: {target} (launch/data/engine_flags.csv)")
    lines += estimate_lines(plan.estimate)
    lines += [f"note: {n}" for n in notes]
    return lines


def hash_header(plan: Plan, notes=(), shebang: str | None = None) -> str:
    out = [shebang] if shebang else []
    out += [f"# {line}" if line else "#" for line in header_lines(plan, notes)]
    return "\n".join(out) + "\n"


def json_text(plan: Plan, body: dict[str, Any], notes=()) -> str:
    from .facts import written_for
    meta: dict[str, Any] = {"generated_by": f"gpuplan {__version__}", "engine": plan.engine, "plan": plan.plan_line}
    if written_for(plan.engine):
        meta["written_for"] = written_for(plan.engine)
    est = plan.estimate
    if est:
        meta["predicted"] = {k: est.get(k) for k in ("memory", "performance", "cost") if k in est}
    else:
        meta["predicted"] = "not estimated"
    if notes:
        meta["notes"] = list(notes)
    return json.dumps({"_gpuplan": meta, **body}, indent=2) + "\n"


def strip_meta(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k != "_gpuplan"}


# ---- shell helpers ---------------------------------------------------------------------------

def launch_script(plan: Plan, argv: list[str], node_env: str = "MASTER_ADDR") -> str:
    """launch.sh: the header, a cd to the script's folder, the multi-node hint and the command."""
    hint = (f"# multi-node: run this on every node with {node_env} set, or submit slurm.sbatch\n"
            if plan.multi_node else "")
    body = "set -euo pipefail\ncd \"$(dirname \"$0\")\"\n" + hint + shell_command(argv) + "\n"
    return hash_header(plan, shebang="#!/usr/bin/env bash") + body


def shell_command(argv: list[str], indent: str = "  ") -> str:
    """One command, one flag (with its value) per line, joined with backslashes."""
    parts: list[str] = []
    i = 0
    while i < len(argv) and not argv[i].startswith("-"):    # program and subcommand on the first line
        i += 1
    if argv[:2] == ["python", "-m"]:
        i = 3
    if i:
        parts.append(" ".join(a if a.startswith(("$", '"$')) else shlex.quote(a) for a in argv[:i]))
    while i < len(argv):
        tok = argv[i]
        q = tok if tok.startswith("$") or tok.startswith('"$') else shlex.quote(tok)
        if tok.startswith("-") and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            nxt = argv[i + 1]
            nq = nxt if nxt.startswith('"$') or nxt.startswith("$") else shlex.quote(nxt)
            parts.append(f"{q} {nq}")
            i += 2
        else:
            parts.append(q)
            i += 1
    return (" \\\n" + indent).join(parts)


def torchrun_argv(plan: Plan, script: str, script_args: list[str]) -> list[str]:
    """torchrun for one node, or with c10d rendezvous on $MASTER_ADDR for several (run it on every
    node, or let slurm.sbatch do that)."""
    if plan.multi_node:
        head = ["torchrun", "--nnodes", str(plan.nodes), "--nproc-per-node", str(plan.procs_per_node),
                "--rdzv-backend", "c10d", "--rdzv-endpoint", '"${MASTER_ADDR:?set MASTER_ADDR to the head node}:${MASTER_PORT:-29500}"',
                "--rdzv-id", '"${RDZV_ID:-gpuplan}"']
    else:
        head = ["torchrun", "--standalone", "--nproc-per-node", str(plan.procs_per_node)]
    return head + [script] + script_args


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return json.dumps(str(v))


def toml_text(tables: dict[str, dict[str, Any]]) -> str:
    out = []
    for name, kv in tables.items():
        out.append(f"[{name}]")
        for k, v in kv.items():
            if v is None:
                continue
            out.append(f"{k} = {toml_value(v)}")
        out.append("")
    return "\n".join(out)


def yaml_text(data: dict[str, Any]) -> str:
    import yaml
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
