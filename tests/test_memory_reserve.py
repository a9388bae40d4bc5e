"""Cached segments the loss block cannot use (estimate/memory.py stranded_layer_segments, fsdp1_gather_segments,
the cap in _finish) and the unsharded QLoRA block constants (quant_constants_bytes), against hand-worked bytes on
the Llama-2 shapes (7B: h 4096, intermediate 11,008; vocab 32,000), and the whole-step allocator replay
(scripts/trace_step_reserve.py) against the lower bound."""
import sys
from pathlib import Path

import pytest

from gpuplan.estimate import memory as M
from gpuplan.models import get_model
from gpuplan.scenario import scenario_from_dict
from script_module import load_script

GiB, MiB = 2 ** 30, 2 ** 20
L7 = get_model("llama-2-7b-hf")
SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _scn(train=None, parallel=None, framework="hf", gpus=1, model="llama-2-7b-hf"):
    tr = {"method": "lora", "precision": "bf16", "master_weights": False, "seq_len": 2048, "micro_batch": 1,
          "global_batch": gpus, "recompute": "full", "attention": "sdpa", "lora_rank": 64,
          "lora_targets": ["q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "down_proj"], **(train or {})}
    par = {"zero": 3 if gpus > 1 else 0, "dp": gpus, **(parallel or {})}
    return scenario_from_dict({"model": model, "task": "finetune", "framework": framework,
                               "hardware": {"gpu": "rtx-3090", "count": gpus}, "parallel": par, "train": tr}, "test")


def _layer_segments(scn, model=L7):
    ts = M._train_setup(scn, model, "only")
    setup = M._activation_setup(ts, False)
    sv = M._saved_activations(ts, setup, 1.0, [])
    head, _ = M._head_and_loss(ts, setup, sv)
    return M.stranded_layer_segments(ts, sv, head)


def test_layer_segments_exist_only_under_full_recompute_with_a_full_loss():
    assert _layer_segments(_scn()) > 0
    assert _layer_segments(_scn(train={"recompute": "none"})) == 0.0
    assert _layer_segments(_scn(train={"loss": "chunked"})) == 0.0


def test_lora_on_up_proj_adds_one_intermediate_tensor_per_token():
    # peft's out-of-place add: 2 bytes x 11,008 x 2,048 tokens = 45,088,768
    no_up = _scn(train={"lora_targets": ["q_proj", "k_proj", "v_proj", "gate_proj", "down_proj"]})
    assert _layer_segments(_scn()) - _layer_segments(no_up) == 2 * 11008 * 2048


def test_stranded_reserve_fills_at_most_the_headroom():
    scn = _scn(train={"micro_batch": 8, "held_logits": "fp32"})
    free = M.estimate_memory(scn, L7, 10 ** 15)
    allocated = sum(v for k, v in free.components.items() if k != "runtime_overhead")
    reserve = free.components["runtime_overhead"] - M.Overhead().bytes(allocated, 1)
    assert reserve > GiB          # 16-bit logits (0.98 GiB) + the layer segments
    tight = M.estimate_memory(scn, L7, free.peak_bytes_per_gpu - GiB)
    # the allocator frees wholly free segments before it fails: the same run fits, at exactly the capacity
    assert tight.fits and tight.peak_bytes_per_gpu == free.peak_bytes_per_gpu - GiB
    # and says why the peak equals the capacity (a reader would otherwise take 100 % for an OOM)
    assert any("elastic" in n for n in tight.notes) and not any("elastic" in n for n in free.notes)
    over = M.estimate_memory(scn, L7, allocated // 2)        # the allocations alone do not fit: no such note
    assert not over.fits and not any("elastic" in n for n in over.notes)


def test_fsdp1_unshard_stream_keeps_a_second_unit():
    ts = M._train_setup(_scn(gpus=2), L7, "only")
    unit = M._shard_buffers(ts)[0]
    assert unit == 202_383_360 * 2          # one Llama-2-7B decoder layer in bf16
    assert M.fsdp1_gather_segments(ts) == unit
    offload = M._train_setup(_scn(gpus=2, parallel={"offload": "optimizer+params"}), L7, "only")
    assert M.fsdp1_gather_segments(offload) == unit * (1 + 2 / 2)   # + each in-flight unit's host shard copy
    assert M.fsdp1_gather_segments(M._train_setup(_scn(gpus=2, framework="torchtitan"), L7, "only")) == 0.0
    assert M.fsdp1_gather_segments(M._train_setup(_scn(gpus=1), L7, "only")) == 0.0


def test_qlora_block_constants_are_every_ranks_full_copy():
    q = {"method": "qlora", "qlora_double_quant": True}
    one = M._model_states(M._train_setup(_scn(train=q), L7, "only"))[0]
    two = M._model_states(M._train_setup(_scn(train=q, gpus=2), L7, "only"))[0]
    # double quantization: 8 / 64 + 32 / (64 x 256) bits per weight of the 6,476,005,376 quantized weights
    const = 6_476_005_376 * (8 / 64 + 32 / (64 * 256)) / 8
    assert two - one / 2 == pytest.approx(const / 2)
    # CPU offload moves the packed codes, not the constants
    off = M._train_setup(_scn(train=q, gpus=2, parallel={"offload": "optimizer+params"}), L7, "only")
    assert M._offload(off, M._model_states(off), [])[0][0] == pytest.approx(const)


def _load(name):
    return load_script(f"scripts/{name}.py")


def test_replay_merges_the_freed_block_with_its_own_neighbours():
    # one 6u segment split into three 2u blocks; freeing them in the order 1, 3, 2 must leave one free 6u block
    u = 64 * MiB
    events = [(1, 6 * u), (1, -6 * u), (2, 2 * u), (3, 2 * u), (4, 2 * u), (2, -2 * u), (4, -2 * u), (3, -2 * u),
              (5, 6 * u)]
    assert _load("trace_loss_block").replay(events, False) == (6 * u, 6 * u)


def test_whole_step_replay_strands_at_least_the_lower_bound():
    pytest.importorskip("peft")
    tsr = _load("trace_step_reserve")
    sys.path.insert(0, str(SCRIPTS))
    try:
        events, logits, scn = tsr.step_events("lora", 1, 2048, layers=4, steps=2)
    finally:
        sys.path.remove(str(SCRIPTS))
    allocated, reserved = _load("trace_loss_block").replay(events, False)
    beside_logits = reserved - allocated - 2 * logits
    assert beside_logits >= _layer_segments(scn)
