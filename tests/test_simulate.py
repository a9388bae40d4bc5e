"""Serving under load (estimate/load): hand-computed scheduler cases on a constant step cost, queueing
properties on the speed engine's cost (Little's law, monotone percentiles, overload, Offline >= Server),
determinism, the cost table against direct engine calls, trace files and the scenario/CLI surface."""
import json

import numpy as np
import pytest

from gpuplan import pipeline
from gpuplan.errors import InputError
from gpuplan.estimate.load import (Arrivals, ConstantCost, EngineCost, Lengths, Policy, Workload, is_overloaded,
                                   make_workload, simulate, summarize)
from gpuplan.estimate.speed import serving_model

BIG = 1 << 30


def wl(arrivals, inputs, outputs):
    return Workload(np.array(arrivals, float), np.array(inputs), np.array(outputs))


# ---- hand-computed cases (constant 10 ms per iteration) ---------------------------------------------

def test_two_requests_chunked_prefill_by_hand():
    # A (t=0, 150 prompt, 3 out), B (t=0.015, 20 prompt, 2 out); budget 100 tokens, 10 ms per iteration.
    # it1 [0,.01]: A chunk 100.  it2 [.01,.02]: A chunk 50 -> first token .02 (B not yet seen: arrives .015,
    # the scheduler sees it at the next iteration).  it3 [.02,.03]: A decode (token 2) + B prompt 20 -> B's
    # first token .03.  it4 [.03,.04]: A token 3, B token 2: both done at .04.
    res = simulate(wl([0.0, 0.015], [150, 20], [3, 2]), Policy(max_num_seqs=8, token_budget=100), ConstantCost(0.01))
    assert res.first_token_s == pytest.approx([0.02, 0.03])
    assert res.finish_s == pytest.approx([0.04, 0.04])
    assert res.first_scheduled_s == pytest.approx([0.0, 0.02])
    assert res.iterations == 4
    s = summarize(res)
    assert s["ttft_s"]["mean"] == pytest.approx((0.02 + 0.015) / 2)
    assert s["tpot_s"]["mean"] == pytest.approx(0.01)            # A: .02 over 2 gaps, B: .01 over 1
    assert s["queue_s"]["mean"] == pytest.approx((0.0 + 0.005) / 2)
    assert s["requests_per_s"] == pytest.approx(2 / 0.04)
    assert s["output_tokens_per_s"] == pytest.approx(5 / 0.04)


def test_preemption_by_recompute_by_hand():
    # pool of 3 blocks of 4 tokens; A and B (4 prompt, 4 out) at t=0.
    # it1: both prompts (1 block each) -> first tokens at .01.  it2: both cross a block boundary (4 tokens
    # cached), 2 blocks needed, 1 free: B (newest) is preempted, A decodes (token 2 at .02).  B needs its
    # 4 prompt + 1 generated tokens recomputed = 2 blocks, only 1 free until A ends: A tokens 3, 4 at .03,
    # .04 (A done, 2 blocks freed).  it5: B recomputes 5 tokens -> token 2 at .05; tokens 3, 4 at .06, .07.
    pol = Policy(max_num_seqs=8, token_budget=100, block_size=4, kv_blocks=3)
    res = simulate(wl([0.0, 0.0], [4, 4], [4, 4]), pol, ConstantCost(0.01))
    assert res.preemptions == 1
    assert res.first_token_s == pytest.approx([0.01, 0.01])
    assert res.finish_s == pytest.approx([0.04, 0.07])
    assert res.kv_max_blocks == 2      # never 3: B gives its block back before A takes one


def test_max_num_seqs_queues_the_rest_by_hand():
    # one running slot, three 1-token-prompt requests of 2 tokens at t=0: each takes a prefill
    # iteration (first token) and one decode; finishes at .02, .04, .06
    res = simulate(wl([0, 0, 0], [1, 1, 1], [2, 2, 2]), Policy(max_num_seqs=1, token_budget=10), ConstantCost(0.01))
    assert res.finish_s == pytest.approx([0.02, 0.04, 0.06])
    assert res.first_scheduled_s == pytest.approx([0.0, 0.02, 0.04])


def test_non_mixed_engine_pauses_decodes_for_a_prefill_by_hand():
    # SGLang-style (no mixed batches): A (t=0, 1 prompt, 3 out), B arrives at .005 (1 prompt, 1 out).
    # it1: A prefill -> token 1 at .01.  it2: B's prefill alone (A waits) -> B done at .02.  it3, it4: A
    # tokens 2, 3 at .03, .04.
    pol = Policy(max_num_seqs=8, token_budget=10, mixed=False)
    res = simulate(wl([0.0, 0.005], [1, 1], [3, 1]), pol, ConstantCost(0.01))
    assert res.finish_s == pytest.approx([0.04, 0.02])


def test_prefix_cache_skips_whole_blocks_by_hand():
    # 100-token prompt, half cached -> 48 tokens (3 blocks of 16) skipped, 52 computed: with a 26-token
    # budget the prompt takes 2 iterations instead of 4 (first token at .02, not .04)
    w = wl([0.0], [100], [1])
    base = simulate(w, Policy(token_budget=26), ConstantCost(0.01))
    hit = simulate(w, Policy(token_budget=26, prefix_hit=0.5), ConstantCost(0.01))
    assert base.first_token_s[0] == pytest.approx(0.04)
    assert hit.first_token_s[0] == pytest.approx(0.02)


def test_reserve_full_never_preempts():
    # TensorRT-LLM GUARANTEED_NO_EVICT: admission reserves prompt + output, so a pool of 4 blocks of 4
    # tokens runs one 4+4-token request at a time and never preempts
    pol = Policy(max_num_seqs=8, token_budget=100, block_size=4, kv_blocks=4, chunked_prefill=False, reserve_full=True)
    res = simulate(wl([0, 0, 0], [4, 4, 4], [4, 4, 4]), pol, ConstantCost(0.01))
    assert res.preemptions == 0
    # two fit at once (2 x 2 blocks): both done at .04; the third starts then and ends at .08
    assert res.finish_s == pytest.approx([0.04, 0.04, 0.08])


# ---- the speed engine's cost ---------------------------------------------------------------------

SCN = {"model": "llama-3.1-70b", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 8}, "parallel": {"tp": 8},
       "infer": {"prompt_len": 1000, "output_len": 300}}


@pytest.fixture(scope="module")
def engine():
    r = pipeline.resolve(SCN)
    mem = pipeline.memory(r)
    sv = serving_model(r.scenario, r.model, r.gpu, params=r.speed_params, network=r.network, memory=mem)
    from gpuplan.estimate.load.engines import engine_policy
    pol, _ = engine_policy(r.scenario, sv, int(r.gpu.usable_memory_bytes))
    return sv, pol, EngineCost(sv, pol.max_num_seqs, 4096, 8192)


def test_cost_table_matches_the_engine(engine):
    sv, pol, cost = engine
    rng = np.random.default_rng(1)
    for _ in range(40):
        b, c = int(rng.integers(1, pol.max_num_seqs)), float(rng.integers(1, 4096))
        assert cost.decode(b, c) == pytest.approx(sv.decode_step(b, c)["time"], rel=0.01)
        p = int(rng.integers(1, 8192))
        direct = sv.prefill_chunk(p, 0, compute_only=True)
        assert cost.step(0, 0, p, cost.attention(p, 0)) == pytest.approx(sv.prefill(p), rel=0.01)
        # a mixed step: the prompt rows' compute, and only the extra bytes of the collectives they
        # share with the decode rows (no second per-call latency)
        comm = lambda x: sv._tp_comm(x) + sv._ep_comm(x)  # noqa: E731
        assert cost.step(b, c, p, cost.attention(p, 0)) == pytest.approx(
            sv.decode_step(b, c)["time"] + direct - comm(p) + comm(b + p) - comm(b), rel=0.01)
    # the closed-form run of k decode iterations is the sum of the single ones
    for b, c, k in ((7, 10.0, 500), (130, 900.0, 37), (1000, 3.0, 4000)):
        assert cost.decode_sum(b, c, k) == pytest.approx(sum(cost.decode(b, c + j) for j in range(k)), rel=1e-9)


def test_mixed_step_pays_one_set_of_collectives_by_hand(engine):
    """A prompt chunk riding in a decode iteration is in the same forward: each of the 80 layers'
    two all-reduces (tp 8) carries the decode and prompt rows together, so the chunk adds its bytes
    and no second per-call latency."""
    sv, pol, cost = engine
    L, h, n = 80, 8192, 8                          # Llama-3.1-70B: 80 layers, hidden 8192; tp 8
    bw, lat = sv.link.effective_bytes_per_s, sv.link.latency_s
    assert (bw, lat) == (450e9 * 0.8, 3e-6)        # NVLink 4 per-direction rate × efficiency, latency
    D, P = 64, 512
    # ring all-reduce moves 2(n−1)/n of the payload (P rows × 8192 × 2 bytes), twice per layer
    bytes_only = 2 * L * (2 * (n - 1) / n * P * h * 2.0) / bw
    assert bytes_only == pytest.approx(6.5245e-3, rel=1e-4)
    assert sv.riding_comm(D, P) == pytest.approx(bytes_only, rel=1e-9)
    # alone, the same chunk pays 2 × 80 calls × 2(n−1) hops × 3 µs = 6.72 ms of latency on top
    assert sv.riding_comm(0, P) - bytes_only == pytest.approx(6.72e-3, rel=1e-9)
    alone = sv.prefill_chunk(P, 0, compute_only=True)
    riding = sv.prefill_chunk(P, 0, compute_only=True, riding_with=D)
    assert alone - riding == pytest.approx(6.72e-3, rel=1e-9)
    # the simulator's mixed iteration = decode step + prompt compute + bytes (one latency set: the decode's)
    c = 1000.0
    step = cost.step(D, c, P, cost.attention(P, 0))
    assert step - cost.decode(D, c) == pytest.approx(alone - 6.72e-3, rel=0.01)
    # serve's operating point prices its steady-state mixed steps the same way: TPOT = decode step +
    # (batch / output) prompts riding per step, each without a second latency set
    pt = sv.point(64)
    pf = sv.prefill_chunk(1000, 0, compute_only=True)
    assert pt["tpot_s"] == pytest.approx(pt["decode_step_s"] + 64 / 300 * (pf - 6.72e-3), rel=1e-9)


def test_chunk_attention_adds_up(engine):
    sv = engine[0]
    whole = sv.prefill_attention_flops(3000, 0)
    parts = sv.prefill_attention_flops(1000, 0) + sv.prefill_attention_flops(2000, 1000)
    assert parts == pytest.approx(whole, rel=1e-12)
    assert sv.prefill_attention_flops(1000, 2000) > sv.prefill_attention_flops(1000, 0)   # later chunks see more


def run(engine, rate, n=2000, seed=0, kind="poisson", inp=Lengths("lognormal", 1000, cv=0.5, hi=3000),
        out=Lengths("lognormal", 300, cv=0.5, hi=1000)):
    sv, pol, cost = engine
    return simulate(make_workload(Arrivals(kind, rate), n, inp, out, seed), pol, cost)


def test_littles_law(engine):
    res = run(engine, 6.0, n=5000)
    s = summarize(res)
    # time-average of requests in the engine (the scheduler's own bookkeeping) = λ x mean time in the engine,
    # i.e. the latency less the front end's (it delays each request's entry: estimate/engine_host.py)
    fe = engine[2].frontend_s
    assert fe == pytest.approx(0.01747)                       # vLLM's front end
    assert s["mean_in_system"] == pytest.approx(6.0 * (s["e2e_s"]["mean"] - fe), rel=0.05)


def test_percentiles_rise_with_rate(engine):
    stats = [summarize(run(engine, r)) for r in (1.0, 6.0, 12.0)]
    for key in ("ttft_s", "tpot_s", "e2e_s"):
        p = [s[key]["p99"] for s in stats]
        assert p[0] < p[1] < p[2], (key, p)
    assert [s["tpot_s"]["p50"] for s in stats] == sorted(s["tpot_s"]["p50"] for s in stats)


def test_overload_and_offline_bound(engine):
    off = summarize(run(engine, 1.0, kind="offline"))
    mu = off["requests_per_s"]
    low, high = run(engine, 0.5 * mu), run(engine, 2.0 * mu)
    assert not is_overloaded(low)
    assert is_overloaded(high)
    # Offline (everything queued at t=0) is the most a replica serves: Server mode at any rate is not faster
    for r in (low, high):
        assert off["requests_per_s"] >= summarize(r)["requests_per_s"]
        assert off["output_tokens_per_s"] >= summarize(r)["output_tokens_per_s"]


def test_deterministic_for_a_seed(engine):
    a, b, c = run(engine, 8.0, n=500, seed=3), run(engine, 8.0, n=500, seed=3), run(engine, 8.0, n=500, seed=4)
    assert np.array_equal(a.finish_s, b.finish_s) and np.array_equal(a.first_token_s, b.first_token_s)
    assert not np.array_equal(a.finish_s, c.finish_s)


def test_workload_shapes_and_arrivals():
    rng_n = 200_000
    w = make_workload(Arrivals("gamma", 4.0, cv=3.0), rng_n, Lengths("chat"), Lengths("chat"), seed=0)
    gaps = np.diff(w.arrival_s)
    assert gaps.mean() == pytest.approx(0.25, rel=0.02)
    assert gaps.std() / gaps.mean() == pytest.approx(3.0, rel=0.05)
    # the chat shape's means (vLLM paper, ShareGPT: 161 in, 338 out), a little lower after clipping
    assert w.input_tokens.mean() == pytest.approx(161, rel=0.05)
    assert w.output_tokens.mean() == pytest.approx(338, rel=0.05)
    u = make_workload(Arrivals("offline"), 1000, Lengths("uniform", lo=10, hi=20), Lengths("fixed", 7), seed=0)
    assert u.input_tokens.min() >= 10 and u.input_tokens.max() <= 20 and set(u.output_tokens) == {7}
    assert not u.arrival_s.any()


def test_closed_loop_keeps_clients_busy():
    # 2 clients, 4 requests of 1 prompt + 2 out, 10 ms steps: two at a time, the next pair sent on completion
    w = Workload(np.full(4, np.nan), np.ones(4, int), np.full(4, 2), clients=2)
    res = simulate(w, Policy(max_num_seqs=8, token_budget=10), ConstantCost(0.01))
    assert res.arrival_s == pytest.approx([0, 0, 0.02, 0.02])
    assert res.finish_s == pytest.approx([0.02, 0.02, 0.04, 0.04])


# ---- the pipeline, scenario and CLI -----------------------------------------------------------------

def serve(load, **infer):
    scn = json.loads(json.dumps(SCN))
    scn["infer"].update(infer)
    scn["infer"]["load"] = load
    r = pipeline.resolve(scn)
    return pipeline.serving_load(r, pipeline.memory(r), search=False)


@pytest.mark.parametrize("engine_name", ["vllm", "sglang", "trtllm"])
def test_engines_run_and_report(engine_name):
    out = serve({"rate_per_s": 4, "requests": 300}, engine=engine_name)
    for key in ("ttft_s", "tpot_s", "e2e_s", "queue_s"):
        assert set(out[key]) == {"mean", "p50", "p90", "p99"}
    assert out["engine"] == engine_name and out["overloaded"] is False
    if engine_name == "trtllm":
        assert out["preemptions"] == 0


def test_llama_cpp_slots():
    scn = {"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "rtx-4090"},
           "infer": {"engine": "llama.cpp", "weights": "gguf-q4_k_m", "prompt_len": 500, "output_len": 100,
                     "max_num_seqs": 2, "load": {"rate_per_s": 0.01, "requests": 30}}}
    r = pipeline.resolve(scn)
    out = pipeline.serving_load(r, pipeline.memory(r), search=False)
    assert out["policy"]["max_num_seqs"] == 2 and out["policy"]["chunked_prefill"] is False
    assert out["preemptions"] == 0


def test_prefix_cache_lowers_ttft():
    a = serve({"rate_per_s": 4, "requests": 300})
    b = serve({"rate_per_s": 4, "requests": 300, "prefix_cache_hit": 0.8})
    assert b["ttft_s"]["mean"] < a["ttft_s"]["mean"]


def test_capacity_and_slo_search():
    out = pipeline.serving_load(pipeline.resolve({**SCN, "infer": {**SCN["infer"], "load": {
        "rate_per_s": 2, "requests": 400, "slo_ttft_s": 1.0, "slo_tpot_s": 0.06}}}),
        pipeline.memory(pipeline.resolve(SCN)))
    assert out["capacity_per_s"] > 2
    assert 0 < out["max_rate_meeting_slo_per_s"] <= out["capacity_per_s"]


@pytest.mark.parametrize("load, words", [
    ({"arrival": "gamma"}, "rate_per_s"),
    ({"arrival": "closed"}, "clients"),
    ({"arrival": "trace"}, "trace"),
    ({"rate_per_s": 1, "input": {"dist": "normal", "mean": 10}}, "std"),
    ({"rate_per_s": 1, "input": {"dist": "uniform", "min": 9, "max": 3}}, "below min"),
    ({"rate_per_s": -1}, "rate_per_s"),
    ({"rate_per_s": 1, "slo_percentile": 101}, "slo_percentile"),
])
def test_load_validation_names_the_field(load, words):
    with pytest.raises(InputError) as err:
        pipeline.resolve({**SCN, "infer": {**SCN["infer"], "load": load}})
    assert words in str(err.value)


def test_trace_files(tmp_path):
    from gpuplan.inputs import read_trace_file
    csv = tmp_path / "t.csv"
    csv.write_text("arrival_s,input_tokens,output_tokens\n0.5,100,20\n0.0,200,10\n")
    jl = tmp_path / "t.jsonl"
    jl.write_text('{"arrival_s": 0.5, "input_tokens": 100, "output_tokens": 20}\n\n'
                  '{"arrival_s": 0, "input_tokens": 200, "output_tokens": 10, "session_id": "a"}\n')
    assert read_trace_file(csv)[0] == {"arrival_s": 0.5, "input_tokens": 100, "output_tokens": 20}
    assert read_trace_file(jl)[1]["session_id"] == "a"
    out = serve({"arrival": "trace", "trace": str(csv)})
    assert out["requests"] == 2 and out["capacity_per_s"] is None
    bad = {"no_col.csv": ("arrival_s,input_tokens\n0,1\n", "output_tokens"),
           "neg.csv": ("arrival_s,input_tokens,output_tokens\n-1,5,5\n", "line 2"),
           "frac.csv": ("arrival_s,input_tokens,output_tokens\n0,5.5,5\n", "whole number"),
           "nan.csv": ("arrival_s,input_tokens,output_tokens\nnan,5,5\n", "finite"),
           "empty.csv": ("arrival_s,input_tokens,output_tokens\n", "no requests"),
           "junk.jsonl": ('{"arrival_s": 0, "input_tokens": 1, "output_tokens": 1}\nnot json\n', "line 2"),
           "list.jsonl": ("[1, 2]\n", "not a JSON object")}
    for name, (text, words) in bad.items():
        p = tmp_path / name
        p.write_text(text)
        with pytest.raises(InputError) as err:
            read_trace_file(p)
        assert words in str(err.value), name
    with pytest.raises(InputError, match="does not exist"):
        read_trace_file(tmp_path / "missing.csv")


def test_cli_serve_rate_json_and_text(capsys):
    from gpuplan.cli import main
    args = ["serve", "--model", "llama-3.1-8b", "--task", "infer", "--gpu", "h100-sxm", "--rate", "5",
            "--requests", "200", "--slo-ttft", "0.5", "--slo-tpot", "0.05"]
    assert main(args + ["--json"]) == 0
    load = json.loads(capsys.readouterr().out)["result"]["load"]
    for key in ("rate_per_s", "requests", "ttft_s", "tpot_s", "e2e_s", "queue_s", "output_tokens_per_s",
                "requests_per_s", "goodput_requests_per_s", "overloaded", "max_rate_meeting_slo_per_s"):
        assert key in load
    assert load["rate_per_s"] == 5 and load["requests"] == 200
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "p99" in text and "TTFT" in text and "highest rate meeting the SLO" in text


@pytest.mark.parametrize("spec", ["gama:2", "gamma:x", "closed:", "trace:"])
def test_cli_bad_arrival(spec, capsys):
    from gpuplan.cli import main
    code = main(["serve", "--model", "llama-3.1-8b", "--task", "infer", "--gpu", "h100-sxm", "--rate", "5",
                 "--arrival", spec, "--json"])
    assert code == 2
    err = json.loads(capsys.readouterr().out)["error"]
    assert "--arrival" in err["what"]


# ---- the start-up profile does not depend on how many requests wait ----------------------------------

def test_huge_concurrency_keeps_the_kv_pool():
    def kv(concurrency):
        r = pipeline.resolve({**SCN, "infer": {**SCN["infer"], "concurrency": concurrency}})
        return pipeline.memory(r).limits["kv_tokens"]
    # vLLM's running cap on an 80 GB H100 is 1024 (EngineArgs.get_batch_defaults): waiting requests beyond it
    # change nothing at start-up; before the fix 1,000,000 queued requests sized a 3 TB sampler profile
    assert kv(1_000_000) > 0
    assert kv(1_000_000) == kv(1024) == kv(5000)
    assert kv(1) >= kv(1024)


# ---- recommend sizes serving replicas by simulation when given a rate and an SLO ------------------------

def test_recommend_sizes_replicas_by_simulated_slo():
    from gpuplan.search import recommend
    base = {"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": [1, 2, 4, 8]},
            "parallel": {"tp": 1}, "infer": {"engine": "vllm", "weights": "bf16", "kv_cache": "bf16",
                                             "prompt_len": 1000, "output_len": 200}}
    sized = {}
    for rate in (5, 80):
        res = recommend(base, requests_per_s=rate, ttft_s=0.3, tpot_s=0.03, max_gpus=8)
        plan = res.plans[0]
        load = plan.estimate["load"]
        assert load["rate_per_s"] == rate and load["replicas"] * 1 == plan.count
        assert load["rate_per_replica_s"] == pytest.approx(rate / load["replicas"])
        assert load["ttft_at_percentile_s"] <= 0.3 and load["tpot_at_percentile_s"] <= 0.03
        assert any("sized by simulation" in w for w in plan.why)
        # goodput is the whole plan's (replicas x one replica's), and the price is per million tokens at that rate
        assert 0 < load["goodput_requests_per_s"] <= rate * 1.2
        assert load["usd_per_million_tokens"] > 0
        sized[rate] = load["replicas"]
    assert sized[5] == 1 and sized[80] > sized[5]


def test_replicas_for_slo_is_the_fewest(engine):
    from gpuplan.estimate.load import meets_slo, replicas_for_slo
    sv, pol, _ = engine
    r = pipeline.resolve(SCN)
    slo = {"ttft_s": 0.4, "tpot_s": 0.04, "percentile": 99.0}
    n, summary = replicas_for_slo(r.scenario, sv, int(r.gpu.usable_memory_bytes), 40.0, slo, requests=300)
    assert n > 1 and summary["ttft_at_percentile_s"] <= 0.4
    # one replica fewer misses the SLO (or overloads) on the same workload
    w = make_workload(Arrivals("poisson", 40.0 / (n - 1)), 300, Lengths("fixed", 1000), Lengths("fixed", 300), 0)
    fewer = simulate(w, pol, EngineCost(sv, pol.max_num_seqs, 1300, 8192))
    assert is_overloaded(fewer) or not meets_slo(fewer, slo)


def test_cli_plot_under_load(tmp_path, capsys):
    from gpuplan.cli import main
    target = tmp_path / "load.svg"
    assert main(["serve", "--model", "llama-3.1-8b", "--task", "infer", "--gpu", "h100-sxm", "--rate", "5",
                 "--requests", "200", "--slo-ttft", "0.5", "--plot", str(target)]) == 0
    svg = target.read_text()
    for sid in ("series-served", "series-goodput", "series-ttft_p99", "series-tpot_p50"):
        assert f'id="{sid}"' in svg
    assert "arrival rate" in svg
    capsys.readouterr()


def test_vllm_launch_caps_max_num_seqs_like_the_memory_estimate():
    from gpuplan.launch import launch_files

    def seqs(concurrency, gpu="h100-sxm", **infer):
        scn = {**SCN, "hardware": {"gpu": gpu, "count": 8},
               "infer": {**SCN["infer"], "concurrency": concurrency, **infer}}
        from gpuplan.scenario import scenario_from_dict
        text = "\n".join(launch_files(scenario_from_dict(scn), "vllm").values())
        return int(text.split("--max-num-seqs")[1].split()[0])
    assert seqs(64) == 64                       # below the cap: the concurrency, as before
    assert seqs(100_000) == 1024                # vLLM's default on an 80 GB H100 (get_batch_defaults)
    assert seqs(100_000, gpu="a100-sxm-80gb") == 256   # A100 keeps the smaller default
    assert seqs(100_000, max_num_seqs=2048) == 2048


# ---- the load-test validation rows: MLPerf Server systems are split into replicas --------------------------

def test_mlperf_server_rows_simulate_one_replica_at_its_share():
    import csv
    from script_module import load_script
    vsl = load_script("scripts/validate_serving_load.py")
    rows = {r["id"]: r for r in csv.DictReader(open(vsl.CSV, newline="", encoding="utf-8"))}
    h100 = vsl.scenario(rows["ML01"])
    # DGX-H100: 8 GPUs run 4 replicas of tp 2 (NVIDIA's config), 75.10 scheduled samples/s in all
    assert h100["hardware"]["count"] == 2 and h100["parallel"]["tp"] == 2
    assert h100["infer"]["load"]["rate_per_s"] == pytest.approx(75.10 / 4)
    assert h100["infer"]["max_num_seqs"] == 1024
    assert (h100["infer"]["load"]["slo_ttft_s"], h100["infer"]["load"]["slo_tpot_s"]) == (2.0, 0.2)
    h200 = vsl.scenario(rows["ML02"])
    assert h200["hardware"]["count"] == 1 and h200["infer"]["load"]["rate_per_s"] == pytest.approx(101.25 / 8)
    # a row whose GPUs are one replica keeps its own rate
    one = vsl.scenario(rows["SG01"])
    assert one["infer"]["load"]["rate_per_s"] == 4.0 and "max_num_seqs" not in one["infer"]


def test_recommend_reads_rate_and_slo_from_the_load_block_and_agrees_with_serve():
    """A serving scenario's own infer.load (rate_per_s, slo_ttft_s, slo_tpot_s) sizes the plan without any
    argument, and the percentiles recommend reports are the ones `serve` simulates for the same scenario
    (before: 400 arrivals per sizing run read the warm-up as an overload and asked for twice the GPUs)."""
    from pathlib import Path
    from gpuplan.search import recommend
    example = Path(__file__).resolve().parents[1] / "examples" / "serve-load-llama-70b.yaml"
    res = recommend(str(example))
    assert res.plans, [r.reason for r in res.rejected][:3]
    plan = res.plans[0]
    load = plan.estimate["load"]
    assert (load["rate_per_s"], load["replicas"], plan.count) == (10.0, 1, 8)
    r = pipeline.resolve(str(example))
    served = pipeline.serving_load(r, pipeline.memory(r), search=False)
    assert load["ttft_at_percentile_s"] == pytest.approx(served["ttft_s"]["p99"], rel=1e-9)
    assert load["tpot_at_percentile_s"] == pytest.approx(served["tpot_s"]["p99"], rel=1e-9)
    # priced at the rate it was sized for: $/h over (10 requests/s x mean output tokens)
    per_hour = plan.estimate["cost"]["usd_per_hour"]
    tokens_per_h = 10.0 * load["mean_output_tokens"] * 3600
    assert plan.estimate["cost"]["usd_per_million_tokens"] == pytest.approx(per_hour / tokens_per_h * 1e6, rel=0.02)
    # an argument still wins over the load block
    assert recommend(str(example), requests_per_s=30.0).plans == () or \
        recommend(str(example), requests_per_s=30.0).plans[0].estimate["load"]["rate_per_s"] == 30.0
