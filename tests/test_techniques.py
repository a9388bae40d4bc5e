"""The one techniques catalog: what-if, the fit path and the OOM explainer name and apply changes alike."""
import pytest

from gpuplan.local.oom import candidate_knobs
from gpuplan.scenario import scenario_from_dict
from gpuplan.search.whatif import _fit_moves, _variants
from gpuplan.techniques import techniques_for


def _train(**kw):
    par = kw.pop("parallel", {})
    count = kw.pop("count", 8)
    return scenario_from_dict({"model": "llama-3.1-8b", "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": count},
                               "parallel": par, "train": {"seq_len": 4096, "micro_batch": 4, **kw}})


def _infer(**kw):
    return scenario_from_dict({"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "h100-sxm"},
                               "infer": {"prompt_len": 4096, "concurrency": 32, **kw}})


SCENARIOS = [_train(), _train(method="lora", recompute="full"), _train(method="qlora", optimizer="adamw-8bit"),
             _train(parallel={"zero": 3}), _train(count=1, micro_batch=1), _infer(), _infer(weights="awq-int4", kv_cache="fp8"),
             _infer(concurrency=1, prompt_len=128)]


@pytest.mark.parametrize("scn", SCENARIOS)
def test_every_technique_changes_the_scenario_and_is_valid(scn):
    for t in techniques_for(scn):
        changed = scn.replace(**t.changes)
        assert changed.model_dump() != scn.model_dump(), t.name
        field = t.name.split("=")[0]
        section = "train" if scn.is_training else "infer"
        if field in (changed.train or changed.infer).model_fields:
            # "field=value" names say exactly what changes
            value = getattr(changed.train if section == "train" else changed.infer, field)
            assert str(value).lower() == t.name.split("=", 1)[1].split(" ")[0].lower(), t.name


@pytest.mark.parametrize("scn", SCENARIOS)
def test_names_are_unique(scn):
    names = [t.name for t in techniques_for(scn)]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("scn", SCENARIOS)
def test_whatif_and_oom_share_the_catalog(scn):
    catalog = techniques_for(scn)
    assert [v[0] for v in _variants(scn)] == [t.name for t in catalog]
    assert [k.name for k in candidate_knobs(scn)] == [t.name for t in catalog if t.saves_memory]
    assert [k.changes for k in candidate_knobs(scn)] == [t.changes for t in catalog if t.saves_memory]


def test_fit_path_keeps_the_workload_and_the_method_unless_allowed():
    scn = _train()
    keep = {m[0] for m in _fit_moves(scn, allow_method_change=False)}
    assert "method=lora" not in keep and "method=qlora" not in keep
    assert "seq_len=2048" not in keep and "precision=fp8" not in keep
    assert {"method=lora", "method=qlora"} <= {m[0] for m in _fit_moves(scn, allow_method_change=True)}


def test_training_catalog_contents():
    names = [t.name for t in techniques_for(_train())]
    assert names[:2] == ["recompute=selective", "recompute=full"]
    assert "micro_batch=2 (+accumulation)" in names and "micro_batch=1 (+accumulation)" in names
    assert {"optimizer=adamw-8bit", "master_weights=false", "zero=1", "zero=2", "zero=3", "offload=optimizer"} <= set(names)
    assert "offload=optimizer+params" not in names          # only under ZeRO-3
    assert "offload=optimizer+params" in [t.name for t in techniques_for(_train(parallel={"zero": 3}))]


def test_accumulation_keeps_the_global_batch():
    scn = _train(global_batch=64)
    for t in techniques_for(scn):
        if t.name.startswith("micro_batch="):
            assert scn.replace(**t.changes).train.global_batch == 64


def test_lower_zero_stage_is_listed_but_not_a_memory_saving():
    by = {t.name: t for t in techniques_for(_train(parallel={"zero": 2}))}
    assert by["zero=3"].saves_memory and not by["zero=1"].saves_memory


def test_single_gpu_has_no_sharding():
    names = {t.name for t in techniques_for(_train(count=1))}
    assert not any(n.startswith("zero=") for n in names)
    assert not any(n.startswith("micro_batch=") for n in techniques_for_names(_train(count=1, micro_batch=1)))


def techniques_for_names(scn):
    return [t.name for t in techniques_for(scn)]


def test_serving_catalog_contents():
    assert techniques_for_names(_infer()) == ["kv_cache=fp8", "weights=fp8", "weights=awq-int4", "weights=gptq-int4",
                                              "concurrency=16", "prompt_len=2048"]
    names = techniques_for_names(_infer(weights="awq-int4", kv_cache="fp8", concurrency=1, prompt_len=128))
    assert names == ["weights=fp8", "weights=gptq-int4"]
