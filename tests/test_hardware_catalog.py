"""Hardware catalog: lookup edge cases, usable vs marketed memory, price quotes, node shapes and
networks, software Problem fields, and the user CSV override. Expected values are copied by hand
from the rows of src/gpuplan/hardware/data/*.csv (cited next to each number)."""
from __future__ import annotations

import pytest

from gpuplan.errors import AmbiguousNameError, InputError, UnknownNameError
from gpuplan.hardware import (default_network_for, default_node_for, get_gpu, get_network, get_node, list_gpus,
                              nodes_for, normalize, offerings, providers, use_user_catalog)
from gpuplan.hardware import gpus as gpus_mod
from gpuplan.hardware.software import check, support_for

MiB = 2 ** 20
GiB = 2 ** 30


pytestmark = pytest.mark.usefixtures("builtin_catalog")   # conftest.py


# ----------------------------------------------------------------------------- lookup

@pytest.mark.parametrize("name", ["H20", "h20", "NVIDIA H20", "nvidia_h20", "  H-20 "])
def test_h20_spellings_resolve_to_h20_only(name):
    assert get_gpu(name).id == "h20"


@pytest.mark.parametrize("name, expected", [
    ("GH200", "gh200"),            # contains "H200" but is its own chip
    ("H200 SXM", "h200-sxm"),
    ("H200 NVL", "h200-nvl"),
    ("RTX 4080", "rtx-4080"),      # exact alias wins over the longer "RTX 4080 SUPER"
    ("RTX 3090", "rtx-3090"),      # not the Ti
    ("RTX 4080 SUPER", "rtx-4080-super"),
    ("H100 NVL 94GB", "h100-nvl"),
    ("NVIDIA A100 80GB SXM4", "a100-sxm-80gb"),   # full catalog name
    ("Tesla V100-SXM2-32GB", "v100-sxm2-32gb"),
    ("Trillium", "tpu-v6e"),
])
def test_exact_alias_is_preferred_to_any_prefix(name, expected):
    assert get_gpu(name).id == expected


def test_substring_never_matches():
    # "H2" is the start of h20/h200 ids only as a substring of one token: not a match at all
    with pytest.raises(UnknownNameError) as err:
        get_gpu("H2")
    assert not isinstance(err.value, AmbiguousNameError)
    with pytest.raises(UnknownNameError):
        get_gpu("B20")               # never silently b200
    with pytest.raises(UnknownNameError):
        get_gpu("200")


@pytest.mark.parametrize("name, ids", [
    ("A100", {"a100-pcie-40gb", "a100-sxm-40gb", "a100-pcie-80gb", "a100-sxm-80gb"}),
    ("A100 40GB", {"a100-pcie-40gb", "a100-sxm-40gb"}),
    ("V100", {"v100-sxm2-16gb", "v100-sxm2-32gb", "v100-pcie-16gb", "v100-pcie-32gb"}),
    ("NVIDIA H200", {"h200-sxm", "h200-nvl"}),
])
def test_ambiguous_names_list_every_candidate(name, ids):
    with pytest.raises(AmbiguousNameError) as err:
        get_gpu(name)
    assert set(err.value.matches) == ids
    assert str(len(ids)) in str(err.value)
    for gid in ids:
        assert gid in str(err.value)


def test_ambiguous_h200_never_lists_h20_or_gh200():
    with pytest.raises(AmbiguousNameError) as err:
        get_gpu("h200")
    assert "h20" not in err.value.matches and "gh200" not in err.value.matches


def test_unknown_name_has_close_matches_and_fix():
    with pytest.raises(UnknownNameError) as err:
        get_gpu("H100 SXMM")
    assert err.value.matches, "a typo must come with suggestions"
    assert "h100-sxm" in err.value.matches
    assert "gpuplan gpus" in str(err.value)


def test_normalize_drops_vendor_word_and_separators():
    assert normalize("NVIDIA H100-SXM5 80GB") == "h100sxm580gb"
    assert normalize("AMD Instinct MI300X") == "instinctmi300x"
    assert normalize("nvidia") == "nvidia"          # a lone vendor word is kept


def test_listing_uses_substrings_but_lookup_does_not():
    ids = {s.id for s in list_gpus("h20")}
    assert {"h20", "h200-sxm", "h200-nvl", "gh200"} <= ids
    assert get_gpu("h20").id == "h20"
    assert {s.id for s in list_gpus("cdna3")} >= {"mi300x", "mi325x"}


# ----------------------------------------------------------------------------- capacity (DESIGN §4)

@pytest.mark.parametrize("gid, memory_gb, usable_mib", [
    ("h100-sxm", 80, 81559),       # gpus.csv h100-sxm: memory_gb 80, usable_memory_mib 81559
    ("h200-sxm", 141, 143771),
    ("h20", 96, 97871),
    ("rtx-4090", 24, 24564),
    ("t4", 16, 15360),
    ("m2-ultra", 192, 147456),     # unified memory: the GPU may use only part of it
    ("mi300x", 192, 196592),
])
def test_usable_memory_is_stored_beside_marketed_memory(gid, memory_gb, usable_mib):
    spec = get_gpu(gid)
    assert spec.memory_bytes == memory_gb * 10 ** 9
    assert spec.usable_memory_bytes == usable_mib * MiB
    assert spec.usable_memory_gib == pytest.approx(usable_mib / 1024)
    d = spec.to_dict()
    assert d["memory_gb"] == pytest.approx(memory_gb)
    assert d["usable_memory_bytes"] == usable_mib * MiB


def test_h100_usable_exceeds_80e9_but_not_80_gib():
    spec = get_gpu("h100-sxm")
    assert 80 * 10 ** 9 < spec.usable_memory_bytes < 80 * GiB
    assert get_gpu("t4").usable_memory_gib == pytest.approx(15.0)


def test_h20_and_h200_specs_differ_where_the_csv_says():
    h20, h200 = get_gpu("h20"), get_gpu("h200-sxm")
    assert h20.mem_bandwidth_bytes_per_s == pytest.approx(4000e9)
    assert h200.mem_bandwidth_bytes_per_s == pytest.approx(4800e9)
    assert h20.matmul_flops_per_s("bf16") == pytest.approx(148e12)
    assert h200.matmul_flops_per_s("bf16") == pytest.approx(989.4e12)
    assert h20.matmul_flops_per_s("fp8") == pytest.approx(296e12)
    assert h20.scale_up_bandwidth_bytes_per_s == pytest.approx(450e9)     # 900 bidir / 2
    assert h20.pcie_bandwidth_bytes_per_s == pytest.approx(64e9)          # PCIe 5.0 x16
    assert h20.tdp_w == 400 and h200.tdp_w == 700
    assert get_gpu("rtx-4090").scale_up_bandwidth_bytes_per_s == pytest.approx(32e9)   # 64 bidir / 2


# ----------------------------------------------------------------------------- cloud prices

def test_runpod_h100_rows_and_per_gpu_prices():
    rows = {o.instance_type: o for o in offerings("H100 SXM", providers=["runpod"])}
    # prices.csv: runpod 1x 2.99 (spot 2.69), 8x 23.92 (spot 21.52)
    one, eight = rows["1x_H100-SXM_SECURE"], rows["8x_H100-SXM_SECURE"]
    assert one.usd_per_hour_on_demand == pytest.approx(2.99) and one.usd_per_hour_spot == pytest.approx(2.69)
    assert eight.gpus_per_instance == 8
    assert eight.usd_per_gpu_hour == pytest.approx(23.92 / 8)
    assert eight.spot_usd_per_gpu_hour == pytest.approx(21.52 / 8)


def test_spot_price_is_none_when_the_row_has_none():
    lam = [o for o in offerings("h100-sxm", providers=["lambda"]) if o.instance_type == "gpu_8x_h100_sxm5"]
    assert lam and lam[0].usd_per_hour_spot is None and lam[0].spot_usd_per_gpu_hour is None
    assert lam[0].usd_per_gpu_hour == pytest.approx(31.92 / 8)


def test_spot_only_row_sorts_last():
    # prices.csv: aws p5e.48xlarge h200-sxm has no on-demand price, spot 10.0644
    rows = offerings("h200-sxm", providers=["aws"])
    assert rows[-1].instance_type == "p5e.48xlarge"
    assert rows[-1].usd_per_gpu_hour is None
    assert rows[-1].spot_usd_per_gpu_hour == pytest.approx(10.0644 / 8)


def test_provider_filter_is_case_and_space_insensitive():
    got = offerings("l4", providers=[" AWS ", "Gcp"])
    assert got and {o.provider for o in got} == {"aws", "gcp"}
    per_gpu = [o.usd_per_gpu_hour for o in got]
    assert per_gpu == sorted(per_gpu)
    # cheapest L4 per GPU across aws+gcp: gcp g2-standard-96 at 7.97712 / 8 = 0.99714
    assert got[0].usd_per_gpu_hour == pytest.approx(min(0.70452, 0.8048, 7.97712 / 8))


def test_unknown_provider_error_suggests_the_right_one():
    with pytest.raises(UnknownNameError) as err:
        offerings("h100-sxm", providers=["lamda"])
    assert "lambda" in err.value.matches
    assert "lambda" in providers() and providers() == sorted(providers())


def test_offerings_reject_ambiguous_gpu_name():
    with pytest.raises(AmbiguousNameError):
        offerings("H100")


# ----------------------------------------------------------------------------- nodes and networks

def test_h200_and_h20_nodes():
    # nodes.csv: dgx-h200-8 takes h200-sxm; hgx-h100-8 takes h100-sxm;h800-sxm;h20
    assert default_node_for("h200-sxm").id == "dgx-h200-8"
    assert default_node_for("h20").id == "hgx-h100-8"
    assert default_network_for("h200-sxm").id == "ib-ndr-400"
    assert get_node("hgx-h100-8").intra_bandwidth_for("h20") == pytest.approx(450e9)
    assert [n.id for n in nodes_for("h20")] == ["hgx-h100-8"]


def test_a100_node_and_network():
    node = default_node_for("a100-sxm-80gb")
    assert node.id == "hgx-a100-8" and node.intra_link == "nvswitch"
    assert node.intra_bandwidth_bytes_per_s == pytest.approx(300e9)      # 600 bidir / 2
    assert node.intra_bandwidth_for("a800-sxm-80gb") == pytest.approx(200e9)  # GPU cap: 400 bidir / 2
    net = default_network_for("a100-sxm-80gb")
    assert net.id == "ib-hdr-200"
    assert net.bandwidth_bytes_per_s_per_gpu() == pytest.approx(200e9 / 8)


@pytest.mark.parametrize("nid, gpus, per_gpu_bytes, latency_s", [
    ("ib-xdr-800", 8, 800e9 / 8, 2e-6),
    ("roce-200", 8, 200e9 / 8, 3e-6),
    ("eth-25", 8, 25e9 / 8 / 8, 30e-6),        # per node, shared
    ("eth-10", 2, 10e9 / 8 / 2, 50e-6),
    ("efa-400", 8, 50e9 / 8, 15e-6),           # per-GPU column wins over per-node
    ("gcp-tcpxo", 8, 200e9 / 8, 15e-6),
])
def test_network_rates_and_latency(nid, gpus, per_gpu_bytes, latency_s):
    net = get_network(nid)
    assert net.bandwidth_bytes_per_s_per_gpu(gpus) == pytest.approx(per_gpu_bytes)
    assert net.latency_s == pytest.approx(latency_s)


def test_node_ids_are_case_insensitive_and_unknown_network_suggests():
    assert get_node(" HGX-B200-8 ").gpus_per_node == 8
    assert get_node("hgx-b200-8").intra_bandwidth_bytes_per_s == pytest.approx(900e9)
    with pytest.raises(UnknownNameError) as err:
        get_network("ib-ndr-40")
    assert "ib-ndr-400" in err.value.matches


# ----------------------------------------------------------------------------- software Problems

def test_engine_error_fields():
    (p,) = check("mi300x", engine="tensorrt-llm")
    assert (p.severity, p.topic, p.subject, p.level) == ("error", "engine", "trtllm", "no")
    assert not p.limited and p.alternative
    assert set(p.to_dict()) == {"severity", "message", "alternative"}


def test_limited_engine_is_a_warning():
    # software.csv rtx-5090: vllm=yes, sglang=limited, trtllm=limited
    assert check("rtx-5090", engine="vllm") == []
    (p,) = check("rtx-5090", engine="sglang")
    assert (p.severity, p.topic, p.subject, p.level) == ("warning", "engine", "sglang", "limited")
    assert p.limited


def test_emulated_and_missing_formats():
    (p,) = check("t4", dtype="bfloat16")
    assert (p.severity, p.topic, p.subject, p.level) == ("warning", "format", "bf16", "emulated")
    (q,) = check("v100-sxm2-16gb", dtype="fp8")      # neither native (fp32;fp16) nor emulated
    assert (q.severity, q.subject, q.level) == ("error", "fp8", "no")
    assert "fp32, fp16" in q.alternative


def test_attention_problem_and_clean_combination():
    (p,) = check("rtx-4090", attention="flash_attn3")
    assert (p.severity, p.topic, p.subject, p.level) == ("error", "attention", "flash_attn3", "no")
    assert p.alternative == "use flash_attn2"
    assert check("h100-sxm", engine="vllm", dtype="fp8", attention="sdpa") == []
    sup = support_for("rtx-5080")
    assert sup.cuda_cc == "12.0" and sup.attention["flash_attn2"] == "limited"
    assert sup.format_status("fp4") == "native" and sup.format_status("int4") == "emulated"


def test_three_problems_in_one_check():
    kinds = [(p.topic, p.subject) for p in check("t4", engine="trtllm", dtype="bf16", attention="flash_attn2")]
    assert kinds == [("engine", "trtllm"), ("format", "bf16"), ("attention", "flash_attn2")]


# ----------------------------------------------------------------------------- user CSV

HEADER = ("id,name,aliases,vendor,family,segment,memory_gb,usable_memory_mib,mem_bandwidth_gbps,bf16_tflops,"
          "scale_up,scale_up_gbps_bidir,scale_up_max_gpus,pcie_gen,pcie_lanes,tdp_w,source_url,retrieved\n")
URL = "https://example.com/spec,2026-01-01"


def test_env_csv_adds_gpu_and_exact_h20_still_wins(tmp_path, monkeypatch):
    path = tmp_path / "mine.csv"
    path.write_text(HEADER + f"h20-pro,H20 Pro,H20 Pro 141GB,ACME,hopper,datacenter,141,143000,4800,150,"
                             f"nvswitch,900,8,5.0,16,400,{URL}\n")
    monkeypatch.setenv(gpus_mod.ENV_VAR, str(path))
    assert get_gpu("H20 Pro 141GB").id == "h20-pro"
    assert get_gpu("H20").id == "h20"            # exact id beats the new prefix match
    spec = get_gpu("h20-pro")
    assert spec.usable_memory_bytes == 143000 * MiB and spec.memory_bytes == 141 * 10 ** 9
    assert spec.scale_up_bandwidth_bytes_per_s == pytest.approx(450e9)
    assert default_node_for("h20-pro").gpus_per_node == 8     # derived from scale_up_max_gpus
    monkeypatch.delenv(gpus_mod.ENV_VAR)
    with pytest.raises(UnknownNameError):
        get_gpu("h20-pro")


def test_env_csv_overrides_builtin_row(tmp_path, monkeypatch):
    path = tmp_path / "derate.csv"
    path.write_text(HEADER + f"rtx-4090,RTX 4090 (mine),,NVIDIA,ada,geforce,24,20000,1008,100,none,,1,4.0,8,450,"
                             f"{URL}\n")
    monkeypatch.setenv(gpus_mod.ENV_VAR, str(path))
    spec = get_gpu("rtx-4090")
    assert spec.usable_memory_bytes == 20000 * MiB
    assert spec.matmul_flops_per_s("bf16") == pytest.approx(100e12)
    assert spec.pcie_bandwidth_bytes_per_s == pytest.approx(16e9)     # PCIe 4.0 x8
    assert spec.scale_up_bandwidth_bytes_per_s == pytest.approx(16e9)  # "none": the host link
    assert spec.p2p is False


def test_use_user_catalog_beats_environment(tmp_path, monkeypatch):
    env = tmp_path / "env.csv"
    env.write_text(HEADER + f"card-a,Card A,,ACME,ada,workstation,8,,500,50,none,,1,4.0,16,100,{URL}\n")
    mine = tmp_path / "mine.csv"
    mine.write_text(HEADER + f"card-b,Card B,,ACME,ada,workstation,8,,500,50,none,,1,4.0,16,100,{URL}\n")
    monkeypatch.setenv(gpus_mod.ENV_VAR, str(env))
    use_user_catalog(mine)
    assert get_gpu("card-b").usable_memory_bytes == 8 * GiB
    with pytest.raises(UnknownNameError):
        get_gpu("card-a")


def test_duplicate_id_and_missing_file_are_input_errors(tmp_path, monkeypatch):
    dup = tmp_path / "dup.csv"
    row = f"card-x,Card X,,ACME,ada,workstation,8,,500,50,none,,1,4.0,16,100,{URL}\n"
    dup.write_text(HEADER + row + row)
    with pytest.raises(InputError) as err:
        use_user_catalog(dup)
    assert "row 3" in str(err.value) and "twice" in str(err.value)
    monkeypatch.setenv(gpus_mod.ENV_VAR, str(tmp_path / "absent.csv"))
    with pytest.raises(InputError) as err:
        get_gpu("h100-sxm")
    assert "absent.csv" in str(err.value)


def test_user_alias_colliding_with_h200_is_rejected(tmp_path):
    path = tmp_path / "clash.csv"
    path.write_text(HEADER + f"my-h200,My H200,H200 SXM,ACME,hopper,datacenter,141,,4800,900,none,,1,5.0,16,700,"
                             f"{URL}\n")
    with pytest.raises(InputError) as err:
        use_user_catalog(path)
    assert "h200-sxm" in str(err.value) and "collides" in str(err.value)
