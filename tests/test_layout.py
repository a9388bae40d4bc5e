"""estimate/layout.py: which parameters one rank holds under TP / PP / EP (counts worked out by hand)."""
import pytest

from gpuplan.estimate.layout import rank_params, stages
from gpuplan.models import get_model

L1B = get_model("llama-3.2-1b")     # 16 layers, h 2048, vocab 128256, tied embeddings
LAYER_LINEAR = 2 * 2048 * 2048 + 2 * 2048 * 512 + 3 * 2048 * 8192     # 60,817,408
LAYER_NORMS = 2 * 2048
EMBED = 128256 * 2048                                                   # 262,668,288


def test_single_rank_holds_everything():
    rp = rank_params(L1B, stage="only")
    assert rp.layers == 16 * (LAYER_LINEAR + LAYER_NORMS)
    assert rp.embedding == EMBED and rp.lm_head == 0 and rp.model_norm == 2048 and rp.vision == 0
    assert rp.linear == 16 * LAYER_LINEAR
    assert rp.total == L1B.params_total == 1235814400
    assert rp.stage_layers == 16 and rp.layer_max == LAYER_LINEAR + LAYER_NORMS


def test_tensor_parallel_splits_matrices_not_norms():
    rp = rank_params(L1B, tp=2, stage="only")
    assert rp.layers == 16 * (LAYER_LINEAR / 2 + LAYER_NORMS)
    assert rp.embedding == EMBED / 2 and rp.model_norm == 2048


def test_hf_tensor_parallel_replicates_the_vocabulary():
    assert rank_params(L1B, tp=2, stage="only", vocab_parallel=False).embedding == EMBED


def test_pipeline_stages():
    first = rank_params(L1B, pp=2, stage="first")
    last = rank_params(L1B, pp=2, stage="last")
    assert first.stage_layers == last.stage_layers == 8
    assert first.layers == last.layers == 8 * (LAYER_LINEAR + LAYER_NORMS)
    assert (first.embedding, first.model_norm, first.lm_head) == (EMBED, 0, 0)
    # the last stage holds the final norm and a copy of the tied embedding as its lm_head
    assert (last.embedding, last.model_norm, last.lm_head) == (0, 2048, EMBED)


def test_uneven_pipeline_rounds_layers_up():
    assert rank_params(L1B, pp=3, stage="first").stage_layers == 6        # ceil(16 / 3)


def test_untied_head_sits_on_the_last_stage():
    m = get_model("llama-3.1-8b")      # untied, vocab 128256, h 4096
    assert rank_params(m, pp=2, stage="first").lm_head == 0
    assert rank_params(m, pp=2, stage="last").lm_head == 128256 * 4096
    assert rank_params(m, pp=2, tp=4, stage="last").lm_head == 128256 * 4096 / 4


def test_expert_parallel_splits_experts_only():
    m = get_model("mixtral-8x7b-v0.1")   # 32 layers, 8 experts of 3 x 4096 x 14336
    expert_layer = 8 * 3 * 4096 * 14336
    one = rank_params(m, stage="only")
    ep8 = rank_params(m, ep=8, stage="only")
    assert one.layers - ep8.layers == pytest.approx(32 * expert_layer * (1 - 1 / 8))
    # with ep > 1 the experts are not tensor-split: tp only divides attention
    tp2_ep8 = rank_params(m, tp=2, ep=8, stage="only")
    tp2 = rank_params(m, tp=2, stage="only")
    assert tp2.layers - tp2_ep8.layers == pytest.approx(32 * expert_layer * (1 / 2 - 1 / 8))


def test_vision_tower_on_the_first_stage():
    m = get_model("gemma-3-4b-it")
    assert rank_params(m, stage="only").vision == m.params_vision > 0
    assert rank_params(m, pp=2, stage="last").vision == 0


def test_stages():
    assert stages(1) == ("only",)
    assert stages(4) == ("first", "last")
