"""Loading an exported student with a chosen backend: PyTorch, ONNX fp32 or ONNX int8.

An exported folder (:func:`xdistill.export.writer.export_student`) is a sentence-transformers folder with
the ONNX files where sentence-transformers' ``backend="onnx"`` looks for them (``onnx/model.onnx``,
``onnx/model_qint8_avx512_vnni.onnx``). sentence-transformers 6 loads ONNX through optimum, and no
optimum release installs beside transformers 5 (optimum-onnx 0.1.0 pins transformers < 4.58), so
:func:`load_student` runs the ONNX file itself: :class:`OnnxTransformer` is a sentence-transformers
input module (tokenizer + onnxruntime session) that replaces the folder's first module, and every
later module (Pooling, Dense, Normalize) is the folder's own, loaded by sentence-transformers. The
result is an ordinary ``SentenceTransformer``: ``encode``, prompts and batching are unchanged.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from sentence_transformers.base.modules.input_module import InputModule

from xdistill.errors import InputFileError, XdistillError
from xdistill.export.files import BACKENDS, ONNX_FILES, TORCH_WEIGHT_FILES

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Module
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)

# onnxruntime fusions the sessions turn off: its CPU SkipLayerNormalization kernel is slower than the
# LayerNormalization + Add it replaces (see xdistill.export.onnx.fuse_for_cpu).
DISABLED_ORT_FUSIONS = ["SkipLayerNormFusion"]


def check_backend_files(folder: str | Path, backend: str) -> Path:
    """The weights file ``backend`` needs in ``folder``; a clear error naming what is there instead."""
    folder = Path(folder)
    if backend not in ONNX_FILES:
        raise XdistillError(f"unknown backend {backend!r} (choose from {', '.join(BACKENDS)})")
    for path in _weight_candidates(folder, backend):
        if path.is_file():
            return path
    present = available_backends(folder)
    hint = f"it has weights for: {', '.join(present)}" if present else "it holds no model weights at all"
    expected = ONNX_FILES[backend] or " or ".join(TORCH_WEIGHT_FILES)
    raise XdistillError(f"{folder}: no {expected} for backend '{backend}'; {hint}")


def available_backends(folder: str | Path) -> list[str]:
    """The backends whose weights ``folder`` holds."""
    folder = Path(folder)
    return [backend for backend in BACKENDS if any(p.is_file() for p in _weight_candidates(folder, backend))]


def _weight_candidates(folder: Path, backend: str) -> list[Path]:
    wanted = ONNX_FILES[backend]
    if wanted:
        return [folder / wanted]
    # the transformer's weights sit in its module's folder (the root, or e.g. 0_Transformer/ in old layouts)
    module_dir = folder / _first_module_path(folder)
    return [module_dir / name for name in TORCH_WEIGHT_FILES]


def _first_module_path(folder: Path) -> str:
    modules = folder / "modules.json"
    if not modules.is_file():
        return ""
    entries = _read_json(modules)
    return str(entries[0].get("path", "")) if entries else ""


class OnnxTransformer(InputModule):
    """The transformer of a student as an onnxruntime session: text in, token embeddings out."""

    tokenizer: PreTrainedTokenizerBase  # always a transformers tokenizer (never a bare tokenizers.Tokenizer)

    def __init__(
        self,
        onnx_path: str | Path,
        tokenizer: PreTrainedTokenizerBase,
        max_seq_length: int | None,
        threads: int | None = None,
    ) -> None:
        import onnxruntime as ort

        super().__init__()
        options = ort.SessionOptions()
        # the same thread count as torch's, so backends compare on equal terms
        options.intra_op_num_threads = threads or torch.get_num_threads()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.onnx_path = Path(onnx_path)
        try:
            self.session = ort.InferenceSession(
                str(onnx_path), options, providers=["CPUExecutionProvider"], disabled_optimizers=DISABLED_ORT_FUSIONS
            )
        except _onnx_load_errors() as exc:  # a truncated, empty or overwritten graph: name the file
            problem = _ort_problem(exc, self.onnx_path)
            raise InputFileError(
                self.onnx_path,
                f"onnxruntime cannot load it ({problem}); the file is damaged, truncated or no ONNX graph",
            ) from exc
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.tokenizer = tokenizer
        self._max_seq_length = max_seq_length
        self._dimension = int(self.session.get_outputs()[0].shape[-1])

    @property
    def max_seq_length(self) -> int | None:
        return self._max_seq_length

    @max_seq_length.setter
    def max_seq_length(self, value: int | None) -> None:
        self._max_seq_length = value

    def get_word_embedding_dimension(self) -> int:
        return self._dimension

    def preprocess(self, inputs: Sequence[Any], prompt: str | None = None, **kwargs) -> dict[str, Any]:
        texts = [str(text) for text in inputs]
        if prompt:
            texts = self._prepend_prompt(texts, prompt)
        features = dict(
            self.tokenizer(texts, padding=True, truncation=True, max_length=self._max_seq_length, return_tensors="pt")
        )
        if prompt:
            features["prompt_length"] = self._prompt_length(prompt)
        return features

    def _prompt_length(self, prompt: str) -> int:
        """Tokens of the prompt without its trailing special token (as sentence-transformers counts it)."""
        ids = self.tokenizer(prompt)["input_ids"]
        return len(ids) - (1 if ids and ids[-1] in self.tokenizer.all_special_ids else 0)

    def forward(self, features: dict[str, Any], **kwargs) -> dict[str, Any]:
        feeds = {name: features[name].cpu().numpy().astype(np.int64) for name in self.input_names}
        hidden = self.session.run(None, feeds)[0]
        features["token_embeddings"] = torch.from_numpy(hidden).to(features["input_ids"].device)
        return features

    def save(self, output_path: str, *args, **kwargs) -> None:
        raise XdistillError("an ONNX-backed student is not re-saved; export the PyTorch student with `xdistill export`")


def _onnx_load_errors() -> tuple[type[Exception], ...]:
    """What onnxruntime raises when a session cannot be made from a file: a graph that is no protobuf (truncated,
    empty, overwritten), an invalid or unsupported graph, missing external data. Its own types only (none derives
    from RuntimeError or OSError), so a bug elsewhere still surfaces as itself."""
    from onnxruntime.capi import onnxruntime_pybind11_state as state

    return (
        state.Fail,
        state.InvalidArgument,
        state.InvalidGraph,
        state.InvalidProtobuf,
        state.NoModel,
        state.NoSuchFile,
        state.NotImplemented,
        state.RuntimeException,
    )


def _ort_problem(exc: Exception, path: Path) -> str:
    """onnxruntime's message on one line, without its ``[ONNXRuntimeError] : 7 : INVALID_PROTOBUF :`` prefix
    and without the path (the error names it)."""
    message = " ".join(str(exc).replace(f"Load model from {path} failed:", "").split())
    prefix = re.match(r"\[ONNXRuntimeError\] : \d+ : (\w+) : ", message)
    if prefix:
        message = f"{prefix.group(1).replace('_', ' ').lower()}: {message[prefix.end() :]}"
    return message or type(exc).__name__


def load_student(
    folder: str | Path, backend: str = "torch", device: str | None = None, threads: int | None = None
) -> SentenceTransformer:
    """Load a student folder (exported or not) with ``backend`` (torch, onnx, onnx-int8)."""
    from sentence_transformers import SentenceTransformer

    folder = Path(folder)
    weights = check_backend_files(folder, backend)
    if backend == "torch":
        return SentenceTransformer(
            str(folder),
            device=device,
            local_files_only=True,
            model_kwargs={"dtype": torch.float32} if _on_cpu(device) else None,
        )
    if device not in (None, "cpu"):
        raise XdistillError(f"backend '{backend}' runs on the CPU (onnxruntime); got device {device!r}")
    return _onnx_sentence_transformer(folder, weights, threads)


def _on_cpu(device: str | None) -> bool:
    return device == "cpu" or (device is None and not torch.cuda.is_available())


def _onnx_sentence_transformer(folder: Path, onnx_path: Path, threads: int | None) -> SentenceTransformer:
    from sentence_transformers import SentenceTransformer
    from transformers import AutoTokenizer

    modules_config = _read_json(folder / "modules.json")
    module_classes = _module_classes(folder, modules_config[1:])  # before anything else of the folder is loaded
    bert_config = _read_json(folder / "sentence_bert_config.json", required=False)
    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    first = OnnxTransformer(onnx_path, tokenizer, _max_seq_length(folder, bert_config, tokenizer), threads)
    rest = []
    for entry, module_class in zip(modules_config[1:], module_classes):
        rest.append(module_class.load(str(folder), subfolder=entry["path"], local_files_only=True))
    st_config = _read_json(folder / "config_sentence_transformers.json", required=False)
    log.info("loaded %s with onnxruntime (%s)", folder, onnx_path.name)
    return SentenceTransformer(
        modules=[first, *rest],
        device="cpu",
        prompts=st_config.get("prompts"),
        default_prompt_name=st_config.get("default_prompt_name"),
        similarity_fn_name=st_config.get("similarity_fn_name"),
    )


def _module_classes(folder: Path, entries: list[dict[str, Any]]) -> list[type[Module]]:
    """The classes ``modules.json`` names after the transformer (Pooling, Dense, Normalize, ...), through the
    same gate as sentence-transformers' own loader: a class outside ``sentence_transformers.*`` would run code
    the folder chose, so it is refused, as the PyTorch backend refuses it without ``trust_remote_code``."""
    from sentence_transformers.util.misc import import_module_class

    classes = []
    for entry in entries:
        try:
            found = import_module_class(str(entry["type"]), str(folder), trust_remote_code=False, local_files_only=True)
        except ValueError as exc:
            raise XdistillError(
                f"{folder / 'modules.json'}: names the module class {entry['type']!r}, which is not part of "
                "sentence-transformers; loading it would run code the model folder chose, so it is refused"
            ) from exc
        classes.append(cast("type[Module]", found))
    return classes


def _max_seq_length(folder: Path, bert_config: dict[str, Any], tokenizer: Any) -> int:
    """The token limit the PyTorch backend applies, so a long line is cut where it would be there: the saved
    ``max_seq_length`` (sentence-transformers 6 no longer writes it), else the tokenizer's limit capped at the
    model's position embeddings (an ONNX graph fed more positions than it has fails)."""
    if bert_config.get("max_seq_length"):
        return int(bert_config["max_seq_length"])
    positions = _read_json(folder / "config.json", required=False).get("max_position_embeddings")
    limit = int(tokenizer.model_max_length)
    return min(limit, int(positions)) if positions and positions > 0 else limit


def _read_json(path: Path, required: bool = True) -> Any:
    if not path.is_file():
        if required:
            raise XdistillError(f"{path}: missing (not a sentence-transformers folder)")
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise XdistillError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from exc


def folder_size_mb(folder: str | Path, exclude: Sequence[str] = ()) -> float:
    """Size on disk of every file under ``folder`` (minus the relative paths in ``exclude``), MiB."""
    folder = Path(folder)
    skip = {folder / name for name in exclude}
    total = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and p not in skip)
    return total / 2**20
