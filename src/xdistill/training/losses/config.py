"""The ``train.loss`` section of params.yaml: each loss's weight and the losses' hyper-parameters."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from xdistill.config import SECTION_CONFIG, parse_section
from xdistill.errors import XdistillError
from xdistill.training.losses.registry import IN_BATCH_LOSSES, LOSS_NAMES

# Marks the fields that are a loss's weight (checked against the registry below).
WEIGHT = {"loss_weight": True}
# The hyper-parameters' ranges: (lower bound, whether the bound itself is refused).
HYPER_PARAMETER_RANGES = {
    "temperature": (0.0, True),
    "margin": (0.0, False),
    "scale": (0.0, True),
    "ranking_scale": (0.0, True),
}


@dataclass(frozen=True)
class LossConfig:
    """Weights (0 = off) and hyper-parameters of the distillation objective.

    In params.yaml (the trainer's section), e.g. for a 128-d student::

        loss: {mse: 0.0, feature_distillation: 1.0, logit_distillation: 1.0,
               additive_margin_softmax: 0.1, temperature: 0.1, margin: 0.3, scale: 20.0}

    Every value is a finite number (NaN, infinity and YAML booleans are refused, naming the key); the
    weights and ``margin`` are >= 0, ``temperature``, ``scale`` and ``ranking_scale`` > 0.
    """

    __pydantic_config__ = SECTION_CONFIG

    mse: float = field(default=1.0, metadata=WEIGHT)
    feature_distillation: float = field(default=0.0, metadata=WEIGHT)
    logit_distillation: float = field(default=0.0, metadata=WEIGHT)
    additive_margin_softmax: float = field(default=0.0, metadata=WEIGHT)
    similarity_ranking: float = field(default=0.0, metadata=WEIGHT)
    temperature: float = 0.1  # logit distillation; cosines / T
    margin: float = 0.3  # additive margin softmax, LaBSE's value
    scale: float = 20.0  # additive margin softmax; cosines in [-1, 1] need a scale to be sharp logits
    ranking_scale: float = 20.0  # similarity ranking (CoSENT's own default)

    def __post_init__(self) -> None:
        # The ranges, after from_mapping's parsing ("1e-5" -> 1e-5); every check for a LossConfig built in code.
        for name in LOSS_NAMES:
            _check_number(name, getattr(self, name), 0.0, strict=False)
        for name, (low, strict) in HYPER_PARAMETER_RANGES.items():
            _check_number(name, getattr(self, name), low, strict=strict)
        if not any(getattr(self, name) > 0 for name in LOSS_NAMES):
            raise XdistillError(
                f"params train.loss: every loss weight is 0; turn on at least one of {', '.join(LOSS_NAMES)}"
            )

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None) -> LossConfig:
        """Build from the ``train.loss`` params mapping (:func:`xdistill.config.parse_section`, which also refuses
        NaN, infinity and YAML booleans such as ``mse: true``, naming the key)."""
        return parse_section(cls, values, "train.loss")

    @property
    def active(self) -> tuple[str, ...]:
        """Names of the losses with a positive weight, in the registry's order."""
        return tuple(name for name in LOSS_NAMES if getattr(self, name) > 0)

    @property
    def in_batch(self) -> tuple[str, ...]:
        """The active losses whose negatives are the other pairs of the same micro-batch slice."""
        return tuple(name for name in IN_BATCH_LOSSES if getattr(self, name) > 0)

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def _check_number(name: str, value: object, low: float, *, strict: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise XdistillError(f"params train.loss.{name}: expected a number, got {value!r}")
    if not math.isfinite(value) or value < low or (strict and value == low):
        raise XdistillError(
            f"params train.loss.{name} must be a finite number {'>' if strict else '>='} {low:g}, got {value!r}"
        )


def _check_fields_against_the_registry() -> None:
    """The weight fields are the registered losses, in the registry's order (a weight without a loss would
    silently do nothing, a loss without a weight could never be turned on), and every other field has a range."""
    weights = tuple(f.name for f in fields(LossConfig) if f.metadata.get("loss_weight"))
    if weights != LOSS_NAMES:
        raise TypeError(f"LossConfig's weights {weights} must be the registered losses {LOSS_NAMES}, in order")
    others = {f.name for f in fields(LossConfig)} - set(weights)
    if others != set(HYPER_PARAMETER_RANGES):
        raise TypeError(
            f"LossConfig's hyper-parameters {sorted(others)} must each have a range in HYPER_PARAMETER_RANGES"
        )


_check_fields_against_the_registry()
