"""Fitting the teacher-space adapter (:mod:`xdistill.adapter.model`) on a finished student.

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
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field

from xdistill.adapter.model import STUDENT_DIGEST, TeacherSpaceAdapter
from xdistill.config import SECTION_CONFIG, Count, NonNegativeFloat, NonNegativeInt, PositiveFloat, parse_section
from xdistill.errors import XdistillError
from xdistill.training.losses import in_batch_ranking_loss, same_source_mask
from xdistill.training.tokenized import Featurizer, TokenizedPairs

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class AdapterSettings:
    """``train.teacher_adapter`` in params.yaml (``pairs: 0`` fits none)."""

    __pydantic_config__ = SECTION_CONFIG

    pairs: NonNegativeInt = 0  # training pairs (both sides) the adapter is fitted on; 0 = no adapter
    hidden: Count = 1536
    epochs: Count = 20
    batch_pairs: Annotated[int, Field(ge=2)] = 256  # the ranking loss needs another pair to rank against
    learning_rate: PositiveFloat = 1e-3
    ranking: NonNegativeFloat = 1.0  # weight of the in-batch ranking loss beside the MSE
    scale: PositiveFloat = 20.0  # inverse temperature of the ranking loss's cosine logits
    seed: int = 0

    @classmethod
    def from_params(cls, section: dict | None) -> AdapterSettings:
        return parse_section(cls, section, "train.teacher_adapter")

    @property
    def enabled(self) -> bool:
        return self.pairs > 0


def fit_teacher_adapter(
    sources: torch.Tensor,
    translations: torch.Tensor,
    targets: torch.Tensor,
    settings: AdapterSettings,
    teacher: str = "",
) -> tuple[TeacherSpaceAdapter, dict[str, Any]]:
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
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimiser, max_lr=settings.learning_rate, total_steps=settings.epochs * steps_per_epoch
    )
    adapter.train()
    for epoch in range(settings.epochs):
        order = torch.randperm(len(sources), generator=generator)
        for step in range(steps_per_epoch):
            rows = order[step * batch : (step + 1) * batch]
            loss = _loss(adapter, (sources[rows], translations[rows]), targets[rows], settings)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            schedule.step()
        logger.info("teacher adapter: epoch %d/%d, loss %.4f", epoch + 1, settings.epochs, loss.item())
    adapter.eval()
    with torch.no_grad():
        mse = float(sum(F.mse_loss(adapter(side), targets) for side in (sources, translations)) / 2)
    return adapter, {"pairs": len(sources), "steps": settings.epochs * steps_per_epoch, "mse": mse}


def fit_and_save_adapter(
    student: SentenceTransformer,
    featurize: Featurizer,
    train: TokenizedPairs,
    dev: TokenizedPairs,
    settings: AdapterSettings,
    teacher_spec: str,
    batch_size: int,
    folder: str | Path,
    sample_embeddings: tuple[int, torch.Tensor] | None = None,
    student_digest: str | None = None,
) -> dict[str, Any]:
    """Fit the adapter of ``student`` as it is now on ``settings.pairs`` evenly spread ``train`` pairs, save it
    into the folder ``folder`` (``teacher_space/``) and return the fit's report, with the dev teacher-space
    accuracy (teacher(English) <-> adapter(student(translation)) on the ``dev`` pairs, both ways).

    ``sample_embeddings``: ``(n, embeddings)``, the student's embeddings of ``fit_sample(train, n)``, used
    instead of encoding when ``n`` is the adapter's own sample size (the trainer passes the rotation's).
    ``student_digest``: the student folder's content digest, recorded in the report when the adapter is
    saved outside that folder, so that loading it with another student fails
    (:func:`xdistill.adapter.model.load_encoder_with_adapter`).
    """
    from xdistill.adapter.model import save_adapter
    from xdistill.mining.knn import retrieval_hits
    from xdistill.training.alignment import fit_sample
    from xdistill.training.tokenized import encode_token_ids

    rows, ids, teacher = fit_sample(train, settings.pairs)
    if sample_embeddings is not None and sample_embeddings[0] == settings.pairs:
        embeddings = sample_embeddings[1]
    else:
        embeddings = encode_token_ids(student, featurize, ids, batch_size)
    n = len(rows)
    adapter, report = fit_teacher_adapter(embeddings[:n], embeddings[n:], teacher[:n], settings, teacher_spec)
    translations = encode_token_ids(student, featurize, dev.tgt, batch_size).numpy()
    report.update(dev_retrieval_report(*retrieval_hits(dev.teacher.numpy(), adapter.map(translations)), dev.langs))
    if student_digest is not None:
        report[STUDENT_DIGEST] = student_digest
    save_adapter(adapter, folder, report)
    return report


def dev_retrieval_report(en2xx: np.ndarray, xx2en: np.ndarray, langs: list[str] | None) -> dict[str, float]:
    """Dev teacher-space accuracy in points from per-query hits over the pooled dev pairs: each direction, their
    mean, and, with the pairs' languages, each language's and the worst language and direction's
    (``dev_teacher_accuracy_min``: the figure the quality targets ask of every language, on dev data)."""
    report = {
        "dev_teacher_accuracy_en2xx": 100 * float(en2xx.mean()),
        "dev_teacher_accuracy_xx2en": 100 * float(xx2en.mean()),
        "dev_teacher_accuracy": 50 * float(en2xx.mean() + xx2en.mean()),
    }
    if langs:
        labels = np.asarray(langs)
        per_direction = {
            f"dev_teacher_accuracy_{lang}_{name}": 100 * float(hits[labels == lang].mean())
            for lang in sorted(set(langs))
            for name, hits in (("en2xx", en2xx), ("xx2en", xx2en))
        }
        report.update(per_direction, dev_teacher_accuracy_min=min(per_direction.values()))
    return report


def _loss(
    adapter: TeacherSpaceAdapter,
    sides: tuple[torch.Tensor, torch.Tensor],
    target: torch.Tensor,
    settings: AdapterSettings,
) -> torch.Tensor:
    loss = torch.zeros(())
    same = same_source_mask(target) if settings.ranking else None
    for side in sides:
        mapped = adapter(side)
        loss = loss + F.mse_loss(mapped, target) * target.shape[1]
        if settings.ranking:
            loss = loss + settings.ranking * in_batch_ranking_loss(settings.scale * mapped @ target.T, same)
    return loss
