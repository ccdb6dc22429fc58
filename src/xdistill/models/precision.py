"""The number format an encoding model runs in: ``fp32`` (the default), ``fp16`` or ``bf16``.

``teacher_embed.precision`` and ``evaluate.precision`` choose it. Half precision is a GPU lever: on
a CUDA device the model's weights are cast (``fp16``: ``model.half()``, ``bf16``: ``torch.bfloat16``)
and every forward pass runs in that format; the vectors handed back are float32 either way. On a CPU
a half format is refused rather than ignored: it would be emulated (slower) and would change the
vectors without anyone asking for a GPU.

``fp32`` on a GPU is exact float32: nothing here enables TF32 matrix products
(``torch.backends.cuda.matmul.allow_tf32`` stays at torch's default, off), so fp32 vectors from a GPU
match the CPU's to float32 rounding, and a store or an evaluation written in fp32 means fp32.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from xdistill.errors import XdistillError

if TYPE_CHECKING:
    import torch

PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "bf16")
DEFAULT_PRECISION = "fp32"

ModelT = TypeVar("ModelT", bound="torch.nn.Module")


def check_precision(value: object, setting: str) -> str:
    """``value`` when it is one of :data:`PRECISIONS`; else a clear error naming ``setting``."""
    if value not in PRECISIONS:
        raise XdistillError(f"params {setting}: unknown precision {value!r}; choose one of {', '.join(PRECISIONS)}")
    return str(value)


def check_device(value: str, setting: str) -> str:
    """``value`` when torch reads it as a device (``cpu``, ``cuda``, ``cuda:1``, ...); else a clear error naming
    ``setting``, before any data is read."""
    import torch

    try:
        torch.device(value)
    except (RuntimeError, ValueError, TypeError):
        raise XdistillError(f"params {setting}: unknown device {value!r}; use cpu, cuda or cuda:<index>") from None
    return value


def require_gpu_for_half(precision: str, device: object, setting: str) -> None:
    """Refuse a half ``precision`` on anything but a CUDA ``device`` (a string or a ``torch.device``)."""
    device_type = str(getattr(device, "type", device)).split(":", 1)[0]
    if precision != DEFAULT_PRECISION and device_type != "cuda":
        raise XdistillError(
            f"params {setting}: {precision} runs on a GPU only, and this model runs on {device}; "
            f"set {setting}: fp32 on a CPU (half precision there would be emulated, slower, and change the vectors)"
        )


def torch_dtype(precision: str) -> torch.dtype:
    """The torch dtype of a precision name."""
    import torch

    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[
        check_precision(precision, "precision")
    ]


def cast_for_inference(model: ModelT, precision: str, setting: str) -> ModelT:
    """``model`` (already on its device) in ``precision``; refused off a GPU for a half format (see module doc)."""
    check_precision(precision, setting)
    if precision == DEFAULT_PRECISION:
        return model
    device = next((p.device for p in model.parameters()), "cpu")
    require_gpu_for_half(precision, device, setting)
    return model.to(torch_dtype(precision))
