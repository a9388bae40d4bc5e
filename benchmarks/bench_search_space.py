"""How much of the training search space `recommend` covers, and how fast (issue 17).

For a 70B pre-training search over the whole catalog (up to 4,096 GPUs) it prints the size of the
space (every GPU x count x tp x pp x cp x ep x framework x ZeRO x offload x recompute x micro-batch
point the search's rules allow, counted by search/grid.py for the GPUs whose software and price let
them be searched), how many of those points a proven bound or a software rule decided without an
evaluation, the exact (scalar pipeline) evaluations, the wall time, and both rates: space points per
second and exact evaluations per second. There is no heuristic to switch off: every point is decided
by evaluation, by a bound, or by a fitting technique set that is lighter on every axis.

    PYTHONPATH=src python benchmarks/bench_search_space.py [--repeat 3]
"""
from __future__ import annotations

import argparse
import statistics
import time

SCENARIO = {"model": "llama-3.1-70b", "task": "train", "train": {"seq_len": 8192, "tokens": 1.5e13}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from gpuplan.search import recommend
    recommend(SCENARIO, progress=False)          # warm the catalog and calibration caches
    times, rec = [], None
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        rec = recommend(SCENARIO, progress=False)
        times.append(time.perf_counter() - t0)
    st = rec.stats
    n = st["memory_evaluations"] + st["speed_evaluations"]
    wall = statistics.median(times)
    print("70B pre-training, whole catalog, <=4,096 GPUs")
    print(f"  space (rule-allowed points):  {st['space_points']:,}")
    print(f"  decided by a bound or rule:   {st['points_decided_by_bound']:,}")
    print(f"  layouts searched:             {st['layouts']:,}")
    print(f"  evaluations (memory + speed): {n:,} ({st['memory_evaluations']:,} + {st['speed_evaluations']:,})")
    print(f"  feasible plans:               {st['feasible']:,}")
    print(f"  wall time (median of {args.repeat}):   {wall:.3f} s")
    print(f"  space points/s:               {st['space_points'] / wall:,.0f}")
    print(f"  exact evaluations/s:          {n / wall:,.0f}")
    print(f"  best plan:                    {rec.plans[0].summary if rec.plans else '-'}")


if __name__ == "__main__":
    main()
