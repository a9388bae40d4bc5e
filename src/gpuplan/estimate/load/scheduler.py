"""Iteration-level simulation of one serving replica's scheduler (continuous batching).

The rules follow vLLM V1's scheduler (vllm/v1/core/sched/scheduler.py `Scheduler.schedule`, read at
commit 00024d314514900f361ad072af6931e403b7f589; docs/serving-load.md lists them with the other
engines' parameterisations):

* each iteration has a token budget (max_num_batched_tokens); running requests are served first,
  one token per decoding request, then the running requests still in prefill get prompt chunks;
* waiting requests are admitted first-come first-served while the budget lasts, fewer than
  max_num_seqs run and the KV pool has the blocks for their first chunk — but not in an iteration
  that had to preempt;
* the KV pool is allocated in blocks; a decode that crosses a block boundary needs a new block and,
  when the pool is full, the newest running request is preempted (its blocks freed, its progress
  recomputed later: it goes back to the head of the waiting queue);
* prefix caching skips a share of each prompt (whole blocks; at least one token is computed).

Speed: runs of decode-only iterations in which nothing changes (no arrival that could be admitted,
no completion, no preemption) are skipped in one step whose time is the closed-form sum of the
tabulated step cost (cost.py), and per-request state of decoding requests is kept implicitly (a
decode counter), so an iteration costs O(chunks), not O(batch).
"""
from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .api_server import ApiServer, burst_handoffs
from .workload import Workload


@dataclass(frozen=True)
class Policy:
    """One engine's scheduler, as parameters (engines.py builds it for vLLM, SGLang, TensorRT-LLM,
    llama.cpp)."""
    engine: str = "vllm"
    max_num_seqs: int = 256
    token_budget: int = 8192          # tokens per iteration (decodes + prompt chunks)
    block_size: int = 16              # KV pool granularity (tokens)
    kv_blocks: int = 1 << 40          # pool size (blocks)
    chunked_prefill: bool = True      # a prompt may be split over iterations
    mixed: bool = True                # prompt chunks share an iteration with the decodes
    reserve_full: bool = False        # admission reserves prompt + output (no growth, no preemption)
    prefix_hit: float = 0.0           # share of each prompt served from the prefix cache
    tokens_per_step: float = 1.0      # speculative decoding: mean tokens a decode step yields per sequence
    prefilled: bool = False           # disaggregated decode instance: a new request's prompt KV arrives from
                                      # a prefill instance; all but its last prompt token are computed
    decode_steps: int = 1             # vLLM V0 multi-step scheduling (--num-scheduler-steps): a decode batch, once
                                      # scheduled, runs this many iterations with no admission, and its tokens
                                      # (and finishes) reach the client when the run ends
    stream_finish_in_run: bool = False   # multi-step with V0's async output processor: a request whose last token
                                         # falls inside a run has its final output sent when that step is
                                         # processed (beside the next step), not at the run's end; it keeps its
                                         # batch slot and KV until the run ends
    lookahead: bool = False           # the scheduler picks batch n+1 while the GPU runs batch n (SGLang's overlap
                                      # loop, TensorRT-LLM's PyTorch overlap loop, vLLM's async scheduling): a
                                      # request that reaches a busy engine during batch n first runs in batch n+2
    new_token_ratio: float | None = None   # SGLang's admission (TokenRatio below) with this initial ratio
                                           # (min(0.7 x --schedule-conservativeness, 1)); None: the vLLM rules
    keep_preempted: bool = False      # vLLM V1's prefix cache (on by default) keeps a preempted request's full
                                      # blocks until the free queue reuses them (simulate's `kept`)


@dataclass(frozen=True)
class TokenRatio:
    """SGLang's output-aware admission and retraction (sgl-project/sglang v0.5.5.post1, the PyPI wheel of tag
    v0.5.5.post1: `managers/schedule_policy.py` PrefillAdder, `managers/scheduler.py` get_new_batch_prefill /
    update_running_batch, `managers/schedule_batch.py` retract_decode, `environ.py` defaults):

    * a waiting request is admitted only if its remaining prompt + min(max_new_tokens, clip) is below the pool's
      free tokens less `ratio` x min(remaining output, clip) of every running request, less what this round has
      already admitted (prompt chunk + its whole min(max_new_tokens, clip)); the first refusal ends the round
      and blocks admission (batch_is_full) until the running batch shrinks (a finish or a retraction);
    * `ratio` starts at init (0.7 x conservativeness), falls by (init - init x 0.14) / 600 per decode batch to
      init x 0.14, and is reset to init when the engine is idle;
    * when a decode step has no room, requests are retracted fewest-output-first (ties: longest prompt) until
      it has, go to the tail of the waiting queue, and ratio becomes min(1, (decoded + 20 x n) / (max_new + 1))
      over the n requests left."""
    min_factor: float = 0.14          # SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR
    decay_steps: int = 600            # SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS
    retract_steps: int = 20           # SGLANG_RETRACT_DECODE_STEPS
    clip: int = 4096                  # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION


@dataclass
class Result:
    arrival_s: np.ndarray
    first_scheduled_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    preemptions: int
    iterations: int
    engine_steps: int                       # iterations simulated one by one (the rest were skipped in runs)
    in_system_s: float                      # ∫ requests in the system dt
    kv_block_s: float                       # ∫ KV blocks in use dt
    kv_blocks: int
    kv_max_blocks: int
    horizon_s: float
    timeline: list[tuple[float, float, int, int]] = field(default_factory=list)  # (t, kv share, running, waiting)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class SloStop:
    """Give up a run once it certainly misses a latency SLO: `ttft_misses` requests with a TTFT above
    `ttft_s`, or `tpot_misses` with a TPOT above `tpot_s` (None: that target is not checked). The
    simulation is causal (a later arrival never changes a first token or a finish already recorded), so a
    miss counted mid-run is a miss of the whole run; load/__init__.slo_stop sets the counts at which the
    run's percentile is certainly above the target (load.meets_slo would say False)."""
    ttft_s: float | None
    ttft_misses: int
    tpot_s: float | None
    tpot_misses: int


def simulate(workload: Workload, policy: Policy, cost: Any, *, timeline_points: int = 200,
             slo_stop: SloStop | None = None) -> Result | None:
    """Serve every request of `workload` under `policy`, iteration by iteration, on `cost`. With `slo_stop`
    the run returns None as soon as it certainly misses that SLO (the rest of it is not simulated)."""
    pol = policy
    n = workload.n
    P = [int(x) for x in workload.input_tokens]
    O = [int(x) for x in workload.output_tokens]
    O_out = O                   # the output lengths the client sees (TPOT divides by them; O changes below with
                                # speculative decoding)
    stop_ttft = slo_stop.ttft_s if slo_stop is not None else None
    stop_tpot = slo_stop.tpot_s if slo_stop is not None else None
    misses = [0, 0]             # TTFT, TPOT misses so far (slo_stop)
    stopped = False
    bs = pol.block_size
    cap = pol.kv_blocks
    if pol.tokens_per_step > 1.0:
        # speculative decoding: a decoding sequence advances tokens_per_step tokens per iteration (the
        # mean of Leviathan et al.'s accepted-prefix count), so a request needs 1 + ceil((O-1)/E)
        # iterations' worth of "tokens" here; the pool shrinks by the same ratio, so the KV those
        # iteration-tokens stand for is held (docs/serving-load.md, approximations)
        E = pol.tokens_per_step
        O_real = O
        O = [1 + (math.ceil((o - 1) / E) if o > 1 else 0) for o in O]
        real, sim = sum(P) + sum(O_real), sum(P) + sum(O)
        cap = max(1, int(cap * sim / real))
    for i in range(n):
        need = _cdiv(P[i] + O[i], bs)
        if need > cap:
            raise ValueError(f"request {i} needs {need} KV blocks ({P[i]} + {O[i]} tokens), more than the "
                             f"pool's {cap}")
    arr = [math.nan] * n
    first_sched = [math.nan] * n
    first_tok = [math.nan] * n
    finish = [math.nan] * n
    comp = [0] * n          # tokens computed (requests not decoding)
    gen = [0] * n           # tokens generated (requests not decoding)
    blk = [0] * n           # KV blocks held (requests not decoding, or reserve_full)
    # decoding requests: state at the decode counter value `it0` they joined with
    d_it0 = [0] * n
    d_n0 = [0] * n
    d_g0 = [0] * n
    decoding = [False] * n
    phase = [0] * bs        # decoding requests by the counter residue at which they need a new block
    ctx0 = 0                # Σ (n0 − it0) over decoding requests: Σ context = ctx0 + D·it
    D = 0
    it = 0                  # decode counter: decode iterations run so far
    fin_heap: list[tuple[int, int]] = []   # (counter value when done, request)

    # arrivals: `arr` is when the client sends a request; it reaches the engine's queue `fe` seconds later,
    # after the front end (HTTP, tokenisation, hand-off: engine_host.py; 0 for costs without one)
    fe = float(getattr(cost, "frontend_s", 0.0) or 0.0)
    # the API server's per-request work done in turn (vLLM 0.11.0's chat-template parse; 0 elsewhere): a burst is
    # handed to the engine when all of it is parsed (api_server.py)
    parse_s = float(getattr(cost, "template_parse_s", 0.0) or 0.0)
    next_rid = min(workload.clients, n) if workload.clients else n
    for i in range(next_rid):
        arr[i] = 0.0 if workload.clients else float(workload.arrival_s[i])
    handoff = burst_handoffs(arr[:next_rid], parse_s)
    pending: list[tuple[float, int]] = [(handoff[i] + fe, i) for i in range(next_rid)]
    api = ApiServer(parse_s, max(handoff, default=0.0) if parse_s > 0 else 0.0)
    heapq.heapify(pending)

    waiting: deque[int] = deque()
    running: list[int] = []          # admission order (the newest last: preempted first)
    prefilling: list[int] = []       # running requests still computing their prompt, admission order
    used = 0
    max_used = 0
    # vLLM V1 prefix caching of preempted requests (Policy.keep_preempted; read in vllm v0.11.0, git f71952c1c):
    # preemption frees the request's blocks in reverse order (single_type_kv_cache_manager.free) onto the tail of
    # the free queue (block_pool.free_blocks); new blocks are taken from its head, evicting whatever cached block
    # is there (get_new_blocks); re-admission finds the longest run of its own full blocks still cached
    # (kv_cache_manager.get_computed_blocks). So a preempted request's first f full blocks survive until more
    # blocks have been taken than were free ahead of them: kept[r] = (f, free blocks ahead, `taken` then).
    taken = 0                        # blocks handed out from the free queue so far
    kept: dict[int, tuple[int, int, int]] = {}
    t = 0.0
    done = 0
    preemptions = 0
    iterations = 0
    steps = 0
    in_sys = 0                       # requests arrived and not finished
    in_system_s = 0.0
    kv_block_s = 0.0
    tl: list[tuple[float, float, int, int]] = []
    # SGLang's output-aware admission (TokenRatio): the ratio is r_base, less r_decay per decode batch since
    # counter value r_it0; rem0 - D·it is the decoding requests' remaining output; long_out holds those whose
    # remaining output may exceed the clip; `blocked` is SGLang's batch_is_full after a refused admission
    tr = TokenRatio() if pol.new_token_ratio is not None else None
    r_init = pol.new_token_ratio or 0.0
    r_min = r_init * tr.min_factor if tr else 0.0
    r_decay = (r_init - r_min) / tr.decay_steps if tr else 0.0
    r_base, r_it0 = r_init, 0
    rem0 = 0
    long_out: set[int] = set()
    blocked = False

    def enqueue_until(now: float, cutoff: float | None = None) -> None:
        """Move the requests that reached the engine by `cutoff` (default: now) into the waiting queue."""
        nonlocal in_sys, in_system_s
        cut = now if cutoff is None else cutoff
        while pending and pending[0][0] <= cut:
            ta, r = heapq.heappop(pending)
            waiting.append(r)
            in_sys += 1
            in_system_s += now - ta          # it was in the system since ta

    def dec_ctx(r: int) -> int:
        return d_n0[r] + it - d_it0[r]

    def ratio() -> float:
        return max(r_min, r_base - r_decay * (it - r_it0))

    def reserved() -> float:
        """SGLang: the tokens the running requests hold back from admission (ratio x remaining output, clipped,
        of each decoding request; a request still in its prompt: the rest of it and its whole clipped output)."""
        rem = rem0 - D * it
        for r in list(long_out):
            left = O[r] - (d_g0[r] + it - d_it0[r])
            if not decoding[r] or left <= tr.clip:
                long_out.discard(r)
            else:
                rem -= left - tr.clip
        return ratio() * rem + sum(P[r] + gen[r] - comp[r] + min(O[r] - gen[r], tr.clip) for r in prefilling)

    def sg_fits(r: int, cached: int, room: float) -> bool:
        """SGLang add_one_req: the whole remaining prompt and the clipped output must fit below `room`."""
        return P[r] + gen[r] - cached + min(O[r] - gen[r], tr.clip) < room

    def leave_decode(v: int) -> None:
        nonlocal rem0, blocked
        rem0 -= O[v] - d_g0[v] + d_it0[v]
        long_out.discard(v)
        blocked = False                  # the running batch shrank: SGLang tries to admit again

    def victim() -> int:
        """SGLang retract_decode: the decoding request with the fewest output tokens (ties: the longest prompt, then
        the newest: a stable sort, reversed, popped from the end); vLLM: the newest running request."""
        if tr is None or not D:
            return running[-1]
        return min((r for r in reversed(running) if decoding[r]), key=lambda r: (d_g0[r] + it - d_it0[r], -P[r]))

    def preempt_last() -> int:
        nonlocal used, D, ctx0, preemptions
        v = victim()
        running.remove(v)
        if pol.keep_preempted:
            computed = dec_ctx(v) if decoding[v] else comp[v]
            kept[v] = (computed // bs, cap - used, taken)
        if decoding[v]:
            nv = dec_ctx(v)
            gen[v] = min(d_g0[v] + it - d_it0[v], O[v] - 1)   # (multi-step: a run may have passed its last token)
            leave_decode(v)
            decoding[v] = False
            if not pol.reserve_full:
                phase[(d_it0[v] - d_n0[v]) % bs] -= 1
                used -= _cdiv(nv, bs)
            else:
                used -= blk[v]
            ctx0 -= d_n0[v] - d_it0[v]
            D -= 1
        else:
            prefilling.remove(v)
            used -= blk[v]
        comp[v] = 0
        blk[v] = 0
        if tr is None:
            waiting.appendleft(v)        # vLLM: back to the head of the queue
        else:
            waiting.append(v)            # SGLang: _add_request_to_queue appends it to the tail
        preemptions += 1
        return v

    def first_chunk_blocks(r: int, budget: int) -> tuple[int, int, int]:
        """(cached tokens, chunk tokens, new blocks) of admitting waiting request r now."""
        target = P[r] + gen[r]
        cached = 0
        if pol.prefilled and gen[r] == 0:
            # the KV of every prompt token but the last was transferred (vLLM's KV-connector path: the
            # decode instance computes the last prompt token and samples the first output token); a
            # request preempted here is recomputed locally like any other
            cached = target - 1
        elif pol.prefix_hit > 0:
            cached = min(int(pol.prefix_hit * P[r]) // bs * bs, target - 1)
        if r in kept:
            full, ahead, mark = kept[r]
            alive = full - max(0, taken - mark - ahead)
            if alive > 0:
                cached = max(cached, min(alive * bs, (target - 1) // bs * bs))
        rem = target - cached
        c = min(rem, budget) if pol.chunked_prefill else rem
        total = P[r] + O[r] if pol.reserve_full else cached + c
        return cached, c, _cdiv(total, bs)

    def admissible(budget: int, free: int, busy: bool) -> bool:
        nonlocal blocked
        if not waiting or budget <= 0 or len(running) >= pol.max_num_seqs or blocked:
            return False
        r = waiting[0]
        cached, c, nb = first_chunk_blocks(r, budget)
        if not pol.chunked_prefill and c > budget and busy:
            return False
        if tr is not None and not sg_fits(r, cached, cap - used - reserved()):
            blocked = True
            return False
        return nb <= free

    def retire(r: int, now: float, shown: float | None = None) -> None:
        """Request r leaves the batch at `now`; its stream ended at `shown` (default: now)."""
        nonlocal used, D, ctx0, done, in_sys, next_rid, blocked, in_system_s, stopped
        seen = now if shown is None else min(shown, now)
        finish[r] = seen
        if stop_tpot is not None and O_out[r] > 1 and (seen - first_tok[r]) / max(O_out[r] - 1.0, 1.0) > stop_tpot:
            misses[1] += 1      # the TPOT load.per_request computes, in the same float operations
            stopped = stopped or misses[1] >= slo_stop.tpot_misses
        in_system_s -= now - seen               # it left the system (for its client) when its stream ended
        done += 1
        in_sys -= 1
        running.remove(r)
        blocked = False
        if decoding[r]:
            leave_decode(r)
            decoding[r] = False
            if pol.reserve_full:
                used -= blk[r]
            else:
                phase[(d_it0[r] - d_n0[r]) % bs] -= 1
                used -= _cdiv(dec_ctx(r), bs)
            ctx0 -= d_n0[r] - d_it0[r]
            D -= 1
        else:
            used -= blk[r]
        blk[r] = 0
        if workload.clients and next_rid < n:     # the client sends its next request now
            arr[next_rid] = seen
            heapq.heappush(pending, (api.handoff(seen) + fe, next_rid))
            next_rid += 1

    def live_top() -> int | None:
        """The decode counter at which the next decoding request finishes (stale entries dropped)."""
        while fin_heap:
            k, r = fin_heap[0]
            if decoding[r] and d_it0[r] + O[r] - d_g0[r] == k:
                return k
            heapq.heappop(fin_heap)
        return None

    def run_time(k: int) -> float:
        """The time the decode counter reached k inside the current multi-step run (run_segs)."""
        for i0, t0, d, c0, kk, dt in reversed(run_segs):
            if i0 < k <= i0 + kk:
                return t0 + (dt if k == i0 + kk else cost.decode_sum(d, c0, k - i0))
        return math.nan

    def complete(now: float) -> None:
        while True:
            k = live_top()
            if k is None or k > it:
                return
            _, r = heapq.heappop(fin_heap)
            shown = run_time(k) if in_run_stream else math.nan
            retire(r, now, None if math.isnan(shown) else shown)

    max_seqs, chunked = pol.max_num_seqs, pol.chunked_prefill
    # vLLM V0 multi-step: decode iterations left in the current run; while it is > 0 nothing is admitted or
    # prefilled, and requests whose last token falls inside the run finish (their stream ends) with the run
    multi = pol.decode_steps > 1
    ms_left = 0
    # the current run's iterations (counter at start, time at start, decodes, mean context, iterations, seconds):
    # with stream_finish_in_run a request that finishes inside the run is seen to end when its last step did
    in_run_stream = multi and pol.stream_finish_in_run
    run_segs: list[tuple[int, float, int, float, int, float]] = []
    # lookahead: the batch about to run was chosen when the previous one started (`picked`), so only the
    # requests that had reached the engine by then are in it; an idle engine picks a request at once
    picked = 0.0
    while done < n:
        if stopped:
            return None
        enqueue_until(t, picked if pol.lookahead else t)
        if not D:
            ms_left = 0                      # a multi-step run ends when its batch is gone (all preempted)
        if not running and not waiting:
            r_base, r_it0, blocked = r_init, it, False     # SGLang resets the ratio when idle
            if pending and pending[0][0] <= t:
                enqueue_until(t)             # it came while the last batch ran: no batch was queued behind it
            else:
                t = pending[0][0]            # idle until the next arrival
                picked = t
                continue
        iterations += 1
        steps += 1
        budget = pol.token_budget
        free = cap - used
        # ---- skip a run of decode-only iterations --------------------------------------------------
        if D > 0 and not prefilling and (pol.reserve_full or phase[it % bs] <= free):
            need_now = 0 if pol.reserve_full else phase[it % bs]
            # (an engine that does not mix runs a prompt batch alone: a whole prompt over the budget still fits it)
            if ms_left or not admissible(budget - (D if pol.mixed else 0), free - need_now, pol.mixed):
                if multi:                       # a multi-step run: its remaining iterations, whatever finishes
                    if not ms_left:
                        run_segs.clear()
                    ms_left = ms_left or pol.decode_steps
                    k = ms_left
                else:
                    k = live_top() - it
                if not pol.reserve_full:        # the pool must cover every new block of the run
                    full, rest = divmod(free, D)   # every decoding request needs one block per bs iterations
                    kk = full * bs
                    acc = 0
                    for j in range(bs):
                        acc += phase[(it + kk + j) % bs]
                        if acc > rest:
                            break
                        kk += 1
                    k = min(k, kk)
                c0 = (ctx0 + D * it) / D
                if k >= 2 and not waiting and pending and not multi:
                    # stop with the iteration during which the next request arrives
                    gap = pending[0][0] - t
                    if cost.decode_sum(D, c0, k) > gap:
                        lo, hi = 1, k
                        while lo < hi:
                            mid = (lo + hi) // 2
                            if cost.decode_sum(D, c0, mid) >= gap:
                                hi = mid
                            else:
                                lo = mid + 1
                        k = lo
                if k >= 2:
                    dt = cost.decode_sum(D, c0, k)
                    picked = t + dt - cost.decode_sum(D, c0 + k - 1, 1)   # the run's last iteration started here
                    grow = 0
                    if not pol.reserve_full:
                        grow = D * (k // bs) + sum(phase[(it + k - k % bs + j) % bs] for j in range(k % bs))
                    kv_block_s += (used + grow / 2.0) * dt
                    used += grow
                    taken += grow
                    max_used = max(max_used, used)
                    in_system_s += in_sys * dt
                    if in_run_stream:
                        run_segs.append((it, t, D, c0, k, dt))
                    t += dt
                    it += k
                    iterations += k - 1
                    if multi:
                        ms_left -= k
                    enqueue_until(t, picked if pol.lookahead else t)
                    if not ms_left and fin_heap and fin_heap[0][0] <= it:
                        complete(t)
                    if len(tl) < 100000:
                        tl.append((t, used / cap if cap else 0.0, len(running), len(waiting)))
                    continue
        # ---- one iteration -----------------------------------------------------------------------
        preempted = False
        # an engine that does not mix (SGLang's default) runs a prefill batch whenever it has prompt
        # work, and the decodes wait
        prefill_iter = not ms_left and not pol.mixed and bool(prefilling or admissible(budget, cap - used, False))
        if multi and not prefill_iter and D > 0 and not ms_left:
            ms_left = pol.decode_steps          # this decode iteration starts a multi-step run
            run_segs.clear()
        if not prefill_iter and not pol.reserve_full:
            while D > 0 and phase[it % bs] > cap - used:
                preempt_last()
                preempted = True
            if preempted and tr is not None and D:
                # retract_decode: the new ratio from the requests left (decoded + 20 steps each, over max_new)
                left = [r for r in running if decoding[r]]
                decoded = sum(d_g0[r] + it - d_it0[r] for r in left)
                r_base = min(1.0, (decoded + tr.retract_steps * len(left)) / (sum(O[r] for r in left) + 1))
                r_it0 = it + 1           # the batch that retracted does not decay it
            if D > 0:
                used += phase[it % bs]
                taken += phase[it % bs]
        dec = 0 if prefill_iter else D
        budget -= dec
        chunks: list[tuple[int, int, int]] = []       # (request, tokens, offset)
        for r in list(prefilling):
            if budget <= 0:
                break
            if r not in prefilling:      # preempted while making room for an earlier one
                continue
            c = min(P[r] + gen[r] - comp[r], budget)
            nb = _cdiv(comp[r] + c, bs) - blk[r] if not pol.reserve_full else 0
            while nb > cap - used and running:
                v = preempt_last()
                preempted = True
                if v == r:
                    break
            if r not in prefilling:
                continue
            blk[r] += nb
            used += nb
            taken += nb
            chunks.append((r, c, comp[r]))
            budget -= c
        if not preempted and not ms_left and not blocked:
            busy = bool(chunks) or dec > 0
            room = cap - used - reserved() if tr is not None else 0.0
            while waiting and budget > 0 and len(running) < max_seqs:
                r = waiting[0]
                cached, c, nb = first_chunk_blocks(r, budget)
                if nb > cap - used or (c > budget and busy and not chunked):
                    blocked = tr is not None and nb > cap - used
                    break
                if tr is not None:
                    if not sg_fits(r, cached, room):
                        blocked = True
                        break
                    # PrefillAdder._update_prefill_budget: the chunk, and the clipped output once the prompt ends
                    room -= c + (min(O[r], tr.clip) if cached + c >= P[r] + gen[r] else 0)
                waiting.popleft()
                busy = True
                if math.isnan(first_sched[r]):
                    first_sched[r] = t
                comp[r] = cached
                blk[r] = nb
                used += nb
                taken += nb - cached // bs       # its cached blocks leave the queue without an eviction
                kept.pop(r, None)
                running.append(r)
                prefilling.append(r)
                chunks.append((r, c, cached))
                budget -= c
        max_used = max(max_used, used)
        if dec == 0 and not chunks:
            # everything running was preempted in this iteration, which admits nothing (vLLM): the
            # next one starts over from the waiting queue
            iterations -= 1
            steps -= 1
            continue
        ptok = 0
        att = 0.0
        for _, c, o in chunks:
            ptok += c
            att += cost.attention(c, o)
        ctx = (ctx0 + D * it) / D if dec else 0.0
        dt = cost.step(dec, ctx, ptok, att)
        picked = t
        kv_block_s += used * dt
        in_system_s += in_sys * dt
        if in_run_stream and dec:
            run_segs.append((it, t, dec, ctx, 1, dt))
        t += dt
        if dec:
            it += 1
            if multi:
                ms_left -= 1
        for r, c, _ in chunks:
            comp[r] += c
            if comp[r] < P[r] + gen[r]:
                continue
            prefilling.remove(r)          # prompt done: this iteration samples a token
            gen[r] += 1
            if math.isnan(first_tok[r]):
                first_tok[r] = t
                if stop_ttft is not None and t - arr[r] > stop_ttft:
                    misses[0] += 1
                    stopped = stopped or misses[0] >= slo_stop.ttft_misses
            if gen[r] >= O[r]:
                retire(r, t)
                continue
            decoding[r] = True
            d_it0[r], d_n0[r], d_g0[r] = it, comp[r], gen[r]
            rem0 += O[r] - gen[r] + it
            if tr is not None and O[r] - gen[r] > tr.clip:
                long_out.add(r)
            if pol.reserve_full:
                pass
            else:
                phase[(it - comp[r]) % bs] += 1
                used += _cdiv(comp[r], bs) - blk[r]     # = 0: the prompt's blocks
            ctx0 += comp[r] - it
            D += 1
            heapq.heappush(fin_heap, (it + O[r] - gen[r], r))
        if not ms_left and fin_heap and fin_heap[0][0] <= it:
            complete(t)
        if len(tl) < 100000:
            tl.append((t, used / cap if cap else 0.0, len(running), len(waiting)))

    if stopped:
        return None
    return Result(np.array(arr), np.array(first_sched), np.array(first_tok), np.array(finish),
                  np.asarray(workload.input_tokens), np.asarray(workload.output_tokens), preemptions,
                  iterations, steps, in_system_s, kv_block_s, cap, max_used, t, _thin(tl, timeline_points))


def _thin(tl: list, points: int) -> list:
    if len(tl) <= points:
        return tl
    step = len(tl) / points
    return [tl[int(i * step)] for i in range(points)] + [tl[-1]]
