"""Start the student's Dense head in the teacher's space before any training step.

The student's and the teacher's spaces are unrelated at the start (cosine ~0 between
student(x) and teacher(x)), so plain MSE first drags every embedding towards the teacher's
mean direction, a change of the whole network that costs the untrained student its own quality before
it learns anything from the teacher. Fitting the head first removes that step. With X the
student's pooled embeddings (before the head) of training sources and translations and T the
teacher vectors of the sources:

- ``procrustes``: the orthogonal map R minimising ||unit(X) R - T|| (semi-orthogonal when the
  teacher is wider, e.g. 384 -> 768). It keeps every cosine of the untrained student, including
  its strong common direction (mE5-small: mean pairwise cosine ~0.77, the teacher's ~0.05),
  which training must then remove;
- ``least_squares``: the affine ridge regression ``X W + b ~ T``. Its bias cancels the common
  direction and it weighs the student's features by how well they predict the teacher, so the
  untrained student already sits close to the teacher (on mE5-small <- MiniLM-L6: dev MSE x100
  0.16 against 0.27 for Procrustes, and 0.18 after 1000 steps of MSE training from Procrustes);
- ``pca``: the target is the teacher reduced to the student's dimension k by PCA (its top-k
  principal axes P, fitted on the teacher vectors of the sample, uncentred so that the axes
  reconstruct the vectors MSE compares), and the head is fixed to ``R P^T``: R the orthogonal
  Procrustes map of unit(X) onto T P. The trainer keeps this head frozen, so ``||y P^T - T||^2 =
  ||y - T P||^2 + ||T - T P P^T||^2``: training moves the student towards the PCA-reduced teacher
  and the fixed ``P^T`` maps it back into the teacher's space for export and teacher-space search.
  Procrustes, by contrast, picks the k teacher directions that correlate best with the untrained
  student and lets training move them; with a teacher no wider than the student P is a full basis
  and the lever reduces to a frozen Procrustes head;
- a head to a smaller dimension k than both the student's and the teacher's (LEALLA-style): the top-k
  principal axes of the centred unit embeddings; the feature-distillation projection (k -> teacher) starts as the
  least-squares fit of the projected embeddings onto T.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from xdistill.data.sampling import evenly_spaced
from xdistill.errors import XdistillError
from xdistill.training.student import normalized_after_head, output_dense
from xdistill.training.tokenized import Featurizer, TokenizedPairs, encode_token_ids

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

# Ridge strengths tried, relative to the mean diagonal of X^T X; the one with the lowest error on
# held-out pairs is used (few pairs need strong shrinkage, thousands almost none).
RIDGE_GRID = (1e-4, 1e-3, 1e-2, 1e-1, 1.0)
CV_FOLDS = 5


class _Passthrough(nn.Module):
    """Stands in for a bypassed module (the Dense head, Normalize) while features are computed."""

    def forward(self, features: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return features


@contextlib.contextmanager
def modules_bypassed(student: SentenceTransformer, *type_names: str) -> Iterator[None]:
    """The student with every module of the given class names replaced by a pass-through."""
    names = [key for key, module in student._modules.items() if type(module).__name__ in type_names]
    saved = {name: student._modules[name] for name in names}
    for name in names:
        student._modules[name] = _Passthrough()
    try:
        yield
    finally:
        student._modules.update(saved)


def head_bypassed(student: SentenceTransformer) -> contextlib.AbstractContextManager[None]:
    """The student without its Dense head (unit embeddings of the untrained student)."""
    return modules_bypassed(student, "Dense")


def align_head_to_teacher(
    student: SentenceTransformer,
    objective: nn.Module,
    featurize: Featurizer,
    pairs: TokenizedPairs,
    n_pairs: int,
    batch_size: int,
    method: str = "procrustes",
) -> float:
    """Set the student's Dense head (and the feature-distillation projection) as the module docstring says.

    Uses ``n_pairs`` evenly spread training pairs (both sides). Returns the MSE to the teacher
    after alignment (through the projection for a low-dimensional head).
    """
    head = output_dense(student)
    if head is None:
        raise XdistillError("align_to_teacher needs a Dense head on the student")
    linear = head.linear
    out_dim, in_dim = linear.weight.shape
    rows, ids, teacher = fit_sample(pairs, n_pairs)
    if out_dim < in_dim and out_dim != teacher.shape[1]:  # a head into a teacher narrower than the student is not one
        if method == "pca":
            raise XdistillError(
                f"head_fit pca reduces the teacher to the student's dimension: a {out_dim}-d "
                f"teacher is narrower than the {in_dim}-d student (use procrustes)"
            )
        _require_unit_outputs(student, "a low-dimensional head's principal-axes fit")
        with head_bypassed(student):
            unit = encode_token_ids(student, featurize, ids, batch_size).double()
        return _principal_axes_head(linear, unit, teacher, getattr(objective, "projection", None))
    if out_dim != teacher.shape[1]:
        raise XdistillError(f"cannot align a {in_dim} -> {out_dim} head to a {teacher.shape[1]}-d teacher")
    if method in ("procrustes", "pca"):
        _require_unit_outputs(student, f"head_fit {method}", ": use head_fit least_squares")
        with head_bypassed(student):
            unit = encode_token_ids(student, featurize, ids, batch_size).double()
        mapping = procrustes_map(unit, teacher) if method == "procrustes" else pca_head_map(unit, teacher)
        _set_linear(linear, mapping.T, torch.zeros(out_dim, dtype=torch.float64))
        return float(torch.mean((unit @ mapping - teacher) ** 2))
    if method == "least_squares":
        with modules_bypassed(student, "Dense", "Normalize"):
            pooled = encode_token_ids(student, featurize, ids, batch_size).double()
        pair_of_row = torch.arange(len(ids)) % len(rows)  # a pair's two sides share a fold
        weight, bias = ridge_map(pooled, teacher, groups=pair_of_row)
        _set_linear(linear, weight.T, bias)
        return float(torch.mean((F.normalize(pooled @ weight + bias, dim=-1) - teacher) ** 2))
    raise XdistillError(f"unknown head fit {method!r} (procrustes, least_squares, pca)")


def _require_unit_outputs(student: SentenceTransformer, fit: str, hint: str = "") -> None:
    if not normalized_after_head(student):
        raise XdistillError(
            f"{fit} fits the head on unit vectors, but no Normalize module follows the student's "
            f"Dense head (its outputs would have another scale){hint}"
        )


def fit_sample(pairs: TokenizedPairs, n_pairs: int) -> tuple[np.ndarray, list, torch.Tensor]:
    """``n_pairs`` evenly spread training pairs: their rows, the token ids of both sides (sources, then
    translations) and the teacher vector of each text's source (float64)."""
    rows = evenly_spaced(len(pairs), n_pairs)
    ids = [pairs.src[i] for i in rows] + [pairs.tgt[i] for i in rows]
    return rows, ids, torch.cat([pairs.teacher[torch.as_tensor(rows)]] * 2).double()


def rotation_unavailable(student: SentenceTransformer, teacher_dim: int) -> str | None:
    """Why the student's output cannot be rotated onto a ``teacher_dim``-d teacher's space; None when it can."""
    head = output_dense(student)
    if head is None:
        return "the student has no Dense head"
    if head.linear.weight.shape[0] != teacher_dim:
        return (
            f"a {head.linear.weight.shape[0]}-d student lives in its own space, not in the "
            f"{teacher_dim}-d teacher's (a low-dimensional head)"
        )
    if not normalized_after_head(student):
        return "no Normalize module follows the Dense head (a rotation keeps cosines only of unit outputs)"
    return None


def rotate_output_to_teacher(
    student: SentenceTransformer, featurize: Featurizer, pairs: TokenizedPairs, n_pairs: int, batch_size: int
) -> tuple[dict[str, float], torch.Tensor]:
    """Rotate the finished student's output onto the teacher's space; returns the fit MSE before and after,
    and the rotated student's embeddings of the fit sample (:func:`fit_sample` of ``n_pairs``: float32, equal
    to encoding it again to rounding), which a later fit on the same sample reuses instead of encoding.

    WiSE-FT with ``a < 1`` leaves the student between the untrained student's space and the
    teacher's. The orthogonal R minimising ||E R - T|| (E: the student's final embeddings of both
    sides of ``n_pairs`` training pairs, T: the teacher vectors of the sources) changes no cosine
    between two student embeddings, so every STS, retrieval, mining and language-bias score stays
    as it is, while student(x) moves towards teacher(x). The student ends in ``Dense -> Normalize``
    and R preserves norms, so ``R^T normalize(W p + b) = normalize(R^T W p + R^T b)``: R folds into
    the Dense head exactly.
    """
    reason = rotation_unavailable(student, pairs.teacher.shape[1])
    if reason is not None:
        raise XdistillError(f"export_rotation: {reason}")
    head = output_dense(student)
    assert head is not None  # rotation_unavailable gave a reason for a student without one
    linear = head.linear
    rows, ids, teacher = fit_sample(pairs, n_pairs)
    embeddings = encode_token_ids(student, featurize, ids, batch_size).double()
    rotation = procrustes_map(embeddings, teacher)  # [dim, dim], orthogonal
    with torch.no_grad():  # the rotation is fitted on CPU embeddings; the head may live on a GPU
        weight, bias = linear.weight.detach().cpu().double(), linear.bias.detach().cpu().double()
        _set_linear(linear, rotation.T @ weight, rotation.T @ bias)
    rotated = embeddings @ rotation
    return (
        {
            "pairs": len(rows),
            "mse_before": float(torch.mean((embeddings - teacher) ** 2)),
            "mse_after": float(torch.mean((rotated - teacher) ** 2)),
        },
        rotated.float(),
    )


def mean_pooled_norm(
    student: SentenceTransformer, featurize: Featurizer, pairs: TokenizedPairs, batch_size: int, n_texts: int = 256
) -> float:
    """The mean L2 norm of the encoder's pooled embeddings (before head and Normalize) of training texts."""
    rows = evenly_spaced(len(pairs), max(n_texts // 2, 1))
    ids = [pairs.src[i] for i in rows] + [pairs.tgt[i] for i in rows]
    with modules_bypassed(student, "Dense", "Normalize"):
        pooled = encode_token_ids(student, featurize, ids, batch_size)
    return float(pooled.norm(dim=1).mean())


def procrustes_map(source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The (semi-)orthogonal ``[in, out]`` map R minimising ``||source R - target||``."""
    u, _, vt = torch.linalg.svd(source.T @ target, full_matrices=False)
    return u @ vt


def teacher_principal_axes(teacher: torch.Tensor, k: int) -> torch.Tensor:
    """``[dim, k]`` orthonormal columns: the top-k principal axes of the (uncentred) teacher vectors.

    A sample of fewer than k vectors spans fewer than k directions; the basis is completed with an
    orthonormal complement (those axes carry none of the sample's variance, whichever they are).
    """
    u, _, _ = torch.linalg.svd(teacher.T, full_matrices=True)
    return u[:, :k]


def pca_head_map(unit: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """The ``[k, dim]`` head map ``R P^T`` of the ``pca`` fit (module docstring): ``unit`` holds the student's
    unit embeddings, one row per row of ``teacher`` (its target vectors; a vector repeated for both sides of a
    pair leaves the principal axes as they are)."""
    axes = teacher_principal_axes(teacher, unit.shape[1])
    rotation = procrustes_map(unit, teacher @ axes)  # [k, k]
    return rotation @ axes.T


def ridge_map(
    source: torch.Tensor, target: torch.Tensor, ridge: float | None = None, groups: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(W [in, out], b [out])`` minimising ``||source W + b - target||^2 + lambda ||W||^2``.

    The bias is not penalised (it is fitted on centred data); lambda is ``ridge`` times the mean
    diagonal of the centred Gram matrix, so it is scale-free. ``ridge=None`` picks it from
    :data:`RIDGE_GRID` by cross-validation over ``groups`` (rows of one group share a fold).
    """
    if ridge is None:
        ridge = _cross_validated_ridge(source, target, groups)
    mean_x, mean_t = source.mean(dim=0), target.mean(dim=0)
    x, t = source - mean_x, target - mean_t
    gram = x.T @ x
    lam = ridge * torch.diagonal(gram).mean()
    weight = torch.linalg.solve(gram + lam * torch.eye(gram.shape[0], dtype=gram.dtype), x.T @ t)
    return weight, mean_t - mean_x @ weight


def _cross_validated_ridge(source: torch.Tensor, target: torch.Tensor, groups: torch.Tensor | None) -> float:
    groups = torch.arange(len(source)) if groups is None else groups
    fold = groups % CV_FOLDS
    errors = []
    for ridge in RIDGE_GRID:
        error = 0.0
        for k in range(CV_FOLDS):
            held = fold == k
            if held.all() or not held.any():
                continue
            weight, bias = ridge_map(source[~held], target[~held], ridge)
            error += float(torch.sum((source[held] @ weight + bias - target[held]) ** 2))
        errors.append(error)
    return RIDGE_GRID[int(np.argmin(errors))]


def _principal_axes_head(
    linear: nn.Linear, unit: torch.Tensor, teacher: torch.Tensor, projection: nn.Linear | None
) -> float:
    out_dim = linear.weight.shape[0]
    # principal axes of the centred embeddings: the common direction every embedding shares
    # carries no information and gets no axis
    # fewer fitted rows than out_dim span fewer axes: then the basis is completed (axes without the
    # sample's variance), as teacher_principal_axes does
    _, _, vt = torch.linalg.svd(unit - unit.mean(dim=0), full_matrices=len(unit) < out_dim)
    axes = vt[:out_dim].T  # [in, k]
    _set_linear(linear, axes.T, torch.zeros(out_dim, dtype=torch.float64))
    if projection is None:
        return float("nan")
    reduced = F.normalize(unit @ axes, dim=-1)  # what the student now outputs (Normalize follows the head)
    weight, bias = ridge_map(reduced, teacher, ridge=1e-4)
    _set_linear(projection, weight.T, bias)
    return float(torch.mean((reduced @ weight + bias - teacher) ** 2))


def _set_linear(linear: nn.Linear, weight: torch.Tensor, bias: torch.Tensor) -> None:
    with torch.no_grad():
        linear.weight.copy_(weight.to(linear.weight.dtype))
        linear.bias.copy_(bias.to(linear.bias.dtype))
