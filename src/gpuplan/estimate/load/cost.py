"""What one engine iteration costs: the speed engine's serving model (estimate/speed.py `_Serving`),
tabulated once per run on a grid and interpolated, so a simulation of 10,000 requests makes a few
hundred engine calls instead of one per iteration.

An iteration runs D decode sequences (mean context c) and prompt chunks (c_i tokens at offset o_i):

    D > 0:  decode_step(D, c)  +  linears/element-wise of Σc_i  +  Σ attention(c_i over o_i)
            +  riding_comm(D, Σc_i) = comm(D + Σc_i) − comm(D)   (one forward, one set of collectives)
    D = 0:  max(linears of Σc_i + Σ attention, weight read) + comm(Σc_i) + step overhead

which is how `serve` (speed.py `point`) prices a mixed step — the decode step plus the prompt work
riding in it, the prompt rows sharing the decode rows' all-reduce / all-to-all calls
(`_Serving.riding_comm`, also what `prefill_chunk(..., compute_only=True, riding_with=D)` charges).
Interpolation error is
below 0.5 % on the grid spacing used here (tests check it against direct engine calls). A MoE decode step is tabulated without the prompt rows that, in a
mixed step, share its expert GEMMs (a small over-estimate of the step; docs/serving-load.md).
"""
from __future__ import annotations

import bisect
import math
from typing import Sequence


def _grid(lo: float, hi: float, ratio: float, dense_below: int = 0) -> list[float]:
    """Integers 1..dense_below, then a geometric progression up to hi (hi included)."""
    pts = [float(x) for x in range(max(1, int(lo)), dense_below + 1)]
    x = float(max(dense_below, lo, 1))
    while x < hi:
        pts.append(x)
        x = max(x * ratio, x + 1.0)
    pts.append(float(hi))
    return sorted(set(pts))


class ConstantCost:
    """Every iteration costs `step_s` (tests compute such cases by hand)."""

    def __init__(self, step_s: float, frontend_s: float = 0.0, template_parse_s: float = 0.0):
        self.step_s = float(step_s)
        self.frontend_s = float(frontend_s)   # seconds every request spends in the front end before the engine
        self.template_parse_s = float(template_parse_s)   # the API server's own work per request, in turn

    def attention(self, tokens: float, offset: float) -> float:
        return 0.0

    def step(self, decodes: int, context: float, prefill_tokens: float, attention_s: float) -> float:
        return self.step_s

    def decode_sum(self, decodes: int, context: float, k: int) -> float:
        return self.step_s * k


class EngineCost:
    """The speed engine's step cost on a grid: decode time over (batch, context), prompt-chunk linear
    time and weight-read time over tokens, and the causal attention total over positions."""

    def __init__(self, serving, max_batch: int, max_context: int, max_prefill_tokens: int):
        sv = serving
        self.overhead = sv._overhead()
        # the front end's latency per request (speed.py `_Serving.frontend_s`, engine_host.py): the
        # simulator delays each request's entry into the engine by it
        self.frontend_s = float(getattr(sv, "frontend_s", 0.0))
        # vLLM 0.11.0's chat-template parse, one request after another in the API server (speed.py
        # `_Serving.template_parse_s`; load/api_server.py)
        self.template_parse_s = float(getattr(sv, "template_parse_s", 0.0))
        # decode: batch grid (every batch up to 8, then ×1.25) × context grid (×1.2); a grid row is
        # computed when a batch near it first occurs, a batch's own row interpolates its two neighbours
        self.sv = sv
        # vLLM V0 and SGLang without overlap run a step that carries a prompt without a CUDA graph, from a
        # synchronous loop: max(GPU, the eager forward's host issue) (speed.py `_Serving.prompt_issue_s`)
        self.prompt_issue = float(getattr(sv, "prompt_issue_s", 0.0) or 0.0)
        self.bgrid = _grid(1, max(1, max_batch), 1.25, dense_below=8)
        self.cgrid = _grid(1, max(2, max_context), 1.2, dense_below=4)
        self._grid_rows: dict[int, list[float]] = {}
        self.rows: list[list[float] | None] = [None] * (max_batch + 1)
        self.cslope: list[list[float] | None] = [None] * (max_batch + 1)
        # prompt chunks: linears + element-wise + comm (no attention) and the weight read, over tokens
        self.pgrid = _grid(1, max(2, max_prefill_tokens), 1.04, dense_below=16)
        self.pcomm = [sv._comm(x) for x in self.pgrid]
        self.plin = [sv.prefill_chunk(x, 0, compute_only=True) - sv.prefill_attention_time(
            sv.prefill_attention_flops(x, 0), x) - cm for x, cm in zip(self.pgrid, self.pcomm)]
        self.pw = [sv._weights_read(x) / sv.bw for x in self.pgrid]
        # causal attention: time of the whole prefix of n tokens (a chunk is a difference of two)
        self.agrid = _grid(1, max(2, max_context, max_prefill_tokens), 1.05, dense_below=64)
        self.atot = [sv.prefill_attention_time(sv.prefill_attention_flops(x, 0), x) for x in self.agrid]

    @staticmethod
    def _interp(grid: Sequence[float], vals: Sequence[float], x: float) -> float:
        if x <= grid[0]:
            return vals[0] * x / grid[0] if grid[0] > 0 else vals[0]
        j = bisect.bisect_right(grid, x) - 1
        if j >= len(grid) - 1:   # beyond the grid: continue the last segment
            j = len(grid) - 2
        x0, x1 = grid[j], grid[j + 1]
        return vals[j] + (vals[j + 1] - vals[j]) * (x - x0) / (x1 - x0)

    def attention(self, tokens: float, offset: float) -> float:
        a = self._interp(self.agrid, self.atot, offset + tokens)
        return a - (self._interp(self.agrid, self.atot, offset) if offset > 0 else 0.0)

    def _grid_row(self, j: int) -> list[float]:
        row = self._grid_rows.get(j)
        if row is None:
            b = self.bgrid[j]
            row = self._grid_rows[j] = [self.sv.decode_step(b, c)["time"] for c in self.cgrid]
        return row

    def _row(self, decodes: int) -> list[float]:
        row = self.rows[decodes]
        if row is None:
            g = self.bgrid
            j = min(max(bisect.bisect_right(g, decodes) - 1, 0), len(g) - 2)
            lo, hi = self._grid_row(j), self._grid_row(j + 1)
            w = (decodes - g[j]) / (g[j + 1] - g[j])
            row = self.rows[decodes] = [a + (b - a) * w for a, b in zip(lo, hi)]
            c = self.cgrid
            self.cslope[decodes] = [(row[i + 1] - row[i]) / (c[i + 1] - c[i]) for i in range(len(row) - 1)]
        return row

    def decode(self, decodes: int, context: float) -> float:
        return self._interp(self.cgrid, self._row(decodes), context)

    def step(self, decodes: int, context: float, prefill_tokens: float, attention_s: float) -> float:
        if prefill_tokens <= 0:
            return self.decode(decodes, context)
        lin = self._interp(self.pgrid, self.plin, prefill_tokens)
        if decodes > 0:
            # the prompt rows ride in the decode step's own all-reduce / all-to-all calls: only their
            # extra bytes cost time, not a second round of per-call latency (exact, not tabulated)
            t = self.decode(decodes, context) + lin + attention_s + self.sv.riding_comm(decodes, prefill_tokens)
            # a step carrying a prompt runs eagerly where the engine does: at least its host issue
            return max(t, self.prompt_issue) if self.prompt_issue else t
        comm = self._interp(self.pgrid, self.pcomm, prefill_tokens)
        gpu = max(lin + attention_s, self._interp(self.pgrid, self.pw, prefill_tokens)) + comm + self.overhead
        return self.sv.with_host(max(gpu, self.prompt_issue), 1)

    def decode_sum(self, decodes: int, context: float, k: int) -> float:
        """Σ_{j<k} decode(decodes, context + j), exactly for the piecewise-linear table."""
        row = self.rows[decodes] if decodes < len(self.rows) else None
        if row is None:
            row = self._row(decodes)
        g, sl = self.cgrid, self.cslope[decodes]
        last = len(g) - 2
        seg = min(max(bisect.bisect_right(g, context) - 1, 0), last)
        if k > 0 and (seg == last or k <= max(1, math.ceil(g[seg + 1] - context))):
            # the common case, every iteration in one segment: the first pass of the loop below, the same float
            return 0.0 + k * (row[seg] + sl[seg] * ((context + (k - 1) / 2.0) - g[seg]))
        total, j, c = 0.0, 0, context
        while j < k:
            seg = min(max(bisect.bisect_right(g, c) - 1, 0), last)
            # iterations whose context stays in this segment (the last segment runs on)
            n = k - j if seg == last else min(k - j, max(1, math.ceil(g[seg + 1] - c)))
            mean_c = c + (n - 1) / 2.0
            total += n * (row[seg] + sl[seg] * (mean_c - g[seg]))
            j += n
            c += n
        return total


class SpecCost:
    """Speculative decoding on top of a step cost: every iteration with decodes also pays the
    verification of k more positions per sequence and the drafter's k proposals
    (speed.py `_Serving.spec_step_extra`), cached on a coarse (batch × context) grid — batches exact
    up to 8 then ×1.25 buckets, contexts ×1.2 buckets, each priced at its bucket's geometric middle."""

    def __init__(self, base, serving):
        self.base = base
        self.sv = serving
        self.frontend_s = getattr(base, "frontend_s", 0.0)
        self.template_parse_s = getattr(base, "template_parse_s", 0.0)
        self._cache: dict[tuple[int, int], float] = {}
        self._bd: dict[int, int] = {}

    def attention(self, tokens: float, offset: float) -> float:
        return self.base.attention(tokens, offset)

    _LOG_B, _LOG_C = math.log(1.25), math.log(1.2)

    def extra(self, decodes: int, context: float) -> float:
        bd = self._bd.get(decodes)
        if bd is None:          # a batch's bucket, once per batch size (the same expression)
            bd = self._bd[decodes] = decodes if decodes <= 8 else 9 + int(math.log(decodes / 8.0) / self._LOG_B)
        bc = int(math.log(max(context, 1.0)) / self._LOG_C)
        key = (bd, bc)
        v = self._cache.get(key)
        if v is None:
            d = decodes if decodes <= 8 else 8.0 * 1.25 ** (bd - 9 + 0.5)
            v = self._cache[key] = self.sv.spec_step_extra(d, 1.2 ** (bc + 0.5))
        return v

    def step(self, decodes: int, context: float, prefill_tokens: float, attention_s: float) -> float:
        t = self.base.step(decodes, context, prefill_tokens, attention_s)
        return t + self.extra(decodes, context) if decodes > 0 else t

    def decode_sum(self, decodes: int, context: float, k: int) -> float:
        return self.base.decode_sum(decodes, context, k) + k * self.extra(decodes, context + (k - 1) / 2.0)


class StreamCeiling:
    """The API server's streaming throughput on top of a step cost: its process(es) spend `token_s` seconds
    per streamed token (engine_host.stream_token_s, already divided by the number of API-server processes),
    so a step that streams one token for each of its decoding requests reaches the client no sooner than
    `token_s` x decodes after the previous one: a step lasts max(engine step, token_s x decodes). Over k
    decode steps of one batch the bound is taken on their total (the steps' own times grow with the
    context; the floor does not)."""

    def __init__(self, base, token_s: float):
        self.base = base
        self.token_s = float(token_s)

    def __getattr__(self, name):          # frontend_s and the rest: the base cost's
        if name == "base":                # (not set yet: copy/pickle before __init__)
            raise AttributeError(name)
        return getattr(self.base, name)

    def attention(self, tokens: float, offset: float) -> float:
        return self.base.attention(tokens, offset)

    def step(self, decodes: int, context: float, prefill_tokens: float, attention_s: float) -> float:
        return max(self.base.step(decodes, context, prefill_tokens, attention_s), self.token_s * decodes)

    def decode_sum(self, decodes: int, context: float, k: int) -> float:
        return max(self.base.decode_sum(decodes, context, k), self.token_s * decodes * k)


class SerialOutput:
    """The output side run in the engine's own loop, one after the other with the engine step (vLLM V1 with its
    engine core in process: `LLMEngine.step` = `engine_core.get_output()`, which runs the core's schedule, forward
    and update, then `output_processor.process_outputs` over every request the step advanced; InprocClient when
    VLLM_ENABLE_V1_MULTIPROCESSING is 0, vllm/v1/engine/core_client.py `EngineCoreClient.make_client` and
    llm_engine.py `step`): each step lasts the engine step plus `token_s` x the decoding requests, where a
    separate output process (StreamCeiling) only bounds it. `token_s` is the output side's seconds per token."""

    def __init__(self, base, token_s: float):
        self.base = base
        self.token_s = float(token_s)

    def __getattr__(self, name):          # frontend_s and the rest: the base cost's
        if name == "base":
            raise AttributeError(name)
        return getattr(self.base, name)

    def attention(self, tokens: float, offset: float) -> float:
        return self.base.attention(tokens, offset)

    def step(self, decodes: int, context: float, prefill_tokens: float, attention_s: float) -> float:
        return self.base.step(decodes, context, prefill_tokens, attention_s) + self.token_s * decodes

    def decode_sum(self, decodes: int, context: float, k: int) -> float:
        return self.base.decode_sum(decodes, context, k) + self.token_s * decodes * k


def decode_floor(cost) -> float:
    """The cheapest iteration that advances a decoding sequence, as `cost` prices it: one sequence's decode step
    (every wrapper above applied: speculative extra, streaming ceiling, serial output) at the smallest priced
    context — the minimum of the batch-1 table row, which is piecewise linear between the context grid points.
    A lower bound on every decode iteration of a simulation on `cost` as long as more sequences, more context or
    prompt rows riding in the step never make it cheaper (the speed engine's steps add non-negative terms:
    tests/test_recommend_bounds.py checks the tables). Every TPOT is at least this over tokens_per_step."""
    base = cost
    while not hasattr(base, "cgrid"):        # SpecCost / StreamCeiling / SerialOutput over the EngineCost
        if not hasattr(base, "base"):
            return cost.step(1, 1.0, 0.0, 0.0)      # ConstantCost: every step costs the same
        base = base.base
    return min(cost.step(1, c, 0.0, 0.0) for c in base.cgrid)


def step_cost(serving, max_batch: int, max_context: int, max_prefill_tokens: int):
    """The step cost of one replica: the tabulated engine, with speculative decoding when the
    scenario asks for it, and the API server's streaming ceiling where the engine has one."""
    base = EngineCost(serving, max_batch, max_context, max_prefill_tokens)
    cost = SpecCost(base, serving) if getattr(serving, "spec", None) is not None else base
    token_s = float(getattr(serving, "stream_token_s", 0.0) or 0.0)
    return StreamCeiling(cost, token_s) if token_s > 0 else cost
