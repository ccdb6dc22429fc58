"""Pre-tokenised texts on their way through the student: token ids, padded features, embeddings.

The trainer tokenises every text once up front (:func:`xdistill.training.batches.tokenize_texts`)
and works on token-id lists from then on; this module turns them into the student's input
features and embeddings, in length order so padding stays small.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, overload

import numpy as np
import torch

from xdistill.training.batches import ParallelPairs, pad_batch, tokenize_texts

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from xdistill.teacher.store import TeacherStore

logger = logging.getLogger(__name__)
PROGRESS_MIN_TEXTS = 20_000  # encodes of at least this many texts log their progress


class TeacherRows:
    """The teacher vectors of some pairs' sources, read from the memory-mapped store only when indexed.

    A training process touches only the rows of its own slices of the batches, so several processes on
    one host share the store's pages instead of each holding a copy of every vector.
    """

    def __init__(self, store: TeacherStore, rows: np.ndarray) -> None:
        self.store, self.rows = store, rows

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self.rows), self.store.dimension)

    def __getitem__(self, index: torch.Tensor | np.ndarray | slice) -> torch.Tensor:
        picked = self.rows[index.numpy() if isinstance(index, torch.Tensor) else index]
        return torch.from_numpy(self.store.gather(np.atleast_1d(picked)))

    def numpy(self) -> np.ndarray:
        return self.store.gather(self.rows)


class LazyTokenIds(Sequence[list[int]]):
    """Token ids of texts, computed when a batch asks for them (in the loader's workers, off the step's path).

    A process of a multi-process run embeds only its slices of the batches, so it never tokenises, nor holds
    the ids of, the rest of the corpus. The ids are those :func:`~xdistill.training.batches.tokenize_texts`
    gives (the same tokenizer call, one text at a time).
    """

    def __init__(self, texts: Sequence[str], tokenizer: Any, max_length: int, prompt: str) -> None:
        self.texts, self.tokenizer, self.max_length, self.prompt = texts, tokenizer, max_length, prompt

    def __len__(self) -> int:
        return len(self.texts)

    @overload
    def __getitem__(self, index: int) -> list[int]: ...

    @overload
    def __getitem__(self, index: slice) -> list[list[int]]: ...

    def __getitem__(self, index: int | slice) -> list[int] | list[list[int]]:
        if isinstance(index, slice):
            return [self[i] for i in range(len(self))[index]]
        encoded = self.tokenizer(self.prompt + self.texts[index], truncation=True, max_length=self.max_length)
        return list(encoded["input_ids"])

    def __iter__(self) -> Iterator[list[int]]:
        return (self[i] for i in range(len(self)))


@dataclass
class TokenizedPairs:
    """Token ids of both sides, the teacher vectors of the sources, and each pair's language."""

    src: list[list[int]] | LazyTokenIds
    tgt: list[list[int]] | LazyTokenIds
    teacher: torch.Tensor | TeacherRows  # float32 [n, teacher_dim]
    langs: list[str] | None = None
    pair_lengths: np.ndarray | None = None  # known up front when the ids are lazy

    def __len__(self) -> int:
        return len(self.src)

    @property
    def lengths(self) -> np.ndarray:
        """Each pair's longer side in tokens (what the length bucketing sorts by)."""
        if self.pair_lengths is not None:
            return self.pair_lengths
        return np.fromiter((max(len(a), len(b)) for a, b in zip(self.src, self.tgt, strict=True)), dtype=np.int64)


def tokenize_pairs(
    pairs: ParallelPairs,
    student: SentenceTransformer,
    prompt: str,
    max_length: int,
    store: TeacherStore,
    *,
    lazy_teacher: bool = False,
) -> TokenizedPairs:
    """Tokenise both sides (``prompt + text``, truncated to ``max_length``) and look the teacher vectors up
    (``lazy_teacher``: their store rows, read when a batch needs them)."""
    tokenizer = student.tokenizer
    teacher: torch.Tensor | TeacherRows
    if lazy_teacher:
        teacher = TeacherRows(store, store.row_ids(pairs.sources))
    else:
        teacher = torch.from_numpy(np.asarray(store.lookup(pairs.sources), dtype=np.float32))
    return TokenizedPairs(
        tokenize_texts(tokenizer, pairs.sources, max_length, prompt),
        tokenize_texts(tokenizer, pairs.translations, max_length, prompt),
        teacher,
        list(pairs.langs),
    )


def tokenize_pairs_lazily(
    pairs: ParallelPairs,
    student: SentenceTransformer,
    prompt: str,
    max_length: int,
    store: TeacherStore,
    rank: int,
    world_size: int,
    gather: Callable[[Any], list[Any]],
) -> TokenizedPairs:
    """The pairs of one process of ``world_size``: their lengths measured by every process on its share and
    gathered (``gather``: every process's object in rank order), their ids tokenised when a batch needs them,
    their teacher vectors read from the store when a batch needs them."""
    tokenizer = student.tokenizer
    share = slice(rank, None, world_size)
    src = tokenize_texts(tokenizer, pairs.sources[share], max_length, prompt)
    tgt = tokenize_texts(tokenizer, pairs.translations[share], max_length, prompt)
    lengths = np.empty(len(pairs.sources), dtype=np.int64)
    for owner, part in enumerate(gather([max(len(a), len(b)) for a, b in zip(src, tgt, strict=True)])):
        lengths[owner::world_size] = part
    return TokenizedPairs(
        LazyTokenIds(pairs.sources, tokenizer, max_length, prompt),
        LazyTokenIds(pairs.translations, tokenizer, max_length, prompt),
        TeacherRows(store, store.row_ids(pairs.sources)),
        list(pairs.langs),
        lengths,
    )


class Featurizer:
    """Pads token-id lists into the student's input features on the training device."""

    def __init__(self, student: SentenceTransformer, device: torch.device) -> None:
        tokenizer = student.tokenizer
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.with_token_types = "token_type_ids" in getattr(tokenizer, "model_input_names", [])
        self.device = device

    def __call__(self, token_ids: Sequence[Sequence[int]]) -> dict[str, torch.Tensor]:
        features = pad_batch(token_ids, self.pad_id, self.with_token_types)
        return {k: v.to(self.device, non_blocking=True) for k, v in features.items()}


DEVICE_TYPES = ("cpu", "cuda")  # ``train.device``
PRECISIONS = ("fp32", "bf16", "fp16")  # ``train.precision``
AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def autocast_context(device: torch.device, precision: str):
    """Autocast of the training steps on ``device`` in ``precision`` (``train.precision``; fp32: none).

    Weights, gradients and the losses stay fp32 (autocast lowers the matrix products only), and so does
    every embedding outside the steps. fp16 steps need a gradient scaler (:func:`gradient_scaler`)."""
    if precision not in AUTOCAST_DTYPES:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=AUTOCAST_DTYPES[precision])


def gradient_scaler(device: torch.device, precision: str) -> torch.amp.GradScaler:
    """The loss scaler fp16 steps need (fp16 gradients underflow without it); a pass-through otherwise."""
    return torch.amp.GradScaler(device.type, enabled=precision == "fp16")


@functools.cache
def cpu_has_native_bf16() -> bool:
    """Whether this CPU has bf16 instructions (AVX512-BF16 or AMX), where CPU autocast pays off."""
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, name, lambda: False)() for name in probes)


@torch.no_grad()
def encode_token_ids(
    student: SentenceTransformer, featurize: Featurizer, token_ids: Sequence[Sequence[int]], batch_size: int
) -> torch.Tensor:
    """Student embeddings (float32, CPU) of pre-tokenised texts, batched in length order."""
    order = np.argsort([-len(ids) for ids in token_ids], kind="stable")
    out: torch.Tensor | None = None
    was_training = student.training
    student.eval()
    # a large encode (an adapter's 100k pairs: minutes) logs each tenth, so the stage's log shows it moving
    report_every = -(-len(order) // 10) if len(order) >= PROGRESS_MIN_TEXTS else 0
    began, next_report = time.perf_counter(), report_every
    try:
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            # plain fp32 on every device: validation, head fits and adapters see what users' encode sees
            emb = student(featurize([token_ids[i] for i in batch]))["sentence_embedding"].float().cpu()
            if out is None:
                out = torch.empty((len(order), emb.shape[1]), dtype=torch.float32)
            out[torch.as_tensor(batch)] = emb
            done = start + len(batch)
            if report_every and (done >= next_report or done == len(order)):
                rate = done / max(time.perf_counter() - began, 1e-9)
                logger.info(
                    "encoded %d/%d texts (%.0f texts/s, eta %.0f s)", done, len(order), rate, (len(order) - done) / rate
                )
                next_report = done - done % report_every + report_every
    finally:
        student.train(was_training)
    if out is None:
        raise ValueError("no texts to encode")
    return out
