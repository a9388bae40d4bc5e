"""Search defaults that keep recommendations usable and launchable (docs/recommend.md)."""
from gpuplan.search import recommend


def test_default_deadline_is_stated_and_enforced():
    rec = recommend({"model": "llama-3.1-70b", "task": "train", "train": {"seq_len": 4096, "tokens": 1e12}}, top=5)
    assert any("plans longer than 90 days are rejected" in a for a in rec.assumptions)
    assert all(p.time_value <= 90 * 86400 for p in rec.plans)


def test_lora_plans_are_data_parallel_and_model_parallel_plans_run_on_a_framework_that_has_them():
    rec = recommend({"model": "llama-3.1-8b", "task": "finetune", "train": {"method": "lora", "tokens": 2e8}}, top=10)
    assert rec.plans
    for p in rec.plans:
        assert p.scenario.parallel.tp == 1 and p.scenario.parallel.pp == 1
    pre = recommend({"model": "llama-3.1-70b", "task": "train", "train": {"seq_len": 4096, "tokens": 1e12}}, top=10)
    for p in pre.plans:
        par = p.scenario.parallel
        if par.tp > 1 or par.pp > 1 or par.cp > 1:
            # issue 17: Megatron's distributed optimizer (ZeRO-1), FSDP2 + TP/PP/CP (torchtitan,
            # ZeRO-3) or DeepSpeed AutoTP (ZeRO <= 2, no pp/cp); never HF, which has no model parallelism
            fw = p.scenario.framework
            assert (fw == "megatron" and par.zero <= 1) or (fw == "torchtitan" and par.zero == 3) or \
                (fw == "deepspeed" and par.zero <= 2 and par.pp == 1 and par.cp == 1), (fw, par)


def test_no_native_bf16_serves_in_fp16():
    rec = recommend({"model": "qwen2.5-7b", "task": "infer", "infer": {"concurrency": 16}}, gpus=["v100-sxm2-16gb"],
                    top=3)
    assert rec.plans and all(p.scenario.infer.weights != "bf16" for p in rec.plans)


def test_limited_software_support_is_explained():
    rec = recommend({"model": "llama-3.1-8b", "task": "finetune", "train": {"method": "lora", "tokens": 2e8}},
                    gpus=["tpu-v6e"], top=1)
    assert rec.plans                     # TPU v6e is priced and an 8B LoRA fits
    assert any("limited" in w for w in rec.plans[0].warnings)
