"""Prefill/decode disaggregation (DistServe, Zhong et al. OSDI 2024; Splitwise, Patel et al. ISCA 2024;
vLLM's disaggregated prefill through a KV connector) on the same scheduler and step cost.

* N prefill instances run prompts only: each request is a one-token request there (the prompt, then
  its first sampled token), requests dealt round-robin in arrival order.
* Its KV — every prompt token but the last, all layers, whole model — crosses the link to a decode
  instance: ready = prefill done + latency + bytes / (tp x the link's per-GPU rate x its efficiency),
  each tensor-parallel rank sending its own shard. Transfers do not contend with each other (a
  simplification: one per request, point to point).
* M decode instances take requests round-robin in the order their KV arrives. A decode instance
  computes the last prompt token and samples the first output token itself (vLLM's KV-connector path,
  `Policy.prefilled`), so TTFT = arrival -> that token, transfer included, and TPOT is the decode
  instance's alone: decode batches are never interrupted by prompts.

`colocated` runs the same arrivals on N + M ordinary replicas (round-robin), the same GPU count.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

import numpy as np

from ..comm import group_link
from .scheduler import Policy, Result, simulate
from .workload import Workload


def transfer_link(serving: Any, instances: int) -> Any:
    """The link KV takes from a prefill GPU to its decode peer: the scale-up link (NVLink / PCIe) when
    all instances fit in one node, else the node's network (catalog networks.csv) — one NIC per GPU."""
    gpn = int(serving.gpus_per_node)
    total = instances * serving.group_gpus
    span = 2 if total <= gpn else 2 * gpn
    return group_link(serving.gpu, 2, span, gpn, serving.network, serving.P["comm"])


def transfer_seconds(serving: Any, link: Any, prompt_tokens: np.ndarray) -> np.ndarray:
    """Seconds to move the KV of all prompt tokens but the last, each TP rank over its own link."""
    per_gpu = serving.kv_per_token_gpu                       # one rank's share of a token's KV
    bytes_per_rank = np.maximum(prompt_tokens - 1, 0) * per_gpu
    return link.latency_s + bytes_per_rank / link.effective_bytes_per_s


def _merge(parts: list[tuple[np.ndarray, Result]], n: int, wl: Workload) -> Result:
    """One Result over the whole workload from per-instance runs (`idx` maps each run's requests back)."""
    arr = np.full(n, np.nan)
    sched, first, fin = arr.copy(), arr.copy(), arr.copy()
    for idx, r in parts:
        sched[idx], first[idx], fin[idx] = r.first_scheduled_s, r.first_token_s, r.finish_s
        arr[idx] = r.arrival_s
    runs = [r for _, r in parts]
    return Result(arr, sched, first, fin, np.asarray(wl.input_tokens), np.asarray(wl.output_tokens),
                  sum(r.preemptions for r in runs), sum(r.iterations for r in runs),
                  sum(r.engine_steps for r in runs),
                  float(np.nansum(fin - arr)),                       # ∫ requests in system dt = Σ latencies
                  sum(r.kv_block_s for r in runs), sum(r.kv_blocks for r in runs),
                  sum(r.kv_max_blocks for r in runs), float(np.nanmax(fin)), [])


def split_round_robin(wl: Workload, k: int, policy: Policy, cost: Any) -> Result:
    """The workload dealt round-robin (arrival order) to k identical replicas, each simulated."""
    order = np.argsort(wl.arrival_s, kind="stable")
    parts = []
    for j in range(k):
        idx = order[j::k]
        if not len(idx):
            continue
        sub = Workload(wl.arrival_s[idx], wl.input_tokens[idx], wl.output_tokens[idx])
        parts.append((idx, simulate(sub, policy, cost)))
    return _merge(parts, wl.n, wl)


def simulate_disaggregated(wl: Workload, policy: Policy, cost: Any, n_prefill: int, m_decode: int,
                           transfer: Callable[[np.ndarray], np.ndarray]) -> tuple[Result, np.ndarray]:
    """(the whole system's Result, each request's KV transfer seconds)."""
    ones = np.ones(wl.n, dtype=np.asarray(wl.output_tokens).dtype)
    pre = split_round_robin(Workload(wl.arrival_s, wl.input_tokens, ones), n_prefill, policy, cost)
    t_x = transfer(np.asarray(wl.input_tokens))
    ready = pre.first_token_s + t_x
    dec = split_round_robin(Workload(ready, wl.input_tokens, wl.output_tokens), m_decode,
                            replace(policy, prefilled=True, prefix_hit=0.0), cost)
    res = replace(dec, arrival_s=np.asarray(wl.arrival_s, float), first_scheduled_s=pre.first_scheduled_s,
                  preemptions=pre.preemptions + dec.preemptions, iterations=pre.iterations + dec.iterations,
                  engine_steps=pre.engine_steps + dec.engine_steps,
                  in_system_s=float(np.nansum(dec.finish_s - np.asarray(wl.arrival_s, float))))
    return res, t_x
