"""MoE training mechanisms (estimate/moe.py and their use in the training step): token permutation traffic,
expert-parallel busiest-rank imbalance, and the expert-data-parallel gradient reduction.

Expected numbers are hand arithmetic (written out in each test) or closed forms, never the code under test.
"""
from __future__ import annotations

import math

import pytest

from gpuplan import api
from gpuplan.estimate import speed
from gpuplan.estimate.moe import (dispatch_copies, ep_rank_imbalance, expected_max_std_normal, hybridep_bytes,
                                  hybridep_rates, permute_bytes,
                                  permute_passes_per_row, token_reaches)
from gpuplan.hardware import get_gpu
from gpuplan.models import get_model
from gpuplan.scenario import scenario_from_dict


def _moe_train(ep: int, dp: int = 8, gb: int = 8, **train):
    return scenario_from_dict({
        "model": "qwen3-30b-a3b", "task": "train", "framework": "megatron",
        "hardware": {"gpu": "h100-sxm", "count": dp, "gpus_per_node": 8},
        "parallel": {"dp": dp, "tp": 1, "pp": 1, "ep": ep, "zero": 1},
        "train": {"seq_len": 4096, "micro_batch": 1, "global_batch": gb, "precision": "bf16",
                  "recompute": "none", **train}})


def test_permute_passes_per_row_hand_counts():
    # EP with 16 local experts: permute 2 + sort 2 + unsort 2 + unpermute (1 + 1/8), forward; x2 with backward
    assert permute_passes_per_row(8, 16, 8) == pytest.approx(2 * (2 + 2 + 2 + 1 + 1 / 8))   # 14.25
    # one GPU (no EP): no regrouping by local expert
    assert permute_passes_per_row(8, 128, 1) == pytest.approx(2 * (2 + 1 + 1 / 8))           # 6.25
    # one expert per rank: rows arrive already grouped
    assert permute_passes_per_row(2, 1, 8) == pytest.approx(2 * (2 + 1 + 1 / 2))              # 7.0
    assert permute_passes_per_row(0, 16, 8) == 0.0


def test_permute_bytes_hand_arithmetic():
    # T 8192, k 8, h 2048, 2 bytes: T·k·h·2 = 65,536 x 2,048 x 2 = 268,435,456 B per pass
    # x 14.25 passes = 3,825,205,248 B per layer; x 24 layers = 91,804,925,952 B
    assert permute_bytes(8192, 8, 2048, 2.0, 16, 8, 24) == pytest.approx(91_804_925_952)
    # full recompute repeats the forward half: x 1.5
    assert permute_bytes(8192, 8, 2048, 2.0, 16, 8, 24, 1.0) == pytest.approx(1.5 * 91_804_925_952)


def test_expected_max_of_normals_closed_forms():
    assert expected_max_std_normal(1) == 0.0
    assert expected_max_std_normal(2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-6)          # 0.5642
    assert expected_max_std_normal(3) == pytest.approx(3 / (2 * math.sqrt(math.pi)), rel=1e-6)    # 0.8463
    # tabulated expected maxima of normal samples (e.g. Harter 1961): n=4 1.02938, n=8 1.42360
    assert expected_max_std_normal(4) == pytest.approx(1.02938, abs=1e-4)
    assert expected_max_std_normal(8) == pytest.approx(1.42360, abs=1e-4)


def test_ep_rank_imbalance_hand_arithmetic():
    # T 8192 per rank, k 8 of E 128, ep 8: per-token variance 8 x 1/8 x 7/8 x 120/127 = 0.826772;
    # a rank sees 8 x 8192 = 65,536 tokens: sigma = sqrt(65,536 x 0.826772) = 232.77, mean 65,536;
    # the 8 counts sum to a constant (correlation -1/7): 1 + sqrt(8/7) x 1.42360 x 232.77 / 65,536 = 1.0054055
    assert ep_rank_imbalance(8192, 8, 128, 8) == pytest.approx(1.0054055, rel=2e-6)
    # tiny batch: T 1, k 2 of E 8, ep 2: var 2 x 1/2 x 1/2 x 6/7 = 0.428571; sigma = sqrt(2 x 0.428571) = 0.92582;
    # mean 2; two ranks: max = mean + |X - mean|, E|X - mean| = sigma sqrt(2/pi): 1 + 0.797885 x 0.92582 / 2 = 1.36935
    assert ep_rank_imbalance(1, 2, 8, 2) == pytest.approx(1.36935, rel=1e-4)
    # no EP, or every expert on every token: nothing to be uneven
    assert ep_rank_imbalance(8192, 8, 128, 1) == 1.0
    assert ep_rank_imbalance(8192, 8, 8, 8) == 1.0


def test_imbalance_shrinks_with_tokens():
    # sigma / mean falls as 1 / sqrt(T): four times the tokens halves the excess
    e1 = ep_rank_imbalance(1024, 8, 128, 8) - 1
    e4 = ep_rank_imbalance(4096, 8, 128, 8) - 1
    assert e4 == pytest.approx(e1 / 2, rel=1e-9)


def test_training_step_charges_permutation_traffic(monkeypatch):
    scn = _moe_train(ep=8)
    m, g = get_model("qwen3-30b-a3b"), get_gpu("h100-sxm")
    with_perm = speed.train_performance(scn, m, g).breakdown["compute_memory_bound"]
    monkeypatch.setattr(speed, "permute_bytes", lambda *a, **k: 0.0)
    without = speed.train_performance(scn, m, g).breakdown["compute_memory_bound"]
    # one micro-batch (global batch 8 = 1 x dp 8) of T = 4096 tokens, 48 MoE layers, 16 local experts:
    # 14.25 x 4096 x 8 x 2048 x 2 B x 48 = 91,804,925,952 B, times the busiest-rank factor
    # 1 + sqrt(8/7) x 1.42360 x sqrt(32,768 x 0.826772) / 32,768 = 1.0076445 (the 8 counts sum to a constant:
    # correlation -1/7), at 3.35 TB/s x 0.8 (packaged memory efficiency)
    expected = 91_804_925_952 * 1.0076445 / (3.35e12 * 0.8)
    assert with_perm - without == pytest.approx(expected, rel=1e-4)


def test_expert_gradients_reduced_over_expert_data_parallel_group():
    m, g = get_model("qwen3-30b-a3b"), get_gpu("h100-sxm")
    t_ep = speed.train_performance(_moe_train(ep=8), m, g).breakdown["comm_dp_s"]
    t_no = speed.train_performance(_moe_train(ep=1), m, g).breakdown["comm_dp_s"]
    # ep = dp = 8: each rank holds 16 whole experts that no other rank holds (expert-DP group of 1), so only
    # the non-expert parameters are all-reduced: 30,532,122,624 - 48 x 128 x 3 x 2048 x 768 (= 28,991,029,248)
    # = 1,541,093,376 of 30,532,122,624 (the ring's per-hop latency is under 0.1 % of either)
    assert t_ep / t_no == pytest.approx(1_541_093_376 / 30_532_122_624, rel=1e-2)


def test_expert_optimizer_shard_unchanged_by_ep():
    # the distributed optimizer holds 1/dp of every parameter's states per rank with or without EP
    # (experts: E/ep per rank sharded over tp·dp/ep ranks = 1/dp), so the optimizer step time is equal
    m, g = get_model("qwen3-30b-a3b"), get_gpu("h100-sxm")
    a = speed.train_performance(_moe_train(ep=8), m, g).breakdown["optimizer"]
    b = speed.train_performance(_moe_train(ep=1), m, g).breakdown["optimizer"]
    assert a == pytest.approx(b, rel=1e-9)


def test_ep_overlap_hides_all_but_one_micro_batch_of_all_to_all():
    # Megatron's combined 1F1B: each micro-batch's EP all-to-all runs beside another's compute, except the
    # first forward and the last backward; here the compute per micro-batch exceeds its all-to-all, so of
    # m micro-batches' all-to-all only one micro-batch's worth stays exposed: the saving is (m - 1)/m of it
    m, g = get_model("qwen3-30b-a3b"), get_gpu("h100-sxm")
    plain = _moe_train(ep=8, gb=64)                                   # 64 / (1 x dp 8) = 8 micro-batches
    over = plain.replace(parallel={"ep_comm_overlap": True})
    a, b = speed.train_performance(plain, m, g).breakdown, speed.train_performance(over, m, g).breakdown
    assert a["comm_ep_s"] == pytest.approx(b["comm_ep_s"])            # the traffic is the same
    assert a["compute"] > a["comm_ep_s"]
    assert a["exposed_comm"] - b["exposed_comm"] == pytest.approx(a["comm_ep_s"] * 7 / 8, rel=1e-9)


def test_ep_overlap_needs_ep_and_no_full_recompute():
    from gpuplan.errors import GpuplanError
    with pytest.raises(GpuplanError, match="ep_comm_overlap"):
        _moe_train(ep=1).replace(parallel={"ep_comm_overlap": True})
    with pytest.raises(GpuplanError, match="recompute: full"):
        _moe_train(ep=8, recompute="full").replace(parallel={"ep_comm_overlap": True})
    with pytest.raises(GpuplanError, match="16-bit model"):
        _moe_train(ep=8, precision="fp32").replace(parallel={"ep_comm_overlap": True})
    with pytest.raises(GpuplanError, match="vpp"):
        _moe_train(ep=8).replace(hardware={"count": 16}, parallel={"pp": 2, "ep_comm_overlap": True})
    # with virtual stages it is accepted
    _moe_train(ep=8).replace(hardware={"count": 16}, parallel={"pp": 2, "vpp": 2, "ep_comm_overlap": True})


def test_megatron_launch_passes_ep_overlap():
    # the speed estimate hides the EP all-to-all only when the run asks Megatron for it
    from gpuplan.launch import launch_files
    from gpuplan.launch.facts import engine_flags
    on = _moe_train(ep=8, gb=64).replace(parallel={"ep_comm_overlap": True})
    off = _moe_train(ep=8, gb=64)
    assert "--overlap-moe-expert-parallel-comm" in "\n".join(launch_files(on, "megatron").values())
    assert "--overlap-moe-expert-parallel-comm" not in "\n".join(launch_files(off, "megatron").values())
    assert "--overlap-moe-expert-parallel-comm" in engine_flags("megatron")


def test_all_to_all_across_nodes_hand_arithmetic():
    from gpuplan.estimate.comm import Link, all_to_all_time, all_to_all_time_nodes
    intra = Link("scale_up", 450e9, 3e-6, 0.8)
    nic = Link("network", 50e9, 2e-6, 0.8)
    # 64 ranks, 8 a node, 1 GB each: 56/64 GB through the rank's own NIC at 40 GB/s = 21.875 ms (the 7/64 GB
    # over NVLink at 360 GB/s, 0.30 ms, runs beside it), + 63 x 2 us
    assert all_to_all_time_nodes(1e9, 64, 8, intra, nic) == pytest.approx(56 / 64 * 1e9 / 40e9 + 63 * 2e-6)
    # all ranks on one node: the plain intra-node all-to-all
    assert all_to_all_time_nodes(1e9, 8, 8, intra, nic) == pytest.approx(all_to_all_time(1e9, 8, intra))
    # a ring collective would see 8 NICs (comm.group_link); an all-to-all may not: 8x slower than that
    assert all_to_all_time_nodes(1e9, 64, 8, intra, nic) > 7 * (56 / 64 * 1e9 / (8 * 40e9))


def test_training_ep_all_to_all_bytes_hand_arithmetic():
    # dispatch + combine, forward and backward: 4 all-to-alls of T·k·h·2 bytes per MoE layer. T 4096, k 8,
    # h 2048: 134,217,728 B; 7/8 of it over NVLink (450 GB/s x 0.8) = 3.26224e-4 s, + 7 x 3 us latency
    # = 3.47224e-4 s; x 4 x 48 layers = 0.0666671 s; x busiest-rank factor 1.0076445 = 0.0671767 s (one micro-batch)
    m, g = get_model("qwen3-30b-a3b"), get_gpu("h100-sxm")
    b = speed.train_performance(_moe_train(ep=8), m, g).breakdown
    assert b["comm_ep_s"] == pytest.approx(0.0671767, rel=1e-5)


def test_training_ep_across_two_nodes_goes_through_each_gpus_nic():
    # EP 16 over two 8-GPU nodes (ib-ndr-400: 50 GB/s per GPU x 0.8, 2 us): per all-to-all half of the
    # 134,217,728 B leaves through the GPU's NIC: 67,108,864 / 40e9 = 1.677722e-3 s (the 7/16 over NVLink,
    # 0.163 ms, runs beside it) + 15 x 2 us = 1.707722e-3 s; x 4 x 48 = 0.3278826 s; busiest of 16 ranks:
    # var 8 x 1/16 x 15/16 x 120/127 = 0.4429134, sigma = sqrt(65,536 x 0.4429134) = 170.374, E[max of 16
    # normals] 1.765991, correlation -1/15: 1 + sqrt(16/15) x 1.765991 x 170.374 / 32,768 = 1.0094832 -> 0.3309920 s
    m, g = get_model("qwen3-30b-a3b"), get_gpu("h100-sxm")
    b = speed.train_performance(_moe_train(ep=16, dp=16, gb=16), m, g).breakdown
    assert b["comm_ep_s"] == pytest.approx(0.3309920, rel=1e-4)


def test_grouped_expert_gemm_efficiency_falls_with_rows_per_expert():
    # packaged Hopper bf16 burst efficiency 0.8614 (H100 SXM MAMF 794.5/989.4 over its shape's size factor), d0 = 128
    # (the H200 GEMM grid). Qwen3-30B-A3B gate projection (K 2048, N 768): 0.8614 x 2048/2176 x 768/896 = 0.694911
    from gpuplan.estimate.moe import measured_total_rows_half
    from gpuplan.estimate.speed import gemm_efficiency, load_efficiency, training_rows_half
    P = load_efficiency()
    assert P["matmul"]["hopper"]["bf16"] == 0.8614 and P["matmul_dim_half"] == 128.0
    d0m = P["matmul_rows_half"]
    # serving: d0_M fitted on TensorRT-LLM rows, 4096 rows per expert x 4096/(4096 + d0_M)
    assert gemm_efficiency(P, "hopper", "bf16", 4096, 2048, 768, grouped=True) == pytest.approx(
        0.694911 * 4096 / (4096 + d0m), rel=1e-4)
    # training: the measured total-rows constant D over the call's local experts (a serving fit must not drive
    # training): 16 local experts -> D/16 rows per expert
    D = measured_total_rows_half(128.0)
    assert training_rows_half(P, 16) == pytest.approx(D / 16)
    assert gemm_efficiency(P, "hopper", "bf16", 4096, 2048, 768, grouped=True,
                           rows_half=training_rows_half(P, 16)) == pytest.approx(0.694911 * 4096 / (4096 + D / 16),
                                                                                  rel=1e-4)
    # a dense GEMM leaves M to the roofline's memory term
    assert gemm_efficiency(P, "hopper", "bf16", 512, 2048, 768) == pytest.approx(0.694911, rel=1e-5)


def test_grouped_gemm_row_factor_is_on_the_calls_total_rows():
    # H200 torch._grouped_mm, Qwen3-30B-A3B fc1 (K 2048, N 1536), data/grouped_gemm_rows.csv: at equal total rows 4
    # and 16 experts run alike (4,096 rows: 433.4 vs 431.7 TFLOP/s; 8,192: 619.0 vs 610.8), at equal rows per
    # expert they do not (128 rows: 293.0 vs 115.1): the factor is M_tot/(M_tot + D), D ~ 1,100-1,250 rows once the
    # host-timed points (kernels under 58 us on the lent machine) are left out
    import csv
    from pathlib import Path
    from gpuplan.estimate.moe import measured_total_rows_half
    path = Path(__file__).resolve().parents[1] / "src/gpuplan/estimate/data/grouped_gemm_rows.csv"
    rate = {(int(r["groups"]), int(r["m_per_group"])): float(r["tflops_per_s"])
            for r in csv.DictReader(path.open(encoding="utf-8")) if r["layout"] == "torch_grouped_mm" and r["k"] == "2048"}
    assert rate[(16, 256)] == pytest.approx(rate[(4, 1024)], rel=0.02)
    assert rate[(16, 512)] == pytest.approx(rate[(4, 2048)], rel=0.02)
    assert rate[(16, 128)] > 2.5 * rate[(4, 128)]
    assert 900.0 < measured_total_rows_half(128.0) < 1500.0


def test_moe_training_time_does_not_read_the_serving_row_constant():
    # changing matmul_rows_half (a TensorRT-LLM serving fit) leaves a MoE training step unchanged
    import copy
    m, g = get_model("qwen3-30b-a3b"), get_gpu("h100-sxm")
    P = speed.load_efficiency()
    Q = copy.deepcopy(P)
    Q["matmul_rows_half"] = 50.0
    a = speed.train_performance(_moe_train(ep=8), m, g, params=P).step_time_s
    b = speed.train_performance(_moe_train(ep=8), m, g, params=Q).step_time_s
    assert a == b


# ---- token dispatchers: one row per (token, expert) pair vs one copy per destination GPU / node -----------

def test_token_reaches_hand_arithmetic():
    # E 4, k 2, one held expert: 1 - C(3,2)/C(4,2) = 1 - 3/6
    assert token_reaches(4, 2, 1) == pytest.approx(0.5)
    # Qwen3-30B-A3B under EP 8: 16 of 128 experts on a rank; the closed form with binomials
    assert token_reaches(128, 8, 16) == pytest.approx(1 - math.comb(112, 8) / math.comb(128, 8), rel=1e-12)
    assert token_reaches(128, 8, 0) == 0.0 and token_reaches(128, 8, 128) == 1.0
    assert token_reaches(8, 4, 5) == 1.0          # 4 experts cannot all miss 5 of 8


def test_dispatch_copies_per_token():
    # all-to-all: one row per (token, expert): k(g-1)/ep over NVLink, k(ep-g)/ep through the NIC
    assert dispatch_copies("alltoall", 128, 8, 16, 8) == pytest.approx((8 * 7 / 16, 8 * 8 / 16))   # (3.5, 4.0)
    assert dispatch_copies("alltoall", 128, 8, 8, 8) == pytest.approx((7.0, 0.0))
    # DeepEP on one node: a token goes once to each rank holding any of its experts, 7 x P(rank hit)
    p_rank = 1 - math.comb(112, 8) / math.comb(128, 8)                                   # 0.667420
    assert dispatch_copies("deepep", 128, 8, 8, 8) == pytest.approx((7 * p_rank, 0.0), rel=1e-12)
    # with one expert per rank no token can pick a rank twice: the same traffic as the all-to-all
    # (E = ep = 8, k 2: 7 x (1 - C(7,2)/C(8,2)) = 7 x 0.25 = 1.75 = 2 x 7/8)
    assert dispatch_copies("deepep", 8, 2, 8, 8) == pytest.approx(dispatch_copies("alltoall", 8, 2, 8, 8))
    # HybridEP, EP 16 over two nodes: once to the other node, P = 1 - C(64,8)/C(128,8) = 0.996904 (4x fewer NIC
    # rows than the all-to-all's 4.0); NVLink: 7 peers x P(rank hit) = 7 x 0.412282, twice (own sends and the
    # rows forwarded for the other node) = 5.771949
    p_node, p_r16 = 1 - math.comb(64, 8) / math.comb(128, 8), 1 - math.comb(120, 8) / math.comb(128, 8)
    assert dispatch_copies("hybridep", 128, 8, 16, 8) == pytest.approx((2 * 7 * p_r16, p_node), rel=1e-12)
    with pytest.raises(ValueError):
        dispatch_copies("ring", 128, 8, 16, 8)


def test_training_hybridep_across_two_nodes_hand_arithmetic():
    # Without a measured HybridEP rate (H200: DeepEP's hybrid-ep README times H100, B200 and GB200 only) the link
    # model prices the exchange. EP 16 over two nodes: per dispatch 0.996904 x T·h·2 B (T 4096, h 2048: 16,777,216 B)
    # through the NIC at 40 GB/s = 4.181319e-4 s (NVLink side: 5.771949 x 16,777,216 / 360e9 = 2.69e-4 s, beside
    # it), + 15 x 2 us = 4.481319e-4 s; x 4 x 48 layers = 0.0860413 s; x busiest of 16 ranks 1.0094832 = 0.0868572 s
    # (the all-to-all dispatcher: 0.3309920 s, test above)
    m, g = get_model("qwen3-30b-a3b"), get_gpu("h200-sxm")
    scn = _moe_train(ep=16, dp=16, gb=16).replace(parallel={"ep_dispatcher": "hybridep"},
                                                  hardware={"gpu": "h200-sxm"})
    assert speed.train_performance(scn, m, g).breakdown["comm_ep_s"] == pytest.approx(0.0868572, rel=1e-4)


def test_hybridep_bytes_count_as_deepeps_benchmark_does():
    # across nodes: tokens x nodes the token's experts fall on, its own included (count_rdma_send_from_routing_map,
    # deepseek-ai/DeepEP@7febc6e2 tests/utils.py): EP 16 on two 8-GPU nodes, 64 experts a node,
    # P(a token's 8 of 128 experts touch a node) = 1 - C(64,8)/C(128,8) = 0.99690414
    p_node = 1 - math.comb(64, 8) / math.comb(128, 8)
    assert hybridep_bytes(4096, 2048, 128, 8, 16, 8) == pytest.approx(("ib", 4096 * 2 * p_node * 2048 * 2), rel=1e-12)
    # one NVLink domain: the rows this rank receives from the 8 ranks, itself included (dispatched_hidden.numel())
    p_rank = 1 - math.comb(112, 8) / math.comb(128, 8)
    assert hybridep_bytes(4096, 7168, 128, 8, 8, 8) == pytest.approx(("nvl", 4096 * 8 * p_rank * 7168 * 2), rel=1e-12)


def test_hybridep_rates_are_the_readmes_torch_api_rows():
    # DeepEP hybrid-ep README (7febc6e2), H100, 16 ranks, Torch API: 16 SMs dispatch BF16 54.47, combine 53.35 GB/s;
    # 8 SMs 57.74 / 56.96; 32 SMs were not measured: the largest SM count not above it (16) is used
    assert hybridep_rates("h100-sxm", "ib", 16, 16) == pytest.approx((54.47e9, 53.35e9))
    assert hybridep_rates("h100-sxm", "ib", 16, 32) == pytest.approx((54.47e9, 53.35e9))
    assert hybridep_rates("h100-sxm", "ib", 16, 12) == pytest.approx((57.74e9, 56.96e9))
    assert hybridep_rates("h100-sxm", "ib", 64, 16) == pytest.approx((41.24e9, 46.57e9))
    assert hybridep_rates("b200", "nvl", 8, 16) == pytest.approx((535.94e9, 530.86e9))
    # nothing measured: EP 8 inside one H100 node, fewer SMs than any row, another GPU
    assert hybridep_rates("h100-sxm", "nvl", 8, 16) is None
    assert hybridep_rates("h100-sxm", "ib", 16, 2) is None
    assert hybridep_rates("h200-sxm", "ib", 16, 16) is None
    # the H100 rows ran 8-GPU nodes: 16 ranks on four 4-GPU nodes were not measured
    assert hybridep_rates("h100-sxm", "ib", 16, 16, per_node=8) == pytest.approx((54.47e9, 53.35e9))
    assert hybridep_rates("h100-sxm", "ib", 16, 16, per_node=4) is None


def test_training_hybridep_on_h100_takes_the_measured_rates():
    # MB22's layout (Qwen3-30B-A3B, 16 x H100, EP 16 over two nodes, 4,096 tokens a rank, HybridEP on 32 SMs):
    # a call moves 4096 x 2 x 0.99690414 x 2048 x 2 = 33,450,552 algorithm bytes; dispatch at 54.47 GB/s
    # = 6.141096e-4 s, combine at 53.35 GB/s = 6.270019e-4 s; a MoE layer runs both forward and both again
    # backward: 2 x 1.2411115e-3 s, x 48 layers = 0.1191467 s per micro-batch (no busiest-rank factor on top:
    # the benchmark's random routing has its own)
    m, g = get_model("qwen3-30b-a3b"), get_gpu("h100-sxm")
    scn = _moe_train(ep=16, dp=16, gb=16).replace(parallel={"ep_dispatcher": "hybridep", "ep_dispatcher_sms": 32})
    assert speed.train_performance(scn, m, g).breakdown["comm_ep_s"] == pytest.approx(0.1191467, rel=1e-6)


def test_ep_dispatcher_needs_training_ep():
    from gpuplan.errors import GpuplanError
    with pytest.raises(GpuplanError, match="ep_dispatcher"):
        _moe_train(ep=1).replace(parallel={"ep_dispatcher": "deepep"})
    with pytest.raises(GpuplanError):
        _moe_train(ep=8).replace(parallel={"ep_dispatcher": "nccl"})


def test_megatron_launch_passes_flex_dispatcher():
    from gpuplan.launch import launch_files
    deepep = "\n".join(launch_files(_moe_train(ep=8, gb=64).replace(parallel={"ep_dispatcher": "deepep"}),
                                    "megatron").values())
    assert "--moe-token-dispatcher-type flex" in deepep and "--moe-flex-dispatcher-backend deepep" in deepep
    plain = "\n".join(launch_files(_moe_train(ep=8, gb=64), "megatron").values())
    assert "--moe-token-dispatcher-type alltoall" in plain and "flex" not in plain


def test_dropless_dispatch_names_the_host_sync_and_a_gpu_bound_layer_pays_nothing():
    m, g = get_model("qwen3-30b-a3b"), get_gpu("h100-sxm")
    plain = speed.train_performance(_moe_train(ep=8), m, g)
    assert any("synchronises host and GPU once per MoE layer" in n for n in plain.notes)
    # 4,096 tokens a layer: the GPU's forward outlasts the host's issue, nothing is exposed (tests/test_moe_host_sync.py)
    assert "host_wait" not in plain.breakdown and plain.details["moe_host_syncs_per_microbatch"] == 48
    # HybridEP without a static rank capacity copies the tokens per expert to the host in every dispatch
    # (_HybridEPManager, token_dispatcher.py at Megatron-LM@6513e3e2): the same note
    hybrid = speed.train_performance(_moe_train(ep=8).replace(parallel={"ep_dispatcher": "hybridep"}), m, g)
    assert any("synchronises host and GPU once per MoE layer" in n for n in hybrid.notes)
    # no expert parallelism: the all-to-all dispatcher still needs the tokens per expert on the host for the grouped
    # GEMM and syncs at "before_finish" (token_dispatcher.py:533 at core_v0.15.0): the same note
    assert any("synchronises host" in n for n in speed.train_performance(_moe_train(ep=1), m, g).notes)
    # drop-and-pad: the counts are host constants, no sync, no note
    drop = speed.train_performance(_moe_train(ep=8, moe_capacity_factor=1.0), m, g)
    assert not any("synchronises host" in n for n in drop.notes)


def test_expert_optimizer_states_shard_over_the_expert_data_parallel_group():
    # Megatron's distributed optimizer shards routed-expert states over the ranks that hold the same experts
    # (tp·dp·cp/ep = 1·8·1/8 = 1 here: every rank keeps its experts' whole states), the rest over dp = 8.
    # Qwen3-30B-A3B: 28,991,029,248 routed-expert params of 30,532,122,624 (the registry's counts);
    # 12 B per param (fp32 master + Adam m, v): experts/8 x 12 = 43,486,543,872 B,
    # rest (1,541,093,376) x 12 / 8 = 2,311,640,064 B; sum 45,798,183,936 B (the old dp-wide sharding gave 7.7e9)
    from gpuplan.pipeline import evaluate
    comp = evaluate(_moe_train(ep=8)).to_json()["memory"]["components"]
    assert comp["optimizer_states"] == pytest.approx(45_798_183_936, rel=1e-3)


# --- busiest EP rank against a direct computation --------------------------------------------------------


def _exact_two_rank_excess(tokens_per_rank, k, experts):
    """E[max of the two ranks' rows] / mean - 1 by convolving the per-token hypergeometric count directly."""
    held = experts // 2
    pmf = [math.comb(held, j) * math.comb(experts - held, k - j) / math.comb(experts, k) for j in range(k + 1)]
    dist = [1.0]
    for _ in range(2 * tokens_per_rank):
        new = [0.0] * (len(dist) + k)
        for i, a in enumerate(dist):
            for j, b in enumerate(pmf):
                new[i + j] += a * b
        dist = new
    total = 2 * tokens_per_rank * k
    return sum(p * max(x, total - x) for x, p in enumerate(dist)) / (tokens_per_rank * k) - 1.0


@pytest.mark.parametrize("tokens,k,experts", [(50, 2, 4), (100, 4, 16), (400, 8, 128)])
def test_two_rank_imbalance_matches_the_exact_distribution(tokens, k, experts):
    exact = _exact_two_rank_excess(tokens, k, experts)
    assert ep_rank_imbalance(tokens, k, experts, 2) - 1.0 == pytest.approx(exact, rel=0.01)


def test_busiest_of_four_ranks_matches_simulated_routing():
    # force-balanced routing: each token takes k distinct experts uniformly (Megatron RandomSTE); 20,000 seeded
    # steps of 4 ranks x 32 tokens, k 2 of 8 experts (2 per rank); the busiest rank's rows over the mean
    import itertools
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(0)
    ep, tokens, k, experts = 4, 32, 2, 8
    pairs = list(itertools.combinations(range(experts), k))
    per_rank = np.array([[sum(e // (experts // ep) == r for e in pair) for r in range(ep)] for pair in pairs])
    counts = per_rank[rng.integers(0, len(pairs), size=(20_000, ep * tokens))].sum(axis=1)
    simulated = counts.max(axis=1).mean() / (tokens * k) - 1.0
    assert ep_rank_imbalance(tokens, k, experts, ep) - 1.0 == pytest.approx(simulated, rel=0.03)



def test_force_balanced_routing_at_the_scored_shape_leaves_under_one_percent():
    # What the Megatron-Bridge benchmark rows route with (docs/speed.md 2.15): `moe_router_force_load_balancing`
    # replaces the gating logits with fresh N(0, 1) noise on every call (RandomSTE, megatron/core/transformer/moe/
    # moe_utils.py at core_v0.15.0) before the router's top-k; no expert bias for Qwen3. Simulated literally at
    # MB13's shape: 8 EP ranks x 4,096 tokens, top-8 of 128 experts, 16 a rank, 30 seeded draws. The busiest
    # rank carries < 1 % more rows than the mean (MB06/MB13 would need ~3.5x / ~5x), and the analytic factor
    # the speed engine charges must agree with the simulation.
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(0)
    ep, tokens, k, experts = 8, 4096, 8, 128
    excess = []
    for _ in range(30):
        logits = rng.standard_normal((ep * tokens, experts), dtype=np.float32)
        top = np.argpartition(logits, experts - k, axis=1)[:, experts - k:]
        per_rank = np.bincount((top // (experts // ep)).ravel(), minlength=ep)
        excess.append(per_rank.max() / (tokens * k) - 1.0)
    simulated = float(np.mean(excess))
    assert 0.0 < simulated < 0.01
    assert ep_rank_imbalance(tokens, k, experts, ep) - 1.0 == pytest.approx(simulated, rel=0.15)

# --- Megatron's grouped expert MLP: FP8 row padding, expert output bias, token-drop capacity ----------------


def test_grouped_mlp_pass_counts():
    from gpuplan.estimate.moe import expert_bias_passes_per_row, fp8_pad_passes_per_row
    # pad input + unpad output, read + write each, forward; the opposite copies in backward
    assert fp8_pad_passes_per_row() == 8.0
    assert fp8_pad_passes_per_row(1.0) == 12.0
    # forward: b*p written 1, t + b*p 3, cat 2; backward: grad*p and grad*b 3 each, split's cat 2
    assert expert_bias_passes_per_row() == 14.0
    assert expert_bias_passes_per_row(1.0) == 20.0


def _grouped_bytes(scn_dict, model):
    from gpuplan.estimate import speed as S
    from gpuplan.scenario import scenario_from_dict
    scn = scenario_from_dict(scn_dict)
    g = get_gpu(scn.hardware.gpu)
    c = S._train_setup(scn, model, g, S._packaged_efficiency(), S._network(scn, g), [])
    return c, S._grouped_mlp_bytes(c)


def _megatron_moe(model="qwen3-30b-a3b", precision="fp8", mb=1, **train):
    return {"model": model, "task": "train", "framework": "megatron",
            "hardware": {"gpu": "h100-sxm", "count": 8, "gpus_per_node": 8},
            "parallel": {"ep": 8}, "train": {"precision": precision, "seq_len": 4096, "micro_batch": mb,
                                               "global_batch": 64, **train}}


def test_fp8_dropless_charges_the_padding_copies():
    m = get_model("qwen3-30b-a3b")
    c, got = _grouped_bytes(_megatron_moe(), m)
    # 4096 tokens x k 8 rows times the busiest-rank factor (sigma = sqrt(8 x 4096 x 0.826772) = 164.59 of a
    # mean 32,768: 1 + sqrt(8/7) x 1.42360 x 164.59 / 32,768 = 1.0076445), 2048 wide, 2 bytes, 8 passes, 48 layers
    rows = 4096 * 8 * 1.0076445
    assert got == pytest.approx(8 * rows * 2048 * 2 * 48, rel=1e-6)
    # the same run in bf16 pads nothing (Qwen3 linears carry no bias)
    assert _grouped_bytes(_megatron_moe(precision="bf16"), m)[1] == 0.0


def test_token_drop_with_an_aligned_capacity_needs_no_fp8_padding():
    m = get_model("qwen3-30b-a3b")
    # capacity ceil(4096 x 8 / 128 x 1.0) = 256 per source rank; 256 x ep 8 rows per local expert, a multiple of 16
    assert _grouped_bytes(_megatron_moe(moe_capacity_factor=1.0), m)[1] == 0.0
    # capacity ceil(256 x 1.01) = 259; 259 x 8 = 2072 = 16 x 129.5: unaligned, so TE pads
    c, got = _grouped_bytes(_megatron_moe(moe_capacity_factor=1.01), m)
    assert got == pytest.approx(8 * (259 * 128) * 2048 * 2 * 48, rel=1e-9)


def test_capacity_sets_the_rows_and_the_all_to_all():
    from gpuplan.estimate import speed as S
    m = get_model("qwen3-30b-a3b")
    c, _ = _grouped_bytes(_megatron_moe(moe_capacity_factor=1.25), m)
    # ceil(256 x 1.25) = 320 rows per expert and source rank, against 256 dropless: 1.25, no busiest-rank excess
    assert S._routed_rows(c) == pytest.approx(1.25, rel=1e-12)
    drop = api.estimate(_megatron_moe(moe_capacity_factor=1.25)).performance.breakdown["comm_ep_s"]
    flat = api.estimate(_megatron_moe(moe_capacity_factor=1.0)).performance.breakdown["comm_ep_s"]
    assert drop / flat == pytest.approx(1.25, rel=1e-3)


def test_expert_output_bias_is_charged_under_megatron_only():
    m = get_model("gpt-oss-20b")
    assert m.traits.mlp_bias
    scn = _megatron_moe(model="gpt-oss-20b", precision="bf16")
    c, got = _grouped_bytes(scn, m)
    rows = 4096 * m.experts_per_tok * ep_rank_imbalance(4096, m.experts_per_tok, m.num_experts, 8)
    # 14 passes of the output bias over h, and gpt-oss's eager clamp + cat (46 B per element of the expert width)
    assert got == pytest.approx((14 * m.hidden_size * 2 + 46 * m.moe_intermediate_size) * rows * m.num_layers,
                                rel=1e-9)
    other = {**scn, "framework": "torchtitan", "parallel": {"ep": 8}}
    assert _grouped_bytes(other, m)[1] == 0.0


def test_clamped_glu_eager_bytes_hand_count():
    from gpuplan.estimate.moe import expert_glu_clamp_bytes_per_element
    # Megatron's weighted_bias_quick_geglu_impl (fused_bias_geglu.py @92c8482e6) clamps the two f-wide halves and
    # concatenates them as eager ops before the compiled GEGLU, bf16, bytes per element of f:
    # forward  clamp(max) read 2 + write 2, clamp(min, max) 2 + 2, cat read 4 + write 4                     = 16
    # backward clamp_backward(max): le 2 + 1, where 1 + 2 + 2; clamp_backward(min, max): ge 2 + 1, le 2 + 1,
    #          logical_and_ 1 + 1 + 1, where 1 + 2 + 2; the chunk's backward cat of the two gradients 4 + 4  = 30
    fwd = (2 + 2) + (2 + 2) + (4 + 4)
    bwd = (2 + 1) + (1 + 2 + 2) + (2 + 1) + (2 + 1) + (1 + 1 + 1) + (1 + 2 + 2) + (4 + 4)
    assert (fwd, bwd) == (16, 30)
    assert expert_glu_clamp_bytes_per_element() == fwd + bwd
    assert expert_glu_clamp_bytes_per_element(1.0) == 2 * fwd + bwd      # full recompute repeats the forward


def test_glu_clamp_trait_comes_from_the_config():
    # gpt-oss configs: "swiglu_limit": 7.0; models without the key clamp nothing
    assert get_model("gpt-oss-120b").traits.glu_clamp == 7.0
    assert get_model("gpt-oss-20b").traits.glu_clamp == 7.0
    assert get_model("qwen3-30b-a3b").traits.glu_clamp is None
    # a Qwen3-MoE run pays no clamp bytes (bf16: no FP8 padding, no biases)
    assert _grouped_bytes(_megatron_moe(precision="bf16"), get_model("qwen3-30b-a3b"))[1] == 0.0


def test_capacity_factor_is_megatron_all_to_all_only():
    with pytest.raises(Exception, match="moe_capacity_factor"):
        api.estimate({**_megatron_moe(moe_capacity_factor=1.0), "framework": "torchtitan"})
    with pytest.raises(Exception, match="ep_dispatcher"):
        api.estimate({**_megatron_moe(moe_capacity_factor=1.0), "parallel": {"ep": 8, "ep_dispatcher": "deepep"}})


def test_token_drop_has_no_host_sync_note_and_launches_with_capacity():
    from gpuplan.launch import launch_files
    drop = api.estimate(_megatron_moe(moe_capacity_factor=1.0)).performance.notes
    assert not any("synchronises host and GPU" in n for n in drop)
    assert any("synchronises host and GPU" in n for n in api.estimate(_megatron_moe()).performance.notes)
    text = "\n".join(launch_files(scenario_from_dict(_megatron_moe(moe_capacity_factor=1.0)), "megatron").values())
    assert "--moe-expert-capacity-factor 1 " in text and "--moe-pad-expert-input-to-capacity" in text


# ---------------------------------------------------------------------------------------------
# SMs the flex dispatcher's kernels hold while the EP exchange overlaps compute (estimate/moe.py)


def test_dispatcher_sms_are_megatrons_defaults():
    from gpuplan.estimate.moe import dispatcher_sms
    # transformer_config.py: moe_deepep_num_sms = 20 (core_v0.15.0), moe_hybridep_num_sms = 16 (core_v0.16.0)
    assert dispatcher_sms("deepep") == 20
    assert dispatcher_sms("hybridep") == 16
    assert dispatcher_sms("hybridep", 32) == 32          # Megatron-Bridge perf recipes set 32 (_common.py)
    assert dispatcher_sms("alltoall") is None            # NCCL's channels: not priced
    assert dispatcher_sms("alltoall", 32) is None


def test_overlapped_exposed_hand_arithmetic():
    from gpuplan.estimate.moe import overlapped_exposed
    # compute outlasts the exchange: 1 s of exchange on 32 of 132 SMs slows 4 s of compute by 32/132 s in the
    # paired 7/8 of the chunks; the unpaired 1/8 expose their whole exchange: 7/8 x 0.2424242 + 0.125
    assert overlapped_exposed(1.0, 4.0, 32 / 132, 1 / 8) == pytest.approx(7 / 8 * 32 / 132 + 0.125, rel=1e-12)
    # the exchange outlasts the compute: 5 s beside 2 s (2 / 0.75 = 2.67 s < 5 s): 3 s exposed when paired (3/4),
    # 5 s when alone (1/4): 2.25 + 1.25
    assert overlapped_exposed(5.0, 2.0, 0.25, 0.25) == pytest.approx(3.5, rel=1e-12)
    # no SMs held, compute-bound: only the unpaired chunks' exchange, 1/8 s
    assert overlapped_exposed(1.0, 4.0, 0.0, 1 / 8) == pytest.approx(0.125, rel=1e-12)


def test_overlap_unpaired_share_hand_arithmetic():
    from gpuplan.estimate.moe import overlap_unpaired_share
    # no pipelining: the first forward and the last backward, 1 of m
    assert overlap_unpaired_share(1, 1, 8) == pytest.approx(1 / 8)
    # interleaved, rank 0: 2(p - 1) + (v - 1)p + 1 warm-up chunks of m·v; p 8, v 4, m 128: (14 + 24 + 1) / 512
    assert overlap_unpaired_share(8, 4, 128) == pytest.approx(39 / 512)
    # p 2, v 12, m 4: 2 + 22 + 1 = 25 of 48
    assert overlap_unpaired_share(2, 12, 4) == pytest.approx(25 / 48)
    # more warm-up than chunks (p 4, v 2, m 2: 6 + 4 + 1 = 11 > 4): every chunk runs alone
    assert overlap_unpaired_share(4, 2, 2) == pytest.approx(1.0)


def test_pipelined_ep_overlap_leaves_the_warm_up_and_cool_down_exposed():
    # PP 2 x VP 2, EP 8, 8 micro-batches: rank 0 runs 2 + 2 + 1 = 5 of its 16 chunks' forwards alone (warm-up) and
    # as many backwards (cool-down), so the overlap saves (1 - 5/16) of the EP time (compute-bound, NCCL: no SMs
    # priced), where the PP = 1 schedule saves (1 - 1/8)
    m, g = get_model("qwen3-30b-a3b"), get_gpu("h100-sxm")
    plain = scenario_from_dict({
        "model": "qwen3-30b-a3b", "task": "train", "framework": "megatron",
        "hardware": {"gpu": "h100-sxm", "count": 16, "gpus_per_node": 8},
        "parallel": {"dp": 8, "tp": 1, "pp": 2, "vpp": 2, "ep": 8, "zero": 1},
        "train": {"seq_len": 4096, "micro_batch": 1, "global_batch": 64, "precision": "bf16", "recompute": "none"}})
    over = plain.replace(parallel={"ep_comm_overlap": True})
    a, b = speed.train_performance(plain, m, g).breakdown, speed.train_performance(over, m, g).breakdown
    assert a["compute"] > a["comm_ep_s"]
    assert a["exposed_comm"] - b["exposed_comm"] == pytest.approx(a["comm_ep_s"] * (1 - 5 / 16), rel=1e-9)


def test_overlapped_hybridep_step_pays_the_dispatcher_sms():
    # EP 16 over two nodes, HybridEP, EP overlap, 4 micro-batches, compute per micro-batch above its exchange: the
    # exposed time per micro-batch is (1 - 1/4)·s·t_ep + t_ep/4, so moving from Megatron's 16 SMs to the recipes' 32
    # adds 3/4 x (32 - 16)/132 of the step's EP time (H100 SXM: 132 SMs, the Hopper whitepaper)
    m, g = get_model("qwen3-30b-a3b"), get_gpu("h100-sxm")
    base = _moe_train(ep=16, dp=16, gb=64).replace(parallel={"ep_dispatcher": "hybridep", "ep_comm_overlap": True})
    wide = base.replace(parallel={"ep_dispatcher_sms": 32})
    a, b = speed.train_performance(base, m, g).breakdown, speed.train_performance(wide, m, g).breakdown
    assert a["compute"] > a["comm_ep_s"]
    assert b["exposed_comm"] - a["exposed_comm"] == pytest.approx(a["comm_ep_s"] * 0.75 * 16 / 132, rel=1e-9)
    # without overlap the exchange runs alone: the SMs it holds cost nothing extra
    plain = base.replace(parallel={"ep_comm_overlap": False})
    c = speed.train_performance(plain, m, g).breakdown
    d = speed.train_performance(plain.replace(parallel={"ep_dispatcher_sms": 32}), m, g).breakdown
    assert c["exposed_comm"] == pytest.approx(d["exposed_comm"], rel=1e-12)


def test_dispatcher_sms_needs_a_flex_dispatcher_and_reaches_the_launch():
    from gpuplan.errors import GpuplanError
    from gpuplan.launch import launch_files
    with pytest.raises(GpuplanError, match="ep_dispatcher_sms"):
        _moe_train(ep=8, gb=64).replace(parallel={"ep_dispatcher_sms": 32})
    scn = _moe_train(ep=8, gb=64).replace(parallel={"ep_dispatcher": "hybridep", "ep_dispatcher_sms": 32})
    assert "--moe-hybridep-num-sms 32" in "\n".join(launch_files(scn, "megatron").values())


# --- Megatron's selective --recompute-modules layernorm / moe_act (gpt-oss perf recipes) --------------------------


def test_recompute_modules_need_megatron_selective():
    scn = _megatron_moe(model="gpt-oss-20b", precision="bf16", recompute="selective",
                        recompute_modules=["layernorm", "moe_act"])
    scenario_from_dict(scn)
    with pytest.raises(Exception, match="recompute_modules"):
        scenario_from_dict({**scn, "train": {**scn["train"], "recompute": "none"}})
    with pytest.raises(Exception, match="recompute_modules"):
        scenario_from_dict({**scn, "framework": "torchtitan"})


def test_recompute_modules_plan_and_bytes():
    from gpuplan.estimate import speed as S
    m = get_model("gpt-oss-20b")
    c, _ = _grouped_bytes(_megatron_moe(model="gpt-oss-20b", precision="bf16", recompute="selective",
                                        recompute_modules=["layernorm", "moe_act"]), m)
    # no core_attn in the list: the attention core is not recomputed (Megatron's default list is core_attn alone)
    assert (c.rc.kind, c.rc.attention_share, c.rc.linear_share) == ("selective-modules", 0.0, 0.0)
    fused, eager = S._module_recompute(c)
    rows = 4096 * m.experts_per_tok * ep_rank_imbalance(4096, m.experts_per_tok, m.num_experts, 8)
    f, h, L = m.moe_intermediate_size, m.hidden_size, m.num_layers
    # layernorm: the MoE layers' pre-MLP norm forward, read 2 + write 2 per element of h per token;
    # moe_act: the fused GEGLU forward (read the 2f-wide input, write f: 6 B per element of f) per routed row,
    # and the eager clamp + cat forward (16 B per element of f)
    assert fused == pytest.approx(4 * h * 4096 * L + 6 * f * rows * L, rel=1e-9)
    assert eager == pytest.approx(16 * f * rows * L, rel=1e-9)
    # the default selective list recomputes the attention core and nothing else
    c2, _ = _grouped_bytes(_megatron_moe(model="gpt-oss-20b", precision="bf16", recompute="selective"), m)
    assert (c2.rc.kind, c2.rc.attention_share) == ("selective-core", 1.0)
    assert S._module_recompute(c2) == (0.0, 0.0)


def test_recompute_modules_reach_the_launch_file():
    from gpuplan.launch import launch_files
    scn = _megatron_moe(precision="bf16", recompute="selective", recompute_modules=["layernorm", "moe_act"])
    text = "\n".join(launch_files(scenario_from_dict(scn), "megatron").values())
    flat = " ".join(text.replace("\\\n", " ").split())
    assert "--recompute-granularity selective --recompute-modules layernorm moe_act" in flat


# --- Megatron's unfused RoPE under YaRN (gpt-oss) ---------------------------------------------------------------------


def test_unfused_rope_bytes_hand_count():
    from gpuplan.estimate import elementwise as E
    # rope_utils.py _apply_rotary_pos_emb_bshd @b0cc2706d, bf16, per element of q or k:
    # forward  t*cos 2+2, -x2 on the half 1+1, cat 2+2, *sin 2+2, add 4+2, cat((t, t_pass)) 2+2              = 24
    # backward grad*cos 4, neg 2, the chunk's cat 4, grad*sin 4, add 6, the empty t_pass's zero gradient 2, add 6 = 28
    assert E.UNFUSED_ROPE_BYTES == ((2 + 2) + (1 + 1) + (2 + 2) + (2 + 2) + (4 + 2) + (2 + 2),
                                    4 + 2 + 4 + 4 + 6 + 2 + 6)
    assert E.megatron_unfused_rope("megatron", get_model("gpt-oss-120b").traits, False)       # yarn, factor 32
    assert not E.megatron_unfused_rope("torchtitan", get_model("gpt-oss-120b").traits, False)
    assert not E.megatron_unfused_rope("megatron", get_model("qwen3-30b-a3b").traits, False)  # plain RoPE: fused
    assert not E.megatron_unfused_rope("megatron", get_model("llama-3.1-8b").traits, False)   # llama3 scaling: fused
    dsv3 = get_model("deepseek-v3")
    assert not E.megatron_unfused_rope("megatron", dsv3.traits, dsv3.is_mla)                  # MLA: its own code


def test_unfused_rope_time(monkeypatch):
    from gpuplan.estimate import elementwise as E
    from gpuplan.estimate import speed as S
    m = get_model("gpt-oss-20b")
    c, _ = _grouped_bytes(_megatron_moe(model="gpt-oss-20b", precision="bf16"), m)
    with_rope = S._elementwise_time(c)[0]
    monkeypatch.setattr(E, "megatron_unfused_rope", lambda *a: False)
    without = S._elementwise_time(c)[0]
    q, kv, h = m.num_heads * m.head_dim, m.num_kv_heads * m.head_dim, m.hidden_size
    scale = 4096 * m.num_layers          # tokens x layers, bf16, no TP, no recompute
    bw = S._bw(c.gpu)
    expected = 52 * (q + kv) * scale / (bw * E.bandwidth_share("eager", "hf")) \
        - 8 * (h + kv) * scale / (bw * E.bandwidth_share("fused"))
    assert with_rope - without == pytest.approx(expected, rel=1e-9)
