"""MoE training mechanisms (estimate/moe.py and their use in the training step): token permutation traffic,
expert-parallel busiest-rank imbalance, and the expert-data-parallel gradient reduction.

Expected numbers are hand arithmetic (written out in each test) or closed forms, never the code under test.
"""
from __future__ import annotations

import math

import pytest

from gpuplan.estimate import speed
from gpuplan.estimate.moe import (dispatch_copies, ep_rank_imbalance, expected_max_std_normal, permute_bytes,
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
    # 1 + 1.42360 x 232.77 / 65,536 = 1.005056
    assert ep_rank_imbalance(8192, 8, 128, 8) == pytest.approx(1.005056, rel=2e-6)
    # tiny batch: T 1, k 2 of E 8, ep 2: var 2 x 1/2 x 1/2 x 6/7 = 0.428571; sigma = sqrt(2 x 0.428571) = 0.92582;
    # mean 2; 1 + 0.564190 x 0.92582 / 2 = 1.26117
    assert ep_rank_imbalance(1, 2, 8, 2) == pytest.approx(1.26117, rel=1e-4)
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
    # 1 + 1.42360 x sqrt(32,768 x 0.826772) / 32,768 = 1.0071508, at 3.35 TB/s x 0.8 (packaged memory efficiency)
    expected = 91_804_925_952 * 1.0071508 / (3.35e12 * 0.8)
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
    # = 3.47224e-4 s; x 4 x 48 layers = 0.0666671 s; x busiest-rank factor 1.0071508 = 0.0671438 s (one micro-batch)
    m, g = get_model("qwen3-30b-a3b"), get_gpu("h100-sxm")
    b = speed.train_performance(_moe_train(ep=8), m, g).breakdown
    assert b["comm_ep_s"] == pytest.approx(0.0671438, rel=1e-5)


def test_training_ep_across_two_nodes_goes_through_each_gpus_nic():
    # EP 16 over two 8-GPU nodes (ib-ndr-400: 50 GB/s per GPU x 0.8, 2 us): per all-to-all half of the
    # 134,217,728 B leaves through the GPU's NIC: 67,108,864 / 40e9 = 1.677722e-3 s (the 7/16 over NVLink,
    # 0.163 ms, runs beside it) + 15 x 2 us = 1.707722e-3 s; x 4 x 48 = 0.3278826 s; busiest of 16 ranks:
    # var 8 x 1/16 x 15/16 x 120/127 = 0.4429134, sigma = sqrt(65,536 x 0.4429134) = 170.374, E[max of 16
    # normals] 1.765991: 1 + 1.765991 x 170.374 / 32,768 = 1.0091822 -> 0.3308954 s
    m, g = get_model("qwen3-30b-a3b"), get_gpu("h100-sxm")
    b = speed.train_performance(_moe_train(ep=16, dp=16, gb=16), m, g).breakdown
    assert b["comm_ep_s"] == pytest.approx(0.3308954, rel=1e-4)


def test_grouped_expert_gemm_efficiency_falls_with_rows_per_expert():
    # packaged Hopper bf16 efficiency 0.9089, d0 = 423.3 (K, N; fitted on training rows), d0_M = 3694
    # (rows of one expert's GEMM; fitted on TensorRT-LLM serving rows). Qwen3-30B-A3B gate projection
    # (K 2048, N 768): 0.9089 x 2048/2471.3 x 768/1191.3 = 0.485580
    from gpuplan.estimate.speed import gemm_efficiency, load_efficiency, training_rows_half
    P = load_efficiency()
    assert P["matmul"]["hopper"]["bf16"] == 0.9089 and P["matmul_dim_half"] == 423.3
    assert P["matmul_rows_half"] == 3694.0
    # serving: 4096 rows per expert x 4096/7790 = 0.255319
    assert gemm_efficiency(P, "hopper", "bf16", 4096, 2048, 768, grouped=True) == pytest.approx(0.255319, rel=1e-4)
    # training takes d0 for the rows too (a serving fit must not drive training): x 4096/4519.3 = 0.440098
    assert training_rows_half(P) == 423.3
    assert gemm_efficiency(P, "hopper", "bf16", 4096, 2048, 768, grouped=True,
                           rows_half=training_rows_half(P)) == pytest.approx(0.440098, rel=1e-4)
    # 512 rows per expert (one eighth), training: x 512/935.3 = 0.265817
    assert gemm_efficiency(P, "hopper", "bf16", 512, 2048, 768, grouped=True,
                           rows_half=423.3) == pytest.approx(0.265817, rel=1e-4)
    # a dense GEMM leaves M to the roofline's memory term
    assert gemm_efficiency(P, "hopper", "bf16", 512, 2048, 768) == pytest.approx(0.485580, rel=1e-5)


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
    # EP 16 over two nodes with HybridEP: per dispatch 0.996904 x T·h·2 B (T 4096, h 2048: 16,777,216 B) through
    # the NIC at 40 GB/s = 4.181319e-4 s (NVLink side: 5.771949 x 16,777,216 / 360e9 = 2.69e-4 s, beside it),
    # + 15 x 2 us = 4.481319e-4 s; x 4 x 48 layers = 0.0860413 s; x busiest of 16 ranks 1.0091822 = 0.0868314 s
    # (the all-to-all dispatcher: 0.3308954 s, test above)
    m, g = get_model("qwen3-30b-a3b"), get_gpu("h100-sxm")
    scn = _moe_train(ep=16, dp=16, gb=16).replace(parallel={"ep_dispatcher": "hybridep"})
    assert speed.train_performance(scn, m, g).breakdown["comm_ep_s"] == pytest.approx(0.0868314, rel=1e-4)


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


def test_dropless_dispatch_warns_of_the_host_sync_but_does_not_change_the_time():
    m, g = get_model("qwen3-30b-a3b"), get_gpu("h100-sxm")
    plain = speed.train_performance(_moe_train(ep=8), m, g)
    assert any("synchronises host and GPU once per MoE layer" in n for n in plain.notes)
    hybrid = speed.train_performance(_moe_train(ep=8).replace(parallel={"ep_dispatcher": "hybridep"}), m, g)
    assert not any("synchronises host" in n for n in hybrid.notes)
    # no expert parallelism: no dispatch across ranks, no note
    assert not any("synchronises host" in n for n in speed.train_performance(_moe_train(ep=1), m, g).notes)


def test_expert_optimizer_states_shard_over_the_expert_data_parallel_group():
    # Megatron's distributed optimizer shards routed-expert states over the ranks that hold the same experts
    # (tp·dp·cp/ep = 1·8·1/8 = 1 here: every rank keeps its experts' whole states), the rest over dp = 8.
    # Qwen3-30B-A3B: 28,991,029,248 routed-expert params of 30,532,122,624 (the registry's counts);
    # 12 B per param (fp32 master + Adam m, v): experts/8 x 12 = 43,486,543,872 B,
    # rest (1,541,093,376) x 12 / 8 = 2,311,640,064 B; sum 45,798,183,936 B (the old dp-wide sharding gave 7.7e9)
    from gpuplan.pipeline import evaluate
    comp = evaluate(_moe_train(ep=8)).to_json()["memory"]["components"]
    assert comp["optimizer_states"] == pytest.approx(45_798_183_936, rel=1e-3)
