"""Time the serving-under-load simulator (issue 14 target: 10,000 requests of a dense 70B on 8 GPUs in
<= 1 s on one core), and how the time scales with the number of requests and with the batch size.

    PYTHONPATH=src python benchmarks/bench_serving_load.py [--repeat 3]

Each figure is the best of --repeat runs of `estimate.load.serving_load` without the capacity search
(one simulation, including the step-cost table it builds), after the scenario is resolved and its
memory estimated (those are the same for every surface and are timed by bench_startup.py). Times are
CPU seconds of this process (time.process_time): the simulator is single-threaded, so that is its time
on one core, and other work on a shared machine does not inflate it the way it inflates wall time.
"""
from __future__ import annotations

import argparse
import time

BASE = {"model": "llama-3.1-70b", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 8},
        "parallel": {"tp": 8}, "infer": {"engine": "vllm", "prompt_len": 1000, "output_len": 300}}


def timed(load: dict, infer: dict | None = None, repeat: int = 3) -> tuple[float, dict]:
    from gpuplan import pipeline
    from gpuplan.estimate.load import serving_load
    from gpuplan.estimate.speed import serving_model
    scn = {**BASE, "infer": {**BASE["infer"], **(infer or {}), "load": load}}
    r = pipeline.resolve(scn)
    mem = pipeline.memory(r)
    best, out = float("inf"), {}
    for _ in range(repeat):
        t0 = time.process_time()
        sv = serving_model(r.scenario, r.model, r.gpu, params=r.speed_params, network=r.network, memory=mem)
        out = serving_load(r.scenario, sv, int(r.gpu.usable_memory_bytes), search=False)
        best = min(best, time.process_time() - t0)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    lengths = {"input": {"dist": "lognormal", "mean": 1000, "cv": 0.5, "max": 4000},
               "output": {"dist": "lognormal", "mean": 300, "cv": 0.5, "max": 1500}}
    t, out = timed({"rate_per_s": 10, "requests": 10_000, **lengths}, repeat=a.repeat)
    print(f"headline: 10,000 requests, Llama-3.1-70B tp=8 on 8x H100, vLLM, Poisson 10 req/s: {t:.3f} s "
          f"({out['iterations']:,} iterations, {out['engine_steps']:,} simulated one by one; "
          f"target <= 1 s) -> {'PASS' if t <= 1.0 else 'FAIL'}")
    t, out = timed({"rate_per_s": 10, "requests": 10_000, **lengths}, {"num_scheduler_steps": 10}, repeat=a.repeat)
    print(f"the same with vLLM V0 multi-step scheduling (num_scheduler_steps 10): {t:.3f} s "
          f"({out['iterations']:,} iterations, {out['engine_steps']:,} simulated one by one)")
    print("\nscaling with requests (10 req/s):")
    for n in (1_000, 10_000, 50_000):
        t, out = timed({"rate_per_s": 10, "requests": n, **lengths}, repeat=a.repeat)
        print(f"  {n:>7,} requests: {t:7.3f} s  ({t / n * 1e6:6.1f} µs/request, {out['engine_steps']:,} steps)")
    print("\nscaling with batch size (offline: all 10,000 requests queued at t=0, batch = max_num_seqs):")
    for seqs in (32, 128, 512, 1024):
        t, out = timed({"arrival": "offline", "requests": 10_000, **lengths}, {"max_num_seqs": seqs},
                       repeat=a.repeat)
        print(f"  max_num_seqs {seqs:>5}: {t:7.3f} s  ({out['iterations']:,} iterations, "
              f"{out['engine_steps']:,} simulated one by one, {out['preemptions']} preemptions)")


if __name__ == "__main__":
    main()
