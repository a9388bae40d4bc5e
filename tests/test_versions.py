"""The one version reader (src/gpuplan/versions.py). Expected keys are the release each string names under PEP 440
(appendix B grammar; a pre-, post-, dev or local suffix names a build of that release), worked by hand from strings
the projects print: torch.__version__ ("2.11.0+cu130", "2.6.0a0+git1963fc8", ROCm nightlies "2.9.0.dev20250811+rocm6.4"),
vLLM tags and wheels ("v0.10.1rc1", "0.6.3.post1"), transformers ("4.46.3", "4.46")."""
import pytest

from gpuplan.errors import InputError
from gpuplan.scenario import scenario_from_dict
from gpuplan.versions import UNKNOWN, Version, VersionError, dev_build, known_version, parse_version


@pytest.mark.parametrize("text, key", [
    ("0.6.3.post1", (0, 6, 3)),
    ("v0.10.1rc1", (0, 10, 1)),
    ("4.46", (4, 46, 0)),
    ("4.46.3", (4, 46, 3)),
    ("2.11.0+cu130", (2, 11, 0)),
    ("2.6.0a0+git1963fc8", (2, 6, 0)),
    ("2.9.0.dev20250811+rocm6.4", (2, 9, 0)),
    ("1.13.1+cu117", (1, 13, 1)),
    ("0.5.4.dev0", (0, 5, 4)),
    ("2.13", (2, 13, 0)),
    ("1.2.3.4", (1, 2, 3)),
])
def test_key_is_the_release(text, key):
    v = parse_version(text)
    assert v == key and isinstance(v, Version)
    assert (v.major, v.minor, v.patch) == key and v.major_minor == key[:2]


def test_keys_order_numerically_not_as_text():
    # "0.10.1" < "0.9.2" as strings; as releases 0.10 is the newer
    assert parse_version("0.10.1") > parse_version("0.9.2")
    assert parse_version("4.100") > parse_version("4.46.3")
    assert parse_version("0.6.3.post1") == parse_version("0.6.3") == (0, 6, 3)


def test_dev_build_number():
    assert dev_build("2.9.0.dev20250811+rocm6.4") == 20250811
    assert dev_build("0.5.4.dev0") == 0
    assert dev_build("2.9.0") is None and dev_build("2.9.0rc1") is None
    assert dev_build(None) is None and dev_build(UNKNOWN) is None


def test_unknown_is_not_stated_only_where_allowed():
    assert known_version(None) is None and known_version("unknown") is None
    assert known_version("4.46.3") == (4, 46, 3)
    with pytest.raises(VersionError):
        parse_version("unknown")


@pytest.mark.parametrize("text", ["4.46foo", "2.x", "", "4", "latest", " 0.6.3", "0.6.3 (V0)", "2.11.0RC1"])
def test_bad_strings_name_field_value_form_and_example(text):
    with pytest.raises(VersionError) as err:
        parse_version(text, "infer.torch_version", "2.11.0+cu130")
    e = err.value
    assert isinstance(e, InputError)
    assert e.message == (f"infer.torch_version '{text}': is not a version number. Fix: write it as MAJOR.MINOR[.PATCH] "
                         "with an optional suffix (rc1, .post1, .dev20250801, +cu130), e.g. 2.11.0+cu130.")


def test_full_release_needs_the_patch():
    assert parse_version("0.5.4", full=True) == (0, 5, 4)
    assert parse_version("v0.6.3.post1", full=True) == (0, 6, 3)
    with pytest.raises(VersionError) as err:
        parse_version("0.5", "infer.vllm_v0_release", "0.6.3", full=True)
    assert err.value.message == ("infer.vllm_v0_release '0.5': is not a release number. Fix: write it as "
                                 "MAJOR.MINOR.PATCH with an optional suffix (rc1, .post1, .dev20250801, +cu130), "
                                 "e.g. 0.6.3.")


def test_a_pasted_blob_is_echoed_as_an_excerpt():
    with pytest.raises(VersionError) as err:
        parse_version("x" * 500)
    assert "x" * 60 + "…'" in err.value.message and "x" * 61 not in err.value.message


def _infer(**infer):
    return {"model": "llama-3-8b", "task": "infer", "hardware": {"gpu": "h100-sxm"}, "infer": infer}


@pytest.mark.parametrize("field, value", [
    ("torch_version", "2.9.0.dev20250811+rocm6.4"), ("torch_version", "unknown"),
    ("transformers_version", "4.46"), ("transformers_version", "4.35.2"),
])
def test_scenario_fields_take_the_grammar(field, value):
    # the field's JSON Schema pattern (pydantic's regex engine) and parse_version accept the same strings
    s = scenario_from_dict(_infer(engine="hf", **{field: value}), "t")
    assert getattr(s.infer, field) == value


@pytest.mark.parametrize("infer, line", [
    ({"engine": "hf", "transformers_version": "4.46foo"},
     "'infer.transformers_version' is '4.46foo', not a version number: write it as MAJOR.MINOR[.PATCH] with an "
     "optional suffix (rc1, .post1, .dev20250801, +cu130), or unknown, e.g. 4.46.3"),
    ({"engine": "vllm", "vllm_v0": True, "vllm_v0_release": "0.5.x"},
     "'infer.vllm_v0_release' is '0.5.x', not a release number: write it as MAJOR.MINOR.PATCH with an optional "
     "suffix (rc1, .post1, .dev20250801, +cu130), e.g. 0.6.3"),
])
def test_scenario_names_field_value_form_and_example(infer, line):
    with pytest.raises(InputError) as err:
        scenario_from_dict(_infer(**infer), "t")
    assert line in err.value.message and "pattern" not in err.value.message


def test_train_torch_version_error():
    with pytest.raises(InputError) as err:
        scenario_from_dict({"model": "llama-3-8b", "task": "finetune", "hardware": {"gpu": "h100-sxm"},
                            "train": {"torch_version": "two"}}, "t")
    assert "'train.torch_version' is 'two', not a version number" in err.value.message
    assert "e.g. 2.11.0+cu130" in err.value.message


def test_vllm_release_suffixes_price_as_their_release():
    from gpuplan.estimate import engine_host as eh
    s = scenario_from_dict(_infer(engine="vllm", vllm_v0=True, vllm_v0_release="v0.5.4.post1"), "t")
    assert s.infer.vllm_v0_release == "v0.5.4.post1"
    assert eh.release_key("v0.5.4.post1") == (0, 5, 4)
    assert eh.timed_release("v0.5.4.post1") == "0.5.4" and eh.timed_release("0.6.3.post1") == "0.6.3"


def test_every_caller_reads_through_the_one_parser():
    from gpuplan.estimate.attention_kernels import bundles_aotriton_010b, torch_minor
    from gpuplan.estimate.host_issue import hf_decode_version_scale, transformers_minor
    assert torch_minor("2.11.0rc1") == (2, 11)                   # a release candidate runs its release's code
    assert transformers_minor("4.35.2") == transformers_minor("4.35") == (4, 35)
    assert hf_decode_version_scale("4.35.2+local", True) == hf_decode_version_scale("4.35", True) != 1.0
    assert bundles_aotriton_010b("2.9.0.dev20250828+rocm6.4") and not bundles_aotriton_010b("2.9.0+rocm6.4")
