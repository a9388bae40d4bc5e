"""Diagnostic (docs/speed.md §3.35, nothing priced from it): the per-step cost of vLLM V0's incremental detokenization
(`Detokenizer.decode_sequence_inplace`, run in `SingleStepOutputProcessor` for every new token when
SamplingParams.detokenize, the default) over 256 running sequences, with a *proxy* tokenizer: a byte-level BPE trained
here on the vLLM tree's own Python files (Llama 3's tokenizer is byte-level BPE too, 128k entries; it is not on this
machine), wrapped as transformers' PreTrainedTokenizerFast with vLLM's cached special-token sets.

    python3 scripts/bench_vllm_detokenize_proxy.py /path/to/vllm-0.5.4 32000
"""
import glob
import os
import statistics
import sys
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_vllm_v0_host as b  # noqa: E402
b._import_vllm(sys.argv[1])
from tokenizers import Tokenizer, models, trainers, pre_tokenizers, decoders
from transformers import PreTrainedTokenizerFast
tk = Tokenizer(models.BPE())
tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tk.decoder = decoders.ByteLevel()
files = sorted(glob.glob(sys.argv[1] + "/vllm/**/*.py", recursive=True))[:400]
tk.train(files, trainers.BpeTrainer(vocab_size=int(sys.argv[2]), special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
                                    initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
hf = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>")
# vllm/transformers_utils/tokenizer.py get_cached_tokenizer @v0.5.4: the special-token sets and len() cached once
ids, toks, n = set(hf.all_special_ids), list(hf.all_special_tokens), len(hf)
class Cached(hf.__class__):
    all_special_ids = property(lambda self: ids)
    all_special_tokens = property(lambda self: toks)
    all_special_tokens_extended = property(lambda self: toks)
    def __len__(self): return n
hf.__class__ = Cached
tok = hf
import vllm.config  # noqa: E402,F401  (first, as LLMEngine does: 0.6.3's vllm.sequence imports are circular)
from vllm.sequence import Sequence, Logprob  # noqa: E402
from vllm.transformers_utils.detokenizer import Detokenizer  # noqa: E402
from vllm.sampling_params import SamplingParams
det = Detokenizer(types.SimpleNamespace(get_lora_tokenizer=lambda lr: tok))
params = SamplingParams(n=1, temperature=1.0, top_p=1.0, ignore_eos=True, max_tokens=256)
import random
random.seed(0)
V = tok.vocab_size if hasattr(tok, "vocab_size") else len(tok)
prompt = tok("hi" * 255).input_ids if hasattr(tok, "__call__") else list(range(3, 259))
seqs = []
for i in range(256):
    s = Sequence(i, {"prompt_token_ids": list(prompt), "prompt": None}, 16, 1)
    seqs.append(s)
def step():
    for s in seqs:
        t = random.randrange(3, V)
        s.append_token_id(t, {t: Logprob(-1.0)})
        det.decode_sequence_inplace(s, params)
for _ in range(20):
    step()
ts = []
for _ in range(30):
    t0 = time.perf_counter(); step(); ts.append(time.perf_counter() - t0)
print(f"vocab {V}: prompt {len(prompt)} tokens; decode_sequence_inplace per sequence: best {min(ts)/256*1e6:.2f} us, median {statistics.median(ts)/256*1e6:.2f} us")
