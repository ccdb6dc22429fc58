"""The student's transformer as an ONNX graph (fp32, fused for CPU) and its dynamic int8 quantisation.

The graph is the Hugging Face backbone alone, with optimum's feature-extraction interface (inputs
``input_ids`` and ``attention_mask`` (+ ``token_type_ids`` when the tokenizer makes them), output
``last_hidden_state``, batch and sequence axes dynamic): pooling, the Dense head and normalisation
stay sentence-transformers modules, exactly as with sentence-transformers' own ONNX backend.

Export uses torch's ``torch.export``-based exporter (``dynamo=True``, needs onnxscript): the legacy
TorchScript tracer bakes transformers 5's attention-mask arithmetic in as constants of the example
input's length (measured: hidden states off by up to 0.6 on other lengths). The exported graph is then
fused for onnxruntime's CPU kernels (:func:`fuse_for_cpu`, onnxscript's rewriter) and quantised with
onnxruntime's own ``quantize_dynamic`` (:func:`quantize_int8`): int8 weights per output channel for
the weight MatMuls, activations quantised at run time (AVX512-VNNI runs the int8 dot products natively).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from xdistill.errors import XdistillError

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

log = logging.getLogger(__name__)

OPSET = 18
# A narrowing MatMul stays fp32 in the int8 graph when its input spans more than this many times the
# median span of the narrowing MatMuls' inputs (see quantize_int8).
OUTLIER_RANGE_FACTOR = 2.0
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
        program = torch.onnx.export(
            _HiddenStates(backbone, names),
            args,
            dynamo=True,
            input_names=names,
            output_names=["last_hidden_state"],
            dynamic_shapes=(dynamic,),
            opset_version=OPSET,
            external_data=False,
        )
    assert program is not None  # dynamo=True always returns the ONNXProgram
    path.parent.mkdir(parents=True, exist_ok=True)
    program.save(str(path), external_data=False)
    return path


def _max_positions(backbone: nn.Module) -> int:
    return int(getattr(backbone.config, "max_position_embeddings", 512) or 512)


def fuse_for_cpu(path: str | Path) -> dict[str, int]:
    """Rewrite the ONNX graph at ``path`` with onnxruntime's fused CPU operators; the fusion counts.

    Fused: erf-GELU + bias (``BiasGelu``) and scaled-dot-product attention with its Q/K/V biases
    (``MultiHeadAttention``). Deliberately not fused, though onnxscript offers both:

    * the packed-QKV ``Attention`` operator: ``quantize_dynamic`` leaves it fp32 (its weight is a
      Concat the default constant folding leaves to run time, and onnxruntime 1.32's quantiser skips
      any ``Attention`` with ``qkv_hidden_sizes``, which this fusion sets), and its int8 form
      (``QAttention``) has no input for the additive attention mask this graph uses; separate Q/K/V
      MatMuls are quantised like the others;
    * ``SkipLayerNormalization``: onnxruntime's CPU kernel for it is slower than ``LayerNormalization``
      plus ``Add`` (measured on the 12-layer 384-d student, 1024 sentences, 2 threads: 2.18 s without,
      2.73 s with it); the loader also turns off onnxruntime's own fusion of it
      (:data:`xdistill.export.runtime.DISABLED_ORT_FUSIONS`).
    """
    import onnx_ir as ir
    from onnx_ir.passes.common import ShapeInferencePass
    from onnxscript.optimizer import optimize
    from onnxscript.rewriter.ort_fusions import shape_optimization
    from onnxscript.rewriter.ort_fusions.bias_gelu import fuse_bias_gelu
    from onnxscript.rewriter.ort_fusions.erfgelu import fuse_erfgelu
    from onnxscript.rewriter.ort_fusions.mha import fuse_mha1, fuse_mha2
    from onnxscript.rewriter.ort_fusions.mha_bias import fuse_mha_bias
    from onnxscript.rewriter.ort_fusions.mha_scale import fuse_mha_scale
    from onnxscript.rewriter.ort_fusions.sdpa import fuse_sdpa

    model = ir.load(str(path))
    ShapeInferencePass()(model)
    optimize(model)
    shape_optimization.rules.apply_to_model(model)  # the shape arithmetic the attention patterns look through
    optimize(model)
    counts = {"erf_gelu": fuse_erfgelu(model), "sdpa": fuse_sdpa(model, apply_shape_inference=True)}
    for name, fuse in (
        ("mha1", fuse_mha1),
        ("mha2", fuse_mha2),
        ("mha_scale", fuse_mha_scale),
        ("mha_bias", fuse_mha_bias),
        ("bias_gelu", fuse_bias_gelu),
    ):
        counts[name] = fuse(model)
    optimize(model)
    ir.save(model, str(path))
    return counts


def quantize_int8(source: str | Path, target: str | Path, calibration: Mapping[str, np.ndarray]) -> list[str]:
    """Dynamic int8 quantisation of an ONNX graph (onnxruntime); the MatMuls kept in fp32.

    Every weight MatMul gets int8 weights per output channel except the narrowing ones (the
    feed-forward output projections, 1536 -> 384 in mE5-small) whose input has outlier activations
    on the ``calibration`` feeds (:func:`outlier_matmuls`): an 8-bit activation scale per tensor
    spans the outliers and rounds the rest away. Measured on the 12-layer 384-d student (full
    vocabulary; points against its fp32 self on STS17 / Tatoeba): its GELU outputs reach 70 in layer
    4 and 31-33 in layers 0 and 5, 4-14 elsewhere; every MatMul int8: -1.3 / -0.7; those three kept
    fp32: -0.5 / -0.4; all twelve kept fp32: -0.4 / -0.3 at 2.5x instead of 3.1x the PyTorch
    student's speed (measured with SkipLayerNormalization still fused; BENCHMARKS.md has the export's).

    Weights use 7 of the 8 bits (``reduce_range``): without VNNI (AVX2 only, like the 2-core AMD
    machines here) onnxruntime multiplies u8 activations by s8 weights with ``vpmaddubsw``, whose
    16-bit pair sums saturate on full-range weights. Measured on the one-layer test student on such
    a machine, min cosine to fp32: 0.959 with 8-bit weights, 0.9997 with 7-bit.
    """
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    target = Path(target)
    graph_model = onnx.load(str(source), load_external_data=False)
    kept = outlier_matmuls(activation_ranges(graph_model, narrowing_matmuls(graph_model), calibration))
    quantize_dynamic(
        str(source),
        str(target),
        weight_type=QuantType.QInt8,
        per_channel=True,
        reduce_range=True,
        op_types_to_quantize=["MatMul"],
        nodes_to_exclude=kept,
    )
    return kept


def outlier_matmuls(ranges: Mapping[str, float]) -> list[str]:
    """The MatMuls whose input range exceeds :data:`OUTLIER_RANGE_FACTOR` times the median of ``ranges``."""
    if not ranges:
        return []
    median = float(np.median(list(ranges.values())))
    return [name for name, span in ranges.items() if span > OUTLIER_RANGE_FACTOR * median]


def activation_ranges(graph_model, matmuls: Sequence[str], feeds: Mapping[str, np.ndarray]) -> dict[str, float]:
    """``max - min`` of each named MatMul's activation input over the real tokens of ``feeds``."""
    import onnx
    import onnxruntime as ort

    nodes = {node.name: node for node in graph_model.graph.node}
    inputs = {name: nodes[name].input[0] for name in matmuls}
    probe = onnx.ModelProto()
    probe.CopyFrom(graph_model)
    del probe.graph.output[:]
    probe.graph.output.extend(
        onnx.helper.make_tensor_value_info(tensor, onnx.TensorProto.FLOAT, None)
        for tensor in dict.fromkeys(inputs.values())
    )
    session = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    wanted = [value.name for value in probe.graph.output]
    values = dict(zip(wanted, session.run(wanted, {i.name: feeds[i.name] for i in session.get_inputs()})))
    real = np.asarray(feeds["attention_mask"]).astype(bool)
    return {name: float(np.ptp(values[tensor][real])) for name, tensor in inputs.items()}


def narrowing_matmuls(graph_model) -> list[str]:
    """Names of the MatMul nodes whose weight maps a wider input to a narrower output."""
    shapes = {init.name: tuple(init.dims) for init in graph_model.graph.initializer}
    return [
        node.name
        for node in graph_model.graph.node
        if node.op_type == "MatMul"
        and len(shapes.get(node.input[1], ())) == 2
        and shapes[node.input[1]][0] > shapes[node.input[1]][1]
    ]
