"""Time the per-request chat-template work of vLLM 0.11.0's API server on this CPU (engine_host.
VLLM_CHAT_TEMPLATE_PARSE_S; docs/serving-load.md, *The chat template in vLLM 0.11.0's API server*).

vLLM 0.11.0 (entrypoints/chat_utils.py `resolve_chat_template_kwargs`, read in the vllm-0.11.0 wheel) builds a new
sandboxed Jinja environment, parses the whole chat template and walks it for undeclared variables on every chat
request; 0.11.1 caches it. This script repeats exactly that Jinja work (jinja2 only; vLLM not needed) and, for
comparison, the cached render.

    python scripts/bench_chat_template_parse.py TEMPLATE.jinja            # a template file
    python scripts/bench_chat_template_parse.py --hf Qwen/Qwen3-32B      # the model's tokenizer_config.json
                                                                          # (needs huggingface_hub and network)
The packaged 9.81 ms is the best of 15 runs of 20 calls on Qwen3's template on an AMD EPYC Zen 4 core."""
from __future__ import annotations

import argparse
import json
import statistics
import time


def _template(args) -> str:
    if args.hf:
        from huggingface_hub import hf_hub_download
        cfg = json.load(open(hf_hub_download(args.hf, "tokenizer_config.json")))
        tpl = cfg.get("chat_template")
        if isinstance(tpl, list):      # named templates: the default one
            tpl = next(t["template"] for t in tpl if t.get("name") == "default")
        if not tpl:
            raise SystemExit(f"{args.hf}: tokenizer_config.json has no chat_template")
        return tpl
    return open(args.template).read()


def _env():
    import jinja2.ext
    import jinja2.sandbox
    from jinja2 import nodes

    class GenerationTag(jinja2.ext.Extension):
        """transformers' `{% generation %}` block tag, which chat templates may use (so the parse accepts them)."""
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return nodes.CallBlock(self.call_method("_noop"), [], [], body).set_lineno(lineno)

        def _noop(self, caller):
            return caller()

    return jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("template", nargs="?", help="a chat template file")
    ap.add_argument("--hf", help="read the chat template of this Hugging Face model instead")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--calls", type=int, default=20)
    args = ap.parse_args()
    if not (args.template or args.hf):
        ap.error("give a template file or --hf MODEL")
    import jinja2.meta
    tpl = _template(args)

    def per_request():      # vLLM 0.11.0: a new environment, parse, walk, on every request
        return jinja2.meta.find_undeclared_variables(_env().parse(tpl))

    compiled = _env().from_string(tpl)
    msgs = [{"role": "user", "content": "hello " * 200}]

    def render():           # what the request renders with (compiled once, as transformers caches it)
        return compiled.render(messages=msgs, add_generation_prompt=True, tools=None)

    print(f"template: {len(tpl)} characters")
    for name, fn in (("vLLM 0.11.0 per-request parse + walk", per_request), ("cached render", render)):
        fn()
        runs = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            for _ in range(args.calls):
                fn()
            runs.append((time.perf_counter() - t0) / args.calls)
        print(f"{name}: best {min(runs) * 1e3:.2f} ms, median {statistics.median(runs) * 1e3:.2f} ms a call")


if __name__ == "__main__":
    main()
