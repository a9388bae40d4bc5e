"""The pieces of estimate/memory.py's training phases, each against hand-worked bytes (Llama-3.2-1B:
1,235,814,400 parameters, 16 layers, h 2048, tied 128256 x 2048 embedding)."""
import ast
import inspect

import pytest

from gpuplan.estimate import memory as M
from gpuplan.models import get_model
from gpuplan.scenario import scenario_from_dict

L1B = get_model("llama-3.2-1b")
N = 1235814400
LAYER = 2 * 2048 * 2048 + 2 * 2048 * 512 + 3 * 2048 * 8192 + 2 * 2048     # linears + two norms


def _scn(train=None, parallel=None, framework="hf", count=None):
    par = {"zero": 0, **(parallel or {})}
    n = count or par.get("dp", 1) * par.get("tp", 1) * par.get("pp", 1) * par.get("cp", 1)
    tr = {"seq_len": 1024, "micro_batch": 1, **(train or {})}
    method = tr.get("method", "full")
    return scenario_from_dict({"model": "llama-3.2-1b", "task": "train" if method == "full" else "finetune",
                               "hardware": {"gpu": "h100-sxm", "count": n, "gpus_per_node": 8},
                               "parallel": par, "train": tr, "framework": framework})


def _ts(scn, stage="only"):
    return M._train_setup(scn, L1B, stage)


def test_model_states_mixed_precision_adamw():
    # fp32 params + fp32 grads + AdamW m, v (8) + foreach temporary (4) per parameter
    assert M._model_states(_ts(_scn())) == (4 * N, 4 * N, 8 * N, 4 * N)


@pytest.mark.parametrize("zero,div", [(1, (1, 1, 8, 8)), (2, (1, 8, 8, 8)), (3, (8, 8, 8, 8))])
def test_model_states_zero_stages(zero, div):
    w, g, o, t = M._model_states(_ts(_scn(parallel={"dp": 8, "zero": zero})))
    assert (w, g, o, t) == (4 * N / div[0], 4 * N / div[1], 8 * N / div[2], 4 * N / div[3])


def test_model_states_lora_adapters_only_are_trained():
    lora = _ts(_scn(train={"method": "lora", "lora_rank": 16, "lora_targets": ["q_proj", "v_proj"]}))
    adapters = 16 * 16 * ((2048 + 2048) + (2048 + 512))        # layers x rank x (in + out) of q and v
    w, g, o, t = M._model_states(lora)
    assert g == 4 * adapters and o == 8 * adapters and t == 4 * adapters
    assert w == 2 * N + 4 * adapters                          # frozen 16-bit base + fp32 adapters


def test_offload_moves_optimizer_states_and_master_copy_to_host():
    ts = _ts(_scn(parallel={"dp": 8, "zero": 3, "offload": "optimizer"}))
    notes: list[str] = []
    (w, g, o, t), cpu = M._offload(ts, M._model_states(ts), notes)
    assert (o, t) == (0.0, 0.0) and w == 4 * N / 8
    assert cpu == 8 * N / 8 + N * 4 / 8
    assert any("offloaded" in n for n in notes)


def test_parameter_offload_needs_zero3():
    ts = _ts(_scn(parallel={"dp": 8, "zero": 2, "offload": "optimizer+params"}))
    notes: list[str] = []
    (w, g, _, _), _ = M._offload(ts, M._model_states(ts), notes)
    assert w == 4 * N and any("needs ZeRO-3" in n for n in notes)


def test_shard_buffers_fsdp():
    assert M._shard_buffers(_ts(_scn())) == (0.0, 0.0)
    gather, root = M._shard_buffers(_ts(_scn(parallel={"dp": 8, "zero": 3})))
    assert gather == LAYER * 2                                # one 16-bit layer all-gathered
    assert root == (128256 * 2048 + 2048) * 2                 # embedding (tied head) + final norm


def test_autocast_copies():
    notes: list[str] = []
    on, copies = M._autocast(_ts(_scn()), notes)
    assert on and copies == (16 * (LAYER - 2 * 2048) + 128256 * 2048) * 2   # linears + tied head, 16-bit
    on, copies = M._autocast(_ts(_scn(train={"recompute": "full"})), [])
    assert copies == 128256 * 2048 * 2                        # checkpointed layers recast in recompute
    assert M._autocast(_ts(_scn(train={"master_weights": False})), []) == (False, 0.0)


@pytest.mark.parametrize("pp,vpp,stage,accum,expected", [
    (1, 1, "only", 8, 1.0), (4, 1, "first", 8, 4.0), (4, 1, "first", 2, 2.0), (4, 1, "last", 8, 1.0),
    (4, 2, "first", 8, 4.0 * (1 + 3 / 8))])
def test_in_flight_microbatches(pp, vpp, stage, accum, expected):
    ts = _ts(_scn(parallel={"pp": pp, "vpp": vpp}), stage)
    assert M._in_flight(ts, accum) == expected


def test_saved_activations_no_recompute_and_full_recompute():
    ts = _ts(_scn(train={"master_weights": False}))
    setup = M._activation_setup(ts, autocast=False)
    sv = M._saved_activations(ts, setup, 1.0, [])
    assert sv.per_layer_token == 108672                       # DESIGN §4 formula for this shape
    assert sv.saved == 1024 * 16 * 108672 and sv.working == 0.0
    ts_full = _ts(_scn(train={"master_weights": False, "recompute": "full"}))
    full = M._saved_activations(ts_full, M._activation_setup(ts_full, False), 1.0, [])
    assert full.saved == 1024 * 16 * 2 * 2048 and full.working == 1024 * 108672


def test_activation_offload_keeps_two_layers():
    ts = _ts(_scn(train={"master_weights": False, "activation_offload": True}))
    sv = M._saved_activations(ts, M._activation_setup(ts, False), 1.0, [])
    assert sv.cpu == 1024 * 16 * 108672 and sv.saved == 1024 * 2 * 108672


def test_head_and_loss_only_on_the_last_stage():
    ts = _ts(_scn(parallel={"pp": 2}), "first")
    setup = M._activation_setup(ts, False)
    assert M._head_and_loss(ts, setup, M._saved_activations(ts, setup, 1.0, [])) == (0.0, 0.0)
    last = _ts(_scn(parallel={"pp": 2}), "last")
    setup = M._activation_setup(last, False)
    head, logits = M._head_and_loss(last, setup, M._saved_activations(last, setup, 1.0, []))
    assert head == 1024 * (2 * 2 + 2) * 2048 and logits > 0


def test_dequant_temporary_is_the_largest_matrix():
    assert M._dequant_temp(_ts(_scn())) == 0.0
    q = _ts(_scn(train={"method": "qlora"}))
    assert M._dequant_temp(q) == 2048 * 8192 * 2              # gate/up/down: the largest decoder linear


def test_no_training_piece_is_longer_than_60_lines():
    tree = ast.parse(inspect.getsource(M))
    long = [(n.name, n.end_lineno - n.lineno + 1) for n in ast.walk(tree)
            if isinstance(n, ast.FunctionDef) and n.name.startswith("_train") and n.end_lineno - n.lineno + 1 > 60]
    assert long == []


def test_tied_embedding_gradient_arrives_twice_at_the_end_of_backward():
    # SmolLM-135M ties embedding and lm_head: 49,152 x 576 parameters; with fp32 gradients (HF mixed
    # precision) the embedding's own gradient, added into the shared .grad at the end of backward, is
    # 49,152 x 576 x 4 = 113,246,208 bytes beside it; LoRA (frozen embedding) and ZeRO-2 (sharded gradients) none
    from gpuplan.estimate.memory import _tied_grad_accumulation, _train_setup
    from gpuplan.models import get_model
    from gpuplan.scenario import scenario_from_dict
    model = get_model("smollm-135m")

    def extra(**kw):
        train = {"seq_len": 512, "micro_batch": 1, **kw.pop("train", {})}
        scn = scenario_from_dict({"model": "smollm-135m", "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": 2},
                                  "parallel": {"zero": kw.pop("zero", 0)}, "train": train}, "test")
        return _tied_grad_accumulation(_train_setup(scn, model, "only"))
    assert extra() == 113_246_208
    assert extra(zero=2) == 0.0
    assert extra(train={"method": "lora"}) == 0.0


def test_tied_embedding_gradient_sum_without_autocast_holds_two_extra_copies():
    # pure bf16 (no master weights, no autocast): the head's gradient, the embedding's and their out-of-place
    # sum are alive together, 2 x 49,152 x 576 x 2 bytes beside the .grad-to-be
    from gpuplan.estimate.memory import _tied_grad_accumulation, _train_setup
    from gpuplan.models import get_model
    from gpuplan.scenario import scenario_from_dict
    model = get_model("smollm-135m")
    scn = scenario_from_dict({"model": "smollm-135m", "task": "finetune", "hardware": {"gpu": "h100-sxm"},
                              "train": {"seq_len": 512, "micro_batch": 1, "precision": "bf16",
                                        "master_weights": False}}, "test")
    assert _tied_grad_accumulation(_train_setup(scn, model, "only")) == 2 * 49_152 * 576 * 2
