"""The frozen lower layers' output of every training text, computed once and replayed at every step.

With ``train.student.freeze_layers: k`` the embedding block and the first ``k`` transformer layers
never change during training, so what they make of a training text is the same at every step.
``train.student.cache_frozen: true`` runs them once over every training text before the first step
(in inference mode, without dropout: a fixed feature extractor) and keeps their token states; each
step then runs only the upper layers, pooling and the head on those states. Forward and backward
through 4 of mE5-small's 12 layers instead of 12 is about a third of a step's arithmetic
(BENCHMARKS.md, train: the measured gain), paid for by one forward pass through the lower layers per
text and the states' memory: 2 bytes x hidden size per token (mE5-small, 100k pairs of ~22 tokens:
about 3.4 GB; the default's 7000 pairs: 230 MB).

Both passes go through the encoder's own ``forward`` (and the student's own pooling, head and
normalisation) with its module lists cut to the layers in question: the lower pass with the real
embedding block and layers ``0..k-1``, the upper pass with layers ``k..`` and an embedding block that
hands the cached states through as ``inputs_embeds``. The attention mask is built by the encoder as
in any other call, so nothing of the model's internals is re-implemented here.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from xdistill.errors import XdistillError
from xdistill.models.backbone import transformer_backbone
from xdistill.training.student import layer_stack
from xdistill.training.tokenized import Featurizer, TokenizedPairs

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

logger = logging.getLogger(__name__)

# The key of a step's features that carries cached token states instead of token ids.
CACHED_STATES = "inputs_embeds"


class _HandThrough(nn.Module):
    """Stands in for the embedding block: the cached states are the layers' input as they are."""

    def forward(self, inputs_embeds: torch.Tensor | None = None, **_: object) -> torch.Tensor:
        if inputs_embeds is None:
            raise XdistillError("a student running on cached frozen-layer states was called with token ids")
        return inputs_embeds


@contextlib.contextmanager
def _cut(backbone: nn.Module, layers: slice, hand_through: bool) -> Iterator[None]:
    """Run ``backbone`` with only ``layers`` of its stack (and, with ``hand_through``, no embedding block)."""
    parent, attr, full = layer_stack(backbone)
    embeddings = getattr(backbone, "embeddings", None)
    if hand_through and not isinstance(embeddings, nn.Module):
        raise XdistillError(f"train.student.cache_frozen: {type(backbone).__name__} has no embeddings block to bypass")
    # the ModuleList's own __setattr__ / _modules entry: the parameters stay the same objects
    parent._modules[attr] = nn.ModuleList(list(full)[layers])
    if hand_through:
        backbone._modules["embeddings"] = _HandThrough()
    try:
        yield
    finally:
        parent._modules[attr] = full
        if hand_through:
            backbone._modules["embeddings"] = embeddings


@dataclass
class FrozenStates:
    """Token states after the frozen layers: sources are texts ``0..n-1``, translations ``n..2n-1``."""

    states: torch.Tensor  # [total tokens, hidden], the storage dtype
    offsets: np.ndarray  # [2n + 1]: text i's tokens are states[offsets[i]:offsets[i + 1]]
    frozen_layers: int
    seconds: float = 0.0  # the pass that computed them

    def summary(self) -> dict[str, float]:
        """What the run reports: texts, tokens, megabytes and the pass's seconds."""
        return {
            "frozen_layers": self.frozen_layers,
            "texts": len(self.offsets) - 1,
            "tokens": int(self.offsets[-1]),
            "megabytes": round(self.nbytes / 2**20, 1),
            "seconds": round(self.seconds, 2),
        }

    @property
    def pairs(self) -> int:
        return (len(self.offsets) - 1) // 2

    @property
    def nbytes(self) -> int:
        return self.states.element_size() * self.states.numel()

    def features(self, pair_indices: Sequence[int] | np.ndarray, device: torch.device) -> dict[str, torch.Tensor]:
        """A step's features: the sources of ``pair_indices``, then their translations, right-padded."""
        texts = [int(i) for i in pair_indices] + [int(i) + self.pairs for i in pair_indices]
        starts, ends = self.offsets[texts], self.offsets[np.asarray(texts) + 1]
        width = int((ends - starts).max())
        hidden = torch.zeros((len(texts), width, self.states.shape[1]), dtype=torch.float32)
        mask = torch.zeros((len(texts), width), dtype=torch.long)
        for row, (start, end) in enumerate(zip(starts, ends, strict=True)):
            hidden[row, : end - start] = self.states[start:end]
            mask[row, : end - start] = 1
        return {
            CACHED_STATES: hidden.to(device, non_blocking=True),
            "attention_mask": mask.to(device, non_blocking=True),
        }


@torch.no_grad()
def compute_frozen_states(
    student: SentenceTransformer,
    featurize: Featurizer,
    train: TokenizedPairs,
    frozen_layers: int,
    batch_size: int,
    dtype: torch.dtype = torch.float16,
) -> FrozenStates:
    """Run the embedding block and the first ``frozen_layers`` layers once over every training text.

    Texts go in length order (little padding); each text keeps exactly its own tokens' states, so a
    step pads only to its own longest text, as the uncached path does.
    """
    backbone = transformer_backbone(student)
    texts = [*train.src, *train.tgt]
    lengths = np.fromiter((len(ids) for ids in texts), dtype=np.int64)
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    hidden_size = int(getattr(backbone.config, "hidden_size", 0) or backbone.config.dim)
    states = torch.empty((int(offsets[-1]), hidden_size), dtype=dtype)
    order = np.argsort(-lengths, kind="stable")
    was_training = backbone.training
    backbone.eval()
    started, reported = time.perf_counter(), time.perf_counter()
    try:
        with _cut(backbone, slice(0, frozen_layers), hand_through=False):
            for done, start in enumerate(range(0, len(order), batch_size), start=1):
                batch = order[start : start + batch_size]
                features = featurize([texts[i] for i in batch])
                out = backbone(**features, return_dict=True).last_hidden_state.float().cpu()
                for row, i in enumerate(batch):
                    states[offsets[i] : offsets[i + 1]] = out[row, : lengths[i]].to(dtype)
                if time.perf_counter() - reported > 30:  # long work shows progress
                    reported = time.perf_counter()
                    logger.info(
                        "frozen-layer states: %d of %d texts (%.0f texts/s)",
                        min(done * batch_size, len(order)),
                        len(order),
                        done * batch_size / (reported - started),
                    )
    finally:
        backbone.train(was_training)
    cache = FrozenStates(states, offsets, frozen_layers, time.perf_counter() - started)
    logger.info(
        "frozen-layer states of %d texts (%d tokens, %.0f MB) computed through %d layers in %.0f s",
        len(texts),
        int(offsets[-1]),
        cache.nbytes / 2**20,
        frozen_layers,
        cache.seconds,
    )
    return cache


def embed_from_states(
    student: SentenceTransformer, features: dict[str, torch.Tensor], frozen_layers: int
) -> torch.Tensor:
    """The student's sentence embeddings from cached frozen-layer states: the upper layers, pooling, head."""
    backbone = transformer_backbone(student)
    with _cut(backbone, slice(frozen_layers, None), hand_through=True):
        return student(features)["sentence_embedding"]
