"""FP8 training recipes (estimate/fp8.py, speed._fp8_cast_bytes): cast traffic per recipe, the bf16
weight-gradient GEMM of rowwise_gw_hp, the recipe field's validation. Expected numbers are hand
arithmetic on torchao's float8 roofline kernel list (roofline_utils.py @710f52ba) and Llama 3 8B's shapes."""
import pytest

from gpuplan import api
from gpuplan.errors import GpuplanError
from gpuplan.estimate import fp8

# Llama 3 8B decoder layer (q, k, v, o, gate, up, down), bs 1 x 8192 tokens, 32 layers, one GPU
TOKENS, LAYERS = 8192, 32
ACT_PER_TOKEN_LAYER = (4096 + 4096) + 2 * (4096 + 1024) + (4096 + 4096) + 2 * (4096 + 14336) + (14336 + 4096)  # 81920
IN_PER_TOKEN_LAYER = 4096 * 3 + 4096 + 4096 * 2 + 14336                                                      # 38912
WEIGHTS_PER_LAYER = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336                                     # 218103808
ACT = ACT_PER_TOKEN_LAYER * TOKENS * LAYERS       # 21,474,836,480 elements cast (inputs + output gradients)
W = WEIGHTS_PER_LAYER * LAYERS                    # 6,979,321,856 weight elements
IN = IN_PER_TOKEN_LAYER * TOKENS * LAYERS         # 10,200,547,328 input elements (grad-input GEMM outputs)


def test_cast_bytes_hand_arithmetic():
    tw = fp8.recipe("tensorwise")
    # 6 B per activation element, recast without the amax read (4 B) when the amax is saved, 8 B per weight
    assert fp8.cast_bytes(tw, 10, 4, 3, amax_saved=True) == 6 * 10 + 4 * 4 + 8 * 3 == 100
    assert fp8.cast_bytes(tw, 10, 4, 3, amax_saved=False) == 6 * 10 + 6 * 4 + 8 * 3 == 108
    rw = fp8.recipe("rowwise")          # the row-wise amax lives inside the cast: nothing to skip
    assert fp8.cast_bytes(rw, 10, 4, 3, amax_saved=True) == 8 * 10 + 8 * 4 + 10 * 3 == 142


def test_resolve_recipe():
    assert fp8.resolve_recipe("auto", "hopper") == ("tensorwise", None)
    assert fp8.resolve_recipe("rowwise", "hopper") == ("rowwise", None)
    assert fp8.resolve_recipe("mxfp8", "blackwell") == ("mxfp8", None)
    name, note = fp8.resolve_recipe("mxfp8", "hopper")
    assert name == "tensorwise" and "Blackwell" in note


def _scn(precision="fp8", recipe="auto", gpu="h100-sxm"):
    train = {"precision": precision, "seq_len": 8192, "micro_batch": 1, "global_batch": 1}
    if precision == "fp8":
        train["fp8_recipe"] = recipe
    return {"model": "llama-3-8b", "task": "train", "framework": "torchtitan",
            "hardware": {"gpu": gpu, "count": 1}, "train": train}


def _bd(scn):
    return api.estimate(scn).performance.breakdown


def test_cast_traffic_per_recipe_matches_hand_count():
    base = _bd(_scn("bf16"))["compute_memory_bound"]
    extra = {r: _bd(_scn(recipe=r))["compute_memory_bound"] - base for r in ("tensorwise", "delayed", "rowwise")}
    tensorwise = 6 * ACT + 8 * W                                  # 184,683,593,728 B
    delayed = 4 * ACT + 4 * W                                     # 113,816,633,344 B
    rowwise = 8 * ACT + 10 * W + 4 * (IN + W)                     # 310,311,387,136 B (rescale of bwd outputs)
    assert extra["tensorwise"] / extra["delayed"] == pytest.approx(tensorwise / delayed, rel=1e-9)
    assert extra["rowwise"] / extra["delayed"] == pytest.approx(rowwise / delayed, rel=1e-9)


def test_auto_is_tensorwise():
    assert _bd(_scn(recipe="auto")) == _bd(_scn(recipe="tensorwise"))


def test_gw_hp_runs_the_weight_gradient_gemm_in_bf16():
    # per decoder linear: tensorwise 3 fp8 GEMM times, bf16 3 bf16 times, gw_hp 2 fp8 + 1 bf16 (no recompute),
    # so gw_hp - tensorwise = (bf16 - tensorwise) / 3 exactly (the lm_head is bf16 in all three)
    mm = {p: _bd(_scn(*p))["compute_matmul"] for p in (("bf16",), ("fp8", "tensorwise"), ("fp8", "rowwise_gw_hp"))}
    bf, tw, gw = mm[("bf16",)], mm[("fp8", "tensorwise")], mm[("fp8", "rowwise_gw_hp")]
    assert gw - tw == pytest.approx((bf - tw) / 3, rel=1e-9)
    assert tw < gw < bf


def test_mxfp8_off_blackwell_is_timed_tensorwise_with_a_note():
    est = api.estimate(_scn(recipe="mxfp8"))
    assert est.performance.breakdown == _bd(_scn(recipe="tensorwise"))
    assert est.performance.details["fp8_recipe"] == "tensorwise"
    assert "fp8_recipe" not in api.estimate(_scn("bf16")).performance.details
    assert any("mxfp8" in n and "Blackwell" in n for n in est.performance.notes)


def test_bad_recipe_is_a_clear_error():
    with pytest.raises(GpuplanError) as e:
        api.estimate(_scn(recipe="rowwize"))
    msg = str(e.value)
    assert "fp8_recipe" in msg and "rowwise" in msg


def _megatron_args(recipe):
    import shlex
    import re
    from gpuplan.launch import launch_files
    from gpuplan.scenario import scenario_from_dict
    s = scenario_from_dict({"model": "llama-3.1-8b", "task": "train", "hardware": {"gpu": "h100-sxm", "count": 8},
                            "parallel": {"zero": 1}, "train": {"seq_len": 4096, "micro_batch": 1, "global_batch": 8,
                                                                "precision": "fp8", "fp8_recipe": recipe}})
    text = re.sub(r" *\\\n *", " ", launch_files(s, "megatron")["train_megatron.sh"])
    return shlex.split(next(ln for ln in text.splitlines() if ln.strip().startswith("torchrun")))


def _flag(args, name):
    return args[args.index(name) + 1] if name in args else None


def test_megatron_launch_follows_the_recipe():
    # Megatron-LM --fp8-recipe (megatron/training/arguments.py): auto -> tensorwise (current scaling, as timed)
    a = _megatron_args("auto")
    assert _flag(a, "--fp8-recipe") == "tensorwise" and "--fp8-amax-history-len" not in a
    a = _megatron_args("delayed")
    assert _flag(a, "--fp8-recipe") == "delayed" and _flag(a, "--fp8-amax-history-len") == "1024"
    from gpuplan.errors import UnsupportedError
    with pytest.raises(UnsupportedError) as e:
        _megatron_args("rowwise")
    assert "fp8_recipe" in e.value.message
