"""The teacher-space adapter: a second output of a student, its embeddings mapped into the teacher's space.

Why a second output: a student chosen for its own cosines (WiSE-FT keeps most of the untrained student's
geometry, which is what beats the untrained student on STS, retrieval and mining) lives only partly in the
teacher's space, and no rotation changes that. A user who indexed English text with the
teacher needs query vectors in the teacher's space. The adapter is a small map applied after the
student (``normalize(A e + b + W2 gelu(W1 e))``, ``e`` the student's embedding), fitted on
training pairs so that both sides land on the teacher's vector of the source; the student's own
embeddings stay exactly as they are.

This module owns the adapter's file format: ``teacher_space/`` inside the student folder, holding
``config.json`` (dimensions, the teacher spec, the fit's report) and ``model.safetensors``.
sentence-transformers ignores the folder (it is not in ``modules.json``), so the student loads as
before; ``xdistill encode/search --teacher-space`` and the evaluate stage use it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from xdistill.errors import XdistillError
from xdistill.io import atomic_path, write_json_atomic

if TYPE_CHECKING:
    from xdistill.models.encoders import Encoder

ADAPTER_DIR = "teacher_space"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
# key of the fit report: content digest of the student an adapter saved outside its folder was fitted on
STUDENT_DIGEST = "student_digest"


class TeacherSpaceAdapter(nn.Module):
    """``normalize(A x + b + W2 gelu(W1 x))``: a linear map to the teacher's dimension plus a non-linear
    correction (the student's and the teacher's spaces are not linearly related once the student
    keeps the untrained student's geometry)."""

    def __init__(self, dim_in: int, dim_out: int, hidden: int, teacher: str = "") -> None:
        super().__init__()
        self.dim_in, self.dim_out, self.hidden = dim_in, dim_out, hidden
        self.teacher = teacher  # the spec of the teacher whose space the adapter maps into
        self.linear = nn.Linear(dim_in, dim_out)
        self.correction = nn.Sequential(nn.Linear(dim_in, hidden), nn.GELU(), nn.Linear(hidden, dim_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.linear(x) + self.correction(x), dim=-1)

    @torch.no_grad()
    def map(self, vectors: np.ndarray, batch_rows: int = 8192) -> np.ndarray:
        """float32 rows of student embeddings -> float32, L2-normalised teacher-space rows."""
        self.eval()
        parts = [
            self(torch.from_numpy(np.ascontiguousarray(vectors[i : i + batch_rows], dtype=np.float32)))
            for i in range(0, len(vectors), batch_rows)
        ]
        if not parts:
            return np.zeros((0, self.dim_out), dtype=np.float32)
        return torch.cat(parts).numpy()


def adapter_dir(student_dir: str | Path) -> Path:
    return Path(student_dir) / ADAPTER_DIR


def save_adapter(adapter: TeacherSpaceAdapter, student_dir: str | Path, report: dict[str, Any]) -> Path:
    """Write ``teacher_space/`` into ``student_dir`` atomically (replaces an older adapter)."""
    from safetensors.torch import save_file

    folder = adapter_dir(student_dir)
    with atomic_path(folder, is_dir=True) as tmp:
        weights = {k: v.detach().contiguous().float() for k, v in adapter.state_dict().items()}
        save_file(weights, str(tmp / WEIGHTS_FILE))
        write_json_atomic(
            tmp / CONFIG_FILE,
            {
                "dim_in": adapter.dim_in,
                "dim_out": adapter.dim_out,
                "hidden": adapter.hidden,
                "teacher": adapter.teacher,
                "fit": report,
            },
        )
    return folder


def has_adapter(student_dir: str | Path) -> bool:
    return (adapter_dir(student_dir) / CONFIG_FILE).is_file()


def load_adapter(student_dir: str | Path) -> tuple[TeacherSpaceAdapter, dict[str, Any]]:
    """The adapter saved in ``student_dir`` and its config; a clear error where there is none."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    folder = adapter_dir(student_dir)
    config_path = folder / CONFIG_FILE
    if not config_path.is_file():
        raise XdistillError(
            f"{student_dir} has no teacher-space adapter ({config_path} is missing): train it with "
            "train.teacher_adapter, or encode without --teacher-space"
        )
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
        adapter = TeacherSpaceAdapter(
            int(config["dim_in"]), int(config["dim_out"]), int(config["hidden"]), str(config.get("teacher", ""))
        )
        adapter.load_state_dict(load_file(str(folder / WEIGHTS_FILE)))
    except (OSError, ValueError, KeyError, TypeError, RuntimeError, SafetensorError) as exc:
        raise XdistillError(f"{folder}: not a readable teacher-space adapter ({exc})") from exc
    return adapter.eval(), config


def load_encoder_with_adapter(
    spec: str,
    device: str | None = None,
    backend: str = "torch",
    teacher_space: bool = False,
    adapter_from: str | Path | None = None,
) -> Any:
    """:func:`xdistill.models.load_encoder`, plus the student's adapter where its folder has one.

    The encoder carries the adapter as ``encoder.teacher_adapter`` (None without one), which the
    evaluate stage scores; ``teacher_space=True`` returns the encoder whose vectors are the
    adapter's, and fails clearly for a model without one. ``adapter_from``: a folder holding the
    adapter's ``teacher_space/`` instead of the model's own (the ``start_adapter`` stage writes
    the starting student's there). (A separate loader, so that the stages that only embed with a
    model, teacher_embed for one, do not depend on this module.)
    """
    from xdistill.models.encoders import load_encoder
    from xdistill.models.resolve import resolve_model_dir
    from xdistill.models.sources import is_inference_only

    encoder = load_encoder(spec, device=device, backend=backend)
    model_dir = None if is_inference_only(spec) else resolve_model_dir(spec)
    folder = Path(adapter_from) if adapter_from is not None else model_dir
    adapter = None
    if folder is not None and (teacher_space or has_adapter(folder)):
        adapter, config = load_adapter(folder)
        if adapter_from is not None:
            _check_fitted_on(folder, config, spec, model_dir)
    if teacher_space and adapter is None:
        raise XdistillError(f"model '{spec}' has no teacher-space adapter")
    # an attribute outside the Encoder protocol (evaluation reads it with getattr): set by name
    setattr(encoder, "teacher_adapter", adapter)  # noqa: B010
    if not teacher_space:
        return encoder
    assert adapter is not None  # raised above for teacher_space without an adapter
    return TeacherSpaceEncoder(encoder, adapter)


def _check_fitted_on(adapter_folder: Path, config: dict[str, Any], spec: str, model_dir: Path | None) -> None:
    """An adapter kept outside its student's folder must have been fitted on that very student: a stale one
    (the student retrained, the adapter not refitted) would give wrong teacher-space scores silently."""
    from xdistill.models.fingerprint import folder_digest

    fitted_on = (config.get("fit") or {}).get(STUDENT_DIGEST)
    if model_dir is None or fitted_on != folder_digest(model_dir):
        raise XdistillError(
            f"{adapter_folder}: teacher-space adapter fitted on another student than '{spec}' "
            "(refit it: xdistill start-adapter, or dvc repro)"
        )


class TeacherSpaceEncoder:
    """An :class:`~xdistill.models.encoders.Encoder` whose vectors are the adapter's map of another's."""

    def __init__(self, encoder: Encoder, adapter: TeacherSpaceAdapter) -> None:
        if adapter.dim_in != encoder.dimension:
            raise XdistillError(
                f"teacher-space adapter expects {adapter.dim_in}-d embeddings, "
                f"{encoder.spec} gives {encoder.dimension}-d"
            )
        self.encoder = encoder
        self.adapter = adapter
        self.spec = f"{encoder.spec} (teacher space: {adapter.teacher})"
        self.dimension = adapter.dim_out

    def encode(self, texts: Sequence[str], batch_size: int = 64, show_progress_bar: bool = False) -> np.ndarray:
        return self.adapter.map(self.encoder.encode(texts, batch_size=batch_size, show_progress_bar=show_progress_bar))
