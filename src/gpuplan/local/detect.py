"""Find the GPUs of this machine: NVIDIA (NVML, else `nvidia-smi -q` text or XML), AMD (`rocm-smi
--json`) and Apple silicon (`sysctl hw.memsize`). Every parser is a pure function over captured text so
that it can be tested on recorded fixtures; `detect()` only decides which source to ask.

Memory is what the driver reports (NVML `total` = the capacity PyTorch sees, e.g. 81,559 MiB on an
H100 80GB), in bytes. Names are matched to the hardware catalog exactly (after normalising vendor
prefixes, separators and a trailing memory size), never by substring: "H200" must not become "H20".
"""
from __future__ import annotations

import csv
import json
import os
import platform
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any, Callable

from ..units import GiB, MiB

Runner = Callable[[list[str]], "str | None"]


@dataclass(frozen=True)
class LocalGpu:
    index: int
    name: str                              # as the driver reports it, e.g. "NVIDIA H100 80GB HBM3"
    vendor: str                            # nvidia | amd | apple
    catalog_id: str | None                 # gpuplan hardware catalog id, None if unknown
    total_bytes: int | None                # capacity the driver reports (what PyTorch can address)
    free_bytes: int | None = None
    used_bytes: int | None = None
    reserved_bytes: int | None = None      # driver/firmware reserve (nvidia-smi "Reserved"), not usable
    uuid: str | None = None
    bus_id: str | None = None
    architecture: str | None = None
    compute_capability: str | None = None
    mig_mode: str | None = None
    match: str = ""                        # how catalog_id was found: exact | by-memory | none

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class GpuLink:
    a: int
    b: int
    kind: str                 # nvlink | pcie | same-board | unknown
    code: str                 # as `nvidia-smi topo -m` prints it: NV18, SYS, NODE, PHB, PXB, PIX, ...
    nvlinks: int | None = None

    @property
    def description(self) -> str:
        return TOPO_CODES.get(re.sub(r"\d+$", "#", self.code), self.code)


TOPO_CODES = {
    "X": "self",
    "NV#": "bonded set of NVLinks",
    "SYS": "PCIe + SMP interconnect between NUMA nodes (slowest)",
    "SOC": "PCIe + SMP interconnect between NUMA nodes (slowest)",
    "NODE": "PCIe + interconnect between PCIe host bridges within a NUMA node",
    "PHB": "PCIe through a host bridge (CPU)",
    "PXB": "PCIe through several PCIe switches (no host bridge)",
    "PIX": "PCIe through at most one PCIe switch",
    "PSB": "PCIe through a single PCIe switch",
}


@dataclass(frozen=True)
class LocalSystem:
    gpus: tuple[LocalGpu, ...] = ()
    links: tuple[GpuLink, ...] = ()
    driver_version: str | None = None
    cuda_version: str | None = None
    source: str = "none"                    # nvml | nvidia-smi | nvidia-smi-xml | rocm-smi | apple | none
    notes: tuple[str, ...] = ()

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpus)

    @property
    def catalog_ids(self) -> list[str]:
        """Distinct catalog ids, in GPU order."""
        seen: list[str] = []
        for g in self.gpus:
            if g.catalog_id and g.catalog_id not in seen:
                seen.append(g.catalog_id)
        return seen

    def interconnect_summary(self) -> str:
        n = len(self.gpus)
        if n < 2:
            return "single GPU" if n else "no GPU"
        if not self.links:
            return "links between GPUs unknown (`nvidia-smi topo -m` not available)"
        nv = [l for l in self.links if l.kind == "nvlink"]
        pairs = n * (n - 1) // 2
        if len(nv) == pairs:
            counts = sorted({l.nvlinks for l in nv if l.nvlinks})
            return f"all {n} GPUs linked pairwise by NVLink ({'/'.join('NV%d' % c for c in counts) or 'NV'})"
        if nv:
            return f"{len(nv)} of {pairs} GPU pairs linked by NVLink; the rest over PCIe"
        worst = sorted({l.code for l in self.links})
        return f"no NVLink: GPUs talk over PCIe ({', '.join(worst)})"

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "driver_version": self.driver_version, "cuda_version": self.cuda_version,
                "gpus": [g.to_json() for g in self.gpus],
                "links": [{**asdict(l), "description": l.description} for l in self.links],
                "interconnect": self.interconnect_summary(), "notes": list(self.notes)}


# ---------------------------------------------------------------------------------------------
# catalog matching

@dataclass(frozen=True)
class _CatalogEntry:
    id: str
    keys: tuple[str, ...]
    usable_memory_bytes: int | None


def _norm(s: str) -> str:
    s = s.lower().replace("_", " ").replace("-", " ")
    return re.sub(r"\s+", " ", s).strip()


_VENDOR_PREFIX = re.compile(r"^(nvidia|amd|apple|intel|tesla)\s+")
_MEMORY_SUFFIX = re.compile(r"\s+\d+\s?(gb|g)(\s+(hbm\w*|gddr\w*))?$")


def _strip(s: str) -> str:
    while True:
        t = _VENDOR_PREFIX.sub("", s)
        if t == s:
            return s
        s = t


@cache
def _catalog() -> tuple[_CatalogEntry, ...]:
    entries: list[_CatalogEntry] = []
    try:  # the hardware package (another module) when present: one source of truth
        from ..hardware import list_gpus  # type: ignore[attr-defined]
        for g in list_gpus():
            keys = {_norm(g.id), _norm(g.name), *(_norm(a) for a in (getattr(g, "aliases", None) or ()))}
            mem = getattr(g, "usable_memory_bytes", None)
            entries.append(_CatalogEntry(g.id, tuple(sorted(k for k in keys if k)), int(mem) if mem else None))
        if entries:
            return tuple(entries)
    except Exception:
        entries = []
    path = Path(__file__).resolve().parents[1] / "hardware" / "data" / "gpus.csv"
    if not path.exists():
        return ()
    with path.open(encoding="utf-8") as f:
        for r in csv.DictReader(f):
            keys = {_norm(r["id"]), _norm(r["name"]), *(_norm(a) for a in (r.get("aliases") or "").split(";") if a)}
            mib = r.get("usable_memory_mib") or ""
            entries.append(_CatalogEntry(r["id"], tuple(sorted(k for k in keys if k)),
                                         int(float(mib) * MiB) if mib else None))
    return tuple(entries)


def match_catalog(name: str, total_bytes: int | None = None) -> tuple[str | None, str]:
    """Catalog id for a driver-reported GPU name, and how it was matched (exact | by-memory | none).

    Tries the name, the name without vendor prefixes, and without a trailing memory size
    ("NVIDIA GH200 480GB" -> "gh200"), each as an exact key. Failing that, catalog entries whose name
    *starts with* the reported name plus a space ("NVIDIA H200" -> h200-sxm, h200-nvl) are narrowed by
    reported memory (within 3 %); if several remain, the SXM form wins, because NVIDIA appends the form
    factor ("PCIe", "NVL") to the names of the other forms.
    """
    cat = _catalog()
    if not name or not cat:
        return None, "none"
    index: dict[str, set[str]] = {}
    for e in cat:
        for k in e.keys:
            for key in {k, _strip(k)}:
                index.setdefault(key, set()).add(e.id)
    n = _norm(name)
    bracket = re.findall(r"\[([^\]]+)\]", name)          # rocm-smi: "Aqua Vanjaram [Instinct MI300X]"
    candidates = [n, _strip(n)] + [_strip(_norm(b)) for b in bracket]
    candidates += [_MEMORY_SUFFIX.sub("", c) for c in list(candidates)]
    candidates += [re.sub(r"\s+(oam|sxm\d?|pcie)$", "", c) for c in list(candidates)]
    for c in candidates:
        ids = index.get(c)
        if ids and len(ids) == 1:
            return next(iter(ids)), "exact"
    by_mem = {e.id: e for e in cat}
    for c in dict.fromkeys(candidates):
        if not c:
            continue
        ids = sorted({i for k, v in index.items() if k.startswith(c + " ") for i in v})
        if not ids:
            continue
        if total_bytes:
            ids = [i for i in ids if by_mem[i].usable_memory_bytes
                   and abs(by_mem[i].usable_memory_bytes - total_bytes) <= 0.03 * total_bytes]
        if len(ids) > 1:
            sxm = [i for i in ids if "sxm" in i]
            ids = sxm if len(sxm) == 1 else ids
        if len(ids) == 1:
            return ids[0], "by-memory"
    return None, "none"


def _gpu(index: int, name: str, vendor: str, total: int | None, **kw: Any) -> LocalGpu:
    cid, how = match_catalog(name, total)
    return LocalGpu(index=index, name=name, vendor=vendor, catalog_id=cid, total_bytes=total, match=how, **kw)


# ---------------------------------------------------------------------------------------------
# parsers (pure)

_SIZE = re.compile(r"^\s*([\d.]+)\s*(B|KiB|MiB|GiB|TiB|KB|MB|GB)?\s*$", re.I)
_SIZE_UNITS = {"b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "kb": 2**10, "mb": 2**20, "gb": 2**30}


def _size(text: str | None) -> int | None:
    """'81559 MiB' -> bytes. nvidia-smi writes MiB (and says 'MiB'); None for N/A."""
    if text is None:
        return None
    m = _SIZE.match(text)
    if not m:
        return None
    return int(float(m.group(1)) * _SIZE_UNITS[(m.group(2) or "MiB").lower()])


def _na(v: str | None) -> str | None:
    return None if v is None or v.strip() in ("", "N/A", "Not Found", "[N/A]") else v.strip()


_GPU_HEADER = re.compile(r"^GPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")


def _parse_block(lines: list[str]) -> dict[str, str]:
    """Indented 'Key : value' lines -> {'FB Memory Usage/Total': '81559 MiB', ...}."""
    out: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    for line in lines:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        body = line.strip()
        key, sep, value = body.partition(":")
        key = key.strip()
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = "/".join([s for _, s in stack] + [key])
        if sep and value.strip() != "":
            out.setdefault(path, value.strip())
        else:
            stack.append((indent, key))
    return out


def parse_nvidia_smi_q(text: str) -> LocalSystem:
    """Parse the text of `nvidia-smi -q` (all GPUs, or `-d MEMORY`)."""
    header: list[str] = []
    blocks: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        m = _GPU_HEADER.match(line.rstrip())
        if m:
            blocks.append((m.group(1), []))
        elif blocks:
            blocks[-1][1].append(line)
        else:
            header.append(line)
    top = _parse_block([l for l in header if ":" in l and not l.startswith("=")])
    driver = _na(top.get("Driver Version"))
    cuda = _na(top.get("CUDA Version"))
    gpus = []
    for i, (bus, lines) in enumerate(blocks):
        kv = _parse_block(lines)
        name = _na(kv.get("Product Name")) or "unknown NVIDIA GPU"
        total = _size(kv.get("FB Memory Usage/Total"))
        gpus.append(_gpu(i, name, "nvidia", total,
                         free_bytes=_size(kv.get("FB Memory Usage/Free")),
                         used_bytes=_size(kv.get("FB Memory Usage/Used")),
                         reserved_bytes=_size(kv.get("FB Memory Usage/Reserved")),
                         uuid=_na(kv.get("GPU UUID")), bus_id=_na(kv.get("PCI/Bus Id")) or bus,
                         architecture=_na(kv.get("Product Architecture")),
                         mig_mode=_na(kv.get("MIG Mode/Current"))))
    notes = []
    if any(g.mig_mode == "Enabled" for g in gpus):
        notes.append("MIG is enabled on some GPUs: each MIG instance has only a slice of the memory shown.")
    return LocalSystem(gpus=tuple(gpus), driver_version=driver, cuda_version=cuda, source="nvidia-smi",
                       notes=tuple(notes))


def parse_nvidia_smi_xml(text: str) -> LocalSystem:
    """Parse `nvidia-smi -q -x` (the same facts as the text form, as XML)."""
    root = ET.fromstring(text)

    def t(el, path):
        found = el.find(path)
        return _na(found.text) if found is not None and found.text is not None else None

    gpus = []
    for i, g in enumerate(root.findall("gpu")):
        name = t(g, "product_name") or "unknown NVIDIA GPU"
        gpus.append(_gpu(i, name, "nvidia", _size(t(g, "fb_memory_usage/total")),
                         free_bytes=_size(t(g, "fb_memory_usage/free")),
                         used_bytes=_size(t(g, "fb_memory_usage/used")),
                         reserved_bytes=_size(t(g, "fb_memory_usage/reserved")),
                         uuid=t(g, "uuid"), bus_id=t(g, "pci/pci_bus_id") or g.get("id"),
                         architecture=t(g, "product_architecture"),
                         mig_mode=t(g, "mig_mode/current_mig")))
    return LocalSystem(gpus=tuple(gpus), driver_version=t(root, "driver_version"),
                       cuda_version=t(root, "cuda_version"), source="nvidia-smi-xml")


def parse_topo_matrix(text: str) -> tuple[GpuLink, ...]:
    """Links between GPU pairs from `nvidia-smi topo -m` (NICs and CPU affinity are ignored)."""
    lines = [l for l in text.splitlines() if l.strip()]
    # the header row is indented (its first cell is empty); data rows start with their label
    header_i = next((i for i, l in enumerate(lines) if l[:1] in (" ", "\t") and l.split()[0] == "GPU0"), None)
    if header_i is None:
        return ()
    cols: list[str] = []
    for tok in lines[header_i].split():
        if not re.fullmatch(r"(GPU\d+|NIC\d+|mlx\S+)", tok):
            break
        cols.append(tok)
    links: list[GpuLink] = []
    for line in lines[header_i + 1:]:
        parts = line.split()
        if not parts or not re.fullmatch(r"GPU\d+", parts[0]):
            if parts and parts[0].startswith("Legend"):
                break
            continue
        a = int(parts[0][3:])
        for col, code in zip(cols, parts[1:1 + len(cols)]):
            if not col.startswith("GPU"):
                continue
            b = int(col[3:])
            if b <= a:
                continue
            m = re.fullmatch(r"NV(\d+)", code)
            if m:
                links.append(GpuLink(a, b, "nvlink", code, int(m.group(1))))
            elif code in ("SYS", "SOC", "NODE", "PHB", "PXB", "PIX", "PSB"):
                links.append(GpuLink(a, b, "pcie", code))
            else:
                links.append(GpuLink(a, b, "unknown", code))
    return tuple(links)


def parse_rocm_smi_json(text: str) -> LocalSystem:
    """`rocm-smi --showproductname --showmeminfo vram --json` (keys vary a little across versions)."""
    data = json.loads(text)
    gpus = []
    for i, (card, info) in enumerate(sorted(((k, v) for k, v in data.items() if k.startswith("card")),
                                            key=lambda kv: int(re.sub(r"\D", "", kv[0]) or 0))):
        low = {k.lower(): v for k, v in info.items()}
        total = low.get("vram total memory (b)")
        used = low.get("vram total used memory (b)")
        total_b = int(total) if total and str(total).isdigit() else None
        used_b = int(used) if used and str(used).isdigit() else None
        name = low.get("card series") or low.get("card model") or low.get("device name") or "unknown AMD GPU"
        gpus.append(_gpu(i, str(name), "amd", total_b, used_bytes=used_b,
                         free_bytes=(total_b - used_b) if total_b is not None and used_b is not None else None,
                         architecture=low.get("gfx version")))
    return LocalSystem(gpus=tuple(gpus), source="rocm-smi")


def apple_gpu(memsize_bytes: int, chip: str) -> LocalSystem:
    """Apple silicon: unified memory; Metal lets the GPU wire about 75 % of it by default
    (recommendedMaxWorkingSetSize) on machines with more than 36 GB, about 2/3 on smaller ones."""
    frac = 0.75 if memsize_bytes > 36 * GiB else 2 / 3
    usable = int(memsize_bytes * frac)
    g = _gpu(0, chip, "apple", usable, architecture="apple-silicon")
    return LocalSystem(gpus=(g,), source="apple", notes=(
        f"Unified memory: {memsize_bytes / GiB:.0f} GiB in total, of which the GPU may use about {frac:.0%} by "
        "default (raise it with `sudo sysctl iogpu.wired_limit_mb=...`). CUDA tools (calibrate, measure) do not run here.",))


# ---------------------------------------------------------------------------------------------
# live detection

def _run(cmd: list[str], timeout_s: float = 20.0) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout if r.returncode == 0 and r.stdout.strip() else None


def _nvml_system(notes: list[str]) -> LocalSystem | None:
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        notes.append("nvidia-ml-py (pynvml) is not installed; NVML not queried.")
        return None
    try:
        pynvml.nvmlInit()
    except Exception as err:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        notes.append(f"NVML could not start ({err}).")
        return None
    try:
        def s(x):
            return x.decode() if isinstance(x, bytes) else str(x)
        driver = s(pynvml.nvmlSystemGetDriverVersion())
        cuda = None
        try:
            v = int(pynvml.nvmlSystemGetCudaDriverVersion())
            cuda = f"{v // 1000}.{(v % 1000) // 10}"
        except Exception:
            pass
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        gpus = []
        for i, h in enumerate(handles):
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            extra: dict[str, Any] = {}
            try:
                extra["uuid"] = s(pynvml.nvmlDeviceGetUUID(h))
                extra["bus_id"] = s(pynvml.nvmlDeviceGetPciInfo(h).busId)
                major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
                extra["compute_capability"] = f"{major}.{minor}"
            except Exception:
                pass
            gpus.append(_gpu(i, s(pynvml.nvmlDeviceGetName(h)), "nvidia", int(mem.total),
                             free_bytes=int(mem.free), used_bytes=int(mem.used), **extra))
        links: list[GpuLink] = []
        nvlink_idx = getattr(pynvml, "NVML_P2P_CAPS_INDEX_NVLINK", None)
        ok = getattr(pynvml, "NVML_P2P_STATUS_OK", 0)
        if nvlink_idx is not None:
            for a in range(len(handles)):
                for b in range(a + 1, len(handles)):
                    try:
                        nv = pynvml.nvmlDeviceGetP2PStatus(handles[a], handles[b], nvlink_idx) == ok
                    except Exception:
                        continue
                    links.append(GpuLink(a, b, "nvlink" if nv else "pcie", "NV" if nv else "PCIe"))
        return LocalSystem(gpus=tuple(gpus), links=tuple(links), driver_version=driver, cuda_version=cuda,
                           source="nvml")
    except Exception as err:
        notes.append(f"NVML query failed ({err}).")
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def detect(*, run: Runner | None = None, use_nvml: bool = True, system: str | None = None) -> LocalSystem:
    """What GPUs this machine has. Never raises for a missing GPU: returns a LocalSystem with no GPUs
    and notes that say what was tried."""
    run = run or _run
    notes: list[str] = []
    nv = _nvml_system(notes) if use_nvml else None
    if nv is None or not nv.gpus:
        text = run(["nvidia-smi", "-q"])
        if text:
            nv = parse_nvidia_smi_q(text)
        else:
            notes.append("`nvidia-smi` is not available or failed.")
    if nv is not None and nv.gpus:
        topo = run(["nvidia-smi", "topo", "-m"])
        links = parse_topo_matrix(topo) if topo else ()
        if links:
            nv = LocalSystem(gpus=nv.gpus, links=links, driver_version=nv.driver_version,
                             cuda_version=nv.cuda_version, source=nv.source, notes=nv.notes)
        if os.environ.get("CUDA_VISIBLE_DEVICES") not in (None, ""):
            notes.append(f"CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']}: PyTorch sees only those GPUs; "
                         "this list shows every GPU the driver knows.")
        return LocalSystem(gpus=nv.gpus, links=nv.links, driver_version=nv.driver_version,
                           cuda_version=nv.cuda_version, source=nv.source, notes=tuple(notes) + nv.notes)
    rocm = run(["rocm-smi", "--showproductname", "--showmeminfo", "vram", "--json"])
    if rocm:
        try:
            amd = parse_rocm_smi_json(rocm)
            if amd.gpus:
                return LocalSystem(gpus=amd.gpus, source=amd.source, notes=tuple(notes))
        except (ValueError, KeyError) as err:
            notes.append(f"rocm-smi output could not be read ({err}).")
    else:
        notes.append("`rocm-smi` is not available.")
    if (system or platform.system()) == "Darwin":
        mem = run(["sysctl", "-n", "hw.memsize"])
        chip = run(["sysctl", "-n", "machdep.cpu.brand_string"]) or "Apple silicon"
        if mem and mem.strip().isdigit() and "Apple" in chip:
            apple = apple_gpu(int(mem.strip()), chip.strip())
            return LocalSystem(gpus=apple.gpus, source="apple", notes=tuple(notes) + apple.notes)
        notes.append("macOS without Apple silicon GPU information.")
    return LocalSystem(source="none", notes=tuple(notes))


def no_gpu_message(system: LocalSystem, command: str = "doctor") -> str:
    tried = " ".join(system.notes) if system.notes else "NVML, nvidia-smi, rocm-smi and Apple sysctl found nothing."
    what = {
        "doctor": "`gpuplan doctor` can still explain an out-of-memory message (`--oom FILE` or `--oom -`) and say "
                  "what fits on a GPU you name (`--gpu h100-sxm --count 8`).",
        "calibrate": "`gpuplan calibrate` runs PyTorch microbenchmarks and needs a local CUDA GPU; run it on the "
                     "machine you want to profile (or under torchrun across nodes).",
        "measure": "`gpuplan measure` runs the scenario on a local CUDA GPU; without one, `gpuplan estimate` predicts "
                   "the same numbers and `gpuplan trace` measures memory on CPU with fake tensors.",
    }[command]
    return f"No GPU found on this machine. Tried: {tried} {what}"
