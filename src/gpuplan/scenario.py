"""The scenario schema (DESIGN §3.1): what the user wants to run, on what, and how.

Scenarios come from YAML/JSON files, dicts or CLI flags. Validation errors name the field, the
reason and the fix; they never surface as a pydantic traceback.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import InputError

Task = Literal["train", "finetune", "infer"]
Precision = Literal["bf16", "fp16", "fp32", "fp8"]
Optimizer = Literal["adamw", "adamw-8bit", "sgd", "adafactor", "lion"]
Recompute = Literal["none", "selective", "full"]
Attention = Literal["flash", "sdpa", "eager"]
Offload = Literal["none", "optimizer", "optimizer+params"]
# torchtune / litgpt: their own model code (not HF modeling_*): GQA K/V expanded to all heads before
# attention, their own loss dtype handling; otherwise trained like `hf` (pure 16-bit or FSDP)
Framework = Literal["hf", "megatron", "torchtitan", "deepspeed", "torchtune", "litgpt"]
Engine = Literal["vllm", "sglang", "trtllm", "llama.cpp", "hf"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Hardware(_Strict):
    gpu: str = Field(description="catalog id or alias, e.g. h100-sxm, rtx-4090")
    count: int = Field(1, gt=0, description="total GPUs")
    gpus_per_node: int | None = Field(None, gt=0, description="GPUs per node; default from the GPU's node shape")
    network: str | None = Field(None, description="inter-node network id, e.g. ib-ndr-400")
    profile: str | None = Field(None, description="hardware profile JSON from `gpuplan calibrate` (measured "
                                "GEMM, bandwidth and NCCL rates replace datasheet x default efficiency)")


class Parallel(_Strict):
    dp: int | None = Field(None, gt=0, description="data-parallel size; default count/(tp*pp*cp)")
    tp: int = Field(1, gt=0)
    pp: int = Field(1, gt=0)
    cp: int = Field(1, gt=0)
    ep: int = Field(1, gt=0)
    vpp: int = Field(1, gt=0, description="virtual pipeline chunks per rank (interleaved 1F1B)")
    sp: bool = Field(True, description="sequence parallel with TP (Megatron-style)")
    zero: int = Field(0, ge=0, le=3, description="ZeRO stage; FSDP full-shard == 3, shard-grad-op == 2")
    offload: Offload = "none"


class Train(_Strict):
    method: Literal["full", "lora", "qlora"] = "full"
    precision: Precision = "bf16"
    master_weights: bool = True
    optimizer: Optimizer = "adamw"
    optimizer_impl: Literal["foreach", "fused"] = "foreach"
    seq_len: int = Field(2048, gt=0)
    micro_batch: int = Field(1, gt=0)
    global_batch: int | None = Field(None, gt=0, description="sequences per optimizer step")
    recompute: Recompute = "none"
    attention: Attention = "flash"
    lora_rank: int = Field(16, gt=0)
    lora_alpha: int | None = Field(None, gt=0)
    lora_targets: Union[Literal["all-linear"], list[str]] = "all-linear"
    lora_dropout: float = Field(0.0, ge=0, lt=1, description="dropout on the adapters' input (peft default 0)")
    qlora_double_quant: bool = True
    qlora_backend: Literal["bitsandbytes", "torchao"] = Field(
        "bitsandbytes", description="bitsandbytes' 4-bit matmul saves its input for backward; torchao's NF4 linear does not")
    tokens: float | None = Field(None, gt=0, description="total training tokens")
    # memory techniques of specific trainers (torchtune, litgpt, Liger, torch.compile)
    loss: Literal["full", "chunked", "fused-linear"] = Field(
        "full", description="cross-entropy: full logits, chunked (torchtune/litgpt), or fused linear+CE (Liger)")
    loss_chunks: int = Field(8, gt=0, description="chunks of the chunked loss (torchtune default 8)")
    compile: bool = Field(False, description="torch.compile fuses norms and activations (fewer saved tensors)")
    optimizer_in_backward: bool = Field(False, description="step each parameter during backward (torchtune)")
    paged_optimizer: bool = Field(False, description="bitsandbytes paged optimizer: states in managed memory")
    activation_offload: bool = Field(False, description="saved activations moved to host memory")
    full_state_dict: bool = Field(False, description="FSDP loads/saves a full 16-bit state dict on each GPU")


class Infer(_Strict):
    weights: str = "bf16"
    kv_cache: str = "bf16"
    engine: Engine = "vllm"
    prompt_len: int = Field(1024, gt=0)
    output_len: int = Field(256, gt=0)
    concurrency: int = Field(1, gt=0)
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    max_model_len: int | None = Field(None, gt=0)
    cuda_graphs: bool = True
    gpu_layers: int | None = Field(None, ge=0, description="llama.cpp -ngl: layers offloaded to the GPU")
    max_num_seqs: int | None = Field(None, gt=0, description="engine's running-request cap; default: concurrency, "
                                     "as gpuplan's launch files set it")
    max_num_batched_tokens: int | None = Field(None, gt=0, description="engine's tokens per step; default: the "
                                               "engine's own (vLLM: 8192 on >= 70 GiB GPUs other than A100, else 2048)")


class Cost(_Strict):
    providers: list[str] | None = None
    spot: bool = False
    usd_per_gpu_hour: float | None = Field(None, gt=0, description="your own price, overrides the catalog")
    electricity_usd_per_kwh: float = Field(0.15, ge=0)
    pue: float = Field(1.3, ge=1)
    utilization: float = Field(0.8, gt=0, le=1)
    years: float = Field(3.0, gt=0)
    residual_fraction: float = Field(0.3, ge=0, le=1)
    capex_usd_per_gpu: float | None = Field(None, gt=0)
    server_overhead_fraction: float = Field(0.25, ge=0, description="chassis/CPU/network as a share of GPU capex")
    basis: Literal["auto", "rent", "own"] = Field("auto", description="headline cost: rent, own, or rent when a price is known")


class Constraints(_Strict):
    """Limits for `gpuplan recommend` (ignored by estimate)."""
    budget_usd: float | None = Field(None, gt=0, description="total budget for the run")
    budget_usd_per_hour: float | None = Field(None, gt=0)
    deadline_days: float | None = Field(None, gt=0)
    max_gpus: int | None = Field(None, gt=0)
    owned: dict[str, int] | None = Field(None, description="GPUs you own: {gpu id: count}")
    providers: list[str] | None = None
    ttft_s: float | None = Field(None, gt=0)
    tpot_s: float | None = Field(None, gt=0)
    requests_per_s: float | None = Field(None, gt=0)
    tokens_per_s: float | None = Field(None, gt=0, description="serving: output tokens/s to sustain")
    min_headroom: float | None = Field(None, ge=0, lt=1, description="share of GPU memory to leave free")


class Scenario(_Strict):
    model: Union[str, dict[str, Any]]
    task: Task = "train"
    hardware: Hardware
    parallel: Parallel = Parallel()
    train: Train | None = None
    infer: Infer | None = None
    framework: Framework = "hf"
    cost: Cost = Cost()
    constraints: Constraints | None = None
    objective: Union[str, dict[str, float], None] = None
    preset: str | None = None
    overhead_bytes: int | None = Field(None, ge=0, description="override the runtime overhead per GPU")

    @field_validator("model")
    @classmethod
    def _model_not_empty(cls, v):
        if isinstance(v, str) and not v.strip():
            raise ValueError("must name a model (registry name, HF repo id, or path to config.json)")
        return v

    @model_validator(mode="after")
    def _defaults_and_layout(self):
        train, infer = self.train, self.infer
        if self.task in ("train", "finetune") and train is None:
            object.__setattr__(self, "train", Train())
        if self.task == "infer" and infer is None:
            object.__setattr__(self, "infer", Infer())
        p, n = self.parallel, self.hardware.count
        model_par = p.tp * p.pp * p.cp
        if n % model_par:
            raise ValueError(f"parallel.tp*pp*cp = {model_par} does not divide hardware.count = {n}")
        dp = p.dp if p.dp is not None else n // model_par
        if dp * model_par != n:
            raise ValueError(f"parallel.dp*tp*pp*cp = {dp * model_par} must equal hardware.count = {n}")
        if p.dp is None:
            object.__setattr__(self, "parallel", p.model_copy(update={"dp": dp}))
        # training (Megatron) places experts across the data(-and-context)-parallel ranks; serving
        # engines place them across the tensor-parallel ranks (vLLM --enable-expert-parallel) or the
        # attention-data-parallel ranks (TensorRT-LLM/SGLang DEP)
        ep_group = dp * p.cp if self.task != "infer" else dp * p.tp
        if p.ep > 1 and ep_group % p.ep:
            what = "dp*cp" if self.task != "infer" else "dp*tp"
            raise ValueError(f"parallel.ep = {p.ep} must divide {what} = {ep_group}")
        return self

    @property
    def dp(self) -> int:
        return self.parallel.dp  # type: ignore[return-value]

    @property
    def is_training(self) -> bool:
        return self.task in ("train", "finetune")

    def replace(self, **updates: Any) -> "Scenario":
        """A new, re-validated scenario with nested updates: replace(parallel={'tp': 2})."""
        data = self.model_dump()
        for key, value in updates.items():
            if isinstance(value, dict) and isinstance(data.get(key), dict):
                data[key] = {**data[key], **value}
            else:
                data[key] = value
        if "hardware" in updates and "parallel" in updates and "dp" not in (updates["parallel"] or {}):
            data["parallel"]["dp"] = None
        elif "hardware" in updates and "count" in updates["hardware"] and "parallel" not in updates:
            data["parallel"]["dp"] = None
        return scenario_from_dict(data)


def _explain(err: ValidationError, source: str) -> InputError:
    lines = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"] if not str(x).startswith("function-after")) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "is not a scenario field (check the spelling; DESIGN §3.1 lists the fields)"
        elif e["type"] == "missing":
            msg = "is required"
        given = e.get("input")
        shown = "" if e["type"] in ("missing",) or isinstance(given, dict) else f" (got {given!r})"
        lines.append(f"'{loc}' {msg}{shown}")
    return InputError(f"scenario {source}", "; ".join(lines) + ".",
                      "correct the field(s) named above; `gpuplan schema` lists every field.")


def scenario_from_dict(data: dict[str, Any], source: str = "(dict)") -> Scenario:
    if not isinstance(data, dict):
        raise InputError(f"scenario {source}", f"must be a mapping of fields, got {type(data).__name__}.",
                         "write `model:`, `task:` and `hardware:` at the top level.")
    try:
        return Scenario.model_validate(data)
    except ValidationError as err:
        raise _explain(err, source) from None


def load_scenario(path: str | Path) -> Scenario:
    """Read a YAML or JSON scenario file."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"scenario file '{path}'", "does not exist.", "check the path.")
    if p.is_dir():
        raise InputError(f"scenario file '{path}'", "is a directory.", "pass a .yaml or .json file.")
    text = p.read_text(encoding="utf-8", errors="replace")
    try:
        if p.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            import yaml
            data = yaml.safe_load(text)
    except json.JSONDecodeError as err:
        raise InputError(f"scenario file '{path}'", f"is not valid JSON (line {err.lineno}, column {err.colno}: {err.msg}).",
                         "fix the syntax; a JSON linter shows the exact spot.") from None
    except Exception as err:  # yaml.YAMLError
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise InputError(f"scenario file '{path}'", f"is not valid YAML{where}: {getattr(err, 'problem', err)}.",
                         "fix the syntax (indentation, colons, quotes).") from None
    if data is None:
        raise InputError(f"scenario file '{path}'", "is empty.", "write at least `model:` and `hardware: {gpu: ...}`.")
    return scenario_from_dict(data, f"file '{path}'")
