"""Invariants of the memory model (Hypothesis): monotone in the directions physics says."""
from hypothesis import given, settings, strategies as st

from gpuplan.dtypes import WEIGHT_FORMATS
from gpuplan.estimate.memory import estimate_memory, inference_weight_bytes
from gpuplan.models import get_model
from gpuplan.scenario import scenario_from_dict
from gpuplan.units import GiB

MODELS = ["qwen2.5-0.5b", "llama-3.2-1b", "llama-3.1-8b", "mixtral-8x7b-v0.1", "qwen3-30b-a3b", "gemma-2-2b"]
CAP = 80 * GiB


def train(model, **kw):
    par = kw.pop("parallel", {})
    count = kw.pop("count", 1)
    return scenario_from_dict({"model": model, "task": "train", "hardware": {"gpu": "h100-sxm", "count": count},
                               "parallel": par, "train": kw})


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(MODELS), st.integers(0, 6), st.integers(0, 6), st.booleans(), st.sampled_from(["full", "lora"]))
def test_more_zero3_ranks_never_raise_model_states(model, a, b, master, method):
    """The optimizer-step phase holds exactly the model states (+ the sharded step temporary)."""
    n1, n2 = sorted((2 ** a, 2 ** b))
    m = get_model(model)
    step = [estimate_memory(train(model, count=n, parallel={"zero": 3}, master_weights=master, method=method), m, CAP)
            .phases["optimizer_step"] for n in (n1, n2)]
    assert step[1] <= step[0]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(MODELS), st.sampled_from([512, 1024, 4096]), st.integers(1, 8),
       st.sampled_from(["full", "lora", "qlora"]), st.sampled_from(["flash", "eager"]))
def test_more_recompute_never_raises_activations(model, seq, mb, method, attention):
    m = get_model(model)
    acts = [estimate_memory(train(model, seq_len=seq, micro_batch=mb, method=method, recompute=r, attention=attention),
                            m, CAP).phases["backward"] for r in ("none", "selective", "full")]
    assert acts[0] >= acts[1] >= acts[2]


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(MODELS), st.sampled_from(sorted(WEIGHT_FORMATS)), st.sampled_from(sorted(WEIGHT_FORMATS)),
       st.sampled_from([1, 2, 4]))
def test_fewer_weight_bits_never_raise_weight_bytes(model, f1, f2, tp):
    m = get_model(model)
    b1, b2 = WEIGHT_FORMATS[f1].bits, WEIGHT_FORMATS[f2].bits
    if WEIGHT_FORMATS[f1].scope != WEIGHT_FORMATS[f2].scope:
        # formats that quantize only the linears keep embeddings in 16-bit, so fp8 (linears only) can
        # weigh more than gguf-q8_0 (every tensor at 8.5 bits): bits compare only within one scope
        return
    if b1 <= b2:
        assert inference_weight_bytes(m, f1, tp=tp) <= inference_weight_bytes(m, f2, tp=tp) + 1


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(MODELS), st.integers(1, 16), st.integers(1, 16), st.sampled_from(["none", "full"]),
       st.sampled_from(["full", "lora", "qlora"]), st.sampled_from([0, 1, 2, 3]))
def test_bigger_batch_never_lowers_peak(model, b1, b2, recompute, method, zero):
    lo, hi = sorted((b1, b2))
    m = get_model(model)
    p = {"zero": zero}
    e_lo = estimate_memory(train(model, micro_batch=lo, recompute=recompute, method=method, count=8, parallel=p), m, CAP)
    e_hi = estimate_memory(train(model, micro_batch=hi, recompute=recompute, method=method, count=8, parallel=p), m, CAP)
    assert e_hi.peak_bytes_per_gpu >= e_lo.peak_bytes_per_gpu


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(MODELS), st.integers(1, 512), st.sampled_from(["vllm", "hf", "llama.cpp"]))
def test_more_concurrency_never_lowers_inference_peak(model, c, engine):
    m = get_model(model)
    mk = lambda n: scenario_from_dict({"model": model, "task": "infer", "hardware": {"gpu": "h100-sxm"},  # noqa: E731
                                       "infer": {"concurrency": n, "engine": engine}})
    assert estimate_memory(mk(c + 1), m, CAP).peak_bytes_per_gpu >= estimate_memory(mk(c), m, CAP).peak_bytes_per_gpu


def test_components_sum_to_peak():
    m = get_model("llama-3.1-8b")
    for scn in (train("llama-3.1-8b"), train("llama-3.1-8b", method="qlora", recompute="full")):
        e = estimate_memory(scn, m, CAP)
        assert sum(e.components.values()) == e.peak_bytes_per_gpu


def test_megatron_moe_training_regression():
    """Regression: the Megatron activation profile once referenced an undefined MoE share (found by
    the web fuzz). Megatron with MoE must estimate, and its dense first layers count as dense."""
    for model in ("mixtral-8x7b-v0.1", "deepseek-v2-lite", "qwen3-30b-a3b"):
        scn = scenario_from_dict({"model": model, "task": "train", "framework": "megatron",
                                  "hardware": {"gpu": "h100-sxm", "count": 8}, "parallel": {"ep": 8, "zero": 1},
                                  "train": {"seq_len": 4096}})
        est = estimate_memory(scn, get_model(model), CAP)
        c = est.components
        # the backward phase holds activations and the loss block on top of weights and states
        assert est.phases["backward"] > c["weights"] + c["optimizer_states"] + c["runtime_overhead"]


def test_lora_adapters_on_gpt2_c_proj_and_mla_kv_b_are_counted():
    """Regression: stripping '_proj' once turned GPT-2's c_proj into 'c' and DeepSeek's kv_b_proj into
    'kv_b', so their adapters were silently dropped. (in + out) x r per adapted matrix."""
    from gpuplan.estimate.memory import _lora_targets, lora_params
    gpt2 = get_model("gpt2")                 # attn.c_proj and mlp.c_proj both play the 'o' role
    h, i, L = 768, 3072, 12
    assert lora_params(gpt2, 8, _lora_targets(["c_proj"])) == L * 8 * ((h + h) + (i + h))
    ds = get_model("deepseek-v2-lite")       # kv_b_proj: kv_lora_rank -> heads x (nope + v)
    assert lora_params(ds, 8, _lora_targets(["kv_b_proj"])) == 27 * 8 * (512 + 16 * (128 + 128))
