"""A small pool of worker processes for the web server's heavy computations.

A thread cannot be stopped, so a computation that outlives the time limit used to keep a worker
busy after its request had already answered 504. Here each computation runs in a pre-started
worker process (multiprocessing 'spawn' context: no inherited locks or threads); at the deadline
the process is killed and a fresh one is started in its place. Each worker caps its own address
space (RLIMIT_AS), so one request cannot drive the server out of memory: a MemoryError in the
worker comes back as a clean 413 error and the worker is replaced.

Jobs are module-level functions (picklable by name) that return JSON-safe data; an error is sent
back as plain fields, never as a pickled exception. As with any 'spawn' pool, a script that serves
the app must start the server under `if __name__ == "__main__":` (the workers import the main module).
"""
from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import signal
import traceback
from dataclasses import dataclass
from typing import Any, Callable

log = logging.getLogger("gpuplan.web")

DEFAULT_MEMORY_LIMIT = 4 * 1024 ** 3          # per worker process; a request past it answers 413
START_TIMEOUT_S = 60.0


class Deadline(Exception):
    """The job passed its time limit; its worker was killed. (Not TimeoutError: that is an OSError.)"""

    def __init__(self, replacement: asyncio.Task | None = None):
        super().__init__("time limit")
        self.replacement = replacement


# ---- worker side -----------------------------------------------------------------------------------------
def _limit_memory(limit: int | None) -> None:
    if not limit:
        return
    try:
        import resource
        _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        new = limit if hard == resource.RLIM_INFINITY else min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (new, hard))
    except (ImportError, AttributeError, ValueError, OSError) as err:   # no RLIMIT_AS on this platform
        print(f"gpuplan web: worker memory limit not set ({err})", flush=True)


def _failure(err: BaseException) -> tuple:
    """What the parent needs to answer for an exception raised by a job."""
    from ..errors import GpuplanError
    from .jobs import WebError
    if isinstance(err, MemoryError):
        return ("memory",)
    if isinstance(err, GpuplanError):
        err = WebError.of(err)
    if isinstance(err, WebError):
        return ("error", err.status, err.what, err.why, err.fix, list(err.matches), err.see)
    if isinstance(err, ImportError) and (err.name or "").startswith("gpuplan"):
        return ("error", 501, err.name, "is not available in this version of gpuplan.", "upgrade gpuplan.", [], None)
    traceback.print_exc()          # the server's stderr only; the client gets no internals
    return ("internal", type(err).__name__)


def worker_main(conn: Any, memory_limit: int | None, warm: tuple[str, ...]) -> None:
    """Loop of one worker process: receive (fn, args, kwargs), send ("ok", result) or a failure."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # Ctrl-C stops the server, which kills the workers
    _limit_memory(memory_limit)
    import importlib
    for name in warm:         # pay imports and first-call costs once, before the first request
        module, _, func = name.partition(":")
        mod = importlib.import_module(module)
        if func:
            getattr(mod, func)()
    try:
        conn.send(("ready", os.getpid()))
        while _serve_one(conn):
            pass
    except (EOFError, OSError, KeyboardInterrupt):
        return                       # the server went away (or closed this worker's pipe): just end


def _serve_one(conn: Any) -> bool:
    """Run one job; False when this worker must end."""
    fn, args, kwargs = conn.recv()
    try:
        reply = ("ok", fn(*args, **kwargs))
    except BaseException as err:  # noqa: BLE001 - everything goes back to the parent as an answer
        reply = _failure(err)
    try:
        conn.send(reply)
    except MemoryError:
        reply = ("memory",)
        conn.send(reply)
    return reply[0] != "memory"      # state after a MemoryError is not trusted: the parent starts a new worker


# ---- parent side -----------------------------------------------------------------------------------------
@dataclass(eq=False)
class _Worker:
    proc: Any
    conn: Any

    def alive(self) -> bool:
        return self.proc.is_alive() and not self.conn.closed

    def kill(self) -> None:
        try:
            self.proc.kill()
        except (OSError, ValueError):
            pass
        try:
            self.conn.close()
        except OSError:
            pass
        try:
            self.proc.join(timeout=2)
        except (OSError, ValueError, AssertionError):
            pass


async def _readable(conn: Any, timeout: float | None, waiters: dict | None = None) -> bool:
    """Wait until conn has data (or EOF) without blocking the event loop; False on timeout.
    The wait is registered in `waiters` so that a shutdown can end it at once."""
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    if waiters is not None:
        waiters[conn] = fut
    fd = conn.fileno()
    try:
        loop.add_reader(fd, lambda: fut.done() or fut.set_result(True))
    except NotImplementedError:          # an event loop without add_reader (Windows' proactor)
        return await loop.run_in_executor(None, conn.poll, timeout)
    try:
        return await asyncio.wait_for(fut, timeout)
    except asyncio.TimeoutError:
        return False
    finally:
        loop.remove_reader(fd)
        if waiters is not None:
            waiters.pop(conn, None)


class WorkerPool:
    """`size` pre-started worker processes; run() hands a job to an idle one and kills it at the deadline."""

    def __init__(self, size: int, *, memory_limit: int | None = DEFAULT_MEMORY_LIMIT,
                 warm: tuple[str, ...] = (), context: str = "spawn"):
        self.size, self.memory_limit, self.warm = size, memory_limit, tuple(warm)
        self.ctx = multiprocessing.get_context(context)
        self.idle: asyncio.Queue | None = None
        self.busy: set[_Worker] = set()
        self.starting: set[asyncio.Task] = set()
        self.closed = False
        self.started_total = 0
        self.waiters: dict = {}          # pipe -> the future a running job's request waits on

    async def start(self) -> None:
        self.idle = asyncio.Queue()
        await asyncio.gather(*(self._add_worker() for _ in range(self.size)))

    async def _add_worker(self) -> None:
        parent, child = self.ctx.Pipe(duplex=True)
        proc = self.ctx.Process(target=worker_main, args=(child, self.memory_limit, self.warm),
                                name="gpuplan-web-worker", daemon=True)
        proc.start()
        child.close()
        worker = _Worker(proc, parent)
        self.started_total += 1
        try:
            ok = await _readable(parent, START_TIMEOUT_S) and parent.recv()[0] == "ready"
        except (EOFError, OSError):
            ok = False
        if not ok or self.closed:
            worker.kill()
            if not self.closed:
                log.error("a web worker process failed to start")
            return
        self.idle.put_nowait(worker)

    def _replace(self, worker: _Worker) -> asyncio.Task | None:
        """Kill worker and start another; the task ends when the new one is ready (or failed)."""
        worker.kill()
        if self.closed:
            return None
        task = asyncio.get_running_loop().create_task(self._add_worker())
        self.starting.add(task)
        task.add_done_callback(self.starting.discard)
        return task

    async def acquire(self, wait_s: float) -> _Worker | None:
        """An idle, live worker, or None when none frees up within wait_s."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while True:
            try:
                worker = await asyncio.wait_for(self.idle.get(), max(0.0, deadline - loop.time()))
            except asyncio.TimeoutError:
                return None
            if worker.alive():
                return worker
            self._replace(worker)       # died while idle (killed from outside): start another

    async def run(self, worker: _Worker, fn: Callable[..., Any], args: tuple, kwargs: dict,
                  time_limit_s: float) -> tuple[tuple, asyncio.Task | None]:
        """Run fn in worker: (reply, None) with the worker back in the pool, or (reply, task) when
        the worker was killed and `task` starts its replacement. Raises Deadline at the time limit."""
        self.busy.add(worker)
        reply: tuple = ("died",)
        try:
            worker.conn.send((fn, args, kwargs))
            if not await _readable(worker.conn, time_limit_s, self.waiters):
                self.busy.discard(worker)
                raise Deadline(self._replace(worker))
            reply = worker.conn.recv()
        except (EOFError, OSError):
            reply = ("died",)
        except asyncio.CancelledError:       # the request was abandoned (server stopping): so is its work
            self.busy.discard(worker)
            self._replace(worker)
            raise
        self.busy.discard(worker)
        if reply[0] in ("ok", "error", "internal") and not self.closed:
            self.idle.put_nowait(worker)
            return reply, None
        return reply, self._replace(worker)

    def pids(self) -> list[int]:
        out = [w.proc.pid for w in self.busy]
        if self.idle is not None:
            out += [w.proc.pid for w in list(self.idle._queue)]   # noqa: SLF001 - read-only peek
        return out

    def shutdown(self) -> None:
        self.closed = True
        for task in list(self.starting):
            task.cancel()
        workers = list(self.busy)
        if self.idle is not None:
            while not self.idle.empty():
                workers.append(self.idle.get_nowait())
        for w in workers:
            w.kill()
        for fut in list(self.waiters.values()):     # their requests answer now (503), not at the time limit
            if not fut.done():
                fut.set_result(True)


# ---- server options ----------------------------------------------------------------------------------------
def _bad(what: str, value: Any, why: str, fix: str):
    from ..errors import InputError
    return InputError(f"{what} {value!r}" if not isinstance(value, float) else f"{what} {value:g}", why, fix)


def check_server_options(*, time_limit_s: float, workers: int, queue_wait_s: float, per_client: int,
                         body_timeout_s: float, max_body_bytes: int, isolation: str = "process",
                         port: int | None = None) -> None:
    """Refuse server options that would make it answer nothing, or never stop: an InputError."""
    import math
    for what, value, flag in (("time limit", time_limit_s, "--time-limit"), ("queue wait", queue_wait_s, None),
                              ("body read time", body_timeout_s, None)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or not 0 < value <= 86_400:
            raise _bad(what, value, "must be a number of seconds above 0 and at most 86400.",
                       f"pass e.g. {flag + ' 30' if flag else '30'}.")
    for what, value, lo, hi, flag in (("workers", workers, 1, 256, "--workers"), ("per-client limit", per_client, 1, 1024, None),
                                      ("body limit", max_body_bytes, 1, 1 << 30, None),
                                      ("port", port if port is not None else 1, 1, 65535, "--port")):
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise _bad(what, value, f"must be a whole number from {lo} to {hi}.",
                       f"pass e.g. {flag + ' ' if flag else ''}{max(lo, min(hi, 4 if what == 'workers' else 8000))}.")
    if isolation not in ("process", "thread"):
        raise _bad("isolation", isolation, "must be 'process' or 'thread'.", "use 'process' (the default).")
