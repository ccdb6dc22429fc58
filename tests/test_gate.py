"""The promotion gate on hand-computed cases: pure functions of the scores, no MLflow store."""

from __future__ import annotations

import pytest

from xdistill.errors import XdistillError
from xdistill.registry.gate import PromoteConfig, judge
from xdistill.registry.scores import Scores

CHAMPION_ONLY = ("champion",)


def test_judge_hand_computed_cases() -> None:
    champion = Scores(0.50, {"de": 0.50, "es": 0.40})
    assert judge(Scores(0.1), None, 0.01, 0.02, CHAMPION_ONLY).promote  # no champion: first one wins
    # +0.02 > margin 0.01 and no language drops: promoted
    assert judge(Scores(0.52, {"de": 0.52, "es": 0.40}), champion, 0.01, 0.02, CHAMPION_ONLY).promote
    # +0.005 <= margin 0.01: refused, the reason gives the numbers
    close = judge(Scores(0.505, {"de": 0.51, "es": 0.40}), champion, 0.01, 0.02, CHAMPION_ONLY)
    assert not close.promote and "+0.0050 <= margin 0.0100" in close.reasons[0]
    # es drops 0.03 > tolerance 0.02 although the primary score gains 0.10: refused, naming es
    regress = judge(Scores(0.60, {"de": 0.80, "es": 0.37}), champion, 0.01, 0.02, CHAMPION_ONLY)
    assert not regress.promote
    assert [r for r in regress.reasons if r.startswith("es regressed")] and not [
        r for r in regress.reasons if r.startswith("de")
    ]
    # es drops 0.015 <= tolerance 0.02: promoted
    assert judge(Scores(0.60, {"de": 0.80, "es": 0.385}), champion, 0.01, 0.02, CHAMPION_ONLY).promote
    # a language the champion never had cannot regress
    assert judge(Scores(0.60, {"de": 0.6, "es": 0.4, "tr": 0.0}), champion, 0.01, 0.02, CHAMPION_ONLY).promote
    # no scores at all: refused
    assert not judge(None, champion, 0.01, 0.02, CHAMPION_ONLY).promote


def test_judge_against_the_untrained_student_and_the_teacher() -> None:
    base = Scores(0.50, {"en": 0.80, "de": 0.50, "es": 0.40})
    teacher = Scores(0.20, {"en": 0.88})
    refs = {"student-untrained": base, "teacher": teacher}
    # better than the untrained student everywhere, English within tolerance of the teacher: promoted (no champion)
    good = judge(Scores(0.55, {"en": 0.87, "de": 0.52, "es": 0.41}, refs), None, 0.01, 0.02)
    assert good.promote, good.reasons
    # primary below the untrained student's: refused although no language regressed
    low = judge(Scores(0.49, {"en": 0.87, "de": 0.52, "es": 0.41}, refs), None, 0.01, 0.02)
    assert not low.promote and any("below the untrained student" in r for r in low.reasons)
    # es 0.03 below the untrained student (tolerance 0.02): refused, naming es and the untrained student
    regress = judge(Scores(0.60, {"en": 0.87, "de": 0.60, "es": 0.37}, refs), None, 0.01, 0.02)
    assert not regress.promote
    assert any(r.startswith("es regressed 0.3700 vs untrained student 0.4000") for r in regress.reasons)
    # English 0.03 below the teacher: refused; the teacher's other (absent) languages are not checked
    english = judge(Scores(0.60, {"en": 0.85, "de": 0.60, "es": 0.45}, refs), None, 0.01, 0.02)
    assert not english.promote and any(r.startswith("en regressed 0.8500 vs teacher 0.8800") for r in english.reasons)
    assert judge(
        Scores(0.60, {"en": 0.85, "de": 0.60, "es": 0.45}, refs), None, 0.01, 0.02, ("base", "champion")
    ).promote  # the teacher check turned off
    # English scores per benchmark (en.sts17) are English scores too; a candidate without them fails
    nested = {"student-untrained": base, "teacher": Scores(0.20, {"en.sts17": 0.88, "en.stsb": 0.80})}
    per_benchmark = judge(
        Scores(0.60, {"en.sts17": 0.85, "en.stsb": 0.81, "de": 0.6, "es": 0.45}, nested), None, 0.01, 0.02
    )
    assert not per_benchmark.promote
    assert [r for r in per_benchmark.reasons if "regressed" in r] == [
        "en.sts17 regressed 0.8500 vs teacher 0.8800 (-0.0300, tolerance 0.0200)"
    ]
    no_english = judge(Scores(0.60, {"de": 0.60, "es": 0.45}, nested), None, 0.01, 0.02)
    assert not no_english.promote
    assert "teacher: the candidate has no en.sts17, en.stsb score: cannot show it is not worse" in no_english.reasons
    # a candidate registered without its references cannot show it is not worse
    blind = judge(Scores(0.90, {"en": 0.99}), None, 0.01, 0.02)
    assert not blind.promote and any("cannot show it is not worse" in r for r in blind.reasons)


def test_judge_fails_what_it_cannot_compare() -> None:
    champion = Scores(0.50, {"de": 0.50, "ar": 0.40})
    # evaluated on fewer languages than the champion: ar cannot be shown not to regress
    fewer = judge(Scores(0.62, {"de": 0.60}), champion, 0.01, 0.02, CHAMPION_ONLY)
    assert not fewer.promote
    assert "champion: the candidate has no ar score: cannot show it is not worse" in fewer.reasons
    # the alias is held by a version without scores (set by hand): not "no champion yet"
    unscored = judge(Scores(0.9, {"de": 0.9}), None, 0.01, 0.02, CHAMPION_ONLY, champion_version="9")
    assert not unscored.promote and "champion version 9 has no evaluation scores" in unscored.reasons[0]
    # every English score of the teacher is needed, not one of them
    refs = {"student-untrained": Scores(0.4, {"de": 0.4}), "teacher": Scores(0.2, {"en.sts17": 0.8, "en.stsb": 0.8})}
    partial = judge(Scores(0.6, {"en.sts17": 0.85, "de": 0.6}, refs), None, 0.01, 0.02)
    assert not partial.promote
    assert "teacher: the candidate has no en.stsb score: cannot show it is not worse" in partial.reasons


@pytest.mark.parametrize(
    "setting", [{"tolerance": float("nan")}, {"margin": float("nan")}, {"tolerance": -0.1}, {"margin": float("inf")}]
)
def test_gate_settings_must_be_finite_and_not_negative(setting: dict[str, float]) -> None:
    # a NaN tolerance would pass every regression check (x < score - nan is always False)
    with pytest.raises(
        XdistillError, match=f"params promote.{next(iter(setting))}: (must be|Input should be) a finite number"
    ):
        PromoteConfig.from_params(setting)


def test_the_gap_to_the_teacher_has_its_own_tolerance_and_is_always_reported() -> None:
    """A small student may trail a large English teacher on English (the quality run's student: 87.6
    against mpnet's 90.6): the teacher check has its own tolerance, and the gap is a reason every time."""
    base = Scores(0.80, {"en.sts17": 0.860, "de": 0.70})
    teacher = Scores(0.25, {"en.sts17": 0.906})
    refs = {"student-untrained": base, "teacher": teacher}
    trailing = Scores(0.85, {"en.sts17": 0.876, "de": 0.75}, refs)
    shared = judge(trailing, None, 0.0, 0.01)  # one shared tolerance: the -0.03 gap refuses it
    assert not shared.promote and shared.teacher_gap == pytest.approx({"en.sts17": -0.03})
    allowed = judge(trailing, None, 0.0, 0.01, teacher_tolerance=0.05)
    assert allowed.promote and allowed.teacher_gap == pytest.approx({"en.sts17": -0.03})
    assert "English gap to the teacher (allowed 0.0500 below): en.sts17 -0.03" in allowed.reasons
    assert not judge(trailing, None, 0.0, 0.01, teacher_tolerance=0.02).promote  # beyond its own tolerance
    # English below the untrained student is refused by the check against it, whatever the teacher tolerance
    below_base = Scores(0.85, {"en.sts17": 0.84, "de": 0.75}, refs)
    refused = judge(below_base, None, 0.0, 0.01, teacher_tolerance=1.0)
    assert not refused.promote and any(r.startswith("en.sts17 regressed") for r in refused.reasons)
    # without the teacher check there is no gap to report
    assert judge(trailing, None, 0.0, 0.01, ("base",)).teacher_gap == {}
    with pytest.raises(XdistillError, match="params promote.teacher_tolerance"):
        PromoteConfig.from_params({"teacher_tolerance": -1.0})
    assert PromoteConfig.from_params(None).teacher_tolerance == 5.0
