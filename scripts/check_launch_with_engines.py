"""Run the engines' real argument parsers over every generated file in tests/snapshots/launch.

For engines that do not install on the CPU test machine (vLLM, SGLang, Megatron-LM): run this on a
machine where they are installed (a GPU box or the engine's container). Each engine is skipped with
a message when its package cannot be imported; nothing is started, only parsed.

  python scripts/check_launch_with_engines.py            # every engine that imports here
  MEGATRON_LM=/path/to/Megatron-LM python scripts/check_launch_with_engines.py

Megatron-LM on a CPU-only machine (no pip install: a checkout at the pinned tag, e.g.
`git archive core_v0.19.0 megatron | tar -x -C /tmp/megatron-core_v0.19.0`): its argument module
imports megatron.core, whose MoE paged-stash module imports Triton kernels at the top level
(megatron/core/transformer/moe/ops/paged_stash.py, the only unconditional triton import on that
path), and megatron/training/models uses typing.override (Python >= 3.12). With
`--cpu-shims` (or GPUPLAN_MEGATRON_CPU_SHIMS=1) that one module is replaced by a stand-in whose
functions do nothing (the parser never calls them) and typing.override is taken from
typing_extensions on Python 3.11; and validate_args' one device query (get_device_arch_version, which
only picks between two warnings for tp/cp > 1) is answered with the compute capability major of the
snapshots' GPU (H100: 9; --device-arch N). Nothing else of Megatron is changed; parse_args and
validate_args run as shipped.

Parsers used (their module paths move between releases; the ones below are the current ones):
  vLLM       vllm.entrypoints.common.cli_args.make_arg_parser(FlexibleArgumentParser()) (>= 0.30;
             vllm.entrypoints.openai.cli_args before); on a CPU-only machine set VLLM_TARGET_DEVICE=cpu
  SGLang     sglang.srt.server_args.prepare_server_args(argv)
  Megatron   megatron.training.arguments.parse_args() + validate_args() with WORLD_SIZE set
  llama.cpp  the llama-server binary named by LLAMA_SERVER (built from source; see llamacpp_parse)
Exit status 1 when a parser refuses a file.
"""
from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path

SNAP = Path(__file__).resolve().parents[1] / "tests" / "snapshots" / "launch"


def files():
    for path in sorted(SNAP.glob("*.txt")):
        parts = re.split(r"^==> (.+?) <==\n", path.read_text(encoding="utf-8"), flags=re.M)
        for name, text in zip(parts[1::2], parts[2::2]):
            yield path.stem, name, text


def command(text: str, program: str) -> list[str] | None:
    """argv after `program`, shell defaults ${X:-d} replaced by d and required ${X:?..} by a placeholder."""
    joined = re.sub(r" *\\\n *", " ", text)
    for name, default in re.findall(r'^(\w+)="\$\{\1:-([^}]*)\}"$', text, re.M):
        joined = joined.replace(f'"${name}"', default)
    line = next((ln.strip() for ln in joined.splitlines() if ln.strip().startswith(program)), None)
    if line is None:
        return None
    line = re.sub(r"\$\{(\w+):-([^}]*)\}", r"\2", line)
    line = re.sub(r"\$\{(\w+):\?[^}]*\}", lambda m: "0" if m.group(1).endswith("RANK") else "10.0.0.1", line)
    line = line.replace('"${DATA_ARGS[@]}"', "--mock-data").replace('"$@"', "").replace('"$CHECKPOINT_DIR"', "/tmp/ck")
    return shlex.split(line)


def vllm_parse(argv):
    try:                                              # vLLM >= 0.30 moved both
        from vllm.entrypoints.common.cli_args import make_arg_parser
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.entrypoints.openai.cli_args import make_arg_parser
        from vllm.utils import FlexibleArgumentParser
    parser = make_arg_parser(FlexibleArgumentParser())
    parser.parse_args(argv[2:])                       # after "vllm serve"; the model is positional


def sglang_parse(argv):
    from sglang.srt.server_args import prepare_server_args
    prepare_server_args(argv[3:])                     # after "python -m sglang.launch_server"


def llamacpp_parse(argv):
    """llama-server's own parser (common/arg.cpp) over the script's options: the binary named by
    LLAMA_SERVER is started on a model file that does not exist. A refused option stops it in the parser
    ("error while handling argument" / "invalid argument", exit before anything loads); options it accepts
    get it as far as loading the model, which then fails. Nothing is served; the port is 0 (any free one)."""
    import subprocess
    args = list(argv[1:])
    for i, a in enumerate(args[:-1]):
        if a in ("-m", "--model"):
            args[i + 1] = "/nonexistent/gpuplan-check.gguf"
        if a == "--port":
            args[i + 1] = "0"
    r = subprocess.run([os.environ["LLAMA_SERVER"], *args], capture_output=True, text=True, timeout=60)
    out = r.stdout + r.stderr
    if re.search(r"error while handling argument|invalid argument|unknown argument", out):
        raise ValueError(next(line for line in out.splitlines() if "argument" in line))
    if not re.search(r"failed to load model|loading model|llama_model_load|gguf_init_from_file", out):
        raise ValueError(f"llama-server stopped before loading the model (exit {r.returncode}): {out[-300:]}")


CPU_SHIMS = {"on": False, "arch": 9}


def megatron_parse(argv):
    import megatron.training.arguments as margs
    from megatron.training.arguments import parse_args, validate_args
    if CPU_SHIMS["on"]:
        margs.get_device_arch_version = lambda: CPU_SHIMS["arch"]
    script = next(i for i, a in enumerate(argv) if a.endswith("pretrain_gpt.py"))
    nproc = int(argv[argv.index("--nproc-per-node") + 1])
    nnodes = int(argv[argv.index("--nnodes") + 1]) if "--nnodes" in argv else 1
    os.environ.update(WORLD_SIZE=str(nproc * nnodes), RANK="0", LOCAL_RANK="0")
    sys.argv = ["pretrain_gpt.py", *argv[script + 1:]]
    validate_args(parse_args())


CHECKS = {"vllm": ("serve.sh", "vllm serve", vllm_parse, "vllm.engine.arg_utils"),
          "sglang": ("serve.sh", "python -m sglang", sglang_parse, "sglang.srt.server_args"),
          "megatron": ("train_megatron.sh", "torchrun", megatron_parse, "megatron.training.arguments"),
          "llama.cpp": ("serve.sh", "llama-server", llamacpp_parse, None)}


def megatron_cpu_shims() -> None:
    """See the module docstring: only what stands between a CPU-only Python 3.11 and the parser."""
    import types
    import typing
    if not hasattr(typing, "override"):
        import typing_extensions
        typing.override = typing_extensions.override
    try:
        import triton  # noqa: F401
    except ImportError:
        name = "megatron.core.transformer.moe.ops.paged_stash"
        stub = types.ModuleType(name)

        def _attr(attr):
            if attr.startswith("__"):
                raise AttributeError(attr)
            return lambda *a, **k: None
        stub.__getattr__ = _attr
        sys.modules[name] = stub


def main() -> int:
    if os.environ.get("MEGATRON_LM"):
        sys.path.insert(0, os.environ["MEGATRON_LM"])
    if "--cpu-shims" in sys.argv or os.environ.get("GPUPLAN_MEGATRON_CPU_SHIMS") == "1":
        megatron_cpu_shims()
        CPU_SHIMS["on"] = True
        if "--device-arch" in sys.argv:
            CPU_SHIMS["arch"] = int(sys.argv[sys.argv.index("--device-arch") + 1])
    failed = 0
    for engine, (fname, program, parse, module) in CHECKS.items():
        if module is None:                                 # a binary: llama-server
            if not os.environ.get("LLAMA_SERVER"):
                print(f"skip {engine}: set LLAMA_SERVER to a llama-server binary")
                continue
        else:
            try:
                __import__(module)
            except Exception as e:                         # not installed, or needs a GPU build (triton, TE)
                print(f"skip {engine}: cannot import {module}: {e!r}")
                continue
        for snap, name, text in files():
            argv = command(text, program) if name == fname else None
            if not argv:
                continue
            # the script's own `export VAR=value` lines, as the shell would set them (Megatron's
            # validate_args checks CUDA_DEVICE_MAX_CONNECTIONS)
            saved = dict(os.environ)
            os.environ.update(dict(re.findall(r"^export (\w+)=(\S+)", text, re.M)))
            try:
                parse(argv)
                print(f"ok   {engine}: {snap}/{name}")
            except (Exception, SystemExit) as e:        # argparse exits on an unknown flag
                failed += 1
                print(f"FAIL {engine}: {snap}/{name}: {e!r}")
            finally:
                os.environ.clear()
                os.environ.update(saved)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
