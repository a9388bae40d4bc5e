#!/bin/bash
# The GPU checks gpuplan's evidence uses, as one run on one GPU machine (about 6-9 minutes on an H200):
#   1. scripts/measure_suite.py: `gpuplan measure` on the suite's scenarios (HF fine-tuning and HF decoding with
#      random weights), measured peak memory and times beside the prediction -> measure.jsonl
#   2. scripts/bench_hf_eager_decode.py: the ops of one HF decode step for a Llama-3.1-8B-shaped layer, batch 1-512
#      (the 16-bit weight GEMMs at decode row counts included) -> eager_decode.csv
#   3. scripts/bench_expert_gemm.py: per-expert cuBLAS GEMMs and host seconds per eager op -> expert_gemm.csv
#   4. gpuplan calibrate --quick: GEMM TFLOP/s per dtype and HBM copy bandwidth -> profile.json
# Results land in $OUT (default ./device-out). Needs torch with CUDA, transformers and peft; gpuplan's own
# dependencies come from the machine or from wheels in .whl/ (pydantic is not in every GPU image).
#     OUT=/tmp/out bash scripts/device_checks.sh [suite.yaml]
set -u
OUT=${OUT:-device-out}
SUITE=${1:-scripts/sources/measure_suite_h200.yaml}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:$PYTHONPATH
fi
{ date -u; nvidia-smi -q 2>&1 | head -80; lscpu 2>&1 | head -30
  python3 -c "import torch, transformers, peft; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'transformers', transformers.__version__, 'peft', peft.__version__)"; } > "$OUT/system.txt" 2>&1
step() { local limit=$1; shift; echo "== $(date -u +%T) $*"; timeout "$limit" "$@"; echo "== rc $?"; }
step 300 python3 scripts/measure_suite.py "$SUITE" --out "$OUT/measure.jsonl"
step 45 python3 scripts/bench_hf_eager_decode.py --heads 32 --kv-heads 8 --head-dim 128 --context 576 --hidden 4096 \
  --ffn 14336 --dtype bf16 --batch 1 2 4 8 16 32 64 128 256 512 --iters 30 > "$OUT/eager_decode.csv"
step 120 python3 scripts/bench_expert_gemm.py --out "$OUT/expert_gemm.csv"
step 90 python3 -m gpuplan.cli calibrate --quick --json --out "$OUT/profile.json" > "$OUT/calibrate.json"
