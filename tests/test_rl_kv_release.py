"""How a colocated rollout engine's vLLM release turns gpu_memory_utilization into its KV pool (docs/posttrain.md,
"How vLLM sizes its KV cache beside a trainer, by release"; issue 20).

Expected values are the releases' own formulas on stated inputs, read from each release's code (PyPI sdist = tag):
- V1 0.8.3 gpu_worker.determine_available_memory L151-186: total x utilization - (torch's whole-process allocation
  peak + every non-torch byte on the device): the trainer's resident weights and the CUDA context count;
- V1 0.9.1 gpu_worker.init_device L135-150 / determine_available_memory L218: requested_memory - the engine's own use
  since its start-up snapshot, and a ValueError when less than utilization x total is free at start-up;
- verl's V0 wrapper for vLLM 0.6.3 (verl@44a65f9 verl/third_party/vllm/vllm_v_0_6_3/worker.py L201-210):
  utilization x the memory free after the profile run.
The trainer's resident bytes are Llama 3.1 8B's published parameter count (8,030,261,248, the model card) as verl
holds it before the rollout is built: the FSDP actor's fp32 shard (4 bytes / 8 GPUs) and the reference's bf16 shard
(2 bytes / 8 GPUs); no optimizer state yet (torch.optim creates it at the first step)."""
import pytest

from gpuplan.errors import InputError
from gpuplan.estimate import rl as rlm
from gpuplan.estimate.memory import DRIVER_RESERVE_BYTES
from gpuplan.hardware import get_gpu
from gpuplan.models import get_model
from gpuplan.scenario import scenario_from_dict

MiB = 2 ** 20
P_8B = 8_030_261_248
RESIDENT = P_8B * 4 / 8 + P_8B * 2 / 8          # actor fp32 shard + reference bf16 shard, per GPU
CONTEXT = 512 * MiB + 256 * MiB                 # memory.Overhead: CUDA context + NCCL buffers (8 GPUs talk)
UTIL = 0.5


def _scn(**rl):
    data = {"model": "llama-3.1-8b", "task": "finetune", "framework": "torchtitan",
            "hardware": {"gpu": "h100-sxm", "count": 8},
            "parallel": {"zero": 3, "fsdp_version": 1},
            "train": {"objective": "grpo", "method": "full", "micro_batch": 4, "recompute": "full",
                      "rl": {"prompts_per_step": 64, "group_size": 8, "prompt_len": 256, "max_new_tokens": 1024,
                             "engine": "vllm", "placement": "colocated", "rollout_tp": 1,
                             "gpu_memory_utilization": UTIL, **rl}}}
    return scenario_from_dict(data, "t")


def _pool(scn):
    model, gpu = get_model(scn.model), get_gpu(scn.hardware.gpu)
    return rlm.rollout_engine_memory(scn, model, int(gpu.usable_memory_bytes)).limits["kv_pool_bytes"]


@pytest.mark.parametrize("release,v0,rule", [
    (None, False, "own"), ("0.7.3", False, "whole_gpu"), ("0.8.3", False, "whole_gpu"), ("0.8.5", False, "whole_gpu"),
    ("0.9.0", False, "whole_gpu"), ("0.9.1", False, "own"), ("0.10.0", False, "own"), ("0.11.0", False, "own"),
    ("0.6.3", True, "free"), ("0.8.3", True, "own")])
def test_rule_by_release(release, v0, rule):
    extra = {"engine_release": release} if release else {}
    assert rlm.rollout_kv_rule(_scn(engine_vllm_v0=v0, **extra)) == rule


def test_trainer_resident_when_verl_builds_the_rollout_last():
    scn, model = _scn(engine_release="0.8.3"), get_model("llama-3.1-8b")
    assert rlm.engine_start_resident(scn, model) == pytest.approx(RESIDENT, rel=2e-3)
    # NeMo RL builds vLLM before the policy: nothing of the trainer's is there
    assert rlm.engine_start_resident(_scn(engine_release="0.9.0", engine_started="before_trainer"), model) == 0


def test_v1_0_8_counts_the_trainer_against_its_share():
    own = _pool(_scn())
    assert _pool(_scn(engine_release="0.8.3")) == pytest.approx(own - RESIDENT - CONTEXT, rel=1e-3)
    # a clean GPU (the engine built first): only the engine process's context and NCCL buffers
    assert _pool(_scn(engine_release="0.9.0", engine_started="before_trainer")) == pytest.approx(
        own - 512 * MiB, abs=1)
    assert _pool(_scn(engine_release="0.9.1")) == own


def test_verl_v0_wrapper_takes_a_share_of_the_free_memory():
    usable = get_gpu("h100-sxm").usable_memory_bytes
    requested = UTIL * (usable - DRIVER_RESERVE_BYTES)
    own_use = requested - _pool(_scn(engine_vllm_v0=True))         # weights + profile peak + workspaces
    expected = UTIL * (usable - DRIVER_RESERVE_BYTES - own_use - RESIDENT - CONTEXT)
    assert _pool(_scn(engine_vllm_v0=True, engine_release="0.6.3")) == pytest.approx(expected, rel=1e-3)


def test_v1_from_0_9_1_refuses_to_start_without_its_share_free():
    # 0.9 x (81,559 MiB - 449 MiB) = 71 GiB asked; the trainer holds 5.6 GiB + 0.75 GiB of 79.2 GiB: 72.9 GiB free
    from gpuplan import api
    scn = _scn(engine_release="0.10.0", gpu_memory_utilization=0.9)
    api.estimate(scn.model_dump(exclude_unset=True))
    with pytest.raises(InputError, match="less than desired GPU memory utilization"):
        api.estimate(_scn(engine_release="0.10.0", gpu_memory_utilization=0.93).model_dump(exclude_unset=True))
    # the same utilization on 0.8.3 starts (no such check) and sizes a smaller pool instead
    api.estimate(_scn(engine_release="0.8.3", gpu_memory_utilization=0.93).model_dump(exclude_unset=True))


@pytest.mark.parametrize("rl,msg", [({"engine": "sglang", "engine_release": "0.8.3"}, "names a vLLM release"),
                                    ({"engine_release": "0.6.3"}, "V1 engine first shipped in 0.7.0"),
                                    ({"engine_release": "0.8"}, "release")])
def test_release_validation(rl, msg):
    with pytest.raises(InputError, match=msg):
        _scn(**rl)
