"""The one evaluation pipeline: resolve → memory → performance(memory) → cost.

Every surface (CLI commands, web, search, launch headers, doctor, what-if) evaluates a plan through
`evaluate`; nothing else calls the estimators' entry points for a whole plan. That is what makes the
same question give the same answer everywhere:

- a calibration profile (scenario `hardware.profile` or GPUPLAN_PROFILE), the network and the
  software-fit check are applied once, in `resolve`;
- memory is computed once per plan and handed to the speed engine (the serving KV pool and the
  concurrency limit come from that one memory estimate);
- a caller that already has the memory (the search screens candidates on memory first) passes it in.

Layering: this module sits above `estimate/` (pure estimators) and below `search/` and the surfaces.
"""
from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .estimate.results import CostEstimate, MemoryEstimate, PerformanceEstimate
from .models import ModelSpec, get_model
from .scenario import Scenario, load_scenario, scenario_from_dict
from .validate import check_scenario_against_model

PROFILE_ENV = "GPUPLAN_PROFILE"


@dataclass(frozen=True)
class Resolved:
    """A scenario with every name looked up and every setting that shapes the estimate applied."""
    scenario: Scenario
    model: ModelSpec
    gpu: Any                              # gpuplan.hardware.GpuSpec
    network: Any = None                   # gpuplan.hardware NetworkSpec (None: single node, no fabric)
    speed_params: Mapping[str, Any] | None = None   # None: the packaged calibration
    profile_path: str | None = None       # the measured hardware profile applied, if any
    warnings: tuple[str, ...] = ()        # software-fit warnings (errors raise in resolve)


@dataclass(frozen=True)
class Estimate:
    scenario: Scenario
    model: ModelSpec
    gpu: Any
    memory: MemoryEstimate
    performance: PerformanceEstimate
    cost: CostEstimate
    warnings: tuple[str, ...] = ()
    profile_path: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "memory": self.memory.to_json(),
            "performance": self.performance.to_json(),
            "cost": self.cost.to_json(),
            "scenario": self.scenario.model_dump(mode="json"),
            "model": self.model.to_dict(self.scenario.train.seq_len if self.scenario.train else 2048),
            "gpu": {"id": self.gpu.id, "name": self.gpu.name,
                    "usable_memory_bytes": int(self.gpu.usable_memory_bytes)},
            "profile": self.profile_path,
            "warnings": list(self.warnings),
        }


# ---- resolve ------------------------------------------------------------------------------------

def as_scenario(scenario: Scenario | Mapping[str, Any] | str | Path) -> Scenario:
    if isinstance(scenario, Scenario):
        return scenario
    if isinstance(scenario, Mapping):
        return scenario_from_dict(dict(scenario))
    return load_scenario(scenario)


def _user_config(ref: Any) -> bool:
    """The scenario's model is a config object or a config.json path (not a bundled name or a Hub id)."""
    if isinstance(ref, Mapping):
        return True
    return isinstance(ref, str) and (ref.endswith(".json") or Path(ref).expanduser().is_dir())


def resolve(scenario: Scenario | Mapping[str, Any] | str | Path | Resolved, *, allow_hub: bool = True,
            model: ModelSpec | None = None, gpu: Any = None, network: Any = None,
            speed_params: Mapping[str, Any] | None = None) -> Resolved:
    """Look up model, GPU and network, check the software stack, load the speed parameters (with the
    scenario's or GPUPLAN_PROFILE's measured profile). Callers that evaluate many plans of one model
    (the search) pass the looked-up `model`, `gpu`, `network` and `speed_params` to skip the lookups."""
    if isinstance(scenario, Resolved):
        return scenario
    from .hardware import get_gpu
    scn = as_scenario(scenario)
    spec = model if model is not None else get_model(scn.model, allow_hub=allow_hub)
    card = gpu if gpu is not None else get_gpu(scn.hardware.gpu)
    _check_formats(scn)                                          # a misspelled format is named first
    scn, stored_note = stored_weights_default(scn, spec)
    model_notes = list(check_scenario_against_model(scn, spec) or ()) + stored_note   # rules that need the model
    if model is None and _user_config(scn.model):   # a config the user wrote or pasted: say what it left to defaults
        from .models.spec import defaulted_shape
        gap = defaulted_shape(spec.config, spec)
        model_notes += [gap] if gap else []
    if scn.train is not None and scn.train.objective != "sft":  # post-training: teacher, reward model, lengths
        from .estimate.posttrain import check_models
        model_notes = list(model_notes or ()) + check_models(scn, spec, allow_hub=allow_hub)
    net = network if network is not None else resolve_network(scn.hardware.network, card)
    profile = profile_path_for(scn)
    params = speed_params
    if profile:
        params = speed_params_for(card, profile)
    r = Resolved(scn, spec, card, net, params, profile)
    return dataclasses.replace(r, warnings=tuple(model_notes or ()) + software_warnings(r))


# engines that load a checkpoint's stored quantization as it is (vLLM, SGLang and TensorRT-LLM read config.json's
# quantization_config); transformers may dequantize (gpt-oss's MXFP4 without its Triton kernels) and llama.cpp
# loads GGUF files, so neither takes the default
STORED_FORMAT_ENGINES = ("vllm", "sglang", "trtllm")


def stored_weights_default(scn: Scenario, model: ModelSpec) -> tuple[Scenario, list[str]]:
    """Serving a model whose published checkpoint is quantized (ModelSpec.stored_weights: gpt-oss's MXFP4 experts,
    DeepSeek-V3's block FP8) on an engine that loads it as stored: infer.weights, when the scenario does not set it,
    is that format, not 16-bit (which would double or quadruple the weights), and a note says so."""
    inf = scn.infer
    stored = model.stored_weights
    if inf is None or stored is None or "weights" in inf.model_fields_set or inf.engine not in STORED_FORMAT_ENGINES:
        return scn, []
    note = (f"infer.weights not set: {stored}, the format {model.name}'s published checkpoint stores (its config's "
            f"quantization_config), as {inf.engine} loads it; set infer.weights (e.g. bf16) for another copy")
    return scn.model_copy(update={"infer": inf.model_copy(update={"weights": stored})}), [note]


def _check_formats(scn: Scenario) -> None:
    """Serving formats are names in the closed dtype vocabulary: an unknown one is an error with close
    matches before any rule that needs the model (which would otherwise speak first)."""
    if scn.infer is not None:
        from .dtypes import kv_bytes, weight_format
        weight_format(scn.infer.weights)
        kv_bytes(scn.infer.kv_cache)


def resolve_network(name: str | None, gpu: Any) -> Any:
    """The scale-out network by catalog id (an unknown id is an error with close matches), else the
    GPU's default; None only when the catalog has no default for this GPU."""
    from .hardware import default_network_for, get_network
    if name:
        return get_network(name)
    return default_network_for(gpu)


def profile_path_for(scn: Scenario) -> str | None:
    return scn.hardware.profile or os.environ.get(PROFILE_ENV) or None


def speed_params_for(gpu: Any, profile_path: str) -> dict[str, Any]:
    """The packaged speed parameters with `gpu`'s family factors taken from a measured profile."""
    from .estimate.profile import load_profile, params_with_profile
    from .estimate.speed import load_efficiency
    return params_with_profile(load_efficiency(), load_profile(profile_path), gpu)


def software_warnings(r: Resolved) -> tuple[str, ...]:
    """Problems of the software stack for this GPU (errors raise, warnings are returned)."""
    from .errors import UnsupportedError
    from .hardware import software
    scn = r.scenario
    if scn.train:
        dtype = scn.train.precision
        # the default attention ("flash") falls back to SDPA silently where FlashAttention does not run
        attention = scn.train.attention if "attention" in scn.train.model_fields_set else None
        engine = {"megatron": "megatron", "deepspeed": "deepspeed"}.get(scn.framework, "pytorch")
    else:
        assert scn.infer is not None
        dtype = _weights_math_dtype(scn.infer.weights)
        engine, attention = scn.infer.engine.replace(".", ""), None
    problems = software.check(r.gpu, engine=engine, dtype=dtype, attention=attention)
    if scn.train and scn.train.precision == "fp8":
        # serving can emulate fp8 (weight-only), training cannot: FP8 training needs FP8 tensor cores
        problems = [dataclasses.replace(p, severity="error") if (p.topic, p.subject) == ("format", "fp8") else p
                    for p in problems]
    errors = [p for p in problems if p.severity == "error"]
    if errors:
        raise UnsupportedError(f"{r.gpu.id} with this scenario", " ".join(p.message for p in errors),
                               " ".join(p.alternative for p in errors if p.alternative))
    return tuple(p.message + (f" ({p.alternative})" if p.alternative else "") for p in problems)


def _weights_math_dtype(weights: str) -> str:
    """The tensor-core format a weight format asks of the GPU (fp8 weights want fp8 math)."""
    from .dtypes import weight_format
    fmt = weight_format(weights)
    return {"fp8": "fp8", "fp4": "fp4"}.get(fmt.family, fmt.compute_dtype if fmt.compute_dtype in ("bf16", "fp32") else "fp16")


# ---- the stages ---------------------------------------------------------------------------------

def memory(r: Resolved) -> MemoryEstimate:
    from .estimate.memory import estimate_memory
    mem = estimate_memory(r.scenario, r.model, r.gpu.usable_memory_bytes)
    return dataclasses.replace(mem, uncertainty=error_bars(r.scenario, r.model.is_moe)["memory"])


def performance(r: Resolved, mem: MemoryEstimate) -> PerformanceEstimate:
    from .estimate.speed import estimate_performance
    perf = estimate_performance(r.scenario, r.model, r.gpu, params=r.speed_params, network=r.network, memory=mem)
    return dataclasses.replace(perf, uncertainty=error_bars(r.scenario, r.model.is_moe)["speed"])


def error_bars(scenario: Scenario, moe: bool = False) -> dict[str, Any]:
    """Expected relative error of the memory, speed and cost figures of this kind of scenario (`moe`:
    the model routes tokens to experts)."""
    from .estimate.uncertainty import for_scenario
    return for_scenario(scenario, moe)


def load_not_simulated_note(scenario: Scenario, simulated_by: str) -> str | None:
    """What an estimate of a scenario with `infer.load` says: its figures are the steady state at infer.concurrency,
    and the load is simulated elsewhere (`simulated_by`: the surface's serving-under-load command or endpoint)."""
    inf = scenario.infer
    if inf is None or inf.load is None:
        return None
    load = inf.load
    shape = (f"{load.rate_per_s:g} requests/s" if load.rate_per_s is not None
             else f"{load.clients} clients" if load.clients else f"{load.arrival} arrivals")
    return (f"the figures above are the steady state at concurrency {inf.concurrency} (infer.concurrency); the "
            f"scenario's infer.load ({shape}) is simulated by {simulated_by}")


def serving_curve(r: Resolved, mem: MemoryEstimate, concurrencies: list[int]) -> list[dict[str, Any]]:
    """Throughput/TTFT/TPOT of one serving replica versus concurrency, on the KV pool of `mem`."""
    from .estimate.speed import serving_curve as curve
    return curve(r.scenario, r.model, r.gpu, concurrencies, params=r.speed_params, network=r.network, memory=mem)


def serving_load(r: Resolved, mem: MemoryEstimate, *, search: bool = True, sweep: bool = False,
                 progress: Any = None) -> dict[str, Any]:
    """Serving under load (the scenario's `infer.load`): latency percentiles, throughput, goodput,
    capacity and the highest rate meeting the SLO of one replica, simulated request by request on the
    speed engine's step cost and the KV pool of `mem` (estimate/load, docs/serving-load.md).
    `progress(text)`, if given, is told each simulation run as it starts (the CLI's progress bar)."""
    from .errors import InputError
    from .estimate.load import serving_load as simulate_load
    from .estimate.speed import serving_model
    scn = r.scenario
    if scn.infer is None or scn.infer.load is None:
        raise InputError("infer.load", "is not given.", "add infer.load (rate_per_s, ...) or pass --rate.")
    if scn.infer.engine == "hf":
        raise InputError("infer.engine hf", "has no continuous-batching scheduler to simulate under load.",
                         "use vllm, sglang, trtllm or llama.cpp.")
    from .estimate.speed import cpu_layers_note
    cpu_note = cpu_layers_note(scn, r.model)
    if cpu_note:
        from .errors import UnsupportedError
        raise UnsupportedError("infer.gpu_layers", cpu_note + ".",
                               "run `gpuplan estimate` for the memory of this plan.")
    rows = None
    if scn.infer.load.arrival == "trace":
        from .inputs import read_trace_file
        rows = read_trace_file(scn.infer.load.trace)
    notes = []
    if scn.infer.engine == "vllm" and scn.infer.max_num_seqs is None:
        # the simulated engine runs up to vLLM's default max_num_seqs, and its start-up profile (which
        # sizes the KV pool) is taken at that limit, not at the scenario's concurrency
        from .estimate.memory import engine_max_num_seqs
        seqs = engine_max_num_seqs(scn, int(r.gpu.usable_memory_bytes), 1 << 30)
        scn = scn.model_copy(update={"infer": scn.infer.model_copy(update={"max_num_seqs": seqs})})
        r = dataclasses.replace(r, scenario=scn)
        mem = memory(r)
        notes.append(f"vLLM runs up to max_num_seqs={seqs} (its default here); the KV pool is sized for that "
                     "limit's start-up profile.")
    sv = serving_model(scn, r.model, r.gpu, params=r.speed_params, network=r.network, memory=mem)
    load = scn.infer.load
    # the load is the whole plan's: its replicas (model copies) share it evenly, one is simulated
    replicas = 1 if load.disaggregation is not None else max(1, scn.hardware.count // sv.group_gpus)
    one, rows, share_note = _replica_share(scn, rows, replicas)
    if share_note:
        notes.append(share_note)
    out = simulate_load(one, sv, int(r.gpu.usable_memory_bytes), trace_rows=rows, search=search, sweep=sweep,
                        progress=progress)
    out["notes"] = notes + out["notes"]
    per = out["disaggregation"]["gpus"] if out.get("disaggregation") else sv.group_gpus
    out["replicas"] = replicas if load.disaggregation is None else max(1, scn.hardware.count // per)
    out["gpus_per_replica"] = per
    if replicas > 1:
        out["rate_per_replica_s"] = out.get("rate_per_s")
        for k in ("rate_per_s", "output_tokens_per_s", "total_tokens_per_s", "requests_per_s",
                  "goodput_requests_per_s"):
            if out.get(k) is not None:
                out[k] *= replicas
    return out


def _replica_share(scn: Scenario, rows: list | None, replicas: int) -> tuple[Scenario, list | None, str]:
    """One replica's share of the plan's load, as a load balancer that deals requests evenly gives it: the
    arrival rate (Poisson thinned by random routing is Poisson at rate/replicas; gamma gaps approximately
    so), the closed-loop clients and the offline requests divided, a trace's requests dealt in turn."""
    load = scn.infer.load
    if replicas <= 1:
        return scn, rows, ""
    upd: dict[str, Any] = {}
    if load.arrival in ("poisson", "gamma"):
        upd["rate_per_s"] = load.rate_per_s / replicas
        what = f"{load.rate_per_s:g} requests/s"
    elif load.arrival == "closed":
        upd["clients"] = max(1, math.ceil(load.clients / replicas))
        what = f"{load.clients} clients (the busiest replica's {upd['clients']} simulated)"
    elif load.arrival == "offline":
        upd["requests"] = max(1, math.ceil(load.requests / replicas))
        what = f"{load.requests} requests"
    else:
        rows = (rows or [])[::replicas]
        what = "the trace's requests (every replicas-th one)"
    one = scn.model_copy(update={"infer": scn.infer.model_copy(update={"load": load.model_copy(update=upd)})})
    return one, rows, (f"the plan's {replicas} replicas share {what} evenly: one replica is simulated; rates, "
                       "throughputs and goodput are the plan's, capacity and the SLO rate one replica's.")


def cost(r: Resolved, perf: PerformanceEstimate, *, quote: Any = None) -> CostEstimate:
    from .estimate.cost import estimate_cost
    return dataclasses.replace(estimate_cost(r.scenario, r.gpu, perf, quote=quote),
                               uncertainty=error_bars(r.scenario, r.model.is_moe)["cost"])


def evaluate(scenario: Scenario | Mapping[str, Any] | str | Path | Resolved, *, allow_hub: bool = True,
             memory_estimate: MemoryEstimate | None = None, quote: Any = None) -> Estimate:
    """Memory, performance and cost of one plan (DESIGN §3.2): the only whole-plan evaluation."""
    r = resolve(scenario, allow_hub=allow_hub)
    mem = memory_estimate if memory_estimate is not None else memory(r)
    perf = performance(r, mem)
    return Estimate(r.scenario, r.model, r.gpu, mem, perf, cost(r, perf, quote=quote), r.warnings, r.profile_path)


__all__ = ["Resolved", "Estimate", "as_scenario", "resolve", "resolve_network", "software_warnings", "memory",
           "stored_weights_default", "load_not_simulated_note",
           "performance", "serving_curve", "serving_load", "cost", "evaluate", "error_bars"]
