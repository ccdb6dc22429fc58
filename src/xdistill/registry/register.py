"""The ``register`` stage: log one pipeline run to MLflow and register the student as a new version.

One MLflow run per pipeline run holds the flattened ``params.yaml`` (params), every numeric value
of ``metrics/**/*.json`` (metrics, prefixed by the file's path: ``eval.summary.primary_score``),
the data report, the plots and reports (artifacts) and the student, logged with the
sentence-transformers flavor and an input example, its model card (the ``README.md`` the train stage
wrote) in place of sentence-transformers' template. The student is then registered as a new
version of ``register.model_name`` carrying the evaluation scores as tags (the promotion gate
reads them from there), and the student's size and speed (:mod:`xdistill.models.facts`: parameters,
disk MB, dimension, sentences/s) as ``student.*`` metrics of the run and tags of the version.
``metrics/register.json`` records the run id, version and model URI, and
the tracking URI without a machine path: a local store inside the project as a URI relative to the
project folder (``sqlite:///mlflow.db``, the form params.yaml uses); :func:`read_registration`
resolves it again.

Failure leaves nothing half-done: every input is checked before the run starts; an error after
the version exists deletes the version again, and a failed run is marked FAILED and deleted.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from xdistill.config import SECTION_CONFIG, parse_section
from xdistill.errors import InputFileError, XdistillError
from xdistill.evaluation.labels import TEACHER_LABEL, UNTRAINED_LABEL
from xdistill.io import PARAMS_FILE, load_params, write_json_atomic
from xdistill.registry.pending import (
    COMPLETE,
    PENDING,
    REGISTER_ROLE,
    ROLE_TAG,
    STATE_TAG,
    clean_stale_registrations,
    discard_registration,
    logged_model_id,
    owner_tags,
)
from xdistill.registry.scores import ENGLISH, Scores, read_summary_scores
from xdistill.registry.store import (
    DEFAULT_TRACKING_URI,
    client_for,
    default_artifact_location,
    flatten,
    local_store_path,
    numeric_leaves,
    promotion_lock,
    registry_root,
    resolve_tracking_uri,
)

log = logging.getLogger(__name__)

STUDENT_DIR = Path("models/student")
METRICS_DIR = Path("metrics")
SUMMARY_FILE = METRICS_DIR / "eval" / "summary.json"
REGISTER_FILE = METRICS_DIR / "register.json"
PROMOTION_FILE = METRICS_DIR / "promotion.json"  # the promote stage's decision on the registered version
ARTIFACT_DIRS = ("plots", "reports", "metrics")
MODEL_ARTIFACT_NAME = "student"
MODEL_DATA_DIR = "model.sentence_transformer"  # the flavor's folder of the model inside the logged model
HISTORY_FILE = Path("reports/train_history.csv")
SCORES_ARTIFACT = "xdistill/scores.json"  # every score of the version (its tags hold them one by one)
HISTORY_PREFIX = "train/"  # the training history's step-wise metrics: train/loss, train/dev_score
# the data the student was trained and selected on, logged as the run's dataset inputs
DATASETS = (
    ("data/parallel/train.tsv.gz", "training"),
    ("data/parallel/dev.tsv.gz", "validation"),
    ("data/parallel/dev_mining.tsv.gz", "validation"),
)
# Logged with the model: MLflow derives the signature from it and the UI shows it.
INPUT_EXAMPLE = ["A man is playing a guitar.", "Un hombre toca la guitarra.", "Ein Mann spielt Gitarre."]
MAX_PARAM_LENGTH = 6000  # MLflow's limit on one param value
METRICS_PER_BATCH = 1000  # MLflow's limit on metrics per log_batch call

GIT_COMMIT_TAG = "git_commit"
DVC_EXPERIMENT_TAG = "dvc_experiment"
DVC_BASELINE_TAG = "dvc_baseline_rev"


@dataclass(frozen=True)
class RegisterConfig:
    """The ``register`` section of params.yaml."""

    __pydantic_config__ = SECTION_CONFIG

    tracking_uri: str = DEFAULT_TRACKING_URI
    experiment: str = "xdistill"
    model_name: str = "xdistill-student"

    @classmethod
    def from_params(cls, section: dict[str, Any] | None) -> RegisterConfig:
        """The section's settings; a null value means the default."""
        return parse_section(cls, section, "register", null_is_default=True)


@dataclass(frozen=True)
class Registration:
    """What ``register`` produced (also the content of ``metrics/register.json``)."""

    run_id: str
    experiment_id: str
    model_name: str
    model_version: str
    model_uri: str
    tracking_uri: str

    def as_dict(self) -> dict[str, str]:
        return dict(self.__dict__)

    def as_record(self, root: Path) -> dict[str, str]:
        """The content of ``register.json``: a local store inside ``root`` (the registry root) as a relative URI."""
        return {**self.as_dict(), "tracking_uri": portable_tracking_uri(self.tracking_uri, root)}


def portable_tracking_uri(tracking_uri: str, root: Path) -> str:
    """``sqlite:////abs/root/mlflow.db`` -> ``sqlite:///mlflow.db`` when the store lies inside ``root``.

    Any other URI (a server, or a store outside the project that the user configured) is kept as it is, less
    any ``user:password@``: register.json is committed, so credentials belong in MLflow's
    ``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD`` environment variables, never in the file.
    """
    store = local_store_path(tracking_uri)
    if store is None:
        return without_credentials(tracking_uri)
    try:
        relative = store.resolve().relative_to(Path(root).resolve()).as_posix()
    except ValueError:
        return tracking_uri
    return f"sqlite:///{relative}" if tracking_uri.startswith("sqlite:") else f"file:{relative}"


def without_credentials(uri: str) -> str:
    """``https://user:secret@host:5000/x`` -> ``https://host:5000/x`` (any other URI unchanged)."""
    parts = urlsplit(uri)
    if parts.username is None and parts.password is None:
        return uri
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    netloc += f":{parts.port}" if parts.port is not None else ""
    return urlunsplit(parts._replace(netloc=netloc))


def read_registration(path: str | Path = REGISTER_FILE, project: str | Path | None = None) -> dict[str, str]:
    """A ``register.json`` with its tracking URI absolute again: a relative one is relative to ``project``
    (default: the project folder holding ``metrics/register.json``)."""
    path = Path(path)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise InputFileError(path, "registration not found (run the register stage)") from exc
    except json.JSONDecodeError as exc:
        raise InputFileError(path, f"invalid JSON: {exc.msg}", exc.lineno) from exc
    project = Path(project) if project is not None else path.resolve().parent.parent
    return {**record, "tracking_uri": resolve_tracking_uri(record["tracking_uri"], project)}


def register_run(
    root: str | Path = ".", config: RegisterConfig | None = None, *, params_file: str | Path | None = None
) -> Registration:
    """Log the pipeline outputs under ``root`` to MLflow, register the student, write register.json.

    ``params_file`` (default ``<root>/params.yaml``) is logged as the run's parameters and, without
    ``config``, gives the ``register`` section. A relative store resolves against the registry root
    (:func:`~xdistill.registry.store.registry_root`), which is ``root`` unless the environment names one.
    """
    root = Path(root).resolve()
    params_file = Path(params_file) if params_file is not None else root / PARAMS_FILE
    config = config or RegisterConfig.from_params(load_params("register", params_file))
    store_root = registry_root(root)
    tracking_uri = resolve_tracking_uri(config.tracking_uri, store_root)
    inputs = _collect_inputs(root, params_file)  # fail here, before anything is created
    tags = {**_lineage_tags(root), **_training_tags(root)}
    facts = _student_facts(root)

    import mlflow

    mlflow.set_tracking_uri(tracking_uri)
    mlflow.set_registry_uri(tracking_uri)
    client = client_for(tracking_uri)
    experiment_id = _ensure_experiment(client, config.experiment, tracking_uri)
    cleaned = clean_stale_registrations(client, config.model_name, experiment_id)
    if cleaned:
        log.warning("removed what crashed registrations left: %s", ", ".join(cleaned))
    run_name = tags.get(DVC_EXPERIMENT_TAG) or f"register-{tags.get(GIT_COMMIT_TAG, 'nogit')[:8]}"
    log.info("MLflow run in experiment '%s' at %s", config.experiment, without_credentials(tracking_uri))
    owner = owner_tags()
    run = client.create_run(experiment_id, run_name=run_name, tags={**tags, **owner, ROLE_TAG: REGISTER_ROLE})
    run_id = run.info.run_id
    version: str | None = None
    model_id: str | None = None
    wrote_record = False
    try:
        with mlflow.start_run(run_id=run_id):
            client.set_tag(run_id, "mlflow.note.content", describe_run(inputs, facts))
            _log_params(client, run_id, inputs.params)
            _log_metrics(client, run_id, {**inputs.metrics, **facts})
            _log_history(client, run_id, root / HISTORY_FILE)
            _log_datasets(root)
            _log_artifacts(root, inputs.params_file)
            if inputs.scores is not None:
                mlflow.log_dict(inputs.scores.as_dict(), SCORES_ARTIFACT)
            model_uri, model_id = _log_student(client, root / STUDENT_DIR, config.model_name)
            log.info("registering a new version of '%s'", config.model_name)
            fact_tags = {key: f"{value:.10g}" for key, value in facts.items()}
            version_tags = {**tags, **_score_tags(inputs.scores), **fact_tags, "run_id": run_id}
            # pending until register.json names it: a registration killed before that is never judged
            model_version = mlflow.register_model(
                model_uri, config.model_name, tags={**version_tags, **owner, STATE_TAG: PENDING}
            )
            version = str(model_version.version)
            _describe(client, config.model_name, version, inputs, facts)
            registration = Registration(
                run_id=run_id,
                experiment_id=experiment_id,
                model_name=config.model_name,
                model_version=version,
                model_uri=f"models:/{config.model_name}/{version}",
                tracking_uri=tracking_uri,
            )
            # relative to the folder a relative store resolves against (the project; the Prefect flows
            # point it at the project from their private workspaces), so no machine path is committed
            write_json_atomic(root / REGISTER_FILE, registration.as_record(store_root))
            wrote_record = True
            client.set_model_version_tag(config.model_name, version, STATE_TAG, COMPLETE)
    except BaseException:
        if wrote_record:  # it names the version about to be deleted
            (root / REGISTER_FILE).unlink(missing_ok=True)
        discard_registration(client, config.model_name, version, run_id, model_id)
        raise
    log.info("registered %s version %s (run %s)", config.model_name, version, run_id)
    return registration


@dataclass(frozen=True)
class _Inputs:
    params: dict[str, Any]
    params_file: Path
    metrics: dict[str, float]
    scores: Scores | None


def _collect_inputs(root: Path, params_file: Path) -> _Inputs:
    """Read and check everything the run will log, so a bad input fails before MLflow is touched."""
    student = root / STUDENT_DIR
    if not (student / "modules.json").is_file() and not (student / "config.json").is_file():
        raise InputFileError(student, "not a sentence-transformers model folder (no modules.json); run the train stage")
    params = load_params(None, params_file)
    metrics: dict[str, float] = {}
    for path in _metric_files(root / METRICS_DIR):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise InputFileError(path, f"invalid JSON: {exc.msg}", exc.lineno) from exc
        prefix = ".".join(path.relative_to(root / METRICS_DIR).with_suffix("").parts)
        if isinstance(data, dict):
            metrics.update(numeric_leaves(data, prefix))
    scores = read_summary_scores(root / SUMMARY_FILE)
    return _Inputs(params=params, params_file=params_file, metrics=metrics, scores=scores)


def _student_facts(root: Path) -> dict[str, float]:
    """``student.<fact>``: size and CPU speed of the student (speed on the staged FLORES English sentences)."""
    from xdistill.models.facts import SPEED_FILE, speed_sentences, student_facts

    facts = student_facts(root / STUDENT_DIR, speed_sentences(root / SPEED_FILE))
    log.info("student: %s", ", ".join(f"{k} {v}" for k, v in facts.items()))
    return {f"student.{key}": float(value) for key, value in facts.items()}


def _score_tags(scores: Scores | None) -> dict[str, str]:
    if scores is None:
        log.warning("%s has no primary score: the version can never be promoted", SUMMARY_FILE)
        return {}
    return scores.as_tags()


def _metric_files(metrics_dir: Path) -> list[Path]:
    """Every metrics JSON except register.json (this stage's own output) and promotion.json (the next stage's)."""
    if not metrics_dir.is_dir():
        return []
    own = {metrics_dir / REGISTER_FILE.name, metrics_dir / PROMOTION_FILE.name}
    return sorted(p for p in metrics_dir.rglob("*.json") if p not in own and not p.name.startswith("."))


def _lineage_tags(root: Path) -> dict[str, str]:
    """Git commit of the workspace and, inside ``dvc exp run``, the experiment's name and baseline."""
    tags: dict[str, str] = {}
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True, timeout=30
        ).stdout.strip()
        tags[GIT_COMMIT_TAG] = commit
        tags["mlflow.source.git.commit"] = commit
    except (OSError, subprocess.SubprocessError):
        log.warning("%s is not a git checkout: the run gets no commit tag", root)
    # `dvc exp run` exports these to every stage it runs (dvc.env); the Prefect flow does the same.
    if os.environ.get("DVC_EXP_NAME"):
        tags[DVC_EXPERIMENT_TAG] = os.environ["DVC_EXP_NAME"]
    if os.environ.get("DVC_EXP_BASELINE_REV"):
        tags[DVC_BASELINE_TAG] = os.environ["DVC_EXP_BASELINE_REV"]
    return tags


TRAIN_METRICS = METRICS_DIR / "train.json"
# metrics/train.json's provenance -> the run's tags: where and how the student was trained
PROVENANCE_TAGS = {
    "device_type": "train.device",
    "device_name": "train.device_name",
    "processes": "train.processes",
    "hosts": "train.hosts",
    "precision": "train.precision",
    "torch": "train.torch",
    "cuda": "train.cuda",
}


def _training_tags(root: Path) -> dict[str, str]:
    """The device, process count, precision and library versions the train stage recorded."""
    try:
        provenance = json.loads((root / TRAIN_METRICS).read_text(encoding="utf-8")).get("provenance") or {}
    except (OSError, json.JSONDecodeError):
        return {}
    return {tag: str(provenance[key]) for key, tag in PROVENANCE_TAGS.items() if key in provenance}


def _ensure_experiment(client: Any, name: str, tracking_uri: str) -> str:
    experiment = client.get_experiment_by_name(name)
    if experiment is not None and experiment.lifecycle_stage == "deleted":
        # MLflow keeps a deleted experiment's name taken and refuses runs in it
        raise XdistillError(
            f"MLflow experiment '{name}' at {tracking_uri} was deleted: restore it (`mlflow "
            f"experiments restore --experiment-id {experiment.experiment_id}` or the UI) or set "
            "register.experiment to another name"
        )
    if experiment is not None:
        return experiment.experiment_id
    try:
        return client.create_experiment(name, artifact_location=default_artifact_location(tracking_uri))
    except Exception:  # another process created it meanwhile
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            raise
        return experiment.experiment_id


def _log_params(client: Any, run_id: str, params: dict[str, Any]) -> None:
    from mlflow.entities import Param

    flat = flatten(params)
    entries = [Param(key, _param_value(value)) for key, value in sorted(flat.items())]
    for batch in _batches(entries, 100):
        client.log_batch(run_id, params=batch)
    log.info("logged %d params", len(entries))


def _param_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text[:MAX_PARAM_LENGTH]


def _log_metrics(client: Any, run_id: str, metrics: dict[str, float]) -> None:
    import time

    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    entries = [Metric(key, value, now, 0) for key, value in sorted(metrics.items())]
    for batch in _batches(entries, METRICS_PER_BATCH):
        client.log_batch(run_id, metrics=batch)
    log.info("logged %d metrics", len(entries))


def _batches(items: list[Any], size: int) -> Iterable[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _log_artifacts(root: Path, params_file: Path) -> None:
    import mlflow

    mlflow.log_artifact(str(params_file))
    if (root / "dvc.lock").is_file():
        mlflow.log_artifact(str(root / "dvc.lock"))
    for folder in ARTIFACT_DIRS:
        if (root / folder).is_dir():
            mlflow.log_artifacts(str(root / folder), artifact_path=folder)
    log.info("logged params.yaml and the %s folders as artifacts", ", ".join(ARTIFACT_DIRS))


def describe_run(inputs: _Inputs, facts: dict[str, float]) -> str:
    """A few lines saying what the student is and how it scored (the run's and the version's description)."""
    params = inputs.params
    models = params.get("models") or {}
    languages = params.get("languages") or []
    lines = [
        f"Multilingual sentence-embedding student distilled by xdistill from teacher `{models.get('teacher', '?')}` "
        f"into base model `{models.get('student', '?')}`, for English and {', '.join(map(str, languages)) or '?'}.",
        "",
    ]
    metrics = inputs.metrics
    if inputs.scores is not None:
        tasks = ", ".join(
            f"{task} {metrics[f'eval.summary.task_{task}']:.2f}"
            for task in inputs.scores.tasks
            if f"eval.summary.task_{task}" in metrics
        )
        lines.append(f"- evaluation primary score: **{inputs.scores.primary:.2f}**" + (f" ({tasks})" if tasks else ""))
        references = inputs.scores.references
        if UNTRAINED_LABEL in references:
            lines.append(f"- untrained student: {references[UNTRAINED_LABEL].primary:.2f}")
        english = references[TEACHER_LABEL].per_language.get(ENGLISH) if TEACHER_LABEL in references else None
        if english is not None:  # English-only: scored on English alone
            student = inputs.scores.per_language.get(ENGLISH)
            mine = f" (this student {student:.2f})" if student is not None else ""
            lines.append(f"- teacher, English STS17 en-en: {english:.2f}{mine}")
    else:
        lines.append("- no evaluation primary score: this version can never be promoted")
    if "train.best.dev_score" in metrics:
        step = metrics.get("train.best_step")
        at = f" at step {step:.0f}" if step is not None else ""
        lines.append(f"- dev score (checkpoint selection): {metrics['train.best.dev_score']:.2f}{at}")
    if facts:
        size = ", ".join(
            f"{label} {facts[key]:.4g}"
            for key, label in (
                ("student.parameters", "parameters"),
                ("student.dimension", "dimension"),
                ("student.size_mb", "MB"),
                ("student.sentences_per_second", "sentences/s on CPU"),
            )
            if key in facts
        )
        lines.append(f"- size and speed: {size}")
    return "\n".join(lines)


MODEL_DESCRIPTION = (
    "Multilingual sentence-embedding students distilled by xdistill (a teacher's English space taught to a "
    "multilingual student on parallel sentences). Each version is one pipeline run: its description and tags "
    "hold its scores, its run the parameters, the training history and the reports. The `champion` alias is "
    "moved by the promotion gate only (`xdistill promote`, `xdistill rollback`).\n\nLatest: {latest}"
)


def _describe(client: Any, model_name: str, version: str, inputs: _Inputs, facts: dict[str, float]) -> None:
    description = describe_run(inputs, facts)
    client.update_model_version(model_name, version, description=description)
    latest = f"version {version}: {description.split(chr(10), 1)[0]}"
    client.update_registered_model(model_name, description=MODEL_DESCRIPTION.format(latest=latest))


def _log_history(client: Any, run_id: str, path: Path) -> None:
    """The training history (one row per logged step) as step-wise ``train/<column>`` metrics."""
    import csv
    import time

    from mlflow.entities import Metric

    if not path.is_file():
        log.info("no %s: the run gets no training curves", path)
        return
    now = int(time.time() * 1000)
    entries = []
    with path.open(encoding="utf-8", newline="") as handle:
        for line, row in enumerate(csv.DictReader(handle), start=2):
            try:
                step = int(float(row.get("step") or ""))
            except ValueError as exc:
                raise InputFileError(path, f"step {row.get('step')!r} is not a number", line) from exc
            for column, text in row.items():
                if column in ("step", "kind") or column is None or not text:
                    continue
                try:
                    value = float(text)
                except (TypeError, ValueError):
                    continue
                if math.isfinite(value):
                    entries.append(Metric(HISTORY_PREFIX + _metric_key(column), value, now, step))
    for batch in _batches(entries, METRICS_PER_BATCH):
        client.log_batch(run_id, metrics=batch)
    log.info("logged %d training-history points", len(entries))


def _metric_key(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_\-. :/]", "_", name)


def _log_datasets(root: Path) -> None:
    """The training and dev data as the run's dataset inputs, each with its digest (dvc.lock's md5 when the
    pipeline recorded one, else computed)."""
    import warnings

    import mlflow
    from mlflow.data.dataset_source_registry import resolve_dataset_source
    from mlflow.data.meta_dataset import MetaDataset

    recorded = _dvc_lock_digests(root / "dvc.lock")
    for relative, context in DATASETS:
        path = root / relative
        if not path.is_file():
            continue
        digest = recorded.get(relative) or _md5(path)
        with warnings.catch_warnings():  # "can be interpreted in multiple ways": both are the local source
            warnings.simplefilter("ignore")
            source = resolve_dataset_source(relative)
        dataset = MetaDataset(source, name=path.name, digest=digest[:36])  # type: ignore[abstract]
        mlflow.log_input(dataset, context=context)
    log.info("logged the dataset inputs")


def _dvc_lock_digests(lock: Path) -> dict[str, str]:
    """path -> md5 of every stage dependency and output dvc.lock records."""
    import yaml

    try:
        stages = (yaml.safe_load(lock.read_text(encoding="utf-8")) or {}).get("stages") or {}
    except (OSError, yaml.YAMLError):
        return {}
    digests = {}
    for stage in stages.values():
        for entry in [*(stage.get("deps") or []), *(stage.get("outs") or [])]:
            if isinstance(entry, dict) and entry.get("path") and entry.get("md5"):
                digests[str(entry["path"])] = str(entry["md5"])
    return digests


def _md5(path: Path) -> str:
    import hashlib

    digest = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _log_student(client: Any, student_dir: Path, model_name: str) -> tuple[str, str | None]:
    """Log the student with the sentence-transformers flavor, its model card as the model folder's README.md
    and its teacher-space adapter inside that folder when it has one (``models:/...`` then downloads all of
    them); returns the logged model's URI and id."""
    import tempfile

    import mlflow
    from sentence_transformers import SentenceTransformer

    from xdistill.adapter.model import ADAPTER_DIR, adapter_dir, has_adapter
    from xdistill.export.model_card import CARD_FILE, card_for_registry

    card = card_for_registry(student_dir, model_name, shown_as=STUDENT_DIR.as_posix())
    log.info("logging the student from %s (sentence-transformers flavor)", student_dir)
    model = SentenceTransformer(str(student_dir), device="cpu")
    info = mlflow.sentence_transformers.log_model(
        model,
        name=MODEL_ARTIFACT_NAME,
        input_example=INPUT_EXAMPLE,
        pip_requirements=_pip_requirements(),
        create_model_card=False,  # passed on to SentenceTransformer.save: our card is logged below instead
    )
    model_id = getattr(info, "model_id", None)
    if model_id is None:
        raise XdistillError("this MLflow has no logged-model ids: the model card cannot be logged with the model")
    with tempfile.TemporaryDirectory(prefix="xdistill-card-") as folder:
        (Path(folder) / CARD_FILE).write_text(card, encoding="utf-8")
        client.log_model_artifacts(model_id, folder, MODEL_DATA_DIR)
    if has_adapter(student_dir):
        # sentence-transformers' save leaves teacher_space/ out (it is no module of the model)
        client.log_model_artifacts(model_id, str(adapter_dir(student_dir)), f"{MODEL_DATA_DIR}/{ADAPTER_DIR}")
        log.info("logged the teacher-space adapter with the student")
    return info.model_uri, model_id


def model_folder(downloaded: str | Path) -> Path:
    """The student's folder inside a downloaded registered model (``mlflow.artifacts.download_artifacts`` of
    ``models:/xdistill-student@champion``): a sentence-transformers folder, ``teacher_space/`` included."""
    return Path(downloaded) / MODEL_DATA_DIR


def _pip_requirements() -> list[str]:
    """Pinned requirements of the logged model (explicit: MLflow's inference imports the model anew)."""
    from importlib.metadata import version

    return [f"{name}=={version(name)}" for name in ("sentence-transformers", "transformers", "torch")]


def unregister(registration: dict[str, str], lock_file: str | None = None) -> list[str]:
    """Delete what one :func:`register_run` created (:func:`read_registration` of ``metrics/register.json``);
    returns what could not be removed (empty: everything was).

    For orchestrators whose later step failed (e.g. the DVC experiment could not be saved):
    a registered version must not outlive the run that produced it. It holds the promotion lock, so no
    promotion moves an alias onto the version meanwhile, and a version that holds one (promoted by hand
    in between) stays: deleting it would delete the alias with it. ``lock_file``: the promotions'
    ``promote.lock_file`` (:func:`~xdistill.registry.store.project_promote_section`), when set.
    """
    tracking_uri = resolve_tracking_uri(registration["tracking_uri"])
    client = client_for(tracking_uri)
    name, version = registration["model_name"], registration["model_version"]
    with promotion_lock(tracking_uri, lock_file):
        try:
            model_version = client.get_model_version(name, version)
        except Exception as exc:  # the caller is handling another failure: report, never raise over it
            return [f"could not read {name} version {version}: {exc}"]
        aliases = list(model_version.aliases or [])
        if aliases:
            return [f"{name} version {version} holds {', '.join(aliases)} (promoted meanwhile): left in place"]
        return discard_registration(client, name, version, registration["run_id"], logged_model_id(model_version))
