"""Search speed side by side with Calculon (issue 17): candidates per second on a 530B job like the
one in Calculon's README (`llm-optimal-execution models/turing-530B.json 5128 2520 float16
systems/a100_80g.json`: Megatron-Turing NLG 530B on 5,128 A100-80GB, batch up to 2,520, sequence 2,048).

Calculon is not a dependency and nothing of it is in this repository. Install it in a throw-away
environment and point this script at its checkout:

    git clone https://github.com/calculon-ai/calculon /tmp/calculon      # needs numpy and psutil
    PYTHONPATH=src python benchmarks/bench_vs_calculon.py --calculon /tmp/calculon [--calculon-seconds 60]

Calculon's executions are run in-process, one at a time, with the options its README command uses
(`-m`: stop growing the micro-batch once a size fails; fused activations).

Without it the script prints gpuplan's side only and says that Calculon was skipped.

What is counted, on each side:
* Calculon: executions run per second, single process (its `search()` over its own parameter list,
  shuffled with a fixed seed, for --calculon-seconds), each a full model of one execution strategy
  (its own "Calculation rate" counts the same thing).
* gpuplan, two rates: *exact evaluations* per second (memory or speed estimates through the scalar
  pipeline, `stats.memory_evaluations + speed_evaluations`) and *space points* per second (every
  rule-allowed point of the search space, `stats.space_points`, each decided: by exact evaluation,
  by a proven bound or software rule without evaluation, or by a fitting set that is lighter in
  every technique). The second is the planner's throughput over its space; the first is the rate of
  the model itself. Both are printed; neither is passed off as the other.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
import types
from pathlib import Path

# Megatron-Turing NLG 530B (Smith et al. 2022, arXiv:2201.11990 table 1), as in
# tests/test_search_completeness.py; Calculon's models/turing-530B.json has the same shape
MT_NLG_530B = {"model_type": "gpt2", "_name_or_path": "mt-nlg-530b", "n_layer": 105, "n_embd": 20480,
               "n_head": 128, "n_positions": 2048, "vocab_size": 51200, "n_inner": 81920,
               "activation_function": "gelu_new", "tie_word_embeddings": True}
TRAIN = {"seq_len": 2048, "global_batch": 2520, "tokens": 2.7e11}
JOBS = {
    "530B, 5,128 x A100-80GB (Calculon's README job)": ({"gpu": "a100-sxm-80gb", "count": 5128}, {}),
    "530B, A100-80GB, count open (<= 8,192)": ({"gpu": "a100-sxm-80gb"}, {"max_gpus": 8192}),
}


def gpuplan_side(repeat: int) -> list[tuple[str, float, dict]]:
    from gpuplan.search import recommend
    out = []
    for name, (hw, kw) in JOBS.items():
        scn = {"model": MT_NLG_530B, "task": "train", "hardware": hw, "train": dict(TRAIN)}
        recommend(scn, progress=False, **kw)            # warm the catalog and calibration caches
        walls, rec = [], None
        for _ in range(repeat):
            t0 = time.perf_counter()
            rec = recommend(scn, progress=False, **kw)
            walls.append(time.perf_counter() - t0)
        out.append((name, statistics.median(walls), rec.stats))
    return out


def _import_calculon(path: str | None):
    if path:
        sys.path.insert(0, str(Path(path).resolve()))
    try:
        import pandas  # noqa: F401
    except ImportError:
        # Calculon imports pandas only for llm-all-executions, which is not run here
        sys.modules["pandas"] = types.ModuleType("pandas")
    try:
        import calculon
        from calculon.llm import Llm
        from calculon.llm.optimal_execution import OptimalExecution
    except ImportError as e:
        return None, f"{e}"
    return (calculon, Llm, OptimalExecution), None


def calculon_side(path: str | None, seconds: float | None) -> tuple[float, int, float] | str:
    """(executions per second, executions, seconds) of Calculon's own search, or why it was skipped."""
    mods, why = _import_calculon(path)
    if mods is None:
        return f"Calculon not importable ({why}); pass --calculon DIR (a checkout with numpy and psutil)"
    calculon, Llm, OE = mods
    root = Path(calculon.__file__).resolve().parent.parent
    app = Llm.Application(json.loads((root / "models" / "turing-530B.json").read_text()))
    syst = calculon.System(json.loads((root / "systems" / "a100_80g.json").read_text()))
    procs, max_batch, dtype = 5128, 2520, "float16"
    params = []
    # the parameter list of OptimalExecution.run_command (calculon/llm/optimal_execution.py)
    for tp in Llm.get_all_tensor_parallelisms(procs, app.hidden, app.attn_heads):
        for pp in Llm.get_all_pipeline_parallelisms(procs, tp, app.num_blocks):
            dp = Llm.get_data_parallelism(procs, tp, pp)
            for ppint in Llm.get_valid_pipeline_interleavings(app.num_blocks, pp):
                batch = OE.get_batch_size(dp, max_batch)
                if batch is None:
                    continue
                for rec in ("full", "attn_only", "none"):
                    for shard in ([True, False] if dp > 1 else [False]):
                        for comm in ("ar", "p2p_rs_ag", "rs_ag"):
                            params.append((False, 1, False, procs, max_batch, dtype, app, syst, tp, pp, dp, ppint,
                                           batch, rec, shard, comm, [True], True, True, True))
    random.Random(0).shuffle(params)
    execs, t0 = 0, time.perf_counter()
    for p in params:
        execs += OE.search(*p)[1]
        if seconds is not None and time.perf_counter() - t0 > seconds:
            break
    wall = time.perf_counter() - t0
    return execs / wall, execs, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calculon", default=os.environ.get("CALCULON_DIR"), help="Calculon checkout (or CALCULON_DIR)")
    ap.add_argument("--calculon-seconds", type=float, default=None,
                    help="stop Calculon's search after this many seconds (default: its whole parameter list, "
                         "~2.5 min on one core)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    ours = gpuplan_side(args.repeat)
    theirs = calculon_side(args.calculon, args.calculon_seconds)
    print(f"{'search':<50} {'wall s':>8} {'space pts':>10} {'exact evals':>12} {'pts/s':>10} {'evals/s':>9}")
    for name, wall, st in ours:
        n_eval = st["memory_evaluations"] + st["speed_evaluations"]
        print(f"{'gpuplan ' + name:<50} {wall:>8.3f} {st['space_points']:>10,} {n_eval:>12,} "
              f"{st['space_points'] / wall:>10,.0f} {n_eval / wall:>9,.0f}")
    if isinstance(theirs, str):
        print(f"Calculon: skipped: {theirs}")
        return
    rate, execs, wall = theirs
    print(f"{'Calculon llm-optimal-execution, 1 process':<50} {wall:>8.1f} {'':>10} {execs:>12,} {'':>10} "
          f"{rate:>9,.1f}")
    for name, w, st in ours:
        n_eval = st["memory_evaluations"] + st["speed_evaluations"]
        print(f"  {name}: space points/s = {st['space_points'] / w / rate:,.0f}x Calculon's executions/s; "
              f"exact evaluations/s = {n_eval / w / rate:,.1f}x")


if __name__ == "__main__":
    main()
