"""torchtitan-specific memory mechanisms (estimate/memory.py) against hand-worked bytes on the Llama-3.2-1B shape
(h 2048, vocab 128,256, 16 layers), and the caching-allocator replay of scripts/trace_loss_block.py on a
hand-made allocation sequence."""

import pytest

from gpuplan.estimate import memory as M
from gpuplan.models import get_model
from gpuplan.scenario import scenario_from_dict
from script_module import load_script

L1B = get_model("llama-3.2-1b")
V, H = 128256, 2048
MiB = 2 ** 20


def _scn(train=None, parallel=None, framework="torchtitan"):
    par = {"zero": 0, **(parallel or {})}
    n = par.get("dp", 1) * par.get("tp", 1) * par.get("pp", 1)
    tr = {"seq_len": 1024, "micro_batch": 1, "master_weights": False, **(train or {})}
    return scenario_from_dict({"model": "llama-3.2-1b", "task": "train", "framework": framework,
                               "hardware": {"gpu": "h100-sxm", "count": n, "gpus_per_node": 8},
                               "parallel": par, "train": tr}, "test")


def test_loss_parallel_backward_holds_four_fp32_vocabulary_tensors():
    # saved fp32 log-softmax, zeros_like grad, grad + exp(x), (..) * grad_output: 4 x 4 bytes per local logit
    assert M.loss_block_bytes(_scn(parallel={"tp": 2}), V / 2) == 16 * V / 2
    # no TP: torch's own cross_entropy on the fp32 copy: log-softmax, its grad, the grad into it
    assert M.loss_block_bytes(_scn(), V) == 12 * V
    # compiled loss (torchtitan since bbb1b61) keeps its own rule
    assert M.loss_block_bytes(_scn(train={"compile": True}, parallel={"tp": 2}), V / 2) == 4 * V / 2
    assert M.loss_block_bytes(_scn(parallel={"tp": 2}, framework="hf"), V) == 12 * V


def test_freed_16bit_logits_stay_reserved_only_where_torchtitan_frees_them():
    # 2 bytes x 128,256 x 1,024 tokens on the only (last) stage
    assert M.stranded_logits_bytes(_scn(), L1B, "only") == 2 * V * 1024 == 262_668_288
    assert M.stranded_logits_bytes(_scn(parallel={"tp": 2}), L1B, "only") == V * 1024
    assert M.stranded_logits_bytes(_scn(train={"compile": True}), L1B, "only") == 0.0
    # HF: the 16-bit logits are freed before the fp32 backward requests unless the loop holds the 16-bit output
    assert M.stranded_logits_bytes(_scn(framework="hf"), L1B, "only") == 2 * V * 1024
    assert M.stranded_logits_bytes(_scn(train={"held_logits": "model"}, framework="hf"), L1B, "only") == 0.0
    assert M.stranded_logits_bytes(_scn(framework="megatron"), L1B, "only") == 0.0
    assert M.stranded_logits_bytes(_scn(parallel={"pp": 2}), L1B, "last") == 0.0   # the schedule keeps them


def test_stranded_block_is_reserve_not_allocation():
    scn = _scn(train={"seq_len": 8192, "micro_batch": 2})
    est = M.estimate_memory(scn, L1B, 10 ** 15)
    c = est.components
    assert est.phase == "backward" and sum(c.values()) == est.peak_bytes_per_gpu
    allocated = sum(v for k, v in c.items() if k != "runtime_overhead")
    # 2 bytes x 128,256 x 16,384 tokens on top of the usual overhead, outside the allocated components
    assert c["runtime_overhead"] - M.Overhead().bytes(allocated, 1) == 4_202_692_608


def test_torchtitan_lm_head_input_is_all_gathered_under_sequence_parallel():
    ts = M._train_setup(_scn(parallel={"tp": 2}), L1B, "only")
    setup = M._activation_setup(ts, False)
    sv = M._saved_activations(ts, setup, 1.0, [])
    head, _ = M._head_and_loss(ts, setup, sv)
    # final norm (2 x 2 + 2 bytes per element, sequence-sharded over 2) + the gathered lm_head input's other half
    assert head == 1024 * 6 * H / 2 + 1024 * 2 * H / 2 == 8_388_608
    hf = M._train_setup(_scn(parallel={"tp": 2}, framework="megatron"), L1B, "only")
    sv = M._saved_activations(hf, M._activation_setup(hf, False), 1.0, [])
    assert M._head_and_loss(hf, M._activation_setup(hf, False), sv)[0] == 1024 * 6 * H / 2


@pytest.mark.parametrize("stage,keep,expected", [
    # fwd_cache: 2 micro-batches in flight (1F1B, pp 2) x 2h bytes/token, + 4 output-gradient receive buffers
    ("first", False, 2 * 2 * H * 1024 + 4 * 2 * H * 1024),
    ("first", True, 4 * 2 * H * 1024 + 4 * 2 * H * 1024),   # output_chunks: all 4 micro-batches of the step
    # the current micro-batch's 16-bit logits + 3 activation receive buffers beyond the one in flight
    ("last", False, 1 * 2 * V * 1024 + 3 * 2 * H * 1024),
    ("last", True, 4 * 2 * V * 1024 + 3 * 2 * H * 1024),
])
def test_pipeline_stage_outputs(stage, keep, expected):
    scn = _scn(train={"global_batch": 4, "pp_keep_outputs": keep}, parallel={"pp": 2})
    ts = M._train_setup(scn, L1B, stage)
    sv = M._saved_activations(ts, M._activation_setup(ts, False), 2.0, [])
    in_flight = M._in_flight(ts, 4)
    assert M._pipeline_outputs(ts, sv, in_flight, 4, []) == expected


def _replay():
    return load_script("scripts/trace_loss_block.py").replay


@pytest.mark.parametrize("expandable", [False, True])
def test_allocator_replay_strands_the_freed_16bit_block(expandable):
    # forward: 16-bit logits A (2u), fp32 copy B (4u), log-softmax C (4u); B then A freed; backward: D, E (4u)
    u = 64 * MiB
    events = [(1, 2 * u), (2, 4 * u), (3, 4 * u), (2, -4 * u), (1, -2 * u), (4, 4 * u), (5, 4 * u)]
    allocated, reserved = _replay()(events, expandable)
    # allocated peak C + D + E = 12u; D reuses B's (or the merged A+B) block, E finds no 4u block: 2u stranded
    assert allocated == 12 * u and reserved == 14 * u


def test_allocator_replay_reuses_a_block_that_fits():
    u = 64 * MiB
    events = [(1, 4 * u), (1, -4 * u), (2, 4 * u), (3, 2 * u)]
    assert _replay()(events, False) == (6 * u, 6 * u)


def test_deepspeed_zero3_keeps_parameters_below_the_persistence_threshold_gathered():
    # Llama-3.2-1B: 16 layers x 2 RMSNorm weights of 2,048 + the final norm = 67,584 elements below 1e6; its
    # smallest matrices (k_proj, v_proj: 2,048 x 512 = 1,048,576) are above it
    scn = scenario_from_dict({"model": "llama-3.2-1b", "task": "train", "framework": "deepspeed",
                              "hardware": {"gpu": "h100-sxm", "count": 8, "gpus_per_node": 8},
                              "parallel": {"dp": 8, "zero": 3}, "train": {"seq_len": 1024, "micro_batch": 1}}, "test")
    ts = M._train_setup(scn, L1B, "only")
    assert M._ds_persistent_params(ts) == 16 * 2 * 2048 + 2048 == 67_584
    z2 = scenario_from_dict({**scn.model_dump(mode="json"), "parallel": {"dp": 8, "zero": 2}}, "test")
    base = M._deepspeed_buffers(M._train_setup(z2, L1B, "only"))
    assert base == 3 * 5e8 * 2            # ZeRO-2: the three reduce buckets only


def test_fsdp_under_pipeline_holds_fp32_accumulators_instead_of_sharded_gradients():
    # Llama-3.2-1B on PP 2 x FSDP 2, 4 micro-batches: the first stage holds 8 layers + the 128,256 x 2,048
    # embedding = 749,240,320 parameters. During accumulation each is an unsharded fp32 accumulator (4 bytes);
    # the sharded fp32 gradients (4 bytes / 2) appear only at the last reduce-scatter, as the accumulators go.
    scn = scenario_from_dict({"model": "llama-3.2-1b", "task": "train", "framework": "torchtitan",
                              "hardware": {"gpu": "h100-sxm", "count": 4, "gpus_per_node": 8},
                              "parallel": {"dp": 2, "pp": 2, "zero": 3},
                              "train": {"seq_len": 1024, "micro_batch": 1, "global_batch": 8}}, "test")
    phases, _ = M._train_components(scn, L1B, "first")
    n = 8 * (2 * 2048 * 2048 + 2 * 2048 * 512 + 3 * 2048 * 8192 + 2 * 2048) + 128256 * 2048
    assert n == 749_240_320
    assert phases["backward"]["gradients"] == phases["backward_end"]["gradients"] == n * 4
    assert phases["optimizer_step"]["gradients"] == n * 4 / 2
