"""The Hugging Face model inside a sentence-transformers encoder (students, trimming, export share it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from torch import nn

from xdistill.errors import XdistillError

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer
    from transformers import PreTrainedModel


def transformer_backbone(model: SentenceTransformer) -> PreTrainedModel:
    """The Hugging Face model inside the student's first (Transformer) module."""
    first = model[0]
    backbone = getattr(first, "auto_model", None) or getattr(first, "model", None)
    if not isinstance(backbone, nn.Module):
        raise XdistillError(f"student's first module {type(first).__name__} holds no transformer model")
    # a sentence-transformers Transformer module holds a Hugging Face model; checked only as the module it runs as
    return cast("PreTrainedModel", backbone)
