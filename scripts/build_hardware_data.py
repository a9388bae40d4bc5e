"""Build src/gpuplan/hardware/data/{gpus,prices}.csv from the shared research sheets.

Inputs (read-only research material, see docs/data.md):
  ../shared/data/gpu-specs.csv        one row per accelerator, vendor-style peaks
  ../shared/data/cloud-offerings.csv  SkyPilot catalog snapshot, whole-instance prices
  scripts/sources/gpu-datasheets.csv  rows typed by hand from vendor datasheets (memory/power variants,
                                      consumer, edge and Apple parts), one source URL and date per row

The catalog CSVs in the package are the product; this script records how they were made so a
refresh is a re-run plus a review of the diff. Per-id decisions (ids, aliases, usable memory,
topology, corrections) live in the tables below, each with its reason.

Usage: python scripts/build_hardware_data.py [--shared /work/shared/data] [--write]
(dry run by default: prints what would change in each CSV)
"""
from __future__ import annotations

import argparse
import csv
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "gpuplan" / "hardware" / "data"
RETRIEVED = "2026-12-02"

GPU_COLUMNS = [
    "id", "name", "aliases", "vendor", "family", "segment", "release_year",
    "memory_gb", "usable_memory_mib", "usable_memory_basis", "memory_type", "mem_bandwidth_gbps",
    "fp32_tflops", "tf32_tflops", "fp16_tflops", "bf16_tflops", "fp16_fp32acc_tflops",
    "fp8_tflops", "int8_tops", "fp4_tflops",
    "scale_up", "scale_up_gbps_bidir", "scale_up_max_gpus", "p2p",
    "pcie_gen", "pcie_lanes", "host_link_gbps_unidir", "tdp_w",
    "launch_price_usd", "launch_price_basis", "verification", "source_url", "retrieved", "notes",
]

MODAL = "https://github.com/modal-labs/modal-client/pull/2797"
SEEN = "reported by nvidia-smi"

# name in gpu-specs.csv -> (id, family, segment, aliases, usable MiB, basis)
IDS: dict[str, tuple] = {
    "NVIDIA GeForce RTX 3090": ("rtx-3090", "ampere", "geforce", "GeForce RTX 3090;RTX 3090;RTX3090", 24576, "reported by nvidia-smi (24 GiB GDDR6X, no ECC)"),
    "NVIDIA GeForce RTX 3090 Ti": ("rtx-3090-ti", "ampere", "geforce", "GeForce RTX 3090 Ti;RTX 3090 Ti;RTX3090Ti", 24564, "estimate: same as RTX 4090 (24 GiB GDDR6X)"),
    "NVIDIA GeForce RTX 4080": ("rtx-4080", "ada", "geforce", "GeForce RTX 4080;RTX 4080;RTX4080", 16376, "estimate: 16 GiB minus ~8 MiB as on other GeForce cards"),
    "NVIDIA GeForce RTX 4080 SUPER": ("rtx-4080-super", "ada", "geforce", "GeForce RTX 4080 SUPER;RTX 4080 SUPER;RTX4080Super", 16376, "estimate: as RTX 4080"),
    "NVIDIA GeForce RTX 4090": ("rtx-4090", "ada", "geforce", "GeForce RTX 4090;RTX 4090;RTX4090", 24564, "reported by nvidia-smi; SkyPilot catalog lists 23.99 GiB"),
    "NVIDIA GeForce RTX 5080": ("rtx-5080", "blackwell", "geforce", "GeForce RTX 5080;RTX 5080;RTX5080", 16303, "estimate: half of the RTX 5090 figure"),
    "NVIDIA GeForce RTX 5090": ("rtx-5090", "blackwell", "geforce", "GeForce RTX 5090;RTX 5090;RTX5090", 32607, "estimate: SkyPilot catalog (Vast) lists 31.84 GiB = 32604 MiB"),
    "NVIDIA RTX A6000": ("rtx-a6000", "ampere", "workstation", "RTX A6000;A6000;RTXA6000;RTX-A6000", 49140, "estimate: SkyPilot catalog lists 47.99 GiB"),
    "NVIDIA RTX 6000 Ada Generation": ("rtx-6000-ada", "ada", "workstation", "RTX 6000 Ada;RTX 6000 Ada Generation;RTX6000-Ada;RTX6000Ada;RTX-6000-Ada", 49140, "estimate: SkyPilot catalog lists 47.99 GiB"),
    "NVIDIA RTX PRO 6000 Blackwell (Workstation Edition)": ("rtx-pro-6000", "blackwell", "workstation", "RTX PRO 6000;RTX PRO 6000 Blackwell;RTXPRO6000;RTX-PRO-6000;RTX PRO 6000 Blackwell Workstation Edition;RTX PRO 6000 Blackwell Server Edition", 97887, "estimate: SkyPilot catalog (Vast) lists 95.59 GiB"),
    "NVIDIA T4": ("t4", "turing", "datacenter", "T4;Tesla T4;NVIDIA T4", 15360, f"{SEEN} ({MODAL})"),
    "NVIDIA V100 SXM2 16GB": ("v100-sxm2-16gb", "volta", "datacenter", "V100 SXM2 16GB;Tesla V100-SXM2-16GB;V100-SXM2-16GB", 16160, f"{SEEN} (https://github.com/4paradigm/k8s-vgpu-scheduler/issues/7)"),
    "NVIDIA V100 SXM2 32GB": ("v100-sxm2-32gb", "volta", "datacenter", "V100 SXM2 32GB;Tesla V100-SXM2-32GB;V100-SXM2-32GB", 32510, "estimate: 32 GiB less the same ECC/reserve share as the 16 GB card (16160 of 16384); catalog 31.75 GiB"),
    "NVIDIA A10": ("a10", "ampere", "datacenter", "A10;NVIDIA A10", 23028, f"{SEEN} ({MODAL})"),
    "NVIDIA A10G": ("a10g", "ampere", "datacenter", "A10G;NVIDIA A10G", 23028, "reported by nvidia-smi on AWS g5 (same board memory as A10)"),
    "NVIDIA L4": ("l4", "ada", "datacenter", "L4;NVIDIA L4", 23034, f"{SEEN} ({MODAL})"),
    "NVIDIA L40": ("l40", "ada", "datacenter", "L40;NVIDIA L40", 46068, "estimate: same 48 GB GDDR6 ECC board as L40S"),
    "NVIDIA L40S": ("l40s", "ada", "datacenter", "L40S;NVIDIA L40S", 46068, f"{SEEN} ({MODAL})"),
    "NVIDIA A40": ("a40", "ampere", "datacenter", "A40;NVIDIA A40", 46068, "estimate: 48 GB GDDR6 with ECC, as L40S"),
    "NVIDIA A100 40GB PCIe": ("a100-pcie-40gb", "ampere", "datacenter", "A100 PCIe 40GB;A100-PCIE-40GB;A100 40GB PCIe", 40960, "estimate: same HBM2 as A100 SXM 40GB"),
    "NVIDIA A100 40GB SXM4": ("a100-sxm-40gb", "ampere", "datacenter", "A100 SXM4 40GB;A100-SXM4-40GB;A100 40GB SXM;A100 SXM 40GB", 40960, f"{SEEN} ({MODAL})"),
    "NVIDIA A100 80GB PCIe": ("a100-pcie-80gb", "ampere", "datacenter", "A100 PCIe 80GB;A100-PCIE-80GB;A100 80GB PCIe;A100-80G-PCIe", 81920, "estimate: same HBM2e capacity as A100 SXM 80GB"),
    "NVIDIA A100 80GB SXM4": ("a100-sxm-80gb", "ampere", "datacenter", "A100 SXM4 80GB;A100-SXM4-80GB;A100 80GB SXM;A100 SXM 80GB", 81920, f"{SEEN} ({MODAL})"),
    "NVIDIA A800 80GB SXM": ("a800-sxm-80gb", "ampere", "datacenter", "A800 SXM 80GB;A800-SXM4-80GB;A800 80GB", 81920, "estimate: A100 80GB silicon"),
    "NVIDIA H800 SXM": ("h800-sxm", "hopper", "datacenter", "H800 SXM;H800;H800-SXM5", 81559, "estimate: H100 SXM silicon"),
    "NVIDIA H20": ("h20", "hopper", "datacenter", "H20;NVIDIA H20", 97871, "estimate: 96 GB HBM3 like GH200 96 GB"),
    "NVIDIA H100 PCIe": ("h100-pcie", "hopper", "datacenter", "H100 PCIe;H100-PCIE;H100 PCIe 80GB;H100-80G-PCIe;H100_PCIE", 81559, "estimate: same 80 GB configuration as H100 SXM"),
    "NVIDIA H100 SXM5": ("h100-sxm", "hopper", "datacenter", "H100 SXM;H100-SXM5;H100 80GB HBM3;H100 SXM5;H100-SXM;H100_SXM5;H100 SXM5 80GB", 81559, f"{SEEN} ({MODAL})"),
    "NVIDIA H100 NVL": ("h100-nvl", "hopper", "datacenter", "H100 NVL;H100-NVL;H100_NVL;H100 NVL 94GB", 95830, "estimate: catalog lists 93.58 GiB (= 95826 MiB)"),
    "NVIDIA H200 SXM": ("h200-sxm", "hopper", "datacenter", "H200 SXM;H200-SXM;H200 SXM 141GB;H200 SXM5", 143771, "reported by nvidia-smi (143771 MiB); catalogs list 140-140.4 GiB"),
    "NVIDIA H200 NVL": ("h200-nvl", "hopper", "datacenter", "H200 NVL;H200-NVL", 143771, "estimate: same 141 GB HBM3e as H200 SXM"),
    "NVIDIA GH200 Grace Hopper Superchip (GPU)": ("gh200", "hopper", "datacenter", "GH200;GH200 Grace Hopper;Grace Hopper;GH200 96GB;gh200-96gb;GH200 480GB;NVIDIA GH200 480GB", 97871, "estimate: 96 GB HBM3 (GPU only; Grace LPDDR5X not counted)"),
    "NVIDIA B100": ("b100", "blackwell", "datacenter", "B100;NVIDIA B100", 183359, "estimate: as B200 (no shipping parts observed)"),
    "NVIDIA B200 (HGX/DGX)": ("b200", "blackwell", "datacenter", "B200;NVIDIA B200;HGX B200;DGX B200;B200 SXM", 183359, "reported by nvidia-smi (https://github.com/NVIDIA/TensorRT-LLM/issues/10278)"),
    "NVIDIA GB200 (per Blackwell GPU, NVL72)": ("gb200", "blackwell", "datacenter", "GB200;GB200 NVL72;NVIDIA GB200", 189471, "estimate: 186 GB usable per NVL72 totals"),
    "NVIDIA B300 (Blackwell Ultra, HGX)": ("b300", "blackwell", "datacenter", "B300;Blackwell Ultra;HGX B300;NVIDIA B300", 275040, "estimate: AWS catalog lists 268.6 GiB (= 275046 MiB)"),
    "AMD Instinct MI210": ("mi210", "cdna2", "datacenter", "MI210;Instinct MI210;AMD MI210", 65520, "estimate: 64 GiB HBM2e less a small reserve"),
    "AMD Instinct MI250": ("mi250", "cdna2", "datacenter", "MI250;Instinct MI250;AMD MI250", 65520, "estimate: per GCD (64 GiB), as MI210"),
    "AMD Instinct MI250X": ("mi250x", "cdna2", "datacenter", "MI250X;Instinct MI250X;AMD MI250X", 65520, "estimate: per GCD (64 GiB), as MI210"),
    "AMD Instinct MI300X": ("mi300x", "cdna3", "datacenter", "MI300X;Instinct MI300X;AMD MI300X", 196592, "reported by rocm-smi (192 GiB HBM3 less 16 MiB)"),
    "AMD Instinct MI325X": ("mi325x", "cdna3", "datacenter", "MI325X;Instinct MI325X;AMD MI325X", 262128, "estimate: 256 GiB HBM3e less 16 MiB as MI300X"),
    "AMD Instinct MI355X": ("mi355x", "cdna4", "datacenter", "MI355X;Instinct MI355X;AMD MI355X", 294896, "estimate: 288 GiB HBM3e less 16 MiB; catalog lists 288 GiB"),
    "Intel Gaudi 2": ("gaudi2", "gaudi", "datacenter", "Gaudi 2;Gaudi2;Intel Gaudi 2;HL-225", 98304, "estimate: nominal 96 GiB HBM2e"),
    "Intel Gaudi 3": ("gaudi3", "gaudi", "datacenter", "Gaudi 3;Gaudi3;Intel Gaudi 3;HL-325L", 131072, "estimate: nominal 128 GiB HBM2e"),
    "Google TPU v4": ("tpu-v4", "tpu", "tpu", "TPU v4;TPUv4;TPU-v4", 32768, "estimate: nominal 32 GiB HBM (XLA keeps a small reserve)"),
    "Google TPU v5e": ("tpu-v5e", "tpu", "tpu", "TPU v5e;TPUv5e;TPU v5 lite;tpu-v5litepod;v5litepod", 16384, "estimate: nominal 16 GiB HBM"),
    "Google TPU v5p": ("tpu-v5p", "tpu", "tpu", "TPU v5p;TPUv5p;TPU-v5p", 97280, "estimate: nominal 95 GiB HBM"),
    "Google TPU v6e (Trillium)": ("tpu-v6e", "tpu", "tpu", "TPU v6e;Trillium;TPUv6e;TPU-v6e", 32768, "estimate: nominal 32 GiB HBM"),
    "Apple M2 Ultra (76-core GPU)": ("m2-ultra", "apple", "apple", "M2 Ultra;Apple M2 Ultra;Mac Studio M2 Ultra", 147456, "estimate: 75% of 192 GiB, the macOS default GPU wired limit (raise with sysctl iogpu.wired_limit_mb)"),
    "Apple M3 Max (40-core GPU)": ("m3-max", "apple", "apple", "M3 Max;Apple M3 Max", 98304, "estimate: 75% of 128 GiB (macOS default GPU wired limit)"),
    "Apple M4 Max (40-core GPU)": ("m4-max", "apple", "apple", "M4 Max;Apple M4 Max", 98304, "estimate: 75% of 128 GiB (macOS default GPU wired limit)"),
}

# scale-up domain per id: (kind, GB/s bidirectional per GPU, domain size, p2p)
PCIE_BIDIR = {"3.0": 32, "4.0": 64, "5.0": 128, "6.0": 256}
TOPOLOGY: dict[str, tuple] = {
    "rtx-3090": ("nvlink-bridge", 112.5, 2, True), "rtx-3090-ti": ("nvlink-bridge", 112.5, 2, True),
    "rtx-a6000": ("nvlink-bridge", 112.5, 2, True), "a40": ("nvlink-bridge", 112.5, 2, True),
    "a100-pcie-40gb": ("nvlink-bridge", 600, 2, True), "a100-pcie-80gb": ("nvlink-bridge", 600, 2, True),
    "h100-pcie": ("nvlink-bridge", 600, 2, True), "h100-nvl": ("nvlink-bridge", 600, 2, True),
    "h200-nvl": ("nvlink-bridge", 900, 4, True),
    "v100-sxm2-16gb": ("nvlink-mesh", 300, 8, True), "v100-sxm2-32gb": ("nvlink-mesh", 300, 8, True),
    "a100-sxm-40gb": ("nvswitch", 600, 8, True), "a100-sxm-80gb": ("nvswitch", 600, 8, True),
    "a800-sxm-80gb": ("nvswitch", 400, 8, True), "h800-sxm": ("nvswitch", 400, 8, True),
    "h20": ("nvswitch", 900, 8, True), "h100-sxm": ("nvswitch", 900, 8, True),
    "h200-sxm": ("nvswitch", 900, 8, True), "gh200": ("nvswitch", 900, 256, True),
    "b100": ("nvswitch", 1800, 8, True), "b200": ("nvswitch", 1800, 8, True),
    "gb200": ("nvswitch", 1800, 72, True), "b300": ("nvswitch", 1800, 8, True),
    "mi210": ("infinity-fabric", 300, 4, True), "mi250": ("infinity-fabric", 300, 8, True),
    "mi250x": ("infinity-fabric", 400, 8, True), "mi300x": ("infinity-fabric", 896, 8, True),
    "mi325x": ("infinity-fabric", 896, 8, True), "mi355x": ("infinity-fabric", 1075.2, 8, True),
    "gaudi2": ("gaudi-roce", 525, 8, True), "gaudi3": ("gaudi-roce", 1050, 8, True),
    "tpu-v4": ("ici", 600, 4096, True), "tpu-v5e": ("ici", 400, 256, True),
    "tpu-v5p": ("ici", 1200, 8960, True), "tpu-v6e": ("ici", 800, 256, True),
    "m2-ultra": ("apple-unified", 0, 1, False), "m3-max": ("apple-unified", 0, 1, False),
    "m4-max": ("apple-unified", 0, 1, False),
}
TOPOLOGY_NOTES = {
    "gaudi2": "scale_up counts the 21 of 24 on-die 100 GbE ports HLS-Gaudi2 wires for all-to-all scale-up (21x100x2/8 = 525 GB/s); the sheet's 600 counts all 24.",
    "gaudi3": "scale_up counts the 21 of 24 on-die 200 GbE ports used for scale-up in an 8-card box (21x200x2/8 = 1050 GB/s); the sheet's 1200 counts all 24.",
    "tpu-v4": "ICI per-chip bandwidth is not in the current Cloud TPU docs; 600 GB/s bidirectional is an estimate (6 links x ~50 GB/s x 2) and the domain is a 4096-chip pod.",
    "mi250": "Per GCD: one OAM module = 2 GCDs = 2 devices to software; peak rates, memory, bandwidth and power here are the module figures / 2. IF bandwidth per GCD doubtful (some links join the two GCDs).",
    "mi250x": "Per GCD: one OAM module = 2 GCDs = 2 devices to software; peak rates, memory, bandwidth and power here are the module figures / 2. IF bandwidth per GCD doubtful (some links join the two GCDs).",
    "gh200": "scale_up domain 256 = DGX GH200 NVLink-switch system; cloud GH200 is usually a single superchip.",
    "v100-sxm2-16gb": "NVLink 2 hybrid cube-mesh (DGX-1/p3.16xlarge): not all pairs are directly linked.",
    "v100-sxm2-32gb": "NVLink 2 hybrid cube-mesh (DGX-1/p3dn.24xlarge): not all pairs are directly linked.",
}

# ids whose rates are per GCD, i.e. the module figure / 2
PER_GCD = {"mi250", "mi250x"}

# new rows (not in the shared sheet); figures from the vendor pages in source_url
EXTRA_ROWS = [
    dict(id="a30", name="NVIDIA A30", aliases="A30;NVIDIA A30", vendor="NVIDIA", family="ampere", segment="datacenter",
         release_year=2021, memory_gb=24, usable_memory_mib=24576, usable_memory_basis="estimate: 24 GiB HBM2",
         memory_type="HBM2", mem_bandwidth_gbps=933, fp32_tflops=10.3, tf32_tflops=82, fp16_tflops=165, bf16_tflops=165,
         fp16_fp32acc_tflops=165, fp8_tflops="", int8_tops=330, fp4_tflops="", scale_up="nvlink-bridge",
         scale_up_gbps_bidir=200, scale_up_max_gpus=2, p2p="true", pcie_gen="4.0", pcie_lanes=16, tdp_w=165,
         launch_price_usd="", launch_price_basis="", verification="vendor datasheet (sparse /2)",
         source_url="https://www.nvidia.com/en-us/data-center/products/a30-gpu/",
         notes="Datasheet prints sparse tensor rates (TF32 165, FP16 330, INT8 661); halved here. NVLink bridge 200 GB/s between 2 cards."),
    dict(id="rtx-a5000", name="NVIDIA RTX A5000", aliases="RTX A5000;A5000;RTXA5000;RTX-A5000", vendor="NVIDIA", family="ampere",
         segment="workstation", release_year=2021, memory_gb=24, usable_memory_mib=24564, usable_memory_basis="estimate: catalog lists 23.99 GiB",
         memory_type="GDDR6", mem_bandwidth_gbps=768, fp32_tflops=27.8, tf32_tflops=55.6, fp16_tflops=111.1, bf16_tflops=111.1,
         fp16_fp32acc_tflops=111.1, fp8_tflops="", int8_tops=222.2, fp4_tflops="", scale_up="nvlink-bridge",
         scale_up_gbps_bidir=112.5, scale_up_max_gpus=2, p2p="true", pcie_gen="4.0", pcie_lanes=16, tdp_w=230,
         launch_price_usd="", launch_price_basis="", verification="vendor datasheet (sparse /2); TF32/INT8 derived",
         source_url="https://www.nvidia.com/en-us/design-visualization/rtx-a5000/",
         notes="NVIDIA prints 222.2 TFLOPS tensor with sparsity; dense FP16 = 111.1 (pro card: full-rate FP32 accumulate, as A6000). TF32 and INT8 derived with the Ampere ratios."),
    dict(id="rtx-a4000", name="NVIDIA RTX A4000", aliases="RTX A4000;A4000;RTXA4000;RTX-A4000", vendor="NVIDIA", family="ampere",
         segment="workstation", release_year=2021, memory_gb=16, usable_memory_mib=16376, usable_memory_basis="estimate: 16 GiB GDDR6",
         memory_type="GDDR6", mem_bandwidth_gbps=448, fp32_tflops=19.2, tf32_tflops=38.4, fp16_tflops=76.7, bf16_tflops=76.7,
         fp16_fp32acc_tflops=76.7, fp8_tflops="", int8_tops=153.4, fp4_tflops="", scale_up="none",
         scale_up_gbps_bidir="", scale_up_max_gpus=1, p2p="true", pcie_gen="4.0", pcie_lanes=16, tdp_w=140,
         launch_price_usd="", launch_price_basis="", verification="vendor datasheet (sparse /2); TF32/INT8 derived",
         source_url="https://www.nvidia.com/en-us/design-visualization/rtx-a4000/",
         notes="NVIDIA prints 153.4 TFLOPS tensor with sparsity; dense FP16 = 76.7. Single-slot, no NVLink."),
    dict(id="quadro-rtx-6000", name="NVIDIA Quadro RTX 6000", aliases="Quadro RTX 6000;Quadro RTX6000", vendor="NVIDIA",
         family="turing", segment="workstation", release_year=2018, memory_gb=24, usable_memory_mib=24576,
         usable_memory_basis="estimate: 24 GiB GDDR6", memory_type="GDDR6", mem_bandwidth_gbps=672, fp32_tflops=16.3,
         tf32_tflops="", fp16_tflops=130.5, bf16_tflops="", fp16_fp32acc_tflops=130.5, fp8_tflops="", int8_tops=261,
         fp4_tflops="", scale_up="nvlink-bridge", scale_up_gbps_bidir=100, scale_up_max_gpus=2, p2p="true", pcie_gen="3.0",
         pcie_lanes=16, tdp_w=260, launch_price_usd=6300, launch_price_basis="NVIDIA list price at launch (2018)",
         verification="vendor datasheet",
         source_url="https://www.nvidia.com/content/dam/en-zz/Solutions/design-visualization/quadro-product-literature/quadro-rtx-6000-us-nvidia-704093-r4-web.pdf",
         notes="Turing: no BF16/TF32. Lambda and Seeweb sell it as 'RTX6000' (24 GB) - not the RTX 6000 Ada. Turing pro cards run FP16 with FP32 accumulate at full rate."),
    dict(id="v100-pcie-16gb", name="NVIDIA V100 PCIe 16GB", aliases="V100 PCIe 16GB;Tesla V100-PCIE-16GB;V100-PCIE-16GB", vendor="NVIDIA",
         family="volta", segment="datacenter", release_year=2017, memory_gb=16, usable_memory_mib=16160,
         usable_memory_basis="estimate: as V100 SXM2 16GB", memory_type="HBM2", mem_bandwidth_gbps=900, fp32_tflops=14,
         tf32_tflops="", fp16_tflops=112, bf16_tflops="", fp16_fp32acc_tflops=112, fp8_tflops="", int8_tops=56,
         fp4_tflops="", scale_up="none", scale_up_gbps_bidir="", scale_up_max_gpus=1, p2p="true", pcie_gen="3.0",
         pcie_lanes=16, tdp_w=250, launch_price_usd="", launch_price_basis="", verification="vendor datasheet",
         source_url="https://www.nvidia.com/en-us/data-center/v100/",
         notes="No BF16/TF32/FP8. INT8 56 TOPS is DP4A on CUDA cores (4x FP32), not tensor cores."),
    dict(id="v100-pcie-32gb", name="NVIDIA V100 PCIe 32GB", aliases="V100 PCIe 32GB;Tesla V100-PCIE-32GB;V100-PCIE-32GB;V100_32G_PCIE", vendor="NVIDIA",
         family="volta", segment="datacenter", release_year=2018, memory_gb=32, usable_memory_mib=32510,
         usable_memory_basis="estimate: as V100 SXM2 32GB", memory_type="HBM2", mem_bandwidth_gbps=900, fp32_tflops=14,
         tf32_tflops="", fp16_tflops=112, bf16_tflops="", fp16_fp32acc_tflops=112, fp8_tflops="", int8_tops=56,
         fp4_tflops="", scale_up="none", scale_up_gbps_bidir="", scale_up_max_gpus=1, p2p="true", pcie_gen="3.0",
         pcie_lanes=16, tdp_w=250, launch_price_usd="", launch_price_basis="", verification="vendor datasheet",
         source_url="https://www.nvidia.com/en-us/data-center/v100/",
         notes="No BF16/TF32/FP8. INT8 56 TOPS is DP4A on CUDA cores (4x FP32), not tensor cores."),
]


def _num(text: str) -> str:
    text = (text or "").strip()
    return text


def _first_url(urls: str) -> str:
    return urls.split(";")[0].strip()


DATASHEETS = ROOT / "scripts" / "sources" / "gpu-datasheets.csv"


def read_datasheets(path: Path = DATASHEETS) -> list[dict]:
    """Hand-typed datasheet rows (already in gpus.csv columns; each keeps its own retrieved date)."""
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        missing = [c for c in GPU_COLUMNS if c not in r]
        if missing:
            sys.exit(f"{path.name}: row '{r.get('id')}' lacks columns {missing}")
        if r["scale_up"] == "none" and not r["scale_up_gbps_bidir"] and r["pcie_gen"]:
            r["scale_up_gbps_bidir"] = PCIE_BIDIR[r["pcie_gen"]] * int(r["pcie_lanes"] or 16) // 16
    return rows


def build_gpus(shared: Path, datasheets: Path = DATASHEETS) -> list[dict]:
    rows = []
    for src in csv.DictReader(open(shared / "gpu-specs.csv", newline="", encoding="utf-8")):
        name = src["name"]
        if name not in IDS:
            sys.exit(f"gpu-specs.csv row '{name}' has no id mapping in IDS; add one")
        gid, family, segment, aliases, usable, basis = IDS[name]
        kind, gbps, domain, p2p = TOPOLOGY.get(gid, ("none", None, 1, None))
        pcie = src["pcie"].strip()
        m = re.match(r"(\d\.\d) x(\d+)", pcie)
        pcie_gen, lanes = (m.group(1), int(m.group(2))) if m else ("", "")
        if kind == "none":
            gbps = PCIE_BIDIR.get(pcie_gen, 0) if pcie_gen else 0
        if p2p is None:   # PCIe-only cards: GeForce 40/50 have PCIe P2P disabled by the driver
            p2p = segment != "geforce"
        notes = src["notes"].strip()
        if gid in TOPOLOGY_NOTES:
            notes = f"{TOPOLOGY_NOTES[gid]} {notes}"
        row = dict(
            id=gid, name=name, aliases=aliases, vendor=src["vendor"].split(" (")[0], family=family, segment=segment,
            release_year=src["release_year"], memory_gb=src["memory_gb"], usable_memory_mib=usable,
            usable_memory_basis=basis, memory_type=src["memory_type"], mem_bandwidth_gbps=src["mem_bandwidth_gbps"],
            fp32_tflops=src["fp32_tflops"], tf32_tflops=src["tf32_tflops"], fp16_tflops=src["fp16_tflops"],
            bf16_tflops=src["bf16_tflops"], fp16_fp32acc_tflops=src["fp16_fp32acc_tflops"],
            fp8_tflops=src["fp8_tflops"], int8_tops=src["int8_tops"], fp4_tflops=src["fp4_tflops"],
            scale_up=kind, scale_up_gbps_bidir=gbps if gbps else "", scale_up_max_gpus=domain,
            p2p="true" if p2p else "false", pcie_gen=pcie_gen, pcie_lanes=lanes, host_link_gbps_unidir="",
            tdp_w=src["tdp_w"], launch_price_usd=src["launch_price_usd"],
            launch_price_basis=src["launch_price_basis"], verification=src["verification"],
            source_url=_first_url(src["source_urls"]), retrieved=RETRIEVED, notes=notes,
        )
        rows.append(row)
    for extra in EXTRA_ROWS:
        row = {c: "" for c in GPU_COLUMNS}
        row.update({k: v for k, v in extra.items()})
        if row["scale_up"] == "none":
            row["scale_up_gbps_bidir"] = PCIE_BIDIR[row["pcie_gen"]]
        row["retrieved"] = RETRIEVED
        rows.append(row)
    rows += read_datasheets(datasheets)
    by_id = {r["id"]: r for r in rows}
    if len(by_id) != len(rows):
        sys.exit("duplicate gpu ids across the research sheet, EXTRA_ROWS and gpu-datasheets.csv")
    _fix(by_id)
    return rows


def _fix(by_id: dict[str, dict]) -> None:
    """Corrections and completions on top of the shared sheet (each says why)."""
    for gid in PER_GCD & set(by_id):
        r = by_id[gid]
        for col in ("memory_gb", "mem_bandwidth_gbps", "fp32_tflops", "fp16_tflops", "bf16_tflops",
                    "fp16_fp32acc_tflops", "int8_tops", "tdp_w"):
            if r[col]:
                r[col] = f"{float(r[col]) / 2:g}"
        r["name"] += " (per GCD)"
    # Gaudi 3 FP16 runs at a quarter of the BF16 rate per the Intel white paper; the sheet puts
    # that 459 in fp16/tf32 but leaves fp16_fp32acc blank -> make the training rate explicit.
    if "gaudi3" in by_id:
        by_id["gaudi3"]["fp16_fp32acc_tflops"] = by_id["gaudi3"]["fp16_tflops"]
    # Apple: GPU FP16 runs at the FP32 rate; M3 and later have hardware bf16 in the GPU
    # (Apple GPU family 9); M1/M2 emulate bf16 (see software.csv), so it stays blank there.
    for gid in {"m2-ultra", "m3-max", "m4-max"} & set(by_id):
        r = by_id[gid]
        r["fp16_fp32acc_tflops"] = r["fp16_tflops"]
        r["pcie_gen"], r["pcie_lanes"] = "", ""
        r["host_link_gbps_unidir"] = r["mem_bandwidth_gbps"]
        r["scale_up_gbps_bidir"] = ""
        r["notes"] = ("host_link = unified memory bandwidth (CPU and GPU share one memory, so 'offload' moves no data). "
                      + r["notes"])
    for gid in {"m3-max", "m4-max"} & set(by_id):
        by_id[gid]["bf16_tflops"] = by_id[gid]["fp16_tflops"]
        by_id[gid]["notes"] += " bf16 entered at the FP16 rate (unofficial; M3+ GPUs have native bf16)."
    # Grace-attached GPUs reach the host over NVLink-C2C (900 GB/s bidirectional), not PCIe.
    for gid in {"gh200", "gb200"} & set(by_id):
        by_id[gid]["pcie_gen"], by_id[gid]["pcie_lanes"] = "", ""
        by_id[gid]["host_link_gbps_unidir"] = 450
    # TPUs: the host interface is not documented for planning; assume PCIe 4.0 x16 so that
    # host<->device estimates have a number, and say so.
    for gid in {"tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e"} & set(by_id):
        r = by_id[gid]
        r["pcie_gen"], r["pcie_lanes"] = "4.0", 16
        r["notes"] = "pcie_gen is an assumption (host interface not documented by Google). " + r["notes"]
    # A10G: Ampere has TF32; no published figure. Derive as half the FP16 rate (the A10 ratio).
    if "a10g" in by_id:
        by_id["a10g"]["tf32_tflops"] = f"{float(by_id['a10g']['fp16_tflops']) / 2:g}"
        by_id["a10g"]["notes"] += " tf32 derived as fp16/2 (Ampere ratio; A10 62.5/125)."
    # fp16_fp32acc: leave blank only where fp16 itself is blank.
    for r in by_id.values():
        if r["fp16_tflops"] and not r["fp16_fp32acc_tflops"]:
            r["fp16_fp32acc_tflops"] = r["fp16_tflops"]


# ----------------------------------------------------------------------------- prices

PRICE_COLUMNS = [
    "provider", "instance_type", "gpu_id", "gpus_per_instance", "usd_per_hour_on_demand",
    "usd_per_hour_on_demand_median", "usd_per_hour_spot", "region", "regions_count", "includes_host",
    "catalog_accelerator", "mapping_basis", "source_url", "retrieved", "notes",
]

# a prices.csv row is one offering: provider, instance and the accelerator the catalog names
PRICE_KEY = ("provider", "instance_type", "catalog_accelerator", "gpus_per_instance")

# catalog accelerator name -> gpu id, when the name alone decides it
DIRECT = {
    "A10": "a10", "A10G": "a10g", "A30": "a30", "A40": "a40",
    "A100-80G-PCIe": "a100-pcie-80gb", "A100-80G-PCIe-NVLink": "a100-pcie-80gb", "A100_80G_PCIE": "a100-pcie-80gb",
    "A100-80GB-SXM": "a100-sxm-80gb", "A100_80G_SXM4": "a100-sxm-80gb",
    "A4000": "rtx-a4000", "A4000_PCIE": "rtx-a4000", "RTX-A4000": "rtx-a4000", "RTXA4000": "rtx-a4000",
    "A5000": "rtx-a5000", "A5000_PCIE": "rtx-a5000", "RTXA5000": "rtx-a5000",
    "A6000": "rtx-a6000", "A6000_PCIE_HIGH_PERF": "rtx-a6000", "A6000_PCIE_LOW_RAM": "rtx-a6000",
    "RTX-A6000": "rtx-a6000", "RTXA6000": "rtx-a6000",
    "B200": "b200", "B300": "b300", "GAUDI2": "gaudi2", "GH200": "gh200",
    "H100-80G-PCIe": "h100-pcie", "H100-80G-PCIe-NVLink": "h100-pcie", "H100_PCIE": "h100-pcie",
    "H100_PCIE_BAREMETAL": "h100-pcie", "H100-80G-SXM5": "h100-sxm", "H100-SXM": "h100-sxm", "H100_SXM5": "h100-sxm",
    "H100-MEGA": "h100-sxm", "H100-NVLINK": "h100-sxm", "H100-NVL": "h100-nvl", "H100_NVL": "h100-nvl",
    "H200": "h200-sxm", "H200-SXM": "h200-sxm",
    "L4": "l4", "L4_PCIE": "l4", "L40": "l40", "L40_PCIE": "l40", "L40S": "l40s", "L40S_PCIE": "l40s",
    "L40S_PCIE_BAREMETAL": "l40s", "MI300X": "mi300x", "MI355X": "mi355x",
    "RTX PRO 6000 96GB": "rtx-pro-6000", "RTX-PRO-6000": "rtx-pro-6000", "RTXPRO6000": "rtx-pro-6000",
    "RTXPRO6000-WK": "rtx-pro-6000", "RTXPRO6000Blackwell": "rtx-pro-6000", "RTXPRO6000WS": "rtx-pro-6000",
    "RTXPRO6000_PCIE": "rtx-pro-6000", "RTXPRO6000_PCIE_BAREMETAL": "rtx-pro-6000", "RTXPro6000": "rtx-pro-6000",
    "RTX-6000-Ada": "rtx-6000-ada", "RTX6000-Ada": "rtx-6000-ada", "RTX6000ADA_PCIE": "rtx-6000-ada",
    "RTX6000Ada": "rtx-6000-ada", "RTX6000": "quadro-rtx-6000",
    "RTX3090": "rtx-3090", "RTX4090": "rtx-4090", "RTX5090": "rtx-5090", "RTX5090_PCIE": "rtx-5090",
    "RTX5090_PCIE_BAREMETAL": "rtx-5090", "T4": "t4", "V100_32G_PCIE": "v100-pcie-32gb",
    "RTX3060Ti": "rtx-3060-ti", "RTX3070": "rtx-3070", "RTX 3070": "rtx-3070", "RTX5070": "rtx-5070",
    "RTXA4500": "rtx-a4500",
}


def _map_consumer(r: dict) -> tuple[str | None, str]:
    """Catalog names that drop the variant (Ti, SUPER, memory size): decide by the instance name and the
    catalog's memory per GPU. Anything else stays unmapped rather than guessed."""
    acc, low, mem = r["accelerator"], r["instance_type"].lower(), r["accelerator_memory_gib"]
    if acc == "RTX3060":
        if "3060_ti" in low and mem == "8":
            return "rtx-3060-ti", "instance name says RTX 3060 Ti; 8 GiB"
        if mem == "12":
            return "rtx-3060-12gb", "RTX 3060 with 12 GiB"
    if acc == "RTX4060" and "4060_ti" in low and mem == "16":
        return "rtx-4060-ti-16gb", "instance name says RTX 4060 Ti; 16 GiB"
    if acc == "RTX4070" and "4070s_ti" in low and mem == "15.99":
        return "rtx-4070-ti-super", "instance name says 4070 SUPER Ti (= 4070 Ti SUPER); 16 GiB"
    return None, ""


def _map_ambiguous(r: dict) -> tuple[str | None, str]:
    """Generic names (H100, A100, A100-80GB, V100, V100-32GB): decide the form factor from the
    instance name or the provider's documented shape; otherwise assume the HGX/SXM part."""
    acc, prov, inst = r["accelerator"], r["provider"], r["instance_type"]
    low = inst.lower()
    mem = r["accelerator_memory_gib"]
    if acc == "H100":
        if mem == "93.58" or prov == "azure" and "NC40ads_H100" in inst or "NC80adis_H100" in inst:
            return "h100-nvl", "Azure NCads H100 v5 = H100 NVL 94GB; memory 93.58 GiB"
        if "pcie" in low or "pci" in low:
            return "h100-pcie", "instance name says PCIe"
        if prov == "runpod":
            return "h100-pcie", "RunPod names the SXM part 'H100-SXM'; plain 'H100' is its PCIe card"
        if "sxm" in low or prov in ("aws", "gcp", "azure", "oci", "nebius", "mithril", "digitalocean"):
            return "h100-sxm", "instance name or provider shape (p5/a3/ND H100 v5/BM.GPU.H100/Nebius SXM) is HGX H100"
        return "h100-sxm", "assumed SXM: catalog name 'H100' does not give the form factor"
    if acc in ("A100", "A100-80GB"):
        big = acc == "A100-80GB" or mem == "80"
        if "pcie" in low or "pci" in low or (prov == "azure" and "NC" in inst and "A100_v4" in inst):
            return ("a100-pcie-80gb" if big else "a100-pcie-40gb"), "instance name or Azure NC A100 v4 = PCIe"
        if prov == "runpod" and acc == "A100-80GB":
            return "a100-pcie-80gb", "RunPod names the SXM part 'A100-80GB-SXM'; plain 'A100-80GB' is PCIe"
        if prov == "lambda" and inst == "gpu_1x_a100":
            return "a100-pcie-40gb", "Lambda gpu_1x_a100 is the 40 GB PCIe card (gpu_1x_a100_sxm4 is SXM)"
        if "sxm" in low or prov in ("aws", "gcp", "azure", "oci", "lambda"):
            return ("a100-sxm-80gb" if big else "a100-sxm-40gb"), "instance name or provider HGX shape (p4d/p4de/a2/ND A100 v4/BM.GPU4)"
        return ("a100-sxm-80gb" if big else "a100-sxm-40gb"), "assumed SXM: catalog name does not give the form factor"
    if acc == "V100":
        if prov == "azure" and re.match(r"Standard_NC\d+r?s_v3", inst):
            return "v100-pcie-16gb", "Azure NCv3 = V100 PCIe 16GB"
        if prov in ("aws", "gcp", "lambda", "oci"):
            return "v100-sxm2-16gb", "provider shape (p3/GCP V100/Lambda 8x/OCI GPU3) uses SXM2"
        return "v100-sxm2-16gb", "assumed SXM2: catalog name does not give the form factor"
    if acc == "V100-32GB":
        if prov in ("aws", "azure"):
            return "v100-sxm2-32gb", "p3dn.24xlarge / ND40rs_v2 use SXM2 32GB"
        return "v100-sxm2-32gb", "assumed SXM2: catalog name does not give the form factor"
    return None, ""


TPU = re.compile(r"tpu-(v4|v5litepod|v5p|v6e)-(\d+)$")
TPU_IDS = {"v4": ("tpu-v4", 2), "v5litepod": ("tpu-v5e", 1), "v5p": ("tpu-v5p", 2), "v6e": ("tpu-v6e", 1)}


def _source_url(src: str) -> str:
    repo, rest = src.split(":", 1)
    path, commit = rest.split("@")
    return f"https://github.com/{repo}/blob/{commit}/{path}"


def read_offerings(path: Path) -> list[dict]:
    """The aggregated SkyPilot snapshot (shared/data/cloud-offerings.csv, or refresh_prices.py's own)."""
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def build_prices(offerings: list[dict]) -> tuple[list[dict], dict[str, int]]:
    """prices.csv rows from offering rows (cloud-offerings.csv columns), and what was dropped and why."""
    out, dropped = [], {}
    for r in offerings:
        acc, prov, inst = r["accelerator"], r["provider"], r["instance_type"]
        count = int(r["accelerator_count"])
        notes, basis = [], "catalog accelerator name"
        includes_host = "true"
        if prov == "mithril":
            dropped["mithril placeholder prices ($1.00/GPU-h flat, spot = on-demand)"] = dropped.get(
                "mithril placeholder prices ($1.00/GPU-h flat, spot = on-demand)", 0) + 1
            continue
        gid = DIRECT.get(acc)
        m = TPU.match(acc)
        if acc == "A800":
            gid = None   # Cudo's A800 is the PCIe card; we only carry the A800 SXM
        elif m:
            gid, div = TPU_IDS[m.group(1)]
            count = int(m.group(2)) // div
            basis = f"TPU slice {acc}: {count} chips"
        elif gid is None and acc in ("RTX3060", "RTX4060", "RTX4070"):
            gid, basis = _map_consumer(r)
        elif gid is None:
            gid, basis = _map_ambiguous(r)
        if gid is None:
            key = f"no catalog id for '{acc}'"
            dropped[key] = dropped.get(key, 0) + 1
            continue
        od = r["price_usd_per_hour_on_demand"].strip()
        odm = r["price_usd_per_hour_on_demand_median"].strip()
        spot = r["price_usd_per_hour_spot_min"].strip()
        if spot and float(spot) <= 0:
            spot = ""
        if prov == "azure" and inst == "Standard_ND96isr_H100_v5" and count == 12:
            count = 8
            notes.append("catalog lists 12 GPUs; Azure documents 8 H100 per ND96isr_H100_v5 (corrected)")
        if prov == "azure" and "H100_v5" in inst and spot == od:
            spot = ""
            notes.append("catalog spot equals on-demand (implausible); spot dropped")
        if spot and od and float(spot) > float(od):
            od, spot = spot, od
            notes.append("catalog on-demand and spot look swapped (spot > on-demand); swapped back")
        if inst.startswith("(GPU only"):
            includes_host = "false"
            notes.append("GPU-only price: an N1 host VM must be added")
        if not od and not spot:
            dropped["no price at all"] = dropped.get("no price at all", 0) + 1
            continue
        out.append(dict(
            provider=prov, instance_type=inst, gpu_id=gid, gpus_per_instance=count,
            usd_per_hour_on_demand=od, usd_per_hour_on_demand_median=odm, usd_per_hour_spot=spot,
            region=r["example_region"], regions_count=r["regions_count"], includes_host=includes_host,
            catalog_accelerator=acc, mapping_basis=basis, source_url=_source_url(r["source"]),
            retrieved=r["retrieved_on"], notes="; ".join(notes),
        ))
    return out, dropped


def main(argv: list[str] | None = None) -> None:
    """Rebuild gpus.csv and prices.csv from the research sheets; print the diff; write with --write.
    (scripts/refresh_gpus.py and scripts/refresh_prices.py do one file each.)"""
    from _csvdiff import render, report
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--out", type=Path, default=OUT, help="folder holding gpus.csv and prices.csv")
    ap.add_argument("--write", action="store_true", help="rewrite the CSVs (default: show the diff only)")
    args = ap.parse_args(argv)
    gpus = build_gpus(args.shared)
    print(report(args.out / "gpus.csv", render(GPU_COLUMNS, gpus), ("id",), write=args.write))
    prices, dropped = build_prices(read_offerings(args.shared / "cloud-offerings.csv"))
    print(report(args.out / "prices.csv", render(PRICE_COLUMNS, prices), PRICE_KEY, write=args.write))
    print(f"gpus.csv: {len(gpus)} rows; prices.csv: {len(prices)} rows from "
          f"{len({p['provider'] for p in prices})} providers; dropped {sum(dropped.values())}:")
    for why, n in sorted(dropped.items(), key=lambda kv: -kv[1]):
        print(f"  {n:4d}  {why}")


if __name__ == "__main__":
    main()
