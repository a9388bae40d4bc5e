"""The scenario schema (DESIGN §3.1): what the user wants to run, on what, and how.

Scenarios come from YAML/JSON files, dicts or CLI flags. Validation errors name the field, the
reason, the allowed range and the fix; they never surface as a pydantic traceback. Every number is
finite and inside a range no real run reaches (the bounds below), so absurd input is refused here
instead of overflowing an estimator. `PartialScenario` is the search's input: the same fields and
checks, with hardware and layout optional and the searched options allowed as lists.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Optional, Union, get_args

from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, PrivateAttr, Tag,
                      ValidationError, ValidationInfo, create_model, field_validator, model_validator)

from .errors import CatalogHint, InputError
from .inputs import excerpt, read_mapping_file, short_path
from .versions import FULL_PATTERN, PATTERN_OR_UNKNOWN, VersionError, known_version, parse_version

# Upper bounds: far above any real run, low enough that no estimator overflows.
MAX_GPUS = 100_000                 # GPUs in one plan (the largest published clusters: ~100k)
MAX_RL_RESPONSES = 1 << 18         # RL responses per step (prompts x group) the rollout simulation takes (~2 s of CPU)
MAX_TOKENS_LEN = 10_485_760        # tokens in one sequence (10 Mi; the longest published contexts: 10M)
MAX_BATCH = 1 << 24                # sequences per step or concurrent requests
MAX_TRAIN_TOKENS = 1e16            # total training tokens (Llama 3: 1.5e13)
MAX_USD = 1e12                     # any budget or price total
MAX_DAYS = 36_500.0                # 100 years
MAX_LIST = 64                      # entries in one list of a partial scenario

Task = Literal["train", "finetune", "infer"]
Precision = Literal["bf16", "fp16", "fp32", "fp8"]
# estimate/optim.py: states, temporaries and step cost of each (docs/optimizers.md)
Optimizer = Literal["adamw", "adamw-8bit", "sgd", "adafactor", "lion", "muon", "galore", "soap", "paged-adamw",
                    "paged-adamw-8bit"]
Recompute = Literal["none", "selective", "full"]
Attention = Literal["flash", "sdpa", "eager"]
Offload = Literal["none", "optimizer", "optimizer+params"]
# torchtune / litgpt: their own model code (not HF modeling_*): GQA K/V expanded to all heads before
# attention, their own loss dtype handling; otherwise trained like `hf` (pure 16-bit or FSDP)
Framework = Literal["hf", "megatron", "torchtitan", "deepspeed", "torchtune", "litgpt"]
Engine = Literal["vllm", "sglang", "trtllm", "llama.cpp", "hf"]
GptqKernel = Literal["exllama", "exllamav2", "cuda-old"]
# fine-tuning tools that drive the HF stack with their own defaults and kernels (docs/finetune-tools.md)
Tool = Literal["unsloth", "trl", "axolotl", "llama-factory"]
# what each tool does when the user does not say otherwise, from its code at a pinned commit:
# * unsloth (unslothai/unsloth): FastLanguageModel.from_pretrained(load_in_4bit=True) loads the bitsandbytes NF4
#   base; get_peft_model(r=16, all seven projections, use_gradient_checkpointing="unsloth") checkpoints every layer
#   and moves the checkpoints to host memory; its loss is Apple's Cut Cross-Entropy (no full logits).
# * trl: every TRL config subclasses _BaseConfig, which turns gradient_checkpointing on
#   (trl/trainer/base_config.py at v1.9.0, 35def3ee; use_liger_kernel stays False, packing and padding_free False).
# * llama-factory: ModelArguments.disable_gradient_checkpointing = False, i.e. checkpointing on
#   (src/llamafactory/hparams/model_args.py @cc22c04; use_unsloth_gc and enable_liger_kernel False).
# * axolotl: gradient_checkpointing defaults to False (src/axolotl/utils/schemas/config.py); nothing changes.
TOOL_DEFAULTS: dict[str, dict[str, Any]] = {
    "unsloth": {"method": "qlora", "lora_rank": 16, "recompute": "full", "activation_offload": True, "loss": "cce"},
    "trl": {"recompute": "full"},
    "llama-factory": {"recompute": "full"},
    "axolotl": {},
}


def _number_only(annotation: Any) -> bool:
    """A field that takes numbers and no boolean (int, float, Optional[int], ...)."""
    kinds: set[Any] = set()

    def walk(tp: Any) -> None:
        args = get_args(tp)
        if args and getattr(tp, "__origin__", None) is not Literal:
            for a in args:
                walk(a)
        else:
            kinds.add(tp)
    walk(annotation)
    return bool(kinds & {int, float}) and not (kinds - {int, float, type(None)})


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        # pydantic's lax mode reads true as 1 and false as 0 for a number: `count: yes` in YAML became one GPU
        if isinstance(value, bool):
            field = cls.model_fields.get(info.field_name or "")
            if field is not None and _number_only(field.annotation):
                raise ValueError(f"is a number, not {str(value).lower()} (YAML reads yes/no/on/off/true/false as a "
                                 "boolean); write the number")
        return value


def _fmt(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e9 else f"{x:g}"


def _range(lo: float | None, hi: float | None, *, open_lo: bool = False, open_hi: bool = False,
           unit: str = "") -> dict[str, Any]:
    """Field keywords for a bounded number, with the range recorded for error messages."""
    kw: dict[str, Any] = {}
    if lo is not None:
        kw["gt" if open_lo else "ge"] = lo
    if hi is not None:
        kw["lt" if open_hi else "le"] = hi
    low = "" if lo is None else f"{_fmt(lo)} {'<' if open_lo else '<='} "
    high = "" if hi is None else f" {'<' if open_hi else '<='} {_fmt(hi)}"
    text = f"{low}value{high}"
    kw["json_schema_extra"] = {"range": text + (f" {unit}" if unit else "")}
    return kw


def _num(default: Any, description: str = "", **bounds: Any) -> Any:
    kw = _range(**bounds)
    text = kw["json_schema_extra"]["range"]
    return Field(default, description=f"{description} ({text})" if description else f"({text})", **kw)


def _catalog_id(field: str, lookup: Callable[[str], Any]) -> Callable[[str | None], str | None]:
    """Validator of a catalog name: its canonical id, or the catalog's error (close matches) naming `field`."""
    def check(v: str | None) -> str | None:
        if v is None:
            return None
        from .errors import UnknownNameError
        try:
            return lookup(v).id
        except UnknownNameError as err:
            raise err.about(f"{field} {excerpt(v)}") from None
    return check


def _get_network(v: str) -> Any:
    from .hardware import get_network
    return get_network(v)


def _get_host_cpu(v: str) -> Any:
    from .hardware.hosts import get_host_cpu
    return get_host_cpu(v)


def _not_blank(v: Any) -> Any:
    if isinstance(v, str) and not v.strip():
        raise ValueError("must name a model (registry name, HF repo id, or path to config.json)")
    return v


def _checked_version(example: str, full: bool = False) -> BeforeValidator:
    """A version field's check, run before its pattern (the same grammar, versions.py) so that a bad value's line
    names the value, the form and an example instead of quoting the regular expression."""
    def check(v: Any) -> Any:
        if isinstance(v, str):
            try:
                parse_version(v, example=example, full=True) if full else known_version(v, example=example)
            except VersionError as err:
                raise ValueError(err.inline) from None
        return v
    return BeforeValidator(check)


Name = Annotated[str, Field(min_length=1, max_length=128)]
Network = Annotated[str, Field(max_length=64), AfterValidator(_catalog_id("hardware.network", _get_network))]
HostCpuName = Annotated[str, Field(max_length=64), AfterValidator(_catalog_id("hardware.host_cpu", _get_host_cpu))]
PathText = Annotated[str, Field(max_length=4096)]
Format = Annotated[str, Field(min_length=1, max_length=64)]
ModelRef = Annotated[Union[Annotated[str, Field(max_length=4096)], dict[str, Any]], AfterValidator(_not_blank)]
TorchVersion = Annotated[str, Field(pattern=PATTERN_OR_UNKNOWN), _checked_version("2.11.0+cu130")]
TransformersVersion = Annotated[str, Field(pattern=PATTERN_OR_UNKNOWN), _checked_version("4.46.3")]
VllmRelease = Annotated[str, Field(pattern=FULL_PATTERN), _checked_version("0.6.3", full=True)]


class Hardware(_Strict):
    gpu: Name = Field(description="catalog id or alias, e.g. h100-sxm, rtx-4090")
    count: int = _num(1, "total GPUs", lo=1, hi=MAX_GPUS, unit="GPUs")
    gpus_per_node: int | None = _num(None, "GPUs per node; default from the GPU's node shape", lo=1, hi=MAX_GPUS)
    network: Optional[Network] = Field(None, description="inter-node network id, e.g. ib-ndr-400 (networks.csv)")
    profile: Optional[PathText] = Field(None, description="hardware profile JSON from `gpuplan calibrate` (measured "
                                        "GEMM, bandwidth and NCCL rates replace datasheet x default efficiency)")
    host_cpu: Optional[HostCpuName] = Field(None, description="host CPU id (hardware/data/host_cpus.csv, docs/data.md): how fast "
                                            "an eager loop (HF transformers) issues kernels; default: the usual host of "
                                            "the GPU's segment (desktop for GeForce, server for data-centre cards)")
    host_single_thread_score: float | None = _num(None, "your host CPU's PassMark single-thread rating, for a CPU "
                                                  "not in host_cpus.csv (overrides host_cpu)", lo=100, hi=20_000)


class Parallel(_Strict):
    dp: int | None = _num(None, "data-parallel size; default count/(tp*pp*cp)", lo=1, hi=MAX_GPUS)
    tp: int = _num(1, "tensor-parallel size", lo=1, hi=MAX_GPUS)
    pp: int = _num(1, "pipeline stages", lo=1, hi=MAX_GPUS)
    cp: int = _num(1, "context-parallel size (training only)", lo=1, hi=MAX_GPUS)
    ep: int = _num(1, "expert-parallel size (mixture-of-experts models only)", lo=1, hi=MAX_GPUS)
    etp: int | None = _num(None, "expert tensor-parallel size (Megatron --expert-tensor-parallel-size; training): "
                           "the routed experts' own grid, ep x etp x expert-dp = tp x cp x dp per pipeline stage "
                           "(MoE parallel folding: ep may span tp ranks); default 1 with ep > 1 (the Megatron-Bridge "
                           "and NeMo RL MoE recipes), tp without", lo=1, hi=MAX_GPUS)
    vpp: int = _num(1, "virtual pipeline chunks per rank (interleaved 1F1B)", lo=1, hi=1024)
    sp: bool = Field(True, description="sequence parallel with TP (Megatron-style)")
    tp_comm_overlap: bool = Field(False, description="Megatron/Transformer Engine --tp-comm-overlap (userbuffers): "
                                  "with sequence parallel, TP all-gathers and reduce-scatters are split into tp "
                                  "chunks pipelined with the GEMMs (NeMo/Megatron-Bridge recipes turn it on)")
    ep_comm_overlap: bool = Field(False, description="Megatron --overlap-moe-expert-parallel-comm (Megatron-Bridge "
                                  "moe_a2a_overlap; training, ep > 1): the expert-parallel dispatch/combine of one "
                                  "micro-batch runs while another micro-batch computes (merged 1F1B forward/backward)")
    cp_comm_type: Literal["p2p", "all_gather", "a2a", "a2a+p2p"] = Field(
        "p2p", description="how context-parallel attention exchanges K/V (training, cp > 1; Megatron "
        "--cp-comm-type, Transformer Engine's default p2p: the KV ring of AttnFuncWithCPAndKVP2P, whose copies and "
        "output corrections are priced for Megatron stacks; all_gather: K/V all-gathered before attention, as Meta's "
        "Llama 3 CP, not counted)")
    ep_dispatcher: Literal["alltoall", "deepep", "hybridep"] = Field(
        "alltoall", description="expert-parallel token dispatcher (training, ep > 1): Megatron's all-to-all "
        "dispatcher sends one row per (token, expert) pair; the flex dispatcher over DeepEP or HybridEP "
        "(--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep|hybridep) sends a token once per "
        "destination GPU and once per destination node")
    ep_dispatcher_sms: int | None = _num(None, "streaming multiprocessors the flex dispatcher's kernels hold while "
                                         "they run (training, ep_dispatcher deepep or hybridep; Megatron "
                                         "--moe-deepep-num-sms / --moe-hybridep-num-sms); default Megatron's: 20 for "
                                         "DeepEP, 16 for HybridEP. Under ep_comm_overlap the compute beside the "
                                         "exchange runs on the other SMs", lo=1, hi=1024)
    zero: int = _num(0, "ZeRO stage; FSDP full-shard == 3, shard-grad-op == 2", lo=0, hi=3)
    # ---- hybrid sharding (HSDP / MiCS) ----
    shard_group: int | None = _num(None, "data-parallel ranks one ZeRO-3/FSDP shard group spans (training, zero 3): "
                                   "weights, gradients and optimizer states are sharded within the group and the "
                                   "dp/shard_group groups are replicas whose gradient shards are all-reduced "
                                   "(FSDP2 HSDP: torchtitan data_parallel_shard_degree, replicate degree = "
                                   "dp/shard_group; FSDP1/accelerate HYBRID_SHARD; DeepSpeed MiCS "
                                   "mics_shard_size = shard_group x cp); must divide dp; default dp (every "
                                   "data-parallel rank)", lo=1, hi=MAX_GPUS)
    fsdp_version: Literal[1, 2] | None = Field(
        None, description="which PyTorch FSDP shards the model under zero 3 (training; frameworks torchtitan and hf): "
        "2 = fully_shard (FSDP2, per-parameter shards: each all-gather is copied out of its buffer into the parameters "
        "and each micro-batch's gradients are copied, cast to the reduce dtype, into the reduce-scatter buffer, both "
        "on the compute stream; torchtitan, NeMo RL's DTensor worker, accelerate fsdp_version 2, verl strategy "
        "fsdp2; the accelerate config gpuplan's hf launch writes); 1 = FullyShardedDataParallel (flat parameters "
        "gathered in place: no such copies; accelerate's own default, verl strategy fsdp); default 2")
    offload: Offload = "none"

    @property
    def zero_shard_dp(self) -> int:
        """Data-parallel ranks of one ZeRO/FSDP shard group: shard_group, else every data-parallel rank."""
        return self.shard_group if self.shard_group is not None else (self.dp or 1)

    @property
    def replicas(self) -> int:
        """Hybrid sharding's replica groups: dp / shard_group (1 without hybrid sharding)."""
        return max(1, (self.dp or 1) // self.zero_shard_dp)

    @property
    def expert_tp(self) -> int:
        """Ranks one routed expert's matrices are split over: etp, else 1 under expert parallelism (each rank holds
        whole experts) and tp without it (the experts split like the dense MLP)."""
        if self.etp is not None:
            return self.etp
        return 1 if self.ep > 1 else self.tp

    @property
    def expert_dp(self) -> int:
        """Megatron's expert-data-parallel size: the ranks of a pipeline stage holding the same expert shard,
        tp x cp x dp / (ep x etp) (megatron/core/parallel_state.py initialize_model_parallel)."""
        return max(1, self.tp * self.cp * (self.dp or 1) // (self.ep * self.expert_tp))


LoraTargets = Annotated[Union[Annotated[Literal["all-linear"], Tag("_all")],
                            Annotated[Annotated[list[Name], Field(max_length=MAX_LIST)], Tag("_list")]],
                      Discriminator(lambda v: "_list" if isinstance(v, (list, tuple)) else "_all"),
                      Field(description="all-linear, or a list of module names (q_proj, v_proj, ...)")]
_LONGER = Field(False, description="allow a sequence longer than the model's context (max_position_embeddings): "
                "you extend it with RoPE scaling (e.g. YaRN); memory and speed are estimated at that length")


# ---- post-training (issue 20; the mechanism lives in estimate/posttrain.py and estimate/rl.py) ----------
TrainObjective = Literal["sft", "dpo", "ipo", "kto", "orpo", "simpo", "distill", "reward", "grpo", "ppo", "rloo"]
RL_OBJECTIVES = ("grpo", "ppo", "rloo")
REFERENCE_OBJECTIVES = ("dpo", "ipo", "kto")       # a frozen reference model's log-probs are in the loss
PAIR_OBJECTIVES = ("dpo", "ipo", "orpo", "simpo")  # a chosen and a rejected sequence per example, both through the LM


class RL(_Strict):
    """One RL step (GRPO/PPO/RLOO): rollouts by a serving engine, log-prob passes, reward, training."""
    prompts_per_step: int = _num(64, "prompts per RL step", lo=1, hi=MAX_BATCH)
    group_size: int = _num(8, "responses sampled per prompt (TRL num_generations default 8)", lo=1, hi=4096)
    prompt_len: int = _num(512, "prompt tokens", lo=1, hi=MAX_TOKENS_LEN, unit="tokens")
    max_new_tokens: int = _num(1024, "longest response", lo=1, hi=MAX_TOKENS_LEN, unit="tokens")
    mean_response_len: int | None = _num(None, "mean response length; default max_new_tokens (every response "
                                         "runs to the limit)", lo=1, hi=MAX_TOKENS_LEN, unit="tokens")
    truncation_rate: float | None = _num(None, "share of the step's responses stopped at max_new_tokens (NeMo RL "
                                         "logs it as truncation_rate); null: only the max-entropy lengths' own "
                                         "(none reach the cap)", lo=0, hi=1)
    engine: Literal["vllm", "sglang"] = "vllm"
    placement: Literal["colocated", "split"] = Field("colocated", description=(
        "colocated: rollout engine and trainer share every GPU, the engine sleeps while training; split: "
        "rollout_gpus generate, the rest train"))
    rollout_gpus: int | None = _num(None, "split: GPUs of the rollout engine", lo=1, hi=MAX_GPUS)
    rollout_tp: int = _num(1, "tensor-parallel size of one rollout engine", lo=1, hi=MAX_GPUS)
    gpu_memory_utilization: float = _num(0.5, "share of each rollout GPU the engine takes (verl default 0.5; "
                                         "TRL colocate 0.3)", lo=0, hi=1, open_lo=True)
    reference: bool = Field(True, description="a frozen reference model for the KL term (TRL GRPO: beta > 0)")
    critic: bool | None = Field(None, description="a value model trained beside the actor; default on for ppo")
    reward_model: Optional[Name] = Field(None, description="model id of a reward model; none: rule-based reward")
    rule_reward_s: float | None = _num(None, "rule-based reward (no reward_model): host seconds to score one "
                                       "response (e.g. math-verify's parse and verify), run by rule_reward_workers "
                                       "processes after the rollout, inside NeMo RL's generation timer; none: not "
                                       "priced (no published rate)", lo=0, hi=3600, unit="s")
    rule_reward_workers: int = _num(8, "processes scoring the responses of a rule-based reward in parallel (NeMo RL "
                                    "env.math.num_workers, 8 in grpo_math_1B.yaml)", lo=1, hi=MAX_GPUS)
    old_logprob_pass: bool = Field(True, description="a forward of the actor for the old log-probs (verl always; "
                                   "TRL only with num_iterations > 1)")
    async_steps: int = _num(0, "split: rollouts run k steps ahead of training (off-policy by k); 0 synchronous",
                            lo=0, hi=64)
    offload_train_states: bool = Field(False, description="colocated: the trainer's weights and optimizer states "
                                       "go to host memory during rollout (verl param/optimizer offload)")
    offload_pageable: Literal["none", "optimizer_states", "all"] = Field("none", description=(
        "with offload_train_states: which of the trainer's states are copied into freshly allocated pageable host "
        "memory (torch .to('cpu')), a copy far below the host link's rate, rather than into pinned memory: none "
        "(pinned, at the host link's rate); optimizer_states (NeMo RL's Megatron worker: the optimizer states per "
        "tensor with .to('cpu'), the parameters into Megatron's pinned buffer); all (NeMo RL's DTensor worker: "
        "model.to('cpu') as well)"))
    mini_batch: int | None = _num(None, "sequences per optimizer step of the training pass (NeMo RL "
                                  "train_global_batch_size; verl ppo_mini_batch_size x n); default: all the step's "
                                  "sequences in one optimizer step", lo=1, hi=MAX_BATCH)
    engine_sleep_level: Literal[1, 2] = Field(2, description=(
        "colocated: how the rollout engine sleeps while the trainer runs: 2 discards its weights and KV cache (TRL "
        "llm.sleep(level=2)); 1 backs its weights up to pinned host memory and copies them back on wake-up "
        "(vLLM CuMemAllocator; NeMo RL's vLLM worker sleeps at level 1): one copy of the engine's weight shard "
        "each way per step"))
    reference_on_host: bool = Field(False, description=(
        "the reference weights live in host memory and are swapped into the policy's parameters for the "
        "reference log-prob pass (NeMo RL Megatron/DTensor workers, use_reference_model)"))
    engine_async_scheduling: bool | None = Field(None, description=(
        "the rollout engine schedules its next step while the GPU runs this one (vLLM's async scheduling, on by "
        "default from 0.14.0); false for older engines, whose per-sequence host work adds to every decode step; "
        "default: the engine's current default (infer.async_scheduling)"))
    engine_cuda_graphs: bool = Field(True, description=(
        "the rollout engine replays CUDA graphs for its decode steps (infer.cuda_graphs); false: it runs eagerly "
        "(verl's rollout.enforce_eager, which verl requires whenever free_cache_engine frees the engine between "
        "steps), and every decode step issues its kernels from the host"))
    engine_vllm_v0: bool = Field(False, description=(
        "engine vllm: the rollout engine is vLLM's V0 LLMEngine (any release before 0.8, e.g. the vLLM 0.6.3 of "
        "verl's 2025 ROCm image), priced as infer.vllm_v0 with its own per-step host work "
        "(engine_host.vllm_v0_host); verl passes rollout.n as SamplingParams.n, so a prompt's group of samples is one "
        "V0 sequence group (infer.parallel_samples = group_size)"))
    engine_release: VllmRelease | None = Field(None, description=(
        "engine vllm: the vLLM release the rollout engine runs, which sets how it turns gpu_memory_utilization into "
        "its KV pool beside the trainer (docs/posttrain.md, 'How vLLM sizes its KV cache beside a trainer'): V1 "
        "0.7.0-0.9.0 subtracts everything on the GPU at its profile run (the trainer's resident weights, the CUDA "
        "context) from utilization x total; verl's own V0 wrappers (engine_vllm_v0, releases up to 0.6.3) take "
        "utilization x the memory still free after the profile run; V0 from 0.6.4 and V1 from 0.9.1 subtract only "
        "the engine's own use, and V1 from 0.9.1 refuses to start when less than utilization x total is free. "
        "Default: the current release's rule (its own use), without the start-up check"))
    engine_started: Literal["after_trainer", "before_trainer"] = Field("after_trainer", description=(
        "colocated, with engine_release: when the rollout engine profiles its memory: after the trainer has built "
        "its models (verl builds the rollout last, 'so that vllm can have a better estimation of kv cache memory', "
        "ray_trainer.py @44a65f9 L654-656), or on a GPU the trainer has not touched yet (NeMo RL builds vLLM before "
        "the policy, grpo.py @v0.3.0 L301-329)"))
    engine_python: Literal["3.9", "3.11"] | None = Field(None, description=(
        "with engine_vllm_v0: the CPython the rollout engine runs on (infer.python_version), e.g. 3.9 in verl's 2025 "
        "ROCm image; default 3.11, the reference timing of V0's host work"))
    engine_in_process: bool = Field(False, description=(
        "engine vllm: the rollout engine's core runs in the worker's own process (vLLM V1 LLM with "
        "VLLM_ENABLE_V1_MULTIPROCESSING=0, as NeMo RL's synchronous vLLM worker sets it), so the output processing "
        "of each step (detokenisation, log-probs, request outputs) runs after the step instead of beside it in a "
        "second process; not for an AsyncLLM engine (NeMo RL async_engine), whose core always runs in its own "
        "process"))
    logprob_micro_batch: int | None = _num(None, "sequences per micro-batch of the no-grad log-prob passes (NeMo RL "
                                           "logprob_batch_size; verl log_prob_micro_batch_size_per_gpu); with packing, "
                                           "a pack holds that many padded sequences' tokens; default train.micro_batch",
                                           lo=1, hi=MAX_BATCH)
    logprob_impl: Literal["fused", "nemo-rl-0.3", "nemo-rl-0.4", "nemo-rl-dtensor-0.3"] = Field("fused", description=(
        "how the trainer turns logits into token log-probs (HBM traffic per logit, estimate/rl.py LOGPROB_BYTES): "
        "'fused' = gpuplan's calibrated cross-entropy (12 bytes per logit, forward and backward); 'nemo-rl-0.3' / "
        "'nemo-rl-0.4' = NeMo RL's Megatron worker, its fp32 DistributedLogprob over the GPU's vocabulary shard "
        "(v0.3.0 and v0.4 code: 120 / 72 bytes per logit in the training pass, 58 / 50 in a no-grad pass); "
        "'nemo-rl-dtensor-0.3' = NeMo RL v0.3.0's DTensor (FSDP2) worker at tensor parallel 1: FSDP2's fp32 copy of "
        "the HF logits and a plain log_softmax (48 / 14)"))
    host_loop: Literal["none", "nemo-rl-0.3", "nemo-rl-0.4"] = Field("none", description=(
        "the RL framework's own host-side Python around the training and log-prob passes, timed in its code "
        "(estimate/nemo_rl_host.py): 'nemo-rl-0.3' / 'nemo-rl-0.4' = NeMo RL v0.3.0 / the v0.4 table's code (06beed91) "
        "with sequence packing: its driver's "
        "shard_by_batch_size / from_batches / reorder_data per pass (GPUs idle), and with the Megatron worker "
        "(framework megatron) the per-micro-batch copies, packing, per-sequence loss wrapper and log-prob collection "
        "between host synchronisations; 'none' = not priced"))
    packing: bool = Field(False, description=(
        "the log-prob and training passes pack the generated sequences into micro-batches of micro_batch x "
        "(prompt_len + max_new_tokens) tokens instead of padding each (NeMo RL sequence_packing, on by default; "
        "verl use_remove_padding / use_dynamic_bsz): the response-length distribution packed as NeMo RL packs it "
        "(modified first-fit-decreasing bins dealt over the data-parallel ranks; the slowest rank sets the pace)"))
    dynamic_batching: bool = Field(False, description=(
        "instead of packing: each optimizer step's sequences sorted by length and dealt over the data-parallel "
        "ranks, micro-batches filled to micro_batch x (prompt_len + max_new_tokens) tokens, each padded to its "
        "longest sequence rounded up to 64 (NeMo RL policy.dynamic_batching, sequence_length_round 64); "
        "exclusive of packing, as in NeMo RL"))

    @model_validator(mode="after")
    def _one_batching(self):
        if self.packing and self.dynamic_batching:
            raise ValueError("train.rl.packing and train.rl.dynamic_batching are exclusive (NeMo RL refuses both); "
                             "set one of them to false")
        n = self.prompts_per_step * self.group_size
        if n > MAX_RL_RESPONSES:
            # the rollout is simulated response by response (estimate/rl.py rollout_time): 6.4 M responses took
            # three minutes of CPU, so a step this large is refused instead of running unbounded
            raise ValueError(f"train.rl.prompts_per_step x group_size = {n:,} responses per step, more than the "
                             f"{MAX_RL_RESPONSES:,} gpuplan simulates (the published steps in validation/gathered/"
                             "posttrain.csv hold at most 8,192); estimate a share of the step (fewer prompts_per_step) "
                             "and scale the time by the number of shares")
        return self


class Train(_Strict):
    # set by estimate/posttrain.policy_scenario on the policy pass's train: its seq_len-token row already holds a
    # pair joined on the sequence axis (two seq_len/2 sides), whose padded packs (pack_tokens) lie side by side
    _joined_pair: bool = PrivateAttr(False)
    objective: TrainObjective = Field("sft", description=(
        "sft | dpo, ipo, kto, orpo, simpo (preference) | distill (needs teacher) | reward | grpo, ppo, rloo (RL)"))
    reference: Optional[Literal["copy", "base", "precomputed", "none"]] = Field(None, description=(
        "dpo/ipo/kto reference model: copy (a frozen second copy), base (LoRA: adapters disabled), precomputed "
        "(log-probs computed before training); default base under LoRA/QLoRA, copy otherwise"))
    teacher: Optional[Annotated[str, Field(min_length=1, max_length=4096)]] = Field(
        None, description="distill: the teacher model (registry name or HF id)")
    rl: Optional[RL] = Field(None, description="RL step settings (grpo, ppo, rloo)")
    method: Literal["full", "lora", "qlora"] = "full"
    precision: Precision = "bf16"
    fp8_recipe: Literal["auto", "tensorwise", "rowwise", "rowwise_gw_hp", "delayed", "mxfp8"] = Field(
        "auto", description="precision fp8: how the linears are scaled to FP8 (docs/speed.md §2.8): tensorwise "
        "(torchao default, Transformer Engine current scaling), rowwise, rowwise_gw_hp (weight-gradient GEMM in "
        "bf16), delayed (Transformer Engine DelayedScaling), mxfp8 (Blackwell MX blocks); auto = tensorwise")
    master_weights: bool = True
    master_weight_remainders: bool = Field(False, description=(
        "framework megatron, bf16: the fp32 master weights are kept as the 16 bits the bf16 parameters lack (Megatron's "
        "precision-aware distributed optimizer with Transformer Engine >= 2.1, store_param_remainders, on by default "
        "there; NeMo RL's configs turn the optimizer on): 2 bytes per parameter instead of 4"))
    grad_reduce_dtype: Literal["auto", "fp32", "bf16", "fp16"] = Field(
        "auto", description="framework megatron: the dtype of the gradient buffer the backward accumulates into and "
        "data parallel reduces (Megatron DistributedDataParallelConfig.grad_reduce_in_fp32: fp32 = true, the "
        "model's 16-bit dtype = false, as NeMo RL's configs set it); auto = fp32 (Megatron-LM's "
        "--accumulate-allreduce-grads-in-fp32 with bf16)")
    activation_fusion: bool = Field(True, description=(
        "framework megatron: the gated MLP activation (SwiGLU) runs as Megatron's fused bias-SwiGLU kernel "
        "(TransformerConfig.bias_activation_fusion true: NeMo's Llama configs and NeMo RL's configs since 2025-10 set "
        "it); false = Megatron-Core's own default, the activation as separate torch ops (chunk, silu, multiply, and "
        "in the backward the products and the cat of the two halves' gradients), as NeMo RL 0.3 ran its Qwen models "
        "(docs/posttrain.md, *Megatron's own bf16 rate, published*)"))
    grad_accum_fusion: bool = Field(True, description=(
        "framework megatron: the weight-gradient GEMMs accumulate straight into the gradient buffer "
        "(TransformerConfig.gradient_accumulation_fusion true, Megatron-LM's default, NeMo/Megatron-Bridge's where "
        "APEX's fused_weight_gradient_mlp_cuda imports: the NGC containers); false = each weight's gradient is written "
        "to its own tensor and added to the buffer by the DDP hook (main_grad.add_), as NeMo RL 0.3/0.4 run it (their "
        "environments carry no APEX; docs/speed.md §2.19)"))
    moe_permute_fusion: bool = Field(True, description=(
        "framework megatron, MoE, all-to-all dispatcher: the token permutations run as Transformer Engine's fused "
        "kernels (TransformerConfig.moe_permute_fusion true, Megatron-Bridge's and NeMo's Qwen3 MoE providers); "
        "false = the torch ops (masked_select, index_select, split/cat, scatter_add_), as NeMo RL v0.4's "
        "grpo_math_1B.yaml sets it: more host calls a MoE layer (docs/speed.md §2.16)"))
    moe_router_dtype: Literal["model", "fp32", "fp64"] = Field("model", description=(
        "framework megatron, MoE: the dtype Megatron's router computes its gating GEMM, softmax/top-k and routing "
        "probabilities in (TransformerConfig.moe_router_dtype: None = the activations' dtype, 'fp32', 'fp64'; NeMo "
        "RL's GRPO configs set fp64, examples/configs/grpo_math_1B_megatron.yaml at v0.3.0 and grpo_math_1B.yaml at "
        "v0.4.0). Priced: the casts around the router GEMM and, with activation_fusion false, the experts' "
        "probability weighting in that dtype (docs/speed.md §2.16)"))
    optimizer: Optimizer = "adamw"
    optimizer_impl: Literal["foreach", "fused"] = "foreach"
    galore_rank: int = _num(128, "galore: rank of the projected gradient (transformers' default 128)", lo=1, hi=65_536)
    galore_update_gap: int = _num(200, "galore: steps between SVD refreshes of the projector (default 200)",
                                  lo=1, hi=1_000_000)
    seq_len: int = _num(2048, "tokens per sequence", lo=1, hi=MAX_TOKENS_LEN, unit="tokens")
    target_len: int | None = _num(None, "encoder-decoder models: target (decoder) tokens per sequence; seq_len is "
                                  "then the input (encoder) length; default: seq_len", lo=1, hi=MAX_TOKENS_LEN,
                                  unit="tokens")
    document_len: int | None = _num(
        None, "packed rows (padding-free / sample packing): mean tokens of the documents packed into each "
        "seq_len-token row, each attending only to itself (flash-attention varlen cu_seqlens, flex or Transformer "
        "Engine document masks); attention is priced per document, the linear layers on all the row's tokens; "
        "default none = attention spans the whole row (docs/speed.md §1)", lo=1, hi=MAX_TOKENS_LEN, unit="tokens")
    pack_tokens: int | None = _num(
        None, "packed rows padded to seq_len (with document_len): the documents' tokens in each seq_len-token row; "
        "the rest is padding that a stack covering the whole row with document boundaries attends as one more causal "
        "segment (OLMo-core doc_lens, open-instruct's packed DPO: docs/posttrain.md); default none = the documents "
        "fill the row. A description of the run: no generated launch file sets it", lo=1, hi=MAX_TOKENS_LEN,
        unit="tokens")
    pair_concat: Literal["batch", "sequence"] = Field("batch", description=(
        "dpo, ipo, orpo, simpo: how the chosen and rejected sequences of a pair go through the policy. batch (TRL's "
        "concatenated_forward: two seq_len-token rows); sequence (open-instruct's OLMo-core DPO with packing, "
        "concatenated_forward_olmo: one row of 2 x seq_len tokens, attention causal across both sides unless "
        "document_len separates the documents). The same tokens through the linear layers; attention spans "
        "2 x seq_len (docs/posttrain.md). A description of the run: no generated launch file sets it"))
    micro_batch: int = _num(1, "sequences per GPU per micro-step", lo=1, hi=MAX_BATCH)
    global_batch: int | None = _num(None, "sequences per optimizer step", lo=1, hi=MAX_BATCH)
    recompute: Recompute = Field("none", description=(
        "activation checkpointing: none; selective (torchtitan: per-op save list; Megatron and others: the "
        "attention core); full (each layer keeps only its input and is recomputed in backward)"))
    recompute_layers: int | None = _num(None, "with recompute: full, only the first N layers of each pipeline stage "
                                        "are recomputed (Megatron --recompute-method block --recompute-num-layers N; "
                                        "torchtitan's every-k-th-layer option is N = layers / k); default all",
                                        lo=0, hi=100_000)
    recompute_group: int = _num(1, "with recompute: full, layers per checkpoint (Megatron --recompute-method "
                                "uniform --recompute-num-layers N): a group keeps one input and is recomputed "
                                "whole", lo=1, hi=100_000)
    recompute_modules: Optional[list[Literal["core_attn", "layernorm", "moe_act"]]] = Field(None, description=(
        "with recompute: selective, framework megatron: the modules Megatron's selective recompute checkpoints "
        "(--recompute-modules; unset: core_attn, Megatron's default): core_attn (the attention core), layernorm (the "
        "norms that are modules of their own: the pre-MLP norm of MoE layers, MLA's input norm; Transformer Engine "
        "fuses the others into the next linear), moe_act (the routed experts' activation). Priced in speed; the "
        "memory engine still keeps the activations layernorm and moe_act discard"))
    moe_capacity_factor: float | None = _num(
        None, "MoE training, framework megatron: token-drop routing with each expert's input padded to its "
        "capacity, ceil(tokens x top-k / experts x factor) rows per source rank (Megatron "
        "--moe-expert-capacity-factor with --moe-pad-expert-input-to-capacity; Megatron-Bridge "
        "apply_moe_token_drop): every expert runs exactly that many rows, so no rank is busier than another, the "
        "split sizes are known to the host and FP8 needs no row padding when the capacity is aligned; default "
        "none = dropless routing (docs/speed.md §2.7)", lo=0, hi=1024, open_lo=True)
    attention: Attention = "flash"
    attention_kernel: Literal["auto", "fa2", "cudnn", "cudnn-sdpa", "fa3", "aotriton",
                              "aotriton-0.10b", "ck", "fa1-triton"] = Field(
        "auto", description="fused attention kernel timed for flash/sdpa attention: auto = the framework's own "
        "(Megatron/NeMo: cuDNN via Transformer Engine on Hopper+; PyTorch SDPA stacks: cuDNN (cudnn-sdpa, measured "
        "through torch) on Hopper and data-centre Blackwell from torch 2.11 (train.torch_version), else "
        "FlashAttention-2; on AMD "
        "Instinct SDPA runs AOTriton — aotriton-0.10b, whose MI300X backward is published, where train.torch_version "
        "bundles AOTriton 0.10b (2.8, 2.9 nightlies before 2025-08-29) — and ROCm Transformer Engine CK); fa3 when flash-attn 3 is installed; ck with "
        "ROCm flash-attn or TORCH_ROCM_FA_PREFER_CK=1; fa1-triton for MPT/llm-foundry attn_impl: triton "
        "(FlashAttention-1-generation Triton kernel, calibrated efficiency) (docs/speed.md)")
    torch_version: TorchVersion = Field(
        "2.13", description="the torch the run uses, for the attention "
        "kernel auto picks for PyTorch SDPA stacks: from 2.11 (bundled cuDNN > 9.15) SDPA runs cuDNN fused "
        "attention on Hopper and data-centre Blackwell, before that FlashAttention-2; unknown: FlashAttention-2 "
        "(estimate/attention_kernels.py SDPA_CUDNN_FROM); on AMD Instinct 2.8 and 2.9.0.devYYYYMMDD nightlies "
        "before 20250829 run AOTriton 0.10b's split backward (bundles_aotriton_010b)")
    lora_rank: int = _num(16, "LoRA rank", lo=1, hi=65_536)
    lora_alpha: int | None = _num(None, "LoRA alpha", lo=1, hi=1 << 20)
    lora_targets: LoraTargets = "all-linear"
    lora_dropout: float = _num(0.0, "dropout on the adapters' input (peft default 0)", lo=0, hi=1, open_hi=True)
    qlora_double_quant: bool = True
    qlora_backend: Literal["bitsandbytes", "torchao"] = Field(
        "bitsandbytes", description="bitsandbytes' 4-bit matmul saves its input for backward; torchao's NF4 linear does not")
    tokens: float | None = _num(None, "total training tokens", lo=0, hi=MAX_TRAIN_TOKENS, open_lo=True, unit="tokens")
    # memory techniques of specific trainers (torchtune, litgpt, Liger, torch.compile)
    loss: Literal["full", "chunked", "fused-linear", "cce"] = Field(
        "full", description="cross-entropy: full logits, chunked (torchtune/litgpt), fused linear+CE (Liger), or cce "
        "(Apple Cut Cross-Entropy, Unsloth's default: logits recomputed blockwise, only a per-token log-sum-exp kept)")
    loss_chunks: int = _num(8, "chunks of the chunked loss (torchtune default 8)", lo=1, hi=4096)
    compile: bool = Field(False, description="torch.compile fuses norms and activations (fewer saved tensors)")
    ssm_kernels: bool = Field(True, description="state-space (Mamba) layers run mamba_ssm's fused kernels; false: "
                              "transformers' torch path, which saves the per-step SSM state (far more memory)")
    compile_loss: bool | None = Field(None, description=(
        "the cross-entropy is compiled too (keeps 16-bit logits instead of fp32 copies); default: what the "
        "framework does with compile on (torchtitan since April 2025 and torchtune compile it; torchtitan "
        "releases before bbb1b61 did not)"))
    pp_keep_outputs: bool = Field(False, description=(
        "pipeline parallel (torch.distributed.pipelining): every micro-batch's stage output stays alive until the "
        "step returns (torch before pytorch#153383, 2025-05, on every stage; torchtitan releases before "
        "`return_outputs=False`); default: current torchtitan, which keeps only the in-flight micro-batches' outputs"))
    unsloth_lora_addmm: bool = Field(True, description=(
        "tool unsloth: matmul_lora adds the LoRA product into the base output in place (out.addmm_, "
        "unslothai/unsloth since 4f166026d7, 2025-03-01); false: earlier releases (d9ed4bef, 2024-12, the "
        "published max-context tables) computed `out += (X @ A) @ (s * B)`, a full-size temporary of every adapted "
        "output (2 x intermediate bytes per token more at the MLP backward's peak)"))
    hf_modules: bool = Field(False, description=(
        "framework torchtitan: the model is transformers' own modeling code (AutoModelForCausalLM) wrapped with "
        "FSDP2, as NeMo RL's DTensor worker and verl's FSDP workers run it, instead of torchtitan's model: its eager "
        "element-wise kernels are transformers' decoder layer's (bytes and measured bandwidth share of the hf layer, "
        "docs/speed.md section 2.3.1); the sharding, collectives and optimizer stay the FSDP2 profile's"))
    optimizer_in_backward: bool = Field(False, description="step each parameter during backward (torchtune)")
    paged_optimizer: bool = Field(False, description="bitsandbytes paged optimizer: states in managed memory")
    activation_offload: bool = Field(False, description="saved activations moved to host memory")
    full_state_dict: bool = Field(False, description="FSDP loads/saves a full 16-bit state dict on each GPU")
    held_logits: Literal["none", "model", "fp32"] = Field("none", description=(
        "HF models: the training loop keeps the model's output, and with it the full logits, alive through "
        "backward (a custom loop holding `output = model(...)` until after the step, e.g. Answer.AI fsdp_qlora): "
        "fp32 with transformers before 4.46 (the forward upcast them), model with later releases (the model's "
        "dtype); none: the output is dropped before backward (HF Trainer's compute_loss)"))
    allow_longer_context: bool = _LONGER

    @model_validator(mode="after")
    def _optimizer_fits_method(self):
        if self.optimizer == "galore" and self.method != "full":
            raise ValueError(f"train.optimizer galore projects full-rank gradients; with method {self.method} only "
                             "the adapters train (use method: full with galore, or adamw for LoRA)")
        if self.method == "qlora" and self.precision == "fp8":
            # it was estimated as bf16 while reporting an FP8 recipe: a silent guess
            raise ValueError("train.precision fp8 with method qlora: every matmul of the 4-bit base runs in a 16-bit "
                             "compute dtype (bitsandbytes Linear4bit.forward casts its input to bnb_4bit_compute_dtype "
                             "and matmul_4bit dequantizes the weight to it; torchao's NF4 linear dequantizes to bf16), "
                             "so nothing runs in FP8 (use precision bf16 with qlora, or method lora/full for FP8)")
        return self

    @model_validator(mode="after")
    def _documents_fit_row(self):
        d = self.document_len
        if d is None:
            if self.pack_tokens is not None:
                raise ValueError(f"train.pack_tokens = {self.pack_tokens} is the documents' share of a padded packed "
                                 "row, but train.document_len is unset, so attention spans the whole row and the "
                                 "padding changes nothing (set document_len, or remove pack_tokens)")
            return self
        if self.pack_tokens is not None and not d <= self.pack_tokens <= self.seq_len:
            raise ValueError(f"train.pack_tokens = {self.pack_tokens} must hold at least one document "
                             f"(document_len = {d}) and fit the row (seq_len = {self.seq_len}): set "
                             "document_len <= pack_tokens <= seq_len")
        if d > self.seq_len:
            raise ValueError(f"train.document_len = {d} is longer than the packed row, train.seq_len = {self.seq_len} "
                             "(set document_len <= seq_len, or remove it: attention then spans the whole row)")
        if self.objective in RL_OBJECTIVES:
            raise ValueError(f"train.document_len packs documents into rows; objective {self.objective} packs its "
                             "generated sequences itself (use train.rl.packing, or remove document_len)")
        return self

    @property
    def row_len(self) -> int:
        """Tokens of one row through the model: seq_len, or both sides of a preference pair joined on the sequence
        axis (pair_concat: sequence; open-instruct's `concatenated_forward_olmo` with packing, torch.cat(dim=-1)
        of the chosen and rejected packs, allenai/open-instruct@ee0c4608 open_instruct/dpo_utils.py): 2 x seq_len.
        Both layouts run the same tokens through the linear layers."""
        return self.seq_len * (2 if self.pair_concat == "sequence" else 1)


LengthName = Literal["fixed", "uniform", "normal", "lognormal", "chat", "summarization", "code"]
Arrival = Literal["poisson", "gamma", "closed", "offline", "trace"]


class Lengths(_Strict):
    """Token counts of requests (serving under load). chat / summarization / code are bundled
    synthetic shapes (docs/serving-load.md says how each was made)."""
    dist: LengthName = "fixed"
    mean: float | None = _num(None, "mean tokens (fixed, normal, lognormal)", lo=1, hi=MAX_TOKENS_LEN, unit="tokens")
    std: float | None = _num(None, "standard deviation (normal)", lo=0, hi=MAX_TOKENS_LEN, unit="tokens")
    cv: float | None = _num(None, "coefficient of variation (lognormal)", lo=0, hi=100)
    min: int = _num(1, "smallest draw", lo=1, hi=MAX_TOKENS_LEN, unit="tokens")
    max: int | None = _num(None, "largest draw", lo=1, hi=MAX_TOKENS_LEN, unit="tokens")

    @model_validator(mode="after")
    def _needs(self):
        d = self.dist
        if d in ("fixed", "normal", "lognormal") and self.mean is None:
            raise ValueError(f"dist {d} needs `mean` (tokens), e.g. {{dist: {d}, mean: 512"
                             + (", std: 128}" if d == "normal" else ", cv: 1.0}" if d == "lognormal" else "}"))
        if d == "normal" and self.std is None:
            raise ValueError("dist normal needs `std` (tokens), e.g. {dist: normal, mean: 512, std: 128}")
        if d == "uniform" and self.max is None:
            raise ValueError("dist uniform needs `max` (and optionally `min`), e.g. {dist: uniform, min: 100, max: 900}")
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max}) is below min ({self.min})")
        return self


class Disaggregation(_Strict):
    """Prefill/decode disaggregation: prompts run on prefill instances, their KV moves over the link to
    decode instances that generate the rest (each instance is the plan's tp x pp GPUs)."""
    prefill_instances: int = _num(1, "instances that only run prompts", lo=1, hi=4096)
    decode_instances: int = _num(1, "instances that only decode", lo=1, hi=4096)


class Load(_Strict):
    """Serving under load: a request-level simulation of the engine's scheduler (docs/serving-load.md)."""
    rate_per_s: float | None = _num(None, "request arrival rate (poisson, gamma) of the whole plan: its replicas "
                                    "share it evenly", lo=0, hi=1e6, open_lo=True, unit="requests/s")
    requests: int = _num(1000, "requests simulated", lo=1, hi=1_000_000)
    warmup_requests: int = _num(0, "requests at the start of the run that are simulated but left out of the "
                                "statistics (a load tester's warm-up, e.g. genai-perf/AIPerf --warmup-request-count; "
                                "the first ones sent)", lo=0, hi=1_000_000)
    arrival: Arrival = Field("poisson", description="poisson | gamma (bursty, see arrival_cv) | closed (clients "
                             "that each wait for their answer) | offline (all at t=0, MLPerf Offline) | trace")
    arrival_cv: float = _num(1.0, "gamma arrivals: coefficient of variation of the gaps (1 = Poisson)", lo=0,
                             hi=100, open_lo=True)
    clients: int | None = _num(None, "closed loop: concurrent clients", lo=1, hi=MAX_BATCH)
    trace: Optional[PathText] = Field(None, description="CSV or JSONL file with arrival_s, input_tokens, "
                                      "output_tokens per request")
    input: Lengths | None = Field(None, description="prompt lengths; default: fixed at infer.prompt_len")
    output: Lengths | None = Field(None, description="output lengths; default: fixed at infer.output_len")
    prefix_cache_hit: float = _num(0.0, "share of each prompt served from the prefix (radix) cache", lo=0, hi=1,
                                   open_hi=True)
    slo_ttft_s: float | None = _num(None, "time-to-first-token objective", lo=0, hi=86_400, open_lo=True, unit="s")
    slo_tpot_s: float | None = _num(None, "time-per-output-token objective", lo=0, hi=3600, open_lo=True, unit="s")
    slo_percentile: float = _num(99.0, "percentile the objectives hold at", lo=0, hi=100, open_lo=True)
    seed: int = _num(0, "random seed (the same seed gives the same answer)", lo=0, hi=2**63 - 1)
    disaggregation: Disaggregation | None = Field(None, description="prefill/decode disaggregation: "
                                                  "{prefill_instances: N, decode_instances: M}")

    @model_validator(mode="after")
    def _needs(self):
        a = self.arrival
        if a in ("poisson", "gamma") and self.rate_per_s is None:
            raise ValueError(f"arrival {a} needs rate_per_s (requests/s), e.g. {{arrival: {a}, rate_per_s: 10}}")
        if a == "closed" and self.clients is None:
            raise ValueError("arrival closed needs clients (concurrent users), e.g. {arrival: closed, clients: 64}")
        if a == "trace" and not self.trace:
            raise ValueError("arrival trace needs trace (a CSV or JSONL file with arrival_s, input_tokens, "
                             "output_tokens)")
        if a != "trace" and self.trace:
            raise ValueError(f"trace is given but arrival is {a}; set arrival: trace to replay the file")
        if self.warmup_requests >= self.requests:
            raise ValueError(f"warmup_requests ({self.warmup_requests}) leaves none of the {self.requests} requests "
                             f"to measure; use fewer warm-up requests or more requests")
        return self


SpecMethod = Literal["draft", "ngram", "eagle", "mtp"]


class Speculative(_Strict):
    """Speculative decoding (docs/serving-load.md, *Speculative decoding*): a drafter proposes
    `num_tokens` tokens per step, the target verifies them in one forward pass."""
    method: SpecMethod = Field("eagle", description="draft (a smaller model, draft_model) | ngram (prompt lookup, "
                               "no GPU drafter) | eagle (EAGLE head: one decoder layer on the target's features) "
                               "| mtp (the checkpoint's multi-token-prediction layer, DeepSeek-V3 style)")
    draft_model: Optional[Name] = Field(None, description="method draft: registry name, HF repo id or config.json "
                                        "of the draft model")
    num_tokens: int = _num(3, "tokens proposed per step (vLLM num_speculative_tokens)", lo=1, hi=16)
    acceptance_rate: float | None = _num(None, "probability that each proposed token is accepted (default: the "
                                         "method's cited default; ngram has none)", lo=0, hi=1, open_hi=True)

    @model_validator(mode="after")
    def _needs(self):
        if self.method == "draft" and not self.draft_model:
            raise ValueError("method draft needs draft_model, e.g. {method: draft, draft_model: llama-3.2-1b}")
        if self.method != "draft" and self.draft_model:
            raise ValueError(f"draft_model is only read by method draft (this is {self.method})")
        if self.method == "ngram" and self.acceptance_rate is None:
            raise ValueError("method ngram needs acceptance_rate: prompt lookup accepts as much as the output copies "
                             "the prompt, so no default fits (e.g. 0.3 for chat, higher for summarisation / code edits)")
        return self


# infer fields that describe one engine's machinery, refused on another engine (instead of being ignored):
# (field, whether the scenario set it, the engine, what it describes, what any other engine has of its own)
_ENGINE_FIELDS = (
    ("schedule_conservativeness", lambda v: v is not None, "sglang", "is SGLang's option", "scheduler"),
    ("chat_template_parse", bool, "vllm", "describes vLLM 0.11.0's API server", "front end"),
    ("trtllm_backend", lambda v: v != "pytorch", "trtllm", "chooses TensorRT-LLM's executor", "executor"),
    ("vllm_v0", bool, "vllm", "describes vLLM's V0 engine", "scheduler"),
    ("num_scheduler_steps", lambda v: v > 1, "vllm", "is vLLM V0's multi-step scheduling", "scheduler"),
    ("parallel_samples", lambda v: v > 1, "vllm", "is vLLM's per-request sample count (SamplingParams.n)",
     "request handling"),
    ("transformers_version", lambda v: v != "unknown", "hf", "is the transformers release engine hf runs",
     "code"),
    ("llamacpp_build", lambda v: v is not None, "llama.cpp", "is llama.cpp's build number", "version"),
    ("python_version", lambda v: v is not None, "vllm", "is the CPython vLLM V0's host work was timed under",
     "host timing"),
    ("vllm_v0_release", lambda v: v is not None, "vllm", "is the vLLM release whose V0 code runs", "version"),
)

# infer fields that describe vLLM's V0 engine, refused on V1 as _ENGINE_FIELDS refuses them on other engines:
# (field, what it is)
_V0_FIELDS = (
    ("vllm_v0_release", "names the release of vLLM's V0 engine"),
    ("python_version", "selects vLLM V0's host timing under that CPython"),
)


class Infer(_Strict):
    weights: Format = "bf16"
    kv_cache: Format = "bf16"
    engine: Engine = "vllm"
    prompt_len: int = _num(1024, "prompt tokens per request", lo=1, hi=MAX_TOKENS_LEN, unit="tokens")
    output_len: int = _num(256, "output tokens per request", lo=1, hi=MAX_TOKENS_LEN, unit="tokens")
    concurrency: int = _num(1, "requests in flight", lo=1, hi=MAX_BATCH)
    beam_width: int = _num(1, "beam search: beams per request (HF generate num_beams, vLLM BeamSearchParams."
                           "beam_width); 1 = greedy/sampling", lo=1, hi=1024)
    gpu_memory_utilization: float = _num(0.9, "share of GPU memory the engine takes (vLLM --gpu-memory-utilization, "
                                         "SGLang --mem-fraction-static); TensorRT-LLM: free_gpu_memory_fraction, the "
                                         "share of the memory still free after the model loads that its KV pool "
                                         "takes", lo=0, hi=1, open_lo=True)
    max_model_len: int | None = _num(None, "engine's context limit", lo=1, hi=MAX_TOKENS_LEN, unit="tokens")
    cuda_graphs: bool = True
    cuda_graph_batch_sizes: Annotated[list[Annotated[int, Field(ge=1, le=MAX_BATCH)]], Field(max_length=MAX_LIST)] | None = \
        Field(None, description="engine trtllm: cuda_graph_config.batch_sizes with enable_padding (a decode-only "
              "step replays the next captured size, padded with dummy requests); default: padding not modelled")
    gpu_layers: int | None = _num(None, "llama.cpp -ngl: layers offloaded to the GPU", lo=0, hi=100_000)
    llamacpp_build: int | None = _num(
        None, "engine llama.cpp: the build number the run used, as llama-bench and llama-cli print it (`build: "
        "<commit> (<N>)`). Builds before 2540 (commit 557410b8, PR #6122, 2024-03-26) run the last layer's "
        "feed-forward, the output norm and the lm_head over every prompt token; from 2540 only over the positions "
        "whose logits are asked for (llama-bench and llama-cli: the last one), docs/speed.md §3.32. Default: a "
        "current build", lo=1, hi=1_000_000)
    torch_version: TorchVersion = Field(
        "2.13", description="engine hf: the torch the run uses. Before 2.1 "
        "torch.cat (which grows HF's KV cache every decode step) runs a per-element kernel with one load in flight "
        "per thread, bound by DRAM latency rather than bandwidth (estimate/quant_kernels.py torch_cat_read_rate; "
        "GPUs with a measured latency, hardware/data/gpu_dram_latency.csv); later or unknown: the HBM rate")
    transformers_version: TransformersVersion = Field(
        "unknown", description="engine hf: the transformers the run uses. Its "
        "Llama-style decoder layer issues a version-dependent number of ops per decode step (4.35: eager attention, "
        "rotary cos/sin cast and indexed in every layer; 4.46: SDPA; counted on CPU, estimate/data/"
        "hf_decode_ops.csv), and the host issue time per layer scales with it against 4.46.3, the version the "
        "0.77 ms per layer was read on. Unknown or a version not counted: the constant as read. Before 4.36 "
        "generate passes the KV cache as tuples and a decode step holds the old tuple beside the new one "
        "(memory: estimate/memory.py legacy_tuple_cache_bytes)")
    repeat_kv: bool = Field(False, description="engine hf, GQA models: each decode step copies the KV cache out to "
                            "every query head (transformers' repeat_kv before attention: eager attention in any "
                            "version, SDPA in transformers 4.x such as 4.46). Default false: transformers 5 SDPA "
                            "packs the one decode query per KV head instead (pack_gqa / enable_gqa)")
    gptq_kernel: GptqKernel | None = Field(None, description="engine hf with GPTQ weights, transformers 4.x: "
                                           "AutoGPTQ's kernel. exllama (4.x's default, GPTQConfig exllama_config "
                                           "version 1) dequantizes each layer to fp16 and calls cuBLAS from 8 rows "
                                           "per call, exllamav2 from 51 (and runs at its measured speed below), "
                                           "cuda-old from 128. Unset: an ideal packed-weight kernel (transformers "
                                           "5 picks GPTQModel's kernel)")
    llm_int8_threshold: float = _num(6.0, "int8 (bitsandbytes LLM.int8) weights: transformers' "
                                     "BitsAndBytesConfig llm_int8_threshold. Above 0 each linear finds the "
                                     "activation columns at or above it and multiplies them in 16-bit (two "
                                     "host-device syncs and several kernels a call); 0 skips that decomposition",
                                     lo=0.0, hi=1e6)
    ssm_kernels: bool = Field(True, description="engine hf: state-space (Mamba) layers run mamba_ssm's kernels and "
                              "Kimi Delta Attention layers flash-linear-attention's; false: transformers' torch "
                              "path, whose prefill materialises fp32 state-sized tensors (KDA: a per-channel decay "
                              "between every pair of positions in a chunk)")
    max_num_seqs: int | None = _num(None, "engine's running-request cap; default: concurrency, as gpuplan's "
                                    "launch files set it, at most vLLM's default (1024 on >= 70 GiB GPUs other "
                                    "than A100, else 256); under infer.load: that default", lo=1, hi=MAX_BATCH)
    max_num_batched_tokens: int | None = _num(None, "engine's tokens per step; default: the engine's own (vLLM: "
                                              "8192 on >= 70 GiB GPUs other than A100, else 2048)",
                                              lo=1, hi=MAX_TOKENS_LEN)
    async_scheduling: bool | None = Field(None, description="the engine schedules the next step while the GPU "
                                          "runs this one (vLLM --async-scheduling, default from 0.14; SGLang's "
                                          "overlap scheduler, default from 0.4; TensorRT-LLM's overlap scheduler); "
                                          "false: its per-sequence host work adds to every step. Default: on")
    trtllm_backend: Literal["pytorch", "tensorrt"] = Field(
        "pytorch", description="engine trtllm: which executor runs the model: pytorch (the PyTorch backend and its "
        "Python executor, the default from TensorRT-LLM 1.0: trtllm-bench --backend pytorch, trtllm-serve) or "
        "tensorrt (a built TensorRT engine run by the C++ executor: TensorRT-LLM < 1.0, NIM 1.x profiles, NVIDIA's "
        "MLPerf harness). Only the Python executor's host work per scheduled sequence is priced (measured on it, "
        "estimate/engine_host.py); the C++ executor's is not modelled. Default: pytorch")
    sampling: Literal["random", "greedy"] = Field(
        "random", description="engine vllm: how the requests pick their tokens, which sets the sampler's passes "
        "over the step's fp32 logits (batch x vocab): random (temperature > 0, no top-k/top-p: the cast, the "
        "temperature division, softmax, exponential noise, division and argmax) or greedy (temperature 0: the "
        "cast and an argmax). Default: random")
    logprobs: bool = Field(False, description="engine vllm: the requests ask for the sampled tokens' log-probs "
                           "(SamplingParams logprobs=0, as RL rollouts do): a log_softmax and a rank count over "
                           "the step's fp32 logits")
    front_end: bool | None = Field(None, description="requests come through the engine's HTTP server (vllm "
                                   "serve, sglang serve, trtllm-serve), whose per-request latency (parsing, "
                                   "tokenisation, hand-off, first streamed chunk) adds to every TTFT; false: an "
                                   "in-process client (offline LLM.generate, MLPerf's C++ harness) pays none. "
                                   "Default: on")
    api_server_count: int = _num(1, "engine vllm: API-server processes in front of the engine (vllm serve "
                                 "--api-server-count). Each runs on one core and streams at most ~15k tokens/s "
                                 "(vLLM PR 13923), so a load simulation's step lasts at least the decoding "
                                 "requests' tokens over the processes' combined rate (docs/serving-load.md, Host "
                                 "work and the front end). Default: 1, vLLM's default",
                                 lo=1, hi=64)
    chat_template_parse: bool = Field(False, description="engine vllm: the requests come to vLLM 0.11.0's chat "
                                      "endpoint (/v1/chat/completions) with a Jinja chat template (not gpt-oss's "
                                      "harmony format). That version parses the whole template again for every "
                                      "request in the one API-server process (~10 ms each), and a burst of "
                                      "requests reaches the engine only when all of them are parsed "
                                      "(docs/serving-load.md, The chat template in vLLM 0.11.0's API server). "
                                      "Default: false (other versions cache the parse)")
    capacity_scheduler: Literal["guaranteed_no_evict", "max_utilization"] | None = Field(
        None, description="engine trtllm: TensorRT-LLM's capacity scheduler policy (LLM API scheduler_config."
        "capacity_scheduler_policy). guaranteed_no_evict (its default): a request starts only when the KV pool "
        "holds its prompt and all its output; max_utilization: it starts when its next step fits and the "
        "newest running request is paused (recomputed later) when the pool runs out")
    schedule_conservativeness: float | None = _num(
        None, "engine sglang: SGLang's --schedule-conservativeness. Its scheduler admits a request only if the KV "
        "pool keeps room for the request's whole output and for min(0.7 x this, 1) (decaying to 0.14 x that over "
        "600 decode steps) of every running request's remaining output (docs/serving-load.md, SGLang's admission). "
        "Default: SGLang's 1.0", lo=0, hi=100)
    num_scheduler_steps: int = _num(1, "engine vllm, its V0 engine only (from vLLM 0.5.5 until V0 was removed; --num-scheduler-steps): "
                                    "multi-step scheduling, a decode batch runs this many steps per schedule, "
                                    "prompts wait for the run to end and run whole in their own steps, tokens "
                                    "stream when the run ends (a finished request's last one, with V0's async output "
                                    "processor, when its step is processed); 1: vLLM V1's per-step scheduler (the "
                                    "default)",
                                    lo=1, hi=64)
    vllm_v0: bool = Field(False, description="engine vllm: its V0 engine (the default before vLLM 0.8, e.g. any 2024 "
                          "release; VLLM_USE_V1=0 later). V0's defaults differ from V1's: max_num_seqs 256 and, for a "
                          "model whose max_model_len exceeds 32,768 tokens, chunked prefill at 512 tokens a step, where "
                          "a step carrying a prompt chunk runs without CUDA graphs (docs/speed.md §3.21). Default: "
                          "false (V1)")
    python_version: Literal["3.9", "3.11"] | None = Field(None, description=(
        "engine vllm with vllm_v0: the CPython the engine runs on, which sets V0's per-sequence host work "
        "(engine_host.vllm_v0_host: timed under 3.11 and under 3.9; e.g. 3.9 in verl's 2025 ROCm image "
        "rocm/vllm:rocm6.2_mi300_ubuntu20.04_py3.9_vllm_0.6.4). Default: 3.11, the reference timing"))
    vllm_v0_release: VllmRelease | None = Field(None, description=(
        "engine vllm with vllm_v0: the vLLM release (e.g. 0.5.4) whose V0 code runs, which sets its per-step host "
        "work (engine_host.vllm_v0_host: 0.5.4's and 0.6.3's code timed, data/vllm_v0_host.csv; a release prices as "
        "the newest timed one not newer than it) and, before 0.6.0, that there is no async output processor (the "
        "output processing runs after every forward). From 0.5.4 on; multi-step scheduling only from 0.6.0 here. "
        "Default: 0.6.3's code (docs/speed.md §3.35)"))
    parallel_samples: int = _num(1, "samples of one prompt each request asks for (SamplingParams.n; verl's "
                                 "rollout.n, GRPO's group). Read by vLLM V0 only, which keeps a request's samples in "
                                 "one sequence group: its scheduler and output work per step is part per group, "
                                 "part per sequence (engine_host.vllm_v0_host); concurrency still counts sequences",
                                 lo=1, hi=MAX_BATCH)
    allow_longer_context: bool = _LONGER
    load: Load | None = Field(None, description="serving under load: arrival process, request lengths, SLOs "
                              "(gpuplan serve --rate)")
    speculative: Speculative | None = Field(None, description="speculative decoding: method, tokens per step, "
                                            "acceptance rate")

    @model_validator(mode="after")
    def _trtllm_only(self):
        if self.capacity_scheduler is not None and self.engine != "trtllm":
            raise ValueError(f"capacity_scheduler is TensorRT-LLM's option; engine {self.engine!r} has its own "
                             "scheduler: set infer.engine: trtllm, or leave capacity_scheduler out")
        return self

    @model_validator(mode="after")
    def _engine_fields_match_engine(self):
        for field, is_set, engine, what, own in _ENGINE_FIELDS:
            if is_set(getattr(self, field)) and self.engine != engine:
                raise ValueError(f"{field} {what}; engine {self.engine!r} has its own {own}: set infer.engine: "
                                 f"{engine}, or leave {field} out")
        return self

    @model_validator(mode="after")
    def _v0_fields_need_v0(self):
        for field, what in _V0_FIELDS:
            value = getattr(self, field)
            if value is not None and not self.vllm_v0:
                raise ValueError(f"{field} {value} {what}; vLLM V1 (the default) has its own: set infer.vllm_v0: true, "
                                 f"or leave {field} out")
        if self.vllm_v0_release is None:
            return self
        key = parse_version(self.vllm_v0_release, "infer.vllm_v0_release", full=True)
        if key >= (0, 8, 0):
            raise ValueError(f"vllm_v0_release {self.vllm_v0_release}: V0 is vLLM's default engine before 0.8.0 only; "
                             "from 0.8.0 describe V1 (leave vllm_v0 out) or name an older release")
        if key < (0, 5, 4):
            raise ValueError(f"vllm_v0_release {self.vllm_v0_release}: V0's host work is timed from 0.5.4's code on "
                             "(data/vllm_v0_host.csv); leave vllm_v0_release out or name 0.5.4 or later")
        if key < (0, 6, 0) and self.num_scheduler_steps > 1:
            raise ValueError(f"vllm_v0_release {self.vllm_v0_release} with num_scheduler_steps "
                             f"{self.num_scheduler_steps}: multi-step scheduling is modelled from 0.6.0's code (its "
                             "output processing beside the GPU); 0.5.x's is not: leave one of them out")
        return self

    @model_validator(mode="after")
    def _int8_threshold_needs_int8(self):
        if self.llm_int8_threshold != 6.0 and (self.weights != "int8" or self.engine != "hf"):
            raise ValueError(f"llm_int8_threshold is bitsandbytes LLM.int8()'s outlier threshold; weights "
                             f"{self.weights!r} on engine {self.engine!r} have none: set infer.weights: int8 on "
                             "engine hf, or leave llm_int8_threshold out")
        return self

    @model_validator(mode="after")
    def _gptq_kernel_is_read(self):
        if self.gptq_kernel is not None and (self.engine != "hf" or not self.weights.lower().startswith("gptq")):
            fix = "engine: hf" if self.engine != "hf" else "weights: gptq-int4"
            raise ValueError(f"gptq_kernel is only read by engine hf with GPTQ weights (this is engine {self.engine}, "
                             f"weights {self.weights}): remove it, or set {fix}")
        return self


Providers = Annotated[list[Name], Field(max_length=MAX_LIST)]


def _known_providers(v: list[str] | None) -> list[str] | None:
    if v is None:
        return None
    from .errors import UnknownNameError, close_matches
    from .hardware import providers
    known = providers()
    out = list(dict.fromkeys(p.strip().lower() for p in v))
    if not out:
        raise InputError("providers", "is an empty list.", "name at least one provider, or leave the field out.")
    for p in out:
        if p not in known:
            raise UnknownNameError(f"provider {excerpt(p)}", "has no offerings in the price catalog.",
                                   f"use one of {', '.join(known)}.", close_matches(p, known))
    return out


def _owned_ids(v: dict[str, int] | None) -> dict[str, int] | None:
    if v is None:
        return None
    from .hardware import get_gpu
    out: dict[str, int] = {}
    for name, count in v.items():
        try:
            gid = get_gpu(name).id
        except InputError as err:         # UnknownNameError / AmbiguousNameError with close matches
            raise err.about(f"constraints.owned: {err.what}") from None
        if gid in out:
            raise InputError(f"constraints.owned {excerpt(name)}", f"names {gid} a second time.",
                             f"give {gid} once, with the total count you own.")
        out[gid] = count
    return out


class Data(_Strict):
    """Images in each training sample or serving request (vision-language models; docs/vision-language.md)."""
    images_per_sample: int = _num(0, "images in each training sequence or serving request", lo=0, hi=4096)
    image_height: int | None = _num(None, "image height in pixels before the processor resizes it; default: the "
                                    "model's fixed input size (needed for dynamic-resolution models)", lo=1,
                                    hi=65_536, unit="px")
    image_width: int | None = _num(None, "image width in pixels (see image_height)", lo=1, hi=65_536, unit="px")
    image_tokens: int | None = _num(None, "decoder tokens per image, instead of the size (dynamic-resolution "
                                    "models only)", lo=1, hi=MAX_TOKENS_LEN, unit="tokens")
    min_pixels: int | None = _num(None, "dynamic resolution: the processor's min_pixels (default 56*56)", lo=1,
                                  hi=1 << 40)
    max_pixels: int | None = _num(None, "dynamic resolution: the processor's max_pixels (default 28*28*1280)", lo=1,
                                  hi=1 << 40)


class Cost(_Strict):
    providers: Optional[Annotated[Providers, AfterValidator(_known_providers)]] = Field(
        None, description="cloud providers to price with (the price catalog's names)")
    spot: bool = False
    usd_per_gpu_hour: float | None = _num(None, "your own price, overrides the catalog", lo=0, hi=10_000,
                                          open_lo=True, unit="$/GPU-hour")
    electricity_usd_per_kwh: float = _num(0.15, "electricity price", lo=0, hi=100, unit="$/kWh")
    pue: float = _num(1.3, "power usage effectiveness of the data centre", lo=1, hi=10)
    utilization: float = _num(0.8, "share of the time the GPUs are busy", lo=0, hi=1, open_lo=True)
    years: float = _num(3.0, "years of ownership", lo=0, hi=100, open_lo=True)
    residual_fraction: float = _num(0.3, "resale value as a share of capex", lo=0, hi=1)
    capex_usd_per_gpu: float | None = _num(None, "purchase price per GPU", lo=0, hi=1e8, open_lo=True, unit="$")
    server_overhead_fraction: float = _num(0.25, "chassis/CPU/network as a share of GPU capex", lo=0, hi=100)
    basis: Literal["auto", "rent", "own"] = Field("auto", description="headline cost: rent, own, or rent when a price is known")


GpuCount = Annotated[int, Field(ge=1, le=MAX_GPUS)]


class Constraints(_Strict):
    """Limits for `gpuplan recommend` (ignored by estimate). The one definition: the search's
    `gpuplan.search.Constraints` is built from it."""
    budget_usd: float | None = _num(None, "total budget for the run", lo=0, hi=MAX_USD, open_lo=True, unit="$")
    budget_usd_per_hour: float | None = _num(None, "hourly budget", lo=0, hi=1e9, open_lo=True, unit="$/h")
    deadline_days: float | None = _num(None, "training must finish within this", lo=0, hi=MAX_DAYS, open_lo=True,
                                       unit="days")
    max_gpus: int | None = _num(None, "most GPUs a plan may use", lo=1, hi=MAX_GPUS)
    owned: Optional[Annotated[dict[Name, GpuCount], Field(max_length=MAX_LIST), AfterValidator(_owned_ids)]] = Field(
        None, description=f"GPUs you own: {{gpu id: count}} (counts 1 to {MAX_GPUS:,}); the search uses only these")
    providers: Optional[Annotated[Providers, AfterValidator(_known_providers)]] = Field(
        None, description="cloud providers to rent from (the price catalog's names)")
    spot: bool | None = Field(None, description="price with spot instances")
    ttft_s: float | None = _num(None, "serving: time-to-first-token target", lo=0, hi=86_400, open_lo=True, unit="s")
    tpot_s: float | None = _num(None, "serving: time-per-output-token target", lo=0, hi=3600, open_lo=True, unit="s")
    requests_per_s: float | None = _num(None, "serving: requests/s to sustain", lo=0, hi=1e9, open_lo=True)
    tokens_per_s: float | None = _num(None, "serving: output tokens/s to sustain", lo=0, hi=1e12, open_lo=True)
    min_headroom: float | None = _num(None, "share of GPU memory to leave free", lo=0, hi=1, open_hi=True)


OBJECTIVE_WEIGHTS = ("cost", "time", "cost_per_token")


def _check_weights(weights: dict[str, float], shown: str) -> None:
    bad = [k for k in weights if k not in OBJECTIVE_WEIGHTS]
    if bad:
        raise ValueError(f"weight {excerpt(bad[0])} is not one of {', '.join(OBJECTIVE_WEIGHTS)} (in {shown})")
    if not all(isinstance(w, (int, float)) and not isinstance(w, bool) for w in weights.values()):
        raise ValueError(f"weights must be numbers (got {shown})")
    if any(not math.isfinite(w) or w < 0 for w in weights.values()) or sum(weights.values()) <= 0:
        raise ValueError(f"weights must be finite, non-negative and not all zero (got {shown})")


def _objective(v: Any) -> Any:
    if isinstance(v, str) and v.strip().lower() in get_args(TrainObjective):
        # issue 20: `objective: dpo` at the top level was taken as a (never-checked) ranking name and the estimate
        # silently priced SFT; the top-level objective only ranks plans
        raise ValueError(f"{v.strip()} is a training objective: write it as train.objective (the top-level "
                         "objective ranks plans: cheapest, fastest, cost_per_token or weighted:cost=W,time=W)")
    if isinstance(v, dict):
        _check_weights(v, excerpt(v))
    elif isinstance(v, str) and v.strip().lower().startswith("weighted"):
        weights = {}
        for part in filter(None, (p.strip() for p in v.partition(":")[2].split(","))):
            k, _, w = part.partition("=")
            try:
                weights[k.strip()] = float(w)
            except ValueError:
                raise ValueError(f"weight {excerpt(part)} is not key=number") from None
        if weights:
            _check_weights(weights, excerpt(v))
    return v


def check_objective(objective: Any) -> Any:
    """The scenario's objective check for callers outside the schema (CLI --objective, search
    keyword): NaN, infinite, negative or unknown weights raise InputError."""
    try:
        return _objective(objective)
    except ValueError as err:
        raise InputError(f"objective {excerpt(objective)}", f"{err}.",
                         "write e.g. weighted:cost=0.7,time=0.3 or {cost: 0.7, time: 0.3}.") from None


Objective = Annotated[Union[Annotated[Annotated[str, Field(max_length=64)], Tag("_name")],
                            Annotated[Annotated[dict[str, float], Field(max_length=3)], Tag("_weights")]],
                      Discriminator(lambda v: "_weights" if isinstance(v, dict) else "_name"),
                      AfterValidator(_objective)]


class Scenario(_Strict):
    model: ModelRef
    task: Task = "train"
    hardware: Hardware
    parallel: Parallel = Parallel()
    train: Train | None = None
    infer: Infer | None = None
    framework: Framework = "hf"
    tool: Optional[Tool] = Field(None, description="fine-tuning tool over the HF stack: unsloth | trl | axolotl | "
                                 "llama-factory; applies its defaults to train fields you leave unset")
    cost: Cost = Cost()
    data: Data | None = Field(None, description="images per sample/request and their size (vision-language "
                              "models): image tokens join the decoder sequence; the vision tower's FLOPs and "
                              "activations are added")
    constraints: Constraints | None = None
    objective: Optional[Objective] = Field(None, description="cheapest | fastest | cost_per_token | "
                                           "weighted:cost=W,time=W | {cost: W, time: W}")
    preset: Optional[Annotated[str, Field(max_length=64)]] = None
    overhead_bytes: int | None = _num(None, "override the runtime overhead per GPU", lo=0, hi=1 << 50, unit="bytes")

    @model_validator(mode="after")
    def _defaults_and_layout(self):
        train, infer = self.train, self.infer
        if self.task in ("train", "finetune") and train is None:
            object.__setattr__(self, "train", Train())
        if self.task == "infer" and infer is None:
            object.__setattr__(self, "infer", Infer())
        if self.tool is not None:
            _apply_tool(self)
        if self.train is not None:
            _check_posttrain(self)                                   # issue 20: objective cross-field rules
            _check_grad_reduce(self)
            _check_master_remainders(self)
            _check_activation_fusion(self)
            if not self.train.grad_accum_fusion and self.framework != "megatron":
                raise ValueError("train.grad_accum_fusion = false is Megatron's gradient_accumulation_fusion off, but "
                                 f"framework is {self.framework}; set framework: megatron, or remove grad_accum_fusion")
            if not self.train.moe_permute_fusion and self.framework != "megatron":
                raise ValueError("train.moe_permute_fusion = false is Megatron's moe_permute_fusion off, but framework "
                                 f"is {self.framework}; set framework: megatron, or remove moe_permute_fusion")
            if self.train.moe_router_dtype != "model" and self.framework != "megatron":
                raise ValueError(f"train.moe_router_dtype = {self.train.moe_router_dtype} is Megatron's "
                                 f"TransformerConfig.moe_router_dtype, but framework is {self.framework}; set "
                                 "framework: megatron, or remove moe_router_dtype")
            if self.train.hf_modules and (self.framework != "torchtitan" or self.task == "infer"):
                raise ValueError(f"train.hf_modules runs transformers' model under the torchtitan (FSDP2) profile; "
                                 f"framework is {self.framework} (framework hf already runs transformers' modules; "
                                 "other frameworks run their own): set framework: torchtitan, or remove hf_modules")
            if not self.train.unsloth_lora_addmm and self.tool != "unsloth":
                raise ValueError("train.unsloth_lora_addmm describes Unsloth's LoRA kernels; tool is "
                                 f"{self.tool or 'not set'} (set tool: unsloth, or remove train.unsloth_lora_addmm)")
        p, n = self.parallel, self.hardware.count
        if self.task == "infer" and p.cp > 1:
            raise ValueError(_CP_INFER.format(cp=p.cp))
        model_par = p.tp * p.pp * p.cp
        if n % model_par:
            # say which counts work: every GPU belongs to one tp x pp x cp group
            up = -(-n // model_par) * model_par
            fits = [d for d in range(1, n + 1) if n % d == 0 and d <= model_par][-1]
            raise ValueError(f"parallel.tp*pp*cp = {model_par} does not divide hardware.count = {n} (each GPU belongs "
                             f"to one group of tp x pp x cp GPUs): use hardware.count {up}"
                             + (f" or {up - model_par}" if up - model_par > 0 else "")
                             + f", or a tp x pp x cp that divides {n} (e.g. {fits})")
        dp = p.dp if p.dp is not None else n // model_par
        if dp * model_par != n:
            raise ValueError(f"parallel.dp*tp*pp*cp = {dp * model_par} must equal hardware.count = {n}: set "
                             f"parallel.dp to {n // model_par}, or hardware.count to {dp * model_par}")
        if p.dp is None:
            object.__setattr__(self, "parallel", p.model_copy(update={"dp": dp}))
        if p.shard_group is not None:
            _check_shard_group(self, dp)
        if p.fsdp_version is not None:
            _check_fsdp_version(self)
        if p.etp is not None:
            _check_expert_grid(self, dp)
        elif self.framework == "megatron" and self.task != "infer":
            _check_expert_grid(self, dp)
        else:
            # training stacks other than Megatron place experts across the data(-and-context)-parallel ranks;
            # serving engines across the tensor-parallel ranks (vLLM --enable-expert-parallel) or the
            # attention-data-parallel ranks (TensorRT-LLM/SGLang DEP)
            ep_group = dp * p.cp if self.task != "infer" else dp * p.tp
            if p.ep > 1 and ep_group % p.ep:
                what = "dp*cp" if self.task != "infer" else "dp*tp"
                raise ValueError(f"parallel.ep = {p.ep} must divide {what} = {ep_group}")
        if p.ep_dispatcher != "alltoall" and (self.task == "infer" or p.ep <= 1):
            raise ValueError(f"parallel.ep_dispatcher = {p.ep_dispatcher} dispatches a training step's tokens to "
                             "expert-parallel ranks: it needs task train/finetune and parallel.ep > 1 (set ep, or "
                             "remove ep_dispatcher)")
        if p.ep_dispatcher_sms is not None and p.ep_dispatcher == "alltoall":
            raise ValueError("parallel.ep_dispatcher_sms sets the SMs of the flex dispatcher's kernels (DeepEP / "
                             "HybridEP); the all-to-all dispatcher runs NCCL's (set ep_dispatcher: deepep or "
                             "hybridep, or remove ep_dispatcher_sms)")
        if self.train is not None and self.train.recompute_modules is not None:
            # Megatron reads --recompute-modules only under --recompute-granularity selective
            # (transformer_config.py / transformer_layer.py / moe/experts.py: `recompute_granularity == 'selective'
            # and "moe_act" in recompute_modules`, core_v0.15.0)
            if self.framework != "megatron" or self.train.recompute != "selective" or not self.train.recompute_modules:
                raise ValueError("train.recompute_modules lists Megatron's selective-recompute modules "
                                 "(--recompute-modules): it needs framework megatron, train.recompute: selective and "
                                 "at least one module (set them, or remove recompute_modules)")
        if self.train is not None and self.train.moe_capacity_factor is not None:
            # Megatron-Bridge's apply_moe_token_drop asserts the all-to-all dispatcher
            # (src/megatron/bridge/training/utils/moe_token_drop.py @fa0315ae2); the field is Megatron's flag
            if self.framework != "megatron" or self.task == "infer":
                raise ValueError("train.moe_capacity_factor is Megatron's token-drop training setting "
                                 "(--moe-expert-capacity-factor); it needs framework megatron and a training task "
                                 "(set framework: megatron, or remove moe_capacity_factor)")
            if p.ep_dispatcher != "alltoall":
                raise ValueError(f"train.moe_capacity_factor drops tokens in Megatron's all-to-all dispatcher; "
                                 f"parallel.ep_dispatcher is {p.ep_dispatcher} (set ep_dispatcher: alltoall, or "
                                 "remove moe_capacity_factor)")
        if p.ep_comm_overlap:
            # megatron/core/transformer/transformer_config.py (core_v0.15.0) asserts the same
            if self.task == "infer" or p.ep <= 1:
                raise ValueError("parallel.ep_comm_overlap overlaps a training step's expert-parallel all-to-all: "
                                 "it needs task train/finetune and parallel.ep > 1 (set ep, or remove ep_comm_overlap)")
            if self.train is not None and self.train.recompute == "full":
                raise ValueError("parallel.ep_comm_overlap cannot run with train.recompute: full (Megatron asserts "
                                 "it); use recompute none or selective, or remove ep_comm_overlap")
            if self.train is not None and self.train.precision == "fp32":
                raise ValueError("parallel.ep_comm_overlap needs a 16-bit model (Megatron asserts bf16 or fp16; FP8 "
                                 "recipes keep a bf16 model); use precision bf16, fp16 or fp8, or remove ep_comm_overlap")
            if p.pp > 1 and p.vpp <= 1:
                raise ValueError("parallel.ep_comm_overlap with pp > 1 needs the interleaved schedule (Megatron "
                                 "asserts virtual pipeline stages); set parallel.vpp > 1, or remove ep_comm_overlap")
        return self

    @property
    def dp(self) -> int:
        return self.parallel.dp  # type: ignore[return-value]

    @property
    def is_training(self) -> bool:
        return self.task in ("train", "finetune")

    def replace(self, **updates: Any) -> "Scenario":
        """A new, re-validated scenario with nested updates: replace(parallel={'tp': 2}). Only the fields the
        scenario was given (or the updates give) carry over as given: a field left to its default stays a default,
        so engine defaults that depend on whether a field was set (SGLang's own memory fraction) survive."""
        data = self.model_dump(exclude_unset=True)
        for key, value in updates.items():
            if isinstance(value, dict) and isinstance(data.get(key), dict):
                data[key] = {**data[key], **value}
            else:
                data[key] = value
        if ("hardware" in updates and "parallel" in updates and "dp" not in (updates["parallel"] or {})) or \
                ("hardware" in updates and "count" in updates["hardware"] and "parallel" not in updates):
            data.setdefault("parallel", {})["dp"] = None
        return scenario_from_dict(data)


def _check_shard_group(scn: "Scenario", dp: int) -> None:
    """Hybrid sharding: ZeRO-3/FSDP over shard_group data-parallel ranks (x cp), replicated dp/shard_group times.
    Only a full shard has it here: DeepSpeed builds its MiCS optimizer only in the stage-3 branch of
    `_configure_zero_optimizer` and ignores mics_shard_size at stages 1-2 (deepspeed/runtime/engine.py
    @edaa7221 L2434-2469), and MiCS refuses CPU offload ("Local sharding has no support for CPU offloading",
    deepspeed/runtime/zero/mics.py `allreduce_mics_shard_grads`)."""
    p, g = scn.parallel, scn.parallel.shard_group
    head = f"parallel.shard_group = {g}"
    if scn.task == "infer":
        raise ValueError(f"{head} shards a training step's weights, gradients and optimizer states; task infer "
                         "has none to shard (remove shard_group)")
    if p.zero < 3:
        raise ValueError(f"{head} is hybrid sharding of ZeRO-3/FSDP full-shard; parallel.zero is {p.zero} "
                         "(DeepSpeed ignores mics_shard_size below stage 3): set zero: 3, or remove shard_group")
    if dp % g:
        divs = ", ".join(str(d) for d in range(1, dp + 1) if dp % d == 0)
        raise ValueError(f"{head} must divide the data-parallel size dp = {dp} (the replicas are dp/shard_group "
                         f"groups of equal size): use one of {divs}, or remove shard_group")
    if g == dp:
        return
    if g == 1 and p.cp == 1:
        # accelerate's ParallelismConfig refuses FSDP2 with dp_shard_size 1 ("no dimension for FSDP to shard
        # across"), and torchtitan runs DDP for a replicate-only mesh
        raise ValueError(f"{head} shards nothing: every rank holds the whole model, which is plain data "
                         "parallelism; set zero: 0 (DDP) and remove shard_group, or use a group of 2 or more")
    if scn.framework == "megatron":
        raise ValueError(f"{head}: Megatron's distributed optimizer has no ZeRO-3 hybrid shard here; use framework "
                         "torchtitan, hf or deepspeed, or remove shard_group")
    if p.ep > 1:
        raise ValueError(f"{head} with parallel.ep = {p.ep}: hybrid sharding of expert-parallel layouts is not "
                         "modelled; remove shard_group or set ep: 1")
    if scn.framework == "deepspeed" and p.offload != "none":
        raise ValueError(f"{head}: DeepSpeed MiCS has no CPU offload (mics.py raises 'Local sharding has no "
                         f"support for CPU offloading'); parallel.offload is {p.offload}: set offload: none, or "
                         "remove shard_group")


def fsdp2_stack(scn: "Scenario") -> bool:
    """True where the step shards with FSDP2's fully_shard: zero 3 on framework torchtitan (its only FSDP) or hf (the
    accelerate config gpuplan's launch writes, launch/hf.py `fsdp_version: 2`) unless parallel.fsdp_version says 1."""
    p = scn.parallel
    if p.zero < 3 or scn.framework not in ("torchtitan", "hf"):
        return False
    return (p.fsdp_version or 2) == 2


def _check_fsdp_version(scn: "Scenario") -> None:
    """parallel.fsdp_version names PyTorch's FSDP implementation: only a zero-3 training step of framework
    torchtitan or hf shards with it (Megatron and DeepSpeed have their own sharding)."""
    v = scn.parallel.fsdp_version
    if scn.task == "infer" or scn.parallel.zero < 3 or scn.framework not in ("torchtitan", "hf"):
        raise ValueError(f"parallel.fsdp_version = {v} names PyTorch FSDP's implementation, which shards a training "
                         f"step at zero 3 on framework torchtitan or hf; here task is {scn.task}, framework "
                         f"{scn.framework}, zero {scn.parallel.zero}: remove fsdp_version")


def _check_expert_grid(scn: "Scenario", dp: int) -> None:
    """Megatron's MoE parallel folding: the routed experts get their own grid over each pipeline stage's
    tp x cp x dp ranks, ETP x EP x expert-DP, independent of the attention layers' TP x CP x DP
    (megatron/core/parallel_state.py initialize_model_parallel @ core_v0.19.0: expert_data_parallel_size =
    world_size // (etp * ep * pp), RuntimeError unless world_size is divisible by etp * ep * pp; etp defaults
    to tp there, to 1 here with ep > 1, and the launch file writes it). With world = tp x cp x dp x pp that is:
    ep x etp divides tp x cp x dp."""
    p = scn.parallel
    if p.etp is not None:
        if scn.task == "infer":
            raise ValueError(f"parallel.etp = {p.etp} is Megatron's expert tensor-parallel size, a training layout; "
                             "serving engines split the experts over ep (or tp without it): remove etp")
        if scn.framework != "megatron":
            raise ValueError(f"parallel.etp = {p.etp} is Megatron's --expert-tensor-parallel-size; framework is "
                             f"{scn.framework} (set framework: megatron, or remove etp)")
    etp = p.expert_tp
    stage = p.tp * p.cp * dp
    if (p.ep * etp) <= 1 or stage % (p.ep * etp) == 0:
        return
    def divisors(n: int) -> str:
        return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)
    fix = (f"use an ep that divides {stage // etp} ({divisors(stage // etp)}), a smaller etp" if stage % etp == 0 else
           f"use an etp that divides {stage} ({divisors(stage)})")
    raise ValueError(f"parallel.ep x etp = {p.ep} x {etp} = {p.ep * etp} must divide tp x cp x dp = {p.tp} x {p.cp} "
                     f"x {dp} = {stage}: Megatron builds the experts' grid (expert-parallel x expert-tensor-parallel x "
                     f"expert-data-parallel) over each pipeline stage's tp x cp x dp ranks; {fix}, or change tp, cp "
                     "or hardware.count")


def _apply_tool(scn: "Scenario") -> None:
    """A tool's defaults fill the train fields the user left unset (TOOL_DEFAULTS); tools drive HF models."""
    if scn.framework != "hf":
        raise ValueError(f"tool {scn.tool} trains through Hugging Face transformers; framework is {scn.framework} "
                         "(remove framework, or remove tool)")
    if scn.train is None:
        raise ValueError(f"tool {scn.tool} is a fine-tuning tool; task {scn.task} has no training step (remove tool)")
    given = scn.train.model_fields_set
    updates = {k: v for k, v in TOOL_DEFAULTS[scn.tool].items() if k not in given}
    if updates:
        object.__setattr__(scn, "train", scn.train.model_copy(update=updates))


def _check_grad_reduce(scn: "Scenario") -> None:
    """train.grad_reduce_dtype names Megatron's gradient buffer: fp32, or the parameters' own 16-bit dtype
    (megatron/core/distributed/distributed_data_parallel.py L234 at terrykong/Megatron-LM @2ff0f099, NeMo RL's
    pinned Megatron: grad_reduce_in_fp32 false -> param.dtype)."""
    t = scn.train
    g = t.grad_reduce_dtype
    if g == "auto":
        return
    if scn.framework != "megatron":
        raise ValueError(f"train.grad_reduce_dtype = {g} sets Megatron's gradient buffer (grad_reduce_in_fp32) "
                         f"but framework is {scn.framework}; set framework: megatron, or remove grad_reduce_dtype")
    if g == "fp32":
        return
    params16 = {"bf16": "bf16", "fp8": "bf16", "fp16": "fp16"}.get(t.precision)
    if params16 != g:
        have = f"{params16} parameters" if params16 else "fp32 parameters"
        raise ValueError(f"train.grad_reduce_dtype = {g}: with grad_reduce_in_fp32 false Megatron keeps the "
                         f"gradients in the parameters' dtype, and precision {t.precision} has {have}; use "
                         f"grad_reduce_dtype: {params16 or 'fp32'} (or auto)")


def _check_activation_fusion(scn: "Scenario") -> None:
    """train.activation_fusion false names Megatron's unfused activation (TransformerConfig.bias_activation_fusion
    False, megatron/core/transformer/transformer_config.py L201 and mlp.py L117-157 at terrykong/Megatron-LM
    @2ff0f099); other stacks have no such switch (their kernels are set by compile / tool / eager)."""
    if not scn.train.activation_fusion and scn.framework != "megatron":
        raise ValueError(f"train.activation_fusion = false is Megatron's bias_activation_fusion off, but framework is "
                         f"{scn.framework}; set framework: megatron, or remove activation_fusion")


def _check_master_remainders(scn: "Scenario") -> None:
    """train.master_weight_remainders is Megatron's precision-aware optimizer over bf16 parameters with master
    weights (megatron/core/optimizer/optimizer_config.py store_param_remainders, terrykong/Megatron-LM @2ff0f099)."""
    t = scn.train
    if not t.master_weight_remainders:
        return
    if (scn.framework != "megatron" or t.precision not in ("bf16", "fp8") or not t.master_weights
            or scn.parallel.zero < 1):
        raise ValueError(f"train.master_weight_remainders keeps the low 16 bits of fp32 master weights beside bf16 "
                         f"parameters (Megatron's store_param_remainders, only with its distributed optimizer), but "
                         f"framework is {scn.framework}, precision {t.precision}, master_weights {t.master_weights}, "
                         f"parallel.zero {scn.parallel.zero}; it needs framework: megatron, precision bf16, "
                         "master_weights: true and parallel.zero >= 1, or remove master_weight_remainders")


def truncated_responses(rate: float, n: int) -> int:
    """How many of a step's n responses train.rl.truncation_rate puts at max_new_tokens: round(rate x n), at least
    one for a rate > 0, at most n (the validator below and estimate/rl.response_lengths read it alike)."""
    return min(n, max(1, round(rate * n)))


def _check_posttrain(scn: "Scenario") -> None:
    """Cross-field rules of train.objective: a teacher only for distill, a reference only where the loss
    uses one, RL settings only for RL objectives, a group of at least two for group baselines, a split
    placement that leaves GPUs for training."""
    t = scn.train
    obj = t.objective
    if t.teacher is not None and obj != "distill":
        raise ValueError(f"train.teacher is set but train.objective is {obj}; a teacher is used only by "
                         "objective: distill (remove teacher, or set objective: distill)")
    if obj == "distill" and t.teacher is None:
        raise ValueError("train.objective distill needs train.teacher: the teacher model's name or HF id")
    if t.reference is not None and obj not in REFERENCE_OBJECTIVES:
        why = {"orpo": "ORPO has no reference model", "simpo": "SimPO has no reference model"}.get(
            obj, f"objective {obj} has no reference log-probs")
        fix = "set rl.reference instead" if obj in RL_OBJECTIVES else "remove train.reference"
        raise ValueError(f"train.reference = {t.reference}: {why} ({fix})")
    if obj in REFERENCE_OBJECTIVES and t.reference == "none":
        raise ValueError(f"train.reference = none: {obj} compares the policy's log-probs with a reference's; use "
                         "reference: precomputed to drop the reference model at train time, or objective orpo/simpo")
    if t.reference == "base" and t.method == "full":
        raise ValueError("train.reference = base means the LoRA base with adapters disabled; train.method is full "
                         "(no adapters): use reference: copy or precomputed")
    if t.pair_concat != "batch" and obj not in PAIR_OBJECTIVES:
        raise ValueError(f"train.pair_concat = {t.pair_concat} joins a chosen and a rejected sequence into one row, "
                         f"but objective {obj} has no such pair (pair objectives: {', '.join(PAIR_OBJECTIVES)}); "
                         "remove train.pair_concat")
    if t.rl is not None and obj not in RL_OBJECTIVES:
        raise ValueError(f"train.rl is set but train.objective is {obj}"
                         + (" (the default: no objective was given)" if "objective" not in t.model_fields_set else "")
                         + "; rl settings apply to grpo, ppo, rloo (set train.objective: grpo, ppo or rloo, or remove "
                         "train.rl)")
    if obj not in RL_OBJECTIVES:
        return
    if t.rl is None:
        object.__setattr__(t, "rl", RL())
    rl = t.rl
    if obj in ("grpo", "rloo") and rl.group_size < 2:
        raise ValueError(f"train.rl.group_size = {rl.group_size}: {obj} baselines each response against the "
                         "other responses to its prompt, so it needs at least 2 (TRL/verl default 8)")
    if rl.critic and obj != "ppo":
        raise ValueError(f"train.rl.critic is on but {obj} has no value model (only ppo does)")
    if (rl.mean_response_len or 0) > rl.max_new_tokens:
        raise ValueError(f"train.rl.mean_response_len = {rl.mean_response_len} exceeds max_new_tokens = "
                         f"{rl.max_new_tokens}, the most a response can have (raise max_new_tokens to at least "
                         f"{rl.mean_response_len}, or lower mean_response_len)")
    if rl.truncation_rate and rl.mean_response_len:
        n = rl.prompts_per_step * rl.group_size
        k = truncated_responses(rl.truncation_rate, n)
        if k < n and n * rl.mean_response_len - k * rl.max_new_tokens < n - k:
            raise ValueError(f"train.rl.truncation_rate = {rl.truncation_rate} puts {k} of the step's {n} responses at "
                             f"max_new_tokens = {rl.max_new_tokens}, more tokens than mean_response_len = "
                             f"{rl.mean_response_len} allows: lower the rate or raise the mean")
    if rl.placement == "split" and rl.engine_sleep_level != 2:
        raise ValueError(f"train.rl.engine_sleep_level = {rl.engine_sleep_level} is for placement: colocated (a "
                         "split rollout engine never sleeps); remove engine_sleep_level")
    if rl.offload_pageable != "none" and not rl.offload_train_states:
        # (a split placement offloads nothing either way, as with offload_train_states: the RL placement search
        # turns colocated scenarios into split candidates)
        raise ValueError(f"train.rl.offload_pageable = {rl.offload_pageable} says how offloaded states are copied, "
                         "but nothing is offloaded: set offload_train_states: true, or remove offload_pageable")
    if rl.logprob_impl in ("nemo-rl-0.3", "nemo-rl-0.4") and scn.framework != "megatron":
        raise ValueError(f"train.rl.logprob_impl = {rl.logprob_impl} is NeMo RL's Megatron worker (its log-probs over "
                         f"the tensor-parallel vocabulary shard), but framework is {scn.framework}; set framework: "
                         "megatron, or logprob_impl: fused")
    if rl.logprob_impl == "nemo-rl-dtensor-0.3" and (scn.framework != "torchtitan" or scn.parallel.tp != 1):
        # NeMo RL's DTensor worker is FSDP2 over the HF model, gpuplan's torchtitan (FSDP2) profile; at tp > 1 its
        # loss takes the DTensor branch (DistributedLogprob over vocabulary shards), which is not counted
        raise ValueError(f"train.rl.logprob_impl = {rl.logprob_impl} is NeMo RL's DTensor (FSDP2) worker at tensor "
                         f"parallel 1, but framework is {scn.framework} and parallel.tp {scn.parallel.tp}; set "
                         "framework: torchtitan and tp: 1, or logprob_impl: fused")
    if rl.host_loop != "none" and not rl.packing:
        # only NeMo RL's packing path was timed (its dynamic batching shards and slices otherwise)
        raise ValueError(f"train.rl.host_loop = {rl.host_loop} prices NeMo RL's host work with sequence packing, but "
                         "packing is off; set packing: true, or host_loop: none")
    if rl.engine_vllm_v0 and (rl.engine != "vllm" or rl.engine_in_process):
        raise ValueError("train.rl.engine_vllm_v0 describes vLLM's V0 LLMEngine, whose output processing already runs "
                         f"in its own loop (priced with it), but engine is {rl.engine} and engine_in_process "
                         f"{rl.engine_in_process}; set engine: vllm without engine_in_process (a V1 setting), or "
                         "remove engine_vllm_v0")
    if rl.engine_release is not None:
        rel = parse_version(rl.engine_release, "train.rl.engine_release", full=True)
        if rl.engine != "vllm":
            raise ValueError(f"train.rl.engine_release {rl.engine_release} names a vLLM release, but the rollout "
                             f"engine is {rl.engine}; set engine: vllm, or remove engine_release")
        if not rl.engine_vllm_v0 and rel < (0, 7, 0):
            raise ValueError(f"train.rl.engine_release {rl.engine_release}: vLLM's V1 engine first shipped in 0.7.0 "
                             "(opt-in); an older release runs V0: set engine_vllm_v0: true, or name 0.7.0 or later")
    if rl.engine_in_process and rl.engine != "vllm":
        raise ValueError(f"train.rl.engine_in_process describes vLLM V1's in-process engine core "
                         f"(VLLM_ENABLE_V1_MULTIPROCESSING=0), but the rollout engine is {rl.engine}; set engine: vllm, "
                         "or remove engine_in_process")
    n = scn.hardware.count
    if rl.placement == "split":
        if rl.rollout_gpus is None or rl.rollout_gpus >= n:
            raise ValueError(f"train.rl.placement split needs rl.rollout_gpus between 1 and hardware.count - 1 = "
                             f"{n - 1} (got {rl.rollout_gpus}); the other GPUs train")
        train_gpus, rollout = n - rl.rollout_gpus, rl.rollout_gpus
    else:
        if rl.rollout_gpus is not None:
            raise ValueError("train.rl.rollout_gpus is for placement: split; colocated rollouts use every GPU")
        if rl.async_steps:
            raise ValueError("train.rl.async_steps needs placement: split (colocated phases take turns on the "
                             "same GPUs)")
        train_gpus, rollout = n, n
    if rollout % rl.rollout_tp:
        tps = [d for d in range(1, rollout + 1) if rollout % d == 0]
        fix = (f"set rollout_gpus to a multiple of {rl.rollout_tp} (e.g. {rl.rollout_tp * max(1, rollout // rl.rollout_tp)}"
               f") or rollout_tp to one of {', '.join(map(str, tps))}" if rl.placement == "split" else
               f"set rollout_tp to one of {', '.join(map(str, tps))}")
        raise ValueError(f"train.rl.rollout_tp = {rl.rollout_tp} does not divide the {rollout} rollout GPUs: each "
                         f"rollout engine spans rollout_tp GPUs ({fix})")
    p = scn.parallel
    model_par = p.tp * p.pp * p.cp
    if train_gpus % model_par:
        raise ValueError(f"parallel.tp*pp*cp = {model_par} does not divide the {train_gpus} training GPUs"
                         + (f" (hardware.count {n} - rollout_gpus {rl.rollout_gpus}); set rollout_gpus so that "
                            f"{model_par} divides the rest, or lower tp/pp/cp" if rl.placement == "split" else ""))


_CP_INFER = ("parallel.cp = {cp}: context parallelism splits a training sequence; serving engines have no context "
             "parallel (use tp or pp), so set cp: 1")
_LOC_NOISE = {"str", "int", "float", "bool", "list", "dict"}   # union branch names pydantic puts in loc
_RANGE_ERRORS = {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "finite_number"}


def _model_in(tp: Any) -> Any:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp
    for arg in get_args(tp):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _field_range(root: type[BaseModel], loc: tuple) -> str | None:
    """The documented range of the field at `loc` (see _range)."""
    cls, info = root, None
    for part in loc:
        fields = getattr(cls, "model_fields", None) or {}
        if part in fields:
            info = fields[part]
            cls = _model_in(info.annotation)
    extra = getattr(info, "json_schema_extra", None)
    return extra.get("range") if isinstance(extra, dict) else None


def _model_at(root: type[BaseModel], loc: tuple) -> type[BaseModel] | None:
    """The pydantic model that holds the field at `loc` (its last part), or None where the path leaves the models."""
    cls: Any = root
    for part in loc[:-1]:
        fields = getattr(cls, "model_fields", None) or {}
        if part in fields:
            cls = _model_in(fields[part].annotation)
        elif str(part) in _LOC_NOISE or str(part).startswith(("function-", "constrained-", "literal", "union")):
            continue
        else:
            return None
        if cls is None:
            return None
    return cls


def _field_homes(root: type[BaseModel], name: str, depth: int = 4) -> list[str]:
    """Where else in the schema a field called `name` lives (dotted paths), for a key written at the wrong level
    (`rl:` at the top level or under hardware instead of train.rl; `group_size:` under train)."""
    found: list[str] = []
    todo: list[tuple[Any, str]] = [(root, "")]
    seen: set[Any] = set()
    while todo:
        cls, prefix = todo.pop(0)
        if cls in seen or prefix.count(".") >= depth:
            continue
        seen.add(cls)
        for field, info in (getattr(cls, "model_fields", None) or {}).items():
            path = f"{prefix}{field}"
            if field == name:
                found.append(path)
            sub = _model_in(info.annotation)
            if sub is not None:
                todo.append((sub, path + "."))
    return found


def _plain(name: str) -> str:
    return "".join(ch for ch in str(name).lower() if ch.isalnum())


def error_suggestions(e: dict[str, Any], root: type[BaseModel] | None) -> list[str]:
    """Close matches for one pydantic error: the fields of the model a misspelled key sits in
    ('seqlen' -> seq_len), or the choices of a closed set a misspelled value missed ('tensorrt-llm' ->
    trtllm, 'adamw8bit' -> adamw-8bit). Case, dashes, dots and underscores are ignored first, then difflib."""
    import re
    from .errors import close_matches
    loc, kind, given = tuple(e.get("loc", ())), e.get("type", ""), e.get("input")
    if kind == "extra_forbidden" and root is not None and loc:
        cls = _model_at(root, loc)
        choices = list(getattr(cls, "model_fields", None) or {})
        wrong = str(loc[-1])
    elif kind in ("literal_error", "enum") and isinstance(given, str):
        choices = re.findall(r"'([^']*)'", str((e.get("ctx") or {}).get("expected", "")))
        wrong = given
    else:
        return []
    same = [c for c in choices if _plain(c) == _plain(wrong)]
    if same:
        return same
    by_plain = {_plain(c): c for c in choices}
    return [by_plain[m] for m in close_matches(_plain(wrong), list(by_plain), n=3) if m in by_plain]


def _loc_text(loc: tuple) -> str:
    keep = [str(x) for x in loc if not (str(x) in _LOC_NOISE or "[" in str(x) or str(x).startswith(("_", "function-",
                                        "constrained-", "literal", "union")))]
    return ".".join(keep) or "(top level)"


def _explain(err: ValidationError, source: str, root: type[BaseModel] | None = None,
             what: str | None = None) -> InputError:
    """One paragraph from a pydantic error: each field, what is wrong, the allowed range, an excerpt."""
    root = root or Scenario
    lines: list[str] = []
    nears: list[list[str]] = []
    for e in err.errors(include_url=False):
        loc = _loc_text(e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        homes: list[str] = []
        if e["type"] == "extra_forbidden":
            homes = [h for h in _field_homes(root, str(e["loc"][-1])) if h != loc] if e["loc"] else []
            msg = (f"is not a field at this level; it belongs at {' or '.join(homes)} (move it there)" if homes
                   else "is not a scenario field (check the spelling)")
        elif e["type"] == "missing":
            msg = "is required"
        elif e["type"] in _RANGE_ERRORS:
            allowed = _field_range(root, e["loc"])
            if e["type"] == "finite_number":
                msg = "must be a finite number" + (f" (allowed: {allowed})" if allowed else "")
            elif allowed:
                msg = f"is out of range (allowed: {allowed})"
        given = e.get("input")
        quiet = e["type"] in ("missing", "value_error") or isinstance(given, dict)
        shown = "" if quiet else f" (got {excerpt(given)})"
        line = f"'{loc}' {msg}{shown}" if loc != "(top level)" or e["type"] != "value_error" else msg
        if line not in lines:
            lines.append(line)
            nears.append([] if homes else error_suggestions(e, root))
    lines, nears = lines[:6], nears[:6]
    matches = [m for near in nears for m in near]
    if len(lines) > 1:     # several fields: say which field each close match is for
        lines = [line + (f" (close: {', '.join(near)})" if near else "") for line, near in zip(lines, nears)]
    return InputError(what or f"scenario {source}", "; ".join(lines) + ".", "correct the field(s) named above",
                      list(dict.fromkeys(matches))[:5], see=CatalogHint("schema", "every field and its range"))


def scenario_from_dict(data: dict[str, Any], source: str = "(dict)") -> Scenario:
    if not isinstance(data, dict):
        raise InputError(f"scenario {source}", f"must be a mapping of fields, got {type(data).__name__}.",
                         "write `model:`, `task:` and `hardware:` at the top level.")
    try:
        return Scenario.model_validate(data)
    except ValidationError as err:
        raise _explain(err, source) from None
    except RecursionError:
        raise InputError(f"scenario {source}", "is nested too deeply.", "a scenario is a few levels deep.") from None


def load_scenario(path: str | Path) -> Scenario:
    """Read a YAML or JSON scenario file (safely: gpuplan.inputs)."""
    data = read_mapping_file(path, "scenario file")
    return scenario_from_dict(data, f"file '{short_path(path)}'")


# ---- the search's input ------------------------------------------------------------------------------------

OPEN_WORDS = ("auto", "any", "open")
# the fields recommend may search over (search/space.py): a list restricts them, null/"auto" opens them
SEARCHED = {
    "hardware": ("gpu", "count"),
    "parallel": ("tp", "pp", "cp", "ep", "zero", "offload"),
    "train": ("method", "recompute", "micro_batch", "optimizer", "precision", "attention"),
    "infer": ("engine", "weights", "kv_cache"),
}


def _open_to_none(v: Any) -> Any:
    return None if isinstance(v, str) and v.strip().lower() in OPEN_WORDS else v


def _dedupe(v: list) -> list:
    return list(dict.fromkeys(v))


def _one_or_many(elem: Any) -> Any:
    """A value, or a list of at most MAX_LIST distinct values, each checked like the full field."""
    many = Annotated[list[elem], Field(max_length=MAX_LIST), AfterValidator(_dedupe)]  # type: ignore[valid-type]
    return Annotated[Optional[Annotated[Union[Annotated[elem, Tag("_one")], Annotated[many, Tag("_many")]],
                                        Discriminator(lambda v: "_many" if isinstance(v, (list, tuple)) else "_one")]],
                     BeforeValidator(_open_to_none)]


def _partial_section(full: type[_Strict], searched: tuple[str, ...]) -> type[_Strict]:
    """`full` with every field optional and the searched ones list-valued (same checks, same text)."""
    fields: dict[str, Any] = {}
    for name, info in full.model_fields.items():
        elem = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
        if name in searched:
            extra = info.json_schema_extra
            text = (info.description or name) + "; a list restricts the search, null or auto leaves it open"
            fields[name] = (_one_or_many(elem), Field(None, description=text, json_schema_extra=extra))
        elif info.is_required():
            fields[name] = (Optional[elem], Field(None, description=info.description,
                                                  json_schema_extra=info.json_schema_extra))
        else:
            fields[name] = (info.annotation, info)
    return create_model(f"Partial{full.__name__}", __base__=_Strict, **fields)


PartialHardware = _partial_section(Hardware, SEARCHED["hardware"])
PartialParallel = _partial_section(Parallel, SEARCHED["parallel"])
PartialTrain = _partial_section(Train, SEARCHED["train"])
PartialInfer = _partial_section(Infer, SEARCHED["infer"])


class PartialScenario(_Strict):
    """The search's input (recommend, compare): a Scenario whose hardware and layout may be left open
    and whose searched fields (SEARCHED) may be lists of allowed values."""
    model: ModelRef
    task: Task = "train"
    hardware: Optional[PartialHardware] = None          # type: ignore[valid-type]
    parallel: Optional[PartialParallel] = None          # type: ignore[valid-type]
    train: Optional[PartialTrain] = None                # type: ignore[valid-type]
    infer: Optional[PartialInfer] = None                # type: ignore[valid-type]
    framework: Framework = "hf"
    tool: Optional[Tool] = Scenario.model_fields["tool"]
    cost: Cost = Cost()
    data: Data | None = Scenario.model_fields["data"]
    constraints: Constraints | None = None
    objective: Optional[Objective] = Scenario.model_fields["objective"]
    preset: Optional[Annotated[str, Field(max_length=64)]] = None
    overhead_bytes: int | None = Scenario.model_fields["overhead_bytes"]

    @model_validator(mode="after")
    def _fixed_layout(self):
        cp = self.parallel.cp if self.parallel is not None else None
        cps = cp if isinstance(cp, list) else [cp]
        if self.task == "infer" and any(c and c > 1 for c in cps):
            raise ValueError(_CP_INFER.format(cp=max(c for c in cps if c)))
        return self


def partial_from_dict(data: Any, source: str = "(recommend input)") -> dict[str, Any]:
    """Validate a partial scenario; the same dict back with values coerced, names normalised and list
    duplicates removed (the shape search/space.py reads: only the keys the user gave)."""
    if not isinstance(data, dict):
        raise InputError(f"scenario {source}", f"must be a mapping of fields, got {type(data).__name__}.",
                         "pass a dict with at least `model:` (hardware and layout may be left open).")
    try:
        parsed = PartialScenario.model_validate(data)
    except ValidationError as err:
        raise _explain(err, source, PartialScenario) from None
    except RecursionError:
        raise InputError(f"scenario {source}", "is nested too deeply.", "a scenario is a few levels deep.") from None
    return parsed.model_dump(exclude_unset=True)
