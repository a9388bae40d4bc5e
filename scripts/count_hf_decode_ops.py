"""Count the device ops one HF transformers `generate()` decode step issues, per transformers version, on CPU
(docs/speed.md §3.30).

The HF eager decode constant (efficiency.json engines.hf.host_issue_layer_s, 0.77 ms per Llama decoder layer) was
read off bitsandbytes' H100 rows, which ran transformers 4.46.3 (docs/speed.md §3.9). Other rows ran other
transformers versions, whose Llama issues a different number of ops per layer (4.35: eager attention, rotary
cos/sin sliced and cast in every layer, a tuple KV cache grown by torch.cat; 4.36+: SDPA by default; 4.46: SDPA,
DynamicCache, rotary once per forward; 5.x: the attention interface). This script runs the real `generate()` of
each version on a tiny Llama (the layer structure kept: 4 heads, hidden 64; MHA like Llama-2 and GQA like Llama-3)
with the attention implementation that version picks by default, greedy, `min_new_tokens == max_new_tokens` as
optimum-benchmark and optimum's GPTQ benchmark call it, and counts, under a TorchDispatchMode, every aten op that
would launch device work (scripts/count_train_kernels.py `launches_kernel`: not a view, an allocation or an alias).

A forward pre-hook on the model marks the start of each step; hooks on the decoder layers attribute ops to the
layers. Counted at 2 and 3 layers: the per-layer count is the difference, the rest of each step splits into the
model forward outside the layers (embedding, masks, rotary where it is per forward, final norm, lm_head) and
generate's own work between forwards (logits processors, argmax, stopping criteria, cache/mask bookkeeping).

Each version runs in its own interpreter, with the wheel installed in a separate target directory:

    pip install --no-deps --target /tmp/hfops/tf435 transformers==4.35.2 tokenizers==0.15.2 huggingface_hub==0.19.4
    pip install --no-deps --target /tmp/hfops/tf446 transformers==4.46.3 tokenizers==0.20.3 huggingface_hub==0.26.2
    PYTHONPATH=src python3 scripts/count_hf_decode_ops.py /tmp/hfops/tf435 /tmp/hfops/tf446 "" \\
        > src/gpuplan/estimate/data/hf_decode_ops.csv        # "" = the installed transformers
"""
from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys

FIELDS = ("transformers", "torch", "attn_implementation", "kv_layout", "decode_ops_per_layer",
          "forward_ops_fixed", "generate_ops_per_step", "counted_on")

_NO_KERNEL = {"empty", "empty_like", "empty_strided", "detach", "alias", "lift_fresh", "_local_scalar_dense",
              "set_", "resize_", "_unsafe_view", "view", "_reshape_alias", "as_strided", "t", "transpose",
              "permute", "expand", "unsqueeze", "squeeze", "slice", "select", "split", "split_with_sizes",
              "unbind", "chunk", "narrow", "unfold", "diagonal", "view_as_real", "view_as_complex", "clone_meta"}

PROMPT, NEW = 16, 6          # prompt tokens; new tokens (the first comes from the prefill; steps 2.. are decodes)


def _child(layers: int, kv_heads: int) -> dict:
    """Run in the interpreter of one transformers version: ops of each decode step of generate()."""
    from collections import Counter, defaultdict

    import torch
    import transformers
    from torch.utils._python_dispatch import TorchDispatchMode
    from transformers import LlamaConfig, LlamaForCausalLM

    def launches(func) -> bool:
        return func.overloadpacket.__name__ not in _NO_KERNEL and not getattr(func, "is_view", False)

    state = {"step": -1, "where": "generate"}
    counts: dict = defaultdict(Counter)
    names: dict = defaultdict(Counter)

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if launches(func) and state["step"] >= 0:
                counts[state["step"]][state["where"]] += 1
                if state["where"] == "layer" and state["step"] == 2:
                    names[state["where"]][func.overloadpacket.__name__] += 1
            return func(*args, **(kwargs or {}))

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=layers, num_attention_heads=4,
                      num_key_value_heads=kv_heads, vocab_size=256, max_position_embeddings=256,
                      bos_token_id=1, eos_token_id=2, pad_token_id=0)
    model = LlamaForCausalLM(cfg).to(torch.float16).eval()
    attn = getattr(model.config, "_attn_implementation", None) or (
        "flash_attention_2" if getattr(model.config, "_flash_attn_2_enabled", False) else "eager")

    def pre(_m, *_a, **_k):
        state["step"] += 1
        state["where"] = "forward"

    def post(_m, *_a, **_k):
        state["where"] = "generate"

    def lpre(_m, *_a, **_k):
        state["where"] = "layer"

    def lpost(_m, *_a, **_k):
        state["where"] = "forward"

    model.register_forward_pre_hook(pre)
    model.register_forward_hook(post)
    for layer in model.model.layers:
        layer.register_forward_pre_hook(lpre)
        layer.register_forward_hook(lpost)
    ids = torch.randint(3, 256, (1, PROMPT))
    kw = dict(max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False, num_beams=1, pad_token_id=0)
    with torch.no_grad():
        model.generate(ids, attention_mask=torch.ones_like(ids), **kw)      # warm-up
        state["step"] = -1
        counts.clear()
        names.clear()
        with Mode():
            model.generate(ids, attention_mask=torch.ones_like(ids), **kw)
    # steps 0 (prefill) .. NEW-1; the last forward's trailing generate work ends the loop: use steps 2..NEW-2
    steady = [counts[s] for s in range(2, NEW - 1)]
    return {"transformers": transformers.__version__, "torch": torch.__version__.split("+")[0],
            "attn_implementation": attn, "layers": layers,
            "layer": [c["layer"] for c in steady], "forward": [c["forward"] for c in steady],
            "generate": [c["generate"] for c in steady], "layer_op_names": dict(names["layer"])}


def count(target: str, layers: int, kv_heads: int) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (target, env.get("PYTHONPATH", "")) if p)
    env["TRANSFORMERS_NO_ADVISORY_WARNINGS"] = "1"
    out = subprocess.run([sys.executable, __file__, "--child", str(layers), str(kv_heads)], env=env,
                         capture_output=True, text=True, check=True, timeout=900).stdout
    return json.loads(out.strip().splitlines()[-1])


def rows(targets: list[str]) -> list[dict]:
    today = datetime.date.today().isoformat()
    out = []
    for target in targets:
        for layout, kv in (("mha", 4), ("gqa", 2)):
            a, b = count(target, 2, kv), count(target, 3, kv)
            per = {b["layer"][i] - a["layer"][i] for i in range(len(a["layer"]))}
            if len(per) != 1 or any(x != 2 * next(iter(per)) for x in a["layer"]):
                raise SystemExit(f"unsteady layer counts {a['layer']} {b['layer']}")
            fwd = set(a["forward"]) | set(b["forward"])
            gen = set(a["generate"]) | set(b["generate"])
            if len(fwd) != 1 or len(gen) != 1:
                raise SystemExit(f"unsteady per-step counts {a} {b}")
            print(f"# {a['transformers']} {layout}: {json.dumps(b['layer_op_names'], sort_keys=True)}",
                  file=sys.stderr)
            out.append({"transformers": a["transformers"], "torch": a["torch"],
                        "attn_implementation": a["attn_implementation"], "kv_layout": layout,
                        "decode_ops_per_layer": next(iter(per)), "forward_ops_fixed": fwd.pop(),
                        "generate_ops_per_step": gen.pop(), "counted_on": today})
    return out


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--child":
        print(json.dumps(_child(int(argv[1]), int(argv[2]))))
        return 0
    print(",".join(FIELDS))
    for r in rows(argv or [""]):
        print(",".join(str(r[f]) for f in FIELDS))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
