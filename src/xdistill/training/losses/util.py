"""Helpers the losses share (and the teacher-space adapter's fit): shape checks, cosines, duplicate pairs,
the in-batch ranking cross-entropy."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def check_pair_shapes(student_src: Tensor, student_tgt: Tensor, teacher_src: Tensor) -> None:
    if student_src.shape != student_tgt.shape or student_src.shape[0] != teacher_src.shape[0]:
        raise ValueError(
            f"batch shapes disagree: student_src {tuple(student_src.shape)}, "
            f"student_tgt {tuple(student_tgt.shape)}, teacher_src {tuple(teacher_src.shape)}"
        )


def cosine_similarity_matrix(left: Tensor, right: Tensor) -> Tensor:
    """``[n, m]`` cosines between every row of ``left`` and every row of ``right``."""
    return F.normalize(left, dim=-1) @ F.normalize(right, dim=-1).T


# Teacher vectors this close are one English sentence (the store embeds each text once): a pair repeated
# in the batch (sampling repeats small sources, length bucketing puts the copies side by side) or one
# source with translations into several languages.
SAME_SOURCE_COSINE = 1 - 1e-5


def same_source_mask(teacher_src: Tensor) -> Tensor:
    """``[n, n]``, True off the diagonal where two rows share their English source (their teacher vectors)."""
    same = cosine_similarity_matrix(teacher_src, teacher_src) >= SAME_SOURCE_COSINE
    return same & ~torch.eye(len(teacher_src), dtype=torch.bool, device=teacher_src.device)


def in_batch_ranking_loss(logits: Tensor, same: Tensor | None = None) -> Tensor:
    """Cross-entropy with the diagonal as the class, rows and columns (both directions), batch mean.

    ``same`` marks entries that are no negatives (another copy of the same pair): they are left out,
    instead of teaching the model to push a sentence away from its own translation.
    """
    if same is not None:
        logits = logits.masked_fill(same, float("-inf"))
    labels = torch.arange(len(logits), device=logits.device)
    return F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)
