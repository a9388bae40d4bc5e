"""torchtitan's per-op selective AC re-runs a block's forward element-wise ops in its backward (torchtitan @9dec370
parallelize_llama.py L213-276: only mm, the SDPA kernels, reduce_scatter, abs and max are saved; every other op of the
checkpointed block is PREFER_RECOMPUTE). gpuplan charges that recompute as FORWARD_SHARE of the layer's traced
forward + backward element-wise bytes (speed._elementwise_time, recompute.RecomputePlan.elementwise_share = 1). The
expected value here is the traced forward of the same layer (scripts/trace_elementwise.py's torchtitan block, forward
only), not gpuplan's constant: docs/speed.md §2.17 item 2 (checked as a cause of the TT rows' eager-vs-compiled gap,
and refuted: the traced forward is a third of the layer's bytes)."""
from __future__ import annotations

import pytest

from gpuplan.estimate import elementwise as ew
from gpuplan.estimate.recompute import recompute_plan
from gpuplan.estimate.speed import FORWARD_SHARE
from gpuplan.models.registry import get_model
from script_module import load_script


def _forward_bytes_per_token(torch, mod, h, i, heads, kv_heads, b=1, s=64):
    torch.manual_seed(0)
    blk, x, extra = mod.build_layer("torchtitan", h, i, heads, kv_heads, b, s)
    with mod.ByteCounter() as bc:
        blk(x, *extra)
    return bc.total / (b * s)


def test_sac_recompute_charge_is_the_traced_forward_of_the_torchtitan_block():
    torch = pytest.importorskip("torch")
    mod = load_script("scripts/trace_elementwise.py")
    rows, ys = [], []
    for h, i, nh, nkv in mod.SHAPES:
        rows.append([h, i, nkv * (h // nh), 1.0])
        ys.append(_forward_bytes_per_token(torch, mod, h, i, nh, nkv))
    sol = torch.linalg.lstsq(torch.tensor(rows, dtype=torch.float64),
                             torch.tensor(ys, dtype=torch.float64)[:, None]).solution[:, 0]
    m = get_model("llama-3.1-8b")
    h, i, kv = float(m.hidden_size), float(m.intermediate_size), float(m.num_kv_heads * m.head_dim)
    traced_forward = float(sol[0]) * h + float(sol[1]) * i + float(sol[2]) * kv
    a, b, c = ew.EAGER_MEASURED["torchtitan"]
    charged = FORWARD_SHARE * recompute_plan("torchtitan", "selective", m, 32).elementwise_share * (a * h + b * i + c * kv)
    # traced 6.283e5 B a token-layer (0.326 of the 1.924e6 forward + backward), charged 6.415e5
    assert traced_forward == pytest.approx(6.283e5, rel=0.01)
    assert charged == pytest.approx(traced_forward, rel=0.03)
