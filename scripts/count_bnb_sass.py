"""Count the SASS instructions one warp issues per loop iteration of bitsandbytes' batch-1 4-bit kernel.

Reproduces the counts in estimate/quant_kernels.py (BNB_GEMV_WARP_INSTR). Needs, on any CPU machine:
  pip download --no-deps bitsandbytes==0.45.0 nvidia-cuda-nvdisasm   (unzip both wheels)
  python3 scripts/count_bnb_sass.py bitsandbytes/libbitsandbytes_cuda124.so path/to/nvdisasm

cuobjdump 13 refuses these libraries ("Invalid ELF"), so the script carves each embedded CUDA ELF (e_machine 190)
out of the fatbin itself (its size: the furthest of the section and program header tables), disassembles it with
nvdisasm, and walks `kgemm_4bit_inference_naive`'s main loop from its label to the back edge, taking at each
conditional branch the side that leads to the 16-byte (LDG.E.128) loads: the full-tile path every iteration but a
row's last takes. NOPs are not counted. One iteration handles 32 lanes x 32 codes = 1,024 weights.
"""
from __future__ import annotations

import re
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

KERNELS = {"fp16": "_Z26kgemm_4bit_inference_naiveI6__halfLi128ELi16EEviiiPT_PhPfPKfS2_iiii",
           "bf16": "_Z26kgemm_4bit_inference_naiveI13__nv_bfloat16Li128ELi16EEviiiPT_PhPfPKfS2_iiii"}


def cubins(lib: Path) -> dict[int, bytes]:
    """{sm: ELF bytes} of the CUDA cubins embedded in a shared library."""
    data, out, pos = lib.read_bytes(), {}, 1
    while (i := data.find(b"\x7fELF", pos)) >= 0:
        pos = i + 4
        if struct.unpack_from("<H", data, i + 0x12)[0] != 190:
            continue
        phoff, shoff = struct.unpack_from("<QQ", data, i + 0x20)
        phent, phnum, shent, shnum = struct.unpack_from("<HHHH", data, i + 0x36)
        size = max(shoff + shent * shnum, phoff + phent * phnum)
        out[struct.unpack_from("<I", data, i + 0x30)[0] & 0xFF] = data[i:i + size]
    return out


def function_rows(listing: str, name: str) -> tuple[list[str], dict[str, int]]:
    rows, labels, inside = [], {}, False
    for line in listing.split("\n"):
        if line.startswith(f".text.{name}:"):
            inside = True
            continue
        if inside and line.startswith("//----"):
            break
        if not inside:
            continue
        if line.startswith(".L"):
            labels[line.rstrip(":")] = len(rows)
        elif m := re.match(r"\s+/\*[0-9a-f]+\*/\s+(.*?)\s*;", line):
            rows.append(m.group(1))
    return rows, labels


def hot_loop_count(rows: list[str], labels: dict[str, int]) -> int:
    bar = next(i for i, r in enumerate(rows) if r.startswith("BAR.SYNC"))
    loop = min((v for v in labels.values() if v > bar), default=None)
    label = next(k for k, v in labels.items() if v == loop)

    def leads_to_wide_load(i: int) -> bool:
        for r in rows[i:]:
            if "LDG.E.128" in r:
                return True
            if "BRA" in r or "EXIT" in r:
                return False
        return False

    i, n = loop, 0
    for _ in range(10_000):
        ins = rows[i]
        if ins.startswith("NOP"):
            i += 1
            continue
        n += 1
        if m := re.search(r"BRA `\((\.L_x_\d+)\)", ins):
            if m.group(1) == label:
                return n
            target = labels[m.group(1)]
            if not ins.startswith("@"):
                i = target
                continue
            i = target if leads_to_wide_load(target) and not leads_to_wide_load(i + 1) else i + 1
            continue
        i += 1
    raise RuntimeError("no back edge found")


def main(argv: list[str]) -> int:
    lib, nvdisasm = Path(argv[1]), argv[2]
    for sm, elf in sorted(cubins(lib).items()):
        if sm < 75:
            continue
        with tempfile.NamedTemporaryFile(suffix=".cubin") as fh:
            fh.write(elf)
            fh.flush()
            listing = subprocess.run([nvdisasm, "-c", fh.name], capture_output=True, text=True).stdout
        for dtype, name in KERNELS.items():
            rows, labels = function_rows(listing, name)
            if rows:
                print(f"{lib.name} sm_{sm} {dtype}: {hot_loop_count(rows, labels)} warp instructions per 1,024 weights")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
