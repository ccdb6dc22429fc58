"""Fitting the teacher-space adapter (:mod:`xdistill.models.teacher_adapter`) on a finished student.

The student's final embeddings of both sides of training pairs are the inputs, the teacher's
vector of each pair's source the target. The loss is MSE (x dimension, so its scale does not
depend on it) plus ``ranking`` x an in-batch cross-entropy between the mapped vectors and the
batch's teacher vectors in both directions: retrieval in the teacher's space is what users of
the adapter need, and MSE alone leaves some teacher vectors as hubs that many queries reach
(``bench/results/diagnostics/teacher_space_adapter.json`` measures both).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from xdistill.config import SECTION_CONFIG, parse_section
from xdistill.errors import XdistillError
from xdistill.models.teacher_adapter import TeacherSpaceAdapter

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class AdapterSettings:
    """``train.teacher_adapter`` in params.yaml (``pairs: 0`` fits none)."""

    __pydantic_config__ = SECTION_CONFIG

    pairs: int = 0  # training pairs (both sides) the adapter is fitted on; 0 = no adapter
    hidden: int = 1536
    epochs: int = 20
    batch_pairs: int = 256
    learning_rate: float = 1e-3
    ranking: float = 1.0  # weight of the in-batch ranking loss beside the MSE
    scale: float = 20.0  # inverse temperature of the ranking loss's cosine logits
    seed: int = 0

    @classmethod
    def from_params(cls, section: dict | None) -> AdapterSettings:
        return parse_section(cls, section, "train.teacher_adapter")

    def __post_init__(self) -> None:
        if self.pairs < 0 or self.hidden < 1 or self.epochs < 1 or self.batch_pairs < 2:
            raise XdistillError(f"params train.teacher_adapter: pairs >= 0, hidden and epochs >= 1, "
                                f"batch_pairs >= 2 (got {self})")

    @property
    def enabled(self) -> bool:
        return self.pairs > 0


def fit_teacher_adapter(sources: torch.Tensor, translations: torch.Tensor, targets: torch.Tensor,
                        settings: AdapterSettings, teacher: str = "") -> tuple[TeacherSpaceAdapter, dict[str, float]]:
    """Fit an adapter mapping ``sources[i]`` and ``translations[i]`` (student embeddings) to ``targets[i]``
    (the vectors of the teacher ``teacher``, a spec recorded with the adapter).

    Returns the adapter (eval mode) and the fit's report: pairs, optimiser steps and the mean squared
    error of the mapped training pairs (both sides) to their teacher vectors.
    """
    if not (len(sources) == len(translations) == len(targets)):
        raise XdistillError("teacher adapter: sources, translations and targets differ in length")
    batch = min(settings.batch_pairs, len(sources))
    if batch < 2:
        raise XdistillError(f"teacher adapter: {len(sources)} pairs is too few to fit on")
    generator = torch.Generator().manual_seed(settings.seed)
    torch.manual_seed(settings.seed)  # the layers' initialisation
    adapter = TeacherSpaceAdapter(sources.shape[1], targets.shape[1], settings.hidden, teacher)
    sources, translations, targets = sources.float(), translations.float(), targets.float()
    steps_per_epoch = len(sources) // batch
    optimiser = torch.optim.AdamW(adapter.parameters(), lr=settings.learning_rate, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, max_lr=settings.learning_rate,
                                                   total_steps=settings.epochs * steps_per_epoch)
    labels = torch.arange(batch)
    adapter.train()
    for epoch in range(settings.epochs):
        order = torch.randperm(len(sources), generator=generator)
        for step in range(steps_per_epoch):
            rows = order[step * batch:(step + 1) * batch]
            loss = _loss(adapter, (sources[rows], translations[rows]), targets[rows], labels, settings)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            schedule.step()
        logger.info("teacher adapter: epoch %d/%d, loss %.4f", epoch + 1, settings.epochs, loss.item())
    adapter.eval()
    with torch.no_grad():
        mse = float(sum(F.mse_loss(adapter(side), targets) for side in (sources, translations)) / 2)
    return adapter, {"pairs": len(sources), "steps": settings.epochs * steps_per_epoch, "mse": mse}


def _loss(adapter: TeacherSpaceAdapter, sides: tuple[torch.Tensor, torch.Tensor], target: torch.Tensor,
          labels: torch.Tensor, settings: AdapterSettings) -> torch.Tensor:
    loss = torch.zeros(())
    for side in sides:
        mapped = adapter(side)
        loss = loss + F.mse_loss(mapped, target) * target.shape[1]
        if settings.ranking:
            logits = settings.scale * mapped @ target.T
            loss = loss + settings.ranking * (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels))
    return loss
