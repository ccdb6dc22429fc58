"""The student's transformer as an ONNX graph (fp32) and its dynamic int8 quantisation.

The graph is the Hugging Face backbone alone, with optimum's feature-extraction interface (inputs
``input_ids`` and ``attention_mask`` (+ ``token_type_ids`` when the tokenizer makes them), output
``last_hidden_state``, batch and sequence axes dynamic): pooling, the Dense head and normalisation
stay sentence-transformers modules, exactly as with sentence-transformers' own ONNX backend.

Export uses torch's ``torch.export``-based exporter (``dynamo=True``, needs onnxscript): the legacy
TorchScript tracer bakes transformers 5's attention-mask arithmetic in as constants of the example
input's length (measured: hidden states off by up to 0.6 on other lengths). Quantisation is
onnxruntime's own ``quantize_dynamic``: 7-bit int8 weights per output channel for the weight
MatMuls except the feed-forward output projections (see :func:`quantize_int8`), activations
quantised at run time (AVX512-VNNI runs the int8 dot products natively).
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from xdistill.errors import XdistillError

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

log = logging.getLogger(__name__)

OPSET = 18
EXAMPLE_TEXTS = ["query: A man is playing a guitar.", "query: Ein Mann spielt Gitarre, und eine Frau singt dazu."]


class _HiddenStates(nn.Module):
    """The backbone with positional inputs and the last hidden state as the only output."""

    def __init__(self, backbone: nn.Module, input_names: list[str]) -> None:
        super().__init__()
        self.backbone = backbone
        self.input_names = input_names

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.backbone(**dict(zip(self.input_names, inputs))).last_hidden_state


def model_input_names(model: SentenceTransformer) -> list[str]:
    """What the tokenizer feeds the backbone (``input_ids``, ``attention_mask``[, ``token_type_ids``])."""
    names = list(model.tokenizer("example").keys())
    unknown = set(names) - {"input_ids", "attention_mask", "token_type_ids"}
    if unknown or "input_ids" not in names:
        raise XdistillError(f"cannot export a transformer with inputs {names}")
    return names


def export_onnx(model: SentenceTransformer, path: str | Path) -> Path:
    """Write ``model``'s transformer (fp32, eval mode, CPU) as a single-file ONNX graph at ``path``."""
    from xdistill.models.backbone import transformer_backbone

    path = Path(path)
    backbone = transformer_backbone(model).float().eval().cpu()
    names = model_input_names(model)
    example = model.tokenizer(EXAMPLE_TEXTS, padding=True, return_tensors="pt")
    args = tuple(example[name] for name in names)
    batch = torch.export.Dim("batch_size")
    sequence = torch.export.Dim("sequence_length", max=_max_positions(backbone))
    dynamic = tuple({0: batch, 1: sequence} for _ in names)
    log.info("exporting the transformer to ONNX (torch.export; a few minutes for 12 layers on 2 cores)")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(_HiddenStates(backbone, names), args, dynamo=True, input_names=names,
                                    output_names=["last_hidden_state"], dynamic_shapes=(dynamic,),
                                    opset_version=OPSET, external_data=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    program.save(str(path), external_data=False)
    return path


def _max_positions(backbone: nn.Module) -> int:
    return int(getattr(backbone.config, "max_position_embeddings", 512) or 512)


def quantize_int8(source: str | Path, target: str | Path) -> Path:
    """Dynamic int8 quantisation of an ONNX graph (onnxruntime): int8 MatMul weights per channel.

    The MatMuls that narrow the width (the feed-forward output projections, 1536 -> 384 in mE5-small)
    stay fp32: their input is the GELU output, whose outlier activations ruin an 8-bit activation
    scale. Measured on the 384-d mE5 student, min cosine to fp32 over the export check sample:
    0.946 with every MatMul quantised, 0.991 with these kept (per-tensor weights: 0.917).

    Weights use 7 of the 8 bits (``reduce_range``): without VNNI (AVX2 only, like the 2-core AMD
    machines here) onnxruntime multiplies u8 activations by s8 weights with ``vpmaddubsw``, whose
    16-bit pair sums saturate on full-range weights. Measured on the one-layer test student on such
    a machine, min cosine to fp32: 0.959 with 8-bit weights, 0.9997 with 7-bit.
    """
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    target = Path(target)
    quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8, per_channel=True,
                     reduce_range=True, op_types_to_quantize=["MatMul"],
                     nodes_to_exclude=narrowing_matmuls(onnx.load(str(source), load_external_data=False)))
    return target


def narrowing_matmuls(graph_model) -> list[str]:
    """Names of the MatMul nodes whose weight maps a wider input to a narrower output."""
    shapes = {init.name: tuple(init.dims) for init in graph_model.graph.initializer}
    return [node.name for node in graph_model.graph.node
            if node.op_type == "MatMul" and len(shapes.get(node.input[1], ())) == 2
            and shapes[node.input[1]][0] > shapes[node.input[1]][1]]
