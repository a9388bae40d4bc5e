"""Fake tensors that carry the values the harness chose (trace/_known.py): a model that reads a value to pick a
shape traces when the value follows from the harness's inputs or the code's own constants, stays a memory trace
(the same bytes as a value-less fake run and as a real CPU run), and fails clearly when the value comes from the
weights."""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from torch._subclasses.fake_tensor import (  # noqa: E402
    DataDependentOutputException, DynamicOutputShapeException, FakeTensorMode)

from gpuplan.errors import UnsupportedError  # noqa: E402
from gpuplan.models import get_model  # noqa: E402
from gpuplan.scenario import scenario_from_dict  # noqa: E402
from gpuplan.trace import trace  # noqa: E402
from gpuplan.trace._known import KnownValuesMode, harness_tokens  # noqa: E402
from gpuplan.trace._run import run_trace  # noqa: E402
from gpuplan.trace._tracker import AllocTracker  # noqa: E402


def test_values_fixed_before_the_run_are_answered():
    with KnownValuesMode():
        ids = harness_tokens(50, (2, 8))
        assert 0 <= int(ids.max().item()) < 50
        assert (3 * torch.ones(2)).tolist() == [3.0, 3.0]                    # a factory's values are known
        mask = torch.arange(8)[None, :].expand(2, 8) < 5                     # 5 visible positions per row
        assert tuple(torch.randn(2, 8, 4)[mask].shape) == (10, 4)
        starts = torch.zeros(2, 8, dtype=torch.long)
        assert starts[0].unique().tolist() == [0]


def test_values_computed_from_weights_stay_unknown():
    with KnownValuesMode():
        w = torch.randn(6, 4)                   # stands for a weight: random, its values unknown
        with pytest.raises(DynamicOutputShapeException):
            (w.sum(1) > 0).nonzero()
        with pytest.raises(DataDependentOutputException):
            w.sum().item()


def test_a_plain_fake_mode_cannot_answer_what_the_known_mode_does():
    with FakeTensorMode(allow_non_fake_inputs=True):
        ids = torch.randint(0, 50, (2, 8))
        with pytest.raises(DataDependentOutputException):
            ids.max().item()


def _bytes(mode):
    """Peak bytes of an embedding lookup and a mask built from the ids (no value read)."""
    tracker = AllocTracker(round_to=512)
    with mode, tracker:
        ids = harness_tokens(50, (2, 64))
        tracker.register(ids, "inputs")
        emb = torch.randn(50, 32, dtype=torch.bfloat16)
        h = emb[ids] * (ids != 3).unsqueeze(-1)
        del h
    return tracker.peak


def test_carried_values_do_not_change_the_count():
    # the real values live beside the fake tensors: the traced bytes are those of a value-less fake run
    assert _bytes(KnownValuesMode()) == _bytes(FakeTensorMode(allow_non_fake_inputs=True)) > 0


# XLM checks `lengths.max().item() <= slen`, lengths counted from input_ids != pad_index (modeling_xlm.py
# XLMModel.forward, transformers 5.25): a value-less fake run stops there
TINY_XLM = {"model_type": "xlm", "emb_dim": 64, "n_layers": 1, "n_heads": 4, "vocab_size": 100,
            "max_position_embeddings": 64}


def _xlm_scenario(task):
    body = ({"train": {"precision": "bf16", "master_weights": False, "seq_len": 32, "micro_batch": 2,
                       "optimizer": "adamw", "recompute": "none"}} if task == "train"
            else {"infer": {"engine": "hf", "prompt_len": 32, "output_len": 1, "concurrency": 2}})
    return scenario_from_dict({"model": dict(TINY_XLM), "task": task, "hardware": {"gpu": "h100-sxm"}, **body})


def test_value_reading_model_fails_on_plain_fake_tensors():
    s = _xlm_scenario("train")
    with pytest.raises(DataDependentOutputException):
        run_trace(s, get_model(s.model), iterations=1, decode_steps=0, known=False)


@pytest.mark.parametrize("task", ["train", "infer"])
def test_known_value_trace_equals_real_cpu_run_byte_for_byte(task):
    s = _xlm_scenario(task)
    torch.manual_seed(0)
    fake = run_trace(s, get_model(s.model), iterations=2, decode_steps=1, known=True)
    real = run_trace(s, get_model(s.model), iterations=2, decode_steps=1, fake=False)
    assert fake.peak_bytes == real.peak_bytes
    assert fake.components == real.components
    assert fake.phases == real.phases


def test_trace_retries_with_known_values_and_says_so():
    r = trace(_xlm_scenario("train"), iterations=1)
    assert r.peak_bytes > 0
    assert any("carry the values" in n for n in r.method_notes)


TINY_JETMOE = {"model_type": "jetmoe", "hidden_size": 64, "num_hidden_layers": 1, "num_key_value_heads": 2,
               "kv_channels": 16, "intermediate_size": 64, "num_local_experts": 4, "num_experts_per_tok": 2,
               "vocab_size": 100, "max_position_embeddings": 64}


def test_router_split_sizes_take_the_balanced_assignment_and_match_a_real_run():
    # JetMoE's router turns top-k choices into per-expert split sizes with .tolist() (modeling_jetmoe.py): the
    # values come from the weights; the known-value trace gives the top-k indices the balanced assignment. The
    # pieces add up to tokens x k rows whatever the routing: a real CPU run with its own (random) routing
    # allocates the same bytes up to the pieces' rounding to 512-byte blocks
    s = scenario_from_dict({"model": dict(TINY_JETMOE), "task": "train", "hardware": {"gpu": "h100-sxm"},
                            "train": {"precision": "bf16", "master_weights": False, "seq_len": 16,
                                      "optimizer": "adamw", "recompute": "none"}})
    with pytest.raises(DataDependentOutputException):
        run_trace(s, get_model(s.model), iterations=1, decode_steps=0, known=False)
    torch.manual_seed(0)
    fake = run_trace(s, get_model(s.model), iterations=1, decode_steps=0, known=True)
    real = run_trace(s, get_model(s.model), iterations=1, decode_steps=0, fake=False)
    # 8 experts' pieces per layer (4 MLP + 4 attention, twice each way), each at most one 512-byte block apart
    assert abs(fake.peak_bytes - real.peak_bytes) <= 16 * 512, (fake.peak_bytes, real.peak_bytes)


def test_values_too_large_to_keep_are_let_go_and_said_so(monkeypatch):
    from gpuplan.trace import _known
    monkeypatch.setattr(_known, "KNOWN_NUMEL", 8)
    with KnownValuesMode() as mode:
        ids = harness_tokens(50, (2, 8))                 # 16 elements: more than the 8 kept
        mask = ids != 3
        with pytest.raises(DataDependentOutputException):
            mask.sum().item()
    assert mode.dropped_large
