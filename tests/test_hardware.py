"""Hardware catalog: data integrity, lookup rules, rates, prices, topology, user overrides."""
from __future__ import annotations

import csv
import json
import re

import pytest

from gpuplan.errors import AmbiguousNameError, InputError, UnknownNameError, UnsupportedError
from gpuplan.hardware import (default_network_for, default_node_for, get_gpu, get_network, get_node, list_gpus,
                              list_networks, list_nodes, normalize, offerings, use_user_catalog)
from gpuplan.hardware import gpus as gpus_mod
from gpuplan.hardware import topology
from gpuplan.hardware._csv import data_path
from gpuplan.units import GiB, MiB

CSVS = ["gpus.csv", "prices.csv", "nodes.csv", "networks.csv", "software.csv"]


pytestmark = pytest.mark.usefixtures("builtin_catalog")   # conftest.py


def _rows(name):
    with open(data_path(name), newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


# ----------------------------------------------------------------------------- data integrity

@pytest.mark.parametrize("name", CSVS)
def test_every_row_has_source_and_date(name):
    rows = _rows(name)
    assert rows
    for i, row in enumerate(rows, start=2):
        assert row["source_url"].startswith("https://"), f"{name} row {i}: source_url {row['source_url']!r}"
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", row["retrieved"]), f"{name} row {i}: retrieved"


def test_at_least_50_gpus_with_unique_kebab_ids():
    specs = list_gpus()
    assert len(specs) >= 50
    ids = [s.id for s in specs]
    assert len(ids) == len(set(ids))
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", i) for i in ids)
    for required in ["h100-sxm", "h100-pcie", "h100-nvl", "h200-sxm", "a100-sxm-80gb", "a100-sxm-40gb",
                     "a100-pcie-80gb", "rtx-4090", "rtx-3090", "l40s", "mi300x", "gaudi3", "tpu-v5p", "m2-ultra"]:
        assert get_gpu(required).id == required


def test_catalog_covers_every_family_and_segment():
    assert {s.family for s in list_gpus()} == set(gpus_mod.FAMILIES)
    assert {s.segment for s in list_gpus()} == set(gpus_mod.SEGMENTS)


def test_aliases_never_collide_across_gpus():
    owner = {}
    for spec in list_gpus():
        for name in (spec.id, spec.name, *spec.aliases):
            key = normalize(name)
            assert owner.setdefault(key, spec.id) == spec.id, f"{name!r} used by {owner[key]} and {spec.id}"


def test_every_alias_resolves_to_its_gpu():
    for spec in list_gpus():
        for alias in spec.aliases:
            assert get_gpu(alias).id == spec.id


def test_usable_memory_within_physical_capacity():
    # Vendors' "GB" for HBM/GDDR is binary: an "80 GB" H100 has 80 GiB of which NVML reports 81559 MiB.
    # So usable <= memory_gb GiB (not GB); B200/GB200 quote usable GB (physical 192), still within.
    for spec in list_gpus():
        capacity = spec.memory_bytes / 1e9 * GiB
        assert spec.usable_memory_bytes <= capacity, spec.id
        assert spec.usable_memory_bytes >= 0.5 * capacity, spec.id


def test_known_usable_memory_values():
    expected_mib = {"h100-sxm": 81559, "h200-sxm": 143771, "a100-sxm-80gb": 81920, "a100-sxm-40gb": 40960,
                    "rtx-4090": 24564, "rtx-3090": 24576, "l40s": 46068, "l4": 23034, "t4": 15360, "a10g": 23028,
                    "mi300x": 196592, "b200": 183359}
    for gid, mib in expected_mib.items():
        assert get_gpu(gid).usable_memory_bytes == mib * MiB, gid


def test_peak_rates_are_sane():
    for spec in list_gpus():
        rates = spec.peak_flops_per_s
        assert rates
        if "bf16" in rates and "fp8" in rates and spec.family != "tpu":
            assert rates["fp8"] >= rates["bf16"], spec.id
        if "fp16_fp32acc" in rates:
            assert rates["fp16_fp32acc"] <= rates["fp16"], spec.id
        assert spec.mem_bandwidth_bytes_per_s > 5e10, spec.id   # slowest row: Jetson Orin Nano, 68 GB/s


def test_no_fp8_before_ada_hopper_and_no_fp4_before_blackwell():
    for spec in list_gpus():
        if spec.family in ("volta", "turing", "ampere", "cdna2"):
            assert "fp8" not in spec.peak_flops_per_s, spec.id
        if spec.family not in ("blackwell", "cdna4"):
            assert "fp4" not in spec.peak_flops_per_s, spec.id
    assert "bf16" not in get_gpu("v100-sxm2-32gb").peak_flops_per_s
    assert "bf16" not in get_gpu("t4").peak_flops_per_s


# ----------------------------------------------------------------------------- lookup

def test_h200_and_h20_are_never_confused():
    assert get_gpu("H20").id == "h20"
    assert get_gpu("h200-sxm").id == "h200-sxm"
    with pytest.raises(AmbiguousNameError) as err:
        get_gpu("H200")
    assert "h20" not in err.value.matches
    assert set(err.value.matches) == {"h200-sxm", "h200-nvl"}


def test_h100_is_ambiguous_with_candidates():
    with pytest.raises(AmbiguousNameError) as err:
        get_gpu("H100")
    assert set(err.value.matches) == {"h100-sxm", "h100-pcie", "h100-nvl", "h100-sxm-64gb", "h100-sxm-94gb",
                                      "h100-sxm-96gb", "h100-sxm-96gb-500w"}
    assert "h100-sxm" in str(err.value)


def test_a100_memory_size_alone_is_ambiguous():
    with pytest.raises(AmbiguousNameError) as err:
        get_gpu("A100 80GB")
    assert set(err.value.matches) == {"a100-sxm-80gb", "a100-pcie-80gb"}


@pytest.mark.parametrize("name", ["H100 SXM", "h100_sxm", "NVIDIA H100-SXM5", "  h100 sxm  ", "H100 80GB HBM3"])
def test_normalised_names_resolve(name):
    assert get_gpu(name).id == "h100-sxm"


def test_unknown_name_suggests_close_matches_without_guessing():
    with pytest.raises(UnknownNameError) as err:
        get_gpu("RTX 4909")
    assert "rtx-4090" in err.value.matches
    with pytest.raises(UnknownNameError):
        get_gpu("4090")           # substring of an alias, never a match


def test_list_gpus_filter():
    amd = list_gpus("amd")
    assert amd and all(s.vendor == "AMD" for s in amd)
    assert {s.id for s in list_gpus("hopper")} >= {"h100-sxm", "h200-sxm", "gh200"}


# ----------------------------------------------------------------------------- rates

def test_geforce_training_rate_is_half_the_headline_fp16():
    for spec in list_gpus("geforce"):
        headline = spec.peak_flops_per_s["fp16"]
        assert spec.matmul_flops_per_s("fp16") == pytest.approx(headline / 2, rel=0.01), spec.id
        assert spec.matmul_flops_per_s("bf16") == pytest.approx(headline / 2, rel=0.01), spec.id


def test_datacenter_fp16_runs_at_full_rate():
    h100 = get_gpu("h100-sxm")
    assert h100.matmul_flops_per_s("fp16") == h100.peak_flops_per_s["fp16"] == pytest.approx(989.4e12)


def test_fp32_uses_tf32_when_present():
    a100 = get_gpu("a100-sxm-80gb")
    assert a100.matmul_flops_per_s("fp32") == pytest.approx(156e12)
    assert a100.matmul_flops_per_s("fp32", allow_tf32=False) == pytest.approx(19.5e12)
    assert get_gpu("v100-sxm2-16gb").matmul_flops_per_s("fp32") == pytest.approx(15.7e12)


def test_unsupported_format_raises_with_alternatives():
    with pytest.raises(UnsupportedError) as err:
        get_gpu("a100-sxm-80gb").matmul_flops_per_s("fp8")
    text = str(err.value)
    assert "a100-sxm-80gb" in text and "fp8" in text and "bf16" in text
    with pytest.raises(UnsupportedError):
        get_gpu("t4").matmul_flops_per_s("bf16")
    with pytest.raises(UnknownNameError):
        get_gpu("h100-sxm").matmul_flops_per_s("fp7")


def test_scale_up_is_unidirectional_and_p2p_flags():
    assert get_gpu("h100-sxm").scale_up_bandwidth_bytes_per_s == pytest.approx(450e9)
    assert get_gpu("a100-sxm-80gb").scale_up_bandwidth_bytes_per_s == pytest.approx(300e9)
    assert get_gpu("gb200").scale_up_max_gpus == 72
    assert get_gpu("h100-sxm").scale_up_max_gpus == 8
    for gid in ("rtx-4090", "rtx-4080", "rtx-5090", "rtx-5080"):
        assert get_gpu(gid).p2p is False
        assert get_gpu(gid).scale_up == "none"
    assert get_gpu("rtx-3090").scale_up == "nvlink-bridge"
    assert get_gpu("l40s").pcie_bandwidth_bytes_per_s == pytest.approx(32e9)


def test_to_dict_is_json_ready():
    d = get_gpu("h100-sxm").to_dict()
    json.dumps(d)
    assert isinstance(d["usable_memory_bytes"], int)
    assert d["usable_memory_gib"] == pytest.approx(81559 / 1024, abs=1e-3)
    assert isinstance(d["peak_flops_per_s"]["bf16"], float)


def test_spec_is_frozen_and_hashable():
    spec = get_gpu("l4")
    with pytest.raises(Exception):
        spec.id = "x"
    with pytest.raises(TypeError):
        spec.peak_flops_per_s["bf16"] = 1.0
    assert {spec: 1}[get_gpu("L4")] == 1


# ----------------------------------------------------------------------------- prices

def test_prices_positive_and_ids_exist():
    rows = offerings()
    assert len(rows) > 500
    ids = {s.id for s in list_gpus()}
    for o in rows:
        assert o.gpu_id in ids
        assert o.gpus_per_instance >= 1
        assert o.usd_per_hour_on_demand is not None or o.usd_per_hour_spot is not None
        for p in (o.usd_per_hour_on_demand, o.usd_per_hour_spot):
            assert p is None or p > 0
        if o.usd_per_hour_on_demand and o.usd_per_hour_spot:
            assert o.usd_per_hour_spot <= o.usd_per_hour_on_demand * 1.0001, (o.provider, o.instance_type)


def test_offerings_are_whole_instances_and_sorted():
    p5 = [o for o in offerings("h100-sxm", providers=["aws"]) if o.instance_type == "p5.48xlarge"]
    assert len(p5) == 1 and p5[0].gpus_per_instance == 8
    assert p5[0].usd_per_gpu_hour == pytest.approx(p5[0].usd_per_hour_on_demand / 8)
    rows = offerings("l40s")
    per_gpu = [o.usd_per_gpu_hour for o in rows if o.usd_per_gpu_hour is not None]
    assert per_gpu == sorted(per_gpu)


def test_offerings_accept_aliases_and_reject_unknown_provider():
    assert offerings("H100 SXM") == offerings("h100-sxm")
    with pytest.raises(UnknownNameError):
        offerings(providers=["awz"])
    with pytest.raises(AmbiguousNameError):
        offerings("H100")


def test_azure_h100_instance_count_corrected():
    nd = [o for o in offerings(providers=["azure"]) if o.instance_type == "Standard_ND96isr_H100_v5"]
    assert nd and nd[0].gpus_per_instance == 8


def test_tpu_slices_counted_in_chips():
    v5p8 = [o for o in offerings("tpu-v5p") if o.instance_type == "TPU VM" and o.catalog_accelerator == "tpu-v5p-8"]
    assert v5p8 and v5p8[0].gpus_per_instance == 4
    assert v5p8[0].usd_per_gpu_hour == pytest.approx(4.2, rel=0.01)


# ----------------------------------------------------------------------------- topology

def test_every_gpu_has_a_default_node_and_network():
    topology._check_references()
    for spec in list_gpus():
        node = default_node_for(spec)
        assert spec.id in node.gpu_ids
        assert default_network_for(spec).id == node.default_network


def test_node_and_network_values():
    hgx = get_node("hgx-h100-8")
    assert hgx.gpus_per_node == 8
    assert hgx.intra_bandwidth_for("h100-sxm") == pytest.approx(450e9)
    assert hgx.intra_bandwidth_for("h800-sxm") == pytest.approx(200e9)   # capped by the GPU
    assert get_node("gb200-nvl72").gpus_per_node == 72
    assert default_node_for("h100-sxm").id == "hgx-h100-8"
    assert get_network("ib-ndr-400").bandwidth_bytes_per_s_per_gpu() == pytest.approx(50e9)
    assert get_network("efa-3200").bandwidth_bytes_per_s_per_gpu(8) == pytest.approx(50e9)
    assert get_network("eth-100").bandwidth_bytes_per_s_per_gpu(4) == pytest.approx(100e9 / 8 / 4)
    assert len(list_nodes()) >= 10 and len(list_networks()) >= 10
    with pytest.raises(UnknownNameError):
        get_node("hgx-h100-9")


# ----------------------------------------------------------------------------- user catalog

HEADER = ("id,name,aliases,vendor,family,segment,memory_gb,usable_memory_mib,mem_bandwidth_gbps,bf16_tflops,"
          "fp16_tflops,scale_up,scale_up_gbps_bidir,scale_up_max_gpus,pcie_gen,pcie_lanes,source_url,retrieved\n")


def test_user_csv_adds_and_overrides(tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text(HEADER
                    + "my-card,My Card,MyCard 9000,ACME,ada,workstation,32,32000,1000,200,200,none,,1,4.0,16,"
                      "https://example.com/spec,2026-01-01\n"
                    + "h100-sxm,NVIDIA H100 SXM (derated),,NVIDIA,hopper,datacenter,80,81559,3350,700,700,nvswitch,"
                      "900,8,5.0,16,https://example.com/derate,2026-01-01\n")
    use_user_catalog(path)
    assert get_gpu("MyCard 9000").id == "my-card"
    assert get_gpu("h100-sxm").matmul_flops_per_s("bf16") == pytest.approx(700e12)
    assert default_node_for("my-card").gpus_per_node == 1
    use_user_catalog(None)
    assert get_gpu("h100-sxm").matmul_flops_per_s("bf16") == pytest.approx(989.4e12)
    with pytest.raises(UnknownNameError):
        get_gpu("my-card")


def test_user_csv_via_environment(tmp_path, monkeypatch):
    path = tmp_path / "env.csv"
    path.write_text(HEADER + "env-card,Env Card,,ACME,ampere,geforce,24,,900,70,140,none,,1,4.0,16,"
                             "https://example.com/e,2026-01-01\n")
    monkeypatch.setenv(gpus_mod.ENV_VAR, str(path))
    spec = get_gpu("env-card")
    assert spec.usable_memory_bytes == 24 * GiB   # memory_gb read as GiB when usable is not given
    assert spec.p2p is False                      # GeForce default


@pytest.mark.parametrize("line, column", [
    ("bad-card,Bad,,ACME,ada,workstation,twelve,,1000,200,200,none,,1,4.0,16,https://example.com,2026-01-01",
     "memory_gb"),
    ("bad-card,Bad,,ACME,adaa,workstation,12,,1000,200,200,none,,1,4.0,16,https://example.com,2026-01-01", "family"),
    ("bad-card,Bad,,ACME,ada,workstation,12,,1000,200,200,none,,1,4.0,16,,2026-01-01", "source_url"),
    ("bad-card,Bad,,ACME,ada,workstation,12,,1000,200,200,none,,1,4.0,16,https://example.com,Jan 2026", "retrieved"),
    ("Bad Card,Bad,,ACME,ada,workstation,12,,1000,200,200,none,,1,4.0,16,https://example.com,2026-01-01", "id"),
    ("bad-card,Bad,,ACME,ada,workstation,12,,1000,0,200,none,,1,4.0,16,https://example.com,2026-01-01",
     "bf16_tflops"),
])
def test_malformed_user_csv_names_file_row_column(tmp_path, line, column):
    path = tmp_path / "broken.csv"
    path.write_text(HEADER + line + "\n")
    with pytest.raises(InputError) as err:
        use_user_catalog(path)
    text = str(err.value)
    assert "broken.csv" in text and "row 2" in text and f"'{column}'" in text and "Fix:" in text
    assert get_gpu("h100-sxm").id == "h100-sxm"     # the failed load left the catalog usable


def test_user_csv_missing_column_and_alias_collision(tmp_path):
    path = tmp_path / "nohead.csv"
    path.write_text("id,name\nx,y\n")
    with pytest.raises(InputError, match="missing column"):
        use_user_catalog(path)
    clash = tmp_path / "clash.csv"
    clash.write_text(HEADER + "clash-card,Clash,H100 SXM,ACME,ada,workstation,12,,1000,200,200,none,,1,4.0,16,"
                              "https://example.com,2026-01-01\n")
    with pytest.raises(InputError, match="collides"):
        use_user_catalog(clash)
    with pytest.raises(InputError, match="cannot be read"):
        use_user_catalog(tmp_path / "absent.csv")
