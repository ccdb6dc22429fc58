"""Distillation losses: values on hand-computed tiny cases, training decreases them, the objective."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from scipy.stats import spearmanr
from torch import nn

from xdistill.errors import XdistillError
from xdistill.training.losses import (
    LOSS_NAMES,
    MAX_RANKED_PAIRS,
    DistillationObjective,
    LossConfig,
    additive_margin_softmax_loss,
    cosent_loss,
    cosine_similarity_matrix,
    feature_distillation_loss,
    logit_distillation_loss,
    mse_distillation_loss,
    same_source_mask,
    similarity_ranking_loss,
)


def t(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


# ---------------------------------------------------------------------------------------------
# Values on hand-computed cases (the expected numbers are worked out in the comments)
# ---------------------------------------------------------------------------------------------


def test_mse_distillation_value():
    student_src = t([[1, 0], [0, 1]])
    student_tgt = t([[0, 0], [1, 1]])
    teacher_src = t([[1, 1], [0, 0]])
    # src - teacher = [[0,-1],[0,1]] -> squares sum 2 over 4 elements = 0.5
    # tgt - teacher = [[-1,-1],[1,1]] -> 4 / 4 = 1.0 ; mean of the two = 0.75
    assert mse_distillation_loss(student_src, student_tgt, teacher_src).item() == pytest.approx(0.75)


def test_mse_distillation_rejects_dimension_mismatch():
    with pytest.raises(ValueError, match="feature distillation"):
        mse_distillation_loss(t([[1, 0]]), t([[1, 0]]), t([[1, 0, 0]]))


def test_feature_distillation_value():
    projection = nn.Linear(1, 2).double()
    with torch.no_grad():
        projection.weight.copy_(t([[2], [-1]]))
        projection.bias.copy_(torch.tensor([0.0, 1.0], dtype=torch.float64))
    student_src = t([[1], [0]])  # projected: [[2, 0], [0, 1]]
    student_tgt = t([[0.5], [1]])  # projected: [[1, 0.5], [2, 0]]
    teacher_src = t([[2, 0], [0, 0]])
    # src: diffs [[0,0],[0,1]] -> 1/4 = 0.25 ; tgt: diffs [[-1,.5],[2,0]] -> 5.25/4 = 1.3125
    expected = (0.25 + 1.3125) / 2
    value = feature_distillation_loss(projection, student_src, student_tgt, teacher_src)
    assert value.item() == pytest.approx(expected)


def test_logit_distillation_value():
    teacher_src = t([[3, 0], [0, 2]])  # cosines: identity (lengths must not matter)
    student_src = t([[1, 0], [0, 1]])
    student_tgt = t([[1, 1], [0, 5]])  # unit rows: [1/sqrt2, 1/sqrt2], [0, 1]
    # student cosines [[1/sqrt2, 0], [1/sqrt2, 1]]; with T = 0.5 the logits are
    # student [[sqrt2, 0], [sqrt2, 2]] and teacher [[2, 0], [0, 2]]:
    # squared diffs (2 - sqrt2)^2 + 0 + 2 + 0 = 8 - 4 sqrt2, mean over 4 = 2 - sqrt2
    value = logit_distillation_loss(student_src, student_tgt, teacher_src, temperature=0.5)
    assert value.item() == pytest.approx(2 - math.sqrt(2))


def test_logit_distillation_works_across_dimensions():
    value = logit_distillation_loss(t([[1, 0]]), t([[0, 1]]), t([[1, 2, 3]]), temperature=1.0)
    # 1x1 matrices: student cos = 0, teacher cos = 1 -> (0 - 1)^2 = 1
    assert value.item() == pytest.approx(1.0)


def test_additive_margin_softmax_value():
    src = t([[1, 0], [0, 1]])
    tgt = t([[2, 0], [1, 1]])  # unit rows: [1, 0], [1/sqrt2, 1/sqrt2]
    margin, scale = 0.2, 10.0
    r = 1 / math.sqrt(2)
    # cosines [[1, r], [0, r]]; logits = 10 * (cos - 0.2 on the diagonal) = [[8, 10r], [0, 10r - 2]]
    l00, l01, l10, l11 = 8.0, 10 * r, 0.0, 10 * r - 2

    def xent(correct: float, other: float) -> float:
        return -correct + math.log(math.exp(correct) + math.exp(other))

    src_to_tgt = (xent(l00, l01) + xent(l11, l10)) / 2  # rows
    tgt_to_src = (xent(l00, l10) + xent(l11, l01)) / 2  # columns
    value = additive_margin_softmax_loss(src, tgt, margin=margin, scale=scale)
    assert value.item() == pytest.approx(src_to_tgt + tgt_to_src)
    # sanity of the hand numbers: the margin makes the loss larger than without it
    assert value.item() > additive_margin_softmax_loss(src, tgt, margin=0.0, scale=scale).item()


def test_a_pair_repeated_in_the_batch_is_no_negative_of_itself():
    """Sampling repeats small sources and length bucketing puts the copies together: a copy of the true
    translation must not count as a wrong answer (it made a perfect student's loss large)."""
    src = t([[1, 0, 0], [0, 1, 0], [0, 0, 1]])
    teacher = t([[1, 0, 0], [0, 1, 0], [0, 0, 1]])
    clean = additive_margin_softmax_loss(src, src, 0.3, 20.0, same_source_mask(teacher))
    repeated_src, repeated_teacher = torch.cat([src, src[:1]]), torch.cat([teacher, teacher[:1]])
    assert same_source_mask(repeated_teacher).nonzero().tolist() == [[0, 3], [3, 0]]
    masked = additive_margin_softmax_loss(repeated_src, repeated_src, 0.3, 20.0, same_source_mask(repeated_teacher))
    unmasked = additive_margin_softmax_loss(repeated_src, repeated_src, 0.3, 20.0)
    assert clean.item() < 0.01 and masked.item() < 0.01
    assert unmasked.item() > 1.0  # what the loss said before: a copy of the answer counted as a wrong one


def test_cosent_loss_value_counts_only_pairs_the_teacher_orders():
    # teacher: pair 0 (0.9) above pair 1 (0.1) above pair 2 (0.1, tied with 1: no term between them)
    teacher = t([[0.9, 0.1, 0.1]])[0]
    student = t([[0.2, 0.5, 0.4]])[0]
    # terms: (k=1 below l=0): exp(2 * (0.5 - 0.2)); (k=2 below l=0): exp(2 * (0.4 - 0.2))
    expected = math.log(1 + math.exp(0.6) + math.exp(0.4))
    assert cosent_loss(student, teacher, scale=2.0).item() == pytest.approx(expected)
    # only the order counts, not the level: shifting every student cosine changes nothing
    assert cosent_loss(student - 0.3, teacher, scale=2.0).item() == pytest.approx(expected)


def test_cosent_loss_scores_large_families_on_a_bounded_subset():
    generator = torch.Generator().manual_seed(2)
    teacher = torch.rand(3 * MAX_RANKED_PAIRS, generator=generator)
    # the student agrees with the teacher's order: every subset of it does too, so the loss stays at its floor
    agreeing = cosent_loss(teacher, teacher, scale=20.0)
    assert agreeing.item() < cosent_loss(-teacher, teacher, scale=20.0).item()
    assert torch.isfinite(agreeing)


def test_similarity_ranking_prefers_the_teachers_order():
    generator = torch.Generator().manual_seed(1)
    teacher = torch.randn(8, 6, generator=generator, dtype=torch.float64)
    # a student equal to the teacher (on both sides) beats one whose rows are shuffled
    kept = similarity_ranking_loss(teacher, teacher, teacher, scale=20.0)
    shuffled = similarity_ranking_loss(
        teacher[torch.randperm(8, generator=generator)],
        teacher[torch.randperm(8, generator=generator)],
        teacher,
        scale=20.0,
    )
    assert kept.item() < shuffled.item()


# ---------------------------------------------------------------------------------------------
# Training decreases each loss
# ---------------------------------------------------------------------------------------------


def _pairs(n: int = 6, student_dim: int = 4, teacher_dim: int = 4, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    student_src = nn.Parameter(torch.randn(n, student_dim, generator=generator))
    student_tgt = nn.Parameter(torch.randn(n, student_dim, generator=generator))
    teacher_src = torch.randn(n, teacher_dim, generator=generator)
    return student_src, student_tgt, teacher_src


def _train(loss_fn, parameters, steps: int = 60, lr: float = 0.05) -> tuple[float, float]:
    optimizer = torch.optim.Adam(parameters, lr=lr)
    first = last = None
    for _ in range(steps):
        optimizer.zero_grad()
        loss = loss_fn()
        loss.backward()
        optimizer.step()
        first = loss.item() if first is None else first
        last = loss.item()
    return first, last


def test_mse_decreases_when_trained():
    s, g, teacher = _pairs()
    first, last = _train(lambda: mse_distillation_loss(s, g, teacher), [s, g])
    assert last < 0.2 * first


def test_feature_distillation_decreases_when_trained():
    s, g, teacher = _pairs(student_dim=2, teacher_dim=5)
    projection = nn.Linear(2, 5)
    first, last = _train(lambda: feature_distillation_loss(projection, s, g, teacher), [s, g, *projection.parameters()])
    assert last < 0.5 * first


def test_logit_distillation_decreases_when_trained():
    s, g, teacher = _pairs(student_dim=3, teacher_dim=5)
    first, last = _train(lambda: logit_distillation_loss(s, g, teacher, temperature=0.1), [s, g])
    assert last < 0.5 * first


def test_similarity_ranking_teaches_the_teachers_order_when_trained():
    # 6-d: in 3-d a student side can stall as a mirror image of the other (same order within, not across)
    s, g, teacher = _pairs(n=8, student_dim=6, teacher_dim=5)

    def agreement() -> float:  # Spearman of the student's cross-side cosines with the teacher's, off the diagonal
        off = ~torch.eye(8, dtype=torch.bool)
        student = cosine_similarity_matrix(g, s)[off].detach().numpy()
        return spearmanr(student, cosine_similarity_matrix(teacher, teacher)[off].numpy()).statistic

    before = agreement()
    first, last = _train(lambda: similarity_ranking_loss(s, g, teacher, scale=20.0), [s, g], steps=200)
    assert last < first
    assert before < 0.5 < 0.9 < agreement()


def test_additive_margin_softmax_decreases_when_trained():
    s, g, _ = _pairs()
    first, last = _train(lambda: additive_margin_softmax_loss(s, g, margin=0.3, scale=20.0), [s, g])
    assert last < 0.2 * first


# ---------------------------------------------------------------------------------------------
# The objective
# ---------------------------------------------------------------------------------------------

SUBSETS = [c for k in range(1, len(LOSS_NAMES) + 1) for c in itertools.combinations(LOSS_NAMES, k)]


@pytest.mark.parametrize("active", SUBSETS, ids=["+".join(c) for c in SUBSETS])
def test_objective_any_subset(active: tuple[str, ...]):
    weights = {name: (0.5 + LOSS_NAMES.index(name) if name in active else 0.0) for name in LOSS_NAMES}
    student_dim = 4 if "mse" in active else 3
    objective = DistillationObjective({**weights, "temperature": 0.2}, student_dim=student_dim, teacher_dim=4)
    s, g, teacher = _pairs(student_dim=student_dim, teacher_dim=4)
    total, parts = objective(s, g, teacher)
    assert set(parts) == set(active)
    assert (objective.projection is not None) == ("feature_distillation" in active)
    # the total is the weighted sum of the parts, each equal to its pure function
    expected = {
        "mse": lambda: mse_distillation_loss(s, g, teacher),
        "feature_distillation": lambda: feature_distillation_loss(objective.projection, s, g, teacher),
        "logit_distillation": lambda: logit_distillation_loss(s, g, teacher, 0.2),
        "additive_margin_softmax": lambda: additive_margin_softmax_loss(s, g, 0.3, 20.0, same_source_mask(teacher)),
        "similarity_ranking": lambda: similarity_ranking_loss(s, g, teacher, 20.0),
    }
    for name in active:
        assert parts[name].item() == pytest.approx(expected[name]().item(), rel=1e-6)
        assert not parts[name].requires_grad
    assert total.item() == pytest.approx(sum(weights[n] * parts[n].item() for n in active), rel=1e-6)
    # and it trains: students and projection together
    params = [s, g, *objective.parameters()]
    first, last = _train(lambda: objective(s, g, teacher)[0], params, steps=40)
    assert last < first


def test_objective_is_float32_under_bf16_autocast():
    # bf16 cosines step by ~0.004 near 1: the duplicate mask would take a near-paraphrase (teacher cosine
    # 0.999) for a copy, and cosines / T would carry rounding noise. Under autocast the losses must not move.
    torch.manual_seed(3)
    teacher = torch.randn(8, 16)
    teacher[1] = teacher[0] + 0.03 * torch.randn(16)  # a different sentence, very close
    s, g = torch.randn(8, 16), torch.randn(8, 16)
    weights = {
        "mse": 1.0,
        "feature_distillation": 0.0,
        "logit_distillation": 1.0,
        "additive_margin_softmax": 1.0,
        "similarity_ranking": 1.0,
    }
    objective = DistillationObjective(weights, student_dim=16, teacher_dim=16)
    _, exact = objective(s, g, teacher)
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        _, autocast = objective(s.bfloat16(), g.bfloat16(), teacher)
    s16, g16 = s.bfloat16().float(), g.bfloat16().float()  # the inputs' own rounding is the only difference
    _, rounded_inputs = objective(s16, g16, teacher)
    for name in exact:
        assert autocast[name].dtype == torch.float32
        assert autocast[name].item() == pytest.approx(rounded_inputs[name].item(), rel=1e-6), name
    assert not same_source_mask(teacher)[0, 1]


def test_objective_rejects_bad_configs():
    with pytest.raises(XdistillError, match="feature_distillation"):
        DistillationObjective({"mse": 1.0}, student_dim=128, teacher_dim=384)
    with pytest.raises(XdistillError, match="at least one"):
        LossConfig.from_mapping({"mse": 0})
    with pytest.raises(XdistillError, match=r"params train.loss: unknown keys \['msee'\]"):
        LossConfig.from_mapping({"mse": 1, "msee": 1})
    with pytest.raises(XdistillError, match=r"params train.loss.temperature: Input should be a valid number"):
        LossConfig.from_mapping({"temperature": "warm"})
    assert LossConfig.from_mapping({"logit_distillation": "1e-5"}).logit_distillation == 1e-5  # YAML's string number
    with pytest.raises(XdistillError, match=">= 0"):
        LossConfig.from_mapping({"mse": -1})
    assert LossConfig.from_mapping(None).active == ("mse",)


def test_projection_maps_low_dimensional_student_to_teacher():
    objective = DistillationObjective({"mse": 0, "feature_distillation": 1}, student_dim=128, teacher_dim=384)
    assert tuple(objective.projection.weight.shape) == (384, 128)
    total, parts = objective(torch.randn(8, 128), torch.randn(8, 128), torch.randn(8, 384, dtype=torch.float16))
    assert total.dtype == torch.float32 and set(parts) == {"feature_distillation"}
