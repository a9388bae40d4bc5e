"""How much of the training search space `recommend` looks at, and how fast (issue 17).

For a 70B pre-training search over the whole catalog (up to 4,096 GPUs) it prints the size of the
space (GPU x count x tp x pp x cp x framework x ZeRO x offload x recompute x micro-batch points that
the search's rules allow), the layouts and evaluations the search made, the wall time, and
candidates per second (memory + speed evaluations per second). Optionally the same search with the
1.5x tensor-parallel screening switched off (`--no-screen`), to show what the heuristic saves.

    PYTHONPATH=src python benchmarks/bench_search_space.py [--repeat 3] [--no-screen]
"""
from __future__ import annotations

import argparse
import statistics
import time

SCENARIO = {"model": "llama-3.1-70b", "task": "train", "train": {"seq_len": 8192, "tokens": 1.5e13}}


def space_size(scn: dict) -> int:
    """Points of the space the search's rules allow (before memory, limits or pruning)."""
    from gpuplan.hardware import default_node_for, list_gpus
    from gpuplan.models import get_model
    from gpuplan.search import frameworks as F
    from gpuplan.search import space as S
    model = get_model(scn["model"])
    total = 0
    for gpu in list_gpus():
        gpn = max(1, int(default_node_for(gpu).gpus_per_node))
        for count in S.node_aligned_counts(gpn, S.DEFAULT_MAX_GPUS):
            for tp in S.powers_of_two(min(gpn, count)):
                if S.tp_reason(model, tp, "train"):
                    continue
                for pp in S.powers_of_two(min(model.num_layers, count // tp)):
                    if count % (tp * pp):
                        continue
                    par = {"tp": tp, "pp": pp, "cp": 1, "ep": 1}
                    opts, _ = F.options(None, par, count // (tp * pp))
                    for o in opts:
                        techs = sum(1 for z in o.zeros for off in o.offloads
                                    if not (off == "optimizer+params" and z < 3))
                        total += techs * len(S.TRAIN_OPTIONS["recompute"]) * len(S.TRAIN_OPTIONS["micro_batch"])
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-screen", action="store_true", help="switch off the 1.5x tensor-parallel screening")
    args = ap.parse_args()
    from gpuplan.search import recommend
    if args.no_screen:
        from gpuplan.search import train_search
        train_search.screened_out = lambda *a, **k: False
    recommend(SCENARIO, progress=False)          # warm the catalog and calibration caches
    times, rec = [], None
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        rec = recommend(SCENARIO, progress=False)
        times.append(time.perf_counter() - t0)
    st = rec.stats
    n = st["memory_evaluations"] + st["speed_evaluations"]
    wall = statistics.median(times)
    print(f"70B pre-training, whole catalog, <=4,096 GPUs{' (no screening)' if args.no_screen else ''}")
    print(f"  space (rule-allowed points):  {space_size(SCENARIO):,}")
    print(f"  layouts searched:             {st['layouts']:,}")
    print(f"  evaluations (memory + speed): {n:,} ({st['memory_evaluations']:,} + {st['speed_evaluations']:,})")
    print(f"  feasible plans:               {st['feasible']:,}")
    print(f"  wall time (median of {args.repeat}):   {wall:.3f} s")
    print(f"  candidates/s:                 {n / wall:,.0f}")
    print(f"  best plan:                    {rec.plans[0].summary if rec.plans else '-'}")


if __name__ == "__main__":
    main()
