"""What an evaluation run is told: the ``evaluate`` settings, where the benchmark data is, the scoring protocol.

This module sits below every evaluator and the runner: it imports neither. The benchmark groups a
run may enable (``evaluate.benchmarks``) are plain data here; :mod:`xdistill.evaluation.registry`
checks at import that they are exactly the groups of its evaluators.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from xdistill.config import SECTION_CONFIG, Count, parse_section
from xdistill.errors import XdistillError
from xdistill.mining.margin import MARGINS, RETRIEVALS
from xdistill.models.precision import DEFAULT_PRECISION, check_precision

# The groups of ``evaluate.benchmarks``, in the order the evaluators run (one evaluator each, see
# :data:`xdistill.evaluation.registry.EVALUATORS`).
BENCHMARK_GROUPS: tuple[str, ...] = ("sts17", "stsb", "tatoeba", "dev", "mining", "teacher_space")
# the groups with English-only sets (STS17 en-en, STSb en): the only ones an English-only model is scored on
ENGLISH_GROUPS: tuple[str, ...] = ("sts17", "stsb")

# The fewest pairs a capped set can be scored on: a Spearman correlation needs two, a retrieval one;
# a negative cap would slice from the end.
MAX_PAIRS_LEAST = {"sts17_max_pairs": 2, "stsb_max_pairs": 2, "tatoeba_max_pairs": 1, "dev_max_pairs": 1}


@dataclass
class EvaluationSettings:
    """The ``evaluate`` section of params.yaml plus the shared ``languages`` list."""

    languages: list[str]
    benchmarks: list[str] = field(default_factory=lambda: list(BENCHMARK_GROUPS))
    batch_size: Count = 64
    sts17_max_pairs: int | None = None
    stsb_max_pairs: int | None = 300
    tatoeba_max_pairs: int | None = 1000
    tatoeba_all: bool = False
    dev_max_pairs: int | None = 200
    mining_flores: bool = True
    mining_seed: int = 13
    mining_repeats: Count = 1
    mining_gold_share: Annotated[float, Field(gt=0, le=1)] = 0.05
    mining_k: Count = 4
    mining_margin: str = "ratio"
    mining_retrieval: str = "max"
    bucc_dir: str | None = None
    pca_sentences: Count = 12
    muse: bool = True
    precision: str = "fp32"  # the models' number format on a GPU: fp32 | fp16 | bf16 (xdistill.models.precision)
    # Score only the English sets (STS17 en-en, STSb en): all that an English-only model's scores mean. The
    # baselines stage sets it for the teacher (:meth:`english_only_copy`); it is not a params key users need.
    english_only: bool = False

    __pydantic_config__ = SECTION_CONFIG

    @classmethod
    def from_params(cls, section: dict[str, Any] | None, languages: list[str]) -> EvaluationSettings:
        """Settings from the params section (:func:`xdistill.config.parse_section`) and the run's languages."""
        return parse_section(cls, section, "evaluate", languages=list(languages))

    def __post_init__(self) -> None:
        bad = sorted(set(self.benchmarks) - set(BENCHMARK_GROUPS))
        if bad:
            raise XdistillError(
                f"params evaluate.benchmarks: unknown {', '.join(bad)}; choose from {', '.join(BENCHMARK_GROUPS)}"
            )
        for name, least in MAX_PAIRS_LEAST.items():
            value = getattr(self, name)
            if value is not None and value < least:
                raise XdistillError(f"params evaluate.{name} must be null (every pair) or >= {least}, got {value}")
        self._check_mining()
        check_precision(self.precision, "evaluate.precision")

    def _check_mining(self) -> None:
        """The mining settings, here and not where mining reads them: that comes after minutes of encoding."""
        for name, allowed in (("mining_margin", MARGINS), ("mining_retrieval", RETRIEVALS)):
            value = getattr(self, name)
            if value not in allowed:
                raise XdistillError(f"params evaluate.{name}: unknown {value!r}; choose one of {', '.join(allowed)}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def english_only_copy(self) -> EvaluationSettings:
        """These settings for an English-only model: English sets only, no other language."""
        english = [group for group in self.benchmarks if group in ENGLISH_GROUPS]
        return replace(self, english_only=True, languages=[], benchmarks=english)


# settings that change how fast an evaluation runs or what else it draws, never a score the gate compares
NOT_PROTOCOL = ("batch_size", "pca_sentences", "muse", "tatoeba_all", "english_only")


def evaluation_protocol(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings (:meth:`EvaluationSettings.as_dict`) the scores depend on: languages, benchmarks, sample
    sizes, mining construction, and a half precision (fp32, the default, is left out: the protocol of every
    evaluation recorded before the setting existed). Two primary scores are comparable only under the same
    protocol."""
    return {
        key: value
        for key, value in sorted(settings.items())
        if key not in NOT_PROTOCOL and not (key == "precision" and value == DEFAULT_PRECISION)
    }


@dataclass(frozen=True)
class EvaluationInputs:
    """Where the benchmark data is: the staged eval tree and the prepared files of this run."""

    eval_dir: Path  # data/raw/eval (same layout as the mirror's eval/)
    dev_path: Path | None = None  # data/parallel/dev.tsv.gz
    # BUCC-layout benchmarks built from FLORES by the caller, one per construction seed
    flores_mining_dirs: tuple[Path, ...] = ()
    bucc_dir: Path | None = None  # official BUCC 2017/2018 folder, when a user has it
