"""Loopback load benchmark of the web API: a fixed request rate against POST /api/estimate.

Starts `gpuplan web`'s app with uvicorn on a free 127.0.0.1 port (or uses --url), sends requests
at a fixed rate (open loop: a slow answer does not slow the sender) for a fixed time, and prints
p50/p90/p99/max latency and the error count. Needs gpuplan[web] and httpx. All requests come from
one client address, so the server's per-client limit (2 computations in flight) answers 429 once
requests overlap more than that; --per-client raises it for a throughput run.

    python benchmarks/bench_web.py                     # 20 req/s for 10 s
    python benchmarks/bench_web.py --rate 50 --seconds 20 --json
"""
from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

SCENARIOS = [
    {"model": "llama-3.1-8b", "task": "train", "hardware": {"gpu": "h100-sxm", "count": 8},
     "train": {"seq_len": 4096, "recompute": "selective"}, "parallel": {"zero": 3}},
    {"model": "llama-3.1-8b", "task": "finetune", "hardware": {"gpu": "rtx-4090"}, "train": {"method": "qlora"}},
    {"model": "llama-3.1-70b", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 4},
     "parallel": {"tp": 4}, "infer": {"weights": "fp8", "concurrency": 64}},
]


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def _start_server(per_client: int = 2) -> tuple[str, object]:
    import uvicorn

    from gpuplan.web import create_app
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(per_client=per_client), host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    deadline = time.time() + 20
    while not server.started:
        if time.time() > deadline:
            raise SystemExit("server did not start")
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}", server


async def _run(url: str, rate: float, seconds: float, timeout: float) -> dict:
    import httpx
    latencies: list[float] = []
    errors: dict[str, int] = {}
    total = int(rate * seconds)
    async with httpx.AsyncClient(base_url=url, timeout=timeout,
                                 limits=httpx.Limits(max_connections=256, max_keepalive_connections=64)) as client:
        await client.post("/api/estimate", json=SCENARIOS[0])        # warm-up: registry and catalog load once

        async def one(i: int) -> None:
            t0 = time.perf_counter()
            try:
                r = await client.post("/api/estimate", json=SCENARIOS[i % len(SCENARIOS)])
                if r.status_code != 200:
                    errors[f"HTTP {r.status_code}"] = errors.get(f"HTTP {r.status_code}", 0) + 1
                    return
            except httpx.HTTPError as err:
                errors[type(err).__name__] = errors.get(type(err).__name__, 0) + 1
                return
            latencies.append(time.perf_counter() - t0)

        start = time.perf_counter()
        tasks = []
        for i in range(total):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i)))
        await asyncio.gather(*tasks)
        wall = time.perf_counter() - start
    ms = [x * 1e3 for x in latencies]
    return {"endpoint": "POST /api/estimate", "rate_per_s": rate, "seconds": seconds, "requests": total,
            "ok": len(latencies), "errors": sum(errors.values()), "error_kinds": errors,
            "achieved_per_s": round(total / wall, 2),
            "p50_ms": round(_percentile(ms, 0.50), 2), "p90_ms": round(_percentile(ms, 0.90), 2),
            "p99_ms": round(_percentile(ms, 0.99), 2), "max_ms": round(max(ms), 2) if ms else None,
            "mean_ms": round(statistics.fmean(ms), 2) if ms else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=20.0, help="requests per second (default 20)")
    ap.add_argument("--seconds", type=float, default=10.0, help="duration (default 10)")
    ap.add_argument("--url", help="benchmark a running server instead of starting one (loopback only)")
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--per-client", type=int, default=2, help="server's per-client limit (default 2, as served)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if not (0 < args.rate <= 500 and 0 < args.seconds <= 120):
        ap.error("keep the load bounded: 0 < rate <= 500, 0 < seconds <= 120")
    if args.url:
        host = args.url.split("//", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0].strip("[]")
        if host not in ("127.0.0.1", "localhost", "::1"):
            ap.error("--url must be a loopback address")
        url, server = args.url.rstrip("/"), None
    else:
        url, server = _start_server(max(1, args.per_client))
    try:
        result = asyncio.run(_run(url, args.rate, args.seconds, args.timeout))
    finally:
        if server is not None:
            server.should_exit = True
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['endpoint']} at {args.rate:g} req/s for {args.seconds:g} s on {url}")
        print(f"  requests {result['requests']}, ok {result['ok']}, errors {result['errors']} {result['error_kinds'] or ''}")
        print(f"  latency p50 {result['p50_ms']} ms, p90 {result['p90_ms']} ms, p99 {result['p99_ms']} ms, "
              f"max {result['max_ms']} ms (achieved {result['achieved_per_s']} req/s)")
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
