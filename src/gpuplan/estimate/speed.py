"""Speed engine: training step time / MFU and serving TTFT / TPOT / throughput (DESIGN §5).

Every equation, its source and its limits are in docs/speed.md; the calibrated efficiency factors
are data (estimate/data/efficiency.json, written by scripts/calibrate_speed.py). Pure functions:
no I/O except reading that packaged data file once.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ..dtypes import kv_bytes, weight_format
from ..models import ModelSpec
from .calibration import Calibration
from .calibration import family_entry as _fam
from .calibration import load_efficiency
from .calibration import packaged as _packaged_efficiency
from .comm import (LOCAL, all_gather_time, all_reduce_time, all_to_all_time, all_to_all_time_nodes,
                   group_link, p2p_time, reduce_scatter_time)
from .host_issue import hf_decode_version_scale, reference_op_s
from .engine_host import (SGLANG_V03_GRAPH_MAX_BS, VLLM_EAGER_LAYER_S, chat_template_parse_s, eager_issue_layer_s,
                          engine_host, sglang_v03_max_running_requests, step_with_host, vllm_v1_max_capture_size)
from .vllm_v0 import MAX_NUM_SEQS as V0_MAX_NUM_SEQS, chunked_prefill_budget as v0_chunked_budget
from .vllm_v0 import offline_run as v0_offline_run
from .rocm_fp8_gemm import V0_PAD_ROWS, linear_seconds as rocm_fp8_linear_s, measured as rocm_fp8_measured
from .rocm_fp8_gemm import vllm_linear_shapes
from . import dtensor_tp
from . import elementwise
from .context_parallel import te_p2p_ring_time
from . import encdec as encdec_flops
from .flops import (TrainingFlops, attention_flops_per_token_forward, attention_span,
                    matmul_params_active, training_flops_per_token)
from . import fp8 as fp8_recipes
from . import optim
from .attention_kernels import (BACKWARD_FLOP_RATIO, attention_time, backward_flop_ratio, default_kernel,
                                engine_kernel, fp8_context_attention, fp8_forward_speedup, kernel_rates,
                                masked_sdpa_kernel,
                                reference_gpu)
from .layout import grad_accum_steps
from .lora_targets import lora_params, lora_role, scenario_lora_targets
from .datafiles import rows as data_rows
from .moe import (router_cast_bytes_per_element, unfused_probs_weighting_bytes_per_element,
                  attention_dp_exchange_bytes, dispatch_copies, gemm_input_bytes, dispatcher_sms, ep_rank_imbalance,
                  EXPERT_GLU_CLAMP_FORWARD_BYTES, expert_bias_passes_per_row, expert_glu_clamp_bytes_per_element,
                  fp8_pad_passes_per_row, fused_moe_pass_bytes, hybridep_bytes, hybridep_rates, measured_rows_half,
                  overlap_unpaired_share, overlapped_exposed, padded_rows_per_expert, permute_bytes,
                  serving_moe_kernel, triton_moe_block_m)
from .trtllm_bench import engine_limits as trtllm_engine_limits
from .trtllm_bench import captured_sizes as trtllm_captured_sizes
from .trtllm_bench import padded_batch as trtllm_padded_batch
from .trtllm_bench import offline_run_seconds as trtllm_offline_run
from .trtllm_bench import prompt_step_share as trtllm_prompt_share
from .trtllm_bench import phase_imbalance as trtllm_phase_imbalance
from .quant_kernels import (bnb_dequant_issue_excess_s, bnb_gemv_issue_excess_s, dequant_extra_bytes,
                            gptq_extra_host_ops, gptq_kernel_extra_bytes, gptq_row_pass_excess_s, hf_cat_seconds,
                            hf_kv_passes, host_issue_per_linear, is_bitsandbytes, materialises_16_bit,
                            torch_cat_per_element,
                            torch_cat_read_rate, trtllm_nvfp4_quantize_bytes)
from .recompute import RecomputePlan, recompute_plan
from .results import PerformanceEstimate
from .sustained_gemm import fp8_vs_16bit_for

__all__ = ["estimate_performance", "train_performance", "infer_performance", "serving_curve", "serving_model",
           "performance_details", "clock_factor",
           "load_efficiency", "training_flops_per_token", "pipeline_bubble_fraction",
           "expected_experts_touched", "adp_imbalance", "weight_bytes"]

# ---------------------------------------------------------------------------------------------
# calibrated factors


# Not fitted: named constants with their source.
OFFLOAD_PCIE_FALLBACK_BYTES_PER_S = 25e9   # host<->GPU copy rate of PCIe 4.0 x16 (~25 GB/s achieved of 32)
                                           # for a catalog row without a PCIe figure
FORWARD_SHARE = 1.0 / 3.0                  # forward's share of fwd+bwd work (backward = 2 x forward,
                                           # Narayanan et al. 2021 §3.5); also the backward's 2/3
TP_ALL_REDUCES_PER_LAYER = 4               # Megatron TP: 2 in forward (after attention, after MLP), 2 in
                                           # backward (Shoeybi et al. 2019 §3); full recompute adds the forward 2
QLORA_DEQUANT_BYTES_PER_PARAM = 0.5 + 2.0 + 2.0   # read the 4-bit weight, write and read its 16-bit copy

def _dtype_class(dtype: str) -> str:
    d = dtype.lower()
    if d in ("bf16", "fp16", "fp16_fp32acc"):
        return "bf16"
    if d.startswith("fp8"):
        return "fp8"
    return d


# ---------------------------------------------------------------------------------------------
# hardware helpers (tolerant of catalog records that leave a field empty)


def _family(gpu: Any) -> str:
    return str(getattr(gpu, "family", "default") or "default").lower()


def peak_flops(gpu: Any, dtype: str) -> float:
    """Dense tensor peak for `dtype` (GeForce: the fp32-accumulate rate for 16-bit training).
    Falls back to the 16-bit rate when the GPU has no unit for `dtype` (e.g. FP8 on Ampere)."""
    fn = getattr(gpu, "matmul_flops_per_s", None)
    for dt in (dtype, "bf16", "fp16", "fp32"):
        v = None
        if fn is not None:
            try:
                v = fn(dt)
            except Exception:
                v = None
        if not v:
            v = (getattr(gpu, "peak_flops_per_s", {}) or {}).get(dt)
        if v:
            return float(v)
    raise ValueError(f"GPU '{getattr(gpu, 'id', gpu)}' lists no tensor peak; cannot estimate speed.")


def clock_factor(params: Mapping[str, Any], gpu: Any) -> float:
    """Sustained fraction of the datasheet (boost-clock) tensor rate under the board power limit:
    min(1, k_family · TDP / peak16), k = sustainable dense 16-bit tensor FLOP/s per watt of the
    family's process (calibrated; docs/speed.md §2.1). Cards whose 16-bit peak per watt is above
    what the silicon sustains (H100 PCIe at 350 W, RTX 6000 Ada at 300 W) run their GEMMs at a
    lower clock; a family without an entry is never capped. Applies to compute, never to memory."""
    k = params["power_flops_per_watt"].get(_family(gpu))     # a family without an entry is never capped
    tdp = getattr(gpu, "tdp_w", None)
    peaks = getattr(gpu, "peak_flops_per_s", {}) or {}
    p16 = peaks.get("fp16") or peaks.get("bf16")
    if not k or not tdp or not p16:
        return 1.0
    return min(1.0, float(k) * float(tdp) / float(p16))


def _compute_dtype(gpu: Any, dtype: str) -> str:
    """The dtype the matmuls actually run in on this GPU (FP8/FP4 fall back to 16-bit)."""
    peaks = getattr(gpu, "peak_flops_per_s", {}) or {}
    if dtype in ("fp8", "fp4", "int8") and not peaks.get(dtype):
        return "fp16" if dtype != "fp4" or not peaks.get("fp8") else "fp8"
    return dtype


def _bw(gpu: Any) -> float:
    return float(gpu.mem_bandwidth_bytes_per_s)


def memory_rate(params: Mapping[str, Any], gpu: Any) -> float:
    """Bytes per second a memory-bound kernel moves on this GPU: its HBM bandwidth x the family's memory
    efficiency (efficiency.json `memory`)."""
    return _bw(gpu) * _fam(params["memory"], _family(gpu))


def _gpus_per_node(scn: Any, gpu: Any) -> int:
    if scn.hardware.gpus_per_node:
        return int(scn.hardware.gpus_per_node)
    try:
        from ..hardware import default_node_for
        node = default_node_for(gpu)
        n = getattr(node, "gpus_per_node", None)
        if n:
            return int(n)
    except Exception:
        pass
    return int(min(scn.hardware.count, max(1, int(getattr(gpu, "scale_up_max_gpus", 1) or 1)), 8))


def _host_speed(scn: Any, gpu: Any) -> tuple[float, str]:
    """(host issue speed relative to the reference host, the host it describes)."""
    from ..hardware.hosts import host_speed
    hw = getattr(scn, "hardware", None)
    return host_speed(getattr(hw, "host_cpu", None), getattr(hw, "host_single_thread_score", None),
                      getattr(gpu, "segment", "datacenter"), getattr(gpu, "id", None))


def _network(scn: Any, gpu: Any) -> Any:
    try:
        from ..hardware import default_network_for, get_network
        if scn.hardware.network:
            return get_network(scn.hardware.network)
        return default_network_for(gpu)
    except Exception:
        return None


# ---------------------------------------------------------------------------------------------
# matmul efficiency and per-operation roofline


def dim_half(params: Mapping[str, Any], dtype: str) -> float:
    """The size constant d0 of K/(K + d0)·N/(N + d0) for a GEMM whose tensor-core inputs are `dtype`: FP8 GEMMs
    take their own measured constant `matmul_dim_half_fp8` (docs/speed.md §2.1: twice the math per byte and per
    MMA instruction, so a narrow FP8 GEMM falls further below its large-GEMM rate), FP4 GEMMs (NVFP4 / MXFP4 on
    data-centre Blackwell) `matmul_dim_half_fp4` (docs/speed.md §2.1, TensorRT-LLM's NVFP4 linear on a B200 against
    bf16 on the same shapes: its 4x the math per operand byte and larger MMA tiles), every other format d0
    (`matmul_dim_half`); a calibration without the FP8 / FP4 entry gives that format d0 too."""
    d0 = float(params["matmul_dim_half"])
    if _dtype_class(dtype) == "fp8" and "matmul_dim_half_fp8" in params:
        return float(params["matmul_dim_half_fp8"])
    if _dtype_class(dtype) == "fp4" and "matmul_dim_half_fp4" in params:
        return float(params["matmul_dim_half_fp4"])
    return d0


def gemm_efficiency(params: Mapping[str, Any], family: str, dtype: str, m: float, k: float, n: float,
                    grouped: bool = False, rows_half: float | None = None, size_dtype: str | None = None) -> float:
    """η = η_max(family, dtype) · Π_{x∈(K,N)} x / (x + d0): a penalty for narrow weight matrices
    (tile and wave quantisation, short inner loops) that vanishes for large dimensions
    (docs/speed.md §2.1). d0 is that of the format the kernel multiplies (`size_dtype`, default `dtype`:
    training FP8 GEMMs read the 16-bit table's η but are FP8 kernels; dim_half). For a dense GEMM the row count M is left to the roofline: a short-M GEMM
    is bounded by reading its weights, which the memory term captures. A grouped expert GEMM
    (`grouped=True`, MoE) splits the step's rows over the experts, each group a GEMM of only
    tokens·k/E rows with its own partial tiles and pipeline fill: the same size form is applied to
    M as well, M/(M + d0_M), d0_M = `matmul_rows_half` (prior: d0, the same tile/wave physics).
    `rows_half` overrides d0_M: training passes its own measured d0 (training_rows_half, an H200 sweep), since
    `matmul_rows_half` is serving's (DeepGEMM's curve at TensorRT-LLM's tile-padded rows; fitted on serving rows
    until 2026-12-04)."""
    dc = _dtype_class(dtype)
    table = _fam(params["matmul"], family)
    eta = table[dc] if dc in table else params["matmul"]["default"][dc]
    d0 = dim_half(params, size_dtype or dtype)
    g = 1.0
    for x in (k, n):
        g *= x / (x + d0) if d0 > 0 else 1.0
    if grouped:
        if rows_half is None:   # a calibration from before the grouped-GEMM fit may lack d0_M: prior d0
            rows_half = params["matmul_rows_half"] if "matmul_rows_half" in params else float(params["matmul_dim_half"])
        d0m = float(rows_half)
        mm = max(1.0, float(m))
        g *= mm / (mm + d0m) if d0m > 0 else 1.0
    return max(1e-3, eta * g)


def training_rows_half(params: Mapping[str, Any], local_experts: float) -> float:
    """d0_M of training's grouped expert GEMMs (M = rows per local expert): the measured total-rows constant D of
    M_tot/(M_tot + D) over the `local_experts` groups of one grouped call (moe.measured_total_rows_half, an H200
    torch._grouped_mm sweep), D / local_experts. `matmul_rows_half` (serving's d0_M, DeepGEMM's measured
    grouped-GEMM curve since 2026-12-04, fitted on TensorRT-LLM rows before: docs/speed.md §3.25) is not used here."""
    from .moe import measured_total_rows_half
    return measured_total_rows_half(float(params["matmul_dim_half"])) / max(1.0, float(local_experts))


def gemm_time(params: Mapping[str, Any], gpu: Any, dtype: str, m: float, k: float, n: float,
              count: float = 1.0, weight_bytes_per_el: float | None = None, act_bytes: float = 2.0,
              grouped: bool = False, eff_dtype: str | None = None, eta_scale: float = 1.0,
              rows_half: float | None = None) -> float:
    """Roofline time of `count` [m,k]x[k,n] GEMMs: max(FLOPs/(peak·η), bytes/(BW·η_mem)).
    `eff_dtype`: the format whose efficiency table applies (training FP8 GEMMs take the 16-bit
    kernels' efficiency: the FP8 table is fitted on inference engines; the size constant stays `dtype`'s,
    dim_half); `eta_scale` multiplies η
    (training FP8 on a family whose vendor publishes FP8 vs 16-bit sustained rates: sustained_gemm.py)."""
    if m <= 0 or count <= 0:
        return 0.0
    fam = _family(gpu)
    flops = 2.0 * m * k * n * count
    eta = gemm_efficiency(params, fam, eff_dtype or dtype, m, k, n, grouped, rows_half, size_dtype=dtype) * eta_scale
    t_c = flops / (peak_flops(gpu, dtype) * eta * clock_factor(params, gpu))
    wb = act_bytes if weight_bytes_per_el is None else weight_bytes_per_el
    bytes_ = count * (k * n * wb + (m * k + m * n) * act_bytes)
    t_m = bytes_ / memory_rate(params, gpu)
    return max(t_c, t_m)


# ---------------------------------------------------------------------------------------------
# training


# TensorRT-LLM's NVFP4 fused MoE on data-centre Blackwell, at its published latency curve (docs/speed.md §3.23):
# flashinfer PR 5301 times `trtllm_fp4_block_scale_moe` (TensorRT-LLM's TRTLLM-Gen NVFP4 MoE kernels) on one B300
# at DeepSeek-V3's MoE shape, 32 local experts, 1 ... 16384 tokens (estimate/data/fused_moe_measured.csv). The engine
# prices that call (fp4_moe_call_seconds: the tile-padded grouped GEMMs at the measured grouped-GEMM row curve and the
# fused step's memory-bound passes); the published time less the priced passes, over the priced GEMMs, is how much
# slower than priced the kernel runs at that call's mean routed rows per expert (fp4_moe_rows_scale).
FUSED_MOE_TABLE = "fused_moe_measured.csv"


def fp4_moe_call_seconds(params: Mapping[str, Any], gpu: Any, blocks: Sequence[tuple[float, float]], experts: int,
                         top_k: int, local_experts: int, tokens: int) -> tuple[float, float]:
    """(expert GEMMs, memory-bound passes) seconds of one NVFP4 fused-MoE call of TensorRT-LLM on `gpu` over `tokens`
    tokens, each routed to `top_k` of `experts` experts, `local_experts` of them on this GPU, the expert linears
    `blocks` ((K, N) each, as the model lists them: gate, up, down), as _Serving prices a prompt chunk's: every
    running expert's rows padded to the kernel's M tile (moe.padded_rows_per_expert), the GEMMs at the NVFP4 rate
    with the measured grouped-GEMM row curve (moe.measured_rows_half), the passes (moe.fused_moe_pass_bytes) at the
    memory rate."""
    tile = serving_moe_kernel("trtllm").tile_for("blackwell-dc", "fp4")
    per_expert = padded_rows_per_expert(int(tokens), top_k, experts, tile)
    touched = 1.0 - (1.0 - top_k / experts) ** tokens
    m_eff = per_expert / touched
    peak = peak_flops(gpu, "fp4") * clock_factor(params, gpu)
    fam = _family(gpu)
    gemm = sum(2.0 * per_expert * local_experts * k * n
               / (peak * gemm_efficiency(params, fam, "fp4", m_eff, k, n, grouped=True, rows_half=measured_rows_half()))
               for k, n in blocks)
    hidden = blocks[-1][1]
    n1 = sum(n for k, n in blocks if k == hidden)
    inter = sum(k for k, n in blocks if n == hidden)
    routed = tokens * top_k * local_experts / experts
    passes = fused_moe_pass_bytes(tokens, routed, hidden, n1, inter, gemm_input_bytes("fp4"), 2.0, quantize_input=True,
                                  output_tokens=tokens) / memory_rate(params, gpu)
    return gemm, passes


def _fp4_moe_scale_points(params: Mapping[str, Any]) -> list[tuple[float, float]]:
    """(mean routed rows per expert, published GEMM seconds / priced GEMM seconds) at the rows of FUSED_MOE_TABLE with
    at least one routed row per expert. Below that the published call is its fixed cost (routing, quantization,
    launches: 0.026 ms at one token) and a read of the few touched experts, which the engine prices with the weights
    and the per-layer overhead, not as GEMM time; the scale is held at its one-row value there."""
    from ..hardware import get_gpu
    pts = []
    for r in data_rows(FUSED_MOE_TABLE):
        h, i, e, k, loc, t = (int(r[c]) for c in ("hidden", "intermediate", "experts", "top_k", "local_experts",
                                                   "tokens"))
        if t * k < e:
            continue
        gemm, passes = fp4_moe_call_seconds(params, get_gpu(r["gpu"]), ((h, i), (h, i), (i, h)), e, k, loc, t)
        pts.append((t * k / e, max(float(r["latency_ms"]) * 1e-3 - passes, 0.0) / gemm))
    return sorted(pts)


_FP4_MOE_SCALE_CACHE: dict[str, list[tuple[float, float]]] = {}


def fp4_moe_rows_scale(params: Mapping[str, Any], rows_per_expert: float) -> float:
    """How much longer than priced TensorRT-LLM's NVFP4 grouped expert GEMMs run at `rows_per_expert` mean routed rows
    per expert (_fp4_moe_scale_points): interpolated in log rows between the published points, held at both ends."""
    key = repr((_fam(params["matmul"], "blackwell").get("fp4"), params["matmul_dim_half"], dim_half(params, "fp4"),
                _fam(params["memory"], "blackwell"), params["power_flops_per_watt"].get("blackwell")))
    pts = _FP4_MOE_SCALE_CACHE.get(key)
    if pts is None:
        pts = _FP4_MOE_SCALE_CACHE[key] = _fp4_moe_scale_points(params)
    rows, scale = zip(*pts)
    return float(np.interp(math.log(max(float(rows_per_expert), 1e-9)), np.log(rows), scale))


def pipeline_bubble_fraction(pp: int, microbatches: int, vpp: int = 1) -> float:
    """Share of the step spent idle in the pipeline: (pp−1)/(m+pp−1) for 1F1B/GPipe, the bubble
    time divided by vpp for the interleaved schedule (Narayanan et al. 2021 §2.2)."""
    if pp <= 1:
        return 0.0
    bubble = (pp - 1) / vpp
    return bubble / (microbatches + bubble)


def _mlp_width_active(model: ModelSpec, adapted: frozenset[str] | None = None) -> float:
    """The MLP width a token passes per layer (routed experts at their active share); with `adapted` (resolved LoRA
    targets, lora_targets.py) only the MLPs whose linears carry adapters."""
    per_layer = sum(b.total * b.active_fraction for b in model.blocks
                    if b.kind in ("mlp", "expert", "shared_expert") and b.layer_scope == "layer"
                    and (adapted is None or lora_role(b) in adapted)) / model.num_layers
    return per_layer / ((3 if model.gated_mlp else 2) * model.hidden_size)


@dataclass(frozen=True)
class _Train:
    """What every part of the training step model needs, derived once from the scenario."""
    scn: Any
    model: ModelSpec
    gpu: Any
    P: Mapping[str, Any]
    net: Any
    gpn: int
    m: int                  # micro-batches per optimizer step (gradient accumulation)
    tokens: float           # tokens each GPU processes per micro-batch
    mm_dtype: str           # tensor-core format of the matmuls
    attn_dtype: str
    act_b: float            # bytes per activation element
    grad_b: float           # bytes per gradient element
    frozen: bool            # LoRA/QLoRA: the base gets no weight gradient
    eta_mem: float
    L_stage: float          # layers on the bottleneck pipeline stage
    params_local: float     # parameters held per tp x pp rank (routed experts: E/ep of them under EP)
    trainable_local: float
    expert_local: float     # of params_local: routed-expert parameters (0 without expert parallelism)
    rc: RecomputePlan       # what activation checkpointing recomputes (estimate/recompute.py)
    fp8: fp8_recipes.Fp8Recipe | None = None   # the FP8 recipe timed (estimate/fp8.py); None off FP8

    @property
    def par(self) -> Any:
        return self.scn.parallel

    @property
    def tr(self) -> Any:
        return self.scn.train


def _train_setup(scn: Any, model: ModelSpec, gpu: Any, P: Mapping[str, Any], net: Any,
                 notes: list[str]) -> _Train:
    tr, par, dp = scn.train, scn.parallel, scn.dp
    s, mb = tr.seq_len, tr.micro_batch
    gb = tr.global_batch or mb * dp
    m = grad_accum_steps(gb, mb, dp)
    if m * mb * dp != gb:
        notes.append(f"global_batch {gb} is not a multiple of micro_batch×dp = {mb * dp}; using {m} micro-batches.")
    prec = tr.precision
    mm_dtype = _compute_dtype(gpu, {"fp32": "fp32", "fp8": "fp8"}.get(prec, "bf16" if prec == "bf16" else "fp16"))
    if prec == "fp8" and mm_dtype != "fp8":
        notes.append(f"{getattr(gpu, 'id', 'this GPU')} has no FP8 tensor cores; FP8 training timed at 16-bit.")
    frozen = tr.method in ("lora", "qlora")
    tp_pp = par.tp * par.pp
    # under EP (or an expert TP other than tp) the routed experts have their own grid: E/ep experts per rank,
    # each split over etp (layout.expert_split; Megatron's MoE parallel folding)
    experts = sum(b.total for b in model.blocks if b.kind == "expert") if _folded(model, par) else 0.0
    expert_local = experts / (par.ep * par.expert_tp * par.pp)
    params_local = (model.params_total - experts) / tp_pp + expert_local
    trainable_local = lora_params(model, tr.lora_rank, scenario_lora_targets(scn, model)) / tp_pp if frozen else params_local
    fp8 = None
    if mm_dtype == "fp8":
        name, note = fp8_recipes.resolve_recipe(getattr(tr, "fp8_recipe", "auto"), _family(gpu))
        if note:
            notes.append(note)
        fp8 = fp8_recipes.recipe(name)
    return _Train(scn, model, gpu, P, net, _gpus_per_node(scn, gpu), m, mb * s / par.cp, mm_dtype,
                  "fp32" if prec == "fp32" else ("fp16" if prec == "fp16" else "bf16"),
                  4.0 if prec == "fp32" else 2.0, 2.0 if prec in ("bf16", "fp16", "fp8") else 4.0, frozen,
                  _fam(P["memory"], _family(gpu)), model.num_layers / par.pp, params_local, trainable_local,
                  expert_local if not frozen else 0.0,
                  recompute_plan(scn.framework, tr.recompute, model, model.num_layers / par.pp,
                                 tr.recompute_layers, tr.recompute_group,
                                 getattr(tr, "recompute_modules", None)), fp8)


def _folded(model: ModelSpec, par: Any) -> bool:
    """True when the routed experts do not simply follow the dense layers' TP split: expert parallelism, or an
    expert TP other than tp (Megatron's expert grid ETP x EP x expert-DP over tp x cp x dp)."""
    return bool(model.is_moe) and (par.ep > 1 or par.expert_tp != par.tp)


def _linear_time(c: _Train) -> float:
    """Forward + backward (+ recompute) time of every linear layer for one micro-batch."""
    tp, ep, pp, etp = c.par.tp, c.par.ep, c.par.pp, c.par.expert_tp
    bwd_factor = 1.0 if c.frozen else 2.0       # frozen base: data gradient only
    t_lin = 0.0
    for b in c.model.blocks:
        if b.linear is None or b.layer_scope == "vision":
            continue
        k_in, n_out = b.linear
        split = etp if b.kind == "expert" else tp
        if k_in >= n_out:
            k_in = k_in / split
        else:
            n_out = n_out / split
        per_stage = pp if b.layer_scope == "layer" else 1
        if b.kind == "expert":
            # rows of one local expert: each rank dispatches its tokens/tp sequence-parallel share (k routed
            # copies), the all-to-all brings those of its ep peers for its E/ep experts and the expert-TP
            # all-gather those of its etp peers (MoEAlltoAllTokenDispatcher, token_dispatcher.py @core_v0.19.0)
            m_rows = c.tokens / tp * b.active_fraction * ep * etp
            count = b.count / ep / per_stage * _routed_rows(c)   # the busiest EP rank (or the capacity) sets the pace
        else:
            m_rows, count = c.tokens * _stream_share(c, b), b.count / per_stage
        rows_half = training_rows_half(c.P, b.count / ep) if b.kind == "expert" else None
        dtype, eff = c.mm_dtype, None
        if c.mm_dtype == "fp8":
            # FP8 training recipes (torchao Float8Linear, Transformer Engine) convert the decoder
            # layers' linears; the lm_head stays 16-bit (torchtitan filters "output"; Megatron's
            # output layer is not a TE fp8 module)
            dtype, eff = (c.attn_dtype, None) if b.kind == "lm_head" else ("fp8", c.attn_dtype)
        # the 16-bit efficiency times the published FP8-vs-16-bit sustained ratio (AMD MAF, MAMF on Hopper;
        # the family's part nearest in power density; 1.0 where none is published)
        t_f = gemm_time(c.P, c.gpu, dtype, m_rows, k_in, n_out, count, act_bytes=c.act_b,
                        grouped=b.kind == "expert", eff_dtype=eff,
                        eta_scale=fp8_vs_16bit_for(c.gpu, (dim_half(c.P, eff), dim_half(c.P, "fp8")))
                        if eff is not None else 1.0,
                        rows_half=rows_half)
        bwd = bwd_factor if (b.kind != "lm_head" or not c.frozen) else 1.0
        if dtype == "fp8" and c.fp8 is not None and c.fp8.wgrad_bf16 and bwd > 1.0:
            # the weight-gradient GEMM of this linear runs in bf16 (torchao rowwise_with_gw_hp)
            t_wgrad = gemm_time(c.P, c.gpu, c.attn_dtype, m_rows, k_in, n_out, count, act_bytes=c.act_b,
                                grouped=b.kind == "expert", rows_half=rows_half)
            t_lin += t_f * bwd + t_wgrad
        else:
            t_lin += t_f * (1.0 + bwd)
        if b.layer_scope == "layer":
            t_lin += t_f * c.rc.linear_share
    return t_lin


def attention_kernel(scn: Any, gpu: Any = None) -> str:
    """The fused attention kernel a training scenario runs on `gpu` (estimate/attention_kernels.py)."""
    k = getattr(scn.train, "attention_kernel", "auto")
    if k != "auto":
        return k
    if gpu is None:
        return default_kernel(scn.framework)
    return default_kernel(scn.framework, _family(gpu), getattr(scn.train, "torch_version", None), _kernel_family(gpu))


def _fused_kernel(model: ModelSpec, kernel: str | None) -> str | None:
    """The fused attention kernel, or None where the model runs none: eager-only architectures
    (materialised scores) and T5 (SDPA's memory-efficient kernel, which takes its position bias)."""
    if kernel is None or model.traits.eager_attention_only or model.is_encoder_decoder:
        return None
    return kernel


def _kernel_family(gpu: Any) -> str:
    """The key of the published attention-kernel figures (attention_kernels.csv) for `gpu`: its family, except
    that data-centre Blackwell (sm_100/sm_103: B200, B300, GB200, GB300) is told apart from the GeForce,
    workstation and edge Blackwell parts, whose kernels are different code (sm_120/sm_110, no tcgen05), and
    compute-capability 8.0 Ampere (A100, A800, A30) from the sm86/sm87 parts, for which FlashAttention-2
    picks other tiles (estimate/attention_kernels.py)."""
    fam = _family(gpu)
    if fam == "blackwell" and getattr(gpu, "segment", None) == "datacenter":
        return "blackwell-dc"
    if fam == "ampere" and _cuda_cc(gpu) == "8.0":
        return "ampere-sm80"
    return fam


def _cuda_cc(gpu: Any) -> str | None:
    from ..errors import InputError
    from ..hardware.software import support_for
    try:
        return support_for(gpu).cuda_cc
    except InputError:
        return None


def _kernel_rates(c: _Train) -> tuple[float, float] | None:
    """Published (forward, backward) FLOP/s of the scenario's fused attention kernel on this GPU, or None
    (eager/math attention, or no published figures for the GPU family: the calibrated efficiency)."""
    if c.tr.attention == "eager" or c.attn_dtype == "fp32":
        return None
    kernel = _fused_kernel(c.model, attention_kernel(c.scn, c.gpu))
    scale = _kernel_scale(kernel, c.gpu, c.P)
    # the kernel runs at the length it attends over: a packed row's documents (cu_seqlens), not the row
    return None if scale is None else kernel_rates(kernel, _kernel_family(c.gpu), attention_span(c.tr) / c.par.cp,
                                                   scale, c.model.head_dim or None)


def _kernel_scale(kernel: str | None, gpu: Any, P: Mapping[str, Any]) -> float | None:
    """How much faster `gpu` runs `kernel` than the GPU its figures were published on (16-bit peak x
    sustained clock); None when no figures are published for the GPU's family."""
    ref = reference_gpu(kernel, _kernel_family(gpu)) if kernel else None
    if ref is None:
        return None
    from ..hardware import get_gpu
    ref_gpu = get_gpu(ref)
    return (peak_flops(gpu, "bf16") * clock_factor(P, gpu)) / (peak_flops(ref_gpu, "bf16") * clock_factor(P, ref_gpu))


def encdec_training_flops(model: ModelSpec, src: int, tgt: int, recompute: str, method: str) -> TrainingFlops:
    """Encoder-decoder FLOPs per input token (tokens_per_step counts input tokens, as the T5 paper counts
    its 2^16-token batches): one sequence's forward (encoder over src, decoder over tgt, cross-attention
    k/v over src; estimate/encdec.py) x 3 for training (x 2 for a frozen base's matmuls), + one forward under
    full recompute."""
    mm = encdec_flops.matmul_flops_forward(model, src, tgt) / src
    attn = encdec_flops.attention_flops_forward(model, src, tgt) / src
    model_flops = 3.0 * (mm + attn) if method == "full" else 2.0 * mm + 3.0 * attn
    extra = {"none": 0.0, "selective": mm + attn, "full": mm + attn}[recompute]
    return TrainingFlops(model_flops, model_flops + extra, mm, attn)


def _stream_share(c: _Train, b: Any) -> float:
    """Rows of a linear relative to c.tokens (micro-batch x seq_len): an encoder-decoder's decoder blocks run
    over the target (train.target_len), its encoder and cross-attention k/v over the input (seq_len)."""
    if not c.model.is_encoder_decoder or b.stream != "decoder":
        return 1.0
    tr = c.tr
    return (tr.target_len or tr.seq_len) / tr.seq_len


def sdpa_masked_windows(c: _Train) -> tuple[int, ...]:
    """The windows of the layers to which transformers' SDPA path hands an explicit mask (attention `sdpa` on HF
    modeling code; estimate/attention_kernels.py MASKED_SDPA_KERNEL): sliding-window layers whose keys reach the
    window (masking_utils._ignore_causal_mask_sdpa, transformers 5.25.0). Full-attention layers get is_causal.
    Unsloth runs its own attention, not transformers' sdpa_attention_forward."""
    tr = c.tr
    if (tr.attention != "sdpa" or c.scn.framework != "hf" or getattr(c.scn, "tool", None) == "unsloth"
            or c.model.is_encoder_decoder or c.model.traits.eager_attention_only or c.attn_dtype == "fp32"):
        return ()
    keys = attention_span(tr)
    return tuple(w for w in c.model.attention_windows if w and keys >= w)


def _masked_sdpa_time(c: _Train, windows: tuple[int, ...]) -> tuple[float, float] | None:
    """(seconds of the masked layers' attention, forward FLOPs of the other layers' causal attention) or None where
    the masked kernel is not measured. A masked layer computes the whole s x s square (no tile skipped:
    attention_kernels.py) at the `cudnn-masked` rate of its head dimension's tile; the other layers (no window,
    or a window the keys do not reach) are plain causal, (s + 1) / 2 keys a query."""
    fam = _kernel_family(c.gpu)
    kernel = masked_sdpa_kernel(fam, getattr(c.tr, "torch_version", None))
    scale = _kernel_scale(kernel, c.gpu, c.P) if kernel else None
    if scale is None:
        return None
    s, m = attention_span(c.tr), c.model
    per_pair = 2.0 * m.num_heads * (m.head_dim + m.v_head_dim) * c.tokens / c.par.tp / c.par.pp
    square = per_pair * s * len(windows)
    rates = kernel_rates(kernel, fam, s, scale, m.head_dim)
    unmasked = per_pair * (len(m.attention_windows) - len(windows)) * (s + 1) / 2
    return attention_time(square, c.rc.attention_share, rates), unmasked


def _attention_time(c: _Train) -> float:
    tr = c.tr
    attn_f = attention_flops_per_token_forward(c.model, attention_span(tr)) * c.tokens / c.par.tp / c.par.pp
    masked = sdpa_masked_windows(c)
    hit = _masked_sdpa_time(c, masked) if masked else None
    if hit is not None:
        return hit[0] + _fused_attention_time(c, hit[1])
    return _fused_attention_time(c, attn_f)


def _fused_attention_time(c: _Train, attn_f: float) -> float:
    """Seconds of `attn_f` forward attention FLOPs (causal, window-capped) at the scenario's attention kernel."""
    tr = c.tr
    if c.model.is_encoder_decoder:
        attn_f = encdec_flops.attention_flops_forward(c.model, tr.seq_len, tr.target_len or tr.seq_len) \
            * tr.micro_batch / c.par.tp
    rates = _kernel_rates(c)
    fused = None if (tr.attention == "eager" or c.attn_dtype == "fp32") else \
        _fused_kernel(c.model, attention_kernel(c.scn, c.gpu))
    if rates is not None:
        # a published backward rate already holds the kernel's own work (AOTriton's seven tile matmuls included):
        # the table's convention, 2.5 x the forward FLOPs; a forward that is not published keeps the calibrated rate
        fwd = rates[0] if rates[0] is not None else _calibrated_attention_rate(c)
        return attention_time(attn_f, c.rc.attention_share, (fwd, rates[1]))
    bwd_ratio = backward_flop_ratio(fused)
    t_attn_f = attn_f / _calibrated_attention_rate(c)
    # calibrated: backward = 2x the forward time, as on the FlashAttention-2 rows η_attn was fitted on; a kernel
    # whose backward does more tile matmuls (AOTriton's split dK/dV + dQ: 7 to FA2's 5) takes the difference
    return t_attn_f * (1.0 + c.rc.attention_share + 2.0 * bwd_ratio / BACKWARD_FLOP_RATIO)


def _calibrated_attention_rate(c: _Train) -> float:
    """Forward attention FLOP/s at the calibrated efficiency η_attn of the GPU family (× eager_attention_scale for
    materialised scores)."""
    eta_attn = _fam(c.P["attention"], _family(c.gpu))
    if c.tr.attention == "eager":
        eta_attn *= c.P["eager_attention_scale"]
    return peak_flops(c.gpu, c.attn_dtype) * eta_attn * clock_factor(c.P, c.gpu)


def _fp8_cast_bytes(c: _Train) -> float:
    """HBM bytes of the FP8 casts per micro-batch (estimate/fp8.py, torchao's float8 roofline): the input
    and the output gradient of every decoder linear, the inputs again for the linears the checkpointing
    recomputes, and every weight (re-cast each micro-batch); rowwise adds the re-scaling pass over each
    backward GEMM's 16-bit output. The lm_head stays 16-bit and casts nothing."""
    r = c.fp8
    if c.mm_dtype != "fp8" or r is None:
        return 0.0
    tp, act, recast, w, rescale = c.par.tp, 0.0, 0.0, 0.0, 0.0
    for b in c.model.blocks:
        if b.linear is None or b.layer_scope != "layer":
            continue
        k_in, n_out = b.linear
        share = b.count * b.active_fraction / c.par.pp
        act += share * c.tokens * (k_in + n_out) / tp
        recast += share * c.tokens * k_in / tp * c.rc.linear_share
        numel = b.numel * b.count / (c.par.pp * (c.par.ep * c.par.expert_tp if b.kind == "expert" else tp))
        w += numel
        if r.bwd_rescale:   # grad-input output (tokens x in) and grad-weight output (in x out)
            rescale += share * c.tokens * k_in / tp + (0.0 if c.frozen else numel)
    return (fp8_recipes.cast_bytes(r, act, recast, w, amax_saved=c.rc.kind == "selective-op")
            + fp8_recipes.BWD_RESCALE_BYTES_PER_ELEMENT * rescale)


def _moe_layers_stage(c: _Train) -> float:
    m = c.model
    return (m.num_moe_layers or m.num_layers) / c.par.pp


def _ep_imbalance(c: _Train) -> float:
    """Busiest expert-parallel rank's routed rows over the mean (estimate/moe.py), 1 without EP."""
    m = c.model
    if not m.is_moe or c.par.ep <= 1:
        return 1.0
    return ep_rank_imbalance(c.tokens / c.par.tp, m.experts_per_tok, m.num_experts, c.par.ep)


def _capacity_rows(c: _Train) -> float | None:
    """Token-drop with padding (train.moe_capacity_factor): the rows each expert gets from one source rank,
    Megatron's `get_capacity` = ceil(T·k/E · factor) over that rank's T = tokens/tp routed tokens
    (moe_utils.py, core_v0.15.0); None under dropless routing."""
    m, cf = c.model, getattr(c.tr, "moe_capacity_factor", None)
    if cf is None or not m.is_moe or m.experts_per_tok <= 0 or m.num_experts <= 0:
        return None
    return float(math.ceil(c.tokens / c.par.tp * m.experts_per_tok / m.num_experts * cf))


def _routed_rows(c: _Train) -> float:
    """Rows the busiest rank's experts run, over the dropless mean T·k/E per expert: the EP busiest-rank
    imbalance under dropless routing; under drop-and-pad every expert runs exactly its capacity
    (`num_out_tokens = capacity * num_experts`, token_dispatcher.py core_v0.15.0), padding rows included."""
    cap = _capacity_rows(c)
    if cap is None:
        return _ep_imbalance(c)
    m = c.model
    return cap * m.num_experts / (c.tokens / c.par.tp * m.experts_per_tok)


def _fp8_rows_aligned(c: _Train) -> bool:
    """True when every local expert's row count is a multiple of the FP8 GEMM alignment (Transformer Engine
    Fp8Padding: 32 rows for MXFP8, 16 otherwise), so no padding copy runs: only drop-and-pad can guarantee it,
    each local expert then getting capacity x etp x ep rows (token_dispatcher.py `num_tokens_per_local_expert`)."""
    cap = _capacity_rows(c)
    if cap is None:
        return False
    align = 32 if (c.fp8 is not None and c.fp8.name == "mxfp8") else 16
    return (cap * c.par.expert_tp * c.par.ep) % align == 0


def _moe_permute_bytes(c: _Train) -> float:
    """HBM bytes of the token permutation around the experts per micro-batch (estimate/moe.py): the
    dispatcher's permute / sort / unsort / unpermute over T·k rows of h, forward and backward, plus what
    Megatron's grouped expert MLP moves around its GEMMs (`_grouped_mlp_bytes`)."""
    m = c.model
    if not m.is_moe or m.experts_per_tok <= 0:
        return 0.0
    ep = c.par.ep
    local = m.num_experts / ep
    return permute_bytes(c.tokens / c.par.tp, m.experts_per_tok, m.hidden_size, c.act_b, local, ep,
                         _moe_layers_stage(c), c.rc.linear_share) * _routed_rows(c) + _grouped_mlp_bytes(c)


def _grouped_mlp_bytes(c: _Train) -> float:
    """HBM bytes per micro-batch of Megatron's TEGroupedMLP around its grouped GEMMs (estimate/moe.py): the FP8
    row padding and unpadding copies (FP8 with unaligned expert counts: dropless routing) and the experts'
    output-bias loop (models with biased linears), over the rows this rank's experts receive,
    etp·(T/tp)·k times the busiest-rank / capacity factor, h wide; and a clamped gated activation's eager clamp
    and cat (gpt-oss, moe.expert_glu_clamp_bytes_per_element) over the same rows, f/etp wide."""
    m = c.model
    if c.scn.framework != "megatron" or not m.is_moe or m.experts_per_tok <= 0:
        return 0.0
    passes = 0.0
    if c.mm_dtype == "fp8" and not _fp8_rows_aligned(c):
        passes += fp8_pad_passes_per_row(c.rc.linear_share)
    if m.traits.mlp_bias:
        passes += expert_bias_passes_per_row(c.rc.linear_share)
    rows = c.par.expert_tp * c.tokens / c.par.tp * m.experts_per_tok * _routed_rows(c)
    # a clamped gated activation (gpt-oss): the eager clamp + cat before the fused GEGLU, over this rank's share
    # of the expert width (f / etp), in bf16 bytes scaled to the activation width
    clamp = (expert_glu_clamp_bytes_per_element(c.rc.linear_share) * (m.moe_intermediate_size or m.intermediate_size)
             / c.par.expert_tp * c.act_b / 2.0) if (m.traits.glu_clamp and m.gated_mlp) else 0.0
    # the routing probabilities' weighting of an unfused gated activation, in the router's dtype (§2.16)
    weight = (unfused_probs_weighting_bytes_per_element(getattr(c.tr, "moe_router_dtype", "model"), c.act_b,
                                                        c.rc.linear_share)
              * (m.moe_intermediate_size or m.intermediate_size) / c.par.expert_tp
              if (m.gated_mlp and not bool(getattr(c.tr, "activation_fusion", True))) else 0.0)
    # a router computing in fp32 / fp64: the casts around its gating GEMM, per token of this rank (§2.16)
    cast = (router_cast_bytes_per_element(getattr(c.tr, "moe_router_dtype", "model"), c.act_b, c.rc.linear_share)
            * m.hidden_size * c.tokens / c.par.tp * _moe_layers_stage(c))
    return (passes * m.hidden_size * c.act_b + clamp + weight) * rows * _moe_layers_stage(c) + cast


def _fusion_mode(c: _Train) -> str:
    """eager | compiled | fused: how this stack runs its element-wise ops (estimate/elementwise.py)."""
    return elementwise.stack_mode(c.scn.framework, bool(getattr(c.tr, "compile", False)),
                                  getattr(c.scn, "tool", None), getattr(c.tr, "loss", "full"))


def _module_framework(c: _Train) -> str:
    """Whose decoder-layer code runs the element-wise ops: transformers' ("hf") for framework hf and for the
    torchtitan (FSDP2) profile over transformers' modules (train.hf_modules), else the framework's own."""
    return "hf" if getattr(c.tr, "hf_modules", False) else c.scn.framework


def _layer_elementwise_bytes(c: _Train, lora: bool | None = None, i_active: float | None = None) -> float:
    """Element-wise HBM bytes per token per layer (fwd + bwd, 2-byte activations) of this stack's layer
    (estimate/elementwise.py); an HF LoRA/QLoRA step adds peft's adapter casts, scaling and adds (eager only:
    Unsloth fuses them). `i_active`: the MLP width a token passes (default: every active MLP)."""
    lora = c.tr.method in ("lora", "qlora") if lora is None else lora
    i = _mlp_width_active(c.model) if i_active is None else i_active
    return elementwise.model_layer_bytes(c.model, i, _module_framework(c), _fusion_mode(c), lora=lora,
                                         activation_fused=bool(getattr(c.tr, "activation_fusion", True)))


def _mlp_width_adapted(c: _Train) -> float:
    """The active MLP width whose linears carry adapters (a MoE's routed experts are not adapted by peft's
    all-linear on transformers 5: lora_targets.peft_fused_experts), in _mlp_width_active's units."""
    m = c.model
    return _mlp_width_active(m, scenario_lora_targets(c.scn, m) if m.is_moe else None)


def _elementwise_time(c: _Train) -> tuple[float, float]:
    """(seconds, loss bytes left for the memory rate) of one micro-batch's element-wise kernels: the layer's norms,
    RoPE, activation and residual adds (the recomputed forward adds its share) and, for stacks whose loss is aten's
    cross entropy on upcast logits, that loss, at the bandwidth share this stack's kernels were measured to reach;
    peft's adapter ops and an eager HF step's final logit softcap are plain vectorised casts, scalings and adds, at
    the copy rate (elementwise.py)."""
    mode, tp = _fusion_mode(c), c.par.tp
    scale = c.act_b / 2.0 / tp * c.tokens * c.L_stage * (1.0 + FORWARD_SHARE * c.rc.elementwise_share)
    base = _layer_elementwise_bytes(c, lora=False) * scale
    i_adapted = _mlp_width_adapted(c)
    adapters = (_layer_elementwise_bytes(c, i_active=i_adapted)
                - _layer_elementwise_bytes(c, lora=False, i_active=i_adapted)) * scale
    logits = c.model.vocab_size / tp * c.tokens
    eager_loss = elementwise.eager_loss_bytes_per_logit(_module_framework(c), mode)
    loss_at_stack_rate = eager_loss * logits if eager_loss is not None else 0.0
    rest = 0.0 if eager_loss is not None else c.P["loss_bytes_per_logit"] * logits
    bw, share = _bw(c.gpu), elementwise.bandwidth_share
    t = base / (bw * _layer_bandwidth_share(c)) + loss_at_stack_rate / (bw * share(mode, "loss"))
    if mode == "fused" and elementwise.megatron_unfused_rope(c.scn.framework, c.model.traits, c.model.is_mla):
        # YaRN under Megatron: its unfused RoPE on q (heads x head_dim) and k instead of the fused region's 8 B per
        # element of (h + kv), at the rate measured for transformers' layer, whose RoPE is the same rotate_half ops
        m = c.model
        q, kv = float(m.num_heads * m.head_dim), float(m.num_kv_heads * m.head_dim)
        fused_rope = elementwise.FUSED_ROPE_BYTES * (m.hidden_size + kv) * scale
        eager_rope = sum(elementwise.UNFUSED_ROPE_BYTES) * (q + kv) * scale
        t += eager_rope / (bw * share("eager", "hf")) - fused_rope / (bw * _layer_bandwidth_share(c))
    # Megatron without sequence parallelism: the residual adds and norms run over the whole sequence on every TP rank
    t += _unsplit_residual_bytes(c) / (bw * _layer_bandwidth_share(c))
    # peft's casts and adds and the final logit softcap's scalings and tanh: contiguous vectorised kernels
    softcap = elementwise.softcap_bytes_per_logit(c.model, _module_framework(c), mode) * logits
    return t + (adapters + softcap) / (bw * share("vectorized")) + _cp_ring_time(c), rest


def _unsplit_residual_bytes(c: _Train) -> float:
    """Element-wise bytes per micro-batch that Megatron adds on a tensor-parallel rank when sequence parallelism is off
    (parallel.sp false, tp > 1), beyond the share of the layer's element-wise traffic `_elementwise_time` already
    splits over tp. Sequence parallelism (Korthikanti et al. 2022, arXiv:2205.05198, sec. 4.2.2) splits the layer's
    non-tensor-parallel region - the two residual add + norm regions - along the sequence over the TP ranks; without it
    that region is replicated: the embedding output is not scattered (`scatter_to_sequence_parallel_region` only under
    `config.sequence_parallel`, megatron/core/models/common/embeddings/language_model_embedding.py L134-138), the
    row-parallel output is all-reduced to the whole [s, b, h] on each rank, the bias-dropout-add (`self_attn_bda` /
    `mlp_bda`, transformer/transformer_layer.py L511) adds it to the whole residual, and Transformer Engine's fused
    norm + column-parallel GEMM normalises the whole input (TELayerNormColumnParallelLinear,
    extensions/transformer_engine.py L294-396, `sequence_parallel=config.sequence_parallel`; terrykong/Megatron-LM
    @2ff0f099, NeMo RL v0.3.0's submodule). So the region's bytes (elementwise.residual_region_bytes, 2 x 22 h
    fused) are paid tp times over a rank's tokens, not once: (tp - 1) x that region over tokens / tp. RoPE, the
    attention core and the MLP activation are TP-split either way. The final norm and the embedding (once a model,
    not a layer) are left out; the TP collectives are an all-reduce either way (`_model_parallel_comm`) and the
    pipeline's activation transfers are already unsplit (p2p there)."""
    par = c.par
    if c.scn.framework != "megatron" or par.tp <= 1 or par.sp:
        return 0.0
    mode = _fusion_mode(c)
    if mode not in ("fused", "compiled"):
        return 0.0
    scale = c.act_b / 2.0 / par.tp * c.tokens * c.L_stage * (1.0 + FORWARD_SHARE * c.rc.elementwise_share)
    return elementwise.residual_region_bytes(mode, c.model.hidden_size) * (par.tp - 1) * scale


def _cp_ring_time(c: _Train) -> float:
    """Seconds per micro-batch of the copies, accumulations and output corrections Transformer Engine's ring
    context-parallel attention (AttnFuncWithCPAndKVP2P, Megatron's default cp_comm_type "p2p") runs around its
    attention kernels (estimate/context_parallel.py: counted from TE v1.10/v1.13), on the busiest CP rank: the
    copies at the vectorised-copy share, the torch.compile'd output correction at the compiled share. Megatron
    stacks only (other CP implementations are not counted)."""
    par, m = c.par, c.model
    if par.cp <= 1 or c.scn.framework != "megatron" or not m.num_attention_layers \
            or getattr(par, "cp_comm_type", "p2p") != "p2p":
        return 0.0
    d = m.head_dim
    q = c.tokens * (m.num_heads / par.tp) * (m.v_head_dim or d) * c.act_b
    kv = c.tokens * max(m.num_kv_heads / par.tp, 1.0) * (d + (m.v_head_dim or d)) * c.act_b
    bw, share = _bw(c.gpu), elementwise.bandwidth_share
    per_layer = te_p2p_ring_time(par.cp, q, kv, bw * share("vectorized"), bw * share("compiled"),
                                 halves_copied=c.tr.micro_batch > 1, forward_repeats=c.rc.attention_share)
    return per_layer * m.num_attention_layers / par.pp


def _layer_bandwidth_share(c: _Train) -> float:
    """The measured bandwidth share of this stack's layer kernels (elementwise.bandwidth_share by mode and layer
    kind)."""
    return elementwise.bandwidth_share(_fusion_mode(c), elementwise.eager_recipe(_module_framework(c), c.model.norm))


def _module_recompute(c: _Train) -> tuple[float, float]:
    """(framework-fused bytes, eager bytes) per micro-batch that Megatron's selective --recompute-modules layernorm
    and moe_act add: each module runs under CheckpointWithoutOutput, which discards its output after the forward and
    runs the forward again in backward (megatron/core/tensor_parallel/random.py; transformer_layer.py and
    moe/experts.py at core_v0.15.0). Forward bytes only, bf16, scaled to the activation width:
      layernorm  a norm that is a module of its own: the MoE layers' pre-MLP norm (Transformer Engine fuses the input
                 norm into linear_qkv and a dense layer's pre-MLP norm into linear_fc1, gpt_layer_specs.py; MLA keeps
                 its input norm), the fused norm forward read 2 + write 2 per element of h, over tokens/tp
      moe_act    the routed experts' activation over this rank's rows, f/etp wide: the fused gated region's forward
                 (read 2, write 1: 6 B per element of f; a plain activation 4) and, for a clamped GLU (gpt-oss), the
                 eager clamp + cat forward (moe.EXPERT_GLU_CLAMP_FORWARD_BYTES, 16)."""
    m, mods = c.model, c.rc.modules
    if not mods or c.scn.framework != "megatron":
        return 0.0, 0.0
    scale, fused, eager = c.act_b / 2.0, 0.0, 0.0
    moe_layers = _moe_layers_stage(c) if m.is_moe else 0.0
    if "layernorm" in mods:
        norm_layers = moe_layers + (c.L_stage if m.is_mla else 0.0)
        fused += 4.0 * m.hidden_size * c.tokens / c.par.tp * norm_layers
    if "moe_act" in mods and m.is_moe and m.experts_per_tok > 0:
        rows = c.par.expert_tp * c.tokens / c.par.tp * m.experts_per_tok * _routed_rows(c)
        width = (m.moe_intermediate_size or m.intermediate_size) / c.par.expert_tp
        fused += (6.0 if m.gated_mlp else 4.0) * width * rows * moe_layers
        if m.traits.glu_clamp and m.gated_mlp:
            eager += EXPERT_GLU_CLAMP_FORWARD_BYTES * width * rows * moe_layers
    return fused * scale, eager * scale


def _memory_bound_time(c: _Train) -> tuple[float, float]:
    """Element-wise passes and the loss (and QLoRA's dequantisation) for one micro-batch: (elt, dequant)."""
    tr, tp, bw = c.tr, c.par.tp, _bw(c.gpu)
    t_layer, elt_bytes = _elementwise_time(c)
    mod_fused, mod_eager = _module_recompute(c)
    t_layer += mod_fused / (bw * elementwise.bandwidth_share("fused"))
    elt_bytes += mod_eager
    elt_bytes += _fp8_cast_bytes(c)
    elt_bytes += _moe_permute_bytes(c)
    # SSM conv + scan: forward, and a backward that reads and writes about twice as much (3 passes)
    elt_bytes += 3.0 * ssm_scan_bytes(c.model, c.tokens) / tp * c.L_stage / max(c.model.num_layers, 1)
    t_dequant = 0.0
    if tr.method == "qlora":  # each base weight dequantised to 16-bit for fwd and bwd (+recompute)
        passes = 2 + c.rc.linear_share
        base_local = matmul_params_active(c.model) / tp / c.par.pp
        t_dequant = passes * base_local * QLORA_DEQUANT_BYTES_PER_PARAM / (bw * c.eta_mem)
    return t_layer + elt_bytes / (bw * c.eta_mem), t_dequant


def _tp_exposed(c: _Train, t_tp: float, t_lin: float) -> float:
    """TP collectives left on the critical path. With Transformer Engine's userbuffers overlap
    (`--tp-comm-overlap`, sequence parallel) each all-gather / reduce-scatter is decomposed into tp
    ring steps pipelined with the matching GEMM chunks (Wang et al., ASPLOS 2023, "Overlap
    communication with dependent computation via decomposition"): one step of tp stays exposed, plus
    whatever the GEMMs cannot cover. Otherwise the collectives block (NCCL on the compute stream)."""
    if c.par.tp_comm_overlap and c.par.sp:
        return t_tp / c.par.tp + max(0.0, t_tp - t_lin)
    return t_tp * (1.0 - c.P["overlap"]["tp"])


def _hybridep_measured_exchange(c: _Train, local_tokens: float) -> float | None:
    """Mean seconds of one HybridEP exchange (a MoE layer runs four: dispatch and combine forward, and their
    adjoints, a combine and a dispatch, backward) at the dispatch and combine rates DeepEP's hybrid-ep README measured
    for this GPU, EP size and SM budget (estimate/moe.py hybridep_rates, hybridep_bytes); None where none was
    measured, or with expert TP (the table's ranks hold whole experts)."""
    par, model = c.par, c.model
    if par.expert_tp > 1:
        return None
    sms = dispatcher_sms("hybridep", getattr(par, "ep_dispatcher_sms", None)) or 0
    per_node = max(1, min(par.ep, c.gpn))
    domain, nbytes = hybridep_bytes(local_tokens, model.hidden_size, model.num_experts, model.experts_per_tok,
                                    par.ep, per_node, elem_bytes=2.0)
    rates = hybridep_rates(getattr(c.gpu, "id", ""), domain, par.ep, sms, per_node)
    if rates is None:
        return None
    return 0.5 * (nbytes / rates[0] + nbytes / rates[1])


def _ep_exposed(c: _Train, t_ep: float, t_compute: float) -> float:
    """EP all-to-all left on the critical path per micro-batch. Without overlap it blocks (the dispatcher
    waits for it before the experts run). With Megatron's overlap_moe_expert_parallel_comm the schedule
    runs one micro-batch's forward beside another's backward on two streams, so each all-to-all hides
    behind the other micro-batch's compute (megatron/core/pipeline_parallel/combined_1f1b.py,
    core_v0.15.0): only what the compute cannot cover stays, plus the chunks with no partner: the first
    micro-batch's forward and the last one's backward without pipelining, the interleaved schedule's warm-up
    forwards and cool-down backwards with it (estimate/moe.py overlap_unpaired_share). A flex
    dispatcher's kernels hold their SMs while they run, so the compute beside them runs on the rest
    (`_ep_sm_share`, estimate/moe.py overlapped_exposed)."""
    if not c.par.ep_comm_overlap:
        return t_ep
    return overlapped_exposed(t_ep, t_compute, _ep_sm_share(c), overlap_unpaired_share(c.par.pp, c.par.vpp, c.m))


def _ep_sm_share(c: _Train) -> float:
    """Share of the GPU's SMs the EP dispatcher's kernels hold (estimate/moe.py dispatcher_sms over the SM count of
    hardware/data/gpu_sms.csv); 0 for NCCL's all-to-all or a GPU without SM figures."""
    sms = dispatcher_sms(getattr(c.par, "ep_dispatcher", "alltoall"), getattr(c.par, "ep_dispatcher_sms", None))
    if sms is None:
        return 0.0
    from ..hardware.sms import sm_spec
    spec = sm_spec(getattr(c.gpu, "id", ""))
    return min(1.0, sms / spec.sm_count) if spec else 0.0


def _fp8_tp_all_gather(c: _Train) -> bool:
    """torchtitan's float8 tensor parallelism all-gathers in FP8: with tensorwise float8 linears it applies
    torchao's Float8ColwiseParallel / Float8RowwiseParallel / PrepareFloat8ModuleInput (parallelize_llama.py
    `apply_tp` @9dec370, `enable_float8_tensorwise_tp` @2c8b5947), which cast the sequence-parallel input to
    FP8 before its all-gather and cast the rowwise outputs' gradients to FP8 before the backward all-gather
    (torchao/float8/float8_tensor_parallel.py @710f52ba); the reduce-scatters stay 16-bit."""
    return c.scn.framework == "torchtitan" and c.fp8 is not None and c.fp8.name == "tensorwise"


def _dtensor_llama_plan(c: _Train) -> bool:
    """Transformers' Llama under NeMo RL's DTensor tensor-parallel plan with sequence parallelism (train.hf_modules on
    the torchtitan / FSDP2 profile, tp > 1, parallel.sp): its collectives are counted (estimate/dtensor_tp.py,
    docs/speed.md §2.20)."""
    from ..models.hf_ops import nemo_rl_llama_tp_plan
    return (bool(getattr(c.tr, "hf_modules", False)) and c.par.tp > 1 and bool(getattr(c.par, "sp", True))
            and nemo_rl_llama_tp_plan(c.model))


def _dtensor_tp_time(c: _Train, layers: float, forward_only: bool) -> float:
    """Seconds of the DTensor plan's TP collectives (dtensor_tp.collectives_per_layer) over `layers` decoder layers of
    one micro-batch: a no-grad forward's, or a training micro-batch's (forward, backward and the recomputed share)."""
    link = group_link(c.gpu, c.par.tp, c.par.tp, c.gpn, c.net, c.P["comm"])
    size = c.tokens * c.model.hidden_size * c.act_b
    n_ag, n_rs = dtensor_tp.collectives_per_layer(forward_only, 0.0 if forward_only else c.rc.tp_forward_share)
    return layers * (n_ag * all_gather_time(size, c.par.tp, link) + n_rs * reduce_scatter_time(size, c.par.tp, link))


def _model_parallel_comm(c: _Train, t_attn: float, t_lin: float = 0.0,
                         t_compute: float = 0.0) -> tuple[float, dict[str, float]]:
    """Exposed TP/CP/EP/PP communication per micro-batch, and each one's time."""
    par, model, comm = c.par, c.model, c.P["comm"]
    tp, pp, cp, ep, etp = par.tp, par.pp, par.cp, par.ep, par.expert_tp
    h, act_b, tokens = model.hidden_size, c.act_b, c.tokens
    exposed, detail = 0.0, {}
    folded = _folded(model, par)
    if tp > 1:
        link = group_link(c.gpu, tp, tp, c.gpn, c.net, comm)
        n_ar = TP_ALL_REDUCES_PER_LAYER * (1.0 + 0.5 * c.rc.tp_forward_share)
        # a MoE layer on its own expert grid runs no TP collective around its routed experts (the sequence-
        # parallel tokens go straight to the dispatcher; the expert-TP ones are timed below): only attention's
        # half of the layer's TP traffic remains, and a shared expert's (a TP-split MLP, moe_layer.py)
        tp_layers = c.L_stage
        if folded and not any(b.kind == "shared_expert" for b in model.blocks):
            tp_layers -= 0.5 * _moe_layers_stage(c)
        size = tokens * h * act_b
        if _dtensor_llama_plan(c):
            # NeMo RL's DTensor plan for Llama: each column-parallel linear gathers its own input (estimate/dtensor_tp.py)
            t = _dtensor_tp_time(c, tp_layers, forward_only=False)
        elif _fp8_tp_all_gather(c):
            # each sequence-parallel all-reduce equivalent is a 16-bit reduce-scatter plus an FP8 all-gather
            t = tp_layers * n_ar * (reduce_scatter_time(size, tp, link) + all_gather_time(size / 2.0, tp, link))
        else:
            t = tp_layers * n_ar * all_reduce_time(size, tp, link)
        detail["tp"] = t
        exposed += _tp_exposed(c, t, t_lin)
    if cp > 1:
        link = group_link(c.gpu, cp, tp * cp, c.gpn, c.net, comm)
        kv_bytes_step = 2 * tokens * model.num_kv_heads * model.head_dim * act_b / tp
        t = c.L_stage * 3 * (cp - 1) * p2p_time(kv_bytes_step, link)
        detail["cp"] = max(0.0, t - t_attn)
        exposed += detail["cp"]
    if model.is_moe and ep > 1:
        moe_layers = model.num_moe_layers or model.num_layers
        # dispatch + combine in forward and their adjoints in backward, 16-bit payload (the dispatcher
        # sends hidden states in the activation dtype, FP8 recipes included); the busiest rank sets the pace.
        # Each rank dispatches its sequence-parallel share, tokens/tp (Megatron's MoE layer refuses TP without
        # sequence parallel in training, moe_layer.py @core_v0.19.0). EP ranks are adjacent inside the expert
        # grid's etp ranks (order tp-ep-dp-pp, parallel_state.py): an EP group wider than a node sends
        # (ep − g)/ep of its rows through each GPU's own NIC (comm.all_to_all_time_nodes)
        local_tokens = tokens / tp
        payload = local_tokens * model.experts_per_tok * h * act_b
        dispatcher = getattr(par, "ep_dispatcher", "alltoall")
        measured = _hybridep_measured_exchange(c, local_tokens) if dispatcher == "hybridep" else None
        if measured is not None:
            a2a = measured
        elif dispatcher != "alltoall":
            # DeepEP / HybridEP send a token once per destination rank and once per destination node
            # (estimate/moe.py dispatch_copies), not once per (token, expert) pair
            per_node = max(1, min(ep, c.gpn // etp))
            intra_rows, inter_rows = dispatch_copies(dispatcher, model.num_experts, model.experts_per_tok, ep,
                                                     per_node)
            row = local_tokens * h * act_b
            intra = group_link(c.gpu, per_node, per_node * etp, c.gpn, c.net, comm)
            a2a = intra_rows * row / intra.effective_bytes_per_s
            if inter_rows > 0:
                nic = group_link(c.gpu, 2, 2 * c.gpn, c.gpn, c.net, comm)
                a2a = max(a2a, inter_rows * row / nic.effective_bytes_per_s) + (ep - 1) * nic.latency_s
            else:
                a2a += (ep - 1) * intra.latency_s
        elif etp * ep > c.gpn:
            per_node = max(1, c.gpn // etp)
            intra = group_link(c.gpu, per_node, per_node * etp, c.gpn, c.net, comm)
            nic = group_link(c.gpu, 2, 2 * c.gpn, c.gpn, c.net, comm)     # two ranks a node apart: one NIC
            a2a = all_to_all_time_nodes(payload, ep, per_node, intra, nic)
        else:
            a2a = all_to_all_time(payload, ep, group_link(c.gpu, ep, etp * ep, c.gpn, c.net, comm))
        # the measured HybridEP calls ran random routing of their own: the busiest rank's wait is in the rate
        detail["ep"] = t = (moe_layers / pp) * 4 * a2a * (1.0 if measured is not None else _routed_rows(c))
        exposed += _ep_exposed(c, t, t_compute)
    if folded and etp > 1:
        # expert TP: the received rows are all-gathered over the etp ranks before the experts and
        # reduce-scattered after them (token_dispatcher.py gather_from_sequence_parallel_region /
        # reduce_scatter_to_sequence_parallel_region on the expert-TP group), and the adjoints in backward
        gathered = etp * tokens / tp * model.experts_per_tok * h * act_b * _routed_rows(c)
        link = group_link(c.gpu, etp, etp, c.gpn, c.net, comm)
        detail["etp"] = t = _moe_layers_stage(c) * 4 * all_gather_time(gathered, etp, link)
        exposed += t
    if pp > 1:
        link = group_link(c.gpu, pp, c.scn.hardware.count, c.gpn, c.net, comm)
        detail["pp"] = t = 2 * par.vpp * p2p_time(tokens * h * act_b / (tp if par.sp else 1), link)
        if c.scn.framework == "megatron" and par.vpp > 1:
            # Megatron's interleaved schedule posts its sends/receives before computing the next chunk
            # (overlap_p2p_comm: on by default in megatron/training/arguments.py, forced off without
            # virtual stages): only what the chunk's compute cannot cover is exposed
            t = max(0.0, t - t_compute)
        exposed += t
    return exposed, detail


def _data_parallel_comm(c: _Train, t_compute_mb: float) -> tuple[float, float, dict[str, float]]:
    """Gradients (and parameters under ZeRO-3/FSDP) over dp·cp ranks: (exposed per micro-batch,
    exposed once per step, each one's time)."""
    par, ov = c.par, c.P["overlap"]
    if c.scn.dp * par.cp <= 1 and (c.expert_local <= 0 or par.tp <= par.ep * par.expert_tp):   # no dp peers
        return 0.0, 0.0, {}
    # hybrid sharding (parallel.shard_group, zero 3 only): the shard group is shard_group x cp ranks with tp
    # innermost, as torchtitan's dense mesh (pp, dp_replicate, fsdp = dp_shard x cp, tp) orders them
    # (torchtitan/distributed/parallel_dims.py @v0.2.2 73a0e697 `build_mesh`): it spans tp x cp x shard_group GPUs
    n_dp = par.zero_shard_dp * par.cp
    link = group_link(c.gpu, n_dp, par.tp * n_dp, c.gpn, c.net, c.P["comm"])
    # on the experts' own grid each rank holds E/ep of the routed experts split over etp (layout.py), and their
    # gradients are reduced only over the ranks holding the same shard: Megatron's expert-data-parallel
    # group, tp·dp·cp/(ep·etp) ranks (megatron/core/parallel_state.py @core_v0.19.0); the rest over dp·cp
    # (the expert grid's order is etp-ep-dp, so that group's members are ep·etp apart: fewer share a node)
    span = par.tp * par.cp * c.scn.dp
    groups = [(c.params_local - c.expert_local, n_dp, link)]
    if c.expert_local > 0:
        n_e = par.expert_dp
        groups.append((c.expert_local, n_e, group_link(c.gpu, n_e, span, c.gpn, c.net, c.P["comm"])))
    train_frac = c.trainable_local / c.params_local if c.params_local else 0.0
    if par.zero >= 3:
        w_b = 2.0 if c.tr.precision != "fp32" else 4.0
        # torchtitan wraps every block with FSDP2 MixedPrecisionPolicy(reduce_dtype=mixed_precision_reduce), whose
        # default is float32 (torchtitan/config/job_config.py @2c8b5947 `mixed_precision_reduce = "float32"`;
        # models/llama3/infra/parallelize.py `apply_fsdp`): the gradient reduce-scatter moves fp32
        g_b = 4.0 if c.scn.framework == "torchtitan" else c.grad_b
        t = 0.0
        for params, n, lk in groups:
            unit = params / max(1.0, c.L_stage)
            t += c.L_stage * 2 * all_gather_time(unit * w_b, n, lk)
            t += c.L_stage * reduce_scatter_time(unit * train_frac * g_b, n, lk)
        if par.replicas <= 1:
            return max(0.0, t - ov["fsdp"] * t_compute_mb), 0.0, {"fsdp": t}
        t_ar, per_step = _replica_all_reduce(c, train_frac * g_b)
        if per_step:
            # DeepSpeed MiCS all-reduces the gradient shards only at the accumulation boundary, during the last
            # micro-batch's backward (mics.py `allreduce_mics_shard_grads`): priced like the DDP all-reduce
            return (max(0.0, t - ov["fsdp"] * t_compute_mb),
                    max(0.0, t_ar - ov["dp"] * t_compute_mb * (1.0 - FORWARD_SHARE)), {"fsdp": t, "dp_replicas": t_ar})
        return max(0.0, t + t_ar - ov["fsdp"] * t_compute_mb), 0.0, {"fsdp": t, "replicas": t_ar}
    t = sum(all_reduce_time(params * train_frac * c.grad_b, n, lk) for params, n, lk in groups)
    return 0.0, max(0.0, t - ov["dp"] * t_compute_mb * (1.0 - FORWARD_SHARE)), {"dp": t}   # overlaps backward


# FSDP2's copies around its collectives on the compute stream, bytes per parameter of a unit per micro-batch at
# 16-bit parameters with an fp32 reduce (torch v2.7.0, the torch of NeMo RL v0.3.0 and of torchtitan since 2025;
# torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py and _fsdp_param_group.py, the same at torch@010ae4a8):
# * all-gather copy-out: FSDPParamGroup.wait_for_unshard runs foreach_all_gather_copy_out on the current stream, whose
#   torch.ops.fsdp.split_with_sizes_copy copies the all-gather buffer into each parameter's unsharded storage: read 2 +
#   write 2 per parameter, once per gather. fully_shard's default reshard_after_forward=True frees the blocks after the
#   forward, so the backward gathers them again: two gathers a micro-batch (the same two _data_parallel_comm prices).
# * reduce-scatter copy-in: foreach_reduce runs foreach_reduce_scatter_copy_in (torch._chunk_cat of the 16-bit
#   unsharded gradients into the reduce-dtype buffer, the widening cast in the same kernel) on the current stream and
#   only then makes the reduce-scatter stream wait on it: read 2 + write 4 per trainable parameter, every micro-batch
#   that reduces (NeMo RL's DTensor worker and torchtitan never call set_requires_gradient_sync(False)).
# Not counted: the all-gather copy-in (fp32 shard -> bf16 on its own stream, per parameter / shard group) and the
# sharded gradient accumulation after the reduce-scatter (on the reduce-scatter stream, / shard group).
FSDP2_COPY_OUT_BYTES = 4.0        # per parameter per gather, 16-bit (2 x the all-gather dtype's bytes)
FSDP2_GATHERS_PER_MICROBATCH = 2


def _fsdp2_copy_time(c: _Train) -> float:
    """Seconds per micro-batch of FSDP2's copy-out after each parameter all-gather and its gradient copy-in before
    each reduce-scatter (FSDP2_COPY_OUT_BYTES), on the compute stream, at the contiguous-copy share of the HBM rate
    (elementwise_bandwidth.csv `vectorized`): FSDP2 stacks (scenario.fsdp2_stack) with more than one rank sharding."""
    from ..scenario import fsdp2_stack
    par = c.par
    if not fsdp2_stack(c.scn) or par.zero_shard_dp * par.cp <= 1:
        return 0.0
    w_b = 2.0 if c.tr.precision != "fp32" else 4.0
    # the reduce dtype _data_parallel_comm moves: torchtitan's (and NeMo RL's) MixedPrecisionPolicy(reduce_dtype=float32)
    g_b = 4.0 if c.scn.framework == "torchtitan" else c.grad_b
    train_frac = c.trainable_local / c.params_local if c.params_local else 0.0
    per_param = FSDP2_GATHERS_PER_MICROBATCH * 2.0 * w_b + train_frac * (w_b + g_b)
    return c.params_local * per_param / (_bw(c.gpu) * elementwise.bandwidth_share("vectorized"))


# Weight-gradient kinds whose GEMM Megatron can accumulate straight into the gradient buffer
# (gradient_accumulation_fusion): Transformer Engine's linears (TELinear / TELayerNormColumnParallelLinear /
# TEGroupedLinear `fuse_wgrad_accumulation=config.gradient_accumulation_fusion`, extensions/transformer_engine.py
# L241, L397, L944 @terrykong/Megatron-LM 2ff0f099) and the output layer (ColumnParallelLinear's
# LinearWithGradAccumulationAndAsyncCommunication, tensor_parallel/layers.py L525-532). The embedding, the norms'
# weights and the router's gating weight take the DDP hook's add either way.
WGRAD_FUSABLE_KINDS = ("attn", "mlp", "shared_expert", "expert", "lm_head")


def _unfused_wgrad_time(c: _Train) -> float:
    """Seconds per micro-batch Megatron spends adding each weight gradient into its gradient buffer when
    gradient_accumulation_fusion is off (train.grad_accum_fusion false). Fused, the weight-gradient GEMM accumulates
    into `param.main_grad` in its epilogue (cuBLAS beta = 1; APEX's wgrad_gemm_accum_fp32/fp16 for the output layer),
    inside the GEMM's compute-bound time. Unfused, the GEMM writes the gradient to a tensor of its own, autograd hands
    it to the parameter's `.grad`, and the backward post-hook Megatron's DDP registers runs
    `param.main_grad.add_(param.grad.data)` then drops it (distributed_data_parallel.py L493-507 @2ff0f099), every
    micro-batch: a memory-bound kernel reading the gradient (the parameters' bytes) and reading and writing the buffer
    (its dtype's bytes, train.grad_reduce_dtype), over every fusable weight on this rank (WGRAD_FUSABLE_KINDS, routed
    experts at their E/ep share), at the contiguous-copy share of the HBM rate (elementwise_bandwidth.csv
    `vectorized`), as FSDP2's copies are. LoRA's frozen base weights have no gradient: 0. NeMo and Megatron-Bridge
    set the flag from APEX's `fused_weight_gradient_mlp_cuda` importing (nemo/collections/llm/gpt/model/base.py
    L43-47, L294 @NVIDIA/NeMo 33259f25; megatron/bridge/utils/fusions.py L34-50, models/gpt_provider.py L170
    @8aa287df), which NeMo RL's environments lack (docs/speed.md §2.19)."""
    tr = c.tr
    if c.scn.framework != "megatron" or getattr(tr, "grad_accum_fusion", True) or c.frozen:
        return 0.0
    m, par = c.model, c.par
    folded = _folded(m, par)
    dense = sum(b.total for b in m.blocks if b.kind in WGRAD_FUSABLE_KINDS and not (folded and b.kind == "expert"))
    local = dense / (par.tp * par.pp) + (c.expert_local if folded else 0.0)
    w_b = 4.0 if tr.precision == "fp32" else 2.0
    g = getattr(tr, "grad_reduce_dtype", "auto")
    g_b = 4.0 if (tr.precision == "fp32" or g in ("auto", "fp32")) else 2.0
    return local * (w_b + 2.0 * g_b) / (_bw(c.gpu) * elementwise.bandwidth_share("vectorized"))


def _replica_all_reduce(c: _Train, grad_bytes_per_param: float) -> tuple[float, bool]:
    """(time, once per step?) of hybrid sharding's all-reduce of each rank's gradient shard across the
    dp/shard_group replicas. FSDP2 HSDP: `foreach_reduce` reduce-scatters a unit's gradients within the shard
    group, then runs dist.all_reduce(reduce_output, group=all_reduce_group) on its all-reduce stream, so each
    layer's shard (1/shard of the unit, in the reduce dtype) is all-reduced in every backward that syncs
    gradients (pytorch/pytorch@010ae4a8 torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py); torchtitan
    v0.2.2 never turns that off (no set_requires_gradient_sync / set_requires_all_reduce call), so every
    micro-batch pays it. DeepSpeed
    MiCS does the same all-reduce once, at the accumulation boundary (deepspeed/runtime/zero/mics.py @edaa7221
    `allreduce_mics_shard_grads`). The replicas are shard_group x cp x tp GPUs apart: across nodes once one
    replica fills a node."""
    par = c.par
    n_shard, rep = par.zero_shard_dp * par.cp, par.replicas
    link = group_link(c.gpu, rep, par.tp * par.cp * c.scn.dp, c.gpn, c.net, c.P["comm"])
    unit = (c.params_local - c.expert_local) / max(1.0, c.L_stage)
    t = c.L_stage * all_reduce_time(unit * grad_bytes_per_param / n_shard, rep, link)
    return t, c.scn.framework == "deepspeed"


def _optimizer_time(c: _Train, t_compute_mb: float) -> tuple[float, float]:
    """(optimizer step on the GPU, exposed offload traffic and CPU step) per optimizer step."""
    par, P = c.par, c.P
    shard = par.zero_shard_dp * par.cp if par.zero >= 1 else 1
    # the distributed optimizer shards the routed experts' states over their expert-data-parallel group
    # (tp·dp·cp/(ep·etp) ranks holding the same expert shard), the rest over dp·cp
    e_shard = par.expert_dp if par.zero >= 1 else 1
    opt_local = (c.trainable_local - c.expert_local) / shard + c.expert_local / e_shard
    state_b = 4.0 if (c.tr.master_weights or c.tr.precision == "fp32") else 2.0
    opt_bytes = optim.step_traffic_bytes_per_param(c.tr.optimizer, c.scn.framework, c.tr.optimizer_impl, state_b)
    if par.offload == "none":
        return opt_local * opt_bytes / (_bw(c.gpu) * c.eta_mem) + _optimizer_matrix_time(c, shard), 0.0
    pcie = float(getattr(c.gpu, "pcie_bandwidth_bytes_per_s", 0.0) or OFFLOAD_PCIE_FALLBACK_BYTES_PER_S) * P["comm"]["pcie"]
    t_off = opt_local * (c.grad_b + 2.0) / pcie + opt_local * opt_bytes / P["host_memory_bytes_per_s"]
    if par.offload == "optimizer+params":
        streamed = c.m * 2 * ((c.params_local - c.expert_local) / shard + c.expert_local / e_shard) * 2.0 / pcie
        t_off += max(0.0, streamed - P["overlap"]["offload"] * c.m * t_compute_mb)
    return 0.0, t_off


def _optimizer_matrix_time(c: _Train, shard: int) -> float:
    """Matrix work of Muon, GaLore and SOAP per step (estimate/optim.py `step_flops`): bf16 Newton-Schulz
    at the 16-bit tensor rate, fp32 projections, SVDs and eigenbases at the fp32 rate (torch leaves TF32 off
    for matmuls by default), each at the large-GEMM efficiency. The distributed implementations give each
    data-parallel rank its share of the matrices (KellerJordan/Muon `Muon.step` strides over the ranks), so
    the work divides by the shard group. cuSOLVER's SVD runs well below the GEMM rate: GaLore's refresh is a
    lower bound."""
    if c.tr.optimizer not in optim.SHAPED or c.tr.optimizer == "adafactor":
        return 0.0
    from .memory import rank_tensors
    fl = optim.step_flops(c.tr.optimizer, rank_tensors(c.scn, c.model, "first" if c.par.pp > 1 else "only"),
                          c.tr.galore_rank, c.tr.galore_update_gap)
    fam = _family(c.gpu)
    big = 4096.0
    t = 0.0
    if fl.bf16:
        t += fl.bf16 / (peak_flops(c.gpu, "bf16") * gemm_efficiency(c.P, fam, "bf16", big, big, big)
                        * clock_factor(c.P, c.gpu))
    if fl.fp32:
        t += fl.fp32 / (peak_flops(c.gpu, "fp32") * gemm_efficiency(c.P, fam, "fp32", big, big, big)
                        * clock_factor(c.P, c.gpu))
    return t / shard


def _forward_share(c: _Train) -> float:
    """The forward's share of a training micro-batch's executed FLOPs (recompute included in the whole)."""
    tr, model = c.tr, c.model
    fl = training_flops_per_token(model, attention_span(tr), tr.recompute, tr.method, tr.lora_rank,
                                  shares=(c.rc.linear_share, c.rc.attention_share))
    f = training_flops_per_token(model, attention_span(tr))
    return (f.matmul_forward + f.attention_forward) / fl.hardware if fl.hardware else FORWARD_SHARE


def forward_only_time(scn: Any, model: ModelSpec, gpu: Any, *, network: Any = None,
                      params: Mapping[str, Any] | None = None) -> dict[str, float]:
    """Seconds of a no-grad forward over the scenario's global batch, as a training framework's forward-only
    schedule runs it (Megatron `forward_backward_func(..., forward_only=True)`, which NeMo RL's log-prob passes
    call): per micro-batch, the forward's share of the training micro-batch's compute and of its exposed
    model-parallel communication (tensor/sequence, expert, context and pipeline traffic follow the passes over
    the layers, so the forward's share of the executed FLOPs is used for both), times the micro-batches, plus
    the pipeline's fill and drain ((pp - 1) / vpp forward micro-batch times: no backward fills the bubble).
    No gradient reduction, no optimizer. Under ZeRO-3 the forward's parameter all-gathers are not counted."""
    P = params if params is not None else _packaged_efficiency()
    c = _train_setup(scn, model, gpu, P, network if network is not None else _network(scn, gpu), [])
    tr, par = scn.train, scn.parallel
    t_lin, t_attn = _linear_time(c), _attention_time(c)
    t_elt, t_dequant = _memory_bound_time(c)
    t_compute_mb = t_lin + t_attn + t_elt + t_dequant
    t_mp, mp_detail = _model_parallel_comm(c, t_attn, t_lin, t_compute_mb)
    share = _forward_share(c)
    t_compute, t_comm = share * t_compute_mb, share * t_mp
    if _dtensor_llama_plan(c):
        # its forward's collectives are counted on their own (5 all-gathers + 2 reduce-scatters, not a share of the
        # training micro-batch's 14 + 8: estimate/dtensor_tp.py)
        t_comm += (_tp_exposed(c, _dtensor_tp_time(c, c.L_stage, forward_only=True), t_lin)
                   - share * _tp_exposed(c, mp_detail["tp"], t_lin))
    sync = _dropless_sync_exposure(c, t_compute_mb, t_mp, forward_only=True)
    t_sync = sync.seconds if sync is not None else 0.0
    fill = (par.pp - 1) / par.vpp * (t_compute + t_comm + t_sync) if par.pp > 1 else 0.0
    return {"time": c.m * (t_compute + t_comm + t_sync) + fill, "compute": c.m * t_compute, "comm": c.m * t_comm,
            "bubble": fill, "microbatches": c.m, "tokens": c.m * tr.micro_batch * scn.dp * tr.seq_len,
            "forward_share": share, "moe_sync_wait": c.m * t_sync}


def _eager_host_issue(c: _Train) -> tuple[float, str]:
    """(host seconds to issue one micro-batch of an eager HF transformers step, the host it describes); (0, "") where
    the floor is not modelled: other frameworks (fused kernels, their own op counts), torch.compile, Unsloth's patched
    kernels, encoder-decoders and state-space mixers (no counted layer), and pipeline stages (estimate/host_issue.py)."""
    tr, model = c.tr, c.model
    if (c.scn.framework != "hf" or getattr(tr, "compile", False) or getattr(c.scn, "tool", None) == "unsloth"
            or model.is_encoder_decoder or c.par.pp > 1 or any(b.kind == "ssm" for b in model.blocks)):
        return 0.0, ""
    from .host_issue import counted_kinds, issue_seconds, op_seconds, step_ops
    from ..hardware.hosts import host_eager_op_s
    from ..models.hf_ops import hf_ops_layer_kind
    hw = c.scn.hardware
    speed, name = _host_speed(c.scn, c.gpu)
    eager_op = host_eager_op_s(getattr(hw, "host_cpu", None), getattr(hw, "host_single_thread_score", None))
    adapted = None
    if tr.method in ("lora", "qlora") and tr.lora_targets != "all-linear":
        adapted = _adapted_linears_per_layer(c)
    ops = step_ops(hf_ops_layer_kind(model, counted_kinds()), tr.method, tr.recompute, c.L_stage, adapted)
    decode_layer_s = float(_engine(c.P, "hf", _family(c.gpu))["host_issue_layer_s"])
    return issue_seconds(ops, op_seconds(decode_layer_s, speed, eager_op)), name


def _adapted_linears_per_layer(c: _Train) -> float:
    """Linear modules per decoder layer that carry an adapter (a fused routed-expert tensor counts once)."""
    targets = scenario_lora_targets(c.scn, c.model)
    n, experts = 0.0, False
    for blk in c.model.linear_blocks:
        role = lora_role(blk)
        if role not in targets or blk.layer_scope != "layer":
            continue
        if blk.kind == "expert":
            experts = True
        else:
            n += blk.count / max(c.model.num_layers, 1)
    return n + (2.0 if experts else 0.0)


def _dropless_sync_exposure(c: _Train, t_compute_mb: float, t_mp: float, *, forward_only: bool = False):
    """Host seconds per micro-batch that Megatron-Core's dropless MoE dispatch exposes by synchronising host and GPU
    once per MoE layer forward (estimate/moe_host.py, docs/speed.md §2.7); None where no sync happens: other
    frameworks, dense models, drop-and-pad with a fixed capacity."""
    model, par, tr = c.model, c.par, c.tr
    if c.scn.framework != "megatron" or not model.is_moe or model.num_experts <= 0:
        return None
    from . import moe_host
    from .host_issue import BARE_OP_CPU_S, counted_kinds, layer_ops, op_seconds
    from ..hardware.hosts import host_eager_op_s
    from ..models.hf_ops import hf_ops_layer_kind
    # the scenario's dispatcher is what the launch file writes (launch/megatron.py: alltoall or flex), at any EP;
    # without EP or TP the all-to-all dispatcher syncs at "before_finish" instead (token_dispatcher.py:533)
    dispatcher = getattr(par, "ep_dispatcher", "alltoall")
    syncs = moe_host.forward_syncs(dispatcher, _capacity_rows(c) is not None)
    if syncs == 0:
        return None
    hw = c.scn.hardware
    speed, _ = _host_speed(c.scn, c.gpu)
    eager_op = host_eager_op_s(getattr(hw, "host_cpu", None), getattr(hw, "host_single_thread_score", None))
    decode_layer_s = float(_engine(c.P, "hf", _family(c.gpu))["host_issue_layer_s"])
    py_op, engine_op = op_seconds(decode_layer_s, speed, eager_op)
    launch = eager_op if eager_op is not None else BARE_OP_CPU_S / speed
    fwd_ops, bwd_ops = layer_ops(hf_ops_layer_kind(model, counted_kinds()))
    if dispatcher == "alltoall" and not bool(getattr(tr, "moe_permute_fusion", True)):
        # the permutations as torch ops (moe_permute_fusion off): more host calls a layer (moe_host.py, §2.16)
        fwd_ops, bwd_ops = (fwd_ops + moe_host.UNFUSED_PERMUTE_EXTRA_OPS[0],
                            bwd_ops + moe_host.UNFUSED_PERMUTE_EXTRA_OPS[1])
    local = model.num_experts / max(par.ep, 1)
    fp8 = c.mm_dtype == "fp8"
    h_f = moe_host.layer_forward_host_seconds(fwd_ops, dispatcher, local, fp8, py_op,
                                              launch)
    h_b = moe_host.layer_backward_host_seconds(bwd_ops, local, fp8, engine_op, launch)
    share = _forward_share(c)
    per_layer = (t_compute_mb + t_mp) / max(c.L_stage, 1.0)
    g_f = share * per_layer
    recompute = tr.recompute == "full"
    g_b = per_layer - g_f * (2.0 if recompute else 1.0)
    return moe_host.exposure(_moe_layers_stage(c), syncs, float(max(par.vpp, 1)), h_f, h_b, g_f, g_b,
                             forward_only=forward_only, paired=bool(getattr(par, "ep_comm_overlap", False)),
                             recompute=recompute)


def _dropless_sync_note(c: _Train, t_compute_mb: float, sync: Any) -> str | None:
    """What the per-layer host sync of Megatron's dropless MoE dispatch costs this estimate (`_dropless_sync_exposure`,
    estimate/moe_host.py): the all-to-all dispatcher copies the split sizes to the host once per MoE layer forward
    (`cuda_sync_point = "before_ep_alltoall"`, token_dispatcher.py, core_v0.15.0), DeepEP's dispatch waits on the host
    for the received counts, HybridEP's copies the tokens per expert unless a static rank capacity is set. The
    exposure priced is the lower bound max(host issue - GPU, 0) per forward segment; the note gives the two per-layer
    times so a reader sees how close the step is to host-bound (docs/speed.md §2.7)."""
    if sync is None or sync.syncs <= 0:
        return None     # drop-and-pad: the split sizes follow from the capacity, no sync ("no_sync")
    dispatcher = getattr(c.par, "ep_dispatcher", "alltoall")
    head = (f"dropless MoE dispatch ({dispatcher}) synchronises host and GPU once per MoE layer forward "
            f"({sync.syncs:.0f} syncs a micro-batch): issuing one layer's forward takes "
            f"{1e3 * sync.host_layer_fwd_s:.2f} ms of host time against {1e3 * sync.gpu_layer_fwd_s:.2f} ms of GPU work")
    if sync.seconds > 0:
        return (head + f"; the GPU waits {1e3 * sync.seconds:.0f} ms a micro-batch for the host (docs/speed.md §2.7). "
                "A larger micro-batch, drop-and-pad with a fixed capacity, CUDA graphs or EP overlap reduce it.")
    return (head + ", so the host keeps up (no wait priced; the measured Megatron-Bridge Qwen3-30B-A3B dropless runs "
            "are 2.2-2.7x slower than this estimate for a reason not modelled, docs/speed.md §2.7; not expert load "
            "imbalance: those runs force-balance the router, §2.15).")


def train_performance(scn: Any, model: ModelSpec, gpu: Any, *, network: Any = None,
                      params: Mapping[str, Any] | None = None, memory: Any = None) -> PerformanceEstimate:
    """Step time, tokens/s/GPU, MFU/HFU and time-to-train of a training or fine-tuning scenario:
    per micro-batch compute on the bottleneck stage + exposed communication, times the micro-batches,
    plus the pipeline bubble, the once-per-step data-parallel reduction, the optimizer and offload."""
    P = params if params is not None else _packaged_efficiency()
    notes: list[str] = []
    c = _train_setup(scn, model, gpu, P, network if network is not None else _network(scn, gpu), notes)
    tr, par, m, n_gpu = scn.train, scn.parallel, c.m, scn.hardware.count
    t_lin, t_attn = _linear_time(c), _attention_time(c)
    t_elt, t_dequant = _memory_bound_time(c)
    t_fsdp2 = _fsdp2_copy_time(c)      # FSDP2's copy-out and gradient copy-in, on the compute stream
    t_wgrad = _unfused_wgrad_time(c)   # Megatron without gradient_accumulation_fusion: main_grad.add_
    t_copy = t_fsdp2 + t_wgrad
    t_compute_mb = t_lin + t_attn + t_elt + t_dequant + t_copy
    t_mp, detail = _model_parallel_comm(c, t_attn, t_lin, t_compute_mb)
    t_fsdp, t_dp_step, dp_detail = _data_parallel_comm(c, t_compute_mb)
    detail.update(dp_detail)
    t_comm_mb = t_mp + t_fsdp
    # an eager HF step cannot finish a micro-batch before the host has issued it (estimate/host_issue.py)
    t_host_mb, host_name = _eager_host_issue(c)
    t_host_wait = max(t_host_mb - t_compute_mb, 0.0)
    sync = _dropless_sync_exposure(c, t_compute_mb, t_mp)
    t_sync = sync.seconds if sync is not None else 0.0
    t_mb = t_compute_mb + t_host_wait + t_sync + t_comm_mb
    bubble = (par.pp - 1) / par.vpp * t_mb if par.pp > 1 else 0.0
    t_opt, t_off = _optimizer_time(c, t_compute_mb)

    step = m * t_mb + bubble + t_dp_step + t_opt + t_off
    note = _dropless_sync_note(c, t_compute_mb, sync)
    if note:
        notes.append(note)
    if t_host_wait > 0:
        notes.append(f"host-bound: issuing a micro-batch's eager ops takes {1e3 * t_host_mb:.0f} ms on {host_name}, the "
                     f"GPU needs {1e3 * t_compute_mb:.0f} ms (docs/speed.md §2.12); a faster host CPU, a larger micro-batch "
                     "or torch.compile shortens it.")
    tok_step = m * tr.micro_batch * scn.dp * tr.seq_len
    tps_gpu = tok_step / step / n_gpu
    fl = training_flops_per_token(model, attention_span(tr), tr.recompute, tr.method, tr.lora_rank,
                                  shares=(c.rc.linear_share, c.rc.attention_share))
    if model.is_encoder_decoder:
        fl = encdec_training_flops(model, tr.seq_len, tr.target_len or tr.seq_len, tr.recompute, tr.method)
    peak = peak_flops(gpu, "fp8" if c.mm_dtype == "fp8" else ("fp32" if tr.precision == "fp32" else c.attn_dtype))
    mfu = fl.model * tps_gpu / peak
    breakdown = {"compute": m * t_compute_mb, "exposed_comm": m * t_comm_mb + t_dp_step,
                 "bubble": bubble, "offload": t_off, "optimizer": t_opt}
    if t_host_wait > 0:     # the GPU idles waiting for the host: part of the step, not of the compute
        breakdown["host_wait"] = m * t_host_wait
    if t_sync > 0:          # the GPU idles after each dropless MoE host sync while the host issues the next layer
        breakdown["host_wait"] = breakdown.get("host_wait", 0.0) + m * t_sync
    # every entry is seconds per optimizer step: the model-parallel and FSDP traffic is per micro-batch (m of
    # them), the data-parallel reduction once per step
    breakdown.update({f"comm_{k}_s": v * (1 if k in ("dp", "dp_replicas") else m) for k, v in detail.items()})
    breakdown.update({"compute_matmul": m * t_lin,
                      "compute_attention": m * t_attn, "compute_memory_bound": m * (t_elt + t_dequant + t_copy)})
    details = {"microbatches": m, "tokens_per_step": tok_step, "clock_factor": round(clock_factor(P, gpu), 4)}
    details["elementwise_kernels"] = _fusion_mode(c)
    details["elementwise_bytes_per_token_layer"] = round(_layer_elementwise_bytes(c), 1)
    details["elementwise_bandwidth_share"] = _layer_bandwidth_share(c)
    unsplit = _unsplit_residual_bytes(c)
    if unsplit > 0:
        # inside compute_memory_bound: Megatron without sequence parallelism (parallel.sp false) runs the residual
        # adds and norms over the whole sequence on every TP rank (_unsplit_residual_bytes)
        details["no_sequence_parallel_s"] = round(m * unsplit / (_bw(c.gpu) * _layer_bandwidth_share(c)), 6)
    if t_fsdp2 > 0:
        # inside compute_memory_bound: FSDP2's all-gather copy-out and reduce-scatter copy-in (_fsdp2_copy_time)
        details["fsdp2_copy_s"] = round(m * t_fsdp2, 6)
    if t_wgrad > 0:
        # inside compute_memory_bound: the DDP hook's main_grad.add_ of each weight gradient (_unfused_wgrad_time)
        details["unfused_wgrad_accumulation_s"] = round(m * t_wgrad, 6)
    t_ring = _cp_ring_time(c)
    if t_ring > 0:
        # inside compute_memory_bound: TE's ring context-parallel attention's copies and output corrections
        details["cp_ring_elementwise_s"] = round(m * t_ring, 6)
    if c.fp8 is not None:
        details["fp8_recipe"] = c.fp8.name
    if t_host_mb > 0:
        details["host_issue_s_per_microbatch"] = round(t_host_mb, 6)
        details["host_cpu"] = host_name
        details["step_bound"] = "host" if t_host_wait > 0 else "gpu"
    if sync is not None:    # Megatron's dropless MoE dispatch: per-layer host sync (estimate/moe_host.py)
        details["moe_host_syncs_per_microbatch"] = sync.syncs
        details["moe_sync_host_layer_forward_s"] = round(sync.host_layer_fwd_s, 6)
        details["moe_sync_gpu_layer_forward_s"] = round(sync.gpu_layer_fwd_s, 6)
        details["moe_sync_host_layer_backward_s"] = round(sync.host_layer_bwd_s, 6)
        details["moe_sync_gpu_layer_backward_s"] = round(sync.gpu_layer_bwd_s, 6)
        details["moe_sync_wait_s_per_microbatch"] = round(t_sync, 6)
    if mfu > 1.0:
        notes.append("MFU above 1: check the GPU peak and model FLOPs.")
    return PerformanceEstimate(step_time_s=step, tokens_per_s_per_gpu=tps_gpu, mfu=mfu,
                               hfu=fl.hardware * tps_gpu / peak,
                               time_to_train_s=tr.tokens / (tps_gpu * n_gpu) if tr.tokens else None,
                               breakdown=breakdown, notes=tuple(notes), details=details)


# ---------------------------------------------------------------------------------------------
# non-time details: PerformanceEstimate.breakdown holds seconds only (the CLI prints every value
# as a duration); counts and labels travel in PerformanceEstimate.details


def performance_details(perf: Any) -> dict[str, Any]:
    """The non-time values of a PerformanceEstimate (batch, micro-batches, KV pool, replicas...)."""
    return dict(getattr(perf, "details", None) or {})


# ---------------------------------------------------------------------------------------------
# inference


def _soft_max(a: float, b: float, p: float) -> float:
    """(a^p + b^p)^(1/p): a roofline whose corner is rounded (p → ∞ gives max(a, b)); near the
    ridge point a kernel reaches neither the bandwidth nor the compute bound (docs/speed.md §2.4)."""
    if a <= 0 or b <= 0:
        return max(a, b)
    m = max(a, b)
    return m * ((a / m) ** p + (b / m) ** p) ** (1.0 / p)


def adp_imbalance(lam: float, ranks: int) -> float:
    """E[max of `ranks` independent Poisson(λ) counts] / λ: how much longer the busiest of
    `ranks` attention-data-parallel replicas works on prompts than the mean, when each starts
    λ prompts per output step at random (1 for one rank; → `ranks` as λ → 0)."""
    if ranks <= 1 or lam <= 0:
        return 1.0
    # E[max] = Σ_{n≥1} P(max ≥ n) = Σ (1 − F(n−1)^ranks)
    e_max, cdf, pmf, n = 0.0, 0.0, math.exp(-lam), 0
    limit = int(lam + 12 * math.sqrt(lam) + 30)
    while n < limit:
        cdf += pmf                      # F(n)
        e_max += 1.0 - cdf ** ranks     # P(max ≥ n+1)
        n += 1
        pmf *= lam / n
    return max(1.0, e_max / lam)


def expected_experts_touched(num_experts: int, top_k: int, tokens: int) -> float:
    """Expected distinct experts a batch of `tokens` routes to, uniform routing:
    E·(1 − (1 − k/E)^B)."""
    if num_experts <= 0:
        return 0.0
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** max(0, tokens))


def weight_bytes(model: ModelSpec, weights: str) -> dict[str, float]:
    """Weight bytes by part at the checkpoint's real format (dtypes.weight_format):
    {'dense': non-expert bytes, 'expert': all routed-expert bytes, 'per_expert_layer': one expert in one layer}."""
    fmt = weight_format(weights)
    q = fmt.bits / 8.0
    dense = expert = 0.0
    for b in model.blocks:
        if b.layer_scope == "vision":
            continue
        if fmt.scope == "linear":
            bpe = q if (b.linear is not None and b.layer_scope == "layer") else 2.0
        elif fmt.scope == "expert":
            bpe = q if b.kind == "expert" else 2.0
        else:
            bpe = q
        if b.kind == "expert":
            expert += b.total * bpe
        else:
            dense += b.total * bpe
    emb = sum(b.total for b in model.blocks if b.kind == "embedding") * (q if fmt.scope in ("all", "file") else 2.0)
    # decode reads every weight once per step except the embedding table (one row per token),
    # unless the table doubles as the tied lm_head
    read = dense + expert - (0.0 if model.tie_embeddings else emb)
    per = expert / max(1, model.num_experts) / max(1, model.num_moe_layers or model.num_layers) if model.is_moe else 0.0
    return {"dense": dense, "expert": expert, "per_expert_layer": per, "total": dense + expert, "read": read}


def _engine(P: Mapping[str, Any], engine: str, family: str | None = None) -> Calibration:
    """Engine profile: defaults, then the engine's entries, then its per-GPU-family entries
    (`family: {apple: {...}}`: llama.cpp's Metal backend runs other kernels than its CUDA one)."""
    eng = dict(P["engines"]["default"])
    spec = dict(P["engines"][engine])
    fam_over = spec.pop("family", None) or {}
    eng.update(spec)
    if family and family in fam_over:
        eng.update(fam_over[family])
    return Calibration(eng, getattr(P, "source", "speed parameters"), f"engines.{engine}")


SSM_SCAN_TENSORS = 6
"""16-bit d_inner-wide tensors one SSM layer moves per token in prefill: causal-conv1d reads x and writes
it, the selective scan reads x, dt and z and writes y (mamba_ssm csrc/selective_scan, causal-conv1d);
the state stays on chip. B and C (2·N per group) are small next to them."""


def ssm_scan_bytes(model: ModelSpec, tokens: float) -> float:
    """Bytes the SSM layers' conv + scan kernels move for `tokens` tokens (memory-bound elementwise work;
    their FLOPs, ModelSpec.ssm_scan_flops_per_token, are small next to the projections)."""
    if model.ssm is None:
        return 0.0
    s = model.ssm
    return model.num_ssm_layers * tokens * 2.0 * (SSM_SCAN_TENSORS * s.d_inner + 2 * s.n_groups * s.d_state)


def _memory_engine_kv_tokens(scn: Any, model: ModelSpec, gpu: Any, memory: Any = None) -> float | None:
    """The KV pool (tokens, whole serving group) the memory engine computes for paged-KV engines
    (vLLM, SGLang, TensorRT-LLM): gpu_memory_utilization × usable − weights − profile-run
    activations − CUDA graphs − runtime. None when the engine has no paged pool or the memory
    engine cannot answer (imported here: memory does not depend on speed, but keep it lazy)."""
    if getattr(scn.infer, "engine", None) not in ("vllm", "sglang", "trtllm"):
        return None
    if memory is not None:      # the pipeline's one memory estimate of this plan
        v = memory.limits.get("kv_tokens")
        return float(v) if v is not None else None
    usable = getattr(gpu, "usable_memory_bytes", None)
    if not usable:
        return None
    try:
        from .memory import estimate_memory
        lim = estimate_memory(scn, model, int(usable)).limits
    except Exception:  # a layout the memory engine rejects: fall back to the speed engine's own estimate
        return None
    v = lim.get("kv_tokens")
    return float(v) if v is not None else None


def _limits_source(max_seqs: int | None, max_tokens: int | None) -> str:
    """Where a vLLM/SGLang estimate's (running-request cap, step token budget) pair came from: each limit the
    scenario leaves unset is the engine profile's default."""
    if max_seqs and max_tokens:
        return "stated"
    if max_seqs or max_tokens:
        return ("max_num_seqs stated, max_num_batched_tokens engine default" if max_seqs
                else "max_num_batched_tokens stated, max_num_seqs engine default")
    return "engine default"


# continuous-batching engines whose running-request cap and step token budget a scenario may set
_BATCHED_ENGINES = ("vllm", "sglang", "trtllm")
# the first llama.cpp build that skips the unused outputs' last-layer FFN and lm_head rows: PR #6122, merged as
# 557410b8f06380560155ac7fcb8316d71ddc9837 on 2024-03-26; ggml-ci's run of that commit prints
# `main: build = 2540 (557410b8)` (docs/speed.md §3.32)
LLAMACPP_OUTPUT_SKIP_BUILD = 2540
# the dense feed-forward blocks that run after llama.cpp's last-layer ggml_get_rows (the attention, its output
# projection included, runs over every prompt token before it)
_FFN_KINDS = ("mlp", "shared_expert", "router")


# vLLM V1's sampler, per element of one step's logits (rows x vocab), in bytes of HBM traffic: every kernel
# reads its input once and writes its output once (a lower bound: a softmax over a 100k-wide row may read it twice).
# vllm/v1/sample/sampler.py @3e342658b2e9c85a30a54d19e64e5ad77b8a26a6 `Sampler.forward`: `logits.to(torch.float32)`
# reads the lm_head's 16-bit output and writes fp32 (2 + 4). Greedy (all_greedy): `greedy_sample`, an argmax (4).
# Random (all_random): `apply_temperature`, an in-place division (4 + 4); then TopKTopPSampler with neither top-k
# nor top-p (vllm/v1/sample/ops/topk_topp_sampler.py @01fa3fe74b058bb604f236341ab2361c7cf3d25b: forward_cuda falls
# back to forward_native, apply_top_k_top_p returns the logits untouched): softmax (4 + 4), then random_sample:
# `q.exponential_()` (writes 4), `probs.div_(q)` (reads 4 + 4, writes 4), argmax (4). A top-p request sorts the
# vocabulary instead (not priced: the sort's passes depend on the radix width).
SAMPLER_BYTES_PER_LOGIT = {"greedy": 2 + 4 + 4,
                           "random": 2 + 4 + (4 + 4) + (4 + 4) + 4 + (4 + 4 + 4) + 4}
# logprobs=0 (the default "raw_logprobs" mode): `compute_logprobs`, a log_softmax of the fp32 logits (4 + 4), and
# gather_logprobs' `batched_count_greater_than` (the sampled token's rank: reads 4); the gathers are per row.
LOGPROB_BYTES_PER_LOGIT = (4 + 4) + 4


def sampler_bytes(rows: float, vocab: int, sampling: str, logprobs: bool) -> float:
    """HBM bytes vLLM V1's sampler moves for `rows` sampled positions over a `vocab`-wide fp32 logits row
    (each tensor-parallel rank samples the gathered, whole vocabulary)."""
    per = SAMPLER_BYTES_PER_LOGIT[sampling] + (LOGPROB_BYTES_PER_LOGIT if logprobs else 0)
    return rows * vocab * per


def trtllm_limits(scn: Any, model: ModelSpec, gpu: Any) -> tuple[int, int, str]:
    """(max_batch_size, max_num_tokens, where from) TensorRT-LLM runs this scenario with on `gpu`
    (trtllm_bench.engine_limits). The estimate, the load simulator (load/engines.py), the launch files
    (launch/trtllm.py) and the start-up profile that sizes the KV pool (memory.py) all read them there."""
    return trtllm_engine_limits(scn, model, gpu.usable_memory_gib)


class _Serving:
    """Decode/prefill timing of one serving layout (shared by infer_performance and serving_curve)."""

    def __init__(self, scn: Any, model: ModelSpec, gpu: Any, P: Mapping[str, Any], kv_capacity_tokens: float | None,
                 network: Any = None, memory: Any = None):
        self.scn, self.model, self.gpu, self.P = scn, model, gpu, P
        inf, par = scn.infer, scn.parallel
        self.inf = inf
        self.tp, self.pp = par.tp, par.pp
        # expert parallelism with attention data parallelism (TensorRT-LLM `enable_attention_dp`,
        # vLLM/SGLang DP-attention + EP): `ep` attention replicas of tp×pp GPUs each decode their
        # own batch and share the routed experts, E/ep per rank (docs/speed.md §3)
        self.ep = par.ep if (model.is_moe and par.ep > 1) else 1
        # attention replicas sharing the experts: ep over data-parallel ranks is attention DP
        # ("DEP": tp=1, dp=ep); ep over the tensor-parallel ranks (vLLM --enable-expert-parallel,
        # tp=ep, dp=1) keeps one tensor-parallel attention replica
        self.adp = min(scn.dp, self.ep) if self.ep > 1 else 1
        self.n_gpu_group = self.tp * self.pp              # one attention replica
        self.group_gpus = self.n_gpu_group * self.adp     # one copy of the model
        self.fam = _family(gpu)
        self.eng = _engine(P, inf.engine, self.fam)
        # the engine's fused MoE step where it is priced kernel by kernel (moe.py: TensorRT-LLM's CUTLASS fused
        # MoE): tile-padded grouped GEMMs at every step, decode included, and the memory-bound passes around them
        self.moe_kernel = serving_moe_kernel(inf.engine) if model.is_moe and model.num_experts > 0 else None
        # the prefill's fused attention kernel and its published speed on this GPU (None: calibrated factor)
        self.prefill_kernel = _fused_kernel(model, engine_kernel(inf.engine, self.fam))
        self.prefill_scale = _kernel_scale(self.prefill_kernel, gpu, P)
        # eager engines (HF transformers): how fast this host issues kernels, relative to the host the
        # packaged host costs were read on (hardware/hosts.py)
        # vLLM without CUDA graphs (infer.cuda_graphs false, --enforce-eager) issues its forward eagerly too
        # (engine_host.eager_issue_layer_s); the HF engine's own constant wins where it has one
        self.issue_layer_s = self.eng["host_issue_layer_s"] or eager_issue_layer_s(inf.engine, inf.cuda_graphs)
        # HF transformers: the constant was read on 4.46.3; another counted version issues more or fewer ops per
        # decoder layer (host_issue.hf_decode_version_scale, docs/speed.md §3.30)
        if inf.engine == "hf" and self.issue_layer_s:
            self.issue_layer_s *= hf_decode_version_scale(inf.transformers_version,
                                                          model.num_kv_heads == model.num_heads)
        # the engine's per-sequence host work each iteration and its front end's latency per request
        # (estimate/engine_host.py): one place, priced here for `serve` and the load simulator alike; both host
        # terms are reference-host seconds, scaled by this host's single-thread speed
        self.engine_host = engine_host(inf.engine, getattr(inf, "async_scheduling", None),
                                       getattr(inf, "trtllm_backend", "pytorch"), getattr(inf, "vllm_v0", False),
                                       int(getattr(inf, "num_scheduler_steps", 1) or 1),
                                       getattr(inf, "python_version", None), getattr(inf, "vllm_v0_release", None))
        # vLLM V0 (engine_host.vllm_v0_host): part of its host work is per sequence group, and a request's
        # SamplingParams.n samples share one group (infer.parallel_samples); its async output processor runs the
        # output share beside the next forward, except under enforce_eager, pipeline parallelism or speculative
        # decoding (vllm/config.py verify_async_output_proc @v0.6.3)
        self.host_group_per_seq = self.engine_host.group_s / max(1, int(getattr(inf, "parallel_samples", 1) or 1))
        self.host_output_beside = (self.engine_host.output_seq_s > 0 and inf.cuda_graphs
                                   and getattr(scn.parallel, "pp", 1) == 1 and getattr(inf, "speculative", None) is None)
        needs_host = self.issue_layer_s or self.engine_host.seq_s > 0
        self.host_speed, self.host_name = _host_speed(scn, gpu) if needs_host else (1.0, "")
        # an in-process client (infer.front_end false: offline generate, MLPerf's C++ harness) has no HTTP server
        self.frontend_s = 0.0 if getattr(inf, "front_end", None) is False else self.engine_host.frontend_s
        # the API server's time per streamed token (engine_host.stream_token_s), one core per process, scaled by
        # the host's single-thread speed; infer.api_server_count processes share the tokens (load simulator)
        srv = self.engine_host.stream_token_s if self.frontend_s > 0 else 0.0
        self.api_servers = int(getattr(inf, "api_server_count", None) or 1)
        self.stream_token_s = srv / _host_speed(scn, gpu)[0] / self.api_servers if srv > 0 else 0.0
        # vLLM 0.11.0's chat endpoint parses the chat template for every request in an API-server process
        # (infer.chat_template_parse, engine_host.chat_template_parse_s), scaled by the host's single-thread speed
        tpl = chat_template_parse_s(inf.engine, getattr(inf, "chat_template_parse", False)) if self.frontend_s else 0.0
        self.template_parse_s = tpl / _host_speed(scn, gpu)[0] if tpl > 0 else 0.0
        self.clock = clock_factor(P, gpu)
        self.fmt = weight_format(inf.weights)
        self.wb = weight_bytes(model, inf.weights)
        self.kvb = kv_bytes(inf.kv_cache)
        # the activations' 16-bit type, read off the KV cache's (bitsandbytes' batch-1 kernel differs by it on Hopper)
        self.act_dtype = "fp16" if str(getattr(inf.kv_cache, "name", inf.kv_cache)) == "fp16" else "bf16"
        cd = self.fmt.compute_dtype
        self.compute_dtype = _compute_dtype(gpu, "fp16" if cd in ("bf16", "fp16") else cd)
        # the grouped GEMMs' smallest M tile where the engine's kernels fix it (None: no padding priced, and the row
        # factor on prompt rows only, as for the engines whose MoE step is not read)
        self.moe_tile = None
        if self.moe_kernel is not None:
            self.moe_tile = self.moe_kernel.tile_for(_kernel_family(gpu), _dtype_class(self.compute_dtype))
        # TensorRT-LLM's NVFP4 experts on data-centre Blackwell: the grouped GEMMs at the published fused-MoE curve
        # (fp4_moe_rows_scale, docs/speed.md §3.23) on top of the measured row curve, prompt rows and decode rows alike
        self.fp4_moe_curve = (inf.engine == "trtllm" and self.moe_tile is not None
                              and _dtype_class(self.compute_dtype) == "fp4")
        # TensorRT-LLM's dense NVFP4 linears: the activation quantize kernels that no producer fuses
        # (quant_kernels.trtllm_nvfp4_quantize_bytes, docs/speed.md §3.28); the MoE step prices its own (moe.py)
        self.dense_fp4_quantize = (inf.engine == "trtllm" and _dtype_class(self.compute_dtype) == "fp4"
                                   and not model.is_moe and not model.is_encoder_decoder)
        # vLLM / SGLang: the Triton fused MoE's BLOCK_SIZE_M, which depends on the call's tokens (moe.py,
        # triton_moe_block_m); None where that kernel does not run these experts
        self.triton_moe = model.is_moe and model.num_experts > 0 and self._triton_block_m(1.0) is not None
        self.bw = _bw(gpu) * _fam(P["memory"], self.fam) * self.eng["decode_bw_scale"]
        # Engines that run 16-bit GEMMs with fp16 accumulation (llama.cpp's cuBLAS path) get the
        # full fp16 tensor rate, which on GeForce is twice the fp32-accumulate rate.
        self.peak_mm = peak_flops(gpu, self.compute_dtype)
        if self.eng["fp16_accumulate"] and self.compute_dtype in ("fp16", "bf16"):
            self.peak_mm = float((getattr(gpu, "peak_flops_per_s", {}) or {}).get("fp16") or self.peak_mm)
        self.peak_mm *= self.clock
        # A checkpoint that quantizes only the decoder layers' linears (fmt.scope "linear": ModelOpt FP8/NVFP4,
        # AWQ, GPTQ, ...) keeps lm_head 16-bit (weight_bytes reads it at 2 bytes): its GEMM runs at the 16-bit rate.
        self.head_dtype = None
        if self.fmt.scope == "linear" and self.compute_dtype not in ("fp16", "bf16", "fp32", "tf32"):
            self.head_dtype = _compute_dtype(gpu, "fp16")
            self.head_peak = peak_flops(gpu, self.head_dtype) * self.clock
        # continuous-batching engines compute a prompt's logits at its last position only (the one sampled):
        # TensorRT-LLM LogitsProcessor (tensorrt_llm/_torch/modules/logits_processor.py @89fd9b74: the
        # hidden states at cumsum(seq_lens) - 1 unless return_context_logits), vLLM V1 (gpu_model_runner.py
        # `hidden_states[logits_indices]`), SGLang (LogitsProcessor prunes to each request's last position)
        self.last_token_logits = inf.engine in _BATCHED_ENGINES
        # llama.cpp from build 2540 (commit 557410b8, PR #6122, 2024-03-26) also runs the last layer's feed-forward,
        # the output norm and the lm_head over the positions whose logits are asked for only (llama-bench and
        # llama-cli: a prompt's last one): src/models/llama.cpp @069be0ae `if (il == n_layer - 1 && inp_out_ids)`
        # ggml_get_rows after the attention block. Earlier builds (infer.llamacpp_build < 2540) ran them over every
        # prompt token (docs/speed.md §3.32)
        self.output_rows_only = False
        if inf.engine == "llama.cpp":
            build = getattr(inf, "llamacpp_build", None)
            self.output_rows_only = build is None or build >= LLAMACPP_OUTPUT_SKIP_BUILD
            self.last_token_logits = self.output_rows_only
        self.peak_attn = peak_flops(gpu, "fp16") * self.clock * _fam(P["attention"], self.fam)
        # TensorRT-LLM's FP8 context FMHA (FP8/NVFP4 checkpoint + FP8 KV cache, attention_kernels.py): the prefill
        # attention's matmuls run on the FP8 tensor cores (a GPU without them keeps the 16-bit kernel)
        self.fp8_attn = (fp8_context_attention(inf.engine, cd, inf.kv_cache)
                         and peak_flops(gpu, "fp8") > peak_flops(gpu, "fp16"))
        gpn = _gpus_per_node(scn, gpu)
        net = network if network is not None else _network(scn, gpu)
        self.network, self.gpus_per_node = net, gpn
        self.link = group_link(gpu, self.tp, self.tp, gpn, net, P["comm"]) if self.tp > 1 else LOCAL
        self.link_ep = group_link(gpu, self.ep, self.tp * self.adp, gpn, net, P["comm"]) if self.ep > 1 else LOCAL
        # the running-request cap and the tokens per step, where the scenario states them (vLLM --max-num-seqs
        # / --max-num-batched-tokens, SGLang --max-running-requests / --chunked-prefill-size, TensorRT-LLM
        # max_batch_size / max_num_tokens); the engine profile's defaults otherwise. A source that raises
        # max_num_seqs to its request count (AMD's MI300X vLLM tables) batches past the default 256.
        self.notes: list[str] = []
        self.limits_source = _limits_source(inf.max_num_seqs, inf.max_num_batched_tokens)
        stated = inf.engine in _BATCHED_ENGINES
        # vLLM's default cap is its own per-GPU value, the one the memory engine's start-up profile and the load
        # simulator use; the other engines' come from their profile
        from .memory import vllm_default_max_num_seqs
        default = (vllm_default_max_num_seqs(scn, int(gpu.usable_memory_bytes)) if inf.engine == "vllm"
                   else self.eng["max_batch"])
        self.max_batch = int((inf.max_num_seqs if stated else None) or default)
        budget = inf.max_num_batched_tokens if stated else None
        if inf.engine == "trtllm":
            # both stated, or both from trtllm-bench's heuristic (trtllm_limits); launch writes the same pair
            self.max_batch, budget, self.limits_source = trtllm_limits(scn, model, gpu)
            if self.limits_source != "stated" and (inf.max_num_seqs or inf.max_num_batched_tokens):
                self.notes.append(
                    "only one of infer.max_num_seqs / infer.max_num_batched_tokens is set: trtllm-bench uses a "
                    "stated pair only (bench/benchmark/utils/general.py @0171265e get_settings), so both come from "
                    f"its heuristic here ({self.max_batch} / {budget}); set both to run with your own.")
        # TensorRT-LLM CUDA graphs with padding, where the scenario lists their batch sizes (trtllm_bench.py)
        self.graph_sizes = None
        if inf.engine == "trtllm" and inf.cuda_graphs and inf.cuda_graph_batch_sizes:
            self.graph_sizes = trtllm_captured_sizes(inf.cuda_graph_batch_sizes, self.max_batch,
                                                     int(budget or self.eng["max_num_tokens"]))
        # vLLM V1 with CUDA graphs: the largest step that replays one (engine_host.vllm_v1_max_capture_size, the
        # default capture sizes); a decode-only step above it launches every kernel from the host (decode_step)
        self.v1_graph_max = None
        if inf.engine == "vllm" and inf.cuda_graphs and not getattr(inf, "vllm_v0", False):
            from .memory import _engine_batched_tokens, vllm_v1
            if vllm_v1(scn):
                self.v1_graph_max = vllm_v1_max_capture_size(
                    self.max_batch, int(budget or _engine_batched_tokens(scn, int(gpu.usable_memory_bytes))))
        # SGLang without its overlap scheduler (before v0.4): CUDA graphs for decode batches up to 160 only
        # (engine_host.SGLANG_V03_GRAPH_MAX_BS); a larger decode batch runs the model's eager forward
        if inf.engine == "sglang" and inf.cuda_graphs and not self.engine_host.overlapped:
            self.v1_graph_max = SGLANG_V03_GRAPH_MAX_BS
        self.chunk_tokens = (budget or self.eng["prefill_chunk_tokens"]) if self.eng["prefill_chunk_tokens"] else None
        self.max_step_tokens = float(budget or self.eng["prefill_chunk_tokens"] or self.eng["max_num_tokens"])
        # vLLM's V0 engine (infer.vllm_v0, vllm_v0.py): its own defaults, max_num_seqs 256 and, for a long-context
        # model, chunked prefill at 512 tokens a step; a step that carries a prompt chunk runs without CUDA graphs
        self.v0_budget = None
        # V0 on ROCm runs per-tensor FP8 linears as torch._scaled_mm on >= 17 rows, at its published MI300X times
        # (rocm_fp8_gemm.py): they replace the decode memory term's read of those weights
        self.v0_scaled_mm = (inf.engine == "vllm" and getattr(inf, "vllm_v0", False) and self.fam == "cdna3"
                             and self.fmt.name == "fp8" and rocm_fp8_measured(getattr(gpu, "id", "")))
        # Engines that replay CUDA graphs for decode-only batches only and run every step carrying a prompt as the
        # model's eager forward, from a synchronous loop (the host issues a step's kernels only after the previous
        # step's tokens are back): such a step lasts max(GPU, host issue) (engine_host.eager_issue_layer_s).
        # * vLLM V0: ModelInputForGPUBuilder._use_captured_graph ("decode_only and not enforce_eager ...",
        #   vllm/worker/model_runner.py:666-670 of the vllm-0.6.0 wheel; add_seq_group sets decode_only False for any
        #   prompt, :645-647);
        # * SGLang without its overlap scheduler (before v0.4, or turned off): ModelRunner.forward_decode replays a
        #   graph, forward_extend calls the model's forward (srt/model_executor/model_runner.py:523-556 of the
        #   sglang-0.3.0 sdist); its Llama is built from vLLM's layers (srt/models/llama.py:25-38: vLLM's parallel
        #   linears, rotary embedding, vocab embedding), so vLLM's measured per-layer issue is taken for it.
        # The load simulator's prompt steps (load/cost.py EngineCost.step) take it from here; v0_offline_run prices
        # the same issue for V0's chunked steps.
        self.prompt_issue_s = 0.0
        eager_prompts = ((inf.engine == "vllm" and getattr(inf, "vllm_v0", False))
                         or (inf.engine == "sglang" and not self.engine_host.overlapped))
        if eager_prompts and inf.cuda_graphs:
            self.prompt_issue_s = (eager_issue_layer_s("vllm", False) * model.num_layers / self.pp
                                   / _host_speed(scn, gpu)[0])
        if inf.engine == "vllm" and getattr(inf, "vllm_v0", False) and getattr(inf, "num_scheduler_steps", 1) == 1:
            if not inf.max_num_seqs:
                self.max_batch = V0_MAX_NUM_SEQS
            self.v0_budget = v0_chunked_budget(inf.max_model_len or model.max_position, inf.max_num_batched_tokens)
            if self.v0_budget:
                self.chunk_tokens, self.max_step_tokens = self.v0_budget, float(self.v0_budget)
        # bitsandbytes paths (estimate/quant_kernels.py): quantized linear parameters and calls per rank
        self.bnb = is_bitsandbytes(self.fmt)
        self.dequant = self.bnb or materialises_16_bit(self.fmt, inf.engine)
        layer_linears = [b for b in model.blocks if b.linear is not None and b.layer_scope == "layer"]
        self.q_linear_params = sum(b.total for b in layer_linears) / self.n_gpu_group if self.dequant else 0.0
        self.linear_calls = sum(b.count for b in layer_linears if b.kind != "expert") / self.pp
        # bitsandbytes' dequantize kernel and AutoGPTQ's cuda-old kernel are bound by instruction issue where
        # the GPU's SMs issue fewer of their instructions per second than HBM feeds their bytes (quant_kernels.py);
        # the GPU's peak issue rate (hardware/sms.py), None where the catalog has no SM figures (bytes alone)
        self.warp_issue_per_s = None
        if self.dequant:
            from ..hardware.sms import sm_spec
            sm = sm_spec(getattr(gpu, "id", ""))
            self.warp_issue_per_s = sm.warp_issue_per_s if sm else None
        # vLLM V1's sampler over the step's fp32 logits (sampler_bytes); the other engines' samplers are not priced
        self.sample_per_row = sampler_bytes(1.0, model.vocab_size, inf.sampling, inf.logprobs) if inf.engine == "vllm" else 0.0
        self.beams = inf.beam_width
        # vLLM's beam search shares the prompt's KV blocks and prefill between beams (prefix caching); HF generate
        # and TensorRT-LLM (modelled like HF) run the prompt once per beam (memory.beam_kv_tokens)
        # (an encoder-decoder runs its encoder once per request: its prefill covers all beams)
        self.prompt_per_beam = 1.0 / self.beams if (inf.engine == "vllm" or model.is_encoder_decoder) else 1.0
        # passes over the KV bytes per decode step: HF's DynamicCache copies the cache and repeat_kv
        # expands a GQA cache to every query head (quant_kernels.py)
        # (Falcon-7B's HF code hands SDPA its single K/V head un-expanded: traits.sdpa_broadcast_kv; MLA
        # keeps the passes of the cache it stores)
        expands = bool(getattr(inf, "repeat_kv", False)) and not (model.is_mla or model.traits.sdpa_broadcast_kv)
        self.kv_passes = (hf_kv_passes(model.num_heads, model.num_kv_heads if expands else model.num_heads)
                          if inf.engine == "hf" else 1.0)
        # torch < 2.1 grows HF's cache with a per-element `cat` bound by DRAM latency (quant_kernels.py): its read
        # rate from the GPU's SMs and measured latency; None (the HBM rate) for later torch or an unlisted GPU
        self.cat_read_rate = _hf_cat_read_rate(inf, gpu, self.kvb) if inf.engine == "hf" else None
        self.cross_kv_copies = float(self.beams) if model.is_encoder_decoder else 1.0
        dec = sum(b.total for b in model.blocks if b.stream == "decoder")
        self.decoder_weight_share = dec / max(model.params_total, 1) if model.is_encoder_decoder else 1.0
        # KV capacity (tokens, whole model copy = ep attention replicas)
        kv_tok_gpu = model.kv_cache_bytes_per_token(self.kvb) / (1 if model.is_mla else self.tp) / self.pp
        self.kv_per_token_gpu = kv_tok_gpu
        self.kv_source = "caller"
        if kv_capacity_tokens is None:
            kv_capacity_tokens = _memory_engine_kv_tokens(scn, model, gpu, memory)
            self.kv_source = "memory engine"
            if kv_capacity_tokens is not None:   # the memory engine's pool is one rank's (one replica)
                kv_capacity_tokens *= self.adp
        if kv_capacity_tokens is None:
            self.kv_source = "estimate"
            usable = float(getattr(gpu, "usable_memory_bytes", 0) or getattr(gpu, "memory_bytes", 0))
            util = inf.gpu_memory_utilization if self.eng["memory_utilization_applies"] else 1.0
            free = usable * util - self._weights_rank() - self.eng["reserve_bytes"]
            kv_capacity_tokens = max(0.0, free / kv_tok_gpu) * self.adp if kv_tok_gpu > 0 else float("inf")
        self.kv_capacity_tokens = kv_capacity_tokens
        # SGLang without its overlap scheduler (0.3): its own default running-request cap, from the pool and the
        # context length (engine_host.sglang_v03_max_running_requests); a stated infer.max_num_seqs wins
        if (inf.engine == "sglang" and not self.engine_host.overlapped and not inf.max_num_seqs
                and math.isfinite(kv_capacity_tokens) and kv_capacity_tokens > 0):
            self.max_batch = sglang_v03_max_running_requests(kv_capacity_tokens / self.adp,
                                                             int(inf.max_model_len or model.max_position))
        # speculative decoding (speculative.py): tokens per verification step and the drafter's model
        self.spec = getattr(inf, "speculative", None)
        self.spec_tokens = 1.0
        if self.spec is not None:
            from .speculative import acceptance_rate, draft_model, expected_tokens, layer_share
            self.spec_k = int(self.spec.num_tokens)
            self.spec_a = acceptance_rate(self.spec)
            self.spec_tokens = expected_tokens(self.spec_a, self.spec_k)
            self._spec_share = layer_share(model)
            self._draft_sv = None
            if self.spec.method == "draft":   # the draft model on the same GPUs and TP degree
                dscn = scn.model_copy(update={"infer": inf.model_copy(update={"speculative": None})})
                self._draft_sv = _Serving(dscn, draft_model(self.spec), gpu, P, float("inf"), network)
        # SSM layers: a fixed state per sequence (read and written every decode step), which bounds the
        # sequences that fit whatever their length (vLLM: one state slot per running request)
        self.state_per_seq_gpu = model.ssm_state_bytes_per_sequence(2.0, 2.0) / self.tp / self.pp
        self.seq_capacity = float("inf")
        if self.state_per_seq_gpu:
            lim = memory.limits.get("max_concurrency") if memory is not None else None
            if lim is not None:
                self.seq_capacity = float(lim)
            elif kv_tok_gpu == 0:
                usable = float(getattr(gpu, "usable_memory_bytes", 0) or getattr(gpu, "memory_bytes", 0))
                util = inf.gpu_memory_utilization if self.eng["memory_utilization_applies"] else 1.0
                free = usable * util - self._weights_rank() - self.eng["reserve_bytes"]
                self.seq_capacity = max(0.0, free / self.state_per_seq_gpu) * self.adp

    # ---- pieces --------------------------------------------------------------------------
    def _weights_rank(self) -> float:
        """Weight bytes held by one GPU: dense part / (tp·pp); experts / (ep·pp) under EP
        (not tensor-split then), else / (tp·pp)."""
        if self.ep > 1:
            return (self.wb["total"] - self.wb["expert"]) / self.n_gpu_group + self.wb["expert"] / (self.ep * self.pp)
        return self.wb["total"] / self.n_gpu_group

    def _weights_read(self, batch_tokens: float) -> float:
        """Weight bytes one GPU reads in a step of `batch_tokens` tokens per attention replica:
        its dense shard plus the local experts the whole group's tokens touch."""
        m = self.model
        if m.is_encoder_decoder:
            # a decode step reads the decoder's weights only (the encoder ran once over the prompt)
            return self.wb["read"] * self.decoder_weight_share / self.n_gpu_group
        if not m.is_moe:
            return self.wb["read"] / self.n_gpu_group
        layers = m.num_moe_layers or m.num_layers
        group_tokens = int(round(batch_tokens * self.adp))
        touched = expected_experts_touched(m.num_experts, m.experts_per_tok, group_tokens)
        dense = (self.wb["read"] - self.wb["expert"]) / self.n_gpu_group
        if self.ep > 1:
            return dense + touched / self.ep * self.wb["per_expert_layer"] * layers / self.pp
        return dense + touched * self.wb["per_expert_layer"] * layers / self.n_gpu_group

    def _streams(self, prefill: bool) -> tuple[str, ...] | None:
        """Encoder-decoder: the prompt runs the encoder and the cross-attention k/v projections (once per
        request and beam), each decode step only the decoder; None for decoder-only models (every block)."""
        if not self.model.is_encoder_decoder:
            return None
        return ("encoder", "cross_kv") if prefill else ("decoder",)

    def _linear_time(self, tokens: float, prefill: bool, step_tokens: float | None = None,
                     part: str = "all") -> float:
        """Matmul time of `tokens` rows (per attention replica) through the local weight shard.
        Expert GEMMs are grouped GEMMs whose row count per expert is set by the whole step
        (`step_tokens` per replica, default `tokens`): the step's tokens · k/E (· ep/tp under EP)."""
        m, P = self.model, self.P
        t = 0.0
        scale = self.eng["prefill_eta_scale"] if prefill else 1.0
        if prefill and self.fmt.family in ("gptq", "awq", "gguf", "nf4") and self.fmt.bits < 16:
            scale *= self.eng["quant_prefill_scale"]
        streams = self._streams(prefill)
        for b in m.blocks:
            if b.linear is None or b.layer_scope == "vision":
                continue
            if part != "all" and (b.kind == "expert") != (part == "expert"):
                continue
            if streams is not None and b.stream not in streams:
                continue
            k_in, n_out = b.linear
            ep_split = b.kind == "expert" and self.ep > 1
            if not ep_split:          # under EP the experts are whole on each rank (layout.py)
                if k_in >= n_out:
                    k_in /= self.tp
                else:
                    n_out /= self.tp
            m_eff, pad, curve = 1.0, 1.0, 1.0
            if b.kind == "expert":
                share = float(self.adp) if ep_split else 1.0     # every replica's tokens reach the experts
                rows = tokens * b.active_fraction * share
                count = b.count / self.pp / (self.ep if ep_split else 1)
                m_eff = max(tokens, step_tokens or 0.0) * b.active_fraction * share
                if self.moe_tile is not None:
                    m_eff, pad = self._expert_tiles(max(tokens, step_tokens or 0.0) * share)
                    if self.fp4_moe_curve:
                        curve = fp4_moe_rows_scale(P, max(tokens, step_tokens or 0.0) * share
                                                   * m.experts_per_tok / m.num_experts)
                elif self.triton_moe:   # vLLM / SGLang: rows padded to the Triton config's BLOCK_SIZE_M
                    call = max(tokens, step_tokens or 0.0) * share
                    m_eff, pad = self._expert_tiles(call, self._triton_block_m(call))
                if rows < 1.0:  # tiny batch: only the touched experts run
                    count *= max(rows, 1e-9)
                    rows = 1.0
            else:
                rows, count = tokens, b.count / (self.pp if b.layer_scope == "layer" else 1)
                if b.stream == "cross_kv":
                    rows *= self.cross_kv_copies      # HF generate projects the repeated encoder output per beam
                if b.kind == "lm_head" and prefill and self.last_token_logits:
                    rows = min(rows, 1.0)             # a prompt's logits: its last position only
                if (prefill and self.output_rows_only and b.kind in _FFN_KINDS and b.layer_scope == "layer"
                        and streams is None and count >= 1 and rows > 1.0):
                    # llama.cpp's last layer runs its feed-forward over the output row only
                    count = count - 1.0 + 1.0 / rows
            flops = 2.0 * rows * k_in * n_out * count * pad
            dtype, peak = self.compute_dtype, self.peak_mm
            if b.kind == "lm_head" and self.head_dtype is not None:
                dtype, peak = self.head_dtype, self.head_peak
            # the row penalty applies to prompt chunks (compute-bound); a decode step's few-row
            # expert GEMMs are bound by reading the touched experts, which its memory term charges.
            # An engine whose MoE kernels fix the M tile (self.moe_tile) runs one grouped GEMM over the step's
            # rows, decodes and prompt chunks alike, so the row factor applies to both at the tile-padded rows:
            # prompt rows at the packaged d0_M, decode rows at the kernel's measured curve (moe.measured_rows_half).
            # The packaged d0_M (matmul_rows_half: DeepGEMM's measured grouped-GEMM curve, no longer fitted on
            # TensorRT-LLM's rows since 2026-12-04, docs/speed.md §3.25) drives TensorRT-LLM's prompt rows only.
            # vLLM / SGLang's Triton fused MoE prices its own tile padding (above) at the dense efficiency; any other
            # engine's prompt rows take the measured curve.
            eta = gemm_efficiency(P, self.fam, dtype, m_eff, k_in, n_out,
                                  grouped=b.kind == "expert" and not self.triton_moe
                                  and (prefill or self.moe_tile is not None),
                                  rows_half=None if (prefill and self.inf.engine == "trtllm") else measured_rows_half())
            t += flops * curve / (peak * eta * scale)
        return t

    def _triton_block_m(self, tokens: float) -> int | None:
        """BLOCK_SIZE_M of vLLM's / SGLang's Triton fused MoE for a call over `tokens` tokens on this GPU: its
        tuned config for (E, the expert intermediate size on this rank, device, dtype) or its default (moe.py)."""
        m = self.model
        inter = [b.linear[0] for b in m.blocks if b.kind == "expert" and b.linear is not None
                 and b.linear[1] == m.hidden_size]
        # the Triton fused MoE runs 16-bit and per-tensor FP8 experts; MXFP4 / INT4 / block-FP8 experts go to other
        # kernels (Marlin, matmul_ogs, CUTLASS/DeepGEMM) that moe.py does not read
        if not inter or self.fmt.family not in ("float", "fp8") or self.fmt.name == "fp8-block":
            return None
        n = inter[0] / (1 if self.ep > 1 else self.tp)
        return triton_moe_block_m(self.inf.engine, tokens, m.num_experts, int(n), getattr(self.gpu, "id", ""),
                                  _dtype_class(self.compute_dtype))

    def _expert_tiles(self, group_tokens: float, tile: int | None = None) -> tuple[float, float]:
        """(rows of each running expert's grouped-GEMM problem, padding included; computed rows over routed
        rows) for a step whose `group_tokens` tokens reach the experts, routed uniformly at random
        (moe.padded_rows_per_expert, `tile` or the kernel's smallest M tile)."""
        m = self.model
        k, e = m.experts_per_tok, m.num_experts
        if k <= 0 or e <= 0:
            return 1.0, 1.0
        n = max(1, int(round(group_tokens)))
        padded = padded_rows_per_expert(n, k, e, tile or self.moe_tile)
        touched = 1.0 - (1.0 - k / e) ** n
        return padded / touched, padded / (n * k / e)

    def _moe_passes(self, tokens: float) -> float:
        """Seconds of the memory-bound kernels of the engine's fused MoE step (moe.fused_moe_pass_bytes) over
        `tokens` tokens per attention replica: every MoE layer on this GPU, at the HBM roofline."""
        if self.moe_kernel is None or tokens <= 0:
            return 0.0
        m = self.model
        h = float(m.hidden_size)
        experts = [b for b in m.blocks if b.kind == "expert" and b.linear is not None]
        n1 = sum(b.linear[1] for b in experts if b.linear[0] == m.hidden_size)
        inter = sum(b.linear[0] for b in experts if b.linear[1] == m.hidden_size)
        gathered = tokens * self.adp                       # attention DP: every replica's tokens are gathered
        if self.ep > 1:
            rows = gathered * m.experts_per_tok / self.ep   # the copies routed to this rank's E/ep experts
        else:
            rows = tokens * m.experts_per_tok
            n1, inter = n1 / self.tp, inter / self.tp       # tensor-parallel experts: each GPU a slice of I
        dc = _dtype_class(self.compute_dtype)
        a = gemm_input_bytes(dc)
        per_layer = fused_moe_pass_bytes(tokens, rows, h, n1, inter, a, 2.0, quantize_input=dc in ("fp4", "fp8"),
                                         output_tokens=gathered)
        layers = (m.num_moe_layers or m.num_layers) / self.pp
        return per_layer * layers / memory_rate(self.P, self.gpu)

    def _elementwise(self, tokens: float, step_rows: float | None = None) -> float:
        """Norms, activations, residual adds, RoPE: the forward share (1/3) of the training layer's bytes for the
        engine's kernels (HF transformers eager aten ops; vLLM, SGLang, TensorRT-LLM and llama.cpp fused
        kernels), at the bandwidth share those kernels were measured to reach (estimate/elementwise.py); plus
        TensorRT-LLM's unfused NVFP4 activation quantize kernels of the dense linears (_quantize_passes), the one
        place a step adds them, so an attention-DP prompt's dense_scale covers them too."""
        m = self.model
        mode = "eager" if self.inf.engine == "hf" else "fused"
        layer = elementwise.model_layer_bytes(m, _mlp_width_active(m), "hf", mode) * FORWARD_SHARE / self.tp
        share = elementwise.bandwidth_share(mode, elementwise.eager_recipe("hf", m.norm))
        t = layer * tokens * m.num_layers / self.pp / (_bw(self.gpu) * share)
        return t + ssm_scan_bytes(m, tokens) / self.tp / self.pp / memory_rate(self.P, self.gpu) \
            + self._quantize_passes(tokens, step_rows)

    def _quantize_passes(self, tokens: float, step_rows: float | None = None) -> float:
        """Seconds of TensorRT-LLM's unfused NVFP4 activation quantize kernels of the dense linears over `tokens`
        rows (quant_kernels.trtllm_nvfp4_quantize_bytes: qkv and gate_up unless the TP all-reduce fusion feeds
        them, down_proj always), at the HBM roofline as the fused MoE's passes are; 0 for every other engine/format.
        `step_rows`: the rows of the whole forward these rows ride in (its all-reduce message decides the fusion)."""
        if not self.dense_fp4_quantize or tokens <= 0:
            return 0.0
        m = self.model
        b = trtllm_nvfp4_quantize_bytes(tokens, m.trtllm_llama_decoder, m.hidden_size, m.intermediate_size / self.tp,
                                        m.num_layers, self.tp, self.pp, step_tokens=step_rows)
        return b / memory_rate(self.P, self.gpu)

    def _overhead(self) -> float:
        m = self.model
        t = self.eng["step_overhead_s"] + self.eng["layer_overhead_s"] * m.num_layers / self.pp
        # TensorRT-LLM's MoE layers: a router GEMM and the MoE module in place of the GatedMLP's three ops, at their
        # measured floors (estimate/trtllm_kernels.py, docs/speed.md §3.33). Not where the call follows the published
        # NVFP4 fused-MoE curve (fp4_moe_rows_scale, §3.23), whose latency already holds the op's fixed time.
        # a QK-norm layer's fused QK-norm + RoPE kernel (Qwen3's attention), the same floors
        if m.traits.qk_norm != "none":
            t += self.eng["qk_norm_layer_overhead_s"] * m.num_layers / self.pp
        moe_s = self.eng["moe_layer_overhead_s"]
        if moe_s and m.is_moe and m.num_experts > 0 and not self.fp4_moe_curve:
            t += moe_s * (m.num_moe_layers or m.num_layers) / self.pp
        return t

    def _host_issue(self, rows: float) -> float:
        """Host seconds to issue one forward (engines without CUDA graphs that run eagerly: HF
        transformers, vLLM --enforce-eager); the GPU runs it asynchronously, so a step lasts max(GPU, host)."""
        per_layer = self.issue_layer_s
        if not per_layer:
            return 0.0
        ref = per_layer * self.model.num_layers / self.pp + self.linear_calls * host_issue_per_linear(
            self.fmt, rows, float(getattr(self.inf, "llm_int8_threshold", 6.0)))
        # AutoGPTQ cuda-old's QuantLinear launches 3 more ops per call than nn.Linear (quant_kernels.
        # gptq_extra_host_ops, docs/speed.md §3.37), at the HF constant's seconds per counted op
        extra_ops = gptq_extra_host_ops(self.fmt, rows, getattr(self.inf, "gptq_kernel", None))
        if extra_ops and self.eng["host_issue_layer_s"]:
            ref += self.linear_calls * extra_ops * reference_op_s(self.eng["host_issue_layer_s"])
        return ref / self.host_speed

    def _ungraphed_issue(self) -> float:
        """Host seconds to launch one vLLM V1 forward that no CUDA graph covers (a decode-only step of more tokens
        than the largest captured size, engine_host.vllm_v1_max_capture_size): the compiled model's kernels are
        launched one by one from the host. Priced with the one measured vLLM host-issue constant,
        engine_host.VLLM_EAGER_LAYER_S (V0 eager PyTorch modules, PR 1440); V1's Inductor-compiled pieces launch
        fewer, fused kernels, so this is an upper bound on V1's launch cost, not a V1 measurement. SGLang without its
        overlap scheduler (0.3) takes the same path above its largest graph (engine_host.SGLANG_V03_GRAPH_MAX_BS): its
        eager forward runs vLLM's layers, the constant's own case."""
        return VLLM_EAGER_LAYER_S * self.model.num_layers / self.pp / self.host_speed

    def host_step(self, seqs: float) -> float:
        """Engine host seconds of one iteration that schedules `seqs` sequences, beyond the calibrated fixed
        step cost (engine_host.py), on this host (the constant is in reference-host seconds, hardware/hosts.py);
        vLLM V0's per-group share counts once per infer.parallel_samples sequences."""
        return (self.engine_host.seq_s + self.host_group_per_seq) * seqs / self.host_speed

    def host_output_step(self, seqs: float) -> float:
        """The part of host_step that is vLLM V0's output processing (engine_host.VLLM_V0_OUTPUT_*), 0 elsewhere."""
        h = self.engine_host
        if not h.output_seq_s:
            return 0.0
        n = max(1, int(getattr(self.inf, "parallel_samples", 1) or 1))
        return (h.output_seq_s + h.output_group_s / n) * seqs / self.host_speed

    def with_host(self, gpu_s: float, seqs: float) -> float:
        """An iteration's wall time: its GPU time and the host work of `seqs` sequences, overlapped or
        one after the other as the engine runs them (engine_host.step_with_host). vLLM V0's async output
        processor runs the previous step's output share during this forward: max(GPU, that share) + the rest."""
        host = self.host_step(seqs)
        if self.host_output_beside:
            out = self.host_output_step(seqs)
            return step_with_host(max(gpu_s, out), host - out, self.engine_host.overlapped)
        return step_with_host(gpu_s, host, self.engine_host.overlapped)

    def _scaled_mm_extra(self, rows: float) -> float:
        """vLLM V0 on ROCm with per-tensor FP8 weights: seconds its torch._scaled_mm linears take at `rows` decode rows
        (padded to 17) beyond reading those weights at the decode memory rate (rocm_fp8_gemm.py); 0 elsewhere."""
        if not self.v0_scaled_mm:
            return 0.0
        m, gid = max(rows, float(V0_PAD_ROWS)), self.gpu.id
        return sum(c * (rocm_fp8_linear_s(gid, m, n, k) - n * k / self.bw)
                   for c, n, k in vllm_linear_shapes(self.model.blocks, self.tp, self.pp))

    def _dequant_bytes(self, rows: float) -> float:
        if not self.dequant:
            return 0.0
        kernel = getattr(self.inf, "gptq_kernel", None)
        return dequant_extra_bytes(self.fmt, rows, self.q_linear_params, self.inf.engine, kernel) \
            + gptq_kernel_extra_bytes(self.fmt, rows, self.q_linear_params, self.inf.engine, kernel)

    def _dequant_issue(self, rows: float) -> float:
        """Seconds a quantized-weight kernel runs beyond the bytes priced for it at `rows` rows: bitsandbytes'
        issue-bound dequantize, AutoGPTQ cuda-old's pass per row (quant_kernels.py)."""
        if not self.dequant:
            return 0.0
        if self.bnb:
            return bnb_dequant_issue_excess_s(self.fmt, rows, self.q_linear_params, self.warp_issue_per_s, self.bw) \
                + bnb_gemv_issue_excess_s(self.fmt, rows, self.q_linear_params, self.fam, self.act_dtype,
                                          self.warp_issue_per_s, self.bw)
        return gptq_row_pass_excess_s(self.fmt, rows, self.q_linear_params, self.inf.engine,
                                      getattr(self.inf, "gptq_kernel", None), self.warp_issue_per_s, self.bw)

    def _comm(self, tokens: float) -> float:
        """TP all-reduces and EP all-to-alls of one forward over `tokens` rows (per attention replica)."""
        return self._tp_comm(tokens) + self._ep_comm(tokens)

    def riding_comm(self, rows: float, tokens: float) -> float:
        """Collective seconds `tokens` more rows add to a forward that already runs `rows` rows. One
        iteration of a continuous-batching engine runs one forward over all its scheduled tokens
        (vLLM V1 `GPUModelRunner._prepare_inputs` builds one input batch of the step's
        `total_num_scheduled_tokens`, decodes and prompt chunks alike), so
        each layer issues one set of all-reduces / all-to-alls for the whole batch: rows riding in it
        pay their bytes, not a second per-call latency. `rows` = 0 is a forward of its own."""
        return self._comm(rows + tokens) - self._comm(rows)

    def _tp_comm(self, tokens: float) -> float:
        if self.tp <= 1:
            return 0.0
        return 2 * self.model.num_layers / self.pp * all_reduce_time(tokens * self.model.hidden_size * 2.0, self.tp, self.link)

    def _ep_comm(self, tokens: float) -> float:
        """EP dispatch + combine per MoE layer: each rank sends its tokens' k hidden vectors
        (16-bit) to the experts' ranks and gets them back (all-to-all, (ep−1)/ep of the payload)."""
        if self.ep <= 1:
            return 0.0
        m = self.model
        layers = (m.num_moe_layers or m.num_layers) / self.pp
        if (self.moe_kernel is not None and self.moe_kernel.dp_exchange == "allgather_reducescatter"
                and self.adp > 1 and self.tp == 1):
            # TensorRT-LLM under attention DP: all-gather the quantized tokens, reduce-scatter the outputs
            # (moe.attention_dp_exchange_bytes)
            a = gemm_input_bytes(_dtype_class(self.compute_dtype))
            ag, rs = attention_dp_exchange_bytes(tokens, self.adp, m.hidden_size, m.experts_per_tok, a)
            return layers * (all_gather_time(ag, self.ep, self.link_ep) + reduce_scatter_time(rs, self.ep, self.link_ep))
        payload = tokens * m.experts_per_tok * m.hidden_size * 2.0 / self.tp
        return 2 * layers * all_to_all_time(payload, self.ep, self.link_ep)

    def decode_step(self, batch: float, context: float, step_tokens: float | None = None,
                    query_rows: float | None = None, padded_rows: float | None = None) -> dict[str, float]:
        """One decode step of `batch` sequences at mean `context`. `query_rows` (speculative
        verification: batch x (k + 1)) is how many positions the forward computes; the KV cache is
        still read once per sequence. `padded_rows`: the CUDA graph the step replays runs this many
        rows (TensorRT-LLM pads a decode-only batch with dummy one-token requests up to the next
        captured size, trtllm_graphs.py): the linears, element-wise work and collectives see them, the
        KV read and attention do not (a dummy request holds one token)."""
        m = self.model
        q = batch if query_rows is None else query_rows
        q_attn = q
        if padded_rows is not None and padded_rows > q:
            q = padded_rows
        w = self._weights_read(q)
        kv_attn = batch * m.kv_cache_bytes(int(context), self.kvb) / (1 if m.is_mla else self.tp) / self.pp
        # SSM layers read and write their fixed state once per token (selective_state_update), whatever
        # the context: decode cost does not grow with length
        kv = kv_attn + 2.0 * batch * self.state_per_seq_gpu
        t_wmem = (w + self._dequant_bytes(q)) / self.bw + self._scaled_mm_extra(q)
        t_kv = kv * self.kv_passes / self.bw
        if self.cat_read_rate and kv_attn > 0:   # the cache copy's two passes at the latency-bound cat's rate
            t_kv += hf_cat_seconds(kv_attn, self.bw, self.cat_read_rate) - 2.0 * kv_attn / self.bw
        t_mem = t_wmem + t_kv
        t_lin = self._linear_time(q, prefill=False, step_tokens=step_tokens)
        ctx_sum = sum(min(wd, context) if wd else context for wd in m.attention_windows)
        attn_flops = q_attn * 2.0 * m.num_heads * (m.head_dim + m.v_head_dim) * ctx_sum / self.tp / self.pp
        t_attn = attn_flops / self.peak_attn
        comm = self._tp_comm(q) + self._ep_comm(q)
        # Two rooflines, not one: a layer's GEMMs (bound by the weight read or by their FLOPs) and its
        # attention kernel (bound by the KV read) are separate kernels on one stream and run one after the
        # other (vLLM LlamaAttention.forward: qkv_proj -> attn -> o_proj, vllm/model_executor/models/llama.py
        # at e06c9ba2a6ea923a84add30f5dafaea126429b81; TensorRT-LLM's gpt_attention
        # plugin between its GEMM plugins), so a batch large enough to make the GEMMs compute-bound still
        # pays its KV read in full (docs/serving-load.md, "Decode attention is its own kernel").
        sharp = self.P["roofline_sharpness"]
        # bitsandbytes' dequantize is its own kernel before each GEMM, AutoGPTQ cuda-old a pass per row: their
        # issue-bound excess adds (quant_kernels.py)
        t_issue = self._dequant_issue(q)
        # the sampler's kernels run after the lm_head, bound by their passes over the step's fp32 logits
        t_sample = q_attn * self.sample_per_row / self.bw
        t_moe = self._moe_passes(q)
        t = _soft_max(t_wmem, t_lin, sharp) + _soft_max(t_kv, t_attn, sharp) + t_issue \
            + self._elementwise(q) + t_moe + comm + self._overhead() + t_sample
        host = self._host_issue(q)
        if not host and self.v1_graph_max is not None and q > self.v1_graph_max:
            host = self._ungraphed_issue()
        gpu_t = max(t, host)
        t = self.with_host(gpu_t, batch)
        return {"time": t, "gpu_time": gpu_t, "memory": t_mem, "compute": t_lin + t_attn, "comm": comm, "host": host,
                "tp_comm": self._tp_comm(q), "ep_comm": self._ep_comm(q),
                "overhead": self._overhead(), "weights_bytes": w, "kv_bytes": kv, "quant_kernel_issue": t_issue,
                "sampler": t_sample, "sampler_bytes": q_attn * self.sample_per_row, "moe_passes": t_moe,
                "quantize_passes": self._quantize_passes(q)}

    def prefill(self, prompt: float, compute_only: bool = False, step_tokens: float | None = None,
                dense_scale: float = 1.0) -> float:
        """Prefill of one prompt. `dense_scale` multiplies the rank-local part (attention, dense
        linears, element-wise work) but not the routed experts, whose work the EP group shares:
        attention-DP imbalance (see point())."""
        return self.prefill_chunk(prompt, 0, compute_only=compute_only, step_tokens=step_tokens,
                                  dense_scale=dense_scale)

    def prefill_attention_flops(self, tokens: float, offset: float = 0.0) -> float:
        """Attention FLOPs (one GPU) of prompt positions [offset, offset + tokens) of one request,
        each attending causally to everything before it: the difference of the whole-prefix totals."""
        m = self.model
        if m.is_encoder_decoder:
            # the encoder's bidirectional self-attention over the prompt (no causal half)
            per_pair = 2.0 * m.num_heads * (m.head_dim + m.v_head_dim) * m.encoder_layers
            return per_pair * tokens * (offset + tokens) / self.tp / self.pp

        def total(n: float) -> float:
            return n * attention_flops_per_token_forward(m, int(n)) if n > 0 else 0.0
        return (total(offset + tokens) - total(offset)) / self.tp / self.pp

    def prefill_attention_time(self, flops: float, context: float | None = None) -> float:
        """Forward-only attention of a prompt whose causal prefix reaches `context` tokens. Engines whose
        kernel's speed is published for this GPU family (vLLM and SGLang run FlashAttention-3 on Hopper and
        FlashAttention-2-class kernels on A100, HF FlashAttention-2: estimate/attention_kernels.py) take its
        forward rate at that length; the rest the calibrated efficiency."""
        # FP8 context FMHA: the 16-bit kernel's rate times the published FP8/16-bit forward speed ratio at this
        # length (attention_kernels.fp8_forward_speedup)
        fp8 = fp8_forward_speedup(context or 1.0) if self.fp8_attn else 1.0
        if self.prefill_scale is not None and context:
            return flops / (fp8 * kernel_rates(self.prefill_kernel, _kernel_family(self.gpu), context,
                                               self.prefill_scale)[0])
        # forward-only fused attention (prefill) runs faster than the fwd+bwd training kernels that
        # calibrated η_attn: `prefill_attention_scale` (TensorRT-LLM's FMHA, 16-bit terms; cuDNN's published B200
        # forward rate since 2026-12-04, fitted on the perf-overview rows before: docs/speed.md §4)
        return flops / (fp8 * self.peak_attn * min(1.0 / _fam(self.P["attention"], self.fam),
                                                   self.eng["prefill_eta_scale"] * self.eng["prefill_attention_scale"]))

    def prefill_chunk(self, tokens: float, offset: float = 0.0, *, compute_only: bool = False,
                      step_tokens: float | None = None, dense_scale: float = 1.0,
                      riding_with: float = 0.0) -> float:
        """Prefill of prompt positions [offset, offset + tokens) of one request (a whole prompt:
        offset 0). The linears see `tokens` rows; attention covers the prefix already cached.
        The cost function a serving step is built from (here, in point(), and in estimate/load/cost.py).
        `compute_only`: the chunk rides in a step that already runs `riding_with` rows (a mixed
        decode + prompt iteration): no weight read or step overhead of its own, and its collectives
        are the extra bytes in the step's own calls (riding_comm), not a second set of calls."""
        prompt = tokens
        t_exp = self._linear_time(prompt, prefill=True, step_tokens=step_tokens, part="expert")
        t_lin = t_exp + dense_scale * self._linear_time(prompt, prefill=True, step_tokens=step_tokens, part="dense")
        t_attn = self.prefill_attention_time(self.prefill_attention_flops(prompt, offset), offset + prompt)
        step_rows = max(prompt + (riding_with if compute_only else 0.0), step_tokens or 0.0)
        t_c = t_lin + dense_scale * (t_attn + self._elementwise(prompt, step_rows)) + self._moe_passes(prompt)
        if compute_only:  # a prompt chunk riding in a mixed batch: no own weight read, no own step cost
            return t_c + self.riding_comm(riding_with, prompt)
        comm = self._comm(prompt)
        t_w = (self._weights_read(prompt) + self._dequant_bytes(prompt)) / self.bw
        t = max(t_c, t_w) + self._dequant_issue(prompt) + comm + self._overhead()
        return self.with_host(max(t, self._host_issue(prompt)), 1)

    def spec_step_extra(self, batch: float, context: float) -> float:
        """Seconds a speculative step adds to the plain decode step of `batch` sequences at mean
        `context`: the target's forward over k + 1 positions per sequence (one step: the weights read
        once, the linears, attention and TP/EP collectives over batch x (k + 1) rows, each sequence's KV
        read once) minus the plain step, plus the drafter's k proposals (speculative.py). 0 without
        speculative decoding."""
        if self.spec is None or batch <= 0:
            return 0.0
        k = self.spec_k
        plain = self.decode_step(batch, context)["time"]
        verify = self.decode_step(batch, context, query_rows=batch * (k + 1))["time"] - plain
        m = self.spec.method
        if m == "draft":
            draft = k * self._draft_sv.decode_step(batch, context)["time"]
        elif m in ("eagle", "mtp"):
            draft = k * self._spec_share * (plain - self._overhead())
        else:                                  # ngram: a host-side lookup
            draft = 0.0
        return verify + draft

    def offline_throughput(self, requests: int) -> dict[str, Any]:
        """Output tokens/s of the model copy over a finite offline run: `requests` requests of the scenario's
        prompt and output lengths, all queued at once and spread evenly over the attention replicas, as
        `trtllm-bench throughput` runs its dataset (trtllm_bench.offline_run_seconds: the waves, the ramp through
        the token budget, the last partial wave). Each iteration is priced as point()'s steady step is: the
        running decodes (a generation-only iteration replays the padded CUDA graph), the prompts it admits riding
        in the same forward, the host work of its sequences overlapped or not."""
        inf = self.inf
        P_len, O_len = inf.prompt_len, inf.output_len
        n_r = math.ceil(requests / self.adp)
        steady = self.point(n_r * self.adp)
        if not steady["fits"] or self.beams > 1 or self.spec is not None:
            return steady      # beams and speculative steps: the steady-state point only
        batch = steady["batch_per_replica"]
        ctx = P_len + O_len / 2.0
        step_tok = min(max(self.max_step_tokens, float(batch)), batch * (1.0 + P_len / max(1, O_len))) \
            if batch > 1 else None
        # attention DP: every rank runs the same admission schedule (trtllm-bench's identical requests, spread
        # ceil/floor(N / ranks)) at its own phase, and each iteration lasts as long as the rank with the most
        # prompt work (trtllm_bench.phase_imbalance): the rank-local prompt work scales by E[max over ranks] /
        # mean of the schedule's own prompts per iteration, not by the steady-state Poisson factor of point()
        adp = 1.0
        extra = 1 if (inf.engine == "trtllm" and self.engine_host.overlapped) else 0
        if self.adp > 1 and batch > 1:
            schedule: list = []
            trtllm_offline_run(n_r, P_len, O_len, batch, int(self.max_step_tokens), lambda d, p: 0.0, extra,
                               trace=schedule)
            adp = trtllm_phase_imbalance(schedule, self.adp)
        dec: dict[tuple[int, bool], float] = {}
        pf: dict[int, float] = {}

        def decode_s(d: int, graph: bool) -> float:
            if (d, graph) not in dec:
                pad = trtllm_padded_batch(d, self.graph_sizes) if (graph and self.graph_sizes) else None
                dec[(d, graph)] = self.decode_step(d, ctx, step_tokens=step_tok,
                                                   padded_rows=pad if pad and pad > d else None)["gpu_time"]
            return dec[(d, graph)]

        def prompt_s(d: int) -> float:
            if d not in pf:
                pf[d] = self.prefill_chunk(P_len, 0, compute_only=True, step_tokens=step_tok, dense_scale=adp,
                                           riding_with=d)
            return pf[d]

        def step_s(decodes: int, prompts: int) -> float:
            if prompts == 0:
                gpu = decode_s(decodes, True)
            elif decodes == 0:      # a prompt-only iteration: one prefill forward, the rest riding in it
                gpu = self.prefill(P_len, step_tokens=step_tok, dense_scale=adp) + (prompts - 1) * prompt_s(0)
            else:
                gpu = decode_s(decodes, False) + prompts * prompt_s(decodes)
            return self.with_host(gpu, decodes + prompts)

        # TensorRT-LLM's overlap scheduler keeps a finished request in one more iteration (trtllm_bench.py): `extra`
        seconds, _ = trtllm_offline_run(n_r, P_len, O_len, batch, int(self.max_step_tokens), step_s, extra)
        thr = n_r * O_len / seconds * self.adp if seconds > 0 else 0.0
        return dict(steady, output_tokens_per_s=thr, output_tokens_per_s_per_gpu=thr / self.group_gpus,
                    offline_requests=n_r * self.adp, offline_seconds=seconds, offline_adp_prompt_scale=adp)

    def v0_offline_run(self, requests: int) -> dict[str, Any] | None:
        """vLLM V0's `LLM.generate` of `requests` prompts handed over at once (benchmark_latency.py times one such
        batch, benchmark_throughput.py its whole dataset) under V0's chunked-prefill schedule (vllm_v0.py): the
        decode-only steps replay a CUDA graph, a step carrying prompt chunks runs its decodes and the chunks in one
        eager forward, max(GPU, host issue) (engine_host.eager_issue_layer_s). None where V0's default leaves
        chunked prefill off or the scenario is not V0."""
        if not self.v0_budget or self.beams > 1 or self.spec is not None:
            return None
        inf = self.inf
        P_len, O_len = inf.prompt_len, inf.output_len
        ctx = P_len + O_len / 2.0          # mean context of a decoding request, as offline_throughput prices it
        issue = eager_issue_layer_s("vllm", False) * self.model.num_layers / self.pp / _host_speed(self.scn, self.gpu)[0]
        cache: dict[tuple, float] = {}

        def step_s(decodes: int, chunks) -> float:
            key = (decodes, tuple(chunks))
            if key not in cache:
                if not chunks:
                    cache[key] = self.decode_step(decodes, ctx)["time"]
                    return cache[key]
                rest = list(chunks)
                if decodes:
                    gpu, rows = self.decode_step(decodes, ctx)["gpu_time"], float(decodes)
                else:                      # a prompt-only step: the first chunk carries the weight read and overhead
                    c, o = rest.pop(0)
                    gpu, rows = self.prefill_chunk(c, o), float(c)
                for c, o in rest:          # the other chunks ride in the same forward
                    gpu += self.prefill_chunk(c, o, compute_only=True, riding_with=rows)
                    rows += c
                cache[key] = self.with_host(max(gpu, issue), decodes + len(chunks))
            return cache[key]

        n_r = math.ceil(requests / self.adp)
        seconds, steps = v0_offline_run(n_r, P_len, O_len, self.max_batch, self.v0_budget, step_s)
        thr = n_r * O_len / seconds * self.adp if seconds > 0 else 0.0
        return {"requests": n_r * self.adp, "seconds": seconds, "steps": steps, "output_tokens_per_s": thr,
                "max_num_batched_tokens": self.v0_budget, "max_num_seqs": self.max_batch,
                "eager_issue_s": issue}

    def point(self, concurrency: int) -> dict[str, Any]:
        """One operating point. `concurrency` requests are spread over the ep attention replicas
        of one model copy; batch, TTFT and TPOT are one replica's, throughput the copy's."""
        inf = self.inf
        P_len, O_len = inf.prompt_len, inf.output_len
        ctx_avg = P_len + O_len / 2.0
        k = self.beams                     # beam search: each request decodes k sequences (beams) at once
        conc_r = math.ceil(concurrency / self.adp) * k
        # tokens held per sequence (beam): a shared prompt counts once per request
        per_seq = P_len * self.prompt_per_beam + self.eng["kv_reserve_output_fraction"] * O_len
        kv_limit = int(self.kv_capacity_tokens / self.adp // per_seq) \
            if per_seq > 0 and math.isfinite(self.kv_capacity_tokens) else conc_r
        if math.isfinite(self.seq_capacity):      # SSM state slots
            kv_limit = min(kv_limit, int(self.seq_capacity / self.adp))
        max_b = self.max_batch
        batch = max(0, min(conc_r, kv_limit, max_b))
        limit = "concurrency" if batch == conc_r else ("kv_cache" if batch == kv_limit else "max_batch")
        if batch == 0:
            return {"concurrency": concurrency, "batch": 0, "limited_by": "memory", "fits": False,
                    "ttft_s": None, "tpot_s": None, "output_tokens_per_s": 0.0}
        # tokens of one steady-state step (per replica): the running decodes plus the prompts of
        # the B/O requests that start per output token, up to the engine's token budget; it sets
        # the rows each grouped expert GEMM gets
        step_tok = min(max(self.max_step_tokens, float(batch)), batch * (1.0 + P_len / max(1, O_len))) if batch > 1 else None
        step = self.decode_step(batch, ctx_avg, step_tokens=step_tok)
        if self.graph_sizes is not None and batch > 1:
            # TensorRT-LLM: decode-only steps replay the CUDA graph of the next captured size, padded
            # with dummy requests; steps that carry prompts run eagerly at the real batch (trtllm_bench.py)
            pad = trtllm_padded_batch(batch, self.graph_sizes)
            if pad is not None and pad > batch:
                share = trtllm_prompt_share(batch, P_len, O_len, self.max_step_tokens)
                padded = self.decode_step(batch, ctx_avg, step_tokens=step_tok, padded_rows=pad)
                step = dict(padded, time=share * step["time"] + (1.0 - share) * padded["time"],
                            gpu_time=share * step["gpu_time"] + (1.0 - share) * padded["gpu_time"])
        if self.spec is not None:   # a speculative step yields spec_tokens per sequence on average
            step = dict(step, time=(step["time"] + self.spec_step_extra(batch, ctx_avg)) / self.spec_tokens)
        # one request's prompt: k copies where every beam runs it (HF generate decoder-only), once otherwise
        t_pf = self.prefill(P_len) * k * self.prompt_per_beam
        # attention data parallel (ep > 1): every MoE layer synchronises the replicas, so a step
        # lasts as long as the replica with the most prompt work; prompts arrive independently
        # (TensorRT-LLM's ADP balance blog), λ = B/O per output step per replica, and the
        # rank-local prefill work scales by E[max of ep Poisson(λ)]/λ
        adp = adp_imbalance(batch / max(1, O_len), self.adp) if (self.adp > 1 and batch > 1) else 1.0
        # the prompt rides in the decode steps: one forward, one set of collectives per layer
        t_pf_c = self.prefill_chunk(P_len, 0, compute_only=True, step_tokens=step_tok, dense_scale=adp,
                                    riding_with=batch) * self.prompt_per_beam
        chunk = self.chunk_tokens
        if batch > 1:
            tpot = step["time"] + batch / O_len * t_pf_c   # prompts of new requests share the steps
            if self.spec is None and self.engine_host.overlapped and self.engine_host.seq_s > 0:
                # the riding prompts are GPU work of the same iteration: an overlapping engine's host work
                # (per scheduled sequence) hides under all of it, not under the decode part alone
                tpot = self.with_host(step["gpu_time"] + batch / O_len * t_pf_c, batch)
            ttft = t_pf + step["time"]
            if self.inf.engine == "hf":
                # HF generate batches statically: one forward prefills every prompt of the batch before any
                # first token (GenerationMixin: the padded input_ids of all sequences in one model call), so
                # the first prompt's prefill (host pass and compute) is followed by the others' compute
                ttft = t_pf + (batch - 1) * t_pf_c
            if chunk:  # chunked prefill (vLLM, SGLang): the prompt rides in mixed steps whose token
                # budget the running decodes share, one chunk per step
                room = max(1.0, float(chunk) - batch)
                n_chunks = math.ceil(P_len / room)
                ttft = max(ttft, n_chunks * step["time"] + t_pf_c)
            thr = batch / tpot
        else:
            tpot = step["time"]
            ttft = t_pf
            thr = O_len / (t_pf + O_len * step["time"])
        if conc_r > batch:  # the rest wait in the queue for a free slot
            ttft += (conc_r - batch) / batch * (ttft + O_len * tpot)
        ttft += self.frontend_s   # the front end's own latency (HTTP, tokenisation, first chunk): no GPU time
        ttft += self.template_parse_s   # the request's own chat-template parse (vLLM 0.11.0; engine_host.py)
        thr *= self.adp    # every attention replica of the copy produces its own tokens
        beam_tokens = thr
        thr /= k           # beam search returns one sequence per request: its tokens are the output
        return {"concurrency": concurrency, "batch": batch * self.adp, "batch_per_replica": batch,
                **({"beam_width": k, "requests_in_flight": batch * self.adp / k, "beam_tokens_per_s": beam_tokens}
                   if k > 1 else {}),
                "limited_by": limit, "fits": True,
                "ttft_s": ttft, "tpot_s": tpot, "output_tokens_per_s": thr,
                "output_tokens_per_s_per_gpu": thr / self.group_gpus,
                "decode_bound": "memory" if step["memory"] >= step["compute"] else "compute",
                "decode_step_s": step["time"], "prefill_s": t_pf, "step_tokens": step_tok}


def _hf_cat_read_rate(inf: Any, gpu: Any, kv_element_bytes: float) -> float | None:
    """Read rate of torch's per-element `cat` on this GPU (torch < 2.1: quant_kernels.torch_cat_read_rate), or None
    where the run's torch vectorises it, is unknown, or the GPU has no SM count or measured DRAM latency."""
    if not torch_cat_per_element(getattr(inf, "torch_version", None)):
        return None
    from ..hardware.sms import dram_latency_s, sm_spec
    gid = getattr(gpu, "id", "")
    sm, lat = sm_spec(gid), dram_latency_s(gid)
    return torch_cat_read_rate(sm.sm_count, kv_element_bytes, lat) if sm and lat else None


def infer_performance(scn: Any, model: ModelSpec, gpu: Any, *, params: Mapping[str, Any] | None = None,
                      kv_capacity_tokens: float | None = None, network: Any = None,
                      memory: Any = None) -> PerformanceEstimate:
    """TTFT, TPOT and output throughput of one serving replica (tp×pp GPUs) at scn.infer.concurrency."""
    note = cpu_layers_note(scn, model)
    if note:
        return PerformanceEstimate(notes=(note,), details={"gpu_layers": scn.infer.gpu_layers,
                                                           "cpu_layers": model.num_layers - scn.infer.gpu_layers})
    P = params if params is not None else _packaged_efficiency()
    sv = _Serving(scn, model, gpu, P, kv_capacity_tokens, network, memory)
    pt = sv.point(scn.infer.concurrency)
    notes = list(sv.notes)
    if not pt["fits"]:
        notes.append("no KV-cache room left after the weights: the model does not fit for serving.")
        return PerformanceEstimate(notes=tuple(notes), details={
            "batch": 0, "kv_capacity_tokens": int(sv.kv_capacity_tokens), "kv_capacity_source": sv.kv_source})
    if pt["limited_by"] != "concurrency":
        notes.append(f"only {pt['batch']} of {scn.infer.concurrency} requests run at once "
                     f"(limited by {pt['limited_by']}); the rest queue, which raises TTFT.")
    if sv.ep > 1:
        notes.append(f"expert parallel over {sv.ep} attention-data-parallel replicas of {sv.n_gpu_group} GPU(s): "
                     f"each holds {sv.model.num_experts / sv.ep:g} experts per layer and decodes its own "
                     f"{pt['batch_per_replica']} sequences; all-to-all dispatch/combine per MoE layer.")
    step = sv.decode_step(pt["batch_per_replica"], scn.infer.prompt_len + scn.infer.output_len / 2.0,
                          step_tokens=pt.get("step_tokens"))
    if step["host"] > 0 and step["host"] >= step["time"]:
        notes.append(f"decode is bound by the host CPU issuing kernels one by one (eager mode), not by the GPU: "
                     f"{step['host'] * 1e3:.1f} ms per step on {sv.host_name}. A CPU with faster single-thread "
                     f"speed decodes faster; set hardware.host_cpu or hardware.host_single_thread_score."
                     + (" CUDA graphs (infer.cuda_graphs true: no --enforce-eager) replay the step without it."
                        if scn.infer.engine != "hf" else ""))
    engine_host_bound = step["time"] > step["gpu_time"] * (1 + 1e-9) and sv.engine_host.overlapped
    if engine_host_bound:
        notes.append(f"decode is bound by the engine's host work per scheduled sequence, not by the GPU: "
                     f"{sv.host_step(pt['batch_per_replica']) * 1e3:.1f} ms per step for {pt['batch_per_replica']} "
                     f"sequences on {sv.host_name} against {step['gpu_time'] * 1e3:.1f} ms of GPU work "
                     "(estimate/engine_host.py). A CPU with faster single-thread speed, or fewer sequences per "
                     "replica, runs faster; set hardware.host_cpu or hardware.host_single_thread_score.")
    if step["quant_kernel_issue"] > 0:
        notes.append(f"the quantized-weight kernel ({'bitsandbytes dequantize' if sv.bnb else 'AutoGPTQ cuda-old'}) "
                     f"is bound by instruction issue on this GPU, not by memory: "
                     f"+{step['quant_kernel_issue'] * 1e3:.1f} ms per decode step beyond its bytes "
                     "(estimate/quant_kernels.py; docs/speed.md §3.9).")
    replicas = max(1, scn.hardware.count // sv.group_gpus)
    bd = {"prefill": pt["prefill_s"], "decode_step": step["time"], "decode_memory": step["memory"],
          "decode_compute": step["compute"], "tp_comm": step["tp_comm"], "ep_comm": step["ep_comm"],
          "overhead": step["overhead"]}
    if sv.frontend_s:   # inside ttft_s: the front end's own latency per request (engine_host.py)
        bd["frontend"] = sv.frontend_s
    if sv.template_parse_s:   # inside ttft_s: vLLM 0.11.0's chat-template parse per request (engine_host.py)
        bd["chat_template_parse"] = sv.template_parse_s
    if sv.spec is not None:
        notes.append(f"speculative decoding ({sv.spec.method}, k={sv.spec_k}, acceptance {sv.spec_a:g}): "
                     f"{sv.spec_tokens:.2f} tokens per verification step (Leviathan et al. 2023); TPOT is one "
                     "step's time (drafter included) divided by that.")
    details = {"batch": pt["batch"], "limited_by": pt["limited_by"],
               "kv_capacity_tokens": int(min(sv.kv_capacity_tokens, 2**62)),
               "kv_capacity_source": sv.kv_source, "replicas": replicas,
               "gpus_per_replica": sv.group_gpus, "expert_parallel": sv.ep,
               "decode_bound": "host" if (step["host"] >= step["time"] > 0 or engine_host_bound) else pt["decode_bound"],
               "clock_factor": round(sv.clock, 4),
               **({k: pt[k] for k in ("beam_width", "requests_in_flight", "beam_tokens_per_s")} if "beam_width" in pt
                  else {})}
    if scn.infer.engine in _BATCHED_ENGINES:   # the limits this estimate ran the engine with (launch writes them)
        details["engine_limits"] = {"max_batch": sv.max_batch, "max_num_tokens": int(sv.max_step_tokens),
                                    "source": sv.limits_source}
    if sv.v0_scaled_mm:
        extra = sv._scaled_mm_extra(pt["batch_per_replica"])
        notes.append(f"vLLM V0 on ROCm runs its per-tensor FP8 linears as torch._scaled_mm (hipBLASLt) on at least 17 rows, "
                     f"priced at their published MI300X times (ROCm 6.3.1): {extra * 1e3:+.1f} ms a decode step against "
                     "reading those weights at the packaged memory rate (estimate/rocm_fp8_gemm.py, docs/speed.md §3.21).")
    v0 = sv.v0_offline_run(scn.infer.concurrency)
    if v0 is not None:   # vLLM V0: the whole batch handed to LLM.generate at once (benchmark_latency.py's run)
        details["v0_offline_run"] = v0
        notes.append(f"vLLM V0 runs this long-context model with chunked prefill at {v0['max_num_batched_tokens']} "
                     f"tokens a step (its default above 32,768 tokens of max_model_len), and a step carrying a prompt "
                     f"chunk without CUDA graphs: the {scn.infer.concurrency} requests handed over at once take "
                     f"{v0['seconds']:.2f} s, {v0['steps']} steps ({v0['output_tokens_per_s']:,.0f} output tokens/s; "
                     "details.v0_offline_run, docs/speed.md §3.21).")
    if sv.host_name:
        details["host_cpu"] = sv.host_name
        details["host_speed_vs_reference"] = round(sv.host_speed, 3)
    if sv.kv_passes > 1:   # HF: the cache is copied by torch.cat (and repeat_kv under GQA) every step
        details["kv_cache_passes_per_step"] = sv.kv_passes
        if sv.cat_read_rate:
            details["kv_cache_cat_read_bytes_per_s"] = sv.cat_read_rate
            notes.append(f"torch < 2.1 copies the KV cache with a per-element cat kernel bound by DRAM latency: "
                         f"{sv.cat_read_rate / 1e9:.0f} GB/s of reads on this GPU.")
        if sv.kv_passes > 3:
            notes.append(f"transformers' repeat_kv copies the KV cache out to all {sv.model.num_heads} query heads "
                         f"every step: {sv.kv_passes:g} passes over the cache's bytes per step instead of 1.")
    if sv.spec is not None:
        details["speculative"] = {"method": sv.spec.method, "num_tokens": sv.spec_k, "acceptance_rate": sv.spec_a,
                                  "tokens_per_step": sv.spec_tokens}
    if sv.beams > 1:
        notes.append(f"beam search: {sv.beams} beams per request decode together (batch counts beams); output "
                     "tokens/s counts the one returned sequence per request, beam_tokens_per_s every beam's tokens.")
    return PerformanceEstimate(ttft_s=pt["ttft_s"], tpot_s=pt["tpot_s"],
                               output_tokens_per_s=pt["output_tokens_per_s"] * replicas,
                               breakdown=bd, notes=tuple(notes), details=details)


def cpu_layers_note(scn: Any, model: ModelSpec) -> str | None:
    """llama.cpp with infer.gpu_layers (-ngl) below the model's layer count runs the other layers on the CPU from
    host memory. The memory estimate counts them there (estimate/memory.py); the speed of a CPU layer (host memory
    bandwidth, the CPU's matmul kernels) is not modelled, so no speed is given instead of the all-GPU one (which
    -ngl 0 and -ngl 32 used to share, 5.5 ms per token for Llama-3.1-8B Q4_K_M on an H100)."""
    inf = getattr(scn, "infer", None)
    if inf is None or scn.is_training or inf.engine != "llama.cpp" or inf.gpu_layers is None:
        return None
    if inf.gpu_layers >= model.num_layers:
        return None
    return (f"infer.gpu_layers = {inf.gpu_layers} leaves {model.num_layers - inf.gpu_layers} of {model.name}'s "
            f"{model.num_layers} layers in host memory, where llama.cpp runs them on the CPU: gpuplan does not model "
            "the CPU's speed (host memory bandwidth, its matmul kernels), so no TTFT or TPOT is given; leave "
            "gpu_layers unset (or set it to the layer count) for the all-GPU speed")


def serving_curve(scn: Any, model: ModelSpec, gpu: Any, concurrencies: Sequence[int], *,
                  params: Mapping[str, Any] | None = None, kv_capacity_tokens: float | None = None,
                  network: Any = None, memory: Any = None) -> list[dict]:
    """Throughput, TTFT and TPOT of one replica versus concurrency (stops growing at the KV or
    engine batch limit; the extra requests queue)."""
    note = cpu_layers_note(scn, model)
    if note:
        from ..errors import CommandHint, UnsupportedError
        raise UnsupportedError("infer.gpu_layers", note + ".", see=CommandHint("estimate", "the memory of this plan"))
    P = params if params is not None else _packaged_efficiency()
    sv = _Serving(scn, model, gpu, P, kv_capacity_tokens, network, memory)
    return [sv.point(int(c)) for c in concurrencies]


def serving_model(scn: Any, model: ModelSpec, gpu: Any, *, params: Mapping[str, Any] | None = None,
                  kv_capacity_tokens: float | None = None, network: Any = None, memory: Any = None) -> _Serving:
    """The serving step-cost model `serve` uses (decode_step, prefill_chunk), on the KV pool of `memory`;
    the load simulator (estimate/load) prices its iterations with it."""
    P = params if params is not None else _packaged_efficiency()
    return _Serving(scn, model, gpu, P, kv_capacity_tokens, network, memory)


def estimate_performance(scn: Any, model: ModelSpec, gpu: Any, *, params: Mapping[str, Any] | None = None,
                         network: Any = None, memory: Any = None) -> PerformanceEstimate:
    """Dispatch on the task: train/finetune -> train_performance, infer -> infer_performance.
    `memory` is the plan's MemoryEstimate (the pipeline computes it once): serving takes its KV pool."""
    from .vision import image_load
    load = image_load(scn, model)
    if load is not None:
        return _performance_with_images(scn, model, gpu, load, params=params, network=network, memory=memory)
    if scn.task in ("train", "finetune") and getattr(scn.train, "objective", "sft") != "sft":   # posttrain.py
        from .posttrain import estimate_posttrain_performance
        return estimate_posttrain_performance(scn, model, gpu, params=params, network=network, memory=memory)
    if scn.task in ("train", "finetune"):
        return train_performance(scn, model, gpu, params=params, network=network, memory=memory)
    return infer_performance(scn, model, gpu, params=params, network=network, memory=memory)


def _performance_with_images(scn: Any, model: ModelSpec, gpu: Any, load: Any, *, params: Mapping[str, Any] | None,
                             network: Any, memory: Any) -> PerformanceEstimate:
    """A vision-language scenario (estimate/vision.py): the language model over text + image tokens, plus the
    vision tower's GEMMs priced with the same roofline (`gemm_time`, the decoder's calibrated efficiency).
    Training: forward, and when the tower trains its backward (2x) and, under full recompute, its forward again,
    for every sample of the step on each GPU (the tower is replicated: HF runs it whole on every rank).
    Serving: each request's images are encoded before its prefill (TTFT) and take GPU time from the batch."""
    import dataclasses
    from . import vision as V
    P = params if params is not None else _packaged_efficiency()
    dec = V.decoder_scenario(scn, load)
    base = estimate_performance(dec, model, gpu, params=params, network=network, memory=memory)
    tower = model.vision_tower
    if dec.is_training:
        dtype = _compute_dtype(gpu, "bf16" if dec.train.precision == "fp8" else dec.train.precision)
    else:
        dtype = _compute_dtype(gpu, weight_format(dec.infer.weights).compute_dtype
                               if weight_format(dec.infer.weights).compute_dtype in ("bf16", "fp16") else "bf16")
    t_fwd = V.tower_time_forward(tower, load, lambda m, k, n, c: gemm_time(P, gpu, dtype, m, k, n, count=c))
    f_fwd = V.tower_flops_forward(tower, load)
    # cross-attention decoders (Llama-3.2-Vision): k/v projections of the image features and the text's
    # attention over them, per sample, forward (estimate/vision.cross_gemms)
    cg = V.cross_gemms(model, load, dec.train.seq_len if dec.is_training else dec.infer.prompt_len)
    t_cross = sum(gemm_time(P, gpu, dtype, m, k, n, count=c) for m, k, n, c in cg)
    f_cross = sum(2.0 * m * k * n * c for m, k, n, c in cg)
    note = (f"vision tower: {load.positions:,} positions and {load.tokens:,} decoder tokens per "
            f"{'sample' if dec.is_training else 'request'}; {f_fwd / 1e9:,.1f} GFLOP forward "
            "(docs/vision-language.md)")
    if dec.is_training:
        tr = dec.train
        samples = (base.details or {}).get("microbatches", 1) * tr.micro_batch
        passes = 1.0 + (2.0 if load.trainable else 0.0) + (
            1.0 if load.trainable and V.tower_recompute(tower, tr.recompute) == "full" else 0.0)
        model_passes = 3.0 if load.trainable else 1.0
        # the cross-attention layers are decoder layers: their backward runs whenever the decoder trains
        cross_passes = 3.0 + (1.0 if tr.recompute == "full" else 0.0)
        t_vit = samples * (passes * t_fwd + cross_passes * t_cross)
        step = base.step_time_s + t_vit
        tokens = base.tokens_per_s_per_gpu * base.step_time_s
        fl = training_flops_per_token(model, attention_span(tr), tr.recompute, tr.method, tr.lora_rank)
        f_dec = fl.model * tokens
        f_vit = samples * (model_passes * f_fwd + 3.0 * f_cross)
        mfu = base.mfu * (base.step_time_s / step) * (1.0 + f_vit / f_dec) if base.mfu and f_dec else base.mfu
        bd = dict(base.breakdown, vision_tower=t_vit, compute=base.breakdown.get("compute", 0.0) + t_vit)
        return dataclasses.replace(
            base, step_time_s=step, tokens_per_s_per_gpu=tokens / step, mfu=mfu,
            hfu=(base.hfu * (base.step_time_s / step) * (1.0 + samples * passes * f_fwd / (fl.hardware * tokens))
                 if base.hfu and fl.hardware else base.hfu),
            time_to_train_s=(tr.tokens / (tokens / step * dec.hardware.count) if tr.tokens else None),
            breakdown=bd, notes=base.notes + (note + ("" if load.trainable else "; frozen tower: forward only") + ".",))
    if base.ttft_s is None:
        return base
    inf = dec.infer
    batch = (base.details or {}).get("batch", inf.concurrency) or 1
    replicas = (base.details or {}).get("replicas", 1) or 1
    per_replica = batch / replicas
    cycle = base.ttft_s + inf.output_len * (base.tpot_s or 0.0)
    scale = cycle / (cycle + per_replica * (t_fwd + t_cross)) if cycle > 0 else 1.0
    return dataclasses.replace(
        base, ttft_s=base.ttft_s + t_fwd + t_cross,
        output_tokens_per_s=base.output_tokens_per_s * scale if base.output_tokens_per_s else base.output_tokens_per_s,
        # the cross-attention decoders' image k/v projections and attention join the prefill (in the TTFT above)
        breakdown=dict(base.breakdown, vision_encode=t_fwd, **({"cross_attention": t_cross} if t_cross else {})),
        notes=base.notes + (note + "; each request's images are encoded before its prefill.",))
