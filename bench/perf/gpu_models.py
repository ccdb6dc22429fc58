"""Models, tokenizer, sentences and teacher vectors made on the spot, for the GPU check.

The GPU machine has torch, transformers and sentence-transformers but no model package and no
network, so nothing here loads weights: a WordPiece tokenizer is built (the ``tokenizers`` library)
from a generated vocabulary, and the models are randomly initialised from transformers configs of
the real models' shapes (mE5-small as the student, all-mpnet-base-v2 as the teacher), saved as
sentence-transformers folders the project loads like any model spec. Throughput depends on the
shapes and the token counts, not on the weights' values, so a timing here is the real models' timing.

Used by ``tests/test_gpu.py`` (tiny shapes) and ``bench/perf/gpu_check.py`` (both sizes).
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


@dataclass(frozen=True)
class Shape:
    """A transformer encoder's size: what its speed depends on."""

    family: str  # bert | mpnet
    layers: int
    hidden: int
    heads: int
    intermediate: int
    vocab: int
    max_position: int


# multilingual-e5-small (an XLM-R vocabulary on a 12-layer, 384-wide BERT body)
ME5_SMALL = Shape("bert", layers=12, hidden=384, heads=12, intermediate=1536, vocab=250037, max_position=514)
# all-mpnet-base-v2
MPNET_BASE = Shape("mpnet", layers=12, hidden=768, heads=12, intermediate=3072, vocab=30527, max_position=514)
# seconds-sized stand-ins of both, for CPU smoke runs and the GPU tests
TINY_BERT = Shape("bert", layers=2, hidden=32, heads=2, intermediate=64, vocab=2048, max_position=130)
TINY_MPNET = Shape("mpnet", layers=2, hidden=48, heads=2, intermediate=96, vocab=2048, max_position=130)


def synthetic_words(count: int = 1500, seed: int = 0) -> list[str]:
    """``count`` distinct lower-case pseudo-words of 2-10 letters."""
    rng = np.random.default_rng(seed)
    letters = np.array(list(string.ascii_lowercase))
    words: dict[str, None] = {}
    while len(words) < count:
        words["".join(rng.choice(letters, size=int(rng.integers(2, 11))))] = None
    return list(words)


def synthetic_sentences(count: int, words: list[str], seed: int = 1, mean_words: float = 14.0) -> list[str]:
    """``count`` distinct sentences with a realistic spread of lengths (log-normal, 3-60 words).

    A mix of short Tatoeba-like and long news-like sentences is what makes padding matter, and so
    what length-sorted batching gains.
    """
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(np.log(mean_words), 0.6, size=count), 3, 60).astype(int)
    sentences = []
    for i, length in enumerate(lengths):
        picked = rng.integers(0, len(words), size=int(length))
        sentences.append(" ".join(words[j] for j in picked).capitalize() + f" {i}.")  # the number keeps them distinct
    return sentences


def write_tokenizer(folder: Path, words: list[str], max_length: int) -> None:
    """A WordPiece tokenizer (BERT-style, lower-casing) over ``words``, its letters and digits, saved in ``folder``."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import BertTokenizerFast

    pieces = list(string.ascii_lowercase + string.digits + string.punctuation)
    vocab = {token: i for i, token in enumerate([*SPECIAL_TOKENS, *pieces, *(f"##{p}" for p in pieces), *words])}
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    tokenizer.decoder = decoders.WordPiece()
    wrapped = BertTokenizerFast(
        tokenizer_object=tokenizer,
        model_max_length=max_length,
        # MPNet takes no token types; BERT does without them (all zero)
        model_input_names=["input_ids", "attention_mask"],
    )
    wrapped.save_pretrained(str(folder))


def _transformers_model(shape: Shape, vocab_size: int, seed: int):  # -> transformers.PreTrainedModel
    import torch
    from transformers import BertConfig, BertModel, MPNetConfig, MPNetModel

    torch.manual_seed(seed)
    common = {
        "vocab_size": max(shape.vocab, vocab_size),
        "hidden_size": shape.hidden,
        "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads,
        "intermediate_size": shape.intermediate,
        "max_position_embeddings": shape.max_position,
        "pad_token_id": 0,
    }
    if shape.family == "mpnet":
        return MPNetModel(MPNetConfig(**common))
    if shape.family == "bert":
        return BertModel(BertConfig(**common))
    raise ValueError(f"unknown model family {shape.family!r}")


def build_model_folder(
    folder: Path, shape: Shape, words: list[str], *, max_seq_length: int = 128, normalize: bool = False, seed: int = 0
) -> Path:
    """A randomly initialised sentence-transformers model of ``shape`` (mean pooling) saved in ``folder``.

    ``normalize``: end in a Normalize module, as the all-mpnet-base-v2 teacher does.
    """
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    base = folder / "_transformer"
    write_tokenizer(base, words, max_seq_length)
    vocab_size = len(SPECIAL_TOKENS) + 2 * len(string.ascii_lowercase + string.digits + string.punctuation) + len(words)
    _transformers_model(shape, vocab_size, seed).save_pretrained(str(base))
    transformer = Transformer(str(base), max_seq_length=max_seq_length)
    modules = [transformer, Pooling(shape.hidden, "mean")]
    if normalize:
        modules.append(Normalize())
    SentenceTransformer(modules=modules, device="cpu").save(str(folder))
    _remove_tree(base)
    return folder


def _remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def write_parallel_files(folder: Path, sources: list[str], translations: list[str], n_dev: int) -> tuple[Path, Path]:
    """``train.tsv.gz`` and ``dev.tsv.gz`` of the parallel stage's format (the last ``n_dev`` pairs are dev)."""
    from xdistill.data.parallel_tsv import write_parallel_tsv

    folder.mkdir(parents=True, exist_ok=True)
    pairs = list(zip(sources, translations))
    paths = []
    for name, part in (("train", pairs[:-n_dev]), ("dev", pairs[-n_dev:])):
        path = folder / f"{name}.tsv.gz"
        write_parallel_tsv(path, ((en, xx, "de", "synthetic") for en, xx in part))
        paths.append(path)
    return paths[0], paths[1]


def write_random_teacher_store(
    store_dir: Path, teacher_spec: str, sentences: list[str], dim: int, seed: int = 2
) -> Path:
    """Unit-length random teacher vectors of ``dim`` for ``sentences``, as the teacher store holds them.

    For timing the training steps the targets' values do not matter, only their dimension: this
    spares encoding thousands of sentences with a teacher first.
    """
    from xdistill.teacher.store import keys_of_normalized, normalized_texts, teacher_fingerprint
    from xdistill.teacher.store_writer import substore_writer

    texts = list(dict.fromkeys(normalized_texts(sentences)))
    vectors = np.random.default_rng(seed).standard_normal((len(texts), dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    with substore_writer(store_dir, teacher_fingerprint(teacher_spec), teacher_spec) as writer:
        writer.append(keys_of_normalized(texts), vectors)
        writer.canonicalize()
    return store_dir
