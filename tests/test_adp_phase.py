"""Attention DP under trtllm-bench's identical requests (trtllm_bench.phase_imbalance, docs/speed.md §3.26).

TensorRT-LLM's executor spreads identical requests ceil/floor(N / ranks) over the attention-DP ranks
(executor_request_queue.py `_balance_requests_across_ranks`: a heap on active prompt tokens, no rank above
ceil((active + new) / ranks)), every rank then runs the same admission schedule, and each iteration lasts as long
as its busiest rank (the MoE all-gather / reduce-scatter of every layer). With the ranks' phases independent,
the prompt work an iteration waits for is the maximum of `ranks` independent draws from one rank's schedule.
Expected values below are worked by hand from that definition, not taken from the code under test."""
import math

import pytest

from gpuplan.estimate import trtllm_bench as tb


def test_same_admissions_every_iteration_are_balanced():
    # every iteration admits 29 prompts on every rank: the maximum of eight equal counts is the count
    assert tb.phase_imbalance([(29, 1)] * 50, 8) == pytest.approx(1.0)
    assert tb.phase_imbalance([(29, 50)], 8) == pytest.approx(1.0)


def test_one_cohort_in_a_share_of_the_iterations():
    # a cohort of c prompts in 1 of 4 iterations (f = 1/4), 8 ranks at independent phases:
    # E[max] = c * P(some rank admits) = c (1 - 0.75^8) = 0.899887 c; mean = c / 4; ratio 3.59955
    trace = [(14, 1), (0, 3)]
    assert tb.phase_imbalance(trace, 8) == pytest.approx(4 * (1 - 0.75 ** 8), rel=1e-9)
    assert tb.phase_imbalance(trace, 8) == pytest.approx(3.59955, abs=1e-4)
    # the same share spread over many runs of the trace gives the same distribution
    assert tb.phase_imbalance(trace * 10, 8) == pytest.approx(3.59955, abs=1e-4)


def test_rare_admissions_approach_the_rank_count():
    # one prompt in 10,000 iterations: no two ranks' prompt iterations coincide, the factor is the rank count
    assert tb.phase_imbalance([(1, 1), (0, 9999)], 8) == pytest.approx(8.0, rel=1e-3)
    assert tb.phase_imbalance([(1, 1), (0, 9999)], 1) == 1.0


def test_two_cohort_sizes_by_hand():
    # half the iterations admit 2 prompts, half 1; two ranks: P(max = 1) = 0.25, P(max = 2) = 0.75,
    # E[max] = 1.75, mean 1.5 -> 7/6
    assert tb.phase_imbalance([(2, 1), (1, 1)], 2) == pytest.approx(7.0 / 6.0)


def test_offline_run_trace_covers_every_iteration_and_request():
    # 10 requests of 100 + 5 tokens, batch 4, token budget 1000: the trace's iterations are the run's
    # iterations and its admissions are the requests
    trace: list = []
    _, steps = tb.offline_run_seconds(10, 100, 5, 4, 1000, lambda d, p: 1.0, 1, trace=trace)
    assert sum(n for _, n in trace) == steps
    assert sum(a * n for a, n in trace) == 10
    # first iteration: 4 prompts fit the batch (4 x 100 <= 1000)
    assert trace[0] == (4, 1)


def test_offline_dep8_prompt_scale_is_the_schedule_factor():
    """The offline run of a DEP8 scenario scales the rank-local prompt work by the schedule's own factor, not by
    the steady-state Poisson factor of point(): at 20000/2000 on 8 B200s each rank admits one 20000-token prompt
    when one of its requests finishes (one prompt an iteration fits the 20384-token budget), a share f of the
    iterations, so the factor is (1 - (1 - f)^8) / f, close to 8 since f is small."""
    from gpuplan import get_gpu, get_model
    from gpuplan.estimate import speed
    from gpuplan.scenario import scenario_from_dict

    scn = scenario_from_dict({
        "model": "qwen3-235b-a22b", "task": "infer", "hardware": {"gpu": "b200", "count": 8, "gpus_per_node": 8},
        "parallel": {"tp": 1, "dp": 8, "ep": 8},
        "infer": {"weights": "nvfp4", "kv_cache": "fp8", "engine": "trtllm", "prompt_len": 20000,
                  "output_len": 2000, "concurrency": 1000, "gpu_memory_utilization": 0.9,
                  "cuda_graph_batch_sizes": list(tb.PERF_OVERVIEW_GRAPH_BATCH_SIZES)}})
    sv = speed.serving_model(scn, get_model("qwen3-235b-a22b"), get_gpu("b200"))
    batch = sv.point(1000)["batch_per_replica"]
    trace: list = []
    tb.offline_run_seconds(math.ceil(1000 / 8), 20000, 2000, batch, int(sv.max_step_tokens), lambda d, p: 0.0, 1,
                           trace=trace)
    # one prompt per admitting iteration: the hand formula with f = prompt iterations / all iterations
    assert {a for a, _ in trace} == {0, 1}
    iters = sum(n for _, n in trace)
    f = sum(n for a, n in trace if a) / iters
    assert tb.phase_imbalance(trace, 8) == pytest.approx((1 - (1 - f) ** 8) / f, rel=1e-9)
    assert 6.5 < tb.phase_imbalance(trace, 8) < 8.0
