"""The layout of an exported student folder: where each backend's weights live, and the report file.

Shared by the writer (:mod:`xdistill.export.writer`) and the loader (:mod:`xdistill.export.runtime`).
"""

from __future__ import annotations

ONNX_FILE = "onnx/model.onnx"
ONNX_INT8_FILE = "onnx/model_qint8_avx512_vnni.onnx"
# backend -> ONNX file inside the folder (sentence-transformers' names; None = PyTorch weights)
ONNX_FILES: dict[str, str | None] = {
    "torch": None,
    "onnx": ONNX_FILE,
    "onnx-int8": ONNX_INT8_FILE,
}
BACKENDS = tuple(ONNX_FILES)
TORCH_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
REPORT_FILE = "export.json"
