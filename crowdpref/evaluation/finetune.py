"""The optional fine-tuning path: TRL's ``RewardTrainer`` on a small causal LM (for example
``HuggingFaceTB/SmolLM2-135M``), trained on the training questions' pairs and scored on the
held-out ones - the same split as the cheap models - with its own shuffled-label control.

Meant for a machine with a GPU. It imports torch, transformers and trl only when it runs.

Weights: the model is loaded with ``transformers`` from a Hub id or a local folder. A folder
without weight files is an error, unless ``random_weights`` asks for a smoke test: the model is
then built from its config with RANDOM weights. Loading that leaves parts of the base model
uninitialised counts as random too (only the new reward head, ``score``, may be missing). A
run on random weights says so loudly and its numbers are flagged "not a result" everywhere:
they show the pipeline runs, not what the data is worth. crowdpref can tell that weights were
not loaded; it cannot tell good weights from bad ones."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from crowdpref.errors import CrowdprefError, first_line
from crowdpref.evaluation.models import Oriented, Scorer

__all__ = ["NOT_A_RESULT", "FineTune", "LoadedModel", "fit_reward_model", "load_reward_model"]

NOT_A_RESULT = "NOT A RESULT"
HEAD_PREFIXES = ("score.", "classifier.")
"""Parameters a causal LM loaded as a sequence classifier always lacks: the new reward head."""
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


@dataclass(frozen=True)
class FineTune:
    """What to fine-tune and how (the study config's ``evaluation.reward_model``)."""

    model: str
    random_weights: bool = False
    epochs: float = 1.0
    learning_rate: float = 1e-5
    batch_size: int = 8
    max_length: int = 512
    shuffles: int = 1
    device: str = "auto"


@dataclass
class LoadedModel:
    """A reward model ready to train: the model, its tokenizer, and whether its weights are real."""

    model: Any
    tokenizer: Any
    real_weights: bool
    why_not_real: str
    """Empty when the weights were loaded; else the reason, for the report."""


def _device(requested: str) -> str:
    import torch

    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise CrowdprefError("evaluation.reward_model.device: cuda, but torch sees no GPU on this "
                             "machine: set device: auto (or cpu) or run on a GPU machine")
    return requested


def _has_weights(name: str) -> bool | None:
    """True/False for a local folder (weight files there or not); None for a Hub id."""
    folder = Path(name)
    if not folder.is_dir():
        return None
    return any((folder / f).exists() for f in WEIGHT_FILES)


def load_reward_model(spec: FineTune) -> LoadedModel:
    """The tokenizer and a one-output sequence classifier on top of ``spec.model``; a
    :class:`~crowdpref.errors.CrowdprefError` (one line) when it cannot be loaded."""
    from transformers import (
        AutoConfig,
        AutoModelForSequenceClassification,
        AutoTokenizer,
    )
    from transformers.utils import logging as hf_logging

    where = f"evaluation.reward_model.model: {spec.model}"
    try:
        tokenizer = AutoTokenizer.from_pretrained(spec.model)
        config = AutoConfig.from_pretrained(spec.model, num_labels=1)
    except Exception as exc:  # noqa: BLE001 - any loader failure is one line naming the model
        raise CrowdprefError(f"{where}: cannot load its tokenizer or config ({first_line(exc, 160)}): "
                             "give a Hub id this machine can reach or a local model folder") from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    config.pad_token_id = tokenizer.pad_token_id
    if _has_weights(spec.model) is False:
        if not spec.random_weights:
            raise CrowdprefError(f"{where}: the folder has no weight files ({', '.join(WEIGHT_FILES[::2])}): "
                                 "give a model with its weights (random_weights: true only for a smoke test)")
        model = AutoModelForSequenceClassification.from_config(config)
        return LoadedModel(model, tokenizer, False,
                           "random weights: the folder has no weight files (random_weights: true)")
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the missing reward head is expected; it is checked below
    try:
        model, info = AutoModelForSequenceClassification.from_pretrained(
            spec.model, config=config, output_loading_info=True)
    except Exception as exc:  # noqa: BLE001 - any loader failure is one line naming the model
        raise CrowdprefError(f"{where}: cannot load its weights ({first_line(exc, 160)}): give a "
                             "Hub id this machine can reach or a local model folder") from None
    finally:
        hf_logging.set_verbosity(verbosity)
    missing = [k for k in info.get("missing_keys", []) if not k.startswith(HEAD_PREFIXES)]
    if missing:
        return LoadedModel(model, tokenizer, False,
                           f"random weights: {len(missing)} parameter(s) of the base model were not in "
                           f"the checkpoint (e.g. {missing[0]})")
    return LoadedModel(model, tokenizer, True, "")


def _texts(pairs: Oriented, which: str) -> list[str]:
    answers = pairs.first if which == "first" else pairs.second
    prompts = pairs.prompt if pairs.prompt is not None else np.full(len(answers), "")
    return [str(p) + str(a) for p, a in zip(prompts, answers, strict=True)]


def _rewards(model: Any, tokenizer: Any, texts: list[str], max_length: int, device: str,
             batch_size: int) -> np.ndarray:
    """The reward of each text as TRL trains it (prompt + answer + EOS), the end kept when it is
    longer than ``max_length`` tokens."""
    import torch

    eos = tokenizer.eos_token_id
    ids = [tokenizer(t)["input_ids"] for t in texts]
    ids = [(x if x and x[-1] == eos else [*x, eos])[-max_length:] for x in ids]
    pad = tokenizer.pad_token_id
    out = np.empty(len(ids), dtype=float)
    model.eval()
    order = np.argsort([len(x) for x in ids])  # similar lengths together: less padding
    with torch.no_grad():
        for start in range(0, len(ids), batch_size):
            batch = order[start:start + batch_size]
            width = max(len(ids[i]) for i in batch)
            input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for row, i in enumerate(batch):
                input_ids[row, :len(ids[i])] = torch.tensor(ids[i])
                mask[row, :len(ids[i])] = 1
            logits = model(input_ids=input_ids.to(device), attention_mask=mask.to(device)).logits
            out[batch] = logits.float().squeeze(-1).cpu().numpy()
    return out


def fit_reward_model(train: Oriented, spec: FineTune, seed: int, y: np.ndarray | None = None,
                     load: Callable[[FineTune], LoadedModel] = load_reward_model) -> tuple[Scorer, dict[str, Any]]:
    """Train a fresh copy of ``spec.model`` with TRL's ``RewardTrainer`` on ``train`` (labels
    ``y``, default ``train.y``: the chosen answer is the one whose label says so) and return the
    scorer (reward of the first answer minus the second's) and facts for the report."""
    import datasets
    import torch
    import trl
    from datasets.utils import (
        disable_progress_bar,
        enable_progress_bar,
        is_progress_bar_enabled,
    )
    from transformers import PrinterCallback

    started = time.perf_counter()
    device = _device(spec.device)
    loaded = load(spec)
    labels = train.y if y is None else y
    first, second = _texts(train, "first"), _texts(train, "second")
    first_won = labels > 0.5
    rows = {"chosen": [a if w else b for a, b, w in zip(first, second, first_won, strict=True)],
            "rejected": [b if w else a for a, b, w in zip(first, second, first_won, strict=True)]}
    torch.manual_seed(seed)
    bf16 = device == "cuda" and torch.cuda.is_bf16_supported()
    with tempfile.TemporaryDirectory(prefix="crowdpref-reward-model-") as out:
        args = trl.RewardConfig(
            output_dir=out, report_to=[], use_cpu=device == "cpu", bf16=bf16, fp16=False,
            activation_checkpointing=False, num_train_epochs=spec.epochs,
            per_device_train_batch_size=spec.batch_size, learning_rate=spec.learning_rate,
            max_length=spec.max_length, save_strategy="no", logging_steps=10**9, disable_tqdm=True,
            seed=seed, data_seed=seed, dataloader_num_workers=0)
        loggers = [logging.getLogger(n) for n in ("transformers", "trl", "datasets")]
        levels = [lg.level for lg in loggers]
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        bars = is_progress_bar_enabled()
        disable_progress_bar()
        # the libraries under TRL print to stdout while they prepare the data (with Prefect's
        # log_prints, a disassembly of their own functions): kept out of the run's log
        quiet = contextlib.redirect_stdout(io.StringIO())
        try:
            quiet.__enter__()
            trainer = trl.RewardTrainer(model=loaded.model, args=args, processing_class=loaded.tokenizer,
                                        train_dataset=datasets.Dataset.from_dict(rows))
            trainer.remove_callback(PrinterCallback)  # no metrics dict printed to stdout
            used = len(trainer.train_dataset)
            if used == 0:
                raise CrowdprefError(f"evaluation.reward_model.max_length: {spec.max_length} tokens leaves "
                                     "no training pair (TRL drops longer ones): raise it")
            loss = float(trainer.train().training_loss)
        finally:
            quiet.__exit__(None, None, None)
            for lg, level in zip(loggers, levels, strict=True):
                lg.setLevel(level)
            if bars:
                enable_progress_bar()
    model, tokenizer = trainer.model, loaded.tokenizer

    def score(pairs: Oriented) -> np.ndarray:
        a = _rewards(model, tokenizer, _texts(pairs, "first"), spec.max_length, device, 2 * spec.batch_size)
        b = _rewards(model, tokenizer, _texts(pairs, "second"), spec.max_length, device, 2 * spec.batch_size)
        return a - b

    facts = {"device": _device_name(device), "real_weights": loaded.real_weights,
             "why_not_real": loaded.why_not_real, "train_pairs": len(train), "train_pairs_used": used,
             "training_loss": loss, "seconds": time.perf_counter() - started}
    return score, facts


def _device_name(device: str) -> str:
    import torch

    if device == "cuda":
        return f"cuda ({torch.cuda.get_device_name(0)})"
    return f"cpu ({os.cpu_count()} cores)"
