"""Transformer Engine's ring (P2P) context-parallel attention: the bytes it moves outside the attention kernels
(estimate/context_parallel.py). Expected values are hand counts of AttnFuncWithCPAndKVP2P's causal, 16-bit branches
at NVIDIA/TransformerEngine v1.10 (@08a85d3b transformer_engine/pytorch/attention.py), not the function's output."""
import pytest

from gpuplan.estimate.context_parallel import te_p2p_rank_bytes, te_p2p_ring_time

# cp = 2, one sequence a micro-batch (the half selects q[:, 1] / kv[:, 0] are views of contiguous memory).
# In units of the local q bytes (Q) and k+v bytes (KV); copy = read + write (2x), add_ = 2 reads + write (3x).
#
# rank 0  forward: cat(k, v) 2KV (L1459); out = zeros_like(q) Q (L1949); corrections step 0 whole 3Q, step 1 (> rank)
#                  second half 1.5Q (L1987-2022)
#         backward: copy_(kv) into the ring buffer 2KV (L2198);
#                  i=0 (the half-Q step): dq[:, 1].copy_ Q (L2651); cat(dk, dv) 2KV (L2690); dkv.copy_ 2KV (L2748)
#                  i=1 (diagonal): dq[:, 0].copy_ + dq[:, 1].add_ 1 + 1.5 = 2.5Q (L2635-2636); cat 2KV;
#                                  dkv[:, :, 0].add_ + dkv[:, :, 1].copy_ 1.5 + 1 = 2.5KV (L2721-2722)
# rank 1  forward: cat 2KV; zeros Q; corrections: both steps <= rank, whole: 3Q + 3Q
#         backward: copy_ 2KV; i=0 (the half-KV step): dq.copy_ 2Q (L2632); cat of half-size dK, dV 1KV;
#                  dkv[:, :, 0].copy_ 1KV (L2733); i=1: dq.add_ 3Q (L2629); cat 2KV; dkv.add_ 3KV (L2729)
HAND_B1 = {0: {"copies_q": 1 + 1 + 2.5, "corr_q": 3 + 1.5, "kv": 2 + 2 + 2 + 2 + 2 + 2.5, "fwd_q": 1 + 4.5, "fwd_kv": 2},
           1: {"copies_q": 1 + 2 + 3, "corr_q": 6, "kv": 2 + 2 + 1 + 1 + 2 + 3, "fwd_q": 1 + 6, "fwd_kv": 2}}


@pytest.mark.parametrize("rank", [0, 1])
def test_cp2_one_sequence_matches_the_hand_count(rank):
    h = HAND_B1[rank]
    only_q = te_p2p_rank_bytes(2, rank, q=1.0, kv=0.0)
    only_kv = te_p2p_rank_bytes(2, rank, q=0.0, kv=1.0)
    assert only_q.copies == pytest.approx(h["copies_q"])
    assert only_q.corrections == pytest.approx(h["corr_q"])
    assert only_kv.copies == pytest.approx(h["kv"])
    assert only_kv.corrections == 0.0
    assert only_q.forward == pytest.approx(h["fwd_q"])
    assert only_kv.forward == pytest.approx(h["fwd_kv"])


def test_cp2_several_sequences_copy_the_halves():
    # bshd with b > 1: q[:, 1] / kv[:, 0] are strided; .contiguous() copies them. Rank 0: forward step 1 q half Q
    # (L1737), backward i=0 q, out, dout halves 3Q (L2442-2447 fused branch). Rank 1: forward step 1 kv half KV
    # (L1625), backward i=0 kv half KV.
    assert te_p2p_rank_bytes(2, 0, 1.0, 0.0, halves_copied=True).copies == pytest.approx(4.5 + 1 + 3)
    assert te_p2p_rank_bytes(2, 0, 0.0, 1.0, halves_copied=True).copies == pytest.approx(12.5)
    assert te_p2p_rank_bytes(2, 1, 1.0, 0.0, halves_copied=True).copies == pytest.approx(6)
    assert te_p2p_rank_bytes(2, 1, 0.0, 1.0, halves_copied=True).copies == pytest.approx(11 + 1 + 1)


def test_output_corrections_by_rank_for_cp4():
    # rank r corrects the whole output for steps 0..r (3Q each) and its second half for the other cp-1-r (1.5Q)
    for r in range(4):
        assert te_p2p_rank_bytes(4, r, 1.0, 0.0).corrections == pytest.approx(3 * (r + 1) + 1.5 * (3 - r))


def test_no_context_parallelism_adds_nothing():
    assert te_p2p_ring_time(1, 1e9, 1e9, 1e12, 1e12) == 0.0


def _megatron_cp2(framework="megatron", **train):
    return {"model": "llama-3.1-8b", "task": "train", "framework": framework,
            "hardware": {"gpu": "h100-sxm", "count": 8, "gpus_per_node": 8},
            "parallel": {"tp": 1, "pp": 1, "cp": 2, "dp": 4, "zero": 1},
            "train": {"seq_len": 8192, "micro_batch": 1, "global_batch": 4, "precision": "bf16",
                      "recompute": "none", **train}}


def test_megatron_cp2_step_carries_the_ring_bytes():
    # Llama-3.1-8B, TP 1, CP 2, one micro-batch of 8,192 tokens: 4,096 local tokens; Q = 4096 x 32 x 128 x 2 B,
    # KV = 4096 x 8 x (128 + 128) x 2 B. The busiest rank (rank 1: 12Q + 11KV against rank 0's 9Q + 12.5KV at these
    # sizes) moves 6Q + 11KV in copies and 6Q in the compiled corrections, per layer; 32 layers. H100 SXM 3.35 TB/s,
    # vectorised-copy share 0.8837 and compiled share 0.5528 (elementwise_bandwidth.csv, measured on the H200).
    from gpuplan import api
    from gpuplan.estimate.speed import performance_details
    Q, KV = 4096 * 32 * 128 * 2, 4096 * 8 * 256 * 2
    bw = 3350e9
    expected = 32 * ((6 * Q + 11 * KV) / (bw * 0.8837) + 6 * Q / (bw * 0.5528))
    det = performance_details(api.estimate(_megatron_cp2()).performance)
    assert det["cp_ring_elementwise_s"] == pytest.approx(expected, rel=2e-3)


def test_other_stacks_and_cp1_carry_no_ring_bytes():
    from gpuplan import api
    from gpuplan.estimate.speed import performance_details
    no_cp = _megatron_cp2()
    no_cp["parallel"] = {"tp": 1, "pp": 1, "cp": 1, "dp": 8, "zero": 1}
    assert "cp_ring_elementwise_s" not in performance_details(api.estimate(no_cp).performance)
    assert "cp_ring_elementwise_s" not in performance_details(api.estimate(_megatron_cp2("torchtitan")).performance)


def test_all_gather_cp_carries_no_ring_bytes_and_launches_its_flag():
    # parallel.cp_comm_type all_gather (Megatron --cp-comm-type; Meta's Llama 3 CP, paper 3.3.2): K/V are
    # all-gathered, TE's P2P ring does not run, nothing is counted; Megatron's launch line names the type
    from gpuplan import api
    from gpuplan.estimate.speed import performance_details
    scn = _megatron_cp2()
    scn["parallel"]["cp_comm_type"] = "all_gather"
    assert "cp_ring_elementwise_s" not in performance_details(api.estimate(scn).performance)
    p2p = _megatron_cp2()
    t_p2p = api.estimate(p2p).performance.step_time_s
    t_ag = api.estimate(scn).performance.step_time_s
    assert t_p2p - t_ag == pytest.approx(performance_details(api.estimate(p2p).performance)["cp_ring_elementwise_s"],
                                         rel=1e-4)       # details round to the microsecond
    from gpuplan.launch import launch_files
    from gpuplan.scenario import scenario_from_dict
    text = "\n".join(launch_files(scenario_from_dict(scn), "megatron").values())
    assert "--context-parallel-size 2" in text and "--cp-comm-type all_gather" in text
    assert "--cp-comm-type" not in "\n".join(launch_files(scenario_from_dict(p2p), "megatron").values())
