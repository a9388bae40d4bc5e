"""Per-request work that one API-server process does in turn before a request reaches the engine (vLLM 0.11.0's
chat-template parse: engine_host.chat_template_parse_s; docs/serving-load.md, *The chat template in vLLM 0.11.0's
API server*).

vLLM's API server is one asyncio event loop (read in the vllm-0.11.0 wheel). Each chat request passes it in
stages, and each stage goes to the back of the loop's ready queue: `entrypoints/utils.py` `with_cancellation`
starts the route handler as a new task (`asyncio.create_task`); the handler parses the template
(`_preprocess_chat` -> `apply_hf_chat_template`, synchronous) and then awaits its tokenisation, which
`AsyncMicrobatchTokenizer` runs on a worker thread and hands back through the loop
(`utils/__init__.py`); only the stage after that sends the request to the engine core
(`AsyncLLM.add_request`). So a request whose parse starts while others are already queued reaches the engine
only after those have been parsed too: a burst is parsed whole before any of it is handed off ("6-8 seconds
delay before prompts actually are started to process" for 1000 requests, vLLM PR 20065), while a request that
finds the process idle waits for its own parse only.

Simulated as one server of `work_s` per request, first come first served, with that hand-off rule: request i's
parse starts at s_i = max(a_i, end of the previous parse) and ends at f_i = s_i + work_s; it is handed off when
the parse of the last request that had arrived by s_i ends."""
from __future__ import annotations

from collections.abc import Sequence


def burst_handoffs(arrivals: Sequence[float], work_s: float) -> list[float]:
    """Hand-off times of requests reaching the API server at `arrivals` (any order), each needing `work_s`
    seconds of its one process; in the arrivals' own order. work_s 0: the arrivals themselves."""
    if work_s <= 0:
        return [float(a) for a in arrivals]
    order = sorted(range(len(arrivals)), key=lambda i: arrivals[i])
    a = [float(arrivals[i]) for i in order]
    n = len(a)
    server = ApiServer(work_s, busy_until=-float("inf"))     # one process, first come first served
    start, finish = zip(*(server.serve(t) for t in a))
    out = [0.0] * len(arrivals)
    last = 0
    for k in range(n):
        last = max(last, k)
        while last + 1 < n and a[last + 1] <= start[k]:
            last += 1
        out[order[k]] = finish[last]
    return out


class ApiServer:
    """The same process for requests sent one at a time as the simulation runs (a closed loop's next request):
    first come first served after the burst it starts with; a request that arrives while the process is busy is
    handed off when its own parse ends (its successors are not known yet)."""

    def __init__(self, work_s: float, busy_until: float = 0.0):
        self.work_s = float(work_s)
        self.free = float(busy_until)

    def serve(self, t: float) -> tuple[float, float]:
        """(start, end) of the parse of a request arriving at t."""
        start = max(t, self.free)
        self.free = start + self.work_s
        return start, self.free

    def handoff(self, t: float) -> float:
        return t if self.work_s <= 0 else self.serve(t)[1]
