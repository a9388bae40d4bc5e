"""Compose generated run_verl.sh overrides with Hydra over verl's own trainer config (run by hand; not a test).

    git -C VERL_CLONE archive v0.7.0 verl/trainer/config | tar -x -C /tmp/verl-v070
    python -m venv /tmp/v && /tmp/v/bin/pip install hydra-core==1.3.2
    /tmp/v/bin/python scripts/check_verl_launch.py run_verl.sh ...

verl v0.7.0's main_ppo is `@hydra.main(config_path="config", config_name="ppo_trainer")`; Hydra rejects an
override of a key the composed config does not have ("Could not override ..."), so composing is the check.
"""
import re
import shlex
import sys

from hydra import compose, initialize_config_dir

CONFIG_DIR = "/tmp/verl-v070/verl/trainer/config"
for path in sys.argv[1:]:
    text = re.sub(r" *\\\n *", " ", open(path).read())
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("python3 -m verl.trainer.main_ppo"))
    argv = [a.replace("$TRAIN_FILES", "/data/train.parquet").replace("$VAL_FILES", "/data/val.parquet")
            for a in shlex.split(line)[3:] if a != "$@"]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=argv)
    print(f"{path}: composed {len(argv)} overrides (adv_estimator {cfg.algorithm.adv_estimator}, "
          f"n {cfg.actor_rollout_ref.rollout.n})")
