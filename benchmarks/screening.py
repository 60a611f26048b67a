"""Benchmark: screening answers one at a time (as a first script would call
``Detoxify.predict(text)``) against crowdpref's batched, length-sorted path - same run, same
model, same texts.

    .venv/bin/python benchmarks/screening.py [--n 2000] [--naive-n 100] [--budget-s 120]
                                             [--batch-size 64] [--device auto|cpu|cuda]

Model: bert-base-sized (BertConfig defaults: 12 layers, hidden 768, ~110M parameters) with
RANDOM weights - the compute of detoxify's 'original' model, built locally (no download) with
a WordPiece tokenizer trained on the benchmark's own phrase bank, saved as a detoxify-format
checkpoint whose model_type is that local folder, and loaded through
``crowdpref.screening.load_screener`` -> ``detoxify.Detoxify(checkpoint=...)``, i.e. the code
path the screen-responses flow runs. Built once under ``--workdir`` (~440 MB) and reused.

Texts: ``--n`` answers of 5-120 words (uniform) from phrase banks. The naive path runs on a
random subset of ``--naive-n`` texts (on 2 CPU cores bert-base does a few texts a second); the
batched path runs random chunks of ``--chunk`` texts (each sorted by length, then batched)
until ``--budget-s`` is spent or all texts are done - so both rates are over the same length
distribution. Also printed: padding waste of sorted vs unsorted batches, and the largest score
difference between the two paths on the naive subset. Target: batched >= 3x naive.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from crowdpref.config import ScreeningConfig  # noqa: E402
from crowdpref.screening import DetoxifyScorer, load_screener, resolve_device, score_texts  # noqa: E402

MODEL_VERSION = "bert-base-random-v1"
LABELS = ["toxic", "severe_toxic", "obscene", "threat", "insult", "identity_hate"]

OPENERS = (
    "I think", "In my experience", "Honestly", "From what I have seen", "To be fair",
    "It seems to me that", "My view is that", "When this happened to me", "I would say",
    "Most people I know feel that", "If I were in that situation", "Looking back",
)
CLAUSES = (
    "the best first step is to listen without interrupting",
    "people often want to be understood more than they want advice",
    "a short apology goes a long way when it is sincere",
    "it helps to ask what the other person actually needs",
    "cultural background changes what counts as polite",
    "humour can ease tension but it can also hurt when the timing is wrong",
    "trust is built slowly through small promises that are kept",
    "you should name the feeling before trying to fix the problem",
    "staying calm makes it easier for everyone to think clearly",
    "it is fine to set a boundary as long as you explain it kindly",
    "sarcasm is easy to misread in a text message",
    "a neutral third person can help when both sides are upset",
    "sharing credit with the team makes people more willing to help next time",
    "being honest about your own mistakes encourages others to do the same",
    "silence is not always agreement and it is worth checking",
    "different generations read the same gesture in different ways",
)
CONNECTORS = ("and", "because", "so", "but", "although", "which means", "and in the end")
CLOSERS = (
    "That is what I would do.", "It depends on the people involved.",
    "Everyone deserves that much respect.", "It worked for me more than once.",
    "That is my honest answer.", "Small things matter here.",
)


def make_answers(n: int, seed: int) -> list[str]:
    """``n`` answers of 5-120 words (uniform) from the phrase banks."""
    rng = random.Random(seed)
    answers = []
    for _ in range(n):
        target = rng.randint(5, 120)
        words: list[str] = []
        while len(words) < target:
            sentence = f"{rng.choice(OPENERS)} {rng.choice(CLAUSES)}"
            while rng.random() < 0.5:
                sentence += f" {rng.choice(CONNECTORS)} {rng.choice(CLAUSES)}"
            words += (sentence + ". " + (rng.choice(CLOSERS) if rng.random() < 0.3 else "")).split()
        text = " ".join(words[:target])
        answers.append(text.rstrip(".") + ".")
    return answers


def build_model(workdir: Path, corpus: list[str]) -> Path:
    """bert-base-sized random model + trained tokenizer as a detoxify checkpoint (cached)."""
    checkpoint = workdir / f"{MODEL_VERSION}.ckpt"
    if checkpoint.is_file():
        return checkpoint
    import torch
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    folder = workdir / MODEL_VERSION
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(corpus, trainers.WordPieceTrainer(
        vocab_size=8000, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]))
    BertTokenizer(vocab=tok.get_vocab(), model_max_length=512).save_pretrained(folder)
    config = BertConfig(num_labels=len(LABELS))  # defaults: 12 layers, hidden 768, 30522 vocab
    config.save_pretrained(folder)
    torch.manual_seed(0)
    model = BertForSequenceClassification(config).eval()
    tmp = checkpoint.with_suffix(".tmp")
    torch.save({
        "config": {"arch": {"args": {"model_type": str(folder),
                                     "model_name": "BertForSequenceClassification",
                                     "tokenizer_name": "BertTokenizer",
                                     "num_classes": len(LABELS)}},
                   "dataset": {"args": {"classes": LABELS}}},
        "state_dict": model.state_dict(),
    }, tmp)
    tmp.replace(checkpoint)
    return checkpoint


def padding_waste(lengths: np.ndarray, batch_size: int, sort: bool) -> float:
    """Share of padded positions when batches pad to their longest text."""
    order = np.argsort(-lengths, kind="stable") if sort else np.arange(len(lengths))
    real = padded = 0
    for start in range(0, len(order), batch_size):
        batch = lengths[order[start:start + batch_size]]
        real += int(batch.sum())
        padded += int(batch.max()) * len(batch)
    return 1 - real / padded


def sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


class Clock:
    """Seconds and texts per path, summed over the interleaved rounds."""

    def __init__(self, device: str):
        self.device = device
        self.seconds: dict[str, float] = {}
        self.texts: dict[str, int] = {}

    def run(self, name: str, n: int, fn):
        sync(self.device)
        started = time.perf_counter()
        out = fn()
        sync(self.device)
        self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started
        self.texts[name] = self.texts.get(name, 0) + n
        return out

    def rate(self, name: str) -> float:
        return self.texts[name] / self.seconds[name]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2000, help="answers generated")
    parser.add_argument("--naive-n", type=int, default=100, help="texts for the one-at-a-time path")
    parser.add_argument("--rounds", type=int, default=5,
                        help="the paths alternate in this many rounds (fair under CPU contention)")
    parser.add_argument("--budget-s", type=float, default=120.0,
                        help="no more sorted chunks once the batched path has used this")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--bf16", action="store_true",
                        help="also time the batched path under bfloat16 autocast (opt-in precision)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, default=REPO / "test-output" / "bench-screening")
    args = parser.parse_args()

    import torch

    device = resolve_device(args.device)
    answers = make_answers(args.n, args.seed)
    args.workdir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    checkpoint = build_model(args.workdir, make_answers(5000, args.seed + 1) + answers)
    built = time.perf_counter() - started
    cfg = ScreeningConfig(checkpoint=checkpoint, device=device, batch_size=args.batch_size,
                          thresholds={"toxicity": 0.5})
    started = time.perf_counter()
    screener = load_screener(cfg)
    loaded = time.perf_counter() - started
    scorer = screener.scorer
    detector = scorer.detector
    n_params = sum(p.numel() for p in detector.model.parameters())
    lengths = np.asarray(scorer.lengths(answers))
    words = np.asarray([len(a.split()) for a in answers])
    threads = torch.get_num_threads() if device == "cpu" else None
    rounds = max(1, args.rounds)
    chunk = -(-len(answers) // rounds)

    print(f"device: {device}" + (f" ({threads} torch threads, {os.cpu_count()} CPUs, load average "
                                  f"{os.getloadavg()[0]:.1f} at start)" if threads else
                                 f" ({torch.cuda.get_device_name()})"))
    print(f"model: {screener.model}, bert-base-sized, random weights: "
          f"{detector.model.config.num_hidden_layers} layers, hidden "
          f"{detector.model.config.hidden_size}, {n_params / 1e6:.0f}M parameters "
          f"(built/reused in {built:.1f} s, loaded through detoxify.Detoxify in {loaded:.1f} s)")
    print(f"texts: {len(answers)} answers, {words.min()}-{words.max()} words (mean {words.mean():.0f}), "
          f"{lengths.min()}-{lengths.max()} tokens (mean {lengths.mean():.0f})")

    rng = random.Random(args.seed + 2)
    naive_idx = rng.sample(range(len(answers)), min(args.naive_n, len(answers)))
    order = list(range(len(answers)))
    rng.shuffle(order)
    chunks = [order[i:i + chunk] for i in range(0, len(order), chunk)]
    sorted_waste = np.mean([padding_waste(lengths[c], args.batch_size, True) for c in chunks])
    print(f"padding waste at batch {args.batch_size}: unsorted {padding_waste(lengths, args.batch_size, False):.0%}, "
          f"length-sorted in chunks of {chunk} {sorted_waste:.0%}")

    detector.predict(answers[0])  # warm-up (first calls allocate)
    score_texts(scorer, answers[:args.batch_size], args.batch_size)
    clock = Clock(device)
    naive_scores: dict[int, dict] = {}
    first_chunk: dict[str, np.ndarray] = {}
    per_round = -(-len(naive_idx) // rounds)
    for r in range(rounds):  # interleaved, so CPU contention from other processes hits all paths
        block = naive_idx[r * per_round:(r + 1) * per_round]
        naive_scores.update(zip(block, clock.run(
            "naive", len(block), lambda b=block: [detector.predict(answers[i]) for i in b])))
        unsorted = [answers[i] for i in rng.sample(order, min(args.batch_size, len(order)))]
        clock.run("unsorted", len(unsorted),
                  lambda u=unsorted: score_texts(scorer, u, args.batch_size, sort_by_length=False))
        if r < len(chunks) and clock.seconds.get("sorted", 0.0) < args.budget_s:
            texts = [answers[i] for i in chunks[r]]
            out = clock.run("sorted", len(texts), lambda t=texts: score_texts(scorer, t, args.batch_size))
            first_chunk = first_chunk or out

    subset = "all" if len(naive_idx) == len(answers) else "random subset"
    print(f"naive    (Detoxify.predict(text), one at a time): {clock.texts['naive']} texts ({subset}, "
          f"mean {lengths[naive_idx].mean():.0f} tokens) in {clock.seconds['naive']:.1f} s -> "
          f"{clock.rate('naive'):.2f} texts/s")
    print(f"unsorted (batches of {args.batch_size} random texts, for reference): {clock.texts['unsorted']} "
          f"texts in {clock.seconds['unsorted']:.1f} s -> {clock.rate('unsorted'):.2f} texts/s")
    done = clock.texts["sorted"]
    covered = "all" if done == len(answers) else f"stopped at the {args.budget_s:.0f} s budget"
    print(f"batched  (crowdpref screening path, length-sorted, batch {args.batch_size}): {done} texts "
          f"({covered}) in {clock.seconds['sorted']:.1f} s -> {clock.rate('sorted'):.2f} texts/s")

    check = score_texts(scorer, [answers[i] for i in naive_idx], args.batch_size)
    diff = max(abs(check[label][j] - naive_scores[i][label])
               for label in scorer.labels for j, i in enumerate(naive_idx))
    ratio = clock.rate("sorted") / clock.rate("naive")
    if threads:
        print(f"load average at the end: {os.getloadavg()[0]:.1f} (other processes share these CPUs)")
    print(f"speed-up batched vs naive: {ratio:.1f}x (target >= 3x: {'met' if ratio >= 3 else 'NOT met'}); "
          f"vs unsorted batches: {clock.rate('sorted') / clock.rate('unsorted'):.1f}x; largest score "
          f"difference batched vs one-at-a-time: {diff:.1e}")

    if args.bf16:
        texts = [answers[i] for i in chunks[0]]
        bf16 = DetoxifyScorer(detector, precision="bfloat16")
        score_texts(bf16, texts[:args.batch_size], args.batch_size)  # warm-up
        out = clock.run("bf16", len(texts), lambda: score_texts(bf16, texts, args.batch_size))
        bdiff = max(float(np.abs(out[k] - first_chunk[k]).max()) for k in scorer.labels)
        print(f"batched, bfloat16 autocast (opt-in): {len(texts)} texts in {clock.seconds['bf16']:.1f} s "
              f"-> {clock.rate('bf16'):.2f} texts/s = {clock.rate('bf16') / clock.rate('naive'):.1f}x "
              f"naive float32; largest score difference vs float32: {bdiff:.1e}")


if __name__ == "__main__":
    main()
