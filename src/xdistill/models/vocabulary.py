"""Vocabulary trimming: keep only the word pieces a corpus uses (tokenizer and embedding table together).

mE5-small's XLM-R SentencePiece vocabulary has 250,002 pieces; its word-embedding table holds 96M of
the model's 117M parameters, and most of those rows belong to languages a student is never trained
or used on. :func:`trim_vocabulary` keeps

- every piece the corpus texts tokenise into (the model's prompts, e.g. mE5's ``"query: "``, included),
- every special / added token (``<s>``, ``<pad>``, ``</s>``, ``<unk>``, ``<mask>``),
- every single-character piece of a character the corpus uses, so an unseen word of a kept language
  still tokenises into kept pieces instead of ``<unk>`` (a cheap safety net: measured on the default
  corpus it adds a few thousand rows),

and drops the rest from the tokenizer (a Unigram ``tokenizer.json``) and the embedding table at once;
ids are remapped in their original order, so ``<s> <pad> </s> <unk>`` keep ids 0-3.

Why tokenisation of the corpus is unchanged: a Unigram tokenizer segments each pre-token (word) by
the highest-scoring path through its pieces (Viterbi). That path's pieces are all kept, the remaining
pieces keep their scores, and removing pieces only removes competing paths, so the same path wins.
Every corpus text therefore gets the same pieces (same strings, new ids) and the same embedding.
Text outside the corpus may segment differently (a dropped piece becomes several kept ones);
:func:`tokenisation_agreement` measures how often.

``train.student.vocabulary`` in params.yaml: ``null`` keeps the full vocabulary; ``corpus`` trims to
:func:`corpus_texts` of the pipeline's files (the parallel train/dev pairs, i.e. the configured
languages and English, plus the staged evaluation sets of those languages).
"""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from xdistill.errors import XdistillError
from xdistill.models.backbone import transformer_backbone

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer
    from tokenizers import Tokenizer

log = logging.getLogger(__name__)

VOCABULARY_OPTIONS = ("corpus",)
# The pipeline's files behind ``vocabulary: corpus`` (relative to the project root, as in dvc.yaml).
# the trainer adds the dev mining blocks it validates on when its run has them
DEFAULT_PARALLEL_FILES = (Path("data/parallel/train.tsv.gz"), Path("data/parallel/dev.tsv.gz"))
DEFAULT_RAW_DIR = Path("data/raw")
METASPACE = "\u2581"
_BATCH = 4096


@dataclass(frozen=True)
class VocabularyTrim:
    """What :func:`trim_vocabulary` kept."""

    pieces_before: int
    pieces_after: int
    embedding_rows_before: int
    corpus_texts: int
    corpus_pieces: int  # pieces the corpus itself used (the rest: special tokens and single characters)

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def backend_tokenizer(model: SentenceTransformer) -> Tokenizer:
    """A copy of the student's ``tokenizers.Tokenizer`` with truncation and padding off."""
    from tokenizers import Tokenizer

    tokenizer = getattr(model.tokenizer, "backend_tokenizer", None)
    if tokenizer is None:
        raise XdistillError(f"{type(model.tokenizer).__name__} is not a fast (tokenizers) tokenizer: cannot trim it")
    copy = Tokenizer.from_str(tokenizer.to_str())
    copy.no_truncation()
    copy.no_padding()
    return copy


def used_piece_ids(tokenizer: Tokenizer, texts: Iterable[str]) -> tuple[set[int], int]:
    """The ids of every piece ``texts`` tokenise into (no special tokens added), and the text count."""
    used: set[int] = set()
    count = 0
    batch: list[str] = []
    for text in texts:
        batch.append(text)
        if len(batch) == _BATCH:
            count += _add_ids(tokenizer, batch, used)
            batch = []
    count += _add_ids(tokenizer, batch, used)
    return used, count


def _add_ids(tokenizer: Tokenizer, batch: list[str], used: set[int]) -> int:
    for encoding in tokenizer.encode_batch(batch, add_special_tokens=False):
        used.update(encoding.ids)
    return len(batch)


def single_character_ids(pieces: Sequence[str], characters: set[str]) -> set[int]:
    """Ids of the pieces that are one of ``characters``, with or without the word-start marker."""
    return {
        i for i, piece in enumerate(pieces) if piece.removeprefix(METASPACE) in characters and piece.strip(METASPACE)
    }


def trimmed_tokenizer_json(tokenizer_json: dict[str, Any], keep: Sequence[int]) -> dict[str, Any]:
    """``tokenizer.json`` reduced to the pieces ``keep`` (ascending old ids), ids remapped to 0..n-1."""
    model = _unigram_model(tokenizer_json)
    new_id = {old: new for new, old in enumerate(keep)}
    trimmed = json.loads(json.dumps(tokenizer_json))  # deep copy
    trimmed["model"]["vocab"] = [model["vocab"][old] for old in keep]
    if model.get("unk_id") is not None:
        trimmed["model"]["unk_id"] = _remap(new_id, model["unk_id"], "the unknown token")
    for token in trimmed.get("added_tokens") or []:
        token["id"] = _remap(new_id, token["id"], f"added token {token['content']!r}")
    trimmed["post_processor"] = _remap_post_processor(trimmed.get("post_processor"), new_id)
    return trimmed


def _unigram_model(tokenizer_json: dict[str, Any]) -> dict[str, Any]:
    model = tokenizer_json.get("model") or {}
    if model.get("type") != "Unigram":
        raise XdistillError(f"vocabulary trimming supports SentencePiece Unigram tokenizers, not {model.get('type')!r}")
    return model


def _remap(new_id: dict[int, int], old: int, what: str) -> int:
    if old not in new_id:
        raise XdistillError(f"vocabulary trimming dropped {what} (id {old})")
    return new_id[old]


def _remap_post_processor(node: Any, new_id: dict[int, int]) -> Any:
    """Remap the special-token ids inside a Template/Roberta/Bert processor (or a Sequence of them)."""
    if isinstance(node, list):
        return [_remap_post_processor(item, new_id) for item in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key == "ids" and isinstance(value, list):
            out[key] = [_remap(new_id, old, "a post-processor special token") for old in value]
        elif key in ("sep", "cls") and isinstance(value, list) and len(value) == 2:
            out[key] = [value[0], _remap(new_id, value[1], f"the {key} token")]
        else:
            out[key] = _remap_post_processor(value, new_id)
    return out


def trim_vocabulary(model: SentenceTransformer, texts: Iterable[str]) -> VocabularyTrim:
    """Trim ``model``'s tokenizer and word-embedding table (in place) to the pieces ``texts`` use.

    The prompts of the model (``model.prompts``) are added to ``texts``. Raises
    :class:`XdistillError` for a tokenizer that is not SentencePiece Unigram or an empty corpus.
    """
    full = backend_tokenizer(model)
    tokenizer_json = json.loads(full.to_str())
    pieces = [piece for piece, _ in _unigram_model(tokenizer_json)["vocab"]]
    prompts = [p for p in (getattr(model, "prompts", None) or {}).values() if p]
    corpus_ids, n_texts = used_piece_ids(full, _chain(prompts, texts))
    if n_texts <= len(prompts):
        raise XdistillError("vocabulary trimming: the corpus has no text")
    characters = {ch for i in corpus_ids for ch in pieces[i].replace(METASPACE, "")}
    special = {token["id"] for token in tokenizer_json.get("added_tokens") or []}
    keep = sorted(corpus_ids | special | single_character_ids(pieces, characters))

    backbone = transformer_backbone(model)
    old_embeddings = backbone.get_input_embeddings()
    assert isinstance(old_embeddings, nn.Embedding)  # the word-embedding table of every supported encoder
    if max(keep) >= old_embeddings.num_embeddings:
        raise XdistillError(
            f"tokenizer id {max(keep)} is outside the {old_embeddings.num_embeddings}-row embedding table"
        )
    new_embeddings = _select_rows(old_embeddings, keep)
    backbone.set_input_embeddings(new_embeddings)
    backbone.config.vocab_size = len(keep)
    pad_id = getattr(backbone.config, "pad_token_id", None)
    if pad_id is not None:
        backbone.config.pad_token_id = _remap({old: new for new, old in enumerate(keep)}, pad_id, "the padding token")
    model[0].processor = _tokenizer_like(model.tokenizer, trimmed_tokenizer_json(tokenizer_json, keep))
    result = VocabularyTrim(
        pieces_before=len(pieces),
        pieces_after=len(keep),
        embedding_rows_before=old_embeddings.num_embeddings,
        corpus_texts=n_texts - len(prompts),
        corpus_pieces=len(corpus_ids),
    )
    log.info(
        "vocabulary: kept %d of %d pieces (%d used by %d corpus texts); embedding table %d -> %d rows",
        result.pieces_after,
        result.pieces_before,
        result.corpus_pieces,
        result.corpus_texts,
        result.embedding_rows_before,
        len(keep),
    )
    return result


def _chain(first: Sequence[str], rest: Iterable[str]) -> Iterator[str]:
    yield from first
    yield from rest


def _select_rows(embeddings: nn.Embedding, keep: Sequence[int]) -> nn.Embedding:
    index = torch.as_tensor(keep, dtype=torch.long, device=embeddings.weight.device)
    padding = embeddings.padding_idx
    new_padding = keep.index(padding) if padding is not None and padding in keep else None
    rows = embeddings.weight.detach().index_select(0, index).clone()
    trimmed = nn.Embedding(len(keep), rows.shape[1], padding_idx=new_padding, device=rows.device, dtype=rows.dtype)
    with torch.no_grad():
        trimmed.weight.copy_(rows)
    trimmed.weight.requires_grad_(embeddings.weight.requires_grad)
    return trimmed


def _tokenizer_like(tokenizer: Any, tokenizer_json: dict[str, Any]) -> Any:
    """A tokenizer with ``tokenizer``'s settings (special tokens, max length) over ``tokenizer_json``.

    Round-trips through ``save_pretrained`` / ``AutoTokenizer.from_pretrained`` so transformers
    builds it exactly as it would from the exported folder.
    """
    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory(prefix="xdistill-vocab-") as tmp:
        tokenizer.save_pretrained(tmp)
        (Path(tmp) / "tokenizer.json").write_text(json.dumps(tokenizer_json, ensure_ascii=False), encoding="utf-8")
        trimmed = AutoTokenizer.from_pretrained(tmp, local_files_only=True)
    trimmed.model_max_length = tokenizer.model_max_length
    return trimmed


def corpus_texts(
    parallel_files: Sequence[str | Path] = DEFAULT_PARALLEL_FILES, raw_dir: str | Path | None = DEFAULT_RAW_DIR
) -> Iterator[str]:
    """The texts of ``vocabulary: corpus``: both sides of the parallel files, then the evaluation sets.

    The parallel pairs hold the configured languages and English. The evaluation sets come from
    ``raw_dir/eval`` (the ``corpora`` stage stages them per configured language, except the LASER
    Tatoeba test set, which is staged for all its languages and filtered here to the languages of
    the parallel pairs).
    """
    from xdistill.data.parallel_tsv import has_pairs, read_parallel_pairs

    languages: set[str] = set()
    for path in parallel_files:
        if not has_pairs(path):
            continue  # a header-only file adds no text (dev_mining.tsv.gz when no source sets dev_mining_block)
        pairs = read_parallel_pairs(path)
        languages.update(lang for lang in pairs.langs if lang)
        yield from pairs.sources
        yield from pairs.translations
    if raw_dir is not None:
        yield from evaluation_texts(raw_dir, languages)


def evaluation_texts(raw_dir: str | Path, languages: Iterable[str]) -> Iterator[str]:
    """Every sentence of the staged evaluation sets of ``languages`` (and English)."""
    from xdistill.data.eval_formats import evaluation_files
    from xdistill.evaluation.tatoeba import tatoeba_code

    tatoeba_keep = {tatoeba_code(lang) for lang in languages}
    for path, parser in evaluation_files(raw_dir):
        if path.name.startswith("tatoeba.") and path.name.split(".")[1].split("-")[0] not in tatoeba_keep:
            continue  # tatoeba.<xxx>-eng.<side>: only the test sets of kept languages
        yield from (text for text in parser(path) if text)


def apply_vocabulary_option(
    model: SentenceTransformer,
    option: str | None,
    parallel_files: Sequence[str | Path] = DEFAULT_PARALLEL_FILES,
    raw_dir: str | Path | None = DEFAULT_RAW_DIR,
) -> VocabularyTrim | None:
    """``train.student.vocabulary``: ``None`` keeps the full vocabulary, ``corpus`` trims to :func:`corpus_texts`
    of ``parallel_files`` (the run's train and dev pairs) and ``raw_dir``'s evaluation sets."""
    if option is None:
        return None
    if option not in VOCABULARY_OPTIONS:
        raise XdistillError(
            f"params train.student.vocabulary must be null or one of {VOCABULARY_OPTIONS}, got {option!r}"
        )
    return trim_vocabulary(model, corpus_texts(parallel_files, raw_dir))


def vocabulary_digest(model: SentenceTransformer) -> str:
    """SHA-256 of the tokenizer's piece -> id map: what a checkpoint's embedding rows mean (a trimmed
    vocabulary changes with the corpus it was trimmed to)."""
    vocab = sorted(model.tokenizer.get_vocab().items(), key=lambda item: item[1])
    return hashlib.sha256(json.dumps(vocab, ensure_ascii=False).encode()).hexdigest()


def tokenisation_agreement(full: SentenceTransformer, trimmed: SentenceTransformer, texts: Sequence[str]) -> float:
    """Share of ``texts`` that the trimmed tokenizer splits into exactly the full tokenizer's pieces."""
    if not texts:
        raise XdistillError("tokenisation_agreement: no texts")
    full_tok, trimmed_tok = backend_tokenizer(full), backend_tokenizer(trimmed)
    same = 0
    for start in range(0, len(texts), _BATCH):
        batch = list(texts[start : start + _BATCH])
        for a, b in zip(
            full_tok.encode_batch(batch, add_special_tokens=False),
            trimmed_tok.encode_batch(batch, add_special_tokens=False),
        ):
            same += a.tokens == b.tokens
    return same / len(texts)
