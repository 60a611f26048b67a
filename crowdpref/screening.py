"""Hate-speech screening of the written answers (study 1) with detoxify.

The published study ran every answer through a hate-speech classifier and KEPT the flagged
ones, marked, so that models can learn the difference; ``screening.policy: drop`` removes them
from the preference data instead (``screening.parquet`` still lists every answer, and
:func:`excluded_response_ids` tells later stages which ones are out).

Loading. The model is built by detoxify's own ``get_model_and_tokenizer`` and scored by its
``Detoxify.predict``; only the unpickling is ours: the checkpoint is read with
``torch.load(weights_only=True)``, so a checkpoint named in a config can hold tensors and plain
containers but never run code (one holding other Python objects is refused with a one-line error
saying how to re-save it). Before loading, everything it would read is checked on disk, so that a
machine without network fails at once, before any download is tried, with a one-line
:class:`CrowdprefError` naming the missing file and how to provide it, instead of a URLError (or
two minutes of Hub retries):

- released weights (``screening.checkpoint`` unset): the checkpoint in the torch hub cache,
  ``$TORCH_HOME/hub/checkpoints/<file>`` (file names from detoxify's ``MODEL_URLS``), and the
  base model's config + tokenizer in the Hugging Face hub cache (``$HF_HUB_CACHE`` or
  ``$HF_HOME/hub``);
- a local checkpoint (``screening.checkpoint``): its ``config.arch.args.model_type`` must be a
  local folder with ``config.json`` + tokenizer files, or a Hub name present in the HF cache.

Once everything is there the base model is loaded from its local folder (the snapshot in the HF
cache, or the folder ``model_type`` names), so nothing asks the Hub - without switching Hub access
off for the rest of the process. ``allow_download=True`` skips the checks and downloads what is
missing, as detoxify normally would (still unpickling with ``weights_only=True``).
Only when the study names ``fallback: profanity-check`` does a loading failure switch to
alt-profanity-check - loudly: a warning in the log, in the result, in the ``model`` column and
in the limitations text the artifact and dataset card use. Never silently.

Scoring sorts the texts by token length and runs batches of ``batch_size`` (less padding, so
less wasted compute), then puts the scores back in the original order. Every label's score is
its own float column; an answer is flagged when any label with a threshold scores at or above it.
"""

from __future__ import annotations

import logging
import os
import pickle
import re
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
import pandas as pd

from crowdpref.config import ScreeningConfig
from crowdpref.contracts import SCREENING_BASE
from crowdpref.errors import ConfigError, CrowdprefError, first_line

__all__ = [
    "HF_BASE_MODELS",
    "PROFANITY_LABEL",
    "Precision",
    "DetoxifyScorer",
    "ProfanityScorer",
    "Scorer",
    "Screener",
    "ScreeningResult",
    "excluded_response_ids",
    "hf_hub_cache",
    "load_detoxify",
    "load_profanity_check",
    "load_screener",
    "missing_model_files",
    "resolve_device",
    "score_distribution",
    "score_texts",
    "screen_responses",
    "torch_hub_checkpoint",
]

logger = logging.getLogger(__name__)

Precision = Literal["float32", "bfloat16"]

PROFANITY_LABEL = "profanity"
"""The one score column of the profanity-check fallback."""
PROFANITY_DEFAULT_THRESHOLD = 0.5

#: The Hub model each released detoxify checkpoint builds on (its ``config.arch.args``
#: in detoxify's training configs), and the files its tokenizer can load from (any one group).
HF_BASE_MODELS: dict[str, tuple[str, tuple[tuple[str, ...], ...]]] = {
    "original": ("bert-base-uncased", (("tokenizer.json",), ("vocab.txt",))),
    "unbiased": ("roberta-base", (("tokenizer.json",), ("vocab.json", "merges.txt"))),
    "multilingual": ("xlm-roberta-base", (("tokenizer.json",), ("sentencepiece.bpe.model",))),
}
#: Tokenizer files accepted for a base model that is not one of the above.
ANY_TOKENIZER: tuple[tuple[str, ...], ...] = (
    ("tokenizer.json",), ("vocab.txt",), ("vocab.json", "merges.txt"),
    ("sentencepiece.bpe.model",), ("spiece.model",),
)

LIMITATIONS: dict[str, str] = {
    "original": (
        "detoxify 'original' is a BERT model trained on Wikipedia talk-page comments (Jigsaw "
        "Toxic Comment Classification, 2018): English only; scores are not calibrated "
        "probabilities; it over-scores harmless mentions of identity groups (e.g. 'gay', "
        "'muslim', 'black') and misses implicit, coded or sarcastic hate; texts are cut at "
        "512 tokens. Flags are a prompt for human review, not a verdict."
    ),
    "unbiased": (
        "detoxify 'unbiased' is a RoBERTa model trained on Civil Comments (Jigsaw Unintended "
        "Bias, 2019) with identity-bias mitigation: English only; scores are not calibrated "
        "probabilities; bias towards identity terms is reduced, not removed, and implicit, "
        "coded or sarcastic hate is often missed; texts are cut at 512 tokens. Flags are a "
        "prompt for human review, not a verdict."
    ),
    "multilingual": (
        "detoxify 'multilingual' is an XLM-RoBERTa model trained on Jigsaw data in English, "
        "French, Spanish, Italian, Portuguese, Turkish and Russian: other languages are not "
        "covered; scores are not calibrated probabilities; it misses implicit, coded or "
        "sarcastic hate; texts are cut at 512 tokens. Flags are a prompt for human review."
    ),
    "checkpoint": (
        "a custom detoxify-format checkpoint ({name}): crowdpref knows nothing of its training "
        "data or quality - check its flags by hand before relying on them."
    ),
    "profanity-check": (
        "FALLBACK SCREENER alt-profanity-check (a linear SVM on word n-grams, trained on "
        "profanity-labelled comments): it catches swearing and obscene words, but MISSES hate "
        "speech, threats, insults and identity attacks written without swear words, as well as "
        "misspelt or disguised slurs and sarcasm; English only; one 'profanity' score replaces "
        "detoxify's per-label scores. Treat unflagged answers as unchecked for hate speech."
    ),
    "disabled": "screening was disabled (screening.enabled: false): no answer was checked.",
}


# --- scorers -----------------------------------------------------------------------------
class Scorer(Protocol):
    """Something that scores texts: ``labels`` and one score per text and label."""

    labels: tuple[str, ...]

    def score(self, texts: list[str]) -> dict[str, list[float]]:
        """One batch: ``{label: [score per text]}``, in the order given."""
        ...

    def lengths(self, texts: list[str]) -> list[int]:
        """A length per text to sort batches by (tokens, or characters)."""
        ...


class DetoxifyScorer:
    """A loaded ``detoxify.Detoxify``: batches go through its own ``predict``.

    ``precision="bfloat16"`` runs it under ``torch.autocast`` (opt-in: several times faster on
    CPUs with AMX/AVX512-BF16 and on GPUs, slower on CPUs without them; scores move by ~1e-3,
    so an answer right at a threshold can flip)."""

    def __init__(self, detector: Any, precision: Precision = "float32"):
        if precision not in ("float32", "bfloat16"):
            raise ValueError(f"precision must be float32 or bfloat16 (got {precision!r})")
        self.detector = detector
        self.precision = precision
        self.labels: tuple[str, ...] = tuple(detector.class_names)

    def _autocast(self) -> AbstractContextManager[Any]:
        if self.precision == "float32":
            return nullcontext()
        import torch

        return torch.autocast(device_type=self.detector.model.device.type, dtype=torch.bfloat16)

    def score(self, texts: list[str]) -> dict[str, list[float]]:
        with self._autocast():
            raw = self.detector.predict(list(texts))
        # detoxify squeezes a batch of one to a bare float
        return {label: [v] if isinstance(v, float) else list(v) for label, v in raw.items()}

    def lengths(self, texts: list[str]) -> list[int]:
        """Token counts as the model will see them (truncated at its maximum length)."""
        try:
            ids = self.detector.tokenizer(list(texts), truncation=True)["input_ids"]
            return [len(x) for x in ids]
        except Exception:  # noqa: BLE001 - characters are a fine proxy if the tokenizer balks
            return [len(t) for t in texts]


class ProfanityScorer:
    """alt-profanity-check's ``predict_prob``: one ``profanity`` score per text."""

    labels: tuple[str, ...] = (PROFANITY_LABEL,)

    def __init__(self, predict_prob: Callable[[list[str]], Any]):
        self.predict_prob = predict_prob

    def score(self, texts: list[str]) -> dict[str, list[float]]:
        return {PROFANITY_LABEL: [float(x) for x in self.predict_prob(list(texts))]}

    def lengths(self, texts: list[str]) -> list[int]:
        return [len(t) for t in texts]


@dataclass(frozen=True)
class Screener:
    """A ready scorer plus what the artifact and card must say about it."""

    scorer: Scorer
    model: str
    """Short name, also written to the ``model`` column (e.g. ``detoxify:original``)."""
    device: str
    limitations: str
    fallback_used: bool = False
    warnings: tuple[str, ...] = ()
    description: str = ""
    """Longer text: package version, checkpoint file, where it was loaded from."""


# --- locating the model's files -------------------------------------------------------------
def hf_hub_cache() -> Path:
    """The Hugging Face hub cache, from the environment as it is now (``HF_HUB_CACHE``, else
    ``HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub``, else ``~/.cache/...``)."""
    explicit = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if explicit:
        return Path(os.path.expandvars(explicit)).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.join("~", ".cache")), "huggingface")
    return Path(os.path.expandvars(home)).expanduser() / "hub"


def _detoxify_urls() -> dict[str, str]:
    from detoxify.detoxify import MODEL_URLS

    return dict(MODEL_URLS)


def torch_hub_checkpoint(model: str) -> tuple[Path, str]:
    """(where torch.hub keeps the released checkpoint of ``model``, its download URL)."""
    import torch.hub

    url = _detoxify_urls()[model]
    return Path(torch.hub.get_dir()) / "checkpoints" / url.rsplit("/", 1)[-1], url


def _hf_cached(repo_id: str, filename: str, cache: Path) -> Path | None:
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, filename, cache_dir=cache)
    return Path(found) if isinstance(found, str) else None


def _hf_snapshot_dir(repo_id: str, cache: Path) -> Path:
    """The snapshot folder files of ``repo_id`` would be in (real one if the cache has it)."""
    repo_dir = cache / f"models--{repo_id.replace('/', '--')}"
    ref = repo_dir / "refs" / "main"
    if ref.is_file():
        return repo_dir / "snapshots" / ref.read_text().strip()
    return repo_dir / "snapshots" / "<revision>"


def _missing_hf_files(repo_id: str, tokenizer_groups: Sequence[tuple[str, ...]],
                      cache: Path) -> list[Path]:
    """Missing files of ``repo_id`` in the HF cache: config.json, then the first tokenizer
    group (only if no group is complete)."""
    snapshot = _hf_snapshot_dir(repo_id, cache)
    missing = [] if _hf_cached(repo_id, "config.json", cache) else [snapshot / "config.json"]
    if not any(all(_hf_cached(repo_id, f, cache) for f in group) for group in tokenizer_groups):
        missing += [snapshot / f for f in tokenizer_groups[0] if not _hf_cached(repo_id, f, cache)]
    return missing


def _missing_in_folder(folder: Path, tokenizer_groups: Sequence[tuple[str, ...]]) -> list[Path]:
    missing = [] if (folder / "config.json").is_file() else [folder / "config.json"]
    if not any(all((folder / f).is_file() for f in group) for group in tokenizer_groups):
        missing.append(folder / tokenizer_groups[0][0])
    return missing


def _load_checkpoint(path: Path) -> dict[str, Any]:
    """A checkpoint file, unpickled with ``weights_only=True`` (memory-mapped, so a 400 MB file
    is not read twice): tensors and plain containers load, anything that could run code is
    refused in one line."""
    import torch

    try:
        try:
            loaded = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError:  # legacy (non-zip) format cannot be memory-mapped
            loaded = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CrowdprefError(_refusal(path, exc)) from None
    except Exception as exc:  # noqa: BLE001
        raise CrowdprefError(f"{path}: cannot read the detoxify checkpoint "
                             f"({type(exc).__name__}: {first_line(exc, 300)}): check screening.checkpoint") from None
    if not isinstance(loaded, dict):
        raise CrowdprefError(f"{path}: not a detoxify-format checkpoint (it holds a "
                             f"{type(loaded).__name__}, not a dict): check screening.checkpoint")
    return loaded


def _refusal(where: Path | str, exc: BaseException) -> str:
    """The one-line refusal of a checkpoint holding Python objects ``weights_only`` rejects."""
    found = re.search(r"Unsupported global: GLOBAL (\S+)", str(exc))
    what = f" ({found.group(1)})" if found else ""
    return (f"{where}: refused: the checkpoint holds Python objects other than tensors and plain "
            f"containers{what}, and unpickling them could run arbitrary code; on a machine where "
            "you trust the file, re-save just its parts with torch.save({'config': ckpt['config'], "
            "'state_dict': ckpt['state_dict']}, NEW_FILE) and point screening.checkpoint at NEW_FILE")


def _checkpoint_parts(loaded: dict[str, Any], path: Path | str) -> tuple[dict[str, Any], list[str]]:
    """``config.arch.args`` and the class names of a loaded detoxify-format checkpoint."""
    try:
        args = dict(loaded["config"]["arch"]["args"])
        classes = list(loaded["config"]["dataset"]["args"]["classes"])
        for key in ("model_type", "model_name", "tokenizer_name", "num_classes"):
            args[key]  # noqa: B018 - presence check
        if "state_dict" not in loaded:
            raise KeyError("state_dict")
    except (KeyError, TypeError) as exc:
        raise CrowdprefError(
            f"{path}: not a detoxify-format checkpoint (missing {exc}): it must be a torch.save of "
            "{'config': {'arch': {'args': {model_type, model_name, tokenizer_name, num_classes}}, "
            "'dataset': {'args': {'classes': [...]}}}, 'state_dict': ...}") from None
    return args, classes


def _read_checkpoint_args(path: Path) -> tuple[dict[str, Any], list[str]]:
    """``config.arch.args`` and the class names of a detoxify-format checkpoint file."""
    return _checkpoint_parts(_load_checkpoint(path), path)


def missing_model_files(cfg: ScreeningConfig) -> tuple[list[Path], str]:
    """Files detoxify would need for ``cfg`` that are not on disk, and how to provide them.
    An empty list means everything is local and loading needs no network."""
    cache = hf_hub_cache()
    if cfg.checkpoint is None:
        ckpt, url = torch_hub_checkpoint(cfg.model)
        repo_id, groups = HF_BASE_MODELS[cfg.model]
        missing = [] if ckpt.is_file() else [ckpt]
        missing += _missing_hf_files(repo_id, groups, cache)
        how = (f"on a machine with network download {url} to {ckpt}, and `hf download {repo_id} "
               f"config.json {' '.join(groups[0])} tokenizer_config.json` into the HF cache "
               f"{cache} (copy both caches over, set HF_HUB_OFFLINE=1); or set "
               "screening.checkpoint to a local detoxify-format checkpoint whose model_type is a "
               "local folder with config.json and tokenizer files")
        return missing, how
    args, _ = _read_checkpoint_args(cfg.checkpoint)
    model_type = str(args["model_type"])
    folder = Path(model_type).expanduser()
    if folder.is_dir():
        how = (f"put the base model's config.json and tokenizer files (save_pretrained) into "
               f"{folder}, the folder named by model_type in {cfg.checkpoint}")
        return _missing_in_folder(folder, ANY_TOKENIZER), how
    if model_type.startswith((".", "/", "~")) or folder.is_absolute():
        return [folder], (f"model_type in {cfg.checkpoint} names this folder: create it with the "
                          "base model's config.json and tokenizer files, or fix the checkpoint")
    groups = next((g for name, g in HF_BASE_MODELS.values() if name == model_type), ANY_TOKENIZER)
    how = (f"`hf download {model_type} config.json {' '.join(groups[0])} tokenizer_config.json` "
           f"into the HF cache {cache} on a machine with network and copy it over (set "
           f"HF_HUB_OFFLINE=1), or rewrite {cfg.checkpoint} with model_type set to a local folder")
    return _missing_hf_files(model_type, groups, cache), how


# --- loading -------------------------------------------------------------------------------
def resolve_device(setting: str) -> str:
    """``auto`` -> ``cuda`` when torch sees a GPU, else ``cpu``; ``cuda`` without one is an error."""
    import torch

    if setting == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if setting == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"screening.device: cuda, but torch {torch.__version__} sees no CUDA GPU: "
                          "set screening.device to auto or cpu (or install a CUDA build of torch)")
    return setting


#: detoxify's own renaming of the Jigsaw class names (``detoxify.detoxify.load_checkpoint``).
DETOXIFY_CLASS_NAMES = {"toxic": "toxicity", "identity_hate": "identity_attack",
                        "severe_toxic": "severe_toxicity"}


def _local_base_model(model_type: str, cache: Path) -> str:
    """``model_type`` as a folder on disk: itself when it is one, else its snapshot in the HF
    cache (which :func:`missing_model_files` has checked holds config and tokenizer)."""
    folder = Path(model_type).expanduser()
    return str(folder) if folder.is_dir() else str(_hf_snapshot_dir(model_type, cache))


def _build_detector(loaded: dict[str, Any], source: Path | str, device: str, *,
                    base_model_folder: Callable[[str], str] | None) -> Any:
    """A ``detoxify.Detoxify`` from an already (safely) loaded checkpoint: detoxify's
    ``get_model_and_tokenizer`` builds the model, detoxify's ``predict`` scores. Mirrors
    ``detoxify.detoxify.load_checkpoint`` without its ``torch.load(weights_only=False)``.
    ``base_model_folder`` maps the checkpoint's ``model_type`` to a local folder (no Hub)."""
    from detoxify import detoxify as dx

    args, classes = _checkpoint_parts(loaded, source)
    if base_model_folder is not None:
        args["model_type"] = base_model_folder(str(args["model_type"]))
    model, tokenizer = dx.get_model_and_tokenizer(**args, state_dict=loaded["state_dict"])
    detector = dx.Detoxify.__new__(dx.Detoxify)
    detector.model, detector.tokenizer = model, tokenizer
    detector.class_names = [DETOXIFY_CLASS_NAMES.get(c, c) for c in classes]
    detector.device = device
    detector.model.to(device)
    return detector


def _download_release(model: str) -> dict[str, Any]:
    """The released checkpoint of ``model`` via torch.hub's cache (downloaded when missing),
    unpickled with ``weights_only=True``."""
    import torch.hub

    url = _detoxify_urls()[model]
    try:
        return torch.hub.load_state_dict_from_url(url, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CrowdprefError(_refusal(url, exc)) from None


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "?"


def load_detoxify(cfg: ScreeningConfig, *, allow_download: bool = False,
                  precision: Precision = "float32") -> Screener:
    """Load detoxify for ``cfg`` through ``detoxify.Detoxify``; every failure is one line.

    Without ``allow_download`` the files are checked first (see the module docstring) and a
    missing one raises a :class:`CrowdprefError` naming its full path and how to provide it."""
    device = resolve_device(cfg.device)
    what = f"checkpoint {cfg.checkpoint}" if cfg.checkpoint else f"the released {cfg.model!r} weights"
    if not allow_download:
        missing, how = missing_model_files(cfg)
        if missing:
            shown = "; ".join(str(p) for p in missing)
            raise CrowdprefError(f"detoxify cannot load {what} offline: missing {shown}: {how}")
    started = time.perf_counter()
    source: Path | str
    if cfg.checkpoint is not None:
        source = cfg.checkpoint
        loaded = _load_checkpoint(cfg.checkpoint)
    elif allow_download:
        source, loaded = _detoxify_urls()[cfg.model], _download_release(cfg.model)
    else:
        source = torch_hub_checkpoint(cfg.model)[0]
        loaded = _load_checkpoint(source)
    cache = hf_hub_cache()
    try:
        with _quiet_progress():
            detector = _build_detector(
                loaded, source, device,
                base_model_folder=None if allow_download else (lambda name: _local_base_model(name, cache)))
    except CrowdprefError:
        raise
    except Exception as exc:  # noqa: BLE001 - any loading failure becomes one line
        raise CrowdprefError(f"detoxify could not load {what} on {device} "
                             f"({type(exc).__name__}: {first_line(exc, 300)}): check the files, or "
                             "set screening.checkpoint to a local detoxify checkpoint") from None
    scorer = DetoxifyScorer(detector, precision)
    if cfg.checkpoint is None:
        model = f"detoxify:{cfg.model}"
        source = torch_hub_checkpoint(cfg.model)[0].name
        limitations = LIMITATIONS[cfg.model]
    else:
        model = f"detoxify:checkpoint:{cfg.checkpoint.name}"
        source = str(cfg.checkpoint)
        limitations = LIMITATIONS["checkpoint"].format(name=cfg.checkpoint.name)
    clash = set(scorer.labels) & {*SCREENING_BASE, "response_id"}
    if clash:
        raise CrowdprefError(f"{source}: label(s) {', '.join(sorted(clash))} clash with "
                             "screening.parquet's own columns: rename the checkpoint's classes")
    description = (f"detoxify {_version('detoxify')} ({source}; labels: {', '.join(scorer.labels)}), "
                   f"loaded in {time.perf_counter() - started:.1f} s on {device}"
                   + (f", {precision} autocast" if precision != "float32" else ""))
    return Screener(scorer, model, device, limitations, description=description)


@contextmanager
def _quiet_progress() -> Iterator[None]:
    from transformers.utils import logging as hf_logging

    bar = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if bar:
            hf_logging.enable_progress_bar()


def load_profanity_check(reason: str | None = None) -> Screener:
    """The alt-profanity-check screener (``reason``: why detoxify is not used - logged loudly)."""
    try:
        from profanity_check import predict_prob
    except Exception as exc:  # noqa: BLE001
        raise CrowdprefError(f"the profanity-check fallback cannot be loaded ({type(exc).__name__}: "
                             f"{first_line(exc, 300)}): install alt-profanity-check") from None
    warnings: tuple[str, ...] = ()
    if reason:
        warning = (f"SCREENING FALLBACK: detoxify was not used ({reason}); screening with "
                   "profanity-check instead, which catches swearing but MISSES hate speech "
                   "without swear words")
        logger.warning(warning)
        warnings = (warning,)
    return Screener(
        ProfanityScorer(predict_prob), "profanity-check", "cpu", LIMITATIONS["profanity-check"],
        fallback_used=reason is not None, warnings=warnings,
        description=f"alt-profanity-check {_version('alt-profanity-check')} (TF-IDF + linear SVM)",
    )


def load_screener(cfg: ScreeningConfig, *, allow_download: bool = False,
                  precision: Precision = "float32") -> Screener:
    """detoxify for ``cfg``; if it cannot be loaded, the profanity-check fallback when (and only
    when) ``cfg.fallback`` names it - with a loud warning - else the one-line error.
    ``precision``: see :class:`DetoxifyScorer` (float32 unless asked)."""
    try:
        return load_detoxify(cfg, allow_download=allow_download, precision=precision)
    except ConfigError:
        raise  # a wrong setting (e.g. device: cuda without a GPU) is not a missing model
    except CrowdprefError as exc:
        if cfg.fallback != "profanity-check":
            raise
        return load_profanity_check(reason=str(exc))


# --- scoring -------------------------------------------------------------------------------
def score_texts(scorer: Scorer, texts: Sequence[str], batch_size: int, *,
                sort_by_length: bool = True,
                progress: Callable[[int, int], None] | None = None) -> dict[str, np.ndarray]:
    """Scores of every text per label, in the order given. With ``sort_by_length`` the texts run
    longest first in batches of similar length (little padding); ``progress(done, total)`` is
    called after each batch."""
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    texts = list(texts)
    n = len(texts)
    out = {label: np.full(n, np.nan) for label in scorer.labels}
    if n == 0:
        return out
    if sort_by_length:
        lengths = np.asarray(scorer.lengths(texts))
        order = np.argsort(-lengths, kind="stable")
    else:
        order = np.arange(n)
    for start in range(0, n, batch_size):
        idx = order[start:start + batch_size]
        scores = scorer.score([texts[i] for i in idx])
        for label in scorer.labels:
            values = scores[label]
            if len(values) != len(idx):
                raise CrowdprefError(f"screening model returned {len(values)} {label} scores for "
                                     f"{len(idx)} texts")
            out[label][idx] = values
        if progress is not None:
            progress(min(start + batch_size, n), n)
    return out


def excluded_response_ids(screening: pd.DataFrame, policy: str, source: str = "screening.parquet") -> set[str]:
    """The response_ids later stages must leave out: the flagged ones under ``drop``, none under
    ``flag`` (flagged answers stay in, marked). The one place this rule is written: pairing,
    aggregation and the release all ask here. An answer whose ``flagged`` is missing was not
    screened, so under ``drop`` nobody can say whether it stays: a one-line error naming
    ``source`` (the file the frame came from)."""
    if policy not in ("flag", "drop"):
        raise ValueError(f"unknown screening policy {policy!r}")
    if policy == "flag" or screening.empty:
        return set()
    missing = screening["flagged"].isna()
    if missing.any():
        ids = screening.loc[missing, "response_id"].astype(str).tolist()
        shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
        raise CrowdprefError(f"{source}: {len(ids)} answer(s) have no 'flagged' value ({shown}), so "
                             "screening.policy 'drop' cannot tell whether they stay: rerun "
                             "screen-responses to rewrite the file")
    return set(screening.loc[screening["flagged"].astype(bool), "response_id"].astype(str))


def score_distribution(frame: pd.DataFrame, labels: Sequence[str], bins: int = 10) -> pd.DataFrame:
    """Per label: mean, quantiles and a histogram of the scores over ``bins`` equal bins of 0-1
    (columns ``0.0-0.1`` ...; the last bin includes 1.0)."""
    edges = np.linspace(0.0, 1.0, bins + 1)
    rows = []
    for label in labels:
        s = frame[label].to_numpy(dtype=float)
        row: dict[str, Any] = {"label": label}
        if len(s):
            q = np.quantile(s, [0.5, 0.9, 0.99])
            row.update(mean=round(float(s.mean()), 4), p50=round(float(q[0]), 4),
                       p90=round(float(q[1]), 4), p99=round(float(q[2]), 4),
                       max=round(float(s.max()), 4))
        else:
            row.update(mean=None, p50=None, p90=None, p99=None, max=None)
        counts, _ = np.histogram(np.clip(s, 0.0, 1.0), bins=edges)
        for lo, hi, c in zip(edges[:-1], edges[1:], counts, strict=True):
            row[f"{lo:.1f}-{hi:.1f}"] = int(c)
        rows.append(row)
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class ScreeningResult:
    """What screening produced: ``frame`` is ``screening.parquet``."""

    frame: pd.DataFrame
    """response_id, model, one float column per label, flagged, flagged_labels."""
    model: str
    device: str
    labels: tuple[str, ...]
    thresholds: dict[str, float]
    """The thresholds applied (label -> score at or above which it flags)."""
    policy: str
    limitations: str
    counts: dict[str, int]
    """Answers at or above the threshold, per thresholded label."""
    fallback_used: bool = False
    warnings: tuple[str, ...] = ()
    description: str = ""
    seconds: float = 0.0
    """Time spent scoring (model loading not included)."""
    enabled: bool = True

    @property
    def n_responses(self) -> int:
        return len(self.frame)

    @property
    def n_flagged(self) -> int:
        return int(self.frame["flagged"].sum()) if len(self.frame) else 0

    def distribution(self, bins: int = 10) -> pd.DataFrame:
        return score_distribution(self.frame, self.labels, bins)

    def summary(self) -> str:
        """One line for logs."""
        if not self.enabled:
            return f"screening disabled: {self.n_responses} answers not checked"
        rate = (f", {self.n_responses / self.seconds:.1f} texts/s"
                if self.seconds > 0 and self.n_responses else "")
        per = ", ".join(f"{k} {v}" for k, v in self.counts.items() if v) or "none per label"
        action = "dropped from the preference data" if self.policy == "drop" else "kept, marked"
        fallback = " [FALLBACK SCREENER]" if self.fallback_used else ""
        return (f"screened {self.n_responses} answers with {self.model}{fallback} on {self.device}"
                f"{rate}: {self.n_flagged} flagged ({per}); flagged answers are {action}")

    def card_summary(self) -> dict[str, Any]:
        """Plain data for the dataset card (also written as ``screening.json``)."""
        return {
            "enabled": self.enabled,
            "model": self.model,
            "description": self.description,
            "device": self.device,
            "labels": list(self.labels),
            "thresholds": dict(self.thresholds),
            "policy": self.policy,
            "n_responses": self.n_responses,
            "n_flagged": self.n_flagged,
            "flagged_per_label": dict(self.counts),
            "fallback_used": self.fallback_used,
            "warnings": list(self.warnings),
            "limitations": self.limitations,
        }

    def card_markdown(self) -> str:
        """A markdown section on how answers were screened, for the artifact and the card."""
        lines = ["## Screening", ""]
        if self.warnings:
            lines += [f"> **WARNING:** {w}" for w in self.warnings] + [""]
        if not self.enabled:
            return "\n".join(lines + [self.limitations, ""])
        action = ("removed from the preference data (listed in screening.parquet)"
                  if self.policy == "drop" else "kept and marked (chosen_flagged / rejected_flagged)")
        lines += [
            f"- Classifier: `{self.model}`{' (FALLBACK)' if self.fallback_used else ''}"
            + (f" - {self.description}" if self.description else ""),
            f"- Device: {self.device}",
            f"- Thresholds: " + (", ".join(f"{k} >= {v:g}" for k, v in self.thresholds.items())
                                 or "(none)"),
            f"- Flagged: {self.n_flagged} of {self.n_responses} answers; {action}",
            "",
            "| label | threshold | flagged |",
            "| --- | --- | --- |",
        ]
        lines += [f"| {k} | {self.thresholds[k]:g} | {v} |" for k, v in self.counts.items()]
        lines += ["", f"**Limitations.** {self.limitations}", ""]
        return "\n".join(lines)


def split_for_workers(responses: pd.DataFrame, n_chunks: int) -> list[pd.DataFrame]:
    """Chunks of similar total length for parallel screening: answers sorted by length and
    dealt round-robin, so every chunk gets long and short ones (and each chunk still sorts its
    own batches by length)."""
    order = responses["text"].fillna("").str.len().sort_values(kind="stable").index
    n_chunks = max(1, min(n_chunks, len(responses)))
    return [responses.loc[order[i::n_chunks]].sort_index() for i in range(n_chunks)]


def combine_results(parts: Sequence[ScreeningResult], order: Sequence[str]) -> ScreeningResult:
    """One result from chunk results (same model and config), rows in ``order`` (response ids)."""
    if not parts:
        raise ValueError("no screening results to combine")
    first = parts[0]
    models = {p.model for p in parts}
    if len(models) != 1:
        raise CrowdprefError(f"screening chunks used different models ({', '.join(sorted(models))}): rerun screening")
    frame = pd.concat([p.frame for p in parts]).set_index("response_id").loc[list(order)].reset_index()
    counts = {label: sum(p.counts.get(label, 0) for p in parts) for label in first.counts}
    warnings = tuple(dict.fromkeys(w for p in parts for w in p.warnings))
    return replace(first, frame=frame, counts=counts, warnings=warnings, seconds=max(p.seconds for p in parts))


def _check_texts(responses: pd.DataFrame) -> list[str]:
    missing = [c for c in ("response_id", "text") if c not in responses.columns]
    if missing:
        raise CrowdprefError(f"responses: missing column(s) {', '.join(missing)}: screening needs "
                             "response_id and text (responses.parquet from collect-responses)")
    ids = responses["response_id"].astype(str)
    dupes = ids[ids.duplicated()].unique().tolist()
    if dupes:
        raise CrowdprefError(f"responses: duplicate response_id(s) {', '.join(dupes[:10])}: "
                             "each answer must appear once (re-export responses.parquet)")
    texts = responses["text"]
    empty = [rid for rid, t in zip(ids, texts, strict=True)
             if not isinstance(t, str) or not t.strip()]
    if empty:
        more = f" (and {len(empty) - 10} more)" if len(empty) > 10 else ""
        raise CrowdprefError(f"responses: empty text for response_id(s) {', '.join(empty[:10])}{more}: "
                             "every answer needs text to be screened - fix or remove them in "
                             "responses.parquet")
    return [str(t) for t in texts]


def screen_responses(responses: pd.DataFrame, cfg: ScreeningConfig, *,
                     screener: Screener | None = None, allow_download: bool = False,
                     progress: Callable[[int, int], None] | None = None) -> ScreeningResult:
    """Screen every answer in ``responses`` (columns of ``contracts.RESPONSES``; response_id and
    text are used). ``screener``: an already loaded one (default: :func:`load_screener`).

    Raises :class:`CrowdprefError` for empty texts (naming the response_ids), duplicate ids,
    a model that cannot be loaded (unless the fallback is configured) and thresholds on labels
    the model does not have."""
    texts = _check_texts(responses)
    ids = responses["response_id"].astype(str).tolist()
    if not cfg.enabled:
        frame = pd.DataFrame({"response_id": pd.Series(ids, dtype=str),
                              "model": pd.Series(["none"] * len(ids), dtype=str),
                              "flagged": pd.Series([False] * len(ids), dtype=bool),
                              "flagged_labels": pd.Series([""] * len(ids), dtype=str)})
        return ScreeningResult(frame, "none", "-", (), {}, cfg.policy, LIMITATIONS["disabled"],
                               {}, enabled=False)
    if screener is None:
        screener = load_screener(cfg, allow_download=allow_download)
    labels = screener.scorer.labels
    warnings = list(screener.warnings)
    if screener.fallback_used or isinstance(screener.scorer, ProfanityScorer):
        thresholds = {PROFANITY_LABEL: cfg.thresholds.get(PROFANITY_LABEL, PROFANITY_DEFAULT_THRESHOLD)}
        ignored = [k for k in cfg.thresholds if k != PROFANITY_LABEL]
        if ignored and screener.fallback_used:
            warnings.append(f"profanity-check has one score ('profanity', threshold "
                            f"{thresholds[PROFANITY_LABEL]:g}); the thresholds for "
                            f"{', '.join(ignored)} do not apply")
    else:
        unknown = [k for k in cfg.thresholds if k not in labels]
        if unknown:
            raise ConfigError(f"screening.thresholds.{unknown[0]}: not a label of {screener.model} "
                              f"(its labels: {', '.join(labels)}): use those names")
        thresholds = {k: float(v) for k, v in cfg.thresholds.items()}

    started = time.perf_counter()
    scores = score_texts(screener.scorer, texts, cfg.batch_size, progress=progress)
    seconds = time.perf_counter() - started

    frame = pd.DataFrame({"response_id": pd.Series(ids, dtype=str),
                          "model": pd.Series([screener.model] * len(ids), dtype=str)})
    for label in labels:
        frame[label] = scores[label].astype(float)
    over = {label: frame[label].to_numpy() >= t for label, t in thresholds.items()}
    hit_labels = [label for label in labels if label in over]
    frame["flagged"] = np.logical_or.reduce([over[k] for k in hit_labels]) if hit_labels and len(frame) \
        else np.zeros(len(frame), dtype=bool)
    frame["flagged_labels"] = pd.Series(
        [",".join(label for label in hit_labels if over[label][i]) for i in range(len(frame))],
        dtype=str, index=frame.index)
    frame = frame[["response_id", "model", *labels, "flagged", "flagged_labels"]]
    counts = {label: int(over[label].sum()) for label in hit_labels}
    unscored = frame.loc[frame[list(labels)].isna().any(axis=1), "response_id"].tolist()
    if unscored:
        raise CrowdprefError(f"{screener.model} returned no score (NaN) for response_id(s) "
                             f"{', '.join(unscored[:10])}: check the model")
    for warning in warnings[len(screener.warnings):]:
        logger.warning(warning)
    return ScreeningResult(
        frame=frame, model=screener.model, device=screener.device, labels=labels,
        thresholds={k: thresholds[k] for k in hit_labels}, policy=cfg.policy,
        limitations=screener.limitations, counts=counts, fallback_used=screener.fallback_used,
        warnings=tuple(warnings), description=screener.description, seconds=seconds,
    )
