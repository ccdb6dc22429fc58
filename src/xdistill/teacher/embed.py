"""Teacher embeddings into the store: the ``teacher_embed`` stage and the model inference behind it.

Encoding (:func:`embed_into_store`) tokenises the missing sentences once to get their true token
lengths and runs batches in descending token-length order, so padding is nearly zero; that, not a
different model, is why it is faster than ``SentenceTransformer.encode`` (which sorts by characters).

The shared store (``teacher_embed.shared_store``, under the user cache: :func:`shared_store_dir`)
is a second store of the same format that every workspace of the machine reads and adds to. A DVC
experiment, a Prefect flow's private workspace or a fresh clone starts with the store its
``dvc.lock`` names; without the shared store it would re-embed every sentence another workspace
embedded already (the mpnet vectors of a quality member: 36 min on 2 cores). It cannot serve a
stale vector: a sub-store belongs to one teacher fingerprint (a digest of the weights' files) and
a row to one normalised sentence, exactly the key of the stage's own store; the vectors copied
from it are those the stage would compute (fp16 both ways).

``teacher_embed.precision`` (fp32, fp16, bf16) is the format the teacher runs in: half precision on a
GPU only (:mod:`xdistill.models.precision`), and part of the teacher's identity in both stores, so
vectors encoded in fp16 are never served to an fp32 request or the other way round.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from xdistill.config import SECTION_CONFIG, Count, parse_section
from xdistill.data.parallel_tsv import read_parallel_pairs
from xdistill.errors import InputFileError, XdistillError
from xdistill.models.precision import DEFAULT_PRECISION, check_device, check_precision, require_gpu_for_half
from xdistill.teacher.store import (
    INDEX_FILE,
    TeacherStore,
    keys_of_normalized,
    normalized_texts,
    substore_name,
    teacher_fingerprint,
)
from xdistill.teacher.store_writer import SubstoreWriter, substore_writer

if TYPE_CHECKING:  # heavy imports only where the model actually runs
    from sentence_transformers import SentenceTransformer

logger = logging.getLogger(__name__)

PRECISION_SETTING = "teacher_embed.precision"


@dataclass(frozen=True)
class EmbedStats:
    """What one :func:`embed_into_store` call did.

    ``n_requested`` counts distinct normalised sentences asked for; ``n_new`` of them were
    encoded now and ``n_cached`` were already in the store or, ``n_shared`` of them, copied from the
    shared store (``n_new + n_cached == n_requested``).
    """

    n_requested: int
    n_new: int
    n_cached: int
    seconds: float
    n_shared: int = 0  # of n_cached: copied from the shared store by this call

    @property
    def sentences_per_second(self) -> float:
        """Throughput of the encoding of new sentences (0 when nothing was encoded)."""
        return self.n_new / self.seconds if self.n_new and self.seconds > 0 else 0.0


def _token_lengths(model: SentenceTransformer, texts: Sequence[str], chunk: int = 4096) -> np.ndarray:
    """Token count of each text as the model will see it (characters when there is no tokenizer)."""
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is None:
        return np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
    max_length = getattr(model, "max_seq_length", None)
    lengths = np.empty(len(texts), dtype=np.int64)
    for start in range(0, len(texts), chunk):
        encoded = tokenizer(
            list(texts[start : start + chunk]),
            truncation=max_length is not None,
            max_length=max_length,
            return_attention_mask=False,
            return_token_type_ids=False,
        )["input_ids"]
        lengths[start : start + len(encoded)] = [len(ids) for ids in encoded]
    return lengths


def encode_length_sorted(
    model: SentenceTransformer, texts: Sequence[str], batch_size: int, *, progress: bool = True
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield ``(indices into texts, float32 embeddings)`` batch by batch, longest texts first.

    Sorting by true token length (not characters) makes every batch nearly padding-free.
    """
    import torch
    from tqdm.auto import tqdm

    from xdistill.models import default_prompt

    prompt = default_prompt(model) or None  # as SentenceTransformer.encode adds it (mE5: "query: ")
    order = np.argsort(-_token_lengths(model, texts), kind="stable")
    model.eval()
    with (
        torch.inference_mode(),
        tqdm(total=len(texts), desc="teacher embeddings", unit="sent", disable=not progress, mininterval=2.0) as bar,
    ):
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            features = model.preprocess([texts[i] for i in batch], prompt=prompt)
            features = {k: v.to(model.device) if isinstance(v, torch.Tensor) else v for k, v in features.items()}
            embeddings = model(features)["sentence_embedding"]
            yield batch, embeddings.float().cpu().numpy()
            bar.update(len(batch))


def _resolve_device(device: str | None) -> str:
    if device:
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def embed_into_store(
    store_dir: str | Path,
    teacher_spec: str,
    sentences: Iterable[str],
    *,
    batch_size: int = 128,
    device: str | None = None,
    commit_rows: int = 16384,
    progress: bool = True,
    shared_dir: str | Path | None = None,
    precision: str = DEFAULT_PRECISION,
) -> EmbedStats:
    """Make sure every sentence has a teacher embedding in ``store_dir``; encode only the missing.

    Sentences are normalised (:func:`normalize_text`) and de-duplicated first; the teacher is not
    even loaded when nothing is missing. New embeddings are committed every ``commit_rows``
    sentences, so an interrupted run resumes where it stopped. With ``shared_dir`` (another store
    folder), missing sentences found there are copied instead of encoded, and what this call
    encoded is added there at the end. The store ends in its canonical layout (sorted by key), so
    its files do not depend on which sentences were copied, encoded or already there.
    ``precision`` (``teacher_embed.precision``): the teacher's number format, half formats on a GPU
    only (refused on a CPU when anything is left to encode); a part of the teacher's store identity.
    """
    check_precision(precision, PRECISION_SETTING)
    if batch_size <= 0 or commit_rows <= 0:
        raise XdistillError(f"batch_size and commit_rows must be positive, got {batch_size}, {commit_rows}")
    start = time.perf_counter()
    texts = list(dict.fromkeys(normalized_texts(sentences)))
    keys = keys_of_normalized(texts)
    teacher_id = teacher_fingerprint(teacher_spec, precision)
    n_shared = 0
    with substore_writer(store_dir, teacher_id, teacher_spec) as writer:
        _verify_stored(writer.path)  # "already stored" must mean the vectors are the ones the index recorded
        missing = writer.missing(keys)
        if len(missing) and shared_dir is not None:
            copied = _copy_from_shared(writer, Path(shared_dir), teacher_id, keys[missing], commit_rows)
            n_shared = int(copied.sum())
            missing = missing[~copied]
        logger.info(
            "teacher %s: %d distinct sentences, %d already stored (%d of them from the shared store %s), "
            "%d to embed (store %s)",
            teacher_spec,
            len(texts),
            len(texts) - len(missing),
            n_shared,
            shared_dir,
            len(missing),
            writer.path,
        )
        if len(missing):
            _encode_missing(
                writer,
                teacher_spec,
                [texts[i] for i in missing],
                keys[missing],
                batch_size=batch_size,
                device=_resolve_device(device),
                commit_rows=commit_rows,
                progress=progress,
                precision=precision,
            )
        writer.canonicalize()  # the same vectors give the same files, however they arrived
    if len(missing) and shared_dir is not None:
        _add_to_shared(Path(store_dir), Path(shared_dir), teacher_id, teacher_spec, keys[missing], commit_rows)
    stats = EmbedStats(len(texts), len(missing), len(texts) - len(missing), time.perf_counter() - start, n_shared)
    logger.info(
        "teacher embeddings: %d new, %d cached (%d from the shared store) in %.1f s (%.0f new sentences/s)",
        stats.n_new,
        stats.n_cached,
        stats.n_shared,
        stats.seconds,
        stats.sentences_per_second,
    )
    return stats


def shared_store_dir() -> Path:
    """The shared teacher store of this machine's user: ``<xdistill cache root>/teacher``."""
    from xdistill.models.cache import cache_root

    return cache_root() / "teacher"


def _verify_stored(substore: Path) -> None:
    """Refuse a sub-store whose files no longer match their checksums, naming the file."""
    if (substore / INDEX_FILE).is_file():
        TeacherStore.open(substore).verify()


def _copy_from_shared(
    writer: SubstoreWriter, shared_dir: Path, teacher_id: str, keys: np.ndarray, commit_rows: int
) -> np.ndarray:
    """Append to ``writer`` the vectors of ``keys`` the shared store holds; bool [n]: which were copied."""
    sub = shared_dir / substore_name(teacher_id)
    if not (sub / INDEX_FILE).is_file():
        return np.zeros(len(keys), dtype=bool)
    shared = TeacherStore.open(sub, teacher_id=teacher_id)
    try:
        shared.verify()
    except InputFileError as exc:  # another workspace's store: encode here rather than copy damaged vectors
        logger.warning("shared teacher store not used, it is damaged: %s", exc)
        return np.zeros(len(keys), dtype=bool)
    rows, found = shared.rows_of_keys(keys)
    hits = np.flatnonzero(found)
    for start in range(0, len(hits), commit_rows):
        chunk = hits[start : start + commit_rows]
        writer.append(keys[chunk], shared.gather(rows[chunk]))
    return found


def _add_to_shared(
    store_dir: Path, shared_dir: Path, teacher_id: str, teacher_spec: str, keys: np.ndarray, commit_rows: int
) -> None:
    """Add the vectors of ``keys`` (just encoded into ``store_dir``) to the shared store."""
    local = TeacherStore.open(store_dir / substore_name(teacher_id), teacher_id=teacher_id)
    with substore_writer(shared_dir, teacher_id, teacher_spec) as shared:
        new = keys[shared.missing(keys)]
        rows, _ = local.rows_of_keys(new)
        for start in range(0, len(new), commit_rows):
            shared.append(new[start : start + commit_rows], local.gather(rows[start : start + commit_rows]))
    logger.info("shared teacher store %s: %d sentences added", shared_dir, len(new))


def _encode_missing(
    writer: SubstoreWriter,
    teacher_spec: str,
    texts: list[str],
    keys: np.ndarray,
    *,
    batch_size: int,
    device: str,
    commit_rows: int,
    progress: bool,
    precision: str = DEFAULT_PRECISION,
) -> None:
    from xdistill.models import load_sentence_transformer
    from xdistill.models.precision import cast_for_inference

    require_gpu_for_half(precision, device, PRECISION_SETTING)  # before minutes of loading a model
    model = cast_for_inference(load_sentence_transformer(teacher_spec, device=device), precision, PRECISION_SETTING)
    pending_rows: list[np.ndarray] = []
    pending_embeddings: list[np.ndarray] = []
    pending = 0

    def commit() -> None:
        nonlocal pending
        rows = np.concatenate(pending_rows)
        writer.append(keys[rows], np.concatenate(pending_embeddings))
        pending_rows.clear()
        pending_embeddings.clear()
        pending = 0

    for rows, embeddings in encode_length_sorted(model, texts, batch_size, progress=progress):
        pending_rows.append(rows)
        pending_embeddings.append(embeddings)
        pending += len(rows)
        if pending >= commit_rows:
            commit()
    if pending:
        commit()


# --------------------------------------------------------------------------------------------
# The DVC stage
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TeacherEmbedSettings:
    """The ``teacher_embed`` section of params.yaml."""

    __pydantic_config__ = SECTION_CONFIG

    batch_size: Count = 128  # sentences per forward pass
    device: str | None = None  # null: cuda when present, else cpu
    commit_rows: Count = 16384  # new vectors are committed to the store every this many sentences
    shared_store: bool = False  # also read and add to shared_store_dir()
    precision: str = DEFAULT_PRECISION  # fp32 | fp16 | bf16: the teacher's number format (half: cuda only)

    def __post_init__(self) -> None:
        check_precision(self.precision, PRECISION_SETTING)
        if self.device is not None:
            check_device(self.device, "teacher_embed.device")


def build_teacher_store(
    parallel_files: Sequence[str | Path], store_dir: str | Path, params: Mapping[str, Any]
) -> EmbedStats:
    """The ``teacher_embed`` stage: embed every distinct source sentence of the parallel files.

    ``params``: ``teacher`` (model spec, from ``models.teacher``) plus the ``teacher_embed``
    section (:class:`TeacherEmbedSettings`), checked before anything is read.
    """
    if not params.get("teacher"):
        raise XdistillError("teacher_embed: no teacher model spec (params.yaml models.teacher)")
    settings = parse_section(TeacherEmbedSettings, {k: v for k, v in params.items() if k != "teacher"}, "teacher_embed")
    sentences: list[str] = []
    for path in parallel_files:
        sentences.extend(read_parallel_pairs(path).sources)
        logger.info("read %s: %d source sentences so far", path, len(sentences))
    return embed_into_store(
        store_dir,
        str(params["teacher"]),
        sentences,
        batch_size=settings.batch_size,
        device=settings.device,
        commit_rows=settings.commit_rows,
        shared_dir=shared_store_dir() if settings.shared_store else None,
        precision=settings.precision,
    )
