"""crowdpref.screening on the REAL detoxify code path (``detoxify.Detoxify``) with a tiny
BERT checkpoint built and trained in seconds (tests/fakes/tiny_detoxify.py), fully offline:
scores per label, per-label thresholds, flag/drop policies, length-sorted batching, the
one-line error for missing weights, the seeded-cache path, the profanity-check fallback (only
when configured, and loudly), empty texts, the refusal of checkpoints that would run code when
unpickled, and loading without switching Hub access off for the whole process."""

from __future__ import annotations

import logging
import random
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from crowdpref.config import DETOXIFY_LABELS, ScreeningConfig
from crowdpref.contracts import SCREENING_BASE
from crowdpref.errors import ConfigError, CrowdprefError
from crowdpref.screening import (
    DetoxifyScorer,
    ProfanityScorer,
    Screener,
    excluded_response_ids,
    load_screener,
    resolve_device,
    score_texts,
    screen_responses,
)
from tests.fakes.tiny_detoxify import (
    BENIGN_TEXTS,
    INSULT_TEXTS,
    LABELS,
    THREAT_TEXTS,
    TinyDetoxify,
    detoxify_checkpoint,
    seed_release_caches,
    synthetic_corpus,
    tiny_detoxify,  # noqa: F401 - the session fixture
)

TEXTS = [*BENIGN_TEXTS, *INSULT_TEXTS, *THREAT_TEXTS]
KIND = ["benign"] * len(BENIGN_TEXTS) + ["insult"] * len(INSULT_TEXTS) + ["threat"] * len(THREAT_TEXTS)


def responses(texts: list[str]) -> pd.DataFrame:
    n = len(texts)
    return pd.DataFrame({
        "response_id": [f"r_{i:016x}" for i in range(n)],
        "question_id": "q_0000000000000001",
        "category": "empathy",
        "participant_key": "p_000000000001",
        "text": texts,
        "quality": 4,
        "submitted_at": pd.Timestamp("2026-01-01", tz="UTC"),
    })


@pytest.fixture()
def offline_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """Empty torch and HF caches, Hub access off."""
    torch_home, hf_home = tmp_path / "torch", tmp_path / "hf"
    monkeypatch.setenv("TORCH_HOME", str(torch_home))
    monkeypatch.setenv("HF_HOME", str(hf_home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    return torch_home, hf_home


@pytest.fixture(scope="module")
def tiny_cfg(tiny_detoxify: TinyDetoxify) -> ScreeningConfig:  # noqa: F811
    return ScreeningConfig(checkpoint=tiny_detoxify.checkpoint, device="cpu", batch_size=4)


@pytest.fixture(scope="module")
def screener(tiny_cfg: ScreeningConfig) -> Screener:
    return load_screener(tiny_cfg)


def test_real_detoxify_scores_every_label_and_flags_toxic_not_benign(
        tiny_cfg: ScreeningConfig, screener: Screener) -> None:
    assert screener.model == "detoxify:checkpoint:tiny-detoxify.ckpt" and screener.device == "cpu"
    assert not screener.fallback_used and not screener.warnings
    assert screener.scorer.labels == LABELS  # Jigsaw names renamed by detoxify itself
    result = screen_responses(responses(TEXTS), tiny_cfg, screener=screener)
    frame = result.frame
    assert list(frame.columns) == ["response_id", "model", *LABELS, "flagged", "flagged_labels"]
    assert set(SCREENING_BASE) <= set(frame.columns)
    assert all(frame[label].dtype == np.float64 for label in LABELS)
    assert frame[list(LABELS)].stack().between(0, 1).all()
    assert frame["response_id"].tolist() == responses(TEXTS)["response_id"].tolist()
    by_kind = dict(zip(frame["response_id"], KIND, strict=True))
    for row in frame.itertuples():
        kind = by_kind[row.response_id]
        if kind == "benign":
            assert not row.flagged and row.flagged_labels == "" and row.toxicity < 0.2
        elif kind == "insult":
            assert row.flagged and row.flagged_labels == "toxicity,insult", row
        else:
            assert row.flagged and row.flagged_labels == "toxicity,threat", row
    assert result.counts == {"toxicity": 4, "severe_toxicity": 0, "obscene": 0, "threat": 2,
                             "insult": 2, "identity_attack": 0}
    assert result.n_flagged == 4 and result.n_responses == len(TEXTS)
    assert "4 flagged" in result.summary() and "kept, marked" in result.summary()
    card = result.card_markdown()
    assert "| insult | 0.5 | 2 |" in card and "custom detoxify-format checkpoint" in card
    dist = result.distribution()
    assert list(dist["label"]) == list(LABELS)
    assert dist.filter(like="-").sum(axis=1).eq(len(TEXTS)).all()  # histogram covers every answer


def test_thresholds_are_per_label(tiny_detoxify: TinyDetoxify, screener: Screener) -> None:  # noqa: F811
    only_threat = ScreeningConfig(checkpoint=tiny_detoxify.checkpoint, thresholds={"threat": 0.5})
    result = screen_responses(responses(TEXTS), only_threat, screener=screener)
    assert result.frame["flagged"].tolist() == [k == "threat" for k in KIND]
    assert set(result.frame.loc[result.frame["flagged"], "flagged_labels"]) == {"threat"}
    assert result.counts == {"threat": 2} and result.thresholds == {"threat": 0.5}
    assert list(result.frame.columns)[2:8] == list(LABELS)  # every score kept, thresholded or not

    unreachable = ScreeningConfig(checkpoint=tiny_detoxify.checkpoint, thresholds={"toxicity": 1.0})
    assert not screen_responses(responses(TEXTS), unreachable, screener=screener).frame["flagged"].any()

    typo = ScreeningConfig(checkpoint=tiny_detoxify.checkpoint, thresholds={"toxic": 0.5})
    with pytest.raises(ConfigError, match=r"screening.thresholds.toxic: not a label .*toxicity"):
        screen_responses(responses(TEXTS), typo, screener=screener)


def test_policy_flag_keeps_everything_and_drop_marks_the_excluded(
        tiny_detoxify: TinyDetoxify, screener: Screener) -> None:  # noqa: F811
    flag = screen_responses(responses(TEXTS), ScreeningConfig(checkpoint=tiny_detoxify.checkpoint),
                            screener=screener)
    assert len(flag.frame) == len(TEXTS) and excluded_response_ids(flag.frame, flag.policy) == set()
    drop = screen_responses(responses(TEXTS),
                            ScreeningConfig(checkpoint=tiny_detoxify.checkpoint, policy="drop"),
                            screener=screener)
    assert len(drop.frame) == len(TEXTS)  # still lists every answer, with its flag
    flagged_ids = set(drop.frame.loc[drop.frame["flagged"], "response_id"])
    assert len(flagged_ids) == 4 and excluded_response_ids(drop.frame, drop.policy) == flagged_ids
    # later stages read screening.parquet back and ask the same question
    assert excluded_response_ids(drop.frame.copy(), "drop") == flagged_ids
    assert excluded_response_ids(drop.frame, "flag") == set()
    assert "dropped from the preference data" in drop.summary()


def test_length_sorted_batches_keep_the_original_order(screener: Screener) -> None:
    texts, _ = synthetic_corpus(37, seed=3)
    rng = random.Random(5)
    texts = [" ".join([t] * rng.randint(1, 6)) for t in texts]  # lengths from ~5 to ~120 tokens
    scorer = screener.scorer
    batches: list[list[int]] = []

    class Recording:
        labels = scorer.labels

        def lengths(self, xs: list[str]) -> list[int]:
            return scorer.lengths(xs)

        def score(self, xs: list[str]) -> dict[str, list[float]]:
            batches.append(scorer.lengths(xs))
            return scorer.score(xs)

    batched = score_texts(Recording(), texts, batch_size=8)
    assert [len(b) for b in batches] == [8, 8, 8, 8, 5]
    for earlier, later in zip(batches, batches[1:]):  # longest first, similar lengths together
        assert min(earlier) >= max(later)

    one_by_one = score_texts(scorer, texts, batch_size=1, sort_by_length=False)  # batches of one
    direct = [screener.scorer.detector.predict(t) for t in texts]  # what a first script would do
    for label in scorer.labels:
        np.testing.assert_allclose(batched[label], one_by_one[label], atol=1e-5)
        np.testing.assert_allclose(batched[label], [d[label] for d in direct], atol=1e-5)


def test_bfloat16_autocast_is_opt_in_and_close(tiny_cfg: ScreeningConfig, screener: Screener) -> None:
    assert screener.scorer.precision == "float32"
    bf16 = Screener(DetoxifyScorer(screener.scorer.detector, precision="bfloat16"), screener.model,
                    screener.device, screener.limitations)
    a = screen_responses(responses(TEXTS), tiny_cfg, screener=screener).frame
    b = screen_responses(responses(TEXTS), tiny_cfg, screener=bf16).frame
    np.testing.assert_allclose(a[list(LABELS)], b[list(LABELS)], atol=3e-2)
    assert a["flagged_labels"].tolist() == b["flagged_labels"].tolist()
    with pytest.raises(ValueError, match="precision"):
        DetoxifyScorer(screener.scorer.detector, precision="float16")  # type: ignore[arg-type]


def _no_connections(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every outgoing socket connection attempted from now on (refused and recorded)."""
    import socket

    attempts: list[object] = []

    def refuse(self: socket.socket, address: object) -> None:
        attempts.append(address)
        raise OSError("network use in a test that must not touch it")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    return attempts


def test_missing_weights_is_one_line_naming_the_file(offline_caches: tuple[Path, Path],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    torch_home, hf_home = offline_caches
    attempts = _no_connections(monkeypatch)
    with pytest.raises(CrowdprefError) as err:
        load_screener(ScreeningConfig(model="original"))
    assert attempts == []  # checked on disk: no network attempt
    message = str(err.value)
    assert "\n" not in message
    ckpt = torch_home / "hub" / "checkpoints" / "toxic_original-c1212f89.ckpt"
    assert f"missing {ckpt}" in message
    assert f"{hf_home / 'hub' / 'models--bert-base-uncased' / 'snapshots'}" in message
    assert "https://github.com/unitaryai/detoxify/releases/download/v0.1-alpha/toxic_original-c1212f89.ckpt" in message
    assert "screening.checkpoint" in message

    with pytest.raises(CrowdprefError, match="unbiased.*toxic_debiased-c7548aa0.ckpt.*roberta-base"):
        load_screener(ScreeningConfig(model="unbiased", thresholds={"toxicity": 0.5}))


def test_seeded_caches_load_the_released_model_path_offline(
        offline_caches: tuple[Path, Path], tiny_detoxify: TinyDetoxify,  # noqa: F811
        screener: Screener, monkeypatch: pytest.MonkeyPatch) -> None:
    torch_home, hf_home = offline_caches
    seed_release_caches(tiny_detoxify, torch_home, hf_home)
    monkeypatch.delenv("HF_HUB_OFFLINE")  # the loader reads the cache folders, never the Hub
    from huggingface_hub import constants

    assert not constants.HF_HUB_OFFLINE
    seen: set[bool] = set()
    done = threading.Event()

    def watch() -> None:  # the process-wide Hub switch, sampled while the model loads
        while not done.is_set():
            seen.add(bool(constants.HF_HUB_OFFLINE))
            time.sleep(0.001)

    watcher = threading.Thread(target=watch)
    watcher.start()
    attempts = _no_connections(monkeypatch)
    try:
        released = load_screener(ScreeningConfig(model="original", device="auto"))
    finally:
        done.set()
        watcher.join()
    assert attempts == []  # everything came from the caches
    assert seen == {False}  # other threads of the process never saw Hub access switched off
    assert released.model == "detoxify:original" and not released.fallback_used
    assert released.device == ("cuda" if torch.cuda.is_available() else "cpu")
    assert "toxic_original-c1212f89.ckpt" in released.description
    assert "Jigsaw Toxic Comment" in released.limitations
    a = score_texts(released.scorer, TEXTS, 4)
    b = score_texts(screener.scorer, TEXTS, 4)
    for label in LABELS:
        np.testing.assert_allclose(a[label], b[label], atol=1e-5)


def test_fallback_only_when_configured_and_loudly(
        offline_caches: tuple[Path, Path], caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(CrowdprefError, match="missing"):
        screen_responses(responses(TEXTS), ScreeningConfig(model="original"))
    texts = ["Have a lovely day, thank you for listening.", "You are a fucking idiot."]
    with caplog.at_level(logging.WARNING, logger="crowdpref.screening"):
        result = screen_responses(responses(texts),
                                  ScreeningConfig(model="original", fallback="profanity-check"))
    assert result.fallback_used and result.model == "profanity-check"
    assert isinstance(load_screener(ScreeningConfig(model="original", fallback="profanity-check"))
                      .scorer, ProfanityScorer)
    assert any("SCREENING FALLBACK" in r.getMessage() and "toxic_original-c1212f89.ckpt" in r.getMessage()
               for r in caplog.records)
    assert any("SCREENING FALLBACK" in w for w in result.warnings)
    assert any("do not apply" in w for w in result.warnings)  # detoxify label thresholds unused
    assert list(result.frame.columns) == ["response_id", "model", "profanity", "flagged",
                                          "flagged_labels"]
    assert result.frame["flagged"].tolist() == [False, True]
    assert result.frame["flagged_labels"].tolist() == ["", "profanity"]
    assert result.thresholds == {"profanity": 0.5} and result.counts == {"profanity": 1}
    assert "MISSES hate speech" in result.limitations
    assert "[FALLBACK SCREENER]" in result.summary()
    assert "WARNING" in result.card_markdown() and "(FALLBACK)" in result.card_markdown()
    assert result.card_summary()["fallback_used"] is True


def test_empty_texts_name_their_response_ids(tiny_cfg: ScreeningConfig) -> None:
    frame = responses(["A kind answer.", "", "   ", "Another answer."])
    frame.loc[3, "text"] = None
    with pytest.raises(CrowdprefError) as err:
        screen_responses(frame, tiny_cfg)
    message = str(err.value)
    ids = frame["response_id"]
    assert "empty text" in message and ids[1] in message and ids[2] in message and ids[3] in message
    assert ids[0] not in message and "\n" not in message

    dupes = responses(["One.", "Two."])
    dupes.loc[1, "response_id"] = dupes.loc[0, "response_id"]
    with pytest.raises(CrowdprefError, match="duplicate response_id"):
        screen_responses(dupes, tiny_cfg)


def test_checkpoint_whose_model_folder_lacks_files(tiny_detoxify: TinyDetoxify,  # noqa: F811
                                                   tmp_path: Path) -> None:
    empty = tmp_path / "base-model"
    empty.mkdir()
    state = torch.load(tiny_detoxify.checkpoint, map_location="cpu", weights_only=True)["state_dict"]
    broken = tmp_path / "broken.ckpt"
    torch.save(detoxify_checkpoint(str(empty), state), broken)
    with pytest.raises(CrowdprefError, match=f"missing {empty / 'config.json'}"):
        load_screener(ScreeningConfig(checkpoint=broken))
    not_detoxify = tmp_path / "plain.ckpt"
    torch.save(state, not_detoxify)
    with pytest.raises(CrowdprefError, match="not a detoxify-format checkpoint"):
        load_screener(ScreeningConfig(checkpoint=not_detoxify))
    # ...and a broken checkpoint falls back only when the study says so
    fallback = load_screener(ScreeningConfig(checkpoint=broken, fallback="profanity-check"))
    assert fallback.fallback_used


def test_device_choice() -> None:
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="screening.device: cuda"):
            resolve_device("cuda")


def test_disabled_screening_marks_nothing_and_loads_no_model() -> None:
    result = screen_responses(responses(TEXTS), ScreeningConfig(enabled=False))
    assert list(result.frame.columns) == SCREENING_BASE and len(result.frame) == len(TEXTS)
    assert not result.frame["flagged"].any() and not result.enabled
    assert "disabled" in result.summary() and "disabled" in result.limitations


def test_default_thresholds_match_the_original_labels() -> None:
    assert tuple(ScreeningConfig().thresholds) == DETOXIFY_LABELS["original"] == LABELS


class _RunsCodeWhenUnpickled:
    """An object whose unpickling calls a function: what a hostile checkpoint would hold."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (Path.touch, (str(self.marker),))  # type: ignore[return-value]


def test_a_checkpoint_that_would_run_code_is_refused_unrun(tiny_detoxify: TinyDetoxify,  # noqa: F811
                                                            tmp_path: Path) -> None:
    loaded = torch.load(tiny_detoxify.checkpoint, map_location="cpu", weights_only=True)
    marker = tmp_path / "code-ran"
    hostile = tmp_path / "hostile.ckpt"
    torch.save({**loaded, "hyper_parameters": _RunsCodeWhenUnpickled(marker)}, hostile)
    with pytest.raises(CrowdprefError) as err:
        load_screener(ScreeningConfig(checkpoint=hostile))
    message = str(err.value)
    assert not marker.exists()  # nothing in the pickle ran
    assert "\n" not in message and str(hostile) in message
    assert "refused" in message and "could run arbitrary code" in message
    assert "(getattr)" in message  # names the global it would have had to call
    assert "screening.checkpoint" in message
    # the plain parts of the same checkpoint, re-saved as the message says, load and score
    plain = tmp_path / "plain.ckpt"
    torch.save({"config": loaded["config"], "state_dict": loaded["state_dict"]}, plain)
    assert load_screener(ScreeningConfig(checkpoint=plain)).model == "detoxify:checkpoint:plain.ckpt"


def test_the_drop_rule_is_one_function_and_a_missing_flag_stops_it() -> None:
    frame = pd.DataFrame({"response_id": ["r1", "r2", "r3"], "flagged": [True, False, True]})
    assert excluded_response_ids(frame, "flag") == set()
    assert excluded_response_ids(frame, "drop") == {"r1", "r3"}
    # object dtype, as a parquet round trip with a missing value gives it
    unscreened = pd.DataFrame({"response_id": ["r1", "r2", "r3"], "flagged": [True, None, False]},
                              dtype=object)
    assert excluded_response_ids(unscreened, "flag") == set()  # nothing is dropped anyway
    with pytest.raises(CrowdprefError) as err:
        excluded_response_ids(unscreened, "drop", source="/run/screening.parquet")
    message = str(err.value)
    assert "\n" not in message and message.startswith("/run/screening.parquet: 1 answer(s)")
    assert "r2" in message and "rerun screen-responses" in message
    with pytest.raises(ValueError, match="unknown screening policy"):
        excluded_response_ids(frame, "remove")
