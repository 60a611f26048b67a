"""The evaluate stage's fine-tuning path (crowdpref.evaluation.finetune) on CPU: TRL's
RewardTrainer on a tiny Llama built here (1 layer, hidden 16; a byte-level BPE trained on the
rows), on the same split as the cheap models. Random weights must say so loudly and never be a
result; loaded weights are real; a checkpoint that leaves part of the base model out is not.
Nothing is downloaded. A few seconds in all."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from crowdpref.config import parse_study
from crowdpref.errors import ConfigError, CrowdprefError
from crowdpref.evaluation import (
    EVALUATION_FILE,
    EvalData,
    evaluate,
    markdown,
    write_outputs,
)
from crowdpref.evaluation.finetune import NOT_A_RESULT, FineTune, load_reward_model

GOOD = ["listen", "acknowledge", "gently", "understand", "respect", "support", "calmly", "kindly"]
BAD = ["whatever", "ignore", "mock", "blame", "dismiss", "shrug", "sneer", "rudely"]


@pytest.fixture(autouse=True)
def offline_on_one_thread(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Nothing from the Hub; torch on one thread (a model this small spends its time
    synchronising threads: 2 to 3 times slower on 2 busy cores)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def data() -> EvalData:
    return synthetic()


def synthetic() -> EvalData:
    """40 questions x 3 pairs; an answer's hidden quality shows in its words."""
    rng = np.random.default_rng(0)
    rows, truth = [], {}
    for q in range(40):
        for k in range(3):
            quality = {f"r{q}-{k}-{side}": float(rng.random()) for side in "ab"}
            text = {rid: " ".join(GOOD[rng.integers(8)] if rng.random() < hq else BAD[rng.integers(8)]
                                  for _ in range(8)) for rid, hq in quality.items()}
            truth |= quality
            chosen, rejected = sorted(quality, key=quality.__getitem__, reverse=True)
            rows.append({"pair_id": f"p{q}-{k}", "question_id": f"q{q}", "category": f"c{q % 2}",
                         "prompt": f"Question {q}? ", "chosen": text[chosen], "rejected": text[rejected],
                         "chosen_response_id": chosen, "rejected_response_id": rejected})
    return EvalData(pd.DataFrame(rows), "synthetic", None, pd.Series(truth))


@pytest.fixture(scope="module")
def model_folder(data: EvalData, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_llama(data, tmp_path_factory.mktemp("tiny-llama"))


def tiny_llama(data: EvalData, folder: Path) -> Path:
    """A tiny Llama's config and tokenizer, NO weights (what ``random_weights`` is for)."""
    prefs = data.preferences
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator([*prefs["prompt"], *prefs["chosen"], *prefs["rejected"]],
                            trainers.BpeTrainer(vocab_size=300, special_tokens=["<eos>", "<pad>"],
                                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<eos>", pad_token="<pad>")
    tokenizer.save_pretrained(folder)
    LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128,
                pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                bos_token_id=None).save_pretrained(folder)
    return folder


def test_random_weights_run_on_the_same_split_and_are_never_a_result(data: EvalData, model_folder: Path,
                                                                     tmp_path: Path) -> None:
    spec = FineTune(str(model_folder), random_weights=True, epochs=1, batch_size=16, max_length=64,
                    learning_rate=1e-3, shuffles=1)
    result = evaluate(data, seed=0, bootstrap_samples=100, shuffles=1, fine_tune=spec)
    tuned = result.fine_tuned
    assert tuned is not None
    # the same split and held-out pairs as the cheap models, with its own controls and the truth
    assert (tuned["train_pairs"], tuned["test_pairs"]) == (result.train_pairs, result.test_pairs)
    assert tuned["train_pairs_used"] == result.train_pairs
    assert tuned["shuffled_labels"]["shuffles"] == 1 and 0 <= tuned["shuffled_labels"]["accuracy"] <= 1
    assert tuned["truth"] is not None and 0 <= tuned["accuracy"] <= 1
    assert tuned["device"].startswith("cpu")
    # loud, and flagged everywhere: evaluation.json, the artifact, the log lines; the verdict ignores it
    assert tuned["result"] is False and tuned["status"].startswith(NOT_A_RESULT)
    assert any("RAN WITHOUT REAL WEIGHTS" in w and NOT_A_RESULT in w for w in result.warnings)
    assert "fine-tuned" not in result.verdict and "reward model" not in result.verdict
    report = markdown(result)
    assert NOT_A_RESULT in report and "| fine-tuned |" not in report
    saved = json.loads(write_outputs(result, tmp_path)[0].read_text())
    assert tmp_path.joinpath(EVALUATION_FILE).exists()
    assert saved["fine_tuned"]["result"] is False and saved["fine_tuned"]["status"].startswith(NOT_A_RESULT)


def test_a_folder_without_weights_is_refused_unless_a_smoke_test_asks(model_folder: Path) -> None:
    with pytest.raises(CrowdprefError, match="no weight files") as err:
        load_reward_model(FineTune(str(model_folder)))
    assert "\n" not in str(err.value) and "random_weights: true only for a smoke test" in str(err.value)
    assert load_reward_model(FineTune(str(model_folder), random_weights=True)).real_weights is False


def test_loaded_weights_are_real_and_a_partial_checkpoint_is_not(model_folder: Path, tmp_path: Path) -> None:
    """A causal LM's checkpoint loads as a reward model (only the new head, ``score``, is
    missing): real. The same checkpoint without one layer's weights: random, with the reason."""
    lm = LlamaForCausalLM(LlamaConfig.from_pretrained(model_folder))
    whole, partial = tmp_path / "whole", tmp_path / "partial"
    for folder in (whole, partial):
        for f in model_folder.iterdir():
            (folder / f.name).parent.mkdir(exist_ok=True)
            (folder / f.name).write_bytes(f.read_bytes())
    lm.save_pretrained(whole)
    loaded = load_reward_model(FineTune(str(whole)))
    assert loaded.real_weights is True and loaded.why_not_real == ""
    state = {k: v.contiguous() for k, v in lm.state_dict().items() if "layers.0.mlp.up_proj" not in k}
    save_file(state, str(partial / "model.safetensors"), metadata={"format": "pt"})
    loaded = load_reward_model(FineTune(str(partial)))
    assert loaded.real_weights is False and "up_proj" in loaded.why_not_real


def test_the_config_section_is_off_by_default_and_feeds_the_fine_tuning(tmp_path: Path) -> None:
    base = {"name": "ft", "questions": {"categories": ["empathy"], "per_category": 10}}
    assert parse_study(base).evaluation.reward_model is None
    config = parse_study({**base, "evaluation": {"reward_model": {
        "model": "HuggingFaceTB/SmolLM2-135M", "epochs": 2, "batch_size": 16}}})
    spec = FineTune(**config.evaluation.reward_model.model_dump())  # as tasks/evaluate.py builds it
    assert (spec.model, spec.epochs, spec.batch_size, spec.random_weights) == (
        "HuggingFaceTB/SmolLM2-135M", 2, 16, False)
    with pytest.raises(ConfigError, match="reward_model"):
        parse_study({**base, "evaluation": {"reward_model": {"model": "x", "epoch": 2}}})
