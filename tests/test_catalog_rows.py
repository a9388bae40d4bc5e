"""The accelerator catalog as data: size, provenance and sanity of every row, spot checks of rows against
datasheet figures typed here by hand (each with its source), and the names users type for memory and
power variants (issue 15's catalog half; issue 13's power/memory variants)."""
from __future__ import annotations

import csv
import math
import re

import pytest

from gpuplan.errors import AmbiguousNameError, UnknownNameError
from gpuplan.hardware import get_gpu, list_gpus
from gpuplan.hardware._csv import data_path

TFLOPS = 1e12
GiB = 2 ** 30
# numeric columns of gpus.csv: every filled-in value must be a positive, finite number
NUMERIC = ("release_year", "memory_gb", "usable_memory_mib", "mem_bandwidth_gbps", "fp32_tflops", "tf32_tflops",
           "fp16_tflops", "bf16_tflops", "fp16_fp32acc_tflops", "fp8_tflops", "int8_tops", "fp4_tflops",
           "scale_up_gbps_bidir", "scale_up_max_gpus", "pcie_lanes", "host_link_gbps_unidir", "tdp_w",
           "launch_price_usd")


pytestmark = pytest.mark.usefixtures("builtin_catalog")   # conftest.py


def _rows():
    with open(data_path("gpus.csv"), newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_catalog_lists_at_least_90_accelerators():
    assert len(_rows()) >= 90
    assert len(list_gpus()) == len(_rows())


def test_every_row_is_sourced_and_dated():
    for row in _rows():
        assert re.fullmatch(r"https://\S+", row["source_url"]), row["id"]
        assert re.fullmatch(r"20\d\d-\d\d-\d\d", row["retrieved"]), row["id"]
        assert row["verification"].strip(), row["id"]          # how the figures were obtained


def test_every_number_is_positive_and_finite():
    for row in _rows():
        for col in NUMERIC:
            raw = row[col].strip()
            if raw:
                value = float(raw)
                assert math.isfinite(value) and value > 0, (row["id"], col, raw)


# Datasheet values typed by hand. Dense = the vendor's sparse figure / 2 where it prints only that.
SPOT = [
    # NVIDIA GH200 page: 144 GB HBM3e, 4.9 TB/s; BF16 1,979 TFLOPS (sparse)
    ("gh200-144gb", dict(memory_bytes=144e9, mem_bandwidth_bytes_per_s=4.9e12), dict(bf16=989.4)),
    # NVIDIA H100 PCIe product brief / datasheet: 2,000 GB/s; BF16 1,513, FP8 3,026, TF32 756 (sparse); 350 W
    ("h100-pcie", dict(mem_bandwidth_bytes_per_s=2.0e12, tdp_w=350), dict(bf16=756.5, fp8=1513, tf32=378)),
    # Cloud TPU TPU7x page: BF16 2307, FP8 4614 TFLOPs per chip; 192 GiB HBM; 9216 chips per pod
    ("tpu-v7", dict(usable_memory_bytes=192 * GiB, scale_up_max_gpus=9216), dict(bf16=2307, fp8=4614)),
    # TSUBAME 4.0 spec sheet: H100 SXM5 94GB HBM2e, 2,395.87 GB/s (2.4 TB/s), FP16 989.4 TFLOPS
    ("h100-sxm-94gb", dict(memory_bytes=94e9, mem_bandwidth_bytes_per_s=2.4e12), dict(fp16_fp32acc=989.4)),
    # AMD MI300A spec page: 128 GB HBM3, 5.3 TB/s; FP16 980.6, FP8 1961.2, TF32 490.3 TFLOPS (dense)
    ("mi300a", dict(memory_bytes=128e9, mem_bandwidth_bytes_per_s=5.3e12), dict(bf16=980.6, fp8=1961.2, tf32=490.3)),
    # NVIDIA GB300 NVL72 page: FP4 1,080 PF dense per 72 GPUs; 1,400 W max per GPU
    ("gb300", dict(tdp_w=1400), dict(fp4=15000)),
    # NVIDIA RTX PRO 6000 Blackwell Max-Q page: 300 W, FP32 110 TFLOPS, 3,511 AI TOPS (FP4 sparse)
    ("rtx-pro-6000-max-q", dict(tdp_w=300, memory_bytes=96e9), dict(fp32=110, fp4=1755.5)),
]


@pytest.mark.parametrize("gid, fields, tflops", SPOT, ids=[s[0] for s in SPOT])
def test_rows_match_their_datasheets(gid, fields, tflops):
    spec = get_gpu(gid)
    for name, expected in fields.items():
        assert getattr(spec, name) == pytest.approx(expected, rel=1e-3), (gid, name)
    for key, expected in tflops.items():
        assert spec.peak_flops_per_s[key] == pytest.approx(expected * TFLOPS, rel=2e-3), (gid, key)


def test_power_limited_part_keeps_its_peak_and_carries_its_tdp():
    # no datasheet prints a different peak for a power-limited board: the boost-clock peak is the
    # H100's (989.4 TF BF16 dense) and the board limit is what differs (500 vs 700 W)
    capped, full = get_gpu("h100-sxm-96gb-500w"), get_gpu("h100-sxm-96gb")
    assert capped.peak_flops_per_s["bf16"] == full.peak_flops_per_s["bf16"] == pytest.approx(989.4 * TFLOPS)
    assert (capped.tdp_w, full.tdp_w) == (500, 700)


def test_clock_variants_are_their_own_datasheet_peaks():
    # RTX PRO 6000: 125 TF FP32 at 600 W vs the Max-Q's 110 TF at 300 W (NVIDIA product pages)
    assert get_gpu("rtx-pro-6000").peak_flops_per_s["fp32"] == pytest.approx(125 * TFLOPS)
    assert get_gpu("rtx-pro-6000-max-q").peak_flops_per_s["fp32"] == pytest.approx(110 * TFLOPS)
    # MI350X (1000 W) vs MI355X (1400 W): FP16 2.3 vs 2.5 PF dense (AMD spec pages)
    assert get_gpu("mi350x").peak_flops_per_s["bf16"] == pytest.approx(2307.2 * TFLOPS)
    assert get_gpu("mi355x").peak_flops_per_s["bf16"] == pytest.approx(2516.6 * TFLOPS)
    # Orin NX 16GB: GPU clock 918 MHz, 1173 MHz in the JetPack 6.2 Super mode -> FP16 dense 8 SM x 2048 x clock
    assert get_gpu("jetson-orin-nx-16gb").peak_flops_per_s["fp16"] == pytest.approx(8 * 2048 * 0.918e9, rel=2e-3)
    assert get_gpu("jetson-orin-nx-16gb-super").peak_flops_per_s["fp16"] == pytest.approx(8 * 2048 * 1.173e9, rel=2e-3)
    # Orin Nano 8GB: 625 MHz and 68 GB/s; Super mode 1020 MHz and 102 GB/s (NVIDIA Jetson Orin Nano Super announcement)
    nano, sup = get_gpu("jetson-orin-nano-8gb"), get_gpu("jetson-orin-nano-8gb-super")
    assert (nano.mem_bandwidth_bytes_per_s, sup.mem_bandwidth_bytes_per_s) == (68e9, 102e9)
    assert sup.peak_flops_per_s["fp16"] / nano.peak_flops_per_s["fp16"] == pytest.approx(1020 / 625, rel=2e-3)


# ----------------------------------------------------------------------------- names users type

@pytest.mark.parametrize("name, expected", [
    ("gh200-144gb", "gh200-144gb"), ("GH200 144GB", "gh200-144gb"), ("NVIDIA GH200 144GB HBM3e", "gh200-144gb"),
    ("GH200", "gh200"), ("gh200-96gb", "gh200"), ("NVIDIA GH200 480GB", "gh200"),
    ("h100-96gb", "h100-sxm-96gb"), ("H100 SXM5 96GB", "h100-sxm-96gb"), ("h100-94gb", "h100-sxm-94gb"),
    ("NVIDIA H100 SXM5 64GB", "h100-sxm-64gb"), ("h100-96gb-500w", "h100-sxm-96gb-500w"),
    ("jetson-agx-orin-64gb", "jetson-agx-orin-64gb"), ("Jetson AGX Orin 32GB", "jetson-agx-orin-32gb"),
    ("Jetson Thor", "jetson-agx-thor"), ("Ironwood", "tpu-v7"), ("TPU7x", "tpu-v7"),
    ("RTX 3060", "rtx-3060-12gb"), ("GeForce RTX 5060 Ti 16GB", "rtx-5060-ti-16gb"),
    ("RTX 4070 Ti SUPER", "rtx-4070-ti-super"), ("RTX 4070 Ti", "rtx-4070-ti"), ("RTX 4070", "rtx-4070"),
    ("RTX PRO 6000 Max-Q", "rtx-pro-6000-max-q"), ("RTX PRO 6000", "rtx-pro-6000"), ("M3 Ultra", "m3-ultra"),
    ("MI300A", "mi300a"), ("GB300", "gb300"),
])
def test_variant_names_resolve(name, expected):
    assert get_gpu(name).id == expected


@pytest.mark.parametrize("typo, suggested", [
    ("gh200-144", "gh200-144gb"), ("h100-sxm-96", "h100-sxm-96gb"), ("jetson-orin-agx-64gb", "jetson-agx-orin-64gb"),
    ("rtx 5060 ti", "rtx-5060-ti-16gb"), ("tpu-v7x-chip", "tpu-v7"), ("m4-ultra", "m3-ultra"),
])
def test_near_misses_are_refused_with_close_matches(typo, suggested):
    with pytest.raises(UnknownNameError) as err:
        get_gpu(typo)
    assert not isinstance(err.value, AmbiguousNameError)
    assert suggested in err.value.matches
    assert suggested in str(err.value)


@pytest.mark.parametrize("name, ids", [
    ("Orin NX", {"jetson-orin-nx-16gb", "jetson-orin-nx-16gb-super"}),      # clock mode decides the speed
    ("Jetson Orin Nano", {"jetson-orin-nano-8gb", "jetson-orin-nano-8gb-super"}),
    ("RTX 3080", {"rtx-3080-10gb", "rtx-3080-12gb", "rtx-3080-ti"}),
    ("Jetson AGX Orin", {"jetson-agx-orin-64gb", "jetson-agx-orin-32gb"}),
])
def test_names_that_drop_the_variant_are_ambiguous(name, ids):
    with pytest.raises(AmbiguousNameError) as err:
        get_gpu(name)
    assert ids <= set(err.value.matches)


def test_edge_modules_are_single_unified_memory_devices():
    for gid in ("jetson-agx-orin-64gb", "jetson-agx-orin-32gb", "jetson-orin-nx-16gb", "jetson-agx-thor"):
        spec = get_gpu(gid)
        assert spec.segment == "edge" and spec.scale_up_max_gpus == 1 and not spec.p2p
        # host link = the LPDDR5(X) bandwidth: CPU and GPU share one memory (module datasheets: 204.8/102.4/273 GB/s)
        assert spec.pcie_bandwidth_bytes_per_s == spec.mem_bandwidth_bytes_per_s
    assert get_gpu("jetson-agx-orin-64gb").mem_bandwidth_bytes_per_s == pytest.approx(204.8e9)
    assert get_gpu("jetson-agx-thor").mem_bandwidth_bytes_per_s == pytest.approx(273e9)


@pytest.mark.parametrize("reported, expected", [
    ("NVIDIA GH200 144GB HBM3e", "gh200-144gb"),      # driver names seen in public logs
    ("NVIDIA GH200 480GB", "gh200"),
    ("NVIDIA H100 SXM5 94GB", "h100-sxm-94gb"),
    ("NVIDIA GeForce RTX 3060", "rtx-3060-12gb"),
])
def test_driver_names_of_variants_map_to_their_rows(reported, expected):
    from gpuplan.local.detect import match_catalog
    assert match_catalog(reported)[0] == expected


def test_nvidia_tf32_runs_at_half_the_16_bit_training_rate():
    # Ampere and later: TF32 tensor rate = 1/2 of FP16/BF16 with FP32 accumulate (A100 156/312, H100 494.7/989.4,
    # RTX 4090 82.6/165.2, RTX 5090 104.8/209.5 in the NVIDIA datasheets and whitepapers). B100 as printed is
    # 900/1750 (2.9 % off), hence the 5 % band; a wrong derivation is off by 2x.
    checked = 0
    for spec in list_gpus():
        rates = spec.peak_flops_per_s
        if spec.vendor == "NVIDIA" and spec.family in ("ampere", "ada", "hopper", "blackwell") and "tf32" in rates:
            assert rates["tf32"] == pytest.approx(rates["fp16_fp32acc"] / 2, rel=0.05), spec.id
            checked += 1
    assert checked >= 60
