"""Build src/gpuplan/hardware/data/software.csv: what software runs on each accelerator.

One row per gpu id (so a lookup never guesses), produced from per-architecture templates plus
per-id overrides below. Values: formats are semicolon lists ("native" = hardware math path,
"emulated" = runs but without the speed-up: weight-only, dequantized or software); engines and
attention kernels are yes | limited | no. Notes are "key: text" items joined by " | ".
Every template cites where its facts come from (source_url) and when they were read.

Usage: python scripts/build_software_data.py [--write]   (dry run by default: prints the diff)
"""
from __future__ import annotations

import csv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "src" / "gpuplan" / "hardware" / "data"
RETRIEVED = "2026-12-02"
ENGINES = ["pytorch", "fsdp", "deepspeed", "megatron", "vllm", "sglang", "trtllm", "llamacpp", "hf"]
COLUMNS = (["gpu_id", "stack", "cuda_cc", "rocm_min", "xla", "synapse", "metal", "native_formats",
            "emulated_formats", "flash_attn2", "flash_attn3", "ck_flash_attn"] + ENGINES
           + ["format_notes", "engine_notes", "source_url", "retrieved"])

U = {
    "cc": "https://developer.nvidia.com/cuda-gpus",
    "fa": "https://github.com/Dao-AILab/flash-attention",
    "vllm_fp8": "https://docs.vllm.ai/en/stable/features/quantization/fp8/",
    "vllm_q": "https://docs.vllm.ai/en/v0.9.2/features/quantization/supported_hardware.html",
    "vllm_install": "https://docs.vllm.ai/en/latest/getting_started/installation/",
    "trtllm": "https://nvidia.github.io/TensorRT-LLM/reference/support-matrix.html",
    "sglang_amd": "https://docs.sglang.ai/platforms/amd_gpu.html",
    "rocm": "https://rocm.docs.amd.com/en/latest/compatibility/compatibility-matrix.html",
    "gaudi": "https://docs.habana.ai/en/latest/Support_Matrix/Support_Matrix.html",
    "vllm_gaudi": "https://github.com/vllm-project/vllm-gaudi",
    "optimum_habana": "https://github.com/huggingface/optimum-habana",
    "tpu": "https://cloud.google.com/tpu/docs/intro-to-tpu",
    "vllm_tpu": "https://docs.vllm.ai/projects/tpu/en/latest/",
    "torch_xla": "https://github.com/pytorch/xla",
    "mps_bf16": "https://github.com/huggingface/transformers/pull/40458",
    "mps": "https://developer.apple.com/metal/pytorch/",
    "llamacpp": "https://github.com/ggml-org/llama.cpp",
    "jetson": "https://docs.nvidia.com/deeplearning/frameworks/install-pytorch-jetson-platform/index.html",
    "jetson_containers": "https://github.com/dusty-nv/jetson-containers",
}

N_FP8_EMU = ("fp8: no FP8 tensor cores; vLLM serves FP8 checkpoints as weight-only W8A16 (FP8 Marlin): weights take "
             "half the memory but matmuls run at the 16-bit rate; FP8 training is not possible")
N_BF16_EMU = ("bf16: no bf16 tensor cores; bf16 runs through slow emulated/fp32 paths; use fp16 with loss scaling")
N_INT4_EMU = "int4: weight-only (W4A16: AWQ/GPTQ/Marlin/GGUF); matmuls run at the 16-bit rate"
N_FP4_EMU = ("fp4: weight-only MXFP4/NVFP4, dequantized to 16-bit; FP4 tensor math needs Blackwell (NVIDIA) or "
             "MI355X (AMD)")

NV_ENGINE_NOTES = "trtllm: NVIDIA only | llamacpp: CUDA backend"

TEMPLATES: dict[str, dict] = {
    "volta": dict(
        stack="cuda", native="fp32;fp16", emulated="bf16;int8;int4", fa2="no", fa3="no", ck="no",
        engines=dict(pytorch="yes", fsdp="yes", deepspeed="yes", megatron="limited", vllm="limited", sglang="no",
                     trtllm="no", llamacpp="yes", hf="yes"),
        fmt=[N_BF16_EMU, "int8: DP4A on CUDA cores, no INT8 tensor cores",
             "int4: weight-only GPTQ kernels only (Marlin needs cc 8.0)",
             "fp8: not supported (FP8 Marlin needs cc 7.5+)"],
        eng=["megatron: fp16 only (no bf16); Transformer Engine needs newer GPUs",
             "vllm: cc 7.0 builds exist but FlashAttention backends need cc 8.0; fp16 only; check the current release",
             "sglang: kernels target sm75+/sm80+", "trtllm: Volta is not in the current support matrix"],
        src=[U["cc"], U["fa"], U["vllm_q"], U["trtllm"]]),
    "turing": dict(
        stack="cuda", native="fp32;fp16;int8;int4", emulated="bf16;fp8", fa2="no", fa3="no", ck="no",
        engines=dict(pytorch="yes", fsdp="yes", deepspeed="yes", megatron="limited", vllm="yes", sglang="limited",
                     trtllm="limited", llamacpp="yes", hf="yes"),
        fmt=[N_BF16_EMU, N_FP8_EMU.replace("FP8 Marlin", "FP8 Marlin, cc 7.5+")],
        eng=["megatron: fp16 only (no bf16)", "vllm: fp16; FlashAttention backends need cc 8.0, so a slower attention backend is used",
             "sglang: sm75 partly supported; many kernels need sm80+", "trtllm: Turing is not in the current support matrix (older releases only)",
             "flash_attn2: FlashAttention-2 supports Ampere, Ada and Hopper; Turing only via FlashAttention 1.x"],
        src=[U["cc"], U["fa"], U["vllm_fp8"], U["trtllm"]]),
    "ampere": dict(
        stack="cuda", native="fp32;tf32;fp16;bf16;int8;int4", emulated="fp8;fp4", fa2="yes", fa3="no", ck="no",
        engines=dict(pytorch="yes", fsdp="yes", deepspeed="yes", megatron="yes", vllm="yes", sglang="yes",
                     trtllm="yes", llamacpp="yes", hf="yes"),
        fmt=[N_FP8_EMU, N_FP4_EMU],
        eng=[NV_ENGINE_NOTES, "flash_attn3: Hopper only; use FlashAttention-2"],
        src=[U["cc"], U["fa"], U["vllm_fp8"], U["trtllm"]]),
    "ada": dict(
        stack="cuda", native="fp32;tf32;fp16;bf16;fp8;int8;int4", emulated="fp4", fa2="yes", fa3="no", ck="no",
        engines=dict(pytorch="yes", fsdp="yes", deepspeed="yes", megatron="yes", vllm="yes", sglang="yes",
                     trtllm="yes", llamacpp="yes", hf="yes"),
        fmt=["fp8: FP8 tensor cores (cc 8.9): W8A8 in vLLM, FP8 training via Transformer Engine", N_FP4_EMU],
        eng=[NV_ENGINE_NOTES, "flash_attn3: Hopper only; use FlashAttention-2"],
        src=[U["cc"], U["fa"], U["vllm_fp8"], U["trtllm"]]),
    "hopper": dict(
        stack="cuda", native="fp32;tf32;fp16;bf16;fp8;int8", emulated="int4;fp4", fa2="yes", fa3="yes", ck="no",
        engines=dict(pytorch="yes", fsdp="yes", deepspeed="yes", megatron="yes", vllm="yes", sglang="yes",
                     trtllm="yes", llamacpp="yes", hf="yes"),
        fmt=["fp8: FP8 tensor cores (cc 9.0)", "int4: no INT4 tensor cores on Hopper; weight-only W4A16/W4A8 kernels (Marlin/Machete)",
             N_FP4_EMU],
        eng=[NV_ENGINE_NOTES, "flash_attn3: FlashAttention-3 targets Hopper (sm90)"],
        src=[U["cc"], U["fa"], U["vllm_fp8"], U["trtllm"]]),
    "blackwell-dc": dict(
        stack="cuda", native="fp32;tf32;fp16;bf16;fp8;fp4;int8", emulated="int4", fa2="limited", fa3="no", ck="no",
        engines=dict(pytorch="yes", fsdp="yes", deepspeed="yes", megatron="yes", vllm="yes", sglang="yes",
                     trtllm="yes", llamacpp="yes", hf="yes"),
        fmt=["fp4: NVFP4/MXFP4 tensor cores (5th-gen)", "fp8: FP8 tensor cores", N_INT4_EMU],
        eng=[NV_ENGINE_NOTES, "flash_attn2: runs but is not tuned for sm100; engines use cuDNN/FlashInfer/FlashAttention-4 kernels",
             "flash_attn3: Hopper (sm90) only"],
        src=[U["cc"], U["fa"], U["vllm_fp8"], U["trtllm"]]),
    "blackwell-rtx": dict(
        stack="cuda", native="fp32;tf32;fp16;bf16;fp8;fp4;int8", emulated="int4", fa2="limited", fa3="no", ck="no",
        engines=dict(pytorch="yes", fsdp="yes", deepspeed="yes", megatron="yes", vllm="yes", sglang="limited",
                     trtllm="limited", llamacpp="yes", hf="yes"),
        fmt=["fp4: NVFP4/MXFP4 tensor cores (sm120)", N_INT4_EMU],
        eng=[NV_ENGINE_NOTES, "flash_attn2: needs a build with sm120 support; check the release",
             "flash_attn3: Hopper (sm90) only", "sglang: sm120 kernels arrived later than sm100; check the release",
             "trtllm: sm120 support is newer than datacenter Blackwell; check the support matrix"],
        src=[U["cc"], U["fa"], U["vllm_install"], U["trtllm"]]),
    "cdna2": dict(
        stack="rocm", rocm_min="5.0", native="fp32;fp16;bf16;int8", emulated="int4", fa2="yes", fa3="no", ck="yes",
        engines=dict(pytorch="yes", fsdp="yes", deepspeed="yes", megatron="limited", vllm="yes", sglang="limited",
                     trtllm="no", llamacpp="yes", hf="yes"),
        fmt=["fp8: no FP8 hardware on CDNA2 and no FP8 path in vLLM/ROCm for gfx90a", "tf32: no TF32 (xf32) on CDNA2", N_INT4_EMU],
        eng=["flash_attn2: ROCm port (Composable Kernel backend) supports MI200 and MI300",
             "megatron: via the ROCm/Megatron-LM fork", "sglang: AMD docs target MI300/MI350; MI200 not a primary target",
             "trtllm: NVIDIA only; use vLLM or SGLang", "llamacpp: HIP backend"],
        src=[U["rocm"], U["fa"], U["sglang_amd"], U["vllm_install"]]),
    "cdna3": dict(
        stack="rocm", rocm_min="6.0", native="fp32;tf32;fp16;bf16;fp8;int8", emulated="int4;fp4", fa2="yes", fa3="no", ck="yes",
        engines=dict(pytorch="yes", fsdp="yes", deepspeed="yes", megatron="limited", vllm="yes", sglang="yes",
                     trtllm="no", llamacpp="yes", hf="yes"),
        fmt=["fp8: FP8 matrix cores use the FNUZ variants (e4m3fnuz/e5m2fnuz); OCP-FP8 checkpoints are converted at load",
             "tf32: AMD calls it xf32", N_INT4_EMU, N_FP4_EMU],
        eng=["flash_attn2: ROCm port (Composable Kernel / Triton backends)", "megatron: via the ROCm/Megatron-LM fork",
             "trtllm: NVIDIA only; use vLLM or SGLang", "llamacpp: HIP backend"],
        src=[U["rocm"], U["fa"], U["sglang_amd"], U["vllm_fp8"]]),
    "cdna4": dict(
        stack="rocm", rocm_min="7.0", native="fp32;fp16;bf16;fp8;fp4;int8", emulated="int4", fa2="yes", fa3="no", ck="yes",
        engines=dict(pytorch="yes", fsdp="yes", deepspeed="yes", megatron="limited", vllm="yes", sglang="yes",
                     trtllm="no", llamacpp="yes", hf="yes"),
        fmt=["fp4: MXFP4 (and FP6) matrix cores on CDNA4", "fp8: OCP FP8", "tf32: no published TF32/xf32 rate (reportedly dropped on gfx950; unverified)",
             N_INT4_EMU],
        eng=["flash_attn2: ROCm port (Composable Kernel / Triton backends)", "megatron: via the ROCm/Megatron-LM fork",
             "trtllm: NVIDIA only; use vLLM or SGLang"],
        src=[U["rocm"], U["fa"], U["sglang_amd"]]),
    "gaudi": dict(
        stack="synapse", native="fp32;tf32;fp16;bf16;fp8", emulated="int4", fa2="no", fa3="no", ck="no",
        engines=dict(pytorch="limited", fsdp="limited", deepspeed="limited", megatron="limited", vllm="limited",
                     sglang="no", trtllm="no", llamacpp="no", hf="limited"),
        fmt=["fp16: runs at a quarter of the bf16 rate on Gaudi 3 (unpublished on Gaudi 2); prefer bf16",
             "int4: weight-only GPTQ/AWQ via the Intel Gaudi software stack"],
        eng=["pytorch: Intel Gaudi PyTorch bridge (habana_frameworks.torch, device 'hpu')",
             "fsdp: supported by the Gaudi PyTorch bridge with restrictions", "deepspeed: Intel Gaudi DeepSpeed fork (HabanaAI/DeepSpeed)",
             "megatron: Megatron-DeepSpeed fork for Gaudi", "vllm: vllm-gaudi HPU plugin", "hf: optimum-habana (GaudiTrainer)",
             "flash_attn2: CUDA kernel; Gaudi uses its own FusedSDPA", "sglang: no Gaudi backend; use vLLM (vllm-gaudi)",
             "trtllm: NVIDIA only; use vLLM (vllm-gaudi)", "llamacpp: no Gaudi backend"],
        src=[U["gaudi"], U["vllm_gaudi"], U["optimum_habana"]]),
    "tpu": dict(
        stack="xla", xla="yes", native="bf16;int8", emulated="fp32;fp16;fp8", fa2="no", fa3="no", ck="no",
        engines=dict(pytorch="limited", fsdp="limited", deepspeed="no", megatron="no", vllm="yes", sglang="no",
                     trtllm="no", llamacpp="no", hf="limited"),
        fmt=["fp32: fp32 matmuls run as multi-pass bf16 on the MXU; use bf16 with fp32 accumulation",
             "fp16: the MXU has no fp16 path; XLA converts; use bf16",
             "fp8: no FP8 speed-up listed by Google (v5p runs FP8 at the bf16 rate)"],
        eng=["pytorch: PyTorch/XLA (torch_xla); JAX is the native framework", "fsdp: torch_xla FSDPv2 / SPMD sharding; JAX sharding preferred",
             "deepspeed: CUDA/ROCm only; use JAX (MaxText) or PyTorch/XLA FSDPv2", "megatron: CUDA only; use MaxText",
             "vllm: vllm-tpu (JAX/PyTorch-XLA backend)", "hf: Transformers with PyTorch/XLA or Flax; many features CUDA-only",
             "flash_attn2: CUDA kernel; TPUs use Pallas splash/flash attention", "trtllm: NVIDIA only; use vLLM (vllm-tpu)"],
        src=[U["tpu"], U["vllm_tpu"], U["torch_xla"]]),
    "apple": dict(
        stack="metal", metal="yes", native="fp32;fp16", emulated="bf16;int8;int4", fa2="no", fa3="no", ck="no",
        engines=dict(pytorch="limited", fsdp="no", deepspeed="no", megatron="no", vllm="no", sglang="no",
                     trtllm="no", llamacpp="yes", hf="limited"),
        fmt=["bf16: M1/M2 have no bf16 hardware; MPS (macOS 14+) emulates it via fp32, no speed-up; use fp16",
             "int8: weight-only (llama.cpp/MLX quantized kernels)", "int4: weight-only (GGUF Q4, MLX 4-bit)"],
        eng=["pytorch: MPS backend; single device, some ops fall back to CPU; training is slow and memory-limited",
             "fsdp: needs NCCL/Gloo multi-device; not for MPS", "vllm: no Metal backend (CPU backend only on macOS); use llama.cpp or MLX",
             "llamacpp: Metal backend (first-class)", "hf: Transformers on MPS, limited", "trtllm: NVIDIA only; use llama.cpp (Metal)"],
        src=[U["mps"], U["mps_bf16"], U["llamacpp"]]),
}

# Jetson modules: CUDA on an integrated GPU (aarch64, JetPack); one device, unified memory.
_JETSON_ENGINES = dict(pytorch="yes", fsdp="no", deepspeed="no", megatron="no", vllm="limited", sglang="limited",
                       trtllm="limited", llamacpp="yes", hf="yes")
_JETSON_ENG = ["pytorch: NVIDIA's JetPack PyTorch wheels (aarch64); one integrated GPU",
               "fsdp: multi-GPU sharding has nothing to shard across on a single module",
               "deepspeed: not built for Jetson; use PyTorch or llama.cpp",
               "megatron: datacenter multi-GPU training framework; not for Jetson",
               "vllm: community/NVIDIA containers for JetPack (jetson-containers); check the JetPack release",
               "sglang: community containers only", "trtllm: TensorRT-LLM edge builds for Jetson; check the support matrix",
               "llamacpp: CUDA backend (first-class on Jetson)",
               "flash_attn2: community builds for JetPack exist; not upstream wheels"]
TEMPLATES["jetson-ampere"] = dict(
    stack="cuda", native="fp32;tf32;fp16;bf16;int8;int4", emulated="fp8;fp4", fa2="limited", fa3="no", ck="no",
    engines=_JETSON_ENGINES, fmt=[N_FP8_EMU, N_FP4_EMU], eng=_JETSON_ENG,
    src=[U["cc"], U["jetson"], U["jetson_containers"], U["llamacpp"]])
TEMPLATES["jetson-blackwell"] = dict(
    stack="cuda", native="fp32;tf32;fp16;bf16;fp8;fp4", emulated="int4;int8", fa2="limited", fa3="no", ck="no",
    engines=_JETSON_ENGINES, fmt=["fp4: NVFP4/MXFP4 tensor cores (Blackwell)", "fp8: FP8 tensor cores",
                                  "int8: no published INT8 tensor rate for Jetson Thor; use fp8", N_INT4_EMU],
    eng=_JETSON_ENG, src=[U["cc"], U["jetson"], U["jetson_containers"], U["llamacpp"]])

# gpu id -> (template, cuda compute capability or other version, extra note items)
GPUS = {
    "v100-sxm2-16gb": ("volta", "7.0"), "v100-sxm2-32gb": ("volta", "7.0"), "v100-pcie-16gb": ("volta", "7.0"),
    "v100-pcie-32gb": ("volta", "7.0"), "t4": ("turing", "7.5"), "quadro-rtx-6000": ("turing", "7.5"),
    "a100-sxm-40gb": ("ampere", "8.0"), "a100-sxm-80gb": ("ampere", "8.0"), "a100-pcie-40gb": ("ampere", "8.0"),
    "a100-pcie-80gb": ("ampere", "8.0"), "a800-sxm-80gb": ("ampere", "8.0"), "a30": ("ampere", "8.0"),
    "rtx-3090": ("ampere", "8.6"), "rtx-3090-ti": ("ampere", "8.6"), "rtx-a4000": ("ampere", "8.6"),
    "rtx-a5000": ("ampere", "8.6"), "rtx-a6000": ("ampere", "8.6"), "a40": ("ampere", "8.6"), "a10": ("ampere", "8.6"),
    "a10g": ("ampere", "8.6"),
    "rtx-4080": ("ada", "8.9"), "rtx-4080-super": ("ada", "8.9"), "rtx-4090": ("ada", "8.9"),
    "rtx-6000-ada": ("ada", "8.9"), "l4": ("ada", "8.9"), "l40": ("ada", "8.9"), "l40s": ("ada", "8.9"),
    "h100-sxm": ("hopper", "9.0"), "h100-pcie": ("hopper", "9.0"), "h100-nvl": ("hopper", "9.0"),
    "h200-sxm": ("hopper", "9.0"), "h200-nvl": ("hopper", "9.0"), "h800-sxm": ("hopper", "9.0"),
    "h20": ("hopper", "9.0"), "gh200": ("hopper", "9.0"),
    "b100": ("blackwell-dc", "10.0"), "b200": ("blackwell-dc", "10.0"), "gb200": ("blackwell-dc", "10.0"),
    "b300": ("blackwell-dc", "10.3"),
    "rtx-5080": ("blackwell-rtx", "12.0"), "rtx-5090": ("blackwell-rtx", "12.0"), "rtx-pro-6000": ("blackwell-rtx", "12.0"),
    "mi210": ("cdna2", "5.0"), "mi250": ("cdna2", "5.0"), "mi250x": ("cdna2", "5.0"),
    "mi300x": ("cdna3", "6.0"), "mi325x": ("cdna3", "6.3"), "mi355x": ("cdna4", "7.0"),
    "gaudi2": ("gaudi", "1.10"), "gaudi3": ("gaudi", "1.18"),
    "tpu-v4": ("tpu", ""), "tpu-v5e": ("tpu", ""), "tpu-v5p": ("tpu", ""), "tpu-v6e": ("tpu", ""),
    "m2-ultra": ("apple", "3"), "m3-max": ("apple", "3"), "m4-max": ("apple", "3"),
    # rows from scripts/sources/gpu-datasheets.csv
    "gh200-144gb": ("hopper", "9.0"), "h100-sxm-64gb": ("hopper", "9.0"), "h100-sxm-94gb": ("hopper", "9.0"),
    "h100-sxm-96gb": ("hopper", "9.0"), "h100-sxm-96gb-500w": ("hopper", "9.0"),
    "gb300": ("blackwell-dc", "10.3"), "mi300a": ("cdna3", "6.0"), "mi350x": ("cdna4", "7.0"), "tpu-v7": ("tpu", ""),
    "rtx-5060-ti-16gb": ("blackwell-rtx", "12.0"), "rtx-5070": ("blackwell-rtx", "12.0"),
    "rtx-5070-ti": ("blackwell-rtx", "12.0"), "rtx-pro-6000-max-q": ("blackwell-rtx", "12.0"),
    "rtx-4060": ("ada", "8.9"), "rtx-4060-ti-16gb": ("ada", "8.9"), "rtx-4070": ("ada", "8.9"),
    "rtx-4070-super": ("ada", "8.9"), "rtx-4070-ti": ("ada", "8.9"), "rtx-4070-ti-super": ("ada", "8.9"),
    "rtx-3060-12gb": ("ampere", "8.6"), "rtx-3060-ti": ("ampere", "8.6"), "rtx-3070": ("ampere", "8.6"),
    "rtx-3070-ti": ("ampere", "8.6"), "rtx-3080-10gb": ("ampere", "8.6"), "rtx-3080-12gb": ("ampere", "8.6"),
    "rtx-3080-ti": ("ampere", "8.6"), "rtx-a4500": ("ampere", "8.6"),
    "jetson-agx-orin-64gb": ("jetson-ampere", "8.7"), "jetson-agx-orin-32gb": ("jetson-ampere", "8.7"),
    "jetson-orin-nx-16gb": ("jetson-ampere", "8.7"), "jetson-orin-nx-16gb-super": ("jetson-ampere", "8.7"),
    "jetson-orin-nano-8gb": ("jetson-ampere", "8.7"), "jetson-orin-nano-8gb-super": ("jetson-ampere", "8.7"),
    "jetson-agx-thor": ("jetson-blackwell", "11.0"),
    "m1-max": ("apple", "3"), "m1-ultra": ("apple", "3"), "m2-max": ("apple", "3"), "m3-ultra": ("apple", "3"),
}
# GeForce cards without NVLink: PCIe P2P is disabled by the driver (see gpus.csv p2p)
GEFORCE_NO_P2P = {"rtx-4060", "rtx-4060-ti-16gb", "rtx-4070", "rtx-4070-super", "rtx-4070-ti", "rtx-4070-ti-super",
                  "rtx-4080", "rtx-4080-super", "rtx-4090", "rtx-5060-ti-16gb", "rtx-5070", "rtx-5070-ti", "rtx-5080",
                  "rtx-5090"}


def row_for(gid: str) -> dict:
    tpl_name, version = GPUS[gid]
    t = TEMPLATES[tpl_name]
    native, emulated = t["native"].split(";"), t["emulated"].split(";")
    fmt, eng = list(t["fmt"]), list(t["eng"])
    if gid in ("b300", "gb300"):   # INT8 tensor throughput cut on Blackwell Ultra (see gpus.csv notes)
        native.remove("int8")
        emulated.append("int8")
        fmt.append("int8: Blackwell Ultra cuts INT8 tensor throughput (~150 TOPS dense); use fp8")
    if gid in ("m3-max", "m4-max", "m3-ultra"):   # Apple GPU family 9 (M3+) has bf16 in hardware
        emulated.remove("bf16")
        native.append("bf16")
        fmt = [f for f in fmt if not f.startswith("bf16:")] + ["bf16: M3 and later have hardware bf16 (macOS 14+)"]
    if gid == "gaudi2":   # Intel publishes no TF32 figure for Gaudi 2
        native.remove("tf32")
    if gid in ("tpu-v5e", "tpu-v6e", "tpu-v4"):
        fmt = [f.replace("(v5p runs FP8 at the bf16 rate)", "") for f in fmt]
    if gid == "tpu-v7":   # Ironwood: native FP8 at twice the bf16 rate (Cloud TPU TPU7x page)
        emulated.remove("fp8")
        native.append("fp8")
        native.remove("int8")        # Google lists no INT8 rate for TPU7x
        emulated.append("int8")
        fmt = [f for f in fmt if not f.startswith("fp8:")] + ["fp8: native FP8 on TPU7x (Ironwood) at 2x the bf16 rate",
                                                              "int8: no INT8 rate published for TPU7x; use fp8"]
    if gid in ("a10g",):
        fmt.append("fp16: AWS-only SKU; tensor rates third-party (see gpus.csv)")
    if gid in GEFORCE_NO_P2P:
        eng.append("p2p: GeForce 40/50 series have no NVLink and PCIe P2P is disabled; multi-GPU collectives go through host memory")
    row = {c: "" for c in COLUMNS}
    row.update(
        gpu_id=gid, stack=t["stack"], native_formats=";".join(native), emulated_formats=";".join(emulated),
        flash_attn2=t["fa2"], flash_attn3=t["fa3"], ck_flash_attn=t["ck"],
        format_notes=" | ".join(fmt), engine_notes=" | ".join(eng),
        source_url=" ; ".join(t["src"]), retrieved=RETRIEVED, **t["engines"],
    )
    if t["stack"] == "cuda":
        row["cuda_cc"] = version
    elif t["stack"] == "rocm":
        row["rocm_min"] = version
    elif t["stack"] == "synapse":
        row["synapse"] = version
    elif t["stack"] == "xla":
        row["xla"] = "yes"
    elif t["stack"] == "metal":
        row["metal"] = version
    return row


def main(argv: list[str] | None = None) -> str:
    """Rebuild software.csv for every id in gpus.csv; print the diff; write with --write."""
    import argparse
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _csvdiff import render, report
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DATA, help="folder holding gpus.csv and software.csv")
    ap.add_argument("--write", action="store_true", help="rewrite software.csv (default: show the diff only)")
    args = ap.parse_args(argv)
    with open(args.out / "gpus.csv", newline="", encoding="utf-8") as fh:
        ids = [r["id"] for r in csv.DictReader(fh)]
    missing = [g for g in ids if g not in GPUS]
    if missing:
        raise SystemExit(f"software data missing for gpu ids: {missing}")
    text = report(args.out / "software.csv", render(COLUMNS, [row_for(g) for g in ids]), ("gpu_id",),
                  write=args.write)
    print(text)
    return text


if __name__ == "__main__":
    main()
