"""The promotion gate: whether a registered candidate may take the ``champion`` alias, from scores alone.

A candidate version becomes champion only if

1. it is not worse than the untrained student it was distilled from (``base``): its primary
   score is at least the untrained student's, and no language score falls more than ``tolerance`` below the
   base's;
2. on English it is not far below its teacher (``teacher``): each English score (``en``, or
   ``en.<benchmark>`` when scores are per benchmark) is at most ``teacher_tolerance`` below the teacher's.
   A small multilingual student may trail a large English teacher on English by a few points, so this
   gap has its own setting; it is never waived silently: every English gap is a reason and a version tag
   (``promotion.teacher_gap``), and English may not regress against the untrained student (check 1);
3. its primary score beats the champion's by more than ``margin``, and no language score falls
   more than ``tolerance`` below the champion's (languages the champion was not evaluated on
   cannot regress). Both primary scores must average the same tasks (the ``xdistill.tasks`` tag:
   an evaluation without mining is on another scale) under the same evaluation protocol (the
   ``xdistill.protocol.*`` tags: languages, benchmarks, sample sizes, mining construction). With no
   champion yet, this check passes; a champion without scores (an alias set by hand) fails it.

In every check a language score the reference has and the candidate lacks fails the check (an
evaluation on fewer languages cannot show it is not worse on the others).

``promote.compare_with`` chooses which of ``base``, ``teacher`` and ``champion`` are checked (all by
default). The references' scores come from the evaluation that scored the candidate (they travel
as the ``xdistill.ref.*`` tags); a candidate registered without them fails checks 1 and 2.

A pure function of the scores (:func:`judge`): no MLflow here. Reading the scores from the store, moving
the alias and recording the decision is :mod:`xdistill.registry.promotion`'s job.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from xdistill.config import SECTION_CONFIG, parse_section
from xdistill.errors import XdistillError
from xdistill.evaluation.labels import TEACHER_LABEL, UNTRAINED_LABEL
from xdistill.registry.scores import ENGLISH, Scores

CHAMPION_ALIAS = "champion"
COMPARISONS = ("base", "teacher", "champion")


@dataclass(frozen=True)
class PromoteConfig:
    """The ``promote`` section of params.yaml."""

    __pydantic_config__ = SECTION_CONFIG

    margin: float = 0.0
    tolerance: float = 1.0
    teacher_tolerance: float = 5.0
    alias: str = CHAMPION_ALIAS
    lock_file: str | None = None
    compare_with: tuple[str, ...] = COMPARISONS

    def __post_init__(self) -> None:
        for name in ("margin", "tolerance", "teacher_tolerance"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                # NaN would switch every comparison off (x < score - nan is always False)
                raise XdistillError(f"params promote.{name}: must be a finite number >= 0, got {value}")
        unknown = sorted(set(self.compare_with) - set(COMPARISONS))
        if unknown:
            raise XdistillError(f"params promote.compare_with: unknown {unknown}; choose from {list(COMPARISONS)}")

    @classmethod
    def from_params(cls, section: dict[str, Any] | None) -> PromoteConfig:
        """The section's settings; a null value means the default."""
        return parse_section(cls, section, "promote", null_is_default=True)


@dataclass(frozen=True)
class GateDecision:
    """The gate's verdict on one candidate, with human-readable reasons."""

    promote: bool
    reasons: list[str] = field(default_factory=list)
    # English score key -> candidate minus teacher (points), for every English score both have
    teacher_gap: dict[str, float] = field(default_factory=dict)


def judge(
    candidate: Scores | None,
    champion: Scores | None,
    margin: float,
    tolerance: float,
    compare_with: tuple[str, ...] = COMPARISONS,
    *,
    champion_version: str | None = None,
    teacher_tolerance: float | None = None,
) -> GateDecision:
    """Apply the gate (module docstring) to a candidate's scores. ``champion`` None: there is none, unless
    ``champion_version`` names the version holding the alias (then it has no scores and the check fails).
    ``teacher_tolerance`` None: the teacher check uses ``tolerance``."""
    if candidate is None:
        return GateDecision(False, ["candidate has no evaluation scores (tag xdistill.primary_score)"])
    reasons: list[str] = []
    failed = False
    if "base" in compare_with:
        failed |= _check_reference(
            candidate, UNTRAINED_LABEL, "untrained student", tolerance, reasons, primary=True, languages=None
        )
    gap: dict[str, float] = {}
    if "teacher" in compare_with:
        allowed = tolerance if teacher_tolerance is None else teacher_tolerance
        failed |= _check_reference(
            candidate, TEACHER_LABEL, "teacher", allowed, reasons, primary=False, languages=(ENGLISH,)
        )
        gap = teacher_gap(candidate)
        if gap:
            reasons.append(f"English gap to the teacher (allowed {allowed:.4f} below): {format_gap(gap)}")
    if "champion" in compare_with:
        if champion is None and champion_version is not None:
            reasons.append(
                f"champion version {champion_version} has no evaluation scores (alias set by hand?): "
                "cannot show the candidate beats it; move the alias to a scored version first"
            )
            failed = True
        elif champion is None:
            reasons.append(f"no champion yet: primary score {candidate.primary:.4f} becomes the reference")
        elif candidate.tasks and champion.tasks and candidate.tasks != champion.tasks:
            reasons.append(
                f"primary scores over different tasks (candidate: {', '.join(candidate.tasks)}; champion "
                f"{champion_version}: {', '.join(champion.tasks)}): evaluate both with the same benchmarks"
            )
            failed = True
        elif differing := _protocol_differences(candidate, champion):
            reasons.append(
                f"evaluated under another protocol than champion {champion_version} ({'; '.join(differing)}): "
                "scores of other languages, samples or benchmarks are not comparable; evaluate both alike"
            )
            failed = True
        else:
            gain = candidate.primary - champion.primary
            beats = gain > margin
            reasons.append(
                f"primary score {candidate.primary:.4f} vs champion {champion.primary:.4f}: "
                f"{gain:+.4f} {'>' if beats else '<='} margin {margin:.4f}"
            )
            regressions = _regressions(candidate, champion, "champion", tolerance, None)
            reasons.extend(regressions)
            failed |= _missing_scores(candidate, champion, "champion", None, reasons)
            failed |= not beats or bool(regressions)
    return GateDecision(not failed, reasons, gap)


def teacher_gap(candidate: Scores) -> dict[str, float]:
    """Candidate minus teacher on each English score both have (empty without the teacher's scores)."""
    reference = candidate.references.get(TEACHER_LABEL)
    if reference is None:
        return {}
    return {
        key: candidate.per_language[key] - score
        for key, score in sorted(reference.per_language.items())
        if _of_languages(key, (ENGLISH,)) and key in candidate.per_language
    }


def format_gap(gap: dict[str, float]) -> str:
    """``en.sts17 -3.00, en.stsb -1.20``: the English gaps to the teacher as a short line."""
    return ", ".join(f"{key} {value:+.2f}" for key, value in gap.items())


def _protocol_differences(candidate: Scores, champion: Scores) -> list[str]:
    """``setting: candidate's vs champion's`` for each evaluation setting the two differ in (none when either
    evaluation did not record its protocol: versions registered before the tag)."""
    if not candidate.protocol or not champion.protocol:
        return []
    keys = sorted(set(candidate.protocol) | set(champion.protocol))
    return [
        f"{key if key == 'languages' else 'evaluate.' + key}: {candidate.protocol.get(key)!r} vs "
        f"{champion.protocol.get(key)!r}"
        for key in keys
        if candidate.protocol.get(key) != champion.protocol.get(key)
    ]


def _check_reference(
    candidate: Scores,
    label: str,
    name: str,
    tolerance: float,
    reasons: list[str],
    *,
    primary: bool,
    languages: tuple[str, ...] | None,
) -> bool:
    """Append the comparison with one reference model to ``reasons``; True when the candidate fails it."""
    reference = candidate.references.get(label)
    if reference is None:
        reasons.append(
            f"no scores of the {name} ({label}) were registered with the candidate: cannot show it is not worse"
        )
        return True
    failed = False
    if primary:
        below = candidate.primary < reference.primary
        reasons.append(
            f"primary score {candidate.primary:.4f} vs {name} {reference.primary:.4f}: "
            f"{candidate.primary - reference.primary:+.4f}{' (below the ' + name + ')' if below else ''}"
        )
        failed |= below
    regressions = _regressions(candidate, reference, name, tolerance, languages)
    if languages and not any(_of_languages(key, languages) for key in reference.per_language):
        reasons.append(f"{name}: no {'/'.join(languages)} score to compare")
    failed |= _missing_scores(candidate, reference, name, languages, reasons)
    reasons.extend(regressions)
    return failed or bool(regressions)


def _missing_scores(
    candidate: Scores, reference: Scores, name: str, languages: tuple[str, ...] | None, reasons: list[str]
) -> bool:
    """Append a reason and return True when the reference has language scores (of ``languages``) the
    candidate lacks: like a missing reference, nothing shows the candidate is not worse there."""
    missing = sorted(
        key for key in reference.per_language if _of_languages(key, languages) and key not in candidate.per_language
    )
    if missing:
        reasons.append(f"{name}: the candidate has no {', '.join(missing)} score: cannot show it is not worse")
    return bool(missing)


def _of_languages(key: str, languages: tuple[str, ...] | None) -> bool:
    """Whether a language score's key (``en`` or ``en.sts17``, see :mod:`xdistill.registry.scores`) is
    one of ``languages`` (None: every language)."""
    return languages is None or key.split(".", 1)[0] in languages


def _regressions(
    candidate: Scores, reference: Scores, name: str, tolerance: float, languages: tuple[str, ...] | None
) -> list[str]:
    return [
        f"{key} regressed {candidate.per_language[key]:.4f} vs {name} {score:.4f} "
        f"({candidate.per_language[key] - score:+.4f}, tolerance {tolerance:.4f})"
        for key, score in sorted(reference.per_language.items())
        if _of_languages(key, languages)
        and key in candidate.per_language
        and candidate.per_language[key] < score - tolerance
    ]
