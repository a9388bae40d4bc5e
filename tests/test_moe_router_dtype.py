"""Megatron's router dtype (train.moe_router_dtype, docs/speed.md §2.16): the bytes gpuplan charges are checked
against the aten ops of Megatron's own code (replicated here op for op and traced on CPU with a TorchDispatchMode),
not against gpuplan; the scenario field is checked for where it applies and for moving only the rows that set it."""
from __future__ import annotations

import pytest

from gpuplan.estimate.moe import router_cast_bytes_per_element, unfused_probs_weighting_bytes_per_element

torch = pytest.importorskip("torch")
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

_VIEWS = {"view", "_unsafe_view", "t", "expand", "unsqueeze", "detach", "alias", "transpose", "as_strided",
          "squeeze", "permute", "split", "split_with_sizes", "slice", "select", "reshape", "lift_fresh"}


class _Bytes(TorchDispatchMode):
    """HBM bytes of every non-view aten op: each tensor argument read once, each output written once."""
    def __init__(self):
        super().__init__()
        self.total = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.__name__.split(".")[0]
        if name not in _VIEWS:
            flat = list(args) + list((kwargs or {}).values())
            for x in flat + (list(out) if isinstance(out, (tuple, list)) else [out]):
                if isinstance(x, torch.Tensor):
                    self.total += x.numel() * x.element_size()
        return out


def _weighting_bytes(probs_dtype, rows=64, f=768):
    """TEGroupedMLP's unfused weighting, experts.py L809-811 @2ff0f099: `x = x * permuted_probs; x.to(orig)`,
    forward and backward (the probabilities need a gradient: the router's input does)."""
    x = torch.randn(rows, f, dtype=torch.bfloat16, requires_grad=True)
    p = torch.rand(rows, 1, dtype=probs_dtype, requires_grad=True)
    g = torch.randn(rows, f, dtype=torch.bfloat16)
    with _Bytes() as m:
        y = (x * p).to(torch.bfloat16)
        y.backward(g)
    # the tensors of one row (the probabilities, their gradient) are per row, not per element: below 1 %
    return m.total / (rows * f)


@pytest.mark.parametrize("dtype,torch_dtype", [("model", torch.bfloat16), ("fp32", torch.float32),
                                               ("fp64", torch.float64)])
def test_unfused_probs_weighting_matches_the_traced_ops(dtype, torch_dtype):
    traced = _weighting_bytes(torch_dtype)
    assert unfused_probs_weighting_bytes_per_element(dtype, 2) == pytest.approx(traced, rel=0.03)


def _router_extra_bytes(router_dtype, T=8192, h=2048, E=128):
    """RouterGatingLinearFunction (moe_utils.py L944-1002 @76065f17) on the fp64 path (torch.mm on cast copies),
    less the same function's 16-bit path (one GEMM each way on the 16-bit tensors)."""
    def run(dtype):
        inp = torch.randn(T, h, dtype=torch.bfloat16)
        w = torch.randn(E, h, dtype=torch.bfloat16)
        g = torch.randn(T, E, dtype=dtype)
        with _Bytes() as m:
            torch.mm(inp.to(dtype), w.to(dtype).t())                       # forward
            torch.mm(g, w.to(dtype)).to(torch.bfloat16)                    # grad_input
            torch.mm(g.t(), inp.to(dtype)).to(torch.bfloat16)              # grad_weight
        return m.total
    return (run(router_dtype) - run(torch.bfloat16)) / (T * h)


def test_fp64_router_casts_match_the_traced_ops():
    # per element of the router input; the weight's casts (E/T of it) and the T x E logits' gradient (E/h) are not
    # per token x hidden and not charged: a few % at T = 8,192, E = 128, h = 2,048
    assert router_cast_bytes_per_element("fp64", 2) == pytest.approx(_router_extra_bytes(torch.float64), rel=0.08)


def test_router_dtype_below_or_at_the_activations_adds_nothing():
    assert router_cast_bytes_per_element("model", 2) == 0.0
    assert router_cast_bytes_per_element("fp32", 4) == 0.0


def test_router_dtype_needs_megatron():
    from gpuplan.scenario import Scenario
    base = {"model": "qwen3-30b-a3b", "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": 8},
            "parallel": {"ep": 8}}
    Scenario.model_validate({**base, "framework": "megatron", "train": {"moe_router_dtype": "fp64"}})
    with pytest.raises(ValueError, match="moe_router_dtype"):
        Scenario.model_validate({**base, "framework": "torchtitan", "train": {"moe_router_dtype": "fp64"}})


def test_fp64_router_slows_a_megatron_moe_step_and_not_a_dense_one():
    from gpuplan.api import estimate
    from gpuplan.scenario import Scenario

    def step(model, ep, **train):
        scn = Scenario.model_validate({"model": model, "task": "finetune", "framework": "megatron",
                                       "hardware": {"gpu": "h100-sxm", "count": 8},
                                       "parallel": {"ep": ep, "tp": 1},
                                       "train": {"micro_batch": 1, "seq_len": 4096, "global_batch": 64,
                                                 "method": "full", **train}})
        return estimate(scn).performance.step_time_s
    moe = step("qwen3-30b-a3b", 8, activation_fusion=False)
    moe64 = step("qwen3-30b-a3b", 8, activation_fusion=False, moe_router_dtype="fp64")
    assert moe64 > moe
    dense = step("qwen3-8b", 1)
    assert step("qwen3-8b", 1, moe_router_dtype="fp64") == dense


# --- moe_permute_fusion off: the dispatcher's permutations as torch ops (moe_host.UNFUSED_PERMUTE_EXTRA_OPS) ---

_NOT_DEVICE_CALLS = {"bool", "to", "tolist", "size", "dim", "view", "t", "T", "unsqueeze", "expand", "ravel",
                     "__get__", "shape", "dtype", "device", "numel", "requires_grad", "is_cuda", "__getitem__",
                     "__len__", "__iter__", "grad_fn", "backward", "sum", "element_size"}


def _python_device_calls(fn):
    from torch.overrides import TorchFunctionMode

    class _Calls(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            name = getattr(func, "__name__", str(func))
            if name not in _NOT_DEVICE_CALLS:
                self.names.append(name)
            return func(*args, **(kwargs or {}))

    with _Calls() as m:
        fn()
    return m.names


def test_unfused_permutation_issues_ten_more_calls_a_layer_forward():
    """Megatron's unfused permute / sort_chunks_by_idxs / unpermute (moe_utils.py @76065f17), replicated op for op
    for the all-to-all dispatcher's forward (dispatch permute with probs, sort of tokens and probs, unsort before the
    combine, unpermute without probs); the fused path is one Transformer Engine call for each of the four."""
    T, h, E, ep = 64, 32, 16, 4
    local = E // ep
    tokens = torch.randn(T, h, dtype=torch.bfloat16)
    probs = torch.rand(T, E, dtype=torch.float64)
    routing_map = torch.zeros(T, E, dtype=torch.bool)
    routing_map[torch.arange(T), torch.arange(T) % E] = True
    split_sizes = torch.full((ep * local,), T // (ep * local))
    sorted_idxs = torch.arange(ep * local).view(ep, local).T.ravel()

    def layer():
        # permute(tokens, routing_map, probs, fused=False)
        rm = routing_map.bool().T.contiguous()
        token_indices = torch.arange(T).unsqueeze(0).expand(E, -1)
        sorted_indices = token_indices.masked_select(rm)
        permuted_probs = probs.T.contiguous().masked_select(rm)
        permuted = tokens.index_select(0, sorted_indices)
        # sort_chunks_by_idxs(tokens, split_sizes, sorted_idxs, probs=probs, fused=False)
        chunks = torch.split(permuted, split_sizes.tolist(), dim=0)
        out = torch.cat([chunks[i] for i in sorted_idxs.tolist()], dim=0)
        pchunks = torch.split(permuted_probs, split_sizes.tolist(), dim=0)
        torch.cat([pchunks[i] for i in sorted_idxs.tolist()], dim=0)
        # the inverse sort before the combine
        chunks = torch.split(out, split_sizes.tolist(), dim=0)
        back = torch.cat([chunks[i] for i in sorted_idxs.tolist()], dim=0)
        # unpermute(back, sorted_indices, restore_shape, probs=None, fused=False)
        output = torch.zeros((T, h), dtype=back.dtype)
        output.scatter_add_(0, sorted_indices.unsqueeze(1).expand(-1, h), back)
        output.to(dtype=torch.bfloat16)

    calls = _python_device_calls(layer)
    from gpuplan.estimate.moe_host import UNFUSED_PERMUTE_EXTRA_OPS
    assert len(calls) - 4 == UNFUSED_PERMUTE_EXTRA_OPS[0], calls


def test_permute_fusion_off_adds_host_time_to_a_host_bound_moe_step():
    from gpuplan.api import estimate
    from gpuplan.scenario import Scenario

    def step(**train):
        # Qwen3-30B-A3B at NeMo RL's shape: TP 2 sequence parallel, EP 8, ~3,600 tokens a micro-batch
        scn = Scenario.model_validate({"model": "qwen3-30b-a3b", "task": "finetune", "framework": "megatron",
                                       "hardware": {"gpu": "h100-sxm", "count": 16},
                                       "parallel": {"ep": 8, "tp": 2},
                                       "train": {"micro_batch": 1, "seq_len": 3584, "global_batch": 64,
                                                 "method": "full", **train}})
        return estimate(scn).performance.step_time_s
    assert step(moe_permute_fusion=False) > step()
    with pytest.raises(ValueError, match="moe_permute_fusion"):
        Scenario.model_validate({"model": "qwen3-30b-a3b", "task": "finetune", "framework": "torchtitan",
                                 "hardware": {"gpu": "h100-sxm", "count": 8}, "parallel": {"ep": 8},
                                 "train": {"moe_permute_fusion": False}})
