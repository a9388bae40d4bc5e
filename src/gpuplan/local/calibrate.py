"""Microbenchmarks of the local GPU(s) -> a hardware profile file the estimators can use instead of
datasheet peak x default efficiency.

Measured: dense GEMM throughput per dtype over square and LLM-shaped sizes (torch.matmul; FP8 through
torch._scaled_mm where the GPU has it), HBM bandwidth from large device-to-device copies (read + write
counted), and NCCL all-reduce / all-gather bus bandwidth across the GPUs of this node (spawned workers)
or across all ranks when started by torchrun. Bus bandwidth follows nccl-tests: all-reduce
busbw = algbw x 2(n-1)/n, all-gather busbw = algbw x (n-1)/n with algbw = bytes / time (all-gather:
bytes of the gathered output).

The schema (version `gpuplan.hardware-profile/1`) is documented in docs/local.md.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import statistics
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..errors import InputError, MissingExtraError, UnsupportedError

# The profile record and its reader live with the speed engine that uses them (estimate/profile.py).
from ..estimate.profile import (SCHEMA, CommPoint, GemmPoint, HardwareProfile, load_profile,  # noqa: F401
                               profile_from_dict, save_profile)


class NoLocalGpuError(UnsupportedError):
    """The command needs a local CUDA GPU and there is none (or PyTorch cannot use it)."""


def require_cuda(feature: str):
    """Import torch and check that it sees a CUDA (or ROCm) GPU; raise a clear error otherwise."""
    try:
        import torch
    except ImportError:
        raise MissingExtraError(feature, "trace", "torch") from None
    if not torch.cuda.is_available():
        build = getattr(torch.version, "cuda", None) or getattr(torch.version, "hip", None)
        why = ("this PyTorch build has no CUDA support (a CPU-only wheel)." if not build else
               f"PyTorch (built for {'CUDA ' + torch.version.cuda if torch.version.cuda else 'ROCm'}) sees no GPU: "
               "no driver, no device, or CUDA_VISIBLE_DEVICES hides them.")
        raise NoLocalGpuError(f"{feature} needs a local GPU", why,
                              "run it on the machine with the GPU(s), with a CUDA (or ROCm) build of PyTorch; "
                              "`gpuplan doctor` shows what the driver reports.")
    return torch


# ---------------------------------------------------------------------------------------------
# benchmarks (need a GPU; not exercised by the CPU test suite)

def _time_cuda(torch, fn, iters: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


GEMM_SHAPES_QUICK = [(2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192)]
GEMM_SHAPES_FULL = GEMM_SHAPES_QUICK[:1] + [(1024, 1024, 1024)] + GEMM_SHAPES_QUICK[1:] + [
    (16384, 16384, 16384),
    (8192, 4096, 14336), (8192, 14336, 4096), (8192, 8192, 28672),   # LLM MLP-like: tokens x hidden x intermediate
    (8192, 128256, 4096),                                            # lm_head of a 128k vocabulary
]


def bench_gemm(torch, dtypes: list[str], shapes: list[tuple[int, int, int]], iters: int = 10,
               warmup: int = 3) -> list[GemmPoint]:
    out: list[GemmPoint] = []
    tdt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "tf32": torch.float32}
    for dt in dtypes:
        for m, n, k in shapes:
            try:
                if dt == "fp8":
                    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
                    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
                    one = torch.ones((), device="cuda")
                    fn = lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)  # noqa: E731
                else:
                    torch.backends.cuda.matmul.allow_tf32 = dt == "tf32"
                    a = torch.randn(m, k, device="cuda", dtype=tdt[dt])
                    b = torch.randn(k, n, device="cuda", dtype=tdt[dt])
                    fn = lambda: torch.matmul(a, b)  # noqa: E731
                t = _time_cuda(torch, fn, iters, warmup)
                out.append(GemmPoint(dt, m, n, k, t, 2.0 * m * n * k / t))
            except (RuntimeError, AttributeError, TypeError):
                continue          # dtype unsupported on this GPU/build, or out of memory for this size
            finally:
                torch.backends.cuda.matmul.allow_tf32 = False
                torch.cuda.empty_cache()
    return out


def bench_copy_bandwidth(torch, nbytes: int, iters: int = 10) -> float:
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    t = _time_cuda(torch, lambda: dst.copy_(src), iters, 3)
    del src, dst
    torch.cuda.empty_cache()
    return 2.0 * nbytes / t       # each byte is read once and written once


COMM_SIZES_QUICK = [2**20, 2**24, 2**28]
COMM_SIZES_FULL = [2**p for p in range(16, 31, 2)]


def bench_collectives(torch, sizes: list[int], iters: int = 10) -> list[CommPoint]:
    """Inside an initialised NCCL process group: all-reduce and all-gather over message sizes."""
    import torch.distributed as dist
    n = dist.get_world_size()
    dev = torch.device("cuda", torch.cuda.current_device())
    out: list[CommPoint] = []
    for size in sizes:
        x = torch.empty(size // 2, dtype=torch.bfloat16, device=dev)
        t = _time_cuda(torch, lambda: dist.all_reduce(x), iters, 3)
        t = _max_over_ranks(torch, t)
        alg = size / t
        out.append(CommPoint("all_reduce", size, t, alg, alg * 2 * (n - 1) / n))
        shard = torch.empty(size // 2 // n, dtype=torch.bfloat16, device=dev)
        full = torch.empty(shard.numel() * n, dtype=torch.bfloat16, device=dev)
        t = _time_cuda(torch, lambda: dist.all_gather_into_tensor(full, shard), iters, 3)
        t = _max_over_ranks(torch, t)
        total = full.numel() * 2
        out.append(CommPoint("all_gather", total, t, total / t, total / t * (n - 1) / n))
        del x, shard, full
    return out


def _max_over_ranks(torch, t: float) -> float:
    import torch.distributed as dist
    v = torch.tensor([t], device="cuda", dtype=torch.float64)
    dist.all_reduce(v, op=dist.ReduceOp.MAX)
    return float(v.item())


def _spawn_worker(rank: int, world: int, port: int, sizes: list[int], result_path: str) -> None:
    import torch
    import torch.distributed as dist
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        pts = bench_collectives(torch, sizes)
        if rank == 0:
            Path(result_path).write_text(json.dumps([asdict(p) for p in pts]))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def calibrate(*, quick: bool = False, dtypes: list[str] | None = None,
              progress: Callable[[str], Any] | None = None) -> HardwareProfile:
    """Run the microbenchmarks on this machine and return the profile (rank 0's view under torchrun).
    `progress(text)` is told each benchmark as it starts (the CLI draws it)."""
    say = progress or (lambda text: None)
    torch = require_cuda("gpuplan calibrate")
    from .detect import detect, match_catalog
    notes: list[str] = []
    under_torchrun = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if under_torchrun:
        import torch.distributed as dist
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        if not dist.is_initialized():
            dist.init_process_group("nccl")
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    name = props.name
    gpu_id, _ = match_catalog(name, int(props.total_memory))
    if dtypes is None:
        dtypes = ["bf16", "fp16", "tf32", "fp32"]
        if torch.cuda.get_device_capability() >= (8, 9) and hasattr(torch, "_scaled_mm"):
            dtypes.append("fp8")
    shapes = GEMM_SHAPES_QUICK if quick else GEMM_SHAPES_FULL
    gemm = []
    for dt in dtypes:
        say(f"GEMM {dt} ({len(shapes)} sizes)")
        gemm += bench_gemm(torch, [dt], shapes, iters=5 if quick else 20)
    best: dict[str, float] = {}
    for p in gemm:
        best[p.dtype] = max(best.get(p.dtype, 0.0), p.flops_per_s)
    free, _total = torch.cuda.mem_get_info()
    nbytes = min(1 << 30 if quick else 4 << 30, int(free * 0.3))
    say("HBM copy bandwidth")
    bw = bench_copy_bandwidth(torch, nbytes)
    sizes = COMM_SIZES_QUICK if quick else COMM_SIZES_FULL
    comm: list[CommPoint] = []
    world, nodes, count = 1, 1, torch.cuda.device_count()
    if under_torchrun:
        import torch.distributed as dist
        world = dist.get_world_size()
        local = int(os.environ.get("LOCAL_WORLD_SIZE", str(count)))
        nodes = max(1, world // max(local, 1))
        count = local
        say("collectives (NCCL)")
        comm = bench_collectives(torch, sizes)
    elif count > 1:
        import torch.multiprocessing as mp
        say(f"collectives (NCCL) over {count} GPUs")
        with tempfile.TemporaryDirectory() as tmp:
            res = os.path.join(tmp, "comm.json")
            mp.spawn(_spawn_worker, args=(count, _free_port(), sizes, res), nprocs=count, join=True)
            comm = [CommPoint(**p) for p in json.loads(Path(res).read_text())]
        world = count
    else:
        notes.append("one GPU: no collective measured.")
    bus: dict[str, float] = {}
    for p in comm:
        bus[p.op] = max(bus.get(p.op, 0.0), p.bus_bandwidth_bytes_per_s)
    sysinfo = detect()
    return HardwareProfile(
        gpu_name=name, gpu_id=gpu_id, gpu_count=count, world_size=world, nodes=nodes,
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        torch_version=torch.__version__, cuda_version=torch.version.cuda or torch.version.hip,
        driver_version=sysinfo.driver_version, memory_total_bytes=int(props.total_memory),
        matmul_flops_per_s=best, matmul=tuple(gemm), memory_bandwidth_bytes_per_s=bw,
        comm_bus_bandwidth_bytes_per_s=bus, comm=tuple(comm), quick=quick, notes=tuple(notes))


def is_rank0() -> bool:
    return int(os.environ.get("RANK", "0")) == 0
