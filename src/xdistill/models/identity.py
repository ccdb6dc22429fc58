"""What a model spec's vectors are, for the sidecar of a vector file (:class:`xdistill.vectors.VectorsInfo`).

Computed from the spec and its folder, without loading the model, so ``search`` can refuse an index of another
space before it loads anything.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

from xdistill.errors import XdistillError
from xdistill.vectors import OWN_SPACE, TEACHER_SPACE, VectorsInfo

log = logging.getLogger(__name__)


# The files whose bytes make a model's output: one student saved twice (the folder the train stage wrote, the
# copy the registry serves) differs in its README and configs' version fields, never in these.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".onnx", ".pt")


def weights_digest(folder: Path) -> str:
    """16 hex digits of SHA-256 over the relative name and content hash of every weight file of ``folder``
    (the teacher-space adapter left out: it is a second output, not the model's own)."""
    from xdistill.adapter.model import ADAPTER_DIR
    from xdistill.models.file_hashes import file_hashes
    from xdistill.models.fingerprint import model_files

    files = [
        file
        for file in model_files(folder)
        if file.suffix in WEIGHT_SUFFIXES and file.relative_to(folder).parts[0] != ADAPTER_DIR
    ]
    digest = hashlib.sha256()
    for file, content in zip(files, file_hashes(files)):
        digest.update(f"{file.relative_to(folder).as_posix()}\0{content}\0".encode())
    return digest.hexdigest()[:16]


def model_identity(spec: str) -> str:
    """``<spec>@<16 hex digits of the weights>``; a registered model by its version (``models:/<name>/3@...``),
    not by the alias that named it."""
    from xdistill.models.fingerprint import model_fingerprint
    from xdistill.models.registry_model import pin_version
    from xdistill.models.resolve import resolve_model_dir
    from xdistill.models.sources import is_inference_only

    if is_inference_only(spec):
        return model_fingerprint(spec)
    digest = weights_digest(resolve_model_dir(spec))
    return f"{pin_version(spec)}@{digest}"


def teacher_of(spec: str) -> str:
    """The teacher spec recorded in the teacher-space adapter of ``spec``'s folder (a clear error without one)."""
    from xdistill.adapter.model import CONFIG_FILE, adapter_dir
    from xdistill.models.resolve import resolve_model_dir

    config_path = adapter_dir(resolve_model_dir(spec)) / CONFIG_FILE
    if not config_path.is_file():
        raise XdistillError(f"model '{spec}' has no teacher-space adapter ({config_path} is missing)")
    try:
        return str(json.loads(config_path.read_text(encoding="utf-8")).get("teacher") or "")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError) as exc:
        raise XdistillError(f"{config_path.parent}: not a readable teacher-space adapter ({exc})") from None


def space_identity(spec: str) -> str:
    """The identity of a teacher named in an adapter: its fingerprint where it resolves here, else its spec."""
    if not spec:
        return "unknown teacher"
    try:
        return model_identity(spec)
    except XdistillError as exc:  # the teacher's package is not installed here: compare by spec
        log.debug("teacher %s not resolvable here (%s): compared by its spec", spec, exc)
        return spec


def vectors_info(
    spec: str, dimension: int, teacher_space: bool, rows: int | None = None, backend: str = "torch"
) -> VectorsInfo:
    """The sidecar record of vectors embedded by ``spec`` (through its adapter with ``teacher_space``)."""
    identity = model_identity(spec)
    space_id = space_identity(teacher_of(spec)) if teacher_space else identity
    return VectorsInfo(
        model=spec,
        model_id=identity,
        space=TEACHER_SPACE if teacher_space else OWN_SPACE,
        space_id=space_id,
        dimension=dimension,
        normalised=True,
        rows=rows,
        backend=backend,
    )
