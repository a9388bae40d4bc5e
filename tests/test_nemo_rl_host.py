"""NeMo RL v0.3.0's host work around the training and log-prob passes (rl.host_loop; estimate/nemo_rl_host.py;
docs/posttrain.md, *NeMo RL's host work around the passes, timed in its code*): the constants against the timings and
counts they were read from (scripts/bench_nemo_rl_host.py on NeMo RL b1c86a8's own functions), the syncs a sequence
read off the code, the rule that prices them, and the rows that carry it. Expected values are the measured figures,
counts from the code, or worked by hand."""
import csv
from pathlib import Path

import pytest

from gpuplan import api
from gpuplan.errors import GpuplanError
from gpuplan.estimate import nemo_rl_host as nh
from gpuplan.estimate import rl as rlm
from gpuplan.scenario import scenario_from_dict
from script_module import load_script

vg = load_script("scripts/validate_gathered.py")

# the bench's slopes (best of 100, us; kernels and syncs counted), pad factor 1: (cpu us a sequence, cpu us a
# micro-batch, kernels a sequence, kernels a micro-batch, syncs a sequence, syncs a micro-batch)
TIMED = {"train_to": (0.1, 6.3, 0, 8, 0, 0), "train_pack": (5.6, 26.9, 0, 4, 1, 1),
         "train_loss_outside": (131.7, 26.4, 78 - 61, 2, 18, 0),
         "lp_fetch": (0.8, 15.9, 0, 0, 0, 0), "lp_to": (0.3, 5.7, 0, 6, 0, 0), "lp_pack": (8.1, 42.5, 0, 5, 1, 1),
         "lp_collect_outside": (19.4, 31.8, 3, 19 - 18 + 1, 4, 0)}   # + torch.tensor(0.0)'s copy on a GPU


def test_syncs_a_sequence_are_the_codes():
    # SequencePackingLossWrapper (loss_functions.py L658-691 @b1c86a8): seq_starts[i].item(), seq_ends[i].item(),
    # v[:, :unpadded_seq_lengths[i]] on the 6 two-dimensional keys of GRPO's train data (input_ids, advantages,
    # generation_logprobs, token_mask, prev_logprobs, reference_policy_logprobs), the logits' slice bound;
    # ClippedPGLossFn (L112-301): mult_prob_error, probs_ratio, probs_ratio_clamped, loss, `if kl`, kl,
    # sampling_importance_ratio, num_valid_samples, approx_entropy
    wrapper, loss_fn = 2 + 6 + 1, 9
    assert TIMED["train_loss_outside"][4] == wrapper + loss_fn == 18
    # each sync is a device-to-host copy a GPU launches: the constant's device ops are its kernels + syncs
    t = TIMED["train_loss_outside"]
    assert nh.TRAIN_LOSS.ops_seq == t[2] + t[4] and nh.TRAIN_LOSS.ops_mb == t[3] + t[5]
    # the packed log-prob function: two .item() a sequence before DistributedLogprob and two after (model_utils.py
    # L296-298, L346-348)
    assert TIMED["lp_collect_outside"][4] == 4
    c = TIMED["lp_collect_outside"]
    assert nh.LOGPROB_COLLECT.ops_seq == c[2] + c[4] and nh.LOGPROB_COLLECT.ops_mb == c[3] + c[5]


@pytest.mark.parametrize("part,name", [(nh.TRAIN_TO, "train_to"), (nh.TRAIN_PACK, "train_pack"),
                                       (nh.TRAIN_LOSS, "train_loss_outside"), (nh.LOGPROB_FETCH, "lp_fetch"),
                                       (nh.LOGPROB_TO, "lp_to"), (nh.LOGPROB_PACK, "lp_pack"),
                                       (nh.LOGPROB_COLLECT, "lp_collect_outside")])
def test_constants_are_the_timed_slopes(part, name):
    t = TIMED[name]
    assert part.cpu_mb_s * 1e6 == pytest.approx(t[1], abs=0.05)
    assert part.cpu_seq_s * 1e6 == pytest.approx(t[0], abs=0.35)   # the copies' per-row slope of 0.1-0.3 us dropped
    assert part.ops_seq == t[2] + t[4] and part.ops_mb == t[3] + t[5]


def test_training_micro_batch_by_hand():
    # 5 sequences a pack (NB01), pad factor 1, reference host, 3.53 us a launch (18.33 - 14.8, host_issue.py)
    launch = 3.53e-6
    cpu = 6.3 + (5.6 * 5 + 26.9) + (131.7 * 5 + 26.4)
    ops = 8 + (1 * 5 + 5) + (35 * 5 + 2)
    assert nh.train_micro_batch_s(5, False, 1.0, launch) == pytest.approx(cpu * 1e-6 + ops * launch, rel=1e-9)
    # a host half as fast doubles the CPU part, not the launch (given separately, already scaled)
    assert nh.train_micro_batch_s(5, False, 0.5, launch) == pytest.approx(2 * cpu * 1e-6 + ops * launch, rel=1e-9)


def test_logprob_micro_batch_by_hand():
    launch = 3.53e-6
    cpu = (0.8 * 18 + 15.9) + 5.7 + (8.1 * 18 + 42.5) + (19.4 * 18 + 31.8)
    ops = 6 + (18 + 6) + (7 * 18 + 2)
    assert nh.logprob_micro_batch_s(18, False, 1.0, launch) == pytest.approx(cpu * 1e-6 + ops * launch, rel=1e-9)


def test_driver_is_the_timed_shape_scaled_by_its_tokens():
    # the lowest timed runs at 2,048 x 4,096: train shard 245 ms, log-prob shard 198 + gather 14 ms (06beed91: 235,
    # 191 + 15)
    assert nh.driver_s("train", 2048, 4096, 1.0) == pytest.approx(0.245)
    assert nh.driver_s("logprob", 2048, 4096, 1.0) == pytest.approx(0.198 + 0.014)
    assert nh.driver_s("train", 1024, 4096, 1.0) == pytest.approx(0.245 / 2)
    assert nh.driver_s("logprob", 2048, 2048, 0.5) == pytest.approx(0.212)
    assert nh.driver_s("train", 2048, 4096, 1.0, "nemo-rl-0.4") == pytest.approx(0.235)
    assert nh.driver_s("logprob", 2048, 4096, 1.0, "nemo-rl-0.4") == pytest.approx(0.191 + 0.015)


def test_v04_loss_syncs_a_sequence_are_the_codes():
    # 06beed91: the same wrapper (loss_functions.py L832-900) and ClippedPGLossFn (L144-438) with three more metrics
    # read before the logits (gen_kl_error, policy_kl_error, js_divergence_error): 9 + 12 = 21 syncs a sequence; the
    # bench counted 118 kernels a sequence, 62 of them in the segment beside the logits' kernels
    assert nh.TRAIN_LOSS_04.ops_seq == (118 - 62) + (2 + 6 + 1) + 12
    assert nh.TRAIN_LOSS_04.cpu_seq_s * 1e6 == pytest.approx(218.4)
    # the packing and the log-prob collection are the same code as v0.3.0's: the same counts
    for a, b in ((nh.TRAIN_PACK_04, nh.TRAIN_PACK), (nh.TRAIN_PACK_PADDED_04, nh.TRAIN_PACK_PADDED),
                 (nh.LOGPROB_PACK_04, nh.LOGPROB_PACK), (nh.LOGPROB_PACK_PADDED_04, nh.LOGPROB_PACK_PADDED),
                 (nh.LOGPROB_COLLECT_04, nh.LOGPROB_COLLECT), (nh.TRAIN_TO_04, nh.TRAIN_TO)):
        assert (a.ops_seq, a.ops_mb) == (b.ops_seq, b.ops_mb)


def _rows():
    with (Path(__file__).resolve().parents[1] / "validation/gathered/posttrain.csv").open(
            newline="", encoding="utf-8") as fh:
        return {r["id"]: r for r in csv.DictReader(fh)}


def test_rows_carry_the_host_loop_their_code_ran():
    rows = _rows()
    for rid, r in rows.items():
        packed = r["framework"] == "nemo-rl" and r["packing"] == "true" and not r["notes"].startswith("unscored:")
        want = f"nemo-rl-{r['framework_version'][:3]}" if packed else ""
        assert r["host_loop"] == want, rid      # NB04 ran dynamic batching (not timed), verl is not NeMo RL


def _nb01() -> dict:
    return vg.posttrain_scenario(_rows()["NB01"])


def test_nb01_adds_the_driver_and_its_micro_batches_by_hand():
    d = _nb01()
    on = api.estimate(d).performance
    d["train"]["rl"]["host_loop"] = "none"
    off = api.estimate(d).performance
    scn = scenario_from_dict(_nb01(), "NB01")
    h = on.details["host_loop_s"]
    # the phases grow by exactly the host seconds, nothing else moves
    assert on.details["phases_s"]["actor_update"] - off.details["phases_s"]["actor_update"] == pytest.approx(
        h["actor_update"])
    for ph in ("actor_logprob", "reference_logprob"):
        assert on.details["phases_s"][ph] - off.details["phases_s"][ph] == pytest.approx(h["per_logprob_pass"])
    assert on.details["phases_s"]["rollout"] == off.details["phases_s"]["rollout"]
    # by hand: 2,048 sequences, the batch as wide as the prompt + the longest response; the slowest rank's packs
    width = h["width"]
    assert 132 < width <= 4096
    assert h["driver_train"] == pytest.approx(0.245 * 2048 * width / (2048 * 4096))
    train, lp = rlm.packed_training_scenario(scn), rlm.logprob_scenario(scn)
    packs = train.train.global_batch / (train.train.micro_batch * train.dp)
    per_mb = nh.train_micro_batch_s(train.train.micro_batch, False, 1.0, 0.77e-3 / 42 - 14.8e-6)
    assert h["worker_train"] == pytest.approx(4 * packs * per_mb, rel=1e-6)    # 4 optimizer steps (2,048 / 512)
    lp_packs = lp.train.global_batch / (lp.train.micro_batch * lp.dp)
    assert h["worker_logprob"] == pytest.approx(
        lp_packs * nh.logprob_micro_batch_s(lp.train.micro_batch, False, 1.0, 0.77e-3 / 42 - 14.8e-6), rel=1e-6)
    assert h["launch_s"] == pytest.approx(0.77e-3 / 42 - 14.8e-6)


def test_dtensor_trainer_pays_the_driver_only():
    h = api.estimate(vg.posttrain_scenario(_rows()["NB02"])).performance.details["host_loop_s"]
    assert h["worker_train"] == h["worker_logprob"] == 0.0
    assert h["actor_update"] == h["driver_train"] > 0


def test_pipeline_or_tp_packs_take_the_padded_path():
    # NB05: Megatron TP 4 PP 2, one sequence a pack: pad factor tp and a fixed pack length
    scn = scenario_from_dict(vg.posttrain_scenario(_rows()["NB05"]), "NB05")
    h = api.estimate(vg.posttrain_scenario(_rows()["NB05"])).performance.details["host_loop_s"]
    train = rlm.packed_training_scenario(scn)
    packs = train.train.global_batch / (train.train.micro_batch * train.dp)
    assert h["worker_train"] == pytest.approx(
        4 * packs * nh.train_micro_batch_s(train.train.micro_batch, True, 1.0, 0.77e-3 / 42 - 14.8e-6), rel=1e-6)


def test_host_loop_needs_packing():
    d = vg.posttrain_scenario(_rows()["NB04"])          # dynamic batching
    d["train"]["rl"]["host_loop"] = "nemo-rl-0.3"
    with pytest.raises(GpuplanError, match="host_loop"):
        api.estimate(d)


def test_host_loop_none_adds_nothing():
    d = _nb01()
    d["train"]["rl"]["host_loop"] = "none"
    h = api.estimate(d).performance.details["host_loop_s"]
    assert h["actor_update"] == h["per_logprob_pass"] == 0.0


def test_v04_rows_price_the_v04_code():
    # NR01: NeMo RL 06beed91, Megatron PP 2 (a fixed pack length: the padded packer path)
    d = vg.posttrain_scenario(_rows()["NR01"])
    assert d["train"]["rl"]["host_loop"] == "nemo-rl-0.4"
    h = api.estimate(d).performance.details["host_loop_s"]
    scn = scenario_from_dict(d, "NR01")
    train = rlm.packed_training_scenario(scn)
    packs = train.train.global_batch / (train.train.micro_batch * train.dp)
    k = rlm.optimizer_steps(scn)
    assert h["worker_train"] == pytest.approx(
        k * packs * nh.train_micro_batch_s(train.train.micro_batch, True, 1.0, 0.77e-3 / 42 - 14.8e-6, "nemo-rl-0.4"), rel=1e-6)
    assert h["driver_train"] == pytest.approx(0.235 * 2048 * h["width"] / (2048 * 4096))
