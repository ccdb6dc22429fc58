"""Weight-space interpolation between the starting student and the distilled one (WiSE-FT).

Wortsman et al. (2022) showed that the straight line between a pre-trained model's weights and
its fine-tuned weights often holds models better than both ends: the fine-tuned end gains the new
skill, the pre-trained end keeps what fine-tuning forgot. Here the ends are the student *as
training started* (the untrained student with its head already fitted to the teacher, see
:mod:`xdistill.training.alignment`, so both ends live in the teacher's space) and the best
checkpoint; ``(1 - a) * start + a * trained`` for each ``a`` of ``train.interpolation``, the one
with the best dev selection metric is exported. ``a = 0`` is the starting student, ``a = 1`` the
trained one.

With ``train.interpolation_from: untrained`` the first end is the untrained student itself: its own
encoder weights and an identity head (zero-padded when the teacher is wider), so ``a = 0``
reproduces the untrained student's embeddings exactly and intermediate weights mix the untrained
student's own space into the teacher's. That trades teacher-space compatibility for the untrained
student's strengths; the dev score, which contains teacher-space retrieval, decides how far.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import torch

from xdistill.errors import XdistillError
from xdistill.training.student import load_trainable_state_dict, normalized_after_head, output_dense

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer


def interpolate_states(
    start: Mapping[str, torch.Tensor], end: Mapping[str, torch.Tensor], alpha: float
) -> dict[str, torch.Tensor]:
    """``(1 - alpha) * start + alpha * end`` for every floating-point tensor (others taken from ``end``).

    LoRA factors are the exception: the update ``B A`` is what lies on the line. With ``B`` zero at the
    start (peft's initialisation), mixing both factors would give ``a B1 ((1 - a) A0 + a A1)``; keeping
    the trained ``A1`` gives ``a B1 A1``, the straight line's point.
    """
    if set(start) != set(end):
        missing = sorted(set(start) ^ set(end))[:5]
        raise XdistillError(f"cannot interpolate two students with different weights (e.g. {missing})")
    mixed = {}
    for name, final in end.items():
        first = start[name]
        if first.shape != final.shape:
            raise XdistillError(f"cannot interpolate {name}: shapes {tuple(first.shape)} vs {tuple(final.shape)}")
        if not final.is_floating_point() or (LORA_A in name and not torch.any(start[name.replace(LORA_A, LORA_B)])):
            mixed[name] = final.clone()
        else:
            # the start comes from a checkpoint loaded onto the CPU; the trained end may live on a GPU
            mixed[name] = torch.lerp(first.to(final.device), final, alpha)
    return mixed


LORA_A, LORA_B = ".lora_A.", ".lora_B."  # peft's names of a low-rank update's factors (delta = B A)


def check_alphas(alphas: Sequence[float]) -> list[float]:
    """The interpolation weights, sorted; each must lie in [0, 1]."""
    values = sorted({float(a) for a in alphas})
    if any(not 0.0 <= a <= 1.0 for a in values):
        raise XdistillError(f"params train.interpolation: every weight must be in [0, 1], got {list(alphas)}")
    return values


def choose_interpolation(
    student: SentenceTransformer,
    start: Mapping[str, torch.Tensor],
    end: Mapping[str, torch.Tensor],
    alphas: Sequence[float],
    measure: Callable[[], dict[str, float]],
    better: Callable[[float, float | None], bool],
    metric: str,
    known: Mapping[float, dict[str, float]] | None = None,
    tolerance: float = 0.0,
) -> tuple[float, dict[float, dict[str, float]]]:
    """Measure the student at each ``alpha`` and leave it at the best one; returns ``(alpha, all measurements)``.

    ``measure()`` evaluates the student as currently loaded; ``known`` supplies measurements
    already made (the start and the best checkpoint were measured during training). On a tie the
    larger ``alpha`` wins (the more distilled model, which lives more fully in the teacher's space).
    With ``tolerance`` > 0 the smallest ``alpha`` whose value is within ``tolerance`` of the best
    value wins instead (see the module docstring).
    """
    results: dict[float, dict[str, float]] = {}
    best_alpha: float | None = None
    for alpha in check_alphas(alphas):
        if known and alpha in known:
            results[alpha] = dict(known[alpha])
        else:
            load_trainable_state_dict(student, interpolate_states(start, end, alpha))
            results[alpha] = measure()
        value = results[alpha][metric]
        if best_alpha is None or better(value, results[best_alpha][metric]) or value == results[best_alpha][metric]:
            best_alpha = alpha
    assert best_alpha is not None
    if not math.isfinite(results[best_alpha][metric]):
        raise XdistillError(f"WiSE-FT: {metric} is not finite at any interpolation weight; nothing to choose by")
    if tolerance > 0:
        best_value = results[best_alpha][metric]
        best_alpha = min(a for a, m in results.items() if a <= best_alpha and abs(m[metric] - best_value) <= tolerance)
    load_trainable_state_dict(student, interpolate_states(start, end, best_alpha))
    return best_alpha, results


def check_identity_head(student: SentenceTransformer) -> None:
    """Refuse ``interpolation_from: untrained`` for a student whose head cannot be the identity (checked before
    training, so a run does not train for nothing)."""
    head = output_dense(student)
    if head is None:
        raise XdistillError("train.interpolation_from: untrained needs a student with a Dense head")
    out_dim, in_dim = head.linear.weight.shape
    if out_dim < in_dim:
        raise XdistillError(
            f"train.interpolation_from: untrained needs a head at least as wide as the encoder "
            f"({in_dim} -> {out_dim} cannot be the identity); use interpolation_from: start"
        )
    if not normalized_after_head(student):  # a = 0 is the untrained student itself only when the output is normalised
        raise XdistillError(
            "train.interpolation_from: untrained needs a Normalize module after the student's Dense head; "
            "use interpolation_from: start"
        )


def with_identity_head(
    student: SentenceTransformer, state: Mapping[str, torch.Tensor], scale: float = 1.0
) -> dict[str, torch.Tensor]:
    """``state`` with the student's Dense head set to ``scale`` x the identity (zero-padded to a wider output).

    The Normalize after the head makes the scale irrelevant at ``a = 0``; in between, a ``scale`` of
    1 / (the encoder's typical pooled-embedding norm) gives both ends outputs of the same size, so
    the mixture moves evenly from one space to the other instead of jumping.
    """
    check_identity_head(student)
    head = output_dense(student)
    assert head is not None  # check_identity_head raised for a student without one
    out_dim, in_dim = head.linear.weight.shape
    names = {id(parameter): name for name, parameter in student.named_parameters()}
    identity = dict(state)
    identity[names[id(head.linear.weight)]] = scale * torch.eye(out_dim, in_dim, dtype=head.linear.weight.dtype)
    identity[names[id(head.linear.bias)]] = torch.zeros(out_dim, dtype=head.linear.bias.dtype)
    return identity
