"""Loopback load test: one pathological client must not starve the others (issue 16).

Starts the web app with uvicorn on a free 127.0.0.1 port. Client B (source address 127.0.0.2)
sends cheap POST /api/estimate requests at a fixed rate, first alone ("quiet"), then while client A
(source 127.0.0.1) keeps firing huge recommend requests ("under attack": a 671B mixture-of-experts
search over the whole GPU catalog, ~15 s of CPU each, several at once and re-sent as soon as
each answers). Prints B's p50/p99 latency side by side for both phases and A's statuses (429:
per-client limit, 504: stopped at the time limit). Bounded in count and time; stops by itself.

    python benchmarks/bench_web_starvation.py                    # 2 x 8 s, time limit 5 s
    python benchmarks/bench_web_starvation.py --mode thread-unbounded   # the old behaviour, for contrast
    python benchmarks/bench_web_starvation.py --json
"""
from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

CHEAP = {"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "h100-sxm"},
         "infer": {"weights": "fp8", "concurrency": 16}}
HUGE = {"scenario": {"model": "deepseek-v3", "task": "train",
                     "train": {"tokens": 1e12, "micro_batch": [1, 2, 4, 8, 16],
                               "recompute": ["none", "selective", "full"], "optimizer": ["adamw", "adamw-8bit"]}}}


sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_web import _percentile  # noqa: E402  (one percentile for both web benchmarks)


def _start_server(mode: str, time_limit: float, workers: int):
    import uvicorn

    from gpuplan.web import create_app
    opts = {"time_limit_s": time_limit, "workers": workers}
    if mode == "thread-unbounded":            # before issue 16: threads that cannot be stopped, no per-client limit
        opts.update(isolation="thread", per_client=1024)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(**opts), host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    deadline = time.time() + 60
    while not server.started:
        if time.time() > deadline:
            raise SystemExit("server did not start")
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}", server


def _client(url: str, source: str, timeout: float):
    import httpx
    return httpx.AsyncClient(base_url=url, timeout=timeout, transport=httpx.AsyncHTTPTransport(local_address=source),
                             limits=httpx.Limits(max_connections=64))


async def _cheap_load(url: str, rate: float, seconds: float) -> dict:
    """Client B: fixed-rate estimates (open loop); latencies of the answers and their statuses."""
    latencies, statuses = [], Counter()
    async with _client(url, "127.0.0.2", 60) as client:
        async def one() -> None:
            t0 = time.perf_counter()
            try:
                r = await client.post("/api/estimate", json=CHEAP)
                statuses[r.status_code] += 1
                if r.status_code == 200:
                    latencies.append((time.perf_counter() - t0) * 1e3)
            except Exception as err:  # noqa: BLE001 - counted, not raised
                statuses[type(err).__name__] += 1
        start, tasks = time.perf_counter(), []
        for i in range(int(rate * seconds)):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one()))
        await asyncio.gather(*tasks)
    return {"requests": len(tasks), "ok": len(latencies), "statuses": dict(statuses),
            "p50_ms": round(_percentile(latencies, 0.5), 1), "p99_ms": round(_percentile(latencies, 0.99), 1),
            "max_ms": round(max(latencies), 1) if latencies else None}


async def _attack(url: str, stop: asyncio.Event, parallel: int) -> dict:
    """Client A: `parallel` loops, each re-sending the huge recommend as soon as it is answered."""
    statuses = Counter()
    async with _client(url, "127.0.0.1", 120) as client:
        async def loop() -> None:
            while not stop.is_set():
                try:
                    r = await client.post("/api/recommend", json=HUGE)
                    statuses[r.status_code] += 1
                    if r.status_code == 429:
                        await asyncio.sleep(0.2)
                except Exception as err:  # noqa: BLE001
                    statuses[type(err).__name__] += 1
        tasks = [asyncio.create_task(loop()) for _ in range(parallel)]
        await stop.wait()
        await asyncio.wait(tasks, timeout=5)
        for t in tasks:
            t.cancel()
    return dict(statuses)


async def _run(url: str, rate: float, seconds: float, parallel: int) -> dict:
    quiet = await _cheap_load(url, rate, seconds)
    stop = asyncio.Event()
    attack = asyncio.create_task(_attack(url, stop, parallel))
    await asyncio.sleep(0.5)                     # let the huge requests take their workers first
    loaded = await _cheap_load(url, rate, seconds)
    stop.set()
    return {"quiet": quiet, "under_attack": loaded, "attacker_statuses": await attack}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=("process", "thread-unbounded"), default="process")
    ap.add_argument("--rate", type=float, default=10.0, help="cheap requests per second from client B (default 10)")
    ap.add_argument("--seconds", type=float, default=8.0, help="length of each phase (default 8)")
    ap.add_argument("--parallel", type=int, default=6, help="huge requests client A keeps in flight (default 6)")
    ap.add_argument("--time-limit", type=float, default=5.0, help="server time limit in seconds (default 5)")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if not (0 < args.rate <= 100 and 0 < args.seconds <= 60 and 1 <= args.parallel <= 16):
        ap.error("keep the load bounded: rate <= 100/s, seconds <= 60, parallel <= 16")
    url, server = _start_server(args.mode, args.time_limit, args.workers)
    try:
        result = asyncio.run(_run(url, args.rate, args.seconds, args.parallel))
    finally:
        server.should_exit = True
    result.update(mode=args.mode, rate_per_s=args.rate, seconds=args.seconds, time_limit_s=args.time_limit,
                  workers=args.workers)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    q, a = result["quiet"], result["under_attack"]
    print(f"mode {args.mode}: {args.workers} workers, time limit {args.time_limit:g} s; client B {args.rate:g} "
          f"estimates/s for {args.seconds:g} s per phase; client A keeps {args.parallel} huge recommends in flight")
    print(f"{'':22}{'quiet':>12}{'under attack':>16}")
    for key, label in (("p50_ms", "B estimate p50 (ms)"), ("p99_ms", "B estimate p99 (ms)"),
                       ("max_ms", "B estimate max (ms)"), ("ok", "B answered 200")):
        print(f"{label:22}{q[key]!s:>12}{a[key]!s:>16}")
    print(f"B statuses: quiet {q['statuses']}, under attack {a['statuses']}")
    print(f"A statuses (huge recommend): {result['attacker_statuses']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
