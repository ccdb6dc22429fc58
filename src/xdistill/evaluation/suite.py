"""Run every configured benchmark for one encoder and collect the results in one dict.

The result of :func:`evaluate_model` is what ``data/baselines/<label>.json`` holds and what the
report merges across models::

    {"label", "spec", "dimension", "seconds", "sentences_encoded",
     "benchmarks": {name: {"scores": nested numbers (x 100), "info": counts, notes, settings}},
     "pca": 2-D projection of English FLORES sentences and their translations}

Benchmark names: ``sts17``, ``sts_crosslingual``, ``sts_monolingual``, ``language_bias``
(these three from the ``stsb`` setting), ``tatoeba``, ``dev``, ``mining_flores``, ``mining_bucc``,
``teacher_space`` (and ``teacher_space_adapter`` for a student saved with one); each is produced
by one evaluator of :mod:`xdistill.evaluation.benchmarks`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from collections.abc import Mapping
from typing import Any

import numpy as np

from xdistill.config import SECTION_CONFIG, parse_section
from xdistill.errors import XdistillError
from xdistill.evaluation.base import EvaluationContext
from xdistill.evaluation.benchmarks import BENCHMARK_GROUPS, run_evaluators
from xdistill.evaluation.encoding import CachedEncoder
from xdistill.mining.margin import MARGINS, RETRIEVALS

logger = logging.getLogger(__name__)


# The fewest pairs a capped set can be scored on: a Spearman correlation needs two, a retrieval one;
# a negative cap would slice from the end.
MAX_PAIRS_LEAST = {"sts17_max_pairs": 2, "stsb_max_pairs": 2, "tatoeba_max_pairs": 1, "dev_max_pairs": 1}


@dataclass
class EvaluationSettings:
    """The ``evaluate`` section of params.yaml plus the shared ``languages`` list."""

    languages: list[str]
    benchmarks: list[str] = field(default_factory=lambda: list(BENCHMARK_GROUPS))
    batch_size: int = 64
    sts17_max_pairs: int | None = None
    stsb_max_pairs: int | None = 300
    tatoeba_max_pairs: int | None = 1000
    tatoeba_all: bool = False
    dev_max_pairs: int | None = 200
    mining_flores: bool = True
    mining_seed: int = 13
    mining_repeats: int = 1
    mining_gold_share: float = 0.05
    mining_k: int = 4
    mining_margin: str = "ratio"
    mining_retrieval: str = "max"
    bucc_dir: str | None = None
    pca_sentences: int = 12
    muse: bool = True

    __pydantic_config__ = SECTION_CONFIG

    @classmethod
    def from_params(cls, section: dict[str, Any] | None, languages: list[str]) -> EvaluationSettings:
        """Settings from the params section (:func:`xdistill.config.parse_section`) and the run's languages."""
        return parse_section(cls, section, "evaluate", languages=list(languages))

    def __post_init__(self) -> None:
        bad = sorted(set(self.benchmarks) - set(BENCHMARK_GROUPS))
        if bad:
            raise XdistillError(f"params evaluate.benchmarks: unknown {', '.join(bad)}; "
                                f"choose from {', '.join(BENCHMARK_GROUPS)}")
        if self.mining_repeats < 1:
            raise XdistillError(f"params evaluate.mining_repeats must be >= 1, got {self.mining_repeats}")
        for name, least in MAX_PAIRS_LEAST.items():
            value = getattr(self, name)
            if value is not None and value < least:
                raise XdistillError(f"params evaluate.{name} must be null (every pair) or >= {least}, got {value}")
        self._check_mining()

    def _check_mining(self) -> None:
        """The mining settings, here and not where mining reads them: that comes after minutes of encoding."""
        if self.mining_k < 1:
            raise XdistillError(f"params evaluate.mining_k must be >= 1, got {self.mining_k}")
        for name, allowed in (("mining_margin", MARGINS), ("mining_retrieval", RETRIEVALS)):
            value = getattr(self, name)
            if value not in allowed:
                raise XdistillError(f"params evaluate.{name}: unknown {value!r}; choose one of {', '.join(allowed)}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# settings that change how fast an evaluation runs or what else it draws, never a score the gate compares
NOT_PROTOCOL = ("batch_size", "pca_sentences", "muse", "tatoeba_all")


def evaluation_protocol(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings (:meth:`EvaluationSettings.as_dict`) the scores depend on: languages, benchmarks, sample
    sizes, mining construction. Two primary scores are comparable only under the same protocol."""
    return {key: value for key, value in sorted(settings.items()) if key not in NOT_PROTOCOL}


@dataclass(frozen=True)
class EvaluationInputs:
    """Where the benchmark data is: the staged eval tree and the prepared files of this run."""

    eval_dir: Path  # data/raw/eval (same layout as the mirror's eval/)
    dev_path: Path | None = None  # data/parallel/dev.tsv.gz
    # BUCC-layout benchmarks built from FLORES by the caller, one per construction seed
    flores_mining_dirs: tuple[Path, ...] = ()
    bucc_dir: Path | None = None  # official BUCC 2017/2018 folder, when a user has it


def evaluate_model(
    encoder: Any, label: str, settings: EvaluationSettings, inputs: EvaluationInputs, teacher: Any | None = None
) -> dict[str, Any]:
    """Every configured benchmark for ``encoder``; ``teacher`` (an encoder) enables the dev MSE."""
    started = time.perf_counter()
    cached = encoder if isinstance(encoder, CachedEncoder) else CachedEncoder(encoder, batch_size=settings.batch_size)
    if teacher is None or teacher is encoder or isinstance(teacher, CachedEncoder):
        teacher_cached = cached if teacher is encoder else teacher
    else:
        teacher_cached = CachedEncoder(teacher, settings.batch_size)
    benchmarks = run_evaluators(cached, EvaluationContext(settings, inputs, teacher_cached), label)
    return {
        "label": label,
        "spec": str(getattr(encoder, "spec", "")),
        "dimension": int(encoder.dimension),
        "benchmarks": benchmarks,
        "pca": run_pca(cached, settings, inputs),
        "sentences_encoded": cached.encoded,
        "seconds": round(time.perf_counter() - started, 1),
    }


def pca_sentences(eval_dir: Path, languages: list[str], count: int) -> tuple[list[str], list[str], list[int]]:
    """The first ``count`` FLORES devtest sentences in English and each language: (texts, languages, ids)."""
    from xdistill.mining.flores import flores_file, read_flores

    flores_dir = eval_dir / "flores200-devtest"
    texts: list[str] = []
    langs: list[str] = []
    ids: list[int] = []
    for lang in ["en", *[x for x in languages if x != "en"]]:
        path = flores_file(flores_dir, lang)
        if not path.is_file():
            continue
        sentences = read_flores(path)[:count]
        texts += sentences
        langs += [lang] * len(sentences)
        ids += list(range(len(sentences)))
    return texts, langs, ids


def project_2d(embeddings: np.ndarray) -> tuple[np.ndarray, list[float]]:
    """PCA to two dimensions (centred SVD): coordinates and the explained-variance shares."""
    centred = embeddings - embeddings.mean(axis=0, keepdims=True)
    _, singular, components = np.linalg.svd(centred, full_matrices=False)
    variance = singular**2
    share = (variance[:2] / max(variance.sum(), 1e-12)).tolist()
    return centred @ components[:2].T, share


def run_pca(encoder: CachedEncoder, settings: EvaluationSettings, inputs: EvaluationInputs) -> dict[str, Any] | None:
    """2-D PCA of English FLORES sentences and their translations (Figure 2 of Reimers & Gurevych)."""
    if settings.pca_sentences <= 0:
        return None
    texts, langs, ids = pca_sentences(inputs.eval_dir, settings.languages, settings.pca_sentences)
    if len(set(langs)) < 2:
        logger.warning("PCA plot: fewer than two FLORES languages available, skipped")
        return None
    coords, share = project_2d(encoder.encode(texts).astype(np.float64))
    return {"languages": langs, "sentence_ids": ids, "coords": np.round(coords, 5).tolist(),
            "explained_variance": share}
