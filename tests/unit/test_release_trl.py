"""The release works in TRL: a crowdpref release, loaded with ``datasets`` the way a user of the
published dataset loads it (the card's own ``configs``, default configuration), goes into TRL's
DPO and reward trainers as it is - no renaming or mapping step - and each trainer's own
preparation tokenises every row into what it trains on, then takes a training step.

The release is the one tests/unit/test_publish.py builds (``write_study_run`` + ``build``: six
preference rows). Nothing is downloaded: the tokenizer is a byte-level BPE trained here on the
release's own text, the models are 1-layer Llamas with random weights, and every connection off
this machine is refused while the test runs."""

from __future__ import annotations

import copy
import math
import socket
from pathlib import Path

import datasets
import pandas as pd
import pytest
import torch
import trl
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification,
                          PreTrainedTokenizerFast)
from trl.data_utils import is_conversational

from tests.unit.test_publish import build, small_config, write_study_run

EOS, PAD = "<|endoftext|>", "<pad>"
PREFERENCE = ["prompt", "chosen", "rejected"]
# The TRL API read here (the prepared columns, the trainers' and configs' arguments) changes
# between minor versions; pyproject's test extra pins trl to one (1.16).


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Everything is local: a connection to anything but this machine fails the test."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    connect = socket.socket.connect

    def local_only(sock: socket.socket, address: object) -> object:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in (
                "127.0.0.1", "::1", "localhost"):
            raise AssertionError(f"the TRL test reached for the network: {address!r}")
        return connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", local_only)


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    planted = write_study_run(tmp_path_factory.mktemp("trl") / "runs" / "pub-test", small_config())
    return build(planted)


@pytest.fixture(scope="module")
def train(release: Path, tmp_path_factory: pytest.TempPathFactory) -> datasets.Dataset:
    """The default configuration, loaded through the card's YAML, as the card tells users to."""
    return datasets.load_dataset(str(release), split="train",
                                 cache_dir=str(tmp_path_factory.mktemp("hf-cache")))


@pytest.fixture(scope="module")
def tokenizer(train: datasets.Dataset) -> PreTrainedTokenizerFast:
    """Byte-level BPE trained on the release's own text: lossless, so decoding gives the text back
    exactly and the test can compare TRL's token ids with the release's strings."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        (row[c] for row in train for c in PREFERENCE),
        trainers.BpeTrainer(vocab_size=400, special_tokens=[EOS, PAD],
                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token=EOS, pad_token=PAD)


def tiny_llama(tokenizer: PreTrainedTokenizerFast, **extra: object) -> LlamaConfig:
    return LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32,
                       num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                       max_position_embeddings=256, pad_token_id=tokenizer.pad_token_id,
                       eos_token_id=tokenizer.eos_token_id, bos_token_id=None, **extra)


def cpu_args(out: Path) -> dict[str, object]:
    """One CPU step, nothing saved or reported (TRL's configs default to bf16 and to activation
    (gradient) checkpointing)."""
    return dict(output_dir=str(out), report_to=[], use_cpu=True, bf16=False,
                activation_checkpointing=False, max_steps=1, per_device_train_batch_size=2,
                save_strategy="no", logging_steps=1, disable_tqdm=True, seed=0)


@pytest.fixture(scope="module")
def expected(train: datasets.Dataset) -> list[dict[str, str]]:
    return [{c: row[c] for c in PREFERENCE} for row in train]


def test_the_release_is_trls_standard_preference_format(release: Path, train: datasets.Dataset) -> None:
    # the card's default configuration: the rows crowdpref wrote to data/default, in their order
    written = pd.concat(pd.read_parquet(f) for f in sorted((release / "data/default").glob("*.parquet")))
    assert len(train) == len(written) == 6
    assert train.column_names == list(written.columns)
    assert train.column_names[:4] == ["prompt", "chosen", "rejected", "margin"]
    assert train["chosen"] == list(written["chosen"])
    for column in PREFERENCE:
        assert train.features[column] == datasets.Value("string"), column
        assert all(isinstance(v, str) and v.strip() for v in train[column]), column
    assert not any(is_conversational(row) for row in train)  # plain text, no chat messages
    assert train.features["margin"] == datasets.Value("float64")


# TRL 1.16 itself still calls transformers 5's deprecated `is_gradient_checkpointing`
@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_dpo_trainer_tokenises_every_row_and_takes_a_step(
        train: datasets.Dataset, tokenizer: PreTrainedTokenizerFast,
        expected: list[dict[str, str]], tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = LlamaForCausalLM(tiny_llama(tokenizer))
    # without a reference model TRL reloads the policy from its hub id: a model built here has none
    trainer = trl.DPOTrainer(model=model, ref_model=copy.deepcopy(model),
                             args=trl.DPOConfig(**cpu_args(tmp_path)),
                             train_dataset=train, processing_class=tokenizer)

    prepared = trainer.train_dataset
    assert {"prompt_ids", "chosen_ids", "rejected_ids"} <= set(prepared.column_names)
    assert len(prepared) == len(train) == len(expected)
    for row, want in zip(prepared, expected):
        # the prompt, then each answer closed by EOS (TRL adds it): the release's text, exactly
        assert tokenizer.decode(row["prompt_ids"]) == want["prompt"]
        for answer in ("chosen", "rejected"):
            ids = row[f"{answer}_ids"]
            assert len(ids) > 1 and ids[-1] == tokenizer.eos_token_id, answer
            assert tokenizer.decode(ids) == want[answer] + EOS, answer
        assert row["chosen_ids"] != row["rejected_ids"]

    loss = trainer.train().training_loss
    assert math.isfinite(loss) and loss > 0


def test_reward_trainer_runs_the_cards_snippet_and_reads_the_margin(
        train: datasets.Dataset, tokenizer: PreTrainedTokenizerFast,
        expected: list[dict[str, str]], tmp_path: Path) -> None:
    """What the card's "How to load it" shows: keep the four preference columns and hand them to
    RewardTrainer, which also uses `margin` in its loss."""
    snippet = train.select_columns(["prompt", "chosen", "rejected", "margin"])
    torch.manual_seed(0)
    model = LlamaForSequenceClassification(tiny_llama(tokenizer, num_labels=1))
    trainer = trl.RewardTrainer(model=model, args=trl.RewardConfig(**cpu_args(tmp_path)),
                                train_dataset=snippet, processing_class=tokenizer)

    prepared = trainer.train_dataset
    assert {"chosen_ids", "rejected_ids", "margin"} <= set(prepared.column_names)
    assert len(prepared) == len(expected)
    assert prepared["margin"] == train["margin"]
    for row, want in zip(prepared, expected):
        # the reward model scores prompt + answer as one text: TRL joins them as they are
        assert tokenizer.decode(row["chosen_ids"]) == want["prompt"] + want["chosen"] + EOS
        assert tokenizer.decode(row["rejected_ids"]) == want["prompt"] + want["rejected"] + EOS

    batch = trainer.data_collator([prepared[0], prepared[1]])
    assert batch["margin"].tolist() == pytest.approx(train["margin"][:2])
    loss = trainer.train().training_loss
    assert math.isfinite(loss) and loss > 0
