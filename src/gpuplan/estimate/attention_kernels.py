"""Fused-attention kernels in training: which kernel a framework runs, and how fast it is.

The calibrated attention efficiency (efficiency.json `attention`) was fitted on llm-foundry's A100
rows and stands for that stack's kernel. Other stacks run other kernels, whose speed on Hopper is
published (data/attention_kernels.csv: Shah et al. 2024, FlashAttention-3, H100 SXM5, BF16, head
dim 128, forward causal and backward TFLOP/s by sequence length):

* Megatron-LM / NeMo through Transformer Engine: cuDNN fused attention on Hopper and later — TE's
  `get_attention_backend` disables FlashAttention "to give FusedAttention preference on Hopper+ for
  performance reasons" (transformer_engine/pytorch/attention/dot_product_attention/utils.py, v2.x); on
  Ampere and Ada it keeps FlashAttention (flash-attn's FlashAttention-2).
* PyTorch SDPA (torchtitan, HF transformers `sdpa`, DeepSpeed, torchtune, litgpt): on Hopper (sm90) and
  data-centre Blackwell (sm100/sm103) with torch >= 2.11, cuDNN fused attention; elsewhere and on older torch the
  FlashAttention-2 kernel (`SDPA_CUDNN_FROM`, `sdpa_prefers_cudnn`; `train.torch_version`).
* `train.attention_kernel` overrides the choice (e.g. fa3 when flash-attn 3 is installed).
* transformers' `sdpa` path hands sliding-window layers an explicit mask once the keys reach the window; on Hopper
  torch runs that call on cuDNN, which then computes the whole s x s square: `cudnn-masked` (measured on the lent
  H200 by head-dimension tile, `MASKED_SDPA_KERNEL` below).
* Serving prefill (forward only): vLLM, SGLang and TensorRT-LLM run FlashAttention-3-class kernels on Hopper, HF
  FlashAttention-2; on Ampere and Ada vLLM runs FlashAttention-2 and SGLang FlashInfer's FA2-algorithm prefill
  (`engine_kernel`); TensorRT-LLM off Hopper and llama.cpp keep their calibrated factors.
  TensorRT-LLM's FP8 context FMHA (FP8/NVFP4 checkpoint + FP8 KV cache) runs at the published FP8/16-bit forward
  speed ratio on top (`fp8_context_attention`, `fp8_forward_speedup`, data/attention_fp8.csv).

On AMD Instinct (CDNA families) the kernels differ: PyTorch SDPA's flash backend runs AOTriton by
default ("When Flash Attention is enabled and desired, PyTorch defaults to using AOTriton as the
backend", torch/backends/cuda/__init__.py `preferred_rocm_fa_library`, torch 2.13.0 @cf30153c; CK only
with TORCH_ROCM_FA_PREFER_CK=1), and ROCm Transformer Engine's fused attention is Composable Kernel
(`ck`). `ck` has one published MI300X point (ROCm/flash-attention#142). For AOTriton 0.10b — what torch 2.8 and
the 2.9 nightlies before 2025-08-29 bundle (`bundles_aotriton_010b`) — AMD's own MI300X operator tuning database
times the backward PyTorch runs (the Triton split dK/dV + dQ kernels; ROCm/aotriton@1ad31776
v3python/rules/op_database.sqlite3): `aotriton-0.10b` rows, ~75-78 TFLOP/s causal at 2k-8k tokens, a quarter of
FlashAttention-2's on H100; its forward is not published and keeps the calibrated efficiency (docs/speed.md §2.11).
Other torch versions keep `aotriton` (calibrated, docs/speed.md §2.9), whose backward does seven tile matmuls to
FlashAttention-2's five (`BACKWARD_MATMULS`, docs/speed.md §2.10), which scales the backward part.

A100-class Ampere (table key `ampere-sm80`: the compute-capability 8.0 parts, A100, A800, A30) takes
FlashAttention-2's published A100 80GB SXM4 rate, forward + backward only (Dao 2023, arXiv:2307.08691 Fig. 4d,
the flash-attention README figure assets/flash2_a100_fwd_bwd_benchmark.png @4f285b35: causal, head dim 128);
the separate forward and backward panels were not to be had as text, so both passes take the combined rate,
exact for forward + backward (3.5 x the forward FLOPs at that rate). Forward-only use (serving prefill of vLLM
and SGLang on A100, `engine_kernel`) takes it too: the combined rate is a weighted harmonic mean of the two
passes' rates, so it lies between them and is a lower bound on the forward wherever the forward is the faster
pass: the abstract's top, 73 % of the A100's peak (~228 TFLOP/s), is above every forward + backward bar of
Fig. 4 (best 203 TFLOP/s = 65 %, panel b), so a pass alone runs up to ~12 % faster than the combined rate, and
the faster pass is the forward (as for the same kernel on H100, the `fa2,hopper` rows: forward >= backward
from 1k tokens). The calibrated factor it replaces is an FA1-generation fwd+bwd rate (0.28 of peak, docs/speed.md
§4), 1.1x (512 tokens) to 2.2x (16k) slower than this one. The sm86/sm87 Ampere parts (GeForce 30-series, A10, A40, RTX A-series,
Jetson Orin) run other tiles of the same kernel — flash-attention's run_mha_fwd_hdim128 picks 64 x 64 blocks when
`is_sm8x` (cc 8.x, x > 0) against 128 x 64 on sm80, and run_mha_bwd_hdim128 its large backward tile only with
>= 144 KB of shared memory per block (csrc/flash_attn/src/flash_{fwd,bwd}_launch_template.h @0251105a) — and
keep the calibrated efficiency. MPT / llm-foundry's `attn_impl: triton` (the training calibration's own rows) runs
a FlashAttention-1-generation Triton kernel, `fa1-triton`, which has no rows: calibrated.

Data-centre Blackwell (table key `blackwell-dc`: B200, B300, GB200, GB300) takes cuDNN's published B200
rates from NVIDIA's cudnn-frontend SDPA training benchmark (benchmark/sdpa_benchmark_training/artifacts/
sdpa_bf16_benchmark_results_NVIDIA_B200.csv @cb560b9: PyTorch SDPA on cuDNN 9.10.2, BF16, causal, head dim 128).
Where a family has no published kernel figures (sm86 Ampere, Ada, GeForce/workstation Blackwell, AOTriton on AMD
outside 0.10b on MI300X, ...) the calibrated efficiency stays in force. Timing: forward FLOPs at the forward rate, backward (2.5x the forward
FLOPs: FlashAttention recomputes QK^T and needs five matmuls to the forward's two) at the backward
rate, both interpolated in log(sequence length) and scaled from the reference GPU by 16-bit peak
and sustained clock.
"""
from __future__ import annotations

import math
from functools import lru_cache

from ..versions import dev_build, known_version
from .datafiles import rows

BACKWARD_FLOP_RATIO = 2.5

# Matmuls per (query block, key block) tile in a kernel's backward, where it differs from FlashAttention-2's
# five (recompute QK^T; dV += P^T dO; dP = dO V^T; dQ += dS K; dK += dS^T Q). AOTriton, PyTorch SDPA's flash
# backend on AMD, splits the backward into a dK/dV kernel and a dQ kernel that each recompute QK^T and dP:
# ROCm/aotriton 0.10b (6fca155f) tritonsrc/bwd_inner_dk_dv.py does qk, dv, dp, dk (4) and
# tritonsrc/bwd_inner_dq.py qk, dp, dq (3); its one-launch `bwd_kernel_fuse` calls the same two inner loops
# (bwd_inner_dk_dv_fuse + bwd_inner_dq), so it is 7 as well. PyTorch dispatches the split pair for head dim
# x seq >= 64 x 512 (pytorch aten/src/ATen/native/transformers/hip/flash_attn/aot/mha_all_aot.hip
# `mha_bwd_aot`, `use_fused_bwd`, @40519fbb), e.g. every 8k-token Llama layer.
BACKWARD_MATMULS = {"aotriton": 7, "aotriton-0.10b": 7}
FORWARD_MATMULS = 2
# fa1-triton: the FlashAttention-1-generation Triton kernel MPT's `attn_impl: triton` runs (llm-foundry
# llmfoundry/models/layers/flash_attn_triton.py, copied from flash-attn 1.x flash_attn_triton.py); no rows
KERNELS = ("fa2", "cudnn", "cudnn-sdpa", "fa3", "aotriton", "aotriton-0.10b", "ck", "fa1-triton")
AMD_FAMILIES = ("cdna2", "cdna3", "cdna4")


def _rates(r: dict[str, str]) -> tuple[float | None, float]:
    """(forward, backward) FLOP/s of one table row. A row with only the forward + backward rate gives both
    passes that rate: forward + backward time, 3.5 x the forward FLOPs over it, is then the published one. A row
    with only the backward rate (`aotriton-0.10b`: AMD's operator database times the backward alone) gives None
    for the forward, which then keeps the calibrated efficiency."""
    f, b, fb = (r.get(k) or "" for k in ("fwd_tflops_per_s", "bwd_tflops_per_s", "fwd_bwd_tflops_per_s"))
    if b and not fb:
        return (float(f) * 1e12 if f else None), float(b) * 1e12
    return float(fb) * 1e12, float(fb) * 1e12


@lru_cache(maxsize=1)
def _table() -> dict[tuple[str, str], tuple[str, dict[int, list[tuple[int, float | None, float]]]]]:
    """(kernel, family) -> (reference GPU, {head_dim: [(seq_len, fwd, bwd FLOP/s)]})."""
    out: dict[tuple[str, str], tuple[str, dict[int, list[tuple[int, float, float]]]]] = {}
    for r in rows("attention_kernels.csv"):
        ref, dims = out.setdefault((r["kernel"], r["family"]), (r["reference_gpu"], {}))
        dims.setdefault(int(r["head_dim_elements"]), []).append((int(r["seq_len_tokens"]), *_rates(r)))
    for _, dims in out.values():
        for pts in dims.values():
            pts.sort()
    return out


def _head_dim_points(dims: dict[int, list[tuple[int, float, float]]],
                     head_dim: int | None) -> tuple[list[tuple[int, float, float]], float]:
    """The rows a head dimension runs on and the share of the kernel's work that is useful. A kernel measured at
    one head dimension (the published rows, all 128) stands for every head dimension. Where rows exist at several
    (`cudnn-masked`: the tile sizes 64, 128 and 256), a head dimension runs the smallest tile that holds it, padded:
    cuDNN ran Phi-3's head dim 96 with the head-dim-128 kernels (knob_7_64x128x128 forward, knob_26_64x64x128
    backward, validation/device/h200-2026-12-04-kernels.jsonl HK06 and h200-2026-12-04c-sdpa_mask.csv), so it
    does 128/96 of the work: its useful rate is the tile's x 96/128."""
    if len(dims) == 1 or head_dim is None:
        return next(iter(dims.values())) if len(dims) == 1 else dims[max(dims)], 1.0
    tile = min((d for d in dims if d >= head_dim), default=max(dims))
    return dims[tile], min(1.0, head_dim / tile)


# Transformer Engine prefers cuDNN fused attention over FlashAttention only from compute capability 9.0:
# get_attention_backend, "Select FusedAttention for performance": `use_flash_attention and use_fused_attention
# and device_compute_capability >= (9, 0)` disables FlashAttention (NVIDIA/TransformerEngine@002a3e57
# transformer_engine/pytorch/attention/dot_product_attention/utils.py). Below it (Ampere, Ada) Megatron/NeMo run
# flash-attn's FlashAttention-2 where it is installed (the NGC PyTorch containers ship it).
TE_FLASH_FAMILIES = ("ampere", "ada")


# PyTorch SDPA tries cuDNN fused attention before FlashAttention-2 when check_prefer_cudnn_attention() holds:
# `cudnn_version > 91500 && (major == 9 || major == 10)` with the cuDNN torch loads at run time (wheels for CUDA
# < 13 also ask minor 0 or 3), unless TORCH_CUDNN_SDPA_DEPRIORITIZED=1; priority_order then installs cudnn, flash,
# efficient, math (pytorch/pytorch@001f694a aten/src/ATen/native/transformers/cuda/sdp_utils.cpp). The > 9.15.0
# gate came with the fix for pytorch#169849 (pytorch#171627, cherry-picked to the release as pytorch#171895,
# 2026-01); the torch 2.11 wheels are the first to bundle a cuDNN past it (9.19.0.56: pytorch#193893, and the lent
# H200, torch 2.11.0+cu130 / cuDNN 9.19.0, whose every unmasked causal SDPA call ran cudnn_generated_fort_native_sdpa
# kernels: validation/device/h200-2026-12-04c-sdpa_mask.csv, -kernels.jsonl; torch 2.13.0+cu130 bundles 9.20.0.48,
# pytorch#193893). Before that, FlashAttention-2 first: cuDNN was deprioritized after torch 2.5.0 (pytorch#138522)
# and made first again only by pytorch#162073 (merged 2025-09-04, "for 2.9", compile-time cuDNN >= 9.9). torch 2.9
# and 2.10 are not settled here (2.9 may have run cuDNN under that compile-time gate, 2.10 has the run-time gate but
# its bundled cuDNN is not pinned): they keep FlashAttention-2, as does a version stated as unknown.
# The rates: on Hopper `cudnn-sdpa`, PyTorch SDPA's own cuDNN calls timed through torch on the lent H200 (is_causal,
# head dims 64/128/256 at 2k and 4k tokens, validation/device/h200-2026-12-04c-sdpa_mask.csv): the FA3 paper's
# cuDNN rows (`cudnn`, the Transformer Engine path) are cuDNN's own benchmark at head dim 128, and through torch the
# backward ran slower (348 against 465 TFLOP/s at 2k, head dim 128), the head-dim-64 kernels slower still (368/274).
# On data-centre Blackwell the `cudnn` rows are already PyTorch SDPA on cuDNN (cudnn-frontend's B200 benchmark).
SDPA_CUDNN_FROM = (2, 11)
SDPA_CUDNN_KERNEL = {"hopper": "cudnn-sdpa", "blackwell-dc": "cudnn"}


def torch_minor(version: str | None) -> tuple[int, int] | None:
    """(major, minor) of a torch version string ("2.11.0+cu130" -> (2, 11); versions.known_version); None when
    not stated."""
    v = known_version(version, "torch_version", "2.11.0+cu130")
    return None if v is None else v.major_minor


def sdpa_prefers_cudnn(torch_version: str | None, kernel_family: str | None) -> bool:
    """Whether PyTorch SDPA tries cuDNN fused attention first: torch >= 2.11 (bundled cuDNN > 9.15.0) on sm90 or
    data-centre Blackwell (`kernel_family` as attention_kernels.csv keys it)."""
    v = torch_minor(torch_version)
    return v is not None and v >= SDPA_CUDNN_FROM and kernel_family in SDPA_CUDNN_KERNEL


# Which AOTriton a ROCm torch bundles (pytorch cmake/External/aotriton.cmake, .ci/docker/aotriton_version.txt; the
# compatibility table of ROCm/aotriton README.md @6fca155f): torch 2.8 ships 0.10b (pytorch#156499, 2025-06-20), and
# the 2.9 nightlies kept it until the 0.11b bump, pytorch#161754, opened 2025-08-29 — so a 2.9.0.devYYYYMMDD build
# dated before 20250829 runs 0.10b. With 0.10b, PyTorch's backward for head dim x seq >= 64 x 512 is the Triton split
# pair (mha_bwd_aot `use_fused_bwd`, pytorch@40519fbb): `aotriton-0.10b`, whose MI300X backward AMD's operator
# database times (attention_kernels.csv). From 0.11b the operator picks among the split, fused and AITER assembly
# backwards per shape from that database ("Invoke AITER Assembly kernels on gfx942/gfx950 when inputs meet
# requirements", pytorch#161754); torch 2.9 releases and later, older torch (AOTriton <= 0.9.2b: other kernels, no
# figures) and an unknown version keep `aotriton` (calibrated) — not settled here (docs/speed.md §2.11).
AOTRITON_010B_TORCH = (2, 8)
AOTRITON_011B_NIGHTLY_FROM = 20250829


def bundles_aotriton_010b(torch_version: str | None) -> bool:
    """Whether a ROCm torch build runs AOTriton 0.10b: 2.8.x, or a 2.9.0.devYYYYMMDD nightly dated before the
    0.11b bump (AOTRITON_011B_NIGHTLY_FROM)."""
    v = torch_minor(torch_version)
    if v == AOTRITON_010B_TORCH:
        return True
    if v != (2, 9):
        return False
    dev = dev_build(torch_version, "torch_version")
    return dev is not None and dev < AOTRITON_011B_NIGHTLY_FROM


def default_kernel(framework: str, family: str | None = None, torch_version: str | None = None,
                   kernel_family: str | None = None) -> str:
    """The kernel a framework's fused attention runs on a GPU family: on AMD Instinct, AOTriton behind
    PyTorch SDPA (`aotriton-0.10b` where the stated torch bundles 0.10b) and Composable Kernel behind (ROCm)
    Transformer Engine; cuDNN for Transformer Engine on Hopper and later and for PyTorch SDPA where
    `sdpa_prefers_cudnn` (`kernel_family`: the table key, which tells data-centre Blackwell apart); elsewhere
    FlashAttention-2."""
    if family in AMD_FAMILIES:
        if framework == "megatron":
            return "ck"
        return "aotriton-0.10b" if bundles_aotriton_010b(torch_version) else "aotriton"
    if framework == "megatron":
        return "fa2" if family in TE_FLASH_FAMILIES else "cudnn"
    key = kernel_family or family
    return SDPA_CUDNN_KERNEL[key] if sdpa_prefers_cudnn(torch_version, key) else "fa2"


# Serving engines' prefill kernels where published figures apply: vLLM's FlashAttention backend picks
# FlashAttention-3 on sm90 (vllm/v1/attention/backends/fa_utils.py `get_flash_attn_version`); SGLang's
# default attention backend on Hopper is fa3 (python/sglang/srt/server_args.py); HF generate runs SDPA's
# FlashAttention-2. TensorRT-LLM's context FMHA on sm90 is a TMA, warp-specialized flash-attention kernel
# with two consumer (compute) warp groups (cpp/tensorrt_llm/kernels/contextFusedMultiHeadAttention/
# fused_multihead_attention_v2.h @2340c77: NUM_COMPUTE_GROUPS 2, "tma warp-specialized kernels"), the
# design FA3 publishes figures for, so it takes FA3's Hopper rates; on families without published
# figures (Blackwell) it keeps the calibrated `prefill_attention_scale`, as llama.cpp's kernels keep theirs.
# (Leave-one-source-out: the TensorRT-LLM rows' held-out median error 27.9 % -> 24.1 %; docs/speed.md §3.11.)
_ENGINE_KERNEL = {"vllm": "fa3", "sglang": "fa3", "hf": "fa2", "trtllm": "fa3"}


# On ROCm vLLM's V1 selector picks AITER's flash attention only when VLLM_ROCM_USE_AITER=1 (gfx9), else
# "Default: Triton Unified Attention" (vllm/platforms/rocm.py `get_attn_backend_cls` @e2a00c7b): `triton`,
# for which no MI300X prefill figures are published, so the calibrated prefill factor stays. Other engines
# on AMD have no kernel named here (calibrated).
_ENGINE_KERNEL_AMD = {"vllm": "triton"}


# Below Hopper (Ampere, Ada) vLLM and SGLang run FlashAttention-2-class prefill kernels. vLLM's CUDA selector puts
# FLASH_ATTN first below compute capability 10 (vllm/platforms/cuda.py `_get_backend_priorities` @002db495) and its
# FlashAttention version is 3 only when the major capability is 9 ("fa_version = 3 if (device_capability.major == 9
# ...) else 2", vllm/attention/utils/fa_utils.py `get_flash_attn_version` @0fa99d44): vllm-flash-attn's FA2 on sm80.
# SGLang's default for models with standard attention off Hopper is FlashInfer ("FlashInfer (Default for Non-Hopper
# Machines, e.g., A100, A40)", sgl-project/sglang@eea4254e docs/backend/attention_backend.md), whose prefill kernel
# is the FlashAttention-2 algorithm reimplemented in CUDA (flashinfer.ai, 2024-02-02 blog): it takes FA2's rates.
# Figures exist for A100-class parts only (`ampere-sm80`); Ada and sm86 Ampere keep the calibrated factor.
_ENGINE_KERNEL_FA2_FAMILIES = ("ampere", "ada")
_ENGINE_KERNEL_FA2 = {"vllm": "fa2", "sglang": "fa2"}


def engine_kernel(engine: str, family: str | None = None) -> str | None:
    """The fused attention kernel a serving engine's prefill runs on a GPU family (None: none named, the
    engine's calibrated prefill factor)."""
    if family in AMD_FAMILIES:
        return _ENGINE_KERNEL_AMD.get(engine)
    if family in _ENGINE_KERNEL_FA2_FAMILIES and engine in _ENGINE_KERNEL_FA2:
        return _ENGINE_KERNEL_FA2[engine]
    return _ENGINE_KERNEL.get(engine)


def _interp(pts: list[tuple[int, float, float]], seq: float) -> tuple[float, float]:
    x = math.log2(max(seq, 1.0))
    if x <= math.log2(pts[0][0]):
        return pts[0][1], pts[0][2]
    for (s0, f0, b0), (s1, f1, b1) in zip(pts, pts[1:]):
        x0, x1 = math.log2(s0), math.log2(s1)
        if x <= x1:
            w = (x - x0) / (x1 - x0)
            return f0 + w * (f1 - f0), b0 + w * (b1 - b0)
    return pts[-1][1], pts[-1][2]


def kernel_rates(kernel: str, family: str, seq_len: float, scale: float,
                 head_dim: int | None = None) -> tuple[float | None, float] | None:
    """(forward, backward) FLOP/s of `kernel` on a GPU of `family` whose 16-bit peak x sustained clock
    is `scale` times the reference GPU's; None when no figures are published for that family. `head_dim`
    picks the rows of a kernel measured at several head dimensions (`_head_dim_points`). The forward is None
    where only the backward is published (`aotriton-0.10b`): the caller times the forward at its calibrated rate."""
    hit = _table().get((kernel, family))
    if hit is None:
        return None
    pts, useful = _head_dim_points(hit[1], head_dim)
    if pts[0][1] is None:       # backward-only rows: the forward is not published
        return None, _interp([(s, b, b) for s, _, b in pts], seq_len)[1] * scale * useful
    f, b = _interp(pts, seq_len)
    return f * scale * useful, b * scale * useful


def reference_gpu(kernel: str, family: str) -> str | None:
    """The GPU `kernel`'s figures for `family` were measured on; None when there are none. Forward-only use
    (serving prefill) of a row with only the forward + backward rate takes that rate for the forward: a lower
    bound where the forward is the faster pass (FA2 on A100, module docstring)."""
    hit = _table().get((kernel, family))
    return None if hit is None else hit[0]



# transformers' SDPA path with an explicit mask (attn_implementation "sdpa"). sdpa_attention_forward sets
# is_causal only when no mask is given ("is_causal = q_length > 1 and attention_mask is None and is_causal",
# transformers 5.25.0 integrations/sdpa_attention.py; the same test at huggingface/transformers@00c238bd), and
# masking_utils._ignore_causal_mask_sdpa keeps the mask of a sliding-window layer whenever the keys reach the
# window ("if local_attention_size is not None and kv_length >= local_attention_size: return False", 5.25.0):
# Phi-3-mini (window 2047) from 2,047 tokens, Mistral-7B-v0.1 (4096), Gemma-3's local layers (512/1024). torch then
# cannot take FlashAttention-2 (can_use_flash_attention's check_for_attn_mask); on compute capability 9.x/10.x
# with cuDNN > 9.15 it tries cuDNN first (priority_order / check_prefer_cudnn_attention) and cuDNN takes the mask as
# a bias (check_attn_mask_shape only), pytorch/pytorch@001f694a aten/src/ATen/native/transformers/cuda/sdp_utils.cpp.
# With a bias and no causal flag the kernel computes every tile of the s x s square: measured on the lent H200
# (scripts/bench_sdpa_mask.py, validation/device/h200-2026-12-04c-sdpa_mask.csv) a 1,024-token window at 4,096
# tokens takes as long as the full causal mask, and the masked call runs 3.0-3.4x the forward and 2.2-3.1x the
# backward time of is_causal=True. `cudnn-masked` rows carry rates per FLOP of that square, by head-dimension tile.
# Ampere and Ada (cuDNN not preferred) fall to the memory-efficient kernel, which has no rows: calibrated there.
MASKED_SDPA_KERNEL = {"hopper": "cudnn-masked"}


def masked_sdpa_kernel(family: str | None, torch_version: str | None = None) -> str | None:
    """The kernel torch SDPA runs for a call with an explicit mask on a GPU family where it is measured (None:
    not measured; the caller keeps its unmasked pricing). A torch stated older than SDPA_CUDNN_FROM does not try
    cuDNN first: the masked call falls to the memory-efficient kernel, which has no rows (None); an unknown
    version keeps the measured torch 2.11 kernel."""
    v = torch_minor(torch_version)
    if v is not None and v < SDPA_CUDNN_FROM:
        return None
    return MASKED_SDPA_KERNEL.get(family or "")


def backward_flop_ratio(kernel: str | None) -> float:
    """Backward matmul FLOPs of `kernel` over its forward's: 2.5 for FlashAttention-2-style kernels
    (five tile matmuls to the forward's two), 3.5 for AOTriton's split backward (seven)."""
    return BACKWARD_MATMULS.get(kernel or "", 5) / FORWARD_MATMULS


def attention_time(flops_fwd: float, recompute_share: float, rates: tuple[float, float],
                   bwd_ratio: float = BACKWARD_FLOP_RATIO) -> float:
    """Seconds for forward + backward (+ the recomputed share of the forward) of `flops_fwd` causal
    attention FLOPs; `bwd_ratio` is the kernel's backward FLOPs over its forward's."""
    if flops_fwd <= 0:      # no attention layer (a pure SSM stack): nothing to time, whatever the rates
        return 0.0
    f, b = rates
    return flops_fwd * ((1.0 + recompute_share) / f + bwd_ratio / b)


def describe(kernel: str) -> str:
    return {"fa2": "FlashAttention-2", "cudnn": "cuDNN fused attention", "fa3": "FlashAttention-3",
            "aotriton": "AOTriton (PyTorch SDPA on ROCm)",
            "aotriton-0.10b": "AOTriton 0.10b, Triton split backward (PyTorch SDPA on ROCm, torch 2.8 / early 2.9)",
            "ck": "Composable Kernel FMHA",
            "triton": "Triton unified attention (vLLM on ROCm)",
            "fa1-triton": "FlashAttention-1 Triton kernel (MPT attn_impl: triton)",
            "cudnn-sdpa": "cuDNN fused attention (PyTorch SDPA)",
            "cudnn-masked": "cuDNN fused attention with an explicit mask (whole s x s square)"}.get(kernel, kernel)




# FP8 context attention (TensorRT-LLM). A checkpoint whose linears quantize their activations (ModelOpt FP8
# per-tensor `has_fp8_qdq`, FP8 block scales, NVFP4) gives the attention op the o_proj's input scale
# (tensorrt_llm/_torch/modules/attention.py @c6d3bb2a, `out_scale = self.o_proj.inv_input_scale`); with an FP8
# (or FP4) KV cache the TRTLLM backend then asks for an FP8 (NVFP4 on Blackwell) output (_torch/attention_backend/
# trtllm.py @9144c0e6, `out_dtype = torch.float8_e4m3fn`), and an FP8 or FP4 output sets mFP8ContextFMHA
# (cpp/tensorrt_llm/thop/attentionOp.cpp @38134b13, `mFP8ContextFMHA = is_fp8_out || is_fp4_out || ...`): the
# context FMHA runs with Q, K and V in e4m3, both of its matmuls on the FP8 tensor cores. A 16-bit KV cache or a
# weight-only format keeps the 16-bit kernel. The perf-overview checkpoints (nvidia/*-FP8, *-FP4) carry an FP8
# KV cache, so every TensorRT-LLM calibration row runs it.
_FP8_ACTIVATION_COMPUTE = ("fp8", "fp4")
_FP8_KV = ("fp8", "fp8_e4m3")


def fp8_context_attention(engine: str, compute_dtype: str, kv_cache: str) -> bool:
    """Whether the engine's prefill attention runs its matmuls in FP8 (TensorRT-LLM's FP8 context FMHA)."""
    return engine == "trtllm" and compute_dtype in _FP8_ACTIVATION_COMPUTE and str(kv_cache).lower() in _FP8_KV


@lru_cache(maxsize=1)
def _fp8_speedup_points() -> list[tuple[int, float]]:
    """[(seq_len, FP8 forward rate / 16-bit forward rate)] from data/attention_fp8.csv (both rates from the same
    paper, same kernel, shapes and mask)."""
    return sorted((int(r["seq_len"]), float(r["fp8_fwd_tflops_per_s"]) / float(r["bf16_fwd_tflops_per_s"]))
                  for r in rows("attention_fp8.csv"))


def fp8_forward_speedup(seq_len: float) -> float:
    """How much faster an FP8 flash-attention forward runs than the same kernel's 16-bit forward at `seq_len`
    (interpolated in log length, flat beyond the ends). The one published pair is FlashAttention-3's on H100
    (Shah et al. 2024): 0.75x at 512 tokens (the FP8 kernel is the slower one there), 1.05x at 1k, 1.44x at 4k,
    1.56x at 16k, short of the 2x of the FP8 peak because the softmax's exponentials do not speed up. It
    stands for TensorRT-LLM's FP8 context FMHA on every GPU with FP8 tensor cores (no FP8 attention figures
    are published for Blackwell)."""
    return _interp([(s, r, r) for s, r in _fp8_speedup_points()], seq_len)[0]
