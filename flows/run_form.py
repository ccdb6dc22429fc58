"""The distill flow's run form: the parameter types the Prefect UI's Custom run form renders, and
their conversion to params.yaml values.

Flow parameters are typed (pydantic): the form shows each with its description (from the flow's
docstring), offers the valid languages and models as choices (from the modules that own them), and
sends only the fields a person fills in; a field left empty keeps params.yaml's value.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import MISSING, BaseModel, ConfigDict, Field

from xdistill.data.languages import known_codes
from xdistill.models.sources import PYPI_MODELS, PYPI_PREFIX
from xdistill.profiles import list_profiles

LANGUAGES = tuple(sorted(code for code in known_codes() if len(code) == 2 and code != "en"))
# sentence-transformers models shipped on PyPI (mUSE is inference-only: not a teacher or student)
TRAINABLE_MODELS = tuple(PYPI_PREFIX + name for name, model in PYPI_MODELS.items() if model.folder is not None)

# the profiles of this checkout (profiles/*.yaml); a run applies the one of the commit it runs
PROFILES = tuple(list_profiles(Path(__file__).resolve().parent.parent))

Language = Literal[LANGUAGES]  # type: ignore[valid-type]
ModelSpec = Literal[TRAINABLE_MODELS]  # type: ignore[valid-type]
ProfileName = Literal[PROFILES] if PROFILES else str  # type: ignore[valid-type]
LossWeight = Annotated[float, Field(ge=0)]
# runtime.nproc: "auto" (every GPU the run's worker sees; 1 on a CPU) or a number of processes
TrainProcesses = Literal["auto"] | Annotated[int, Field(ge=1)]


class LossWeights(BaseModel):
    """Weights of the distillation losses (params.yaml ``train.loss``); 0 turns a loss off.
    A field left empty keeps params.yaml's weight."""

    model_config = ConfigDict(extra="forbid")

    mse: LossWeight | MISSING = Field(
        MISSING,
        title="MSE",
        description="Student(English) and student(translation) pulled onto teacher(English) (Reimers & Gurevych 2020). "
        "Needs the student's dimension to equal the teacher's.",
    )
    feature_distillation: LossWeight | MISSING = Field(
        MISSING,
        title="Feature distillation",
        description="The same MSE through a learned projection to the teacher's space (LEALLA); "
        "for a smaller student, e.g. train.student.output_dim 128.",
    )
    logit_distillation: LossWeight | MISSING = Field(
        MISSING, title="Logit distillation", description="Match the teacher's in-batch similarity structure (LEALLA)."
    )
    additive_margin_softmax: LossWeight | MISSING = Field(
        MISSING,
        title="Additive margin softmax",
        description="Translation ranking against in-batch negatives, both directions (LaBSE).",
    )
    similarity_ranking: LossWeight | MISSING = Field(
        MISSING,
        title="Teacher-ranked similarity",
        description="CoSENT over the batch's sentence pairs ordered by the teacher's cosines: the order of "
        "similarities that STS scores, not the teacher's coordinates.",
    )

    def params(self) -> dict[str, float]:
        """The filled-in weights as params.yaml values by dotted key."""
        return {f"train.loss.{name}": value for name, value in self.model_dump().items()}


def is_set(value: Any) -> bool:
    """A flow parameter a person filled in (the form sends nothing, or a blank, for an empty field)."""
    return value is not MISSING and value is not None and value != "" and value != []


def run_params(
    languages: Any = MISSING,
    teacher: Any = MISSING,
    student: Any = MISSING,
    train_steps: Any = MISSING,
    loss_weights: LossWeights | Any = MISSING,
    mirror: Any = MISSING,
    overrides: dict[str, Any] | Any = MISSING,
    train_processes: Any = MISSING,
) -> dict[str, Any]:
    """The params.yaml values a run sets, by dotted key; ``overrides`` win over the named fields."""
    named = {
        "languages": languages,
        "models.teacher": teacher,
        "models.student": student,
        "train.steps": train_steps,
        "corpora.mirror": mirror,
        "runtime.nproc": train_processes,
    }
    values = {key: (list(value) if key == "languages" else value) for key, value in named.items() if is_set(value)}
    if is_set(loss_weights):
        values.update(LossWeights.model_validate(loss_weights).params())
    if is_set(overrides):
        values.update(overrides)
    return values


def mirror_from_workspace(values: dict[str, Any], root: Path, workspace: Path) -> dict[str, Any]:
    """``values`` with a relative corpora mirror re-pointed from the workspace.

    The corpora stage resolves a relative ``corpora.mirror`` against its params file's folder: the
    workspace's. A run's mirror is given relative to the project and params.yaml's is relative to
    the project's folder, so both are rewritten relative to the workspace where that differs (a
    workspace beside the project keeps ``../shared/corpora`` as it is: nothing changes for DVC).
    """
    mirror = values.get("corpora.mirror")
    if mirror is None:
        committed = yaml.safe_load((workspace / "params.yaml").read_text(encoding="utf-8")) or {}
        mirror = (committed.get("corpora") or {}).get("mirror")
    if not isinstance(mirror, str) or not mirror or Path(mirror).is_absolute():
        return values
    rebased = os.path.relpath(os.path.normpath(root / mirror), workspace)
    return values if rebased == mirror else {**values, "corpora.mirror": rebased}
