"""scripts/validate_gathered.py: how a gathered batched-throughput row is read (hand arithmetic)."""
from __future__ import annotations

import csv
import re
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import validate_gathered as vg  # noqa: E402
from gpuplan import api  # noqa: E402


def _row(kind: str, value: str = "1000") -> dict:
    return {"prompt_len": "300", "output_len": "100", "throughput_tokens_per_s": value, "throughput_kind": kind}


def test_output_rows_compare_output_tokens():
    perf = SimpleNamespace(output_tokens_per_s=250.0)
    assert vg.throughput_pair(_row("output"), perf) == (250.0, 1000.0)


def test_total_rows_add_the_prompt_tokens():
    # 250 output tok/s of 100-token answers to 300-token prompts: 250 x (300 + 100) / 100 = 1000 tok/s in all
    perf = SimpleNamespace(output_tokens_per_s=250.0)
    assert vg.throughput_pair(_row("total"), perf) == (1000.0, 1000.0)


def test_unstated_rows_stay_out_of_the_summary():
    assert vg.throughput_pair(_row("unstated"), SimpleNamespace(output_tokens_per_s=1.0)) is None


def test_scenario_carries_tp_and_the_stated_cap():
    row = {"model": "llama-3.1-405b", "gpu": "mi300x", "gpus": "8", "engine": "vllm", "weights": "fp8",
           "kv_cache": "fp8", "prompt_len": "128", "output_len": "2048", "concurrency": "1500", "tp": "8",
           "max_num_seqs": "1500"}
    scn = vg.serve_scenario(row)
    assert scn["parallel"] == {"tp": 8} and scn["infer"]["max_num_seqs"] == 1500


def test_gathered_throughput_rows_are_complete():
    """Every batched-throughput row names its source and settings and gives a positive rate of a known kind."""
    with (ROOT / "validation" / "gathered" / "serve.csv").open(newline="", encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if r["throughput_tokens_per_s"]]
    assert len(rows) >= 20
    for r in rows:
        assert r["source_url"].startswith("https://") and r["retrieved"], r["id"]
        assert r["throughput_kind"] in ("output", "total", "unstated"), r["id"]
        assert float(r["throughput_tokens_per_s"]) > 0 and int(r["concurrency"]) >= 1, r["id"]
        assert r["engine"] in ("vllm", "sglang", "trtllm"), r["id"]


def test_per_token_decode_rows_are_scored_against_the_decode_step():
    """bitsandbytes' tables time the interval between consecutive decode steps (optimum-benchmark's per-token
    latency): no prefill in it, so those rows compare with gpuplan's decode step; optimum's GPTQ rows divide the
    whole generate() by the new tokens and compare with the TPOT."""
    with (ROOT / "validation" / "gathered" / "serve.csv").open(newline="", encoding="utf-8") as fh:
        rows = {r["id"]: r for r in csv.DictReader(fh)}
    bnb = [r for r in rows.values() if r["id"].startswith("BNB")]
    assert len(bnb) == 63 and all(r["tpot_measures"] == "decode_step" for r in bnb)
    assert all(r["tpot_measures"] == "" for r in rows.values() if r["id"].startswith("OPT"))
    row = next(r for r in bnb if int(r["concurrency"]) > 1)
    perf = api.estimate(vg.serve_scenario(row)).performance
    assert perf.tpot_s > perf.breakdown["decode_step"]          # the batch's prefill share is in the TPOT
    assert vg.tpot_pair(row, perf) == (perf.breakdown["decode_step"], float(row["tpot_s"]))
    assert vg.tpot_pair({**row, "tpot_measures": ""}, perf)[0] == perf.tpot_s


# ---- post-training rows (validation/gathered/posttrain.csv) -----------------------------------------------
def _posttrain_rows() -> list[dict]:
    with (ROOT / "validation" / "gathered" / "posttrain.csv").open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_posttrain_rows_are_complete():
    rows = _posttrain_rows()
    assert len(rows) >= 10
    for r in rows:
        # a repository pinned to a commit, or a dated page
        pinned = r["source_url"].startswith("https://github.com/") and "/blob/" in r["source_url"]
        assert r["source_url"].startswith("https://") and (pinned or r["published"][:2] == "20"), r["id"]
        assert r["retrieved"] and r["framework"] and r["framework_version"], r["id"]
        assert float(r["step_time_s"]) > 0 and r["placement"] in ("colocated", "split"), r["id"]
        scored = not r["notes"].startswith(vg.UNSCORED)
        if scored:   # a scored row states every setting its scenario reads
            for col in ("gpu_memory_utilization", "rollout_tp", "train_tp", "train_pp", "train_ep", "prompt_len",
                        "mean_response_len", "max_seq_len", "recompute", "packing", "offload_train_states"):
                assert r[col], (r["id"], col)


def test_posttrain_prompt_length_is_the_tables_tokens_less_the_response():
    """NR01: 1,562 tokens/s/GPU x 97.7 s x 16 GPUs / 2,048 sequences = 1,192.3 tokens per sequence; less the
    mean response of 1,060 leaves a 132-token prompt."""
    r = {x["id"]: x for x in _posttrain_rows()}["NR01"]
    assert int(r["prompt_len"]) == 132 and int(r["mean_response_len"]) == 1060


def test_posttrain_scenario_reads_the_stated_settings():
    r = {x["id"]: x for x in _posttrain_rows()}["NR02"]
    scn = vg.posttrain_scenario(r)
    rl = scn["train"]["rl"]
    # 4,096-token vLLM max_model_len less the 130-token prompt
    assert rl["max_new_tokens"] == 4096 - 130 and rl["mean_response_len"] == 1129
    assert (rl["placement"], rl["rollout_gpus"], rl["async_steps"], rl["packing"]) == ("split", 8, 1, True)
    assert rl["prompts_per_step"] * rl["group_size"] == 2048 and rl["gpu_memory_utilization"] == 0.8
    assert scn["parallel"]["pp"] == 2 and scn["hardware"]["count"] == 16


def test_posttrain_rows_name_their_training_backend():
    """A Megatron row runs gpuplan's Megatron profile; NeMo RL's DTensor worker (FSDP2 fully_shard, fp32
    reduce-scatter) the FSDP2 one; NB02 is that worker on 8 GPUs, fully sharded, and the DeepSeek-V3 split row
    (NR04) trains on the 256 GPUs its recipe does not give to generation."""
    rows = {x["id"]: x for x in _posttrain_rows()}
    assert vg.posttrain_scenario(rows["NB01"])["framework"] == "megatron"
    nb02 = vg.posttrain_scenario(rows["NB02"])
    assert nb02["framework"] == "torchtitan" and nb02["parallel"]["zero"] == 3
    assert "grad_reduce_dtype" not in nb02["train"]
    nr04 = vg.posttrain_scenario(rows["NR04"])["train"]["rl"]
    assert (nr04["rollout_gpus"], nr04["prompts_per_step"], nr04["group_size"]) == (256, 32, 16)
    assert {r["train_backend"] for r in rows.values()} <= set(vg.TRAIN_BACKENDS)


def test_phase_pairs_sum_the_phases_a_source_phase_covers():
    """NeMo RL's 'get logprobs' covers gpuplan's old-policy and reference passes (4 + 5 = 9 s); 'refit' the
    weight transfer and the states' offload (0.5 + 1.5 = 2 s); a phase the row leaves empty is not compared."""
    row = {"logprob_time_s": "18", "refit_time_s": "5", "generation_time_s": "", "train_time_s": "28"}
    phases = {"rollout": 40.0, "actor_logprob": 4.0, "reference_logprob": 5.0, "actor_update": 20.0,
              "weight_sync": 0.5, "state_offload": 1.5}
    assert vg.phase_pairs(row, phases) == {"train_time_s": (20.0, 28.0), "logprob_time_s": (9.0, 18.0),
                                           "refit_time_s": (2.0, 5.0)}


def test_posttrain_blog_phases_add_up_to_about_the_step():
    """The v0.3 blog's phases (training + refit + generation + logprobs) stay within the stated step time
    (the rest is reward, data and bookkeeping): NB01 28 + 5 + 58 + 18 = 109 <= 112 s. A source whose timers hold
    the refit inside another phase (verl: in `gen`) leaves refit_time_s empty: VL01 27.2 + 54.1 + 13.8 = 95.1 <=
    96.1 s."""
    for r in _posttrain_rows():
        if r["train_time_s"]:
            parts = sum(float(r[c]) for c in ("train_time_s", "refit_time_s", "generation_time_s", "logprob_time_s")
                        if r[c])
            assert 0.85 * float(r["step_time_s"]) <= parts <= float(r["step_time_s"]), r["id"]



def test_verl_micro_batches_of_sequences_become_token_capacity():
    """verl with use_remove_padding and without use_dynamic_bsz splits micro-batches by sequence count and then
    strips the padding; gpuplan packs up to micro_batch x (prompt + max_new_tokens) tokens. VL01: 80 sequences of
    82 + 174 = 256 tokens = 20,480 tokens = 18.5 padded 1,106-token sequences -> 19; the log-prob passes' 110
    sequences: 28,160 tokens / 1,106 = 25.46 -> 25. A row in padded units passes through."""
    rows = {x["id"]: x for x in _posttrain_rows()}
    scn = vg.posttrain_scenario(rows["VL01"])
    assert scn["train"]["micro_batch"] == 19 and scn["train"]["rl"]["logprob_micro_batch"] == 25
    assert scn["train"]["rl"]["max_new_tokens"] == 1024 and scn["train"]["rl"]["mini_batch"] == 1280
    assert vg.posttrain_scenario(rows["NR02"])["train"]["micro_batch"] == 1


def test_verl_rows_take_the_fsdp_profile_and_the_stated_engine():
    """verl's FSDP workers (FULL_SHARD over the 8 GPUs) run gpuplan's FSDP2 profile; vLLM 0.6.3 predates async
    scheduling; the reference's parameters live on the host (ref param_offload); PPO keeps its critic default."""
    rows = {x["id"]: x for x in _posttrain_rows()}
    grpo, ppo = vg.posttrain_scenario(rows["VL01"]), vg.posttrain_scenario(rows["VL02"])
    assert grpo["framework"] == "torchtitan" and grpo["parallel"]["zero"] == 3 and grpo["hardware"]["gpu"] == "mi300x"
    rl = grpo["train"]["rl"]
    assert (rl["rollout_tp"], rl["gpu_memory_utilization"], rl["engine_async_scheduling"]) == (2, 0.6, False)
    # verl @44a65f9 ppo_trainer.yaml: rollout enforce_eager True (required with free_cache_engine)
    assert rl["engine_cuda_graphs"] is False and ppo["train"]["rl"]["engine_cuda_graphs"] is False
    assert rl["reference_on_host"] is True and rl["packing"] is True and rl["prompts_per_step"] * rl["group_size"] == 5120
    assert ppo["train"]["objective"] == "ppo" and ppo["train"]["rl"]["group_size"] == 1
    assert "critic" not in ppo["train"]["rl"] and ppo["train"]["rl"]["rollout_tp"] == 4


def test_verl_timers_hold_the_weight_transfer_in_generation():
    """verl's `gen` timer wraps the rollout sharding manager, which loads the weights into the engine and frees
    them after: generation = rollout + weight sync + the engine's sleep/wake (40 + 0.5 + 0.2 + 0.3 = 41 s);
    `old_log_prob` + `ref` + `values` = 4 + 5 + 3 = 12 s; `update_actor` + `update_critic` = 20 + 6 = 26 s."""
    row = {"framework": "verl", "generation_time_s": "50", "logprob_time_s": "13", "train_time_s": "30", "refit_time_s": ""}
    phases = {"rollout": 40.0, "weight_sync": 0.5, "engine_sleep": 0.2, "engine_wake": 0.3, "actor_logprob": 4.0,
              "reference_logprob": 5.0, "critic_values": 3.0, "actor_update": 20.0, "critic_update": 6.0}
    assert vg.phase_pairs(row, phases) == {"generation_time_s": (41.0, 50.0), "logprob_time_s": (12.0, 13.0),
                                           "train_time_s": (26.0, 30.0)}


def test_posttrain_scored_rows_come_from_more_than_one_framework():
    """Leave-one-source-out needs scored rows from more than one source family (issue 20)."""
    scored = [r for r in _posttrain_rows() if not r["notes"].startswith(vg.UNSCORED)]
    assert {r["framework"] for r in scored} >= {"nemo-rl", "verl"}

# ---- LoRA/QLoRA fine-tuning peak memory (validation/gathered/finetune-memory.csv) --------------------------------
FT_CSV = ROOT / "validation" / "gathered" / "finetune-memory.csv"


def _ft_rows() -> list[dict]:
    with FT_CSV.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _fake_estimate(peak_gib: float, overhead_gib: float) -> SimpleNamespace:
    GiB = 2 ** 30
    return SimpleNamespace(memory=SimpleNamespace(peak_bytes_per_gpu=peak_gib * GiB,
                                                  components={"runtime_overhead": overhead_gib * GiB}))


def test_finetune_memory_is_compared_at_the_level_the_source_read():
    """A 10 GiB peak of which 1 GiB is runtime overhead: max allocated sees 9 GiB; max reserved sees all but the
    CUDA context (512 MiB) and, with 2 GPUs, NCCL's buffers (256 MiB): 10 - 768/1024 = 9.25 GiB; nvidia-smi
    sees the whole 10 GiB. A figure in GB is 1e9 bytes: 19.6 GB = 19.6e9 / 2^30 = 18.2539 GiB."""
    est = _fake_estimate(10.0, 1.0)
    row = {"id": "X", "gpus": "2", "memory": "5", "memory_unit": "GiB"}
    assert vg.memory_pair({**row, "memory_metric": "max allocated"}, est) == (9.0, 5.0)
    pred, _ = vg.memory_pair({**row, "memory_metric": "max reserved"}, est)
    assert abs(pred - 9.25) < 1e-9
    assert vg.memory_pair({**row, "memory_metric": "nvidia-smi"}, est)[0] == 10.0
    _, meas = vg.memory_pair({**row, "memory_metric": "nvidia-smi", "memory": "19.6", "memory_unit": "GB"}, est)
    assert abs(meas - 18.2539) < 1e-4


def test_finetune_scenario_reads_the_stated_settings():
    r = {x["id"]: x for x in _ft_rows()}["AA07"]
    scn = vg.finetune_scenario(r)
    t = scn["train"]
    assert scn["task"] == "finetune" and scn["parallel"] == {"zero": 3, "dp": 2, "offload": "none"}
    assert t["method"] == "qlora" and t["lora_rank"] == 64 and t["micro_batch"] == 4 and t["seq_len"] == 2048
    # fsdp_qlora's 'all' targets leave out o_proj (train.py @049515f)
    assert t["lora_targets"] == ["q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "down_proj"]
    assert t["held_logits"] == "fp32" and t["qlora_double_quant"] is True and t["recompute"] == "full"
    assert vg.finetune_scenario({**r, "lora_targets": "all-linear"})["train"]["lora_targets"] == "all-linear"


def test_finetune_memory_rows_are_complete():
    """Every row names a pinned source, the date read and what was measured; scored rows state every setting."""
    rows = _ft_rows()
    scored = [r for r in rows if not r["notes"].startswith(vg.UNSCORED)]
    assert len(scored) >= 15 and len({r["source"] for r in scored}) >= 3
    for r in rows:
        # a file pinned to a commit, or a pull-request thread (its comments are the source)
        pinned = "/blob/" in r["source_url"] or re.search(r"/pull/\d+$", r["source_url"])
        assert r["source_url"].startswith("https://github.com/") and pinned, r["id"]
        assert r["retrieved"][:2] == "20" and r["method"] in ("lora", "qlora", "full"), r["id"]
    for r in scored:
        assert r["memory_metric"] in ("max allocated", "max reserved", "nvidia-smi"), r["id"]
        assert r["memory_unit"] in ("GiB", "GB", "MiB") and float(r["memory"]) > 0, r["id"]
        lora = ("lora_rank", "lora_targets") if r["method"] != "full" else ()
        for col in ("model", "gpu", "gpus", "zero", "offload", *lora, "precision",
                    "optimizer", "micro_batch", "seq_len", "recompute", "attention", "held_logits"):
            assert r[col], (r["id"], col)


def test_finetune_rows_score_in_their_memory_category():
    from gpuplan.estimate.uncertainty import memory_category
    recs = [r for r in vg.score(FT_CSV) if "mem" in r]
    lora = [r for r in recs if r["method"] in ("lora", "qlora")]
    assert len(lora) >= 15 and all(r["method"] in ("lora", "qlora", "full") for r in recs)
    assert memory_category("finetune", lora[0]["method"], 3, 2, None) == "fine-tuning, LoRA/QLoRA"
    # a single-GPU full fine-tune (torchtune PR #961, TQ01) is an unsharded training peak
    assert memory_category("finetune", "full", 0, 1, None) == "training, unsharded or ZeRO-1/2"


def test_full_finetune_row_carries_torchtunes_low_memory_settings():
    """TQ01: 7B_full_low_memory.yaml @30c75d4a sets bitsandbytes.optim.PagedAdamW and optimizer_in_bwd True;
    the PR forces batch 4 x 2048 tokens; no LoRA fields reach the scenario."""
    r = {x["id"]: x for x in _ft_rows()}["TQ01"]
    t = vg.finetune_scenario(r)["train"]
    assert t["method"] == "full" and t["paged_optimizer"] is True and t["optimizer_in_backward"] is True
    assert t["micro_batch"] == 4 and t["seq_len"] == 2048 and t["master_weights"] is False
    assert "lora_rank" not in t and "lora_targets" not in t


def test_bnb_optimizer_rows_run_the_scripts_defaults():
    """BO01-04: optimizer_benchmark_comprehensive.py defaults (Qwen3-0.6B, fp32, batch 2 x 128) with each optimizer;
    its 'MB' is bytes / 1024**2 (fmt_mb): 11609.8 MB = 11609.8 / 1024 GiB."""
    rows = {x["id"]: x for x in _ft_rows()}
    opts = [vg.finetune_scenario(rows[f"BO0{i}"])["train"]["optimizer"] for i in range(1, 5)]
    assert opts == ["adamw", "adamw-8bit", "paged-adamw", "paged-adamw-8bit"]
    t = vg.finetune_scenario(rows["BO01"])["train"]
    assert t["precision"] == "fp32" and t["micro_batch"] == 2 and t["seq_len"] == 128 and t["recompute"] == "none"
    _, meas = vg.memory_pair(rows["BO01"], _fake_estimate(1.0, 0.0))
    assert abs(meas - 11609.8 / 1024) < 1e-9


def test_hf_generate_rows_compare_allocated_plus_what_lies_outside_torch():
    """optimum's OPT rows: 'Peak memory (MB)' = torch peak allocated + (nvidia-smi peak - torch peak reserved)
    (tests/benchmark/benchmark_gptq.py @11e71e26): a 10 GiB peak with 1 GiB overhead, of which 512 MiB is the
    CUDA context and 64 MiB the workspaces, leaves 10 - (1 - 0.5625) = 9.5625 GiB."""
    est = _fake_estimate(10.0, 1.0)
    row = {"id": "X", "gpus": "1", "memory": "1000", "memory_unit": "MB", "memory_metric": "allocated + outside torch"}
    pred, meas = vg.memory_pair(row, est)
    assert abs(pred - 9.5625) < 1e-9 and abs(meas - 1e9 / 2 ** 30) < 1e-12
    with (ROOT / "validation" / "gathered" / "serve.csv").open(newline="", encoding="utf-8") as fh:
        opt = [r for r in csv.DictReader(fh) if r["id"].startswith("OPT")]
    # the README's generate tables: 5 kernels x 5 batch sizes; OPT01 = fp16 batch 1, 29152.98 MB
    assert len(opt) == 25 and all(r["memory_unit"] == "MB" and float(r["memory"]) > 0 for r in opt)
    assert {r["id"]: r for r in opt}["OPT01"]["memory"] == "29152.98"


# ---- preference-tuning rows (validation/gathered/preference.csv) --------------------------------------------------
PREF_CSV = ROOT / "validation" / "gathered" / "preference.csv"


def _pref_rows() -> list[dict]:
    with PREF_CSV.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_preference_rows_are_complete():
    """Every row names its source, the date it was read and a measured value with its unit; a scored row states
    every setting its scenario reads and pins its recipe to a commit."""
    rows = _pref_rows()
    assert rows and len({r["id"] for r in rows}) == len(rows)
    for r in rows:
        pinned = r["source_url"].startswith("https://github.com/") and "/blob/" in r["source_url"]
        assert r["source_url"].startswith("https://") and (pinned or r["published"][:2] == "20"), r["id"]
        assert r["retrieved"][:2] == "20" and r["framework"] and r["framework_version"], r["id"]
        assert r["objective"] in vg.PREFERENCE_OBJECTIVES, r["id"]
        assert float(r["step_time_s"] or 0) > 0 or float(r["tokens_per_s_per_gpu"] or 0) > 0, r["id"]
        if r["notes"].startswith(vg.UNSCORED):
            assert len(r["notes"]) > len(vg.UNSCORED) + 10, r["id"]     # the reason is said
            continue
        for col in ("model", "method", "precision", "gpu", "gpus", "gpus_per_node", "train_tp", "train_pp", "train_cp",
                    "zero", "micro_batch", "grad_accum", "max_seq_len", "packing", "recompute", "compile",
                    "reference", "step_time_s"):
            assert r[col], (r["id"], col)
        assert r["train_backend"] in vg.PREFERENCE_BACKENDS, r["id"]
        assert re.search(r"/blob/[0-9a-f]{40}/", r["recipe"]), r["id"]


def test_preference_scenario_reads_the_stated_settings():
    """OI01 (open-instruct dpo.py, 16 H100, bs 16 pairs packed into one 16,384-token row per side and padded to it):
    one pair of 16,384-token sequences per GPU per micro-step, 16 ranks x 1 x no accumulation = 16 pairs per step,
    the reference's log-probs cached before training, FSDP2 over all 16 GPUs."""
    row = {x["id"]: x for x in _pref_rows()}["OI01"]
    scn = vg.preference_scenario(row)
    t = scn["train"]
    assert (t["objective"], t["seq_len"], t["micro_batch"], t["global_batch"]) == ("dpo", 16384, 1, 16)
    assert (t["reference"], t["recompute"], t["compile"]) == ("precomputed", "full", True)
    # concatenated_forward_olmo with packing joins chosen and rejected with torch.cat(dim=-1): one 32,768-token row
    assert t["pair_concat"] == "sequence"
    assert scn["framework"] == "torchtitan" and scn["parallel"]["zero"] == 3 and scn["parallel"]["dp"] == 16
    assert scn["hardware"] == {"gpu": "h100-sxm", "count": 16, "gpus_per_node": 8}


def test_preference_scenario_reads_the_document_length():
    """mean_document_len -> train.document_len; OI01 leaves it empty: open-instruct's OLMo-core forward at ee0c4608
    got no doc_lens (dpo_utils.concatenated_forward_olmo calls model(input_ids)), so attention spans the row."""
    row = {x["id"]: x for x in _pref_rows()}["OI01"]
    assert row["mean_document_len"] == "" and "document_len" not in vg.preference_scenario(row)["train"]
    assert vg.preference_scenario(dict(row, mean_document_len="1684"))["train"]["document_len"] == 1684
    assert "pair_concat" not in vg.preference_scenario(dict(row, pair_concat=""))["train"]     # TRL's default


def test_preference_scenario_reads_a_padded_pack():
    """OI09 (open-instruct's OLMo-core A/B run, 32 H100): the rank batch of 1 x 4 pairs is one pack a side padded to
    16,384 tokens and one micro-step (DPOTrainModule splits the batch dimension, 1), so 32 pairs a step; 217,400
    real tokens over 32 ranks and 2 sides = 3,397 a side (pack_tokens) in 4 documents of 849."""
    row = {x["id"]: x for x in _pref_rows()}["OI09"]
    assert round(int(row["real_tokens_per_step"]) / 32 / 2) == int(row["pack_tokens"]) == 3397
    assert int(row["pack_tokens"]) // 4 == int(row["mean_document_len"]) == 849
    t = vg.preference_scenario(row)["train"]
    assert (t["seq_len"], t["micro_batch"], t["global_batch"]) == (16384, 1, 32)
    assert (t["document_len"], t["pack_tokens"], t["pair_concat"]) == (849, 3397, "sequence")
    # uv.lock @93a5b3c5 pins flash-attn-3, so model_utils.detect_attn_implementation picks flash_3 on an H100
    assert t["attention_kernel"] == "fa3"
    assert vg.preference_scenario({x["id"]: x for x in _pref_rows()}["OI01"])["train"]["attention_kernel"] == "fa2"
    assert "pack_tokens" not in vg.preference_scenario(dict(row, pack_tokens=""))["train"]


def test_preference_scenario_refuses_a_non_preference_objective():
    row = dict({x["id"]: x for x in _pref_rows()}["OI01"], objective="grpo")
    try:
        vg.preference_scenario(row)
    except ValueError as exc:
        assert "grpo" in str(exc) and "OI01" in str(exc)
    else:
        raise AssertionError("a grpo row was read as a preference row")


def test_scored_preference_rows_run_through_the_scorer():
    """Each scored DPO row goes through gpuplan and comes back as (predicted, measured) step seconds in its own
    category (not the RL step's); each unscored row comes back with its reason and no prediction."""
    rows = {x["id"]: x for x in _pref_rows()}
    out = {r["id"]: r for r in vg.score(PREF_CSV)}
    assert set(out) == set(rows)
    scored = [i for i, r in rows.items() if not r["notes"].startswith(vg.UNSCORED)]
    assert scored
    for i in scored:
        assert "skip" not in out[i], out[i].get("skip")
        pred, meas = out[i]["pref"]
        assert pred > 0 and meas == float(rows[i]["step_time_s"]) and "rl" not in out[i]
    for i in set(rows) - set(scored):
        assert out[i]["unscored"] and "pref" not in out[i]


def test_measured_dpo_rows_score_as_preference_steps():
    """A DPO step measured on the lent GPU (HD01, TRL's step as `gpuplan measure` runs it) keeps its objective, tool and
    reference kind, and scores as a preference step (step seconds), not as SFT tokens/s."""
    rows = _measured_rows()
    scn = vg.measured_scenario(rows["HD02"])
    assert scn["tool"] == "trl" and scn["train"]["objective"] == "dpo" and scn["train"]["reference"] == "precomputed"
    out = {r["id"]: r for r in vg.score(ROOT / "validation" / "gathered" / "measured.csv")}
    assert out["HD01"]["pref"][1] == float(rows["HD01"]["step_time_s"]) and "tps" not in out["HD01"]
    assert "tps" in out["HS01"] and "pref" not in out["HS01"]


def _measured_rows() -> dict[str, dict]:
    with (ROOT / "validation" / "gathered" / "measured.csv").open(newline="", encoding="utf-8") as fh:
        return {r["id"]: r for r in csv.DictReader(fh)}


def test_measured_rows_rebuild_the_scenario_the_device_ran():
    """measured.csv (a `gpuplan measure` run): the row's settings are the scenario's, nothing defaulted away."""
    rows = _measured_rows()
    lora = vg.measured_scenario(rows["HT04"])
    assert lora["train"] == {"objective": "sft", "method": "lora", "precision": "bf16", "master_weights": True,
                             "optimizer": "adamw",
                             "optimizer_impl": "foreach", "recompute": "none", "attention": "sdpa",
                             "seq_len": 4096, "micro_batch": 2, "lora_rank": 16,
                             "torch_version": "2.11.0+cu130"}     # the row's `torch` column: SDPA runs cuDNN
    # `gpuplan measure` builds the model with attn_implementation="sdpa" (local/measure.py _build_model)
    # the lent machine's own host (host_cpus.csv lent-h200-vm: its eager op timed there)
    assert lora["hardware"] == {"gpu": "h200-sxm", "count": 1, "host_cpu": "lent-h200-vm"} and lora["framework"] == "hf"
    infer = vg.measured_scenario(rows["HI02"])
    assert infer["infer"] == {"engine": "hf", "weights": "bf16", "prompt_len": 1024, "output_len": 64,
                              "concurrency": 16}
    # the profiled repeat of HT01 is listed once, not scored twice
    assert rows["HK01"]["notes"].startswith("unscored:") and "HT01" in rows["HK01"]["notes"]


def test_measured_memory_is_compared_at_the_allocators_reserve():
    # gpuplan's whole peak less the CUDA context (outside the caching allocator) against max_memory_reserved
    GiB = 2 ** 30
    ctx = vg.outside_torch_bytes(None, 1)
    est = SimpleNamespace(memory=SimpleNamespace(peak_bytes_per_gpu=80 * GiB))
    pred, meas = vg.measured_memory_pair({"peak_reserved_gib": "75.15"}, est)
    assert pred == 80 - ctx / GiB and meas == 75.15


def test_train_rows_carry_the_torch_they_ran_or_unknown():
    """train.csv `torch_version` (issue 13): the torch a source states, which picks PyTorch SDPA's kernel; a row
    whose source does not state it is "unknown" (FlashAttention-2, the default before torch 2.11)."""
    with (ROOT / "validation" / "gathered" / "train.csv").open(newline="", encoding="utf-8") as fh:
        rows = {r["id"]: r for r in csv.DictReader(fh)}
    assert "torch 1963fc8" in rows["TT01"]["notes"]
    assert vg.scenario(rows["TT01"])["train"]["torch_version"] == "2.6.0a0+git1963fc8"
    assert "torch 2.7.0a0+gitb98af95" in rows["TA01"]["notes"]
    assert vg.scenario(rows["TA01"])["train"]["torch_version"] == "2.7.0a0+gitb98af95"
    assert vg.scenario(rows["TT10"])["train"]["torch_version"] == "unknown"
    assert vg.scenario(rows["TY01"])["train"]["torch_version"] == "unknown"


def test_hf_serve_rows_carry_the_torch_their_source_states():
    base = {"model": "llama-2-13b-hf", "gpu": "a100-sxm-80gb", "gpus": "1", "engine": "hf", "weights": "fp16",
            "kv_cache": "fp16", "prompt_len": "512", "output_len": "512", "concurrency": "16", "notes": "kernel fp16"}
    opt = dict(base, source="optimum GPTQ benchmark (AutoGPTQ 0.5.0 / torch 2.0.1 / bitsandbytes 0.41.1 / "
                            "transformers 4.35)")
    assert vg.serve_scenario(opt)["infer"]["torch_version"] == "2.0.1"
    bnb = dict(base, source="bitsandbytes benchmarking v0.45.0.dev (optimum-benchmark; transformers 4.46.3)")
    assert "torch_version" not in vg.serve_scenario(bnb)["infer"]      # not stated: the default


# ---- dense bf16 Megatron rows (train.csv DG01-DG08, issue 20) -----------------------------------------------
# NVIDIA dgxc-benchmarking's published tables: (tokens/s over all GPUs, seconds per step), read off the READMEs at
# @143b90d (llama3.1, NeMo 24.09), @8f5cbb3 (llama3.1, NeMo 24.12) and @741c886 (ft_llama3 SFT, NeMo 24.12).
_DGXC_BF16 = {"DG01": (81222, 12.91), "DG02": (1280704, 13.10), "DG03": (71235, 14.72), "DG04": (1124478, 14.92),
              "DG05": (82028, 12.78), "DG06": (71756, 14.61), "DG07": (99296, 1.32), "DG08": (39009, 3.36),
              # the FP8 tables beside them (TE delayed scaling: NeMo's fp8 hybrid, amax history 1024)
              "DG09": (108436, 9.67), "DG10": (95239, 11.01), "DG11": (137970, 0.95), "DG12": (57996, 2.26)}


def _train_rows() -> dict[str, dict]:
    with (ROOT / "validation" / "gathered" / "train.csv").open(newline="", encoding="utf-8") as fh:
        return {r["id"]: r for r in csv.DictReader(fh)}


def test_dgxc_bf16_megatron_rows_are_the_readmes_totals_per_gpu():
    """Each row's tokens/s/GPU is the README's total over its GPUs; the total is seq_len x global batch / step time
    (the README's own formula) to the table's rounding; the layout fills the GPUs (dp x tp x pp x cp)."""
    rows = _train_rows()
    for rid, (total, step) in _DGXC_BF16.items():
        r = rows[rid]
        assert r["framework"] == "megatron" and r["gpu"] == "h100-sxm", rid
        assert (r["precision"], r["fp8_recipe"]) in (("bf16", ""), ("fp8", "delayed")), rid
        assert abs(float(r["tokens_per_s_per_gpu"]) - total / int(r["gpus"])) < 0.1, rid
        assert abs(int(r["seq_len"]) * int(r["global_batch"]) / step / total - 1) < 0.002, rid
        p = vg.scenario(r)["parallel"]
        assert p["dp"] * p["tp"] * p["pp"] * p["cp"] == int(r["gpus"]), rid
        assert r["source_url"].startswith("https://github.com/NVIDIA/dgxc-benchmarking/blob/"), rid


def test_megatron_bf16_rate_at_nemo_rls_training_shape_is_the_published_one():
    """The shape of NeMo RL's Llama 8B training pass (NB01: Megatron, bf16, TP 1, DP 8, packed 4,096-token
    micro-batches on 8 H100) run by NeMo's own SFT loop (DG07: 12,412 tokens/s/GPU published) is predicted within
    10 %: gpuplan's dense bf16 Megatron rate is not what leaves NB01's training phase 1.3x slow (docs/posttrain.md,
    *Megatron's own bf16 rate, published*)."""
    from gpuplan import api
    r = _train_rows()["DG07"]
    pred = api.estimate(vg.scenario(r)).performance.tokens_per_s_per_gpu
    assert abs(pred / (99296 / 8) - 1) < 0.10


def test_posttrain_rows_carry_the_activation_fusion_their_model_config_set():
    """NeMo RL v0.3.0 built its Megatron model config from NeMo's HF importers (community_import.py @b1c86a8):
    LlamaConfig sets bias_activation_fusion True (nemo/collections/llm/gpt/model/llama.py L66 @33259f25), Qwen2Config /
    Qwen3Config set none, leaving Megatron-Core's False (transformer_config.py L201 @2ff0f099); from d975e39f1
    (2025-10-09, in 06beed91) NeMo RL's config sets it True for every model."""
    rows = {r["id"]: r for r in _posttrain_rows()}
    assert rows["NB05"]["activation_fusion"] == "false" and rows["NB06"]["activation_fusion"] == "false"
    assert rows["NB01"]["activation_fusion"] == "true" and rows["NB03"]["activation_fusion"] == "true"
    assert all(rows[k]["activation_fusion"] in ("", "true") for k in rows if k.startswith("NR"))
    assert vg.posttrain_scenario(rows["NB05"])["train"]["activation_fusion"] is False
    assert "activation_fusion" not in vg.posttrain_scenario(rows["NR09"])["train"]


# ---- vLLM / SGLang throughput rows on NVIDIA data-centre GPUs (serve.csv SV*, VP*, QS*) -------------------
def _serve_rows() -> dict[str, dict]:
    with (ROOT / "validation" / "gathered" / "serve.csv").open(newline="", encoding="utf-8") as fh:
        return {r["id"]: r for r in csv.DictReader(fh)}


def test_sglang_vllm060_offline_rows_take_their_mean_output_from_the_readme():
    # sgl-project/sglang @120affb9 benchmark/benchmark_vllm_060/README.md, offline tables: (req/s, output tok/s)
    readme = {"SV01": (22.03, 4281.51), "SV02": (21.27, 4132.37), "SV03": (19.84, 3856.01), "SV04": (19.04, 3700.64)}
    rows = _serve_rows()
    for rid, (rps, tps) in readme.items():
        r = rows[rid]
        assert float(r["throughput_tokens_per_s"]) == tps and r["throughput_kind"] == "output", rid
        assert abs(tps / rps - int(r["output_len"])) < 1.0, rid     # mean output tokens of a request
        assert int(r["concurrency"]) == 5000, rid                   # --num-prompts 5000 at request rate inf


def test_vllm_pr7117_row_is_the_mean_of_its_three_trials_as_total_tokens():
    # vllm-project/vllm PR 7117, main branch: 12453.04, 12342.76, 12434.40 tokens/s (prompt + output, issue 8231)
    r = _serve_rows()["VP01"]
    assert abs(float(r["throughput_tokens_per_s"]) - (12453.04 + 12342.76 + 12434.40) / 3) < 0.01
    assert r["throughput_kind"] == "total" and vg.vllm_v0(r["engine_version"])


def test_qwen_speed_rows_count_prompt_and_generated_tokens_at_batch_one():
    # Qwen speed benchmark: Speed = (prompt + generated tokens) / time, batch 1, 2048 generated tokens
    rows = [r for rid, r in _serve_rows().items() if rid.startswith("QS")]
    assert len(rows) == 16
    for r in rows:
        assert r["throughput_kind"] == "total" and r["concurrency"] == "1" and r["output_len"] == "2048", r["id"]
        pred, _ = vg.throughput_pair(r, SimpleNamespace(output_tokens_per_s=100.0, details={}))
        assert abs(pred - 100.0 * (int(r["prompt_len"]) + 2048) / 2048) < 1e-9, r["id"]


# ---- post-training memory (posttrain-memory.csv, issue 20) ---------------------------------------------------------
PTM_CSV = ROOT / "validation" / "gathered" / "posttrain-memory.csv"


def _ptm_rows() -> list[dict]:
    return list(csv.DictReader(PTM_CSV.open(encoding="utf-8")))


def test_posttrain_memory_rows_are_complete():
    """Every row names its source, the date read and what was measured; an unscored row says why; a scored row
    states the settings the RL scenario is built from and the counter the source read."""
    rows = _ptm_rows()
    assert len(rows) >= 10 and len({r["source"] for r in rows}) >= 3
    for r in rows:
        assert r["source_url"].startswith("https://"), r["id"]
        assert r["retrieved"][:2] == "20" and r["memory"] and r["memory_unit"] in ("GiB", "GB"), r["id"]
    scored = [r for r in rows if not r["notes"].startswith(vg.UNSCORED)]
    assert len(scored) >= 2
    for r in scored:
        assert "/blob/" in r["source_url"], r["id"]          # pinned to a commit
        assert r["memory_metric"] == "max allocated, slept engine counted", r["id"]
        for col in ("model", "gpu", "gpus", "zero", "placement", "engine", "gpu_memory_utilization", "prompts_per_step",
                    "group_size", "micro_batch", "logprob_batch", "prompt_len", "max_seq_len", "recompute", "packing"):
            assert r[col], (r["id"], col)


def test_posttrain_memory_scored_rows_expect_the_published_number():
    """The measured side of each scored row is the log's own perf/max_memory_allocated_gb (verl divides by 1024**3):
    52.804 GiB for the GRPO run and 53.038 GiB for the PPO run (play-verl logs @7716a615), not gpuplan's output."""
    recs = {r["id"]: r for r in vg.score(PTM_CSV)}
    assert abs(recs["PV01"]["mem"][1] - 52.804) < 1e-9
    assert abs(recs["PV02"]["mem"][1] - 53.038) < 1e-9
    for rid in ("PV01", "PV02"):
        pred, meas = recs[rid]["mem"]
        assert abs(pred - meas) / meas < 0.10, (rid, pred, meas)     # the documented agreement, not a fit
    assert all("unscored" in r for rid, r in recs.items() if rid not in ("PV01", "PV02"))


def test_slept_engine_counters_keep_the_engines_pool():
    """vLLM's sleep unmaps the engine's weights and KV pool behind torch's back, so torch's allocated counter keeps
    them: a 12 GiB backward phase with 3 GiB of runtime overhead reads 12 - 3 + (1 + 40) = 50 GiB, above the
    awake rollout phase's 50 - 3 = 47 GiB."""
    GiB = 2 ** 30
    est = SimpleNamespace(memory=SimpleNamespace(
        components={"runtime_overhead": 3 * GiB}, phases={"backward": 12 * GiB, "rollout": 50 * GiB},
        limits={"rollout_engine_weights_bytes": 1 * GiB, "rollout_kv_pool_bytes": 40 * GiB}))
    row = {"id": "X", "gpus": "8", "memory": "50", "memory_unit": "GiB",
           "memory_metric": "max allocated, slept engine counted"}
    assert vg.memory_pair(row, est) == (50.0, 50.0)
    est.memory.phases["rollout"] = 60 * GiB      # an awake engine fuller than the slept counters: 60 - 3
    assert vg.memory_pair(row, est)[0] == 57.0


def test_a_v0_fallback_on_a_later_vllm_runs_v0():
    assert vg.vllm_v0("0.8.3, V0 engine (XFORMERS fallback)") and not vg.vllm_v0("0.8.3, V1 engine")
    assert vg.vllm_v0("0.6.3") and not vg.vllm_v0("0.10.2")


def test_posttrain_memory_rows_score_in_their_own_category():
    from gpuplan.estimate.uncertainty import memory_category
    assert memory_category("finetune", "full", 3, 8, None, "grpo") == "post-training RL (rollout engine + training)"
    assert memory_category("finetune", "lora", 0, 1, None, "dpo") == "post-training (preference, distillation, reward model)"
    assert memory_category("finetune", "lora", 0, 1, None) == "fine-tuning, LoRA/QLoRA"


def test_posttrain_memory_ids_are_their_own():
    """posttrain-memory.csv's ids name no row of another gathered file (serve.csv already has a VP01)."""
    others = {r["id"] for p in (ROOT / "validation" / "gathered").glob("*.csv") if p != PTM_CSV
              for r in csv.DictReader(p.open(encoding="utf-8"))}
    assert not {r["id"] for r in _ptm_rows()} & others
