"""A tiny detoxify-format checkpoint that the REAL ``detoxify.Detoxify`` loads fully offline.

What detoxify 0.5.4 does with ``checkpoint=``: ``torch.load`` it, take the class names from
``config.dataset.args.classes`` (renaming toxic/severe_toxic/identity_hate), then
``getattr(transformers, model_name).config_class.from_pretrained(model_type, num_labels=...)``,
``model_class.from_pretrained(None, config=..., state_dict=...)`` and
``getattr(transformers, tokenizer_name).from_pretrained(model_type)``. So ``model_type`` set to
a local folder holding ``config.json`` + tokenizer files keeps everything off the network.

Built here: a WordPiece tokenizer trained with the ``tokenizers`` library on synthetic answers,
saved as a ``BertTokenizer`` folder; a BERT with 2 layers and hidden size 32 trained for a few
seconds on synthetic labels - answers containing an insult word are ``toxic`` + ``insult``,
answers containing a threat word are ``toxic`` + ``threat``, everything else is clean - so
thresholds can be checked on clearly toxic versus clearly benign texts.

Use the ``tiny_detoxify`` fixture (built once per test session; import it into the test
module) or :func:`build_tiny_detoxify`. :func:`seed_release_caches` lays the same weights out
as detoxify's released ``original`` model would be cached (torch hub checkpoint + HF hub
cache of ``bert-base-uncased``), to test the seeded-cache path offline.
"""

from __future__ import annotations

from collections import Counter

import os
import random
from dataclasses import dataclass
from pathlib import Path

import pytest

#: Jigsaw 2018 class names, as in the released 'original' checkpoint (detoxify renames them).
JIGSAW_CLASSES = ["toxic", "severe_toxic", "obscene", "threat", "insult", "identity_hate"]
#: The names detoxify reports (and screening.parquet's score columns).
LABELS = ("toxicity", "severe_toxicity", "obscene", "threat", "insult", "identity_attack")

INSULTS = ("idiot", "moron", "stupid", "loser", "pathetic", "worthless")
THREATS = ("kill", "hurt", "destroy", "punch")
#: Harmless words that fill the same templates, so only the filler word tells toxic from clean.
PRAISE = ("friend", "hero", "kind", "thoughtful", "brilliant", "generous")
HELP = ("help", "thank", "hug", "visit")
_SUBJECTS = ("i", "we", "my friend", "the team", "people", "a good listener", "my neighbour",
             "the teacher", "everyone", "your family", "someone", "they")
_VERBS = ("think", "feel", "believe", "suggest", "understand", "hope", "notice", "remember",
          "say", "should remember", "will see")
_CLAUSES = ("it helps to listen first", "kindness matters in hard moments",
            "honesty builds trust over time", "a calm voice can settle a conflict",
            "sharing credit makes a team stronger", "asking questions shows respect",
            "small gestures can mean a lot", "apologising sincerely repairs friendships",
            "different cultures see politeness differently", "humour can ease tension",
            "patience is needed when someone is grieving", "we should respect boundaries",
            "that you are going to be fine", "people like you make everything better")
_PERSON_TEMPLATES = ("you are a {w}", "what a {w} answer", "only a {w} would say that",
                     "{w} people like you change everything", "stop being such a {w}",
                     "you are {w}")
_ACTION_TEMPLATES = ("i will {w} you", "someone should {w} them", "i am going to {w} you",
                     "they will {w} your family")

#: Clearly benign / clearly toxic texts for threshold tests (the training vocabulary, new
#: combinations).
BENIGN_TEXTS = (
    "I think it helps to listen first and ask questions.",
    "We believe kindness matters in hard moments. You are a thoughtful friend.",
    "My friend should remember that honesty builds trust over time.",
    "Someone should thank them. Small gestures can mean a lot.",
)
INSULT_TEXTS = (
    "You are a pathetic idiot.",
    "Only a stupid loser would say that.",
)
THREAT_TEXTS = (
    "I will kill you.",
    "I am going to hurt your family.",
)

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
MAX_LENGTH = 128


@dataclass(frozen=True)
class TinyDetoxify:
    checkpoint: Path
    """The detoxify-format checkpoint (``screening.checkpoint``)."""
    model_dir: Path
    """The local HF folder (config.json + tokenizer) named by the checkpoint's model_type."""
    labels: tuple[str, ...] = LABELS


def _sentence(rng: random.Random) -> str:
    return f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_CLAUSES)}"


def synthetic_corpus(n: int, seed: int = 0) -> tuple[list[str], list[list[float]]]:
    """``n`` texts with 6 labels each (order of :data:`JIGSAW_CLASSES`): a fifth insults, a
    fifth threats, the rest clean - most of those built from the same templates with a
    harmless word, so the model has to learn the words, not the templates."""
    rng = random.Random(seed)
    texts, targets = [], []
    for i in range(n):
        kind = i % 5
        parts = [_sentence(rng) for _ in range(rng.randint(0, 2))]
        y = [0.0] * 6
        if kind == 0:
            slot = rng.choice(_PERSON_TEMPLATES).format(w=rng.choice(INSULTS))
            y = [1.0, 0, 0, 0, 1.0, 0]
        elif kind == 1:
            slot = rng.choice(_ACTION_TEMPLATES).format(w=rng.choice(THREATS))
            y = [1.0, 0, 0, 1.0, 0, 0]
        elif kind == 2:
            slot = rng.choice(_PERSON_TEMPLATES).format(w=rng.choice(PRAISE))
        elif kind == 3:
            slot = rng.choice(_ACTION_TEMPLATES).format(w=rng.choice(HELP))
        else:
            slot = _sentence(rng)
        parts.insert(rng.randint(0, len(parts)), slot)
        text = ". ".join(parts) + "."
        texts.append(text[0].upper() + text[1:])
        targets.append([float(v) for v in y])
    return texts, targets


def train_tokenizer(texts: list[str], folder: Path, vocab_size: int = 400):
    """A WordPiece tokenizer trained on ``texts``, saved in ``folder`` as a BertTokenizer."""
    from tokenizers import normalizers, pre_tokenizers
    from transformers import BertTokenizer

    # Not tokenizers' WordPieceTrainer: it breaks ties between equally frequent merges in a
    # randomly seeded hash order, so two builds got different vocabularies - and a tiny model
    # trained on them scored borderline texts on either side of a threshold (a flaky test). The
    # vocabulary here is a pure function of the texts: the special tokens, every character
    # (alone and as a ``##`` continuation), then the most frequent whole words (ties by word).
    normalizer = normalizers.BertNormalizer(lowercase=True)
    splitter = pre_tokenizers.BertPreTokenizer()
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(word for word, _ in splitter.pre_tokenize_str(normalizer.normalize_str(text)))
    chars = sorted({c for word in counts for c in word})
    vocab = [*SPECIAL_TOKENS, *chars, *(f"##{c}" for c in chars)]
    words = [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if len(w) > 1]
    vocab += words[: max(0, vocab_size - len(vocab))]
    tokenizer = BertTokenizer(vocab={token: i for i, token in enumerate(vocab)}, model_max_length=MAX_LENGTH)
    tokenizer.save_pretrained(folder)
    return tokenizer


def detoxify_checkpoint(model_type: str, state_dict: dict, num_classes: int = 6,
                        classes: list[str] | None = None,
                        model_name: str = "BertForSequenceClassification",
                        tokenizer_name: str = "BertTokenizer") -> dict:
    """The dict detoxify expects in a checkpoint file."""
    return {
        "config": {
            "arch": {"args": {"model_type": model_type, "model_name": model_name,
                              "tokenizer_name": tokenizer_name, "num_classes": num_classes}},
            "dataset": {"args": {"classes": classes or list(JIGSAW_CLASSES)}},
        },
        "state_dict": state_dict,
    }


def build_tiny_detoxify(root: Path, seed: int = 0, steps: int = 900) -> TinyDetoxify:
    """Build (or reuse, if ``root`` already holds one) the tiny checkpoint under ``root``."""
    import torch
    from transformers import BertConfig

    checkpoint = root / "tiny-detoxify.ckpt"
    model_dir = root / "tiny-bert"
    if checkpoint.is_file():
        return TinyDetoxify(checkpoint, model_dir)
    root.mkdir(parents=True, exist_ok=True)
    texts, targets = synthetic_corpus(800, seed)
    tokenizer = train_tokenizer(texts + list(BENIGN_TEXTS), model_dir)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=MAX_LENGTH, num_labels=6,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                        problem_type="multi_label_classification")
    config.save_pretrained(model_dir)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a model this small trains faster on one thread
    try:
        model = _train(config, tokenizer, texts, targets, seed, steps)
    finally:
        torch.set_num_threads(threads)
    tmp = checkpoint.with_suffix(".tmp")
    torch.save(detoxify_checkpoint(str(model_dir), model.state_dict()), tmp)
    os.replace(tmp, checkpoint)
    return TinyDetoxify(checkpoint, model_dir)


def _train(config, tokenizer, texts: list[str], targets: list[list[float]], seed: int, steps: int):
    import torch
    from transformers import BertForSequenceClassification

    torch.manual_seed(seed)
    model = BertForSequenceClassification(config)
    enc = tokenizer(texts, padding=True, truncation=True, return_tensors="pt")
    y = torch.tensor(targets)
    optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    gen = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(steps):
        idx = torch.randint(0, len(texts), (32,), generator=gen)
        logits = model(input_ids=enc["input_ids"][idx],
                       attention_mask=enc["attention_mask"][idx]).logits
        loss = loss_fn(logits, y[idx])
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    return model.eval()


def seed_release_caches(tiny: TinyDetoxify, torch_home: Path, hf_home: Path) -> tuple[Path, Path]:
    """Lay the tiny weights out where detoxify's released 'original' model is cached: the torch
    hub checkpoint (model_type ``bert-base-uncased``) and the HF hub cache of
    ``bert-base-uncased`` (config + tokenizer). Returns (checkpoint path, snapshot folder)."""
    import torch
    from detoxify.detoxify import MODEL_URLS

    loaded = torch.load(tiny.checkpoint, map_location="cpu", weights_only=True)
    ckpt = torch_home / "hub" / "checkpoints" / MODEL_URLS["original"].rsplit("/", 1)[-1]
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    torch.save(detoxify_checkpoint("bert-base-uncased", loaded["state_dict"]), ckpt)
    revision = "0" * 40
    repo = hf_home / "hub" / "models--bert-base-uncased"
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (snapshot / name).write_bytes((tiny.model_dir / name).read_bytes())
    return ckpt, snapshot


@pytest.fixture(scope="session")
def tiny_detoxify(tmp_path_factory: pytest.TempPathFactory) -> TinyDetoxify:
    """The tiny checkpoint, built once per test session (every module importing this fixture
    shares the folder)."""
    return build_tiny_detoxify(tmp_path_factory.getbasetemp() / "tiny-detoxify")
