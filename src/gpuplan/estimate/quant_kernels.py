"""bitsandbytes weight-only kernels at serving time: which path a step takes, what it moves through
HBM, and what the host spends issuing it.

bitsandbytes (bitsandbytes/autograd/_functions.py `matmul_4bit`, @95f9af3) runs a 4-bit linear in one of
two ways:

* one row (a batch-1 decode step, no gradient): `F.gemv_4bit`, a fused kernel that reads the packed
  4-bit weight and its absmax scales and dequantizes in registers — the weight bytes of the format;
* more rows (batched decode, any prefill): `MatMul4Bit`, which first materialises the whole weight in
  16-bit (`F.dequantize_4bit(B, quant_state).to(A.dtype)`) and then runs a 16-bit GEMM: the packed read,
  a 16-bit write and a 16-bit read — 4 bytes per parameter more than the 4-bit path, so batched NF4
  decodes *slower* than 16-bit weights (the bitsandbytes benchmark tables show it on every GPU).

LLM.int8() (`MatMul8bitLt`) reads int8 weights, quantizes the activations row-wise and, with the
default outlier threshold 6.0 (transformers' `llm_int8_threshold`), multiplies the outlier columns in
16-bit: about one byte per parameter from HBM, and several extra kernels per linear.

In HF transformers' eager loop the host issues every kernel; the GPU runs them asynchronously, so a step
takes max(GPU time, host issue time). Host costs below are seconds per call on the host of bitsandbytes'
own H100 benchmark (benchmarking/README.md @95f9af3, transformers 4.46.3, torch 2.5.1, bitsandbytes
0.45.0.dev), where batch-1 decode is host-bound: per decoder layer of a Llama-style model, and the extra
per quantized linear, read off the differences between its BF16, NF4, NF4+DQ and INT8 rows for Llama 3.1
8B and Qwen 2.5 32B (they agree within 15 %). They describe that host: the speed engine divides them by the
scenario's host CPU speed relative to it (hardware/hosts.py; docs/speed.md).
"""
from __future__ import annotations

from ..dtypes import WeightFormat

HF_HOST_ISSUE_PER_LAYER_S = 7.7e-4     # 24.4 ms / 32 layers (8B), 50.8 ms / 64 layers (32B): BF16, batch 1
BNB_4BIT_GEMV_ISSUE_S = 4.0e-5         # NF4 - BF16 at batch 1: 8.7 ms / 224 linears, 19.9 ms / 448
BNB_4BIT_DEQUANT_ISSUE_S = 1.0e-4      # NF4 - BF16 at batch 8 and 32: 22.1-22.5 ms / 224 linears
BNB_DOUBLE_QUANT_ISSUE_S = 3.8e-5      # NF4+DQ - NF4 (nested absmax dequantized per call): 8.0-9.1 ms / 224
# LLM.int8() per linear, split by the same tables' INT8 rows (llm_int8_threshold 0.0: no decomposition):
BNB_INT8_ISSUE_S = 1.2e-4              # INT8 (threshold 0) - BF16: 26.0-28.4 ms / 224 (8B), 50.9-55.3 ms / 448 (32B)
BNB_INT8_DECOMP_ISSUE_S = 1.5e-4       # INT8+Decomp - INT8: 29.5-33.8 ms / 224 (8B), 79-97 ms / 448, 69-88 ms / 560
DEQUANT_EXTRA_BYTES_PER_PARAM = 4.0    # 16-bit copy written by dequantize_4bit and read by the GEMM
# The dequantize kernel itself is bound by instruction issue, not HBM, on GPUs with a high ratio of bandwidth to
# SM clock. bitsandbytes 0.45's `kDequantizeBlockwise<T, 512, 64, 8, NF4>` (csrc/kernels.cu @0.45.0 tag, launched
# by `dequantizeBlockwise` in csrc/ops.cu with 64-thread blocks, one 1024-weight tile each) decodes every 4-bit
# code with `dDequantizeNF4`, a 4-level if/else tree. In the shipped binary (bitsandbytes-0.45.0 wheel,
# libbitsandbytes_cuda124.so, `cuobjdump -sass`) the two upper levels are real branches and the lower two
# predicated selects; NF4 codes are equiprobable by construction (quantiles of a normal), so the 32 lanes of a warp
# take all four subtrees and the warp issues every instruction of the function once: 958 non-NOP SASS
# instructions on sm_80, sm_86, sm_89 and sm_90 (bf16 and fp16 outputs alike; 950 for fp16 on sm_75) per warp of
# 32 threads x 16 weights = 512 weights. At one warp instruction per scheduler per clock (hardware/sms.py) that is
# 1.87 issue slots per weight — on an H100 SXM 5.6e11 weights/s, i.e. 1.4 TB/s of the kernel's 2.56 B/weight
# traffic, well under its HBM rate; on an RTX 4090 6.9e11 weights/s, above what its 1 TB/s can feed (memory-bound
# there). bitsandbytes 0.41.1 (cuda117 build, sm_80) issues 1014 for NF4 and 686 for FP4 per warp. The tree was
# replaced by a lookup table in bitsandbytes PR #1746 (merged 2025-09-18, b1f80b8), whose description reports the
# dequantize 1.36-2.07x faster on A100 and H100 and only 1.3-1.6x on small sizes on sm_86/sm_89 — the issue-bound
# and memory-bound GPUs this count separates. Later releases (PR #1949) fuse dequantize and GEMM; neither is
# modelled: the HF path here is bitsandbytes <= 0.47.
BNB_4BIT_DEQUANT_WARP_INSTR = 958.0      # SASS instructions one warp issues per tile (bitsandbytes 0.45.0, sm_80-sm_90)
BNB_4BIT_DEQUANT_WEIGHTS_PER_WARP = 512.0  # 32 threads x 8 packed bytes x 2 codes
# At one row `matmul_4bit` calls `F.gemv_4bit` (bitsandbytes/autograd/_functions.py @0.45.0), whose
# `kgemm_4bit_inference_naive<T, 128, 16>` (csrc/kernels.cu @0.45.0; launched by `gemm_4bit_inference_naive` in
# csrc/ops.cu with ceil(M / 4) blocks of 128 threads: one warp per output row) walks K in steps of 32 lanes x 32
# codes: one 16-byte load of packed codes, one absmax, four 16-byte loads of the input row, then per code a shift or
# mask, a shared-memory lookup of the NF4 value, a multiply by absmax and an fp32 accumulate. Read off the shipped
# binaries (bitsandbytes-0.45.0 wheel, the SASS of `libbitsandbytes_cuda121.so` and `..._cuda124.so` disassembled
# with nvdisasm 13; the hot path of the loop, the full-tile branch, counted per iteration by scripts/count_bnb_sass.py),
# one warp issues per 1,024 weights: sm_75 357 for fp16 (Turing has no bf16 arithmetic, `BNB_BF16_AVAILABLE` is
# `__CUDA_ARCH__ >= 800` in csrc/common.cuh, so every product goes through fp32: 97 HADD2.F32 + 33 F2F conversions;
# bf16, emulated, 746), sm_80 286 (both
# builds; fp16 and bf16), sm_86 / sm_89 286 in the cuda121 build and 293 in cuda124 (the RTX 4090 rows ran torch's
# CUDA 12.4 build, hence bitsandbytes' cuda124 library), sm_90 340 for bf16 and 322 for fp16. At one warp
# instruction per scheduler per clock that is, per 0.5625-byte NF4 weight: T4 410 GB/s of packed bytes (memory-
# bound at its 320 GB/s, within 1.3x), RTX 4090 2.5 TB/s (memory-bound), A100 1.23 TB/s and H100 SXM 1.77 TB/s:
# issue-bound there, below their HBM rates. Families without a count (no cubin in the 0.45.0 wheel: Blackwell runs
# the sm_90 PTX through the driver's JIT) get no issue bound.
BNB_GEMV_WARP_INSTR = {("turing", "fp16"): 357.0, ("turing", "bf16"): 746.0,
                       ("ampere", "fp16"): 286.0, ("ampere", "bf16"): 286.0,
                       ("ada", "fp16"): 293.0, ("ada", "bf16"): 293.0,
                       ("hopper", "fp16"): 322.0, ("hopper", "bf16"): 340.0}
BNB_GEMV_WEIGHTS_PER_WARP = 1024.0       # 32 lanes x 32 codes per loop iteration (num_values_4bit = 32)
BNB_GEMV_BYTES_PER_PARAM = 0.5 + 4.0 / 64.0   # what the kernel reads per weight: the code and its share of an fp32 absmax
# Double quantization (NF4+DQ, `bnb_4bit_use_double_quant`) stores each block's absmax as 8 bits under a second
# fp32 absmax per 256 (`quantize_4bit`: `compress_statistics` -> `quantize_blockwise(absmax, blocksize=256)` after
# subtracting the mean `offset`). Every call rebuilds the fp32 absmax before the kernel that needs it (`gemv_4bit`
# and `dequantize_4bit`, functional.py @0.45.0: `absmax = dequantize_blockwise(state.absmax, state.state2)` then
# `absmax += state.offset`): per 64 weights the nested kernel writes 4 bytes, the in-place add reads and writes them,
# and the 4-bit kernel reads them — 16 bytes of fp32 traffic per 64 weights that the 8-bit storage of the format
# (whose bytes the step already prices) does not count.
BNB_NESTED_ABSMAX_BYTES_PER_PARAM = 16.0 / 64.0
# HF transformers' default DynamicCache grows each layer's K and V with `torch.cat([cache, new], dim=-2)`
# every decode step (src/transformers/cache_utils.py `DynamicCache.update` @67dd552, the 4.46 line): the
# past cache is read and written to a new tensor, then read again by attention — three passes over the
# KV bytes where a paged or static cache makes one.
HF_DYNAMIC_CACHE_KV_PASSES = 3.0
# torch <= 2.0 grows that cache with a CUDA `cat` kernel that is bound by load latency, not by HBM: `parallel_cat`
# launches `CatArrayBatchedCopy` on a grid of 2 x SMs blocks x 512 threads (`getCatGrid`, `applyBlock = dim3(32*16)`,
# aten/src/ATen/native/cuda/Shape.cu of the torch 2.0 line, read at llv22/pytorch-macOS-cuda @4764007, a v2.0 fork),
# and each thread runs a grid-stride loop that loads one element and stores it (`output[dataOffset + elementOffset]
# = data[tid]`): the pointers are not `__restrict__`, so a thread's next load cannot pass its store, and each thread
# has one element load in flight (the torch-2.0.1 wheel's sm_80 SASS of CatArrayBatchedCopy<Half, unsigned, 4, 128,
# 1>: a 49-instruction loop body per element, docs/hf_eager_decode.md mechanism 5). By Little's law the read side
# moves at most 2 x SMs x 512 x element bytes per DRAM latency (hardware/data/gpu_dram_latency.csv) — fp16 on an A100: 221 KB / 405.5 ns = 545 GB/s, a third of the HBM rate
# gpuplan prices — and the write side follows it. PyTorch PR #102815 (June 2023, torch 2.1) added a wide-load kernel
# for contiguous 32- and 64-bit inputs only; 16-bit caches kept the per-element loop until the vectorised kernels
# of 2025 (PRs #150233, #151818), which is not modelled: only a stated torch older than 2.1 takes this bound.
TORCH_CAT_BLOCKS_PER_SM = 2            # getCatGrid: grid.x = 2 x multiProcessorCount
TORCH_CAT_THREADS_PER_BLOCK = 512      # applyBlock = dim3(32 * 16)
TORCH_CAT_PER_ELEMENT_BEFORE = (2, 1)  # torch versions below this run the per-element kernel for every dtype
# GPTQ weights in transformers 4.x run an AutoGPTQ kernel (infer.gptq_kernel); each one stops dequantizing in
# registers above a row count and instead writes the layer's whole weight in fp16, then reads it in a 16-bit
# GEMM — the same 16-bit write + read per parameter as bitsandbytes' batched 4-bit path. transformers 5 hands
# GPTQ to GPTQModel (`GPTQConfig.post_init`: backend "auto", 5.24), whose choice is not modelled: unset, the
# kernel is priced as an ideal packed read.
# * exllama (v1), transformers 4.x's default (utils/quantization_config.py `GPTQConfig.post_init`: exllama_config
#   None -> {"version": ExllamaVersion.ONE}, @1425768): AutoGPTQ sets `matmul_recons_thd = 8`
#   (auto_gptq/modeling/_utils.py `autogptq_post_init`, @6a9d80e) and `q4_matmul`
#   (autogptq_extension/exllama/exllama_ext.cpp @b0ed914) takes `q4_matmul_recons_cuda` once x_height >= 8:
#   `w->reconstruct(buffers->temp_dq)` then `cublasHgemm` (cuda_func/q4_matmul.cu @4e0ebcb);
# * exllamav2: `gemm_half_q_half_cuda` reconstructs + cuBLAS when size_m > MAX_Q_GEMM_ROWS = 50
#   (AutoGPTQ's exllamav2 q_gemm.cu, as in vLLM's copy csrc/quantization/gptq/q_gemm.cu @6ab6cdd);
# * cuda-old: `QuantLinear.forward` (auto_gptq/nn_modules/qlinear/qlinear_cuda_old.py @179776b) calls
#   vecquant4matmul_faster_old while x.shape[0] < kernel_switch_threshold = 128, else unpacks the weight with
#   torch ops and runs torch.matmul (more than 4 B/param of intermediates: 4 is a floor).
# Below those row counts the kernels re-dequantize the packed weight per row or per 8-row block (exllama v1's
# q4_matmul_kernel has grid y = rows): an ALU cost this model does not price, so batched GPTQ under the
# threshold stays optimistic (docs/hf_eager_decode.md).
GPTQ_RECONS_ROWS = {"exllama": 8, "exllamav2": 51, "cuda-old": 128}
# exllamav2's quantized GEMM under its threshold, measured: speedup of its 16-bit x 4-bit group-128 matmul
# over FP16 PyTorch (CUTLASS) on an A10, 72k x 18k (IST-DASLab/marlin README @2f6d7c1, assets/peak.png; read
# off the plot, +-0.05). Its 64- and 128-row points (0.44, 0.43) are the reconstruct path, which the 4 B/param
# copy above prices at 2 / (0.52 + 4) = 0.44: an independent check of that mechanism.
EXLLAMAV2_SPEEDUP_OVER_FP16 = ((1, 3.78), (2, 3.57), (4, 2.86), (8, 1.50), (16, 0.71), (32, 0.35))


# AutoGPTQ's cuda-old kernel under its switch threshold makes one whole pass over the packed weight per row:
# `vecquant4matmul_faster_cuda_old` launches grid (height / 32, width / 256, batch) — z = the row
# (autogptq_extension/cuda_256/autogptq_cuda_kernel_256.cu @v0.5.0 = 200844d) — and every block rebuilds its
# dequantize table, re-reads its slice of codes, scales and zeros and divides for the group index per step. In the
# auto-gptq 0.5.0 wheel (autogptq_cuda_256, sm_80, `cuobjdump -sass`) one warp issues about 2,290 instructions for
# its 32 columns x 256 weights (125 of set-up, then 16 passes of a 135-instruction loop body, two source iterations
# each): 0.279 per weight and row (the 64-wide build for other shapes: 577 per 2,048, 0.282). A pass is bound by
# that issue or by its packed bytes, whichever is slower; exllama (v1) also launches one block row per input row
# but keeps each weight slice in L2 and is not issue-bound by its count (~0.1 per weight), so it is not priced here.
GPTQ_CUDA_OLD_WARP_INSTR_PER_WEIGHT = 2290.0 / (32 * 256)


# AutoGPTQ's cuda-old `QuantLinear.forward` issues more device ops per call than the nn.Linear it replaces (one
# `mm`), counted by the rule of scripts/count_hf_decode_ops.py (an op that launches device work; views, `empty` and
# no-op casts are not counted) in auto_gptq/nn_modules/qlinear/qlinear_cuda_old.py @v0.5.0 (= c70d29f0) L197-276:
# * under kernel_switch_threshold (128 rows): `torch.zeros(rows, out, dtype=float)` (a fill), `self.scales.float()`
#   (a copy), `vecquant4matmul_faster_old` (the kernel, in place of the mm) and `out.to(dtype=x_dtype)` (a copy
#   back from fp32): 4 launches, 3 more than nn.Linear;
# * at or above it (prompts): the weight is unpacked with torch ops - bitwise_right_shift, .to(int8),
#   bitwise_and and `+ 1` for the zeros; bitwise_right_shift, .to(int8), bitwise_and for the codes;
#   `weight - zeros`, `scales * (...)`, then torch.matmul; the reshapes are views and the final `.to(fp16)` a no-op
#   (the matmul is already fp16): 10 launches, 9 more.
# exllama (v1) (`ext_q4_matmul`: x.half() on an fp16 input is the input itself, `torch.empty`, one q4_matmul
# launch, qlinear_exllama.py L32-40, L166-171) and exllamav2 (`ext_gemm_half_q_half`: `torch.empty` and
# gemm_half_q_half, one kernel per 8-row chunk set, qlinear_exllamav2.py L24-30) launch one kernel as nn.Linear does.
# The extra ops are priced at the HF eager decode constant's seconds per counted op (host_issue.reference_op_s).
GPTQ_CUDA_OLD_EXTRA_OPS = {"kernel": 3.0, "torch": 9.0}


def gptq_extra_host_ops(fmt: WeightFormat, rows: float, gptq_kernel: str | None) -> float:
    """Device ops one AutoGPTQ QuantLinear call issues beyond nn.Linear's single mm at `rows` rows (engine hf,
    transformers 4.x with auto-gptq 0.5.0): cuda-old only (GPTQ_CUDA_OLD_EXTRA_OPS); 0 for exllama / exllamav2, for
    an unset kernel and for other formats."""
    if fmt.family != "gptq" or gptq_kernel != "cuda-old":
        return 0.0
    return GPTQ_CUDA_OLD_EXTRA_OPS["kernel" if rows < GPTQ_RECONS_ROWS["cuda-old"] else "torch"]


# Persistent device buffers AutoGPTQ 0.5.0 allocates for its kernels when transformers 4.x loads GPTQ weights
# (auto_gptq/modeling/_utils.py `autogptq_post_init` @v0.5.0 = c70d29f0):
# * exllamav2: one fp16 scratch per device of max over the exllamav2 linears of `scratch_space_fixed()` =
#   temp_dq_size (in x out x 2 + 128) + temp_fwd_size(max_input_len=2048, max_batch_size=8) (out x 2048 x 8 x 4
#   + 128) (auto_gptq/nn_modules/qlinear/qlinear_exllamav2.py L157-164, `ExLlamaV2DeviceTensors.prepare`:
#   torch.empty of scratch_bytes // 2 halves);
# * exllama (v1): per device `temp_dq` = max over the linears of qweight.numel() x 8 fp16 elements (in x out x 2
#   bytes) and `temp_state` = max_input_len x max_inner_outer_dim fp16, where without act-order max_input_len is 1
#   and max_inner_outer_dim stays at its initial 1 (only act-order raises it);
# * cuda-old: none.
# The fixed shapes (2048 x 8) come from scratch_space_fixed's defaults, which post_init calls without arguments.
EXLLAMAV2_MAX_INPUT_LEN = 2048
EXLLAMAV2_MAX_BATCH_SIZE = 8


def gptq_kernel_buffer_bytes(gptq_kernel: str | None, linears) -> float:
    """Bytes of the persistent buffers AutoGPTQ 0.5.0 allocates on a device for `gptq_kernel` given the quantized
    linears' (in_features, out_features) on it (see the note above); 0 for cuda-old, an unset kernel or none."""
    shapes = [tuple(x) for x in linears]
    if not shapes or gptq_kernel not in ("exllama", "exllamav2"):
        return 0.0
    if gptq_kernel == "exllamav2":
        return float(max(i * o * 2 + 128 + o * EXLLAMAV2_MAX_INPUT_LEN * EXLLAMAV2_MAX_BATCH_SIZE * 4 + 128
                         for i, o in shapes))
    return float(max(i * o for i, o in shapes) * 2 + 1 * 1 * 2)


def is_bitsandbytes(fmt: WeightFormat) -> bool:
    return fmt.family == "nf4" or fmt.name == "int8"


def materialises_16_bit(fmt: WeightFormat, engine: str) -> bool:
    """Whether some batch size makes this weight format's linears write a 16-bit copy of the weight
    (bitsandbytes 4-bit on every engine that runs it; 4-bit GPTQ through HF transformers' AutoGPTQ kernels)."""
    return fmt.family == "nf4" or (fmt.family == "gptq" and int(fmt.bits) == 4 and engine == "hf")


def dequant_extra_bytes(fmt: WeightFormat, rows: float, linear_params: float, engine: str = "hf",
                        gptq_kernel: str | None = None) -> float:
    """HBM bytes a step moves beyond the packed weights: the 16-bit copy of every 4-bit weight when
    more than one row (bitsandbytes) or the kernel's threshold of rows (HF's GPTQ kernels) go through a linear;
    with NF4+DQ also the fp32 absmax rebuilt on every call."""
    if fmt.family == "nf4":
        nested = BNB_NESTED_ABSMAX_BYTES_PER_PARAM * linear_params if fmt.name == "nf4-dq" else 0.0
        return nested + (DEQUANT_EXTRA_BYTES_PER_PARAM * linear_params if rows > 1 else 0.0)
    if materialises_16_bit(fmt, engine) and fmt.family == "gptq" and gptq_kernel \
            and rows >= GPTQ_RECONS_ROWS[gptq_kernel]:
        return DEQUANT_EXTRA_BYTES_PER_PARAM * linear_params
    return 0.0


def exllamav2_speedup(rows: float) -> float:
    """exllamav2's measured speed over a 16-bit GEMM at `rows` rows (log-linear between the plot's batch
    sizes; its 32-row value up to the 50-row threshold)."""
    import math
    pts = EXLLAMAV2_SPEEDUP_OVER_FP16
    if rows <= pts[0][0]:
        return pts[0][1]
    for (r0, s0), (r1, s1) in zip(pts, pts[1:]):
        if rows <= r1:
            f = (math.log2(rows) - math.log2(r0)) / (math.log2(r1) - math.log2(r0))
            return s0 + f * (s1 - s0)
    return pts[-1][1]


def gptq_kernel_extra_bytes(fmt: WeightFormat, rows: float, linear_params: float, engine: str,
                            gptq_kernel: str | None) -> float:
    """Bytes-equivalent a GPTQ kernel spends beyond reading its packed weights, under its reconstruct
    threshold, where a measurement exists: exllamav2 takes 16-bit time / its measured speedup. The
    other kernels have no published per-batch figure: 0 (an ideal kernel), optimistic."""
    if not (materialises_16_bit(fmt, engine) and fmt.family == "gptq" and gptq_kernel == "exllamav2"):
        return 0.0
    if rows >= GPTQ_RECONS_ROWS["exllamav2"]:
        return 0.0
    return max(0.0, 2.0 * linear_params / exllamav2_speedup(rows) - fmt.bits / 8.0 * linear_params)


def hf_kv_passes(num_heads: int, num_kv_heads: int) -> float:
    """Passes over the KV-cache bytes one HF decode step makes: the DynamicCache `torch.cat` (read +
    write), then attention's read. Where attention runs on a copy expanded to every query head (GQA,
    g = heads / kv_heads; the caller passes kv_heads = heads when it does not), `repeat_kv`
    (models/llama/modeling_llama.py @0022728, called by the eager and SDPA attention classes of transformers 4.x,
    and by `eager_attention_forward` in 5.24) expands the cache with `expand(...).reshape(...)`, a copy: it reads
    the compact cache once and writes g times its bytes, which attention then reads — 3 + 2g passes. g = 1
    returns the cache untouched (`if n_rep == 1: return hidden_states`): 3 passes. transformers 5.24's SDPA path
    (integrations/sdpa_attention.py `sdpa_attention_forward`) skips the copy at decode: `enable_gqa` without a
    mask, else `pack_gqa` folds the single query's heads onto the KV heads (infer.repeat_kv false)."""
    g = num_heads / num_kv_heads if num_kv_heads else 1.0
    if g <= 1.0:
        return HF_DYNAMIC_CACHE_KV_PASSES
    return HF_DYNAMIC_CACHE_KV_PASSES + 2.0 * g


def host_issue_per_linear(fmt: WeightFormat, rows: float, int8_threshold: float = 6.0) -> float:
    """Extra host seconds per quantized linear call in HF eager mode. LLM.int8() with a threshold above 0 adds its
    outlier decomposition (`int8_vectorwise_quant` and `MatMul8bitLt.forward`, bitsandbytes @0.45.0): `A.abs() >=
    threshold`, `if outliers.any()` and `torch.argwhere` (each a device-to-host sync), the column gathers of the
    input and of the int8 weight, their dequantize and an fp16 `addmm`; at 0 none of it runs (`if threshold > 0.0`)."""
    if fmt.family == "nf4":
        base = BNB_4BIT_GEMV_ISSUE_S if rows <= 1 else BNB_4BIT_DEQUANT_ISSUE_S
        return base + (BNB_DOUBLE_QUANT_ISSUE_S if fmt.name == "nf4-dq" else 0.0)
    if fmt.name == "int8":
        return BNB_INT8_ISSUE_S + (BNB_INT8_DECOMP_ISSUE_S if int8_threshold > 0.0 else 0.0)
    return 0.0


def bnb_dequant_kernel_bytes(fmt: WeightFormat, linear_params: float) -> float:
    """HBM bytes bitsandbytes' dequantize kernel moves for `linear_params` 4-bit weights: the packed codes with
    their absmax (the format's bits) read, the 16-bit copy written. The GEMM's read of that copy is not in it."""
    return (fmt.bits / 8.0 + 2.0) * linear_params


def bnb_dequant_issue_s(fmt: WeightFormat, rows: float, linear_params: float, warp_issue_per_s: float | None) -> float:
    """Seconds the GPU needs to issue the dequantize kernel's instructions for `linear_params` 4-bit weights,
    where a step takes the dequantize + GEMM path (more than one row); 0 where it does not or the GPU's issue
    rate is unknown. One warp instruction per scheduler per clock is the ceiling: a lower bound on the time."""
    if fmt.family != "nf4" or rows <= 1 or not warp_issue_per_s:
        return 0.0
    return linear_params * BNB_4BIT_DEQUANT_WARP_INSTR / BNB_4BIT_DEQUANT_WEIGHTS_PER_WARP / warp_issue_per_s


def bnb_dequant_issue_excess_s(fmt: WeightFormat, rows: float, linear_params: float,
                               warp_issue_per_s: float | None, bw: float) -> float:
    """Seconds the dequantize kernel runs beyond its HBM time (its bytes at `bw`), where instruction issue
    bounds it: the time a bytes-only model of the step misses. 0 where the kernel is memory-bound."""
    return _issue_excess_s(bnb_dequant_issue_s(fmt, rows, linear_params, warp_issue_per_s),
                           bnb_dequant_kernel_bytes(fmt, linear_params), bw)


def _issue_excess_s(issue_s: float, kernel_bytes: float, bw: float) -> float:
    """Seconds an issue-bound kernel (`issue_s` to issue its instructions; 0: not on its path) runs beyond moving its
    `kernel_bytes` at `bw`; 0 where it is memory-bound."""
    return max(0.0, issue_s - kernel_bytes / bw) if issue_s > 0.0 else 0.0


def gptq_row_pass_excess_s(fmt: WeightFormat, rows: float, linear_params: float, engine: str,
                           gptq_kernel: str | None, warp_issue_per_s: float | None, bw: float) -> float:
    """Seconds AutoGPTQ's cuda-old kernel spends beyond one packed read of the weights, under its switch
    threshold: one pass per row, each bound by its instruction issue or its packed bytes at `bw`. 0 for the
    other kernels, above the threshold (mechanism of `dequant_extra_bytes`) or off HF."""
    if not (materialises_16_bit(fmt, engine) and fmt.family == "gptq" and gptq_kernel == "cuda-old"):
        return 0.0
    if rows >= GPTQ_RECONS_ROWS["cuda-old"] or rows <= 0:
        return 0.0
    bytes_pass = fmt.bits / 8.0 * linear_params / bw
    issue_pass = linear_params * GPTQ_CUDA_OLD_WARP_INSTR_PER_WEIGHT / warp_issue_per_s if warp_issue_per_s else 0.0
    return max(0.0, rows * max(issue_pass, bytes_pass) - bytes_pass)


def bnb_gemv_issue_s(fmt: WeightFormat, rows: float, linear_params: float, family: str, dtype: str,
                     warp_issue_per_s: float | None) -> float:
    """Seconds the GPU needs to issue bitsandbytes' batch-1 4-bit kernel (`gemv_4bit`) over `linear_params` weights:
    0 off that path (more than one row: dequantize + GEMM), for a family whose binary was not counted, or where the
    GPU has no issue rate. One warp instruction per scheduler per clock: a lower bound on the time."""
    instr = BNB_GEMV_WARP_INSTR.get((family, "fp16" if dtype == "fp16" else "bf16"))
    if fmt.family != "nf4" or rows > 1 or not warp_issue_per_s or instr is None:
        return 0.0
    return linear_params * instr / BNB_GEMV_WEIGHTS_PER_WARP / warp_issue_per_s


def bnb_gemv_issue_excess_s(fmt: WeightFormat, rows: float, linear_params: float, family: str, dtype: str,
                            warp_issue_per_s: float | None, bw: float) -> float:
    """Seconds `gemv_4bit` runs beyond its packed bytes at `bw`, where instruction issue bounds it (A100, H100,
    H200 in bitsandbytes 0.45.0); 0 where it is memory-bound (T4, RTX 4090, A10, L4) or not on the path."""
    return _issue_excess_s(bnb_gemv_issue_s(fmt, rows, linear_params, family, dtype, warp_issue_per_s),
                           BNB_GEMV_BYTES_PER_PARAM * linear_params, bw)


def torch_cat_per_element(torch_version: str | None) -> bool:
    """Whether the run's torch grows the KV cache with the per-element, latency-bound `cat` kernel: a stated
    torch older than 2.1 (an unknown version: no)."""
    from .attention_kernels import torch_minor
    v = torch_minor(torch_version)
    return v is not None and v < TORCH_CAT_PER_ELEMENT_BEFORE


def torch_cat_read_rate(sm_count: int, element_bytes: float, dram_latency_s: float) -> float:
    """Bytes per second the per-element `cat` kernel reads: its resident threads' single loads in flight
    (2 x SMs blocks of 512 threads, one element each) per DRAM latency (Little's law)."""
    threads = TORCH_CAT_BLOCKS_PER_SM * sm_count * TORCH_CAT_THREADS_PER_BLOCK
    return threads * element_bytes / dram_latency_s


def hf_cat_seconds(kv_bytes: float, bw: float, cat_read_rate: float | None) -> float:
    """Seconds the HF cache's `torch.cat` takes for a cache of `kv_bytes`: a read and a write at the HBM rate
    `bw`, or, where the kernel is latency-bound (`cat_read_rate`, torch < 2.1), its reads at that rate, the
    writes riding along (whichever is slower)."""
    t = 2.0 * kv_bytes / bw
    return max(t, kv_bytes / cat_read_rate) if cat_read_rate else t


# TensorRT-LLM's dense NVFP4 linears (PyTorch backend): where the activation's NVFP4 quantization runs.
# `NVFP4LinearMethod._input_prepare` (tensorrt_llm/_torch/modules/linear.py @00bbf71e796406ea8593a77cbfb828356182db16)
# takes an `Fp4QuantizedTensor` as it is and quantizes any 16-bit input itself with `torch.ops.trtllm.fp4_quantize`
# (its own kernel: the 16-bit activation read, the E2M1 codes and one FP8 E4M3 scale per 16 elements written) before
# `nvfp4_gemm`. Which producer hands it an already-quantized tensor, per Llama decoder layer
# (tensorrt_llm/_torch/models/modeling_llama.py @0588d573e860ac7277ace79539be810c84e4fbea, `LlamaDecoderLayer`; the
# fusions came with TensorRT-LLM PR 6205, merged 2025-07-20, before the perf-overview's v1.0):
#   qkv_proj   from `next_layer_layernorm` (the previous layer's, 16-bit) or, where `POST_MLP_FUSION` (tp > 1 and
#              hidden_size > 4096: "Disable fusion for small models due to accuracy issues"), from the all-reduce
#              fused with residual + RMSNorm + NVFP4 quant (`AllReduceFusionOp.RESIDUAL_RMS_NORM_QUANT_NVFP4`, scale
#              `next_attn.qkv_proj.input_scale`); layer 0's input_layernorm is a plain RMSNorm: quantized in qkv_proj
#   o_proj     from the attention op, which writes NVFP4 itself (`Attention.forward_impl` wraps the kernel's
#              `output_sf` in an `Fp4QuantizedTensor`, modules/attention.py @069fb80a6b86a9ce341ea27c194b3d0ea01755b9;
#              TrtllmAttention's NVFP4 output is on by default): no pass
#   gate_up    from `post_attention_layernorm` (16-bit) or, where `PRE_MLP_FUSION` (tp > 1, hidden_size > 4096, no
#              attention DP), from the same fused all-reduce (scale `mlp.gate_up_proj.input_scale`)
#   down_proj  from `swiglu` (GatedMLP._apply_activation, modules/gated_mlp.py
#              @411e84285164fca681d75689b0634bfa55e29a2d: flashinfer silu_and_mul, 16-bit out; only FP8 down_projs
#              get a fused quantizing SwiGLU in later revisions): always its own pass
# The fused all-reduce is one kernel only while the step's message fits the custom all-reduce workspace:
# `AllreduceOp::selectImplementation` falls back to NCCL when tokens x hidden x 2 bytes exceeds
# `getMaxRequiredWorkspaceSize(tp)` (16e6 bytes up to 2 ranks, 8e6 beyond: cpp/tensorrt_llm/common/
# customAllReduceUtils.h @005b299bd30992a58607c7628bb2009264970f37), and the NCCL paths run the fusion pattern as
# `fallbackRunSubsequentOps`: the all-reduce, a residual + RMSNorm kernel, then the quantization as its own kernel
# (cpp/tensorrt_llm/thop/allreduceOp.cpp) -- the same bytes as the linear's own fp4_quantize.
NVFP4_QUANTIZE_BYTES_PER_ELEMENT = 2.0 + 0.5 + 1.0 / 16.0   # read bf16, write E2M1 + an E4M3 scale per 16
TRTLLM_LLAMA_FUSION_MIN_HIDDEN = 4096                       # enable_fusion &= config.hidden_size > 4096


def trtllm_allreduce_workspace_bytes(tp: int) -> float:
    """The custom all-reduce's largest message (getMaxRequiredWorkspaceSize): above it TensorRT-LLM runs NCCL."""
    return 16e6 if tp <= 2 else 8e6


def trtllm_nvfp4_quantize_passes(llama_decoder: bool, hidden: int, tp: int, step_tokens: float,
                                 attention_dp: bool = False) -> dict[str, bool]:
    """Which dense NVFP4 linears of a TensorRT-LLM decoder layer quantize their own input in a forward of
    `step_tokens` rows (True: an fp4_quantize pass of its own, in the linear or after the NCCL fallback's norm;
    False: the producer wrote NVFP4). Fusion is read for the Llama decoder layer only (`llama_decoder`:
    ModelSpec.trtllm_llama_decoder); any other dense model takes
    the generic Linear path (every 16-bit input quantized) except the attention output."""
    fused = (llama_decoder and tp > 1 and hidden > TRTLLM_LLAMA_FUSION_MIN_HIDDEN
             and step_tokens * hidden * 2.0 <= trtllm_allreduce_workspace_bytes(tp))
    return {"qkv_proj": not fused, "o_proj": False, "gate_up_proj": not (fused and not attention_dp),
            "down_proj": True}


def trtllm_nvfp4_quantize_bytes(tokens: float, llama_decoder: bool, hidden: int, inter_rank: float, layers: int,
                                tp: int, pp: int = 1, step_tokens: float | None = None,
                                attention_dp: bool = False) -> float:
    """HBM bytes of the unfused fp4_quantize passes of a model's `layers` dense Llama-style decoder layers over
    `tokens` rows (in a forward of `step_tokens` rows, default `tokens`), per tensor-parallel rank and averaged over
    `pp` pipeline stages: per quantized input element 2 + 0.5 + 1/16 bytes (bf16 read, E2M1 written, one E4M3
    scale per 16 elements). qkv and gate_up read the full hidden row (column-parallel), down_proj its rank's
    `inter_rank` columns. Where the all-reduce fusion feeds qkv, layer 0's qkv still quantizes its own input."""
    step = tokens if step_tokens is None else max(step_tokens, tokens)
    p = trtllm_nvfp4_quantize_passes(llama_decoder, hidden, tp, step, attention_dp)
    per_layer = hidden * (p["qkv_proj"] + p["gate_up_proj"]) + inter_rank * p["down_proj"]
    first = 0.0 if p["qkv_proj"] else float(hidden)
    return tokens * (per_layer * layers + first) / pp * NVFP4_QUANTIZE_BYTES_PER_ELEMENT
