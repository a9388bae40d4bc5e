"""HF transformers eager decode: ops per decoder layer by transformers version (docs/speed.md §3.30).

Expected values come from the real generate() runs of scripts/count_hf_decode_ops.py (stored in
estimate/data/hf_decode_ops.csv) and from the op lists read in each version's modeling_llama.py, not from the code
under test; the installed transformers is re-counted here so the stored row cannot drift from a real run."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from gpuplan import api
from gpuplan.estimate import datafiles
from gpuplan.estimate import host_issue as hi

ROOT = Path(__file__).resolve().parents[1]


def _rows():
    return {(r["transformers"], r["kv_layout"]): r for r in datafiles.rows("hf_decode_ops.csv")}


def test_stored_counts_carry_versions_and_date():
    rows = _rows()
    assert {v for v, _ in rows} >= {"4.35.2", "4.46.3"}
    for r in rows.values():
        assert r["torch"] and r["counted_on"].startswith("20")
    assert rows[("4.35.2", "mha")]["attn_implementation"] == "eager"        # no LlamaSdpaAttention before 4.36
    assert rows[("4.46.3", "mha")]["attn_implementation"] == "sdpa"


def test_layer_ops_by_hand_from_modeling_llama():
    # transformers 4.35.2 LlamaDecoderLayer, q_len 1, MHA, fp16 (models/llama/modeling_llama.py): 2 RMSNorms x 8
    # (to fp32, pow, mean, add eps, rsqrt, mul, cast back, weight mul) = 16; q/k/v/o, gate/up/down mm = 7;
    # rotary: cos[position_ids], sin[position_ids] = 2 index (the cos/sin caches are fp16 buffers, their .to() is a
    # no-op), q*cos, rotate_half(q) (neg, cat), *sin, add = 5 for q and 5 for k; past KV torch.cat = 2;
    # eager attention: matmul (bmm), / sqrt(d) (div), + mask (add), softmax(dtype=float32) (cast up, _softmax),
    # .to(fp16) (cast back), matmul (bmm) = 7; residual adds 2; silu, mul = 2.
    v435 = 16 + 7 + 2 + 10 + 2 + 7 + 2 + 2
    # transformers 4.46.3: the same, but rotary cos/sin are computed once per forward (no per-layer index), the
    # cache is DynamicCache.update's torch.cat, and one scaled_dot_product_attention replaces the 7 eager ops
    v446 = 16 + 7 + 10 + 2 + 1 + 2 + 2
    rows = _rows()
    assert int(rows[("4.35.2", "mha")]["decode_ops_per_layer"]) == v435 == 48
    assert int(rows[("4.46.3", "mha")]["decode_ops_per_layer"]) == v446 == 40
    # GQA: repeat_kv's expand + reshape copies K and V (2 clones) in both 4.x versions
    assert int(rows[("4.35.2", "gqa")]["decode_ops_per_layer"]) == v435 + 2
    assert int(rows[("4.46.3", "gqa")]["decode_ops_per_layer"]) == v446 + 2


def test_version_scale():
    assert hi.hf_decode_version_scale("4.35", True) == pytest.approx(48 / 40)
    assert hi.hf_decode_version_scale("4.35.2", False) == pytest.approx(50 / 42)
    assert hi.hf_decode_version_scale("4.46.3", False) == 1.0
    assert hi.hf_decode_version_scale("unknown", True) == 1.0
    assert hi.hf_decode_version_scale("4.40", True) == 1.0          # not counted: the constant as read
    assert hi.hf_decode_version_scale(None, False) == 1.0


def _tpot(**infer) -> tuple[float, dict]:
    scn = {"model": "llama-2-13b-hf", "task": "infer", "hardware": {"gpu": "a100-sxm-80gb", "count": 1},
           "infer": {"engine": "hf", "weights": "fp16", "kv_cache": "fp16", "prompt_len": 512, "output_len": 512,
                     "concurrency": 1, **infer}}
    perf = api.estimate(scn).performance
    return perf.tpot_s, perf.details


def test_llama2_13b_on_435_is_host_bound_at_the_scaled_constant():
    # 40 layers x 0.77 ms x 48 / 40 = 36.96 ms on the reference host (the A100's default host rates 1.0)
    base, d0 = _tpot()
    t435, d = _tpot(transformers_version="4.35")
    assert d["decode_bound"] == "host" and d0["decode_bound"] == "host"
    assert base == pytest.approx(40 * 0.77e-3, rel=0.02)
    assert t435 == pytest.approx(40 * 0.77e-3 * 48 / 40, rel=0.02)
    assert _tpot(transformers_version="4.46.3")[0] == pytest.approx(base, rel=1e-9)


def test_bad_version_is_rejected():
    with pytest.raises(Exception):
        _tpot(transformers_version="four")


def test_installed_transformers_recount_matches_stored_row():
    """Re-run the counter on the installed transformers (a tiny MHA Llama, 2 and 3 layers); if its version has a
    stored row, the per-layer count must match."""
    transformers = pytest.importorskip("transformers")
    key = (transformers.__version__, "mha")
    if key not in _rows():
        pytest.skip(f"transformers {transformers.__version__} has no stored row")
    spec = importlib.util.spec_from_file_location("count_hf_decode_ops", ROOT / "scripts/count_hf_decode_ops.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["count_hf_decode_ops"] = mod
    spec.loader.exec_module(mod)
    a, b = mod._child(2, 4), mod._child(3, 4)
    per = {y - x for x, y in zip(a["layer"], b["layer"])}
    assert per == {int(_rows()[key]["decode_ops_per_layer"])}
