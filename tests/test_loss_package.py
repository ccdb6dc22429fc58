"""The losses package: one DistillationLoss class per loss, their registry, the objective built from it and
the ``train.loss`` checks (the values of the losses themselves: tests/test_losses.py)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor, nn

from xdistill.errors import XdistillError
from xdistill.training.losses import (
    IN_BATCH_LOSSES,
    LOSS_NAMES,
    LOSSES,
    DistillationLoss,
    DistillationObjective,
    FeatureDistillationLoss,
    LossConfig,
    additive_margin_softmax_loss,
    feature_distillation_loss,
    logit_distillation_loss,
    mse_distillation_loss,
    same_source_mask,
    similarity_ranking_loss,
)
from xdistill.training.losses import objective as objective_module

SETTINGS = {"temperature": 0.2, "margin": 0.25, "scale": 15.0, "ranking_scale": 10.0}


def _batch(dim: int = 4) -> tuple[Tensor, Tensor, Tensor]:
    generator = torch.Generator().manual_seed(5)
    return tuple(torch.randn(6, dim, generator=generator, dtype=torch.float64) for _ in range(3))  # type: ignore[return-value]


def test_the_registry_holds_one_class_per_loss_in_a_file_of_its_name() -> None:
    assert LOSS_NAMES == (
        "mse",
        "feature_distillation",
        "logit_distillation",
        "additive_margin_softmax",
        "similarity_ranking",
    )
    assert IN_BATCH_LOSSES == ("logit_distillation", "additive_margin_softmax", "similarity_ranking")
    for name, cls in LOSSES.items():
        assert issubclass(cls, DistillationLoss) and cls.name == name
        assert cls.__module__ == f"xdistill.training.losses.{name}"


def test_each_class_computes_its_function_with_the_configured_settings() -> None:
    s, g, teacher = _batch()
    expected = {
        "mse": lambda loss: mse_distillation_loss(s, g, teacher),
        "feature_distillation": lambda loss: feature_distillation_loss(loss.projection, s, g, teacher),
        "logit_distillation": lambda loss: logit_distillation_loss(s, g, teacher, 0.2),
        "additive_margin_softmax": lambda loss: additive_margin_softmax_loss(
            s, g, 0.25, 15.0, same_source_mask(teacher)
        ),
        "similarity_ranking": lambda loss: similarity_ranking_loss(s, g, teacher, 10.0),
    }
    for name, cls in LOSSES.items():
        loss = cls.build(SETTINGS, 4, 4).double()
        assert loss(s, g, teacher).item() == pytest.approx(expected[name](loss).item(), rel=1e-12), name


def test_the_objective_sums_what_the_registered_classes_compute(monkeypatch: pytest.MonkeyPatch) -> None:
    class Constant(DistillationLoss):
        name = "logit_distillation"
        in_batch = True

        def forward(self, student_src: Tensor, student_tgt: Tensor, teacher_src: Tensor) -> Tensor:
            return student_src.sum() * 0 + 7.0

    monkeypatch.setitem(objective_module.LOSSES, "logit_distillation", Constant)
    s, g, teacher = _batch()
    total, parts = DistillationObjective({"mse": 1.0, "logit_distillation": 0.5}, 4, 4)(s, g, teacher)
    assert parts["logit_distillation"].item() == 7.0
    assert total.item() == pytest.approx(mse_distillation_loss(s, g, teacher).item() + 3.5)


def test_the_projection_is_the_objectives_only_weights_under_its_old_name() -> None:
    objective = DistillationObjective({"mse": 0, "feature_distillation": 1, "logit_distillation": 1}, 3, 5)
    assert set(objective.state_dict()) == {"projection.weight", "projection.bias"}
    assert [name for name, _ in objective.named_parameters()] == ["projection.weight", "projection.bias"]
    feature = next(t for t in objective._pair_terms if isinstance(t, FeatureDistillationLoss))
    assert feature.projection is objective.projection
    objective.double()  # converting the objective converts the loss's projection: it is the same module
    assert feature.projection.weight.dtype == torch.float64
    assert dict(DistillationObjective({"mse": 1}, 4, 4).state_dict()) == {}


def test_a_loss_with_weights_the_objective_does_not_register_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    class Weighted(DistillationLoss):
        name = "mse"

        def __init__(self) -> None:
            super().__init__()
            self.scale = nn.Parameter(torch.ones(1))

        def forward(self, student_src: Tensor, student_tgt: Tensor, teacher_src: Tensor) -> Tensor:
            return self.scale * mse_distillation_loss(student_src, student_tgt, teacher_src)

    monkeypatch.setitem(objective_module.LOSSES, "mse", Weighted)
    with pytest.raises(TypeError, match="loss mse has weights"):
        DistillationObjective({"mse": 1}, 4, 4)


@pytest.mark.parametrize("key", LOSS_NAMES)
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, -0.5, True, False])
def test_every_weight_must_be_a_finite_number_at_least_zero(key: str, value: float) -> None:
    with pytest.raises(XdistillError, match=rf"params train\.loss\.{key}\b"):
        LossConfig.from_mapping({"mse": 1.0, key: value})
    with pytest.raises(XdistillError, match=rf"params train\.loss\.{key}\b"):
        LossConfig(**{key: value})


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("scale", 0.0),
        ("scale", -1.0),
        ("scale", math.inf),
        ("ranking_scale", 0.0),
        ("temperature", 0.0),
        ("margin", -0.1),
        ("margin", math.nan),
        ("margin", True),
    ],
)
def test_hyper_parameters_are_range_checked(key: str, value: float) -> None:
    with pytest.raises(XdistillError, match=rf"params train\.loss\.{key}\b"):
        LossConfig.from_mapping({key: value})
    with pytest.raises(XdistillError, match=rf"params train\.loss\.{key}\b"):
        LossConfig(**{key: value})


def test_edge_values_that_are_allowed() -> None:
    config = LossConfig.from_mapping({"mse": 0, "logit_distillation": "2e-4", "margin": 0, "scale": 1e-3})
    assert config.active == ("logit_distillation",) and config.in_batch == ("logit_distillation",)
    assert config.margin == 0.0 and config.logit_distillation == 2e-4
    assert LossConfig(mse=1).to_dict()["mse"] == 1  # an int from code is a number too
