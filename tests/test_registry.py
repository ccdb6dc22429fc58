"""Registry tests: the register stage, the promotion gate, rollback and racing promotions.

Real MLflow (sqlite store in a temp folder), a real sentence-transformers student (the
all-MiniLM-L6-v2 folder from PyPI) and real processes for the race.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from registry_helpers import MODEL_NAME, cheap_version, make_outputs_project, set_scores, student_source

from flows.local_stack import free_port
from xdistill.errors import InputFileError, XdistillError
from xdistill.registry.gate import PromoteConfig, judge
from xdistill.registry.promotion import (
    DECISION_TAG,
    REASONS_TAG,
    TEACHER_GAP_TAG,
    champion_history,
    promote,
    rollback,
)
from xdistill.registry.register import RegisterConfig, read_registration, register_run
from xdistill.registry.scores import Scores
from xdistill.registry.store import REGISTRY_ROOT_ENV, client_for, promotion_lock_path, resolve_tracking_uri

GATE = PromoteConfig(margin=0.01, tolerance=0.02, compare_with=("champion",))


@pytest.fixture()
def tracking_uri(tmp_path: Path) -> str:
    return resolve_tracking_uri("sqlite:///mlflow.db", tmp_path)


def _alias(uri: str) -> str | None:
    from mlflow.exceptions import MlflowException

    try:
        return str(client_for(uri).get_model_version_by_alias(MODEL_NAME, "champion").version)
    except MlflowException:
        return None


def _tags(uri: str, version: str) -> dict[str, str]:
    return client_for(uri).get_model_version(MODEL_NAME, version).tags


def test_references_travel_as_tags_and_come_from_the_summary(tmp_path: Path) -> None:
    from xdistill.registry.scores import read_summary_scores

    path = tmp_path / "summary.json"
    path.write_text(
        json.dumps(
            {
                "primary_score": 0.6,
                "per_language": {"en": 0.8, "de": 0.5},
                "models": {
                    "student": {"primary_score": 0.6},
                    "student-untrained": {"primary_score": 0.55, "per_language": {"de": 0.45}},
                    "teacher": {"primary_score": 0.2, "per_language": {"en": 0.85}},
                    "muse": {"primary_score": 0.7},
                },
            }
        )
    )
    scores = read_summary_scores(path)
    assert set(scores.references) == {"student-untrained", "teacher"}
    assert scores.references["teacher"] == Scores(0.2, {"en": 0.85})
    assert Scores.from_tags(scores.as_tags()) == scores


def test_an_english_only_teacher_is_a_reference_by_its_english_score(tmp_path: Path) -> None:
    """The evaluation scores the English-only teacher on English alone (no primary score): the version still
    carries its English score, and the gate still judges the candidate's English against it."""
    from xdistill.registry.scores import read_summary_scores

    path = tmp_path / "summary.json"
    path.write_text(
        json.dumps(
            {
                "primary_score": 0.6,
                "per_language": {"en": 0.8, "de": 0.5},
                "models": {
                    "student-untrained": {"primary_score": 0.55, "per_language": {"en": 0.79, "de": 0.45}},
                    "teacher": {"primary_score": None, "per_language": {"en": 0.85, "de": None}},
                },
            }
        )
    )
    scores = read_summary_scores(path)
    teacher = scores.references["teacher"]
    assert math.isnan(teacher.primary) and teacher.per_language == {"en": 0.85}
    tags = scores.as_tags()
    assert "xdistill.ref.teacher.primary_score" not in tags and tags["xdistill.ref.teacher.score.en"] == "0.85"
    again = Scores.from_tags(tags).references["teacher"]
    assert math.isnan(again.primary) and again.per_language == {"en": 0.85}
    refused = judge(scores, None, 0.01, 0.02)
    assert not refused.promote and any(r.startswith("en regressed 0.8000 vs teacher 0.8500") for r in refused.reasons)
    assert judge(scores, None, 0.01, 0.02, teacher_tolerance=0.1).promote


def test_primary_scores_over_different_tasks_are_not_compared(tmp_path: Path) -> None:
    """A candidate evaluated without mining scores on another scale: the gate refuses to compare."""
    from xdistill.registry.scores import read_summary_scores

    path = tmp_path / "summary.json"
    path.write_text(
        json.dumps(
            {
                "primary_score": 0.9,
                "per_language": {"de": 0.9},
                "task_sts": 0.8,
                "task_retrieval": 1.0,
                "task_mining": float("nan"),
            }
        )
    )
    candidate = read_summary_scores(path)
    assert candidate.tasks == ("retrieval", "sts") and Scores.from_tags(candidate.as_tags()) == candidate
    champion = Scores(0.5, {"de": 0.5}, tasks=("mining", "retrieval", "sts"))
    refused = judge(candidate, champion, 0.01, 0.02, ("champion",), champion_version="3")
    assert not refused.promote and "different tasks" in refused.reasons[-1] and "champion 3" in refused.reasons[-1]
    assert judge(candidate, Scores(0.5, {"de": 0.5}, tasks=("retrieval", "sts")), 0.01, 0.02, ("champion",)).promote
    assert judge(candidate, Scores(0.5, {"de": 0.5}), 0.01, 0.02, ("champion",)).promote  # untagged: older version


def test_scores_measured_under_another_evaluation_protocol_are_not_compared(tmp_path: Path) -> None:
    """STSb on 100 pairs a set against the full sets, other languages: the gate names what differs."""
    from xdistill.errors import InputFileError
    from xdistill.evaluation.settings import EvaluationSettings, evaluation_protocol
    from xdistill.registry.scores import read_summary_scores

    full = evaluation_protocol(EvaluationSettings(languages=["de", "es"], stsb_max_pairs=None).as_dict())
    assert "batch_size" not in full and full["languages"] == ["de", "es"]  # how fast it ran is no protocol
    sampled = {**full, "stsb_max_pairs": 100, "languages": ["de"]}
    path = tmp_path / "summary.json"
    path.write_text(json.dumps({"primary_score": 0.9, "per_language": {"de": 0.9}, "protocol": sampled}))
    candidate = read_summary_scores(path)
    assert candidate.protocol == sampled and Scores.from_tags(candidate.as_tags()) == candidate
    refused = judge(candidate, Scores(0.5, {"de": 0.5}, protocol=full), 0.01, 0.02, ("champion",), champion_version="3")
    assert not refused.promote
    assert refused.reasons[-1].startswith(
        "evaluated under another protocol than champion 3 (languages: ['de'] vs "
        "['de', 'es']; evaluate.stsb_max_pairs: 100 vs None)"
    )
    assert judge(candidate, Scores(0.5, {"de": 0.5}, protocol=sampled), 0.01, 0.02, ("champion",)).promote
    assert judge(candidate, Scores(0.5, {"de": 0.5}), 0.01, 0.02, ("champion",)).promote  # untagged: older version
    path.write_text(json.dumps({"primary_score": 0.9, "per_language": {}, "protocol": ["stsb"]}))
    with pytest.raises(InputFileError, match="'protocol' must map each evaluation setting"):
        read_summary_scores(path)


def test_summary_with_benchmark_per_language_scores(tmp_path: Path) -> None:
    from xdistill.registry.scores import read_summary_scores

    path = tmp_path / "summary.json"
    path.write_text(json.dumps({"primary_score": 0.4, "per_language": {"de": {"sts17": 0.5, "tatoeba": 0.3}}}))
    assert read_summary_scores(path) == Scores(0.4, {"de.sts17": 0.5, "de.tatoeba": 0.3})
    path.write_text('{"primary_score": null, "per_language": {}}')
    assert read_summary_scores(path) is None  # registered, never promoted
    path.write_text('{"primary_score": "high"}')
    with pytest.raises(InputFileError, match="primary_score"):
        read_summary_scores(path)


def test_register_cli_takes_a_section_of_comments_only_as_defaults(
    tmp_path: Path, tracking_uri: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from xdistill.cli.main import main

    params = tmp_path / "params.yaml"
    params.write_text("register:\n  # everything default\n")
    # the settings are read; the stage then stops at the missing pipeline outputs with its own message
    assert main(["register", "--root", str(tmp_path), "--params", str(params), "--tracking-uri", tracking_uri]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "NoneType" not in err


def test_a_summary_of_the_wrong_shape_is_a_clear_error(tmp_path: Path) -> None:
    from xdistill.registry.scores import read_summary_scores

    path = tmp_path / "summary.json"
    for text, problem in (
        ("[1, 2]", "expected a JSON object"),
        ('{"primary_score": 0.5, "models": [1]}', "'models' must map"),
        ('{"primary_score": 0.5, "models": {"teacher": 3}}', "'models.teacher' must be an object"),
    ):
        path.write_text(text)
        with pytest.raises(InputFileError, match=problem) as raised:
            read_summary_scores(path)
        assert str(path) in str(raised.value)


# --- promotion and rollback on a real store ------------------------------------------------------


def test_promotion_gate_and_rollback(tracking_uri: str) -> None:
    v1 = cheap_version(tracking_uri, 0.50, {"de": 0.50, "es": 0.50})
    first = promote(MODEL_NAME, v1, tracking_uri=tracking_uri, config=GATE)
    assert first.decision == "promoted" and _alias(tracking_uri) == v1

    v2 = cheap_version(tracking_uri, 0.60, {"de": 0.62, "es": 0.58})
    better = promote(MODEL_NAME, tracking_uri=tracking_uri, config=GATE)  # newest version by default
    assert (better.candidate, better.decision, better.previous_champion) == (v2, "promoted", v1)
    assert _alias(tracking_uri) == v2

    v3 = cheap_version(tracking_uri, 0.55, {"de": 0.60, "es": 0.50})
    worse = promote(MODEL_NAME, v3, tracking_uri=tracking_uri, config=GATE)
    assert worse.decision == "refused" and _alias(tracking_uri) == v2
    tags = _tags(tracking_uri, v3)
    assert tags[DECISION_TAG] == "refused"
    assert "0.5500 vs champion 0.6000" in tags[REASONS_TAG] and "es regressed" in tags[REASONS_TAG]
    assert tags["promotion.compared_to"] == v2

    v4 = cheap_version(tracking_uri, 0.70, {"de": 0.90, "es": 0.55})  # es -0.03, tolerance 0.02
    regress = promote(MODEL_NAME, v4, tracking_uri=tracking_uri, config=GATE)
    assert regress.decision == "refused" and _alias(tracking_uri) == v2
    assert _tags(tracking_uri, v4)[REASONS_TAG].count("regressed") == 1
    assert "es regressed 0.5500 vs champion 0.5800" in _tags(tracking_uri, v4)[REASONS_TAG]

    again = promote(MODEL_NAME, v2, tracking_uri=tracking_uri, config=GATE)
    assert again.decision == "already champion"

    assert champion_history(MODEL_NAME, tracking_uri=tracking_uri) == [v1, v2]
    assert rollback(MODEL_NAME, tracking_uri=tracking_uri, config=GATE) == (v2, v1)
    assert _alias(tracking_uri) == v1
    assert champion_history(MODEL_NAME, tracking_uri=tracking_uri) == [v1]
    assert "promotion.rolled_back_at" in _tags(tracking_uri, v2)
    with pytest.raises(XdistillError, match="first champion"):
        rollback(MODEL_NAME, tracking_uri=tracking_uri, config=GATE)
    assert promotion_lock_path(tracking_uri).relative_to(Path(tracking_uri[len("sqlite:///") :]).parent) == Path(
        "mlartifacts/.mlflow.db.promote.lock"
    )


def test_rollback_skips_a_deleted_former_champion(tracking_uri: str) -> None:
    """A former champion deleted in the MLflow UI is passed over (it used to end in MLflow's traceback)."""
    v1, v2, v3 = (cheap_version(tracking_uri, score, {"de": score}) for score in (0.50, 0.60, 0.70))
    for version in (v1, v2, v3):
        assert promote(MODEL_NAME, version, tracking_uri=tracking_uri, config=GATE).decision == "promoted"
    client = client_for(tracking_uri)
    client.delete_model_version(MODEL_NAME, v2)
    assert rollback(MODEL_NAME, tracking_uri=tracking_uri, config=GATE) == (v3, v1)
    assert _alias(tracking_uri) == v1 and champion_history(MODEL_NAME, tracking_uri=tracking_uri) == [v1]
    client.delete_model_version(MODEL_NAME, v3)
    v4 = cheap_version(tracking_uri, 0.80, {"de": 0.80})
    assert promote(MODEL_NAME, v4, tracking_uri=tracking_uri, config=GATE).decision == "promoted"
    client.delete_model_version(MODEL_NAME, v1)
    with pytest.raises(XdistillError, match=rf"version {v4} is the first champion \(earlier champions {v1} were"):
        rollback(MODEL_NAME, tracking_uri=tracking_uri, config=GATE)
    assert _alias(tracking_uri) == v4


def test_each_alias_has_its_own_history_and_a_hand_moved_alias_is_respected(tracking_uri: str) -> None:
    v1, v2, v3 = (cheap_version(tracking_uri, score, {"de": score}) for score in (0.50, 0.60, 0.10))
    for version in (v1, v2):
        assert promote(MODEL_NAME, version, tracking_uri=tracking_uri, config=GATE).decision == "promoted"
    staging = PromoteConfig(alias="staging", compare_with=())
    assert promote(MODEL_NAME, v3, tracking_uri=tracking_uri, config=staging).decision == "promoted"
    assert champion_history(MODEL_NAME, tracking_uri=tracking_uri) == [v1, v2]
    assert champion_history(MODEL_NAME, tracking_uri=tracking_uri, alias="staging") == [v3]
    # a rollback of champion never hands it the staging version
    assert rollback(MODEL_NAME, tracking_uri=tracking_uri, config=GATE) == (v2, v1)
    client = client_for(tracking_uri)
    client.set_registered_model_alias(MODEL_NAME, "champion", v3)  # by hand, past the gate
    with pytest.raises(XdistillError, match=rf"'champion' holds version {v3}, which the gate never promoted"):
        rollback(MODEL_NAME, tracking_uri=tracking_uri, config=GATE)
    assert _alias(tracking_uri) == v3


def test_an_alias_move_that_fails_leaves_no_promoted_tag_and_the_history_as_it_was(
    tracking_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """e.g. sqlite 'database is locked' under parallel sweep members: nothing may claim the move happened."""
    from mlflow import MlflowClient

    v1, v2 = (cheap_version(tracking_uri, score, {"de": score}) for score in (0.50, 0.60))
    assert promote(MODEL_NAME, v1, tracking_uri=tracking_uri, config=GATE).decision == "promoted"

    def locked(*_args, **_kwargs):
        raise RuntimeError("database is locked")

    monkeypatch.setattr(MlflowClient, "set_registered_model_alias", locked)
    with pytest.raises(RuntimeError, match="database is locked"):
        promote(MODEL_NAME, v2, tracking_uri=tracking_uri, config=GATE)
    monkeypatch.undo()
    assert _alias(tracking_uri) == v1 and champion_history(MODEL_NAME, tracking_uri=tracking_uri) == [v1]
    assert DECISION_TAG not in client_for(tracking_uri).get_model_version(MODEL_NAME, v2).tags
    assert promote(MODEL_NAME, v2, tracking_uri=tracking_uri, config=GATE).decision == "promoted"  # once it can


def test_unregister_never_takes_a_version_that_holds_an_alias(tracking_uri: str) -> None:
    """A failed flow run takes back the version it registered, unless it was promoted meanwhile: deleting it
    would delete the champion alias with it."""
    from xdistill.registry.register import unregister

    client = client_for(tracking_uri)
    v1, v2 = (cheap_version(tracking_uri, score, {"de": score}) for score in (0.50, 0.60))
    assert promote(MODEL_NAME, v1, tracking_uri=tracking_uri, config=GATE).decision == "promoted"
    registration = {"tracking_uri": tracking_uri, "model_name": MODEL_NAME}
    held = unregister({**registration, "model_version": v1, "run_id": client.get_model_version(MODEL_NAME, v1).run_id})
    assert held == [f"{MODEL_NAME} version {v1} holds champion (promoted meanwhile): left in place"]
    assert _alias(tracking_uri) == v1
    run_id = client.get_model_version(MODEL_NAME, v2).run_id
    assert unregister({**registration, "model_version": v2, "run_id": run_id}) == []
    assert [str(v.version) for v in client.search_model_versions(f"name = '{MODEL_NAME}'")] == [v1]
    assert client.get_run(run_id).info.lifecycle_stage == "deleted"
    # called while the flow handles another failure: a problem to report, never an exception over it
    gone = unregister({**registration, "model_version": v2, "run_id": run_id})
    assert len(gone) == 1 and gone[0].startswith(f"could not read {MODEL_NAME} version {v2}: ")


def test_a_champion_set_by_hand_is_where_rollback_returns(tracking_uri: str) -> None:
    """The gate beats the hand-set champion, so rolling back restores that one, not the gate's last pick."""
    v1, v2, v3, v4 = (cheap_version(tracking_uri, score, {"de": score}) for score in (0.50, 0.60, 0.65, 0.70))
    for version in (v1, v2):
        assert promote(MODEL_NAME, version, tracking_uri=tracking_uri, config=GATE).decision == "promoted"
    client_for(tracking_uri).set_registered_model_alias(MODEL_NAME, "champion", v3)  # by hand
    result = promote(MODEL_NAME, v4, tracking_uri=tracking_uri, config=GATE)
    assert (result.decision, result.previous_champion) == ("promoted", v3)
    assert champion_history(MODEL_NAME, tracking_uri=tracking_uri) == [v1, v2, v3, v4]
    assert rollback(MODEL_NAME, tracking_uri=tracking_uri, config=GATE) == (v4, v3)
    # moved back by hand to an earlier champion: the versions after it stay demoted
    client_for(tracking_uri).set_registered_model_alias(MODEL_NAME, "champion", v1)
    v5 = cheap_version(tracking_uri, 0.80, {"de": 0.80})
    assert promote(MODEL_NAME, v5, tracking_uri=tracking_uri, config=GATE).decision == "promoted"
    assert champion_history(MODEL_NAME, tracking_uri=tracking_uri) == [v1, v5]
    with pytest.raises(XdistillError, match="must be a number"):
        promote(MODEL_NAME, "v3", tracking_uri=tracking_uri, config=GATE)


def test_an_unreachable_store_is_not_mistaken_for_a_missing_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that does not answer raises its own error; "no version" is kept for versions that do not exist."""
    port = free_port()  # a port nothing listens on
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    config = PromoteConfig(lock_file=str(tmp_path / "promote.lock"))
    with pytest.raises(Exception) as raised:
        promote(MODEL_NAME, "1", tracking_uri=f"http://127.0.0.1:{port}", config=config)
    assert "has no version" not in str(raised.value)
    with pytest.raises(Exception) as raised:
        rollback(MODEL_NAME, tracking_uri=f"http://127.0.0.1:{port}", config=config)
    assert "no 'champion' to roll back" not in str(raised.value)


def test_gate_refuses_a_candidate_worse_than_its_base_on_a_real_store(tracking_uri: str) -> None:
    refs = {"student-untrained": Scores(0.60, {"de": 0.60}), "teacher": Scores(0.2, {"en": 0.8})}
    worse = cheap_version(tracking_uri, 0.58, {"en": 0.85, "de": 0.61}, references=refs)
    result = promote(MODEL_NAME, worse, tracking_uri=tracking_uri, config=PromoteConfig(tolerance=0.02))
    assert result.decision == "refused" and _alias(tracking_uri) is None
    assert "below the untrained student" in _tags(tracking_uri, worse)[REASONS_TAG]
    better = cheap_version(tracking_uri, 0.62, {"en": 0.85, "de": 0.61}, references=refs)
    assert (
        promote(MODEL_NAME, better, tracking_uri=tracking_uri, config=PromoteConfig(tolerance=0.02)).decision
        == "promoted"
    )
    assert _alias(tracking_uri) == better
    # the English gap to the teacher is a version tag, readable in the UI, whatever the decision
    assert _tags(tracking_uri, better)[TEACHER_GAP_TAG] == "en +0.05"


def test_promote_and_rollback_cli_find_the_params_files_store(
    tmp_path: Path, tracking_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store (and a relative promote.lock_file) named in a params file lie in that file's project,
    wherever the command runs; a store that does not exist is an error, not a new empty one."""
    from xdistill.cli.main import main

    refs = {"student-untrained": Scores(0.40, {"de": 0.40}), "teacher": Scores(0.9, {"en": 0.8})}
    version = cheap_version(tracking_uri, 0.50, {"en": 0.8, "de": 0.50}, references=refs)
    params = tmp_path / "params.yaml"  # the store is tmp_path/mlflow.db, the default relative URI
    params.write_text(
        yaml.safe_dump({"register": {"model_name": MODEL_NAME}, "promote": {"lock_file": "locks/promote.lock"}})
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.delenv(REGISTRY_ROOT_ENV, raising=False)
    better = cheap_version(tracking_uri, 0.60, {"en": 0.8, "de": 0.60}, references=refs)
    for candidate in (version, better):
        assert main(["promote", "--params", str(params), "--version", candidate]) == 0
    assert _alias(tracking_uri) == better and not list(elsewhere.iterdir())
    assert (tmp_path / "locks" / "promote.lock").is_file()
    (elsewhere / "params.yaml").write_text(yaml.safe_dump({"register": {"model_name": MODEL_NAME}}))
    assert main(["rollback", "--params", "params.yaml"]) == 2
    assert not (elsewhere / "mlflow.db").exists()
    assert main(["rollback", "--params", str(params)]) == 0 and _alias(tracking_uri) == version


# Runs `xdistill promote` with the gate's judgement slowed down by HOLD_S seconds, so that the
# decision window (champion read -> alias set) of two processes overlaps; the production code has
# no option for this.
_SLOW_PROMOTE = """
import sys, time
import xdistill.registry.promotion as promotion
from xdistill.cli.main import main
hold_s, judge = float(sys.argv[1]), promotion.judge
def slow_judge(*args, **kwargs):
    time.sleep(hold_s)
    return judge(*args, **kwargs)
promotion.judge = slow_judge
sys.exit(main(["promote", *sys.argv[2:]]))
"""


def _promote_process(params: Path, uri: str, version: str, hold_s: float) -> subprocess.Popen[str]:
    cmd = [
        sys.executable,
        "-c",
        _SLOW_PROMOTE,
        str(hold_s),
        "--params",
        str(params),
        "--tracking-uri",
        uri,
        "--version",
        version,
    ]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_racing_promotions_leave_the_winner(tmp_path: Path, tracking_uri: str) -> None:
    """The better candidate starts first and decides quickly; the worse one starts while the first
    is still deciding and sets the alias later. Without the lock both judge against the old
    champion and the worse one, setting the alias last, ends up champion."""
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"register": {"model_name": MODEL_NAME}, "promote": {"margin": 0.0}}))
    refs = {"student-untrained": Scores(0.40, {"de": 0.40}), "teacher": Scores(0.9, {"en": 0.8})}
    v1 = cheap_version(tracking_uri, 0.50, {"en": 0.8, "de": 0.50}, references=refs)
    assert promote(MODEL_NAME, v1, tracking_uri=tracking_uri).decision == "promoted"
    worse = cheap_version(tracking_uri, 0.60, {"en": 0.8, "de": 0.60}, references=refs)
    best = cheap_version(tracking_uri, 0.70, {"en": 0.8, "de": 0.70}, references=refs)

    first = _promote_process(params, tracking_uri, best, hold_s=2.0)
    time.sleep(0.5)
    second = _promote_process(params, tracking_uri, worse, hold_s=4.0)
    outcomes = {}
    for proc in (first, second):
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        result = json.loads(out)
        outcomes[result["candidate"]] = result

    assert _alias(tracking_uri) == best
    history = champion_history(MODEL_NAME, tracking_uri=tracking_uri)
    assert history[-1] == best and history[0] == v1
    if outcomes[worse]["decision"] == "refused":  # it waited for the lock and met the new champion
        assert outcomes[worse]["previous_champion"] == best
        assert "0.6000 vs champion 0.7000" in _tags(tracking_uri, worse)[REASONS_TAG]
    else:  # it got the lock first; the best then beat it
        assert outcomes[best]["previous_champion"] == worse and history == [v1, worse, best]


# --- the register stage ----------------------------------------------------------------------------


@pytest.mark.slow
def test_register_from_a_workspace_records_the_store_relative_to_the_registry_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # as the Prefect flows run it: the stage in a private workspace, the store in the project
    project = tmp_path / "project"
    project.mkdir()
    workspace = make_outputs_project(tmp_path / "workspace", 0.42, {"de": 0.5})
    monkeypatch.chdir(workspace)
    monkeypatch.setenv(REGISTRY_ROOT_ENV, str(project))
    registration = register_run(workspace)

    assert registration.tracking_uri == resolve_tracking_uri("sqlite:///mlflow.db", project)
    assert (project / "mlflow.db").is_file() and not (workspace / "mlflow.db").exists()
    record = json.loads((workspace / "metrics" / "register.json").read_text())
    assert record["tracking_uri"] == "sqlite:///mlflow.db"  # no machine path, though the store is elsewhere
    assert read_registration(workspace / "metrics" / "register.json", project=project) == registration.as_dict()


def test_register_into_a_deleted_experiment_says_how_to_restore_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_outputs_project(tmp_path / "project", 0.42, {"de": 0.5})
    monkeypatch.setenv(REGISTRY_ROOT_ENV, str(root))
    client = client_for(resolve_tracking_uri("sqlite:///mlflow.db", root))
    client.delete_experiment(client.create_experiment("xdistill"))
    with pytest.raises(XdistillError, match=r"experiment 'xdistill' .* was deleted: restore it"):
        register_run(root)


@pytest.mark.slow
def test_register_cli_root_and_params_work_from_another_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from xdistill.cli.main import main

    root = make_outputs_project(tmp_path / "project", 0.42, {"de": 0.5})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    params = yaml.safe_load((root / "params.yaml").read_text(encoding="utf-8"))
    params["train"]["steps"] = 7
    params["register"]["experiment"] = "from-other-params"
    other_params = elsewhere / "other.yaml"
    other_params.write_text(yaml.safe_dump(params), encoding="utf-8")
    monkeypatch.chdir(elsewhere)
    monkeypatch.delenv(REGISTRY_ROOT_ENV, raising=False)
    assert main(["register", "--root", str(root), "--params", str(other_params)]) == 0

    # the relative store lies in the project it was pointed at, not in the current folder
    assert (root / "mlflow.db").is_file() and not (elsewhere / "mlflow.db").exists()
    registration = read_registration(root / "metrics" / "register.json")
    run = client_for(registration["tracking_uri"]).get_run(registration["run_id"])
    assert run.data.params["train.steps"] == "7"  # the whole --params file is what the run logs
    assert client_for(registration["tracking_uri"]).get_experiment(run.info.experiment_id).name == "from-other-params"


@pytest.mark.slow
def test_register_logs_everything_and_champion_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import mlflow

    from xdistill.export.model_card import TrainingFacts, write_model_card
    from xdistill.registry.register import model_folder

    root = make_outputs_project(tmp_path / "project", 0.42, {"de": {"sts17": 0.5, "tatoeba": 0.34}, "es": 0.4})
    card = write_model_card(root / "models" / "student", TrainingFacts(teacher="pypi:all-minilm-l6-v2"))
    monkeypatch.chdir(root)
    monkeypatch.setenv("DVC_EXP_NAME", "tiny-exp")
    registration = register_run(root)

    uri = resolve_tracking_uri("sqlite:///mlflow.db", root)
    assert registration.tracking_uri == uri and (root / "mlflow.db").is_file()
    record = json.loads((root / "metrics" / "register.json").read_text())
    assert record == {**registration.as_dict(), "tracking_uri": "sqlite:///mlflow.db"}  # no machine path
    assert read_registration(root / "metrics" / "register.json") == registration.as_dict()
    client = client_for(uri)
    run = client.get_run(registration.run_id)
    assert run.data.params["train.steps"] == "3" and run.data.params["languages"] == '["de", "es"]'
    assert run.data.metrics["eval.summary.primary_score"] == pytest.approx(0.42)
    assert run.data.metrics["eval.summary.per_language.de.tatoeba"] == pytest.approx(0.34)
    assert run.data.metrics["train.final_loss"] == pytest.approx(0.0123)
    assert run.data.metrics["data_report.train_pairs"] == 120
    assert run.data.tags["dvc_experiment"] == "tiny-exp" and len(run.data.tags["git_commit"]) == 40
    # where and how the student was trained (metrics/train.json's provenance), as the run's tags
    assert run.data.tags["train.device_name"] == "NVIDIA H100" and run.data.tags["train.processes"] == "4"
    assert run.data.tags["train.device"] == "cuda" and run.data.tags["train.precision"] == "bf16"
    artifacts = {
        a.path
        for folder in ("", "plots", "reports", "metrics/eval")
        for a in client.list_artifacts(run.info.run_id, folder)
    }
    assert {"params.yaml", "plots/train_curves.png", "reports/data_report.md", "metrics/eval/summary.json"} <= artifacts
    version = client.get_model_version(MODEL_NAME, registration.model_version)
    assert version.run_id == registration.run_id
    scores = Scores.from_tags(version.tags)
    assert (scores.primary, scores.per_language) == (0.42, {"de.sts17": 0.5, "de.tatoeba": 0.34, "es": 0.4})
    assert scores.references["student-untrained"].primary == pytest.approx(0.41)
    # size and speed of the student, for the promotion decision (MiniLM-L6: 22.7M parameters, 384-d)
    assert run.data.metrics["student.parameters"] == pytest.approx(22_713_216)
    assert run.data.metrics["student.dimension"] == 384 and 80 < run.data.metrics["student.size_mb"] < 100
    assert run.data.metrics["student.sentences_per_second"] > 1 and run.data.metrics["student.speed_sentences"] == 64
    assert version.tags["student.parameters"] == "22713216" and version.tags["student.dimension"] == "384"
    assert float(version.tags["student.sentences_per_second"]) == run.data.metrics["student.sentences_per_second"]

    assert promote(MODEL_NAME, tracking_uri=uri).decision == "promoted"
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    champion = mlflow.sentence_transformers.load_model(f"models:/{MODEL_NAME}@champion")
    sentences = ["A man is playing a guitar.", "The weather is nice today."]
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(student_source()), device="cpu").encode(sentences)
    embeddings = champion.encode(sentences)
    assert embeddings.shape == (2, 384)
    np.testing.assert_allclose(embeddings, reference, atol=1e-5)
    # the registered model carries the student's card, not sentence-transformers' template
    downloaded = mlflow.artifacts.download_artifacts(registration.model_uri, dst_path=str(tmp_path / "download"))
    logged_card = (model_folder(downloaded) / "README.md").read_text(encoding="utf-8")
    assert logged_card == card.read_text(encoding="utf-8") and "sentence_transformers_model_id" not in logged_card


@pytest.mark.slow
def test_register_failures_leave_registry_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_outputs_project(tmp_path / "project", 0.42, {"de": 0.4}, git=False)
    monkeypatch.chdir(root)
    uri = resolve_tracking_uri("sqlite:///mlflow.db", root)
    config = RegisterConfig(tracking_uri=uri)

    # a bad input fails before anything is created
    (root / "metrics" / "eval" / "summary.json").write_text('{"primary_score": 0.4,\n  oops}')
    with pytest.raises(InputFileError, match=r"summary.json:2: invalid JSON"):
        register_run(root, config)
    assert not (root / "mlflow.db").exists()

    # a failure after the version exists (register.json cannot be written) removes the version again
    set_scores(root, 0.42, {"de": 0.4})
    (root / "metrics" / "register.json").mkdir()
    with pytest.raises(OSError):
        register_run(root, config)
    client = client_for(uri)
    assert client.search_model_versions(f"name = '{MODEL_NAME}'") == []
    experiment = client.get_experiment_by_name("xdistill")
    assert client.search_runs([experiment.experiment_id]) == []  # the failed run is deleted


@pytest.mark.slow
def test_promotion_through_a_tracking_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Any tracking URI works: the same gate against `mlflow server` (its own sqlite store)."""
    import os
    import signal
    import urllib.request

    from flows.local_stack import free_port

    port = free_port()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            f"sqlite:///{tmp_path}/server.db",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=5):
                    break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, "mlflow server did not start"
                time.sleep(1)
        monkeypatch.setenv("XDISTILL_CACHE_DIR", str(tmp_path / "cache"))  # where the lock of a remote store goes
        v1 = cheap_version(uri, 0.50, {"de": 0.50})
        v2 = cheap_version(uri, 0.40, {"de": 0.40})
        assert promote(MODEL_NAME, v1, tracking_uri=uri, config=GATE).decision == "promoted"
        assert promote(MODEL_NAME, v2, tracking_uri=uri, config=GATE).decision == "refused"
        assert _alias(uri) == v1 and _tags(uri, v2)[DECISION_TAG] == "refused"
        lock = promotion_lock_path(uri)  # one per server, wherever a promoter runs
        assert lock.parent == tmp_path / "cache" / "locks" and lock.name.startswith("127.0.0.1_")
        assert not lock.exists()  # promotions through a server hold the server's own lock, not this file
        assert promotion_lock_path(uri + "/") == lock
        monkeypatch.chdir(tmp_path)  # the same path from another folder
        assert promotion_lock_path(uri) == lock
        assert promotion_lock_path("http://127.0.0.1:1/") != lock
        secret = promotion_lock_path(f"http://user:s3cret@127.0.0.1:{port}")  # no password in a file name
        assert "s3cret" not in secret.name and secret.name.startswith(f"127.0.0.1_{port}-")
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)


def test_a_busy_promotion_lock_is_its_own_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Waiting out another promotion is worth a retry (the flow retries it), unlike a refusal."""
    import xdistill.registry.store as store

    monkeypatch.setattr(store, "PROMOTION_LOCK_TIMEOUT_S", 0.2)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    with store.promotion_lock(uri):
        with pytest.raises(store.PromotionLockBusy, match="another promotion held the lock"), store.promotion_lock(uri):
            pass


@pytest.mark.parametrize(
    ("uri", "written"),
    [
        ("https://alice:s3cret@mlflow.example:5000/", "https://mlflow.example:5000/"),
        ("http://token@127.0.0.1:5000", "http://127.0.0.1:5000"),
        ("http://127.0.0.1:5000", "http://127.0.0.1:5000"),
        ("databricks", "databricks"),
    ],
)
def test_register_json_never_holds_tracking_credentials(uri: str, written: str, tmp_path: Path) -> None:
    """metrics/register.json is committed: a user:password@ in the tracking URI must not reach it."""
    from xdistill.registry.register import Registration

    registration = Registration("run", "1", "xdistill-student", "3", "models:/xdistill-student/3", uri)
    record = registration.as_record(tmp_path)
    assert record["tracking_uri"] == written
    assert "s3cret" not in json.dumps(record) and "token@" not in json.dumps(record)
