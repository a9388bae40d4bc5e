"""One check shared by the state-space and hybrid tests: an HF inference scenario's estimate against its
fake-tensor trace after `decode_steps` decoding steps."""
from gpuplan.api import estimate


def assert_inference_matches_trace(mt: str, sc: dict, decode_steps: int) -> None:
    from gpuplan.trace import trace
    traced = trace(sc, decode_steps=decode_steps)
    est = estimate(sc).memory
    # the cache after decoding: the attention layers' KV + every Mamba layer's fp32 state and conv window, exactly
    assert est.components["kv_cache"] == traced.kv_cache_bytes
    act = est.components["activations"] / traced.components["activations"] - 1
    peak = (est.peak_bytes_per_gpu - est.components["runtime_overhead"]) / traced.peak_bytes - 1
    assert abs(act) <= 0.05, f"{mt}: prefill activations {act:+.1%}"
    assert abs(peak) <= 0.05, f"{mt}: peak {peak:+.1%}"
