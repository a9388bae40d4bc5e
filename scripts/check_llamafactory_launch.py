"""Parse generated llamafactory.yaml files with LLaMA-Factory's own argument parser (run by hand; not a test).

    git -C LLAMA_FACTORY_CLONE archive v0.9.5 src examples/deepspeed | tar -x -C /tmp/lf
    cd /tmp/lf && DISABLE_VERSION_CHECK=1 PYTHONPATH=<a /tmp venv's site-packages with omegaconf> \
        python /path/to/scripts/check_llamafactory_launch.py FILE.yaml ...

LLaMA-Factory v0.9.5 reads the YAML with transformers' HfArgumentParser.parse_dict(allow_extra_keys=False)
over its dataclasses (src/llamafactory/hparams/parser.py `_TRAIN_ARGS`), so an unknown key or a bad choice is
an error. On a CPU-only machine: `use_cpu` is set (TrainingArguments refuses bf16 without a GPU), the
`datasets` import is stubbed (only its DownloadMode enum is used by the argument classes), and the version
check is disabled when the installed transformers is newer than the tag's pin (<= 5.6.0).
"""
import enum
import sys
import types

import yaml

sys.path.insert(0, "src")
if "datasets" not in sys.modules:
    try:
        import datasets  # noqa: F401
    except ImportError:
        ds = types.ModuleType("datasets")

        class DownloadMode(str, enum.Enum):
            REUSE_DATASET_IF_EXISTS = "reuse_dataset_if_exists"
        ds.DownloadMode = DownloadMode
        sys.modules["datasets"] = ds

from transformers import HfArgumentParser  # noqa: E402

from llamafactory.hparams.parser import _TRAIN_ARGS  # noqa: E402

parser = HfArgumentParser(_TRAIN_ARGS)
for path in sys.argv[1:]:
    cfg = yaml.safe_load(open(path))
    cfg["use_cpu"] = True
    model, data, train, finetune, _ = parser.parse_dict(cfg, allow_extra_keys=False)[:5]
    print(f"{path}: parsed (stage {finetune.stage}, {finetune.finetuning_type}, cutoff_len {data.cutoff_len}, "
          f"batch {train.per_device_train_batch_size} x {train.gradient_accumulation_steps})")
