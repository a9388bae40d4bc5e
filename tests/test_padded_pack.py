"""train.pack_tokens: a pack padded to seq_len whose document boundaries cover the padding (open-instruct's packed
OLMo-core DPO after #1670: doc_lens_from_cu_seq_lens emits the trailing pad as its own segment; concatenated_inputs
runs the chosen side's padding into the first rejected document, allenai/open-instruct@93a5b3c5). Attention pairs
by hand, with and without sliding windows; the policy pass keeps the pair's layout; refusals; the Olmo-3-7B entry
the row (preference.csv OI09) needs, by hand arithmetic on its shapes."""
from __future__ import annotations

import pytest

from gpuplan import api
from gpuplan.errors import GpuplanError, UnsupportedError
from gpuplan.estimate.flops import SegmentedSpan, attention_flops_per_token_forward, attention_span, \
    padded_pack_segments
from gpuplan.estimate.posttrain import policy_scenario
from gpuplan.launch import launch_files
from gpuplan.models import get_model
from gpuplan.scenario import scenario_from_dict

L1B = get_model("llama-3.2-1b")   # 16 layers, 32 query heads, head dim 64, full causal attention everywhere
OLMO3 = get_model("olmo-3-7b")


def _scn(model="llama-3.2-1b", pair_concat="sequence", seq_len=16384, **train):
    t = {"objective": "dpo", "reference": "precomputed", "seq_len": seq_len, "micro_batch": 1,
         "allow_longer_context": True, "pair_concat": pair_concat, **train}
    return {"model": model, "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": 1}, "train": t}


def _train(**kw):
    return scenario_from_dict(_scn(**kw)).train


def _tri(n):            # causal query-key pairs of an n-token segment
    return n * (n + 1) // 2


def _band(n, w):        # with a sliding window of w keys: the first w queries see 1..w keys, the rest w
    return _tri(n) if n <= w else _tri(w) + (n - w) * w


def test_joined_pair_segments_follow_open_instructs_offsets():
    # 4 documents of 849 tokens a side in 16,384: 3,396 real, 12,988 padding. The rejected cu_seq_lens start at the
    # padded chosen length, so the chosen padding and the first rejected document form one 13,837-token segment
    segs = padded_pack_segments(16384, 849, 3396, "sequence")
    assert segs == ((849, 4.0), (12988 + 849, 1.0), (849, 3.0), (12988, 1.0))
    assert sum(L * c for L, c in segs) == 32768
    assert padded_pack_segments(16384, 849, 3396, "batch") == ((849, 4.0), (12988, 1.0))


def test_attention_of_a_padded_joined_pair_by_hand():
    per_pair = 16 * 32 * 2 * (64 + 64)              # llama-3.2-1b: QK^T and PV, all layers
    pairs = 7 * _tri(849) + _tri(13837) + _tri(12988)
    assert pairs == 2_525_775 + 95_738_203 + 84_350_566 == 182_614_544
    span = attention_span(_train(document_len=849, pack_tokens=3396))
    assert isinstance(span, SegmentedSpan)
    got = attention_flops_per_token_forward(L1B, span) * 32768
    assert got == pytest.approx(per_pair * pairs, rel=1e-12)
    # the same documents filling the row (no padding) attend far less; no doc_lens: the whole 32,768-token row
    full = attention_flops_per_token_forward(L1B, attention_span(_train(document_len=849))) * 32768
    assert full == pytest.approx(per_pair * 32768 / 849 * _tri(849), rel=1e-12)
    assert attention_span(_train(pack_tokens=None)) == 32768


def test_sliding_windows_cap_each_segment():
    # Olmo-3-7B: 4,096-token windows on 24 of 32 layers, full attention on every fourth; 32 heads of 128
    per_layer_pair = 32 * 2 * (128 + 128)
    full = 7 * _tri(849) + _tri(13837) + _tri(12988)
    band = 7 * _tri(849) + _band(13837, 4096) + _band(12988, 4096)
    assert band == 2_525_775 + (8_390_656 + 9741 * 4096) + (8_390_656 + 8892 * 4096) == 95_627_855
    span = attention_span(_train(model="olmo-3-7b", document_len=849, pack_tokens=3396))
    got = attention_flops_per_token_forward(OLMO3, span) * 32768
    assert got == pytest.approx(per_layer_pair * (8 * full + 24 * band), rel=1e-12)


def test_the_policy_pass_keeps_the_pairs_layout():
    # posttrain.policy_scenario turns the pair into one 32,768-token SFT row; its attention is the joined pair's,
    # not one side of 29,372 real-and-padding tokens after 3,396 of documents
    scn = scenario_from_dict(_scn(document_len=849, pack_tokens=3396))
    pol = policy_scenario(scn).train
    assert pol.seq_len == 32768
    assert attention_span(pol).segments == attention_span(scn.train).segments
    single = attention_span(_train(pair_concat="batch", seq_len=32768, document_len=849, pack_tokens=6792))
    assert single.segments == ((849, 8.0), (25976, 1.0))     # what the row would be without the layout


def test_a_fuller_pack_is_faster_the_same_row():
    # the same padded row: more documents, less padding attended as one segment -> less attention, less time
    t = [api.estimate(_scn(document_len=849, pack_tokens=f)).performance.step_time_s for f in (1698, 3396, 16384)]
    assert t[0] > t[1] > t[2]


@pytest.mark.parametrize("train, needle", [
    ({"pack_tokens": 3396}, "document_len is unset"),
    ({"document_len": 849, "pack_tokens": 800}, "document_len <= pack_tokens <= seq_len"),
    ({"document_len": 849, "pack_tokens": 20000}, "document_len <= pack_tokens <= seq_len"),
])
def test_bad_packs_are_refused_with_the_fix(train, needle):
    with pytest.raises(GpuplanError) as exc:
        scenario_from_dict(_scn(pair_concat="batch", **train))
    assert needle in str(exc.value)


def test_launch_refuses_a_padded_pack():
    scn = scenario_from_dict(_scn(pair_concat="batch", document_len=849, pack_tokens=3396))
    with pytest.raises(UnsupportedError) as exc:
        launch_files(scn, "axolotl")
    assert "pack_tokens" in str(exc.value)


def test_olmo3_7b_is_olmo2s_layer_with_windows_by_hand():
    h, i, v, n = 4096, 11008, 100278, 32
    per_layer = 4 * h * h + 3 * h * i + 2 * h + 2 * h     # q,k,v,o + gate,up,down + post-norms + full-width q/k norms
    assert OLMO3.params_total == n * per_layer + 2 * v * h + h == 7_298_011_136
    assert OLMO3.layer_windows == (4096, 4096, 4096, None) * 8
    assert (OLMO3.traits.norm_placement, OLMO3.traits.qk_norm) == ("post", "full")
