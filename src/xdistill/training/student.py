"""Student encoders for distillation: any resolvable encoder, optionally made thinner.

A student is an ordinary :class:`~sentence_transformers.SentenceTransformer` built from a model
spec (``pypi:multilingual-e5-small``, a local folder, a hub id) with optional changes:

- keep only ``keep_layers`` transformer layers (a shallower, faster student): the first k, or k
  spread evenly over the stack and ending with the last layer (``layer_selection: spread``, the
  way DistilBERT initialised its 6 layers from every other of BERT's 12);
- freeze the word-embedding table (for mE5 that is 96M of its 117M parameters: training is
  ~2-3x faster and the vocabulary of languages absent from the training data is not damaged);
- freeze the embedding block and the lowest ``freeze_layers`` transformer layers (backward stops
  at the first trainable layer, so a step is cheaper, and the untrained student's lower layers, which
  carry most of its cross-lingual alignment, are kept as they are);
- with those layers frozen, compute their output once per training text and train on it
  (``cache_frozen``, :mod:`xdistill.training.frozen_cache`): each step runs only the upper layers;
- train low-rank adapters (``lora``, via peft) instead of the full weights; they are merged into
  the weights before export, so the saved folder is an ordinary model;
- trim the vocabulary (``vocabulary: corpus``): tokenizer and word-embedding table reduced to the
  pieces the pipeline's corpus uses (:mod:`xdistill.models.vocabulary`; mE5: 117M -> ~37M parameters);
- add an output :class:`Dense` layer to ``output_dim`` (LEALLA-style low-dimensional students),
  placed after pooling and before any ``Normalize`` so exported embeddings stay unit length.

Because every change is a real sentence-transformers module, :func:`save_student` writes a
folder that ``SentenceTransformer(path)`` loads as is; the feature-distillation projection lives
in the loss, not in the student, so it is never exported.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import torch
from pydantic import Field
from sentence_transformers import SentenceTransformer
from torch import nn

from xdistill.config import SECTION_CONFIG, Count, NonNegativeInt, PositiveFloat, parse_section
from xdistill.errors import XdistillError
from xdistill.io import atomic_path
from xdistill.models.backbone import transformer_backbone
from xdistill.models.vocabulary import (
    DEFAULT_PARALLEL_FILES,
    DEFAULT_RAW_DIR,
    VOCABULARY_OPTIONS,
    apply_vocabulary_option,
)

if TYPE_CHECKING:
    from sentence_transformers.base.modules.dense import Dense

logger = logging.getLogger(__name__)

HEAD_FITS = ("procrustes", "least_squares", "pca")
LAYER_SELECTIONS = ("first", "spread")


DropoutRate = Annotated[float, Field(ge=0, lt=1)]  # a dropout of 1 would drop every activation


@dataclass(frozen=True)
class LoraSettings:
    """``train.student.lora``: low-rank adapters (Hu et al. 2021) through peft."""

    __pydantic_config__ = SECTION_CONFIG

    rank: Count = 16
    alpha: PositiveFloat = 32.0
    dropout: DropoutRate = 0.0


@dataclass(frozen=True)
class StudentConfig:
    """How to build the student from the untrained student (``train.student`` in params.yaml)."""

    __pydantic_config__ = SECTION_CONFIG

    spec: str
    keep_layers: Count | None = None
    # Which layers keep_layers keeps: "first" (layers 1..k) or "spread" (k layers evenly spaced,
    # the last one included, so the kept stack still ends with the layer that shaped the untrained student
    # model's output space).
    layer_selection: str = "first"
    freeze_word_embeddings: bool = True
    output_dim: Count | None = None
    max_seq_length: int = 128
    # None keeps the untrained student's dropout; 0.0 makes training deterministic across process counts.
    dropout: DropoutRate | None = None
    # Start the Dense head in the teacher's space (see trainer.align_head_to_teacher): with
    # output_dim null the head maps to the teacher's dimension and starts as the orthogonal
    # Procrustes map onto the teacher; with a smaller output_dim it starts as the student's top
    # principal axes (and the feature-distillation projection as a least-squares fit).
    align_to_teacher: bool = False
    # How the head is fitted (align_to_teacher with a head of the teacher's dimension):
    # "procrustes" (orthogonal: keeps every cosine of the untrained student) or "least_squares"
    # (affine ridge regression onto the teacher: also removes the untrained student's common direction,
    # which the teacher's space does not have) or "pca" (a frozen head onto the teacher's top
    # principal axes: the student learns the teacher reduced by PCA to its own dimension, and the
    # head maps it back; see xdistill.training.alignment).
    head_fit: str = "procrustes"
    # Freeze the embedding block and the first k transformer layers (0: only what
    # freeze_word_embeddings says).
    freeze_layers: NonNegativeInt = 0
    # Compute the frozen block's output (embeddings and the first freeze_layers layers, without dropout) once per
    # training text and run each step from it through the upper layers only (xdistill.training.frozen_cache).
    cache_frozen: bool = False
    # Low-rank adapters instead of full fine-tuning, e.g. {rank: 16, alpha: 32, dropout: 0.0};
    # null = off. Adapters go on the attention and feed-forward projections of the unfrozen layers.
    lora: LoraSettings | None = None

    # None: the full vocabulary; "corpus": trim tokenizer and word embeddings to the pieces the
    # pipeline's corpus uses (xdistill.models.vocabulary).
    vocabulary: str | None = None

    @classmethod
    def from_params(cls, spec: str, section: dict[str, Any] | None, max_seq_length: int) -> StudentConfig:
        return parse_section(cls, section, "train.student", spec=spec, max_seq_length=max_seq_length)

    def __post_init__(self) -> None:
        if self.head_fit not in HEAD_FITS:
            raise XdistillError(
                f"params train.student.head_fit must be one of {list(HEAD_FITS)}, got {self.head_fit!r}"
            )
        if self.head_fit == "pca" and self.output_dim is not None:
            raise XdistillError(
                "params train.student.head_fit 'pca' fixes a head of the teacher's dimension: "
                f"leave output_dim null (got {self.output_dim})"
            )
        if self.layer_selection not in LAYER_SELECTIONS:
            raise XdistillError(
                f"params train.student.layer_selection must be one of {list(LAYER_SELECTIONS)}, "
                f"got {self.layer_selection!r}"
            )
        if self.cache_frozen and self.freeze_layers < 1:
            raise XdistillError(
                "params train.student.cache_frozen caches the frozen layers' output: set "
                f"train.student.freeze_layers >= 1 (got {self.freeze_layers})"
            )
        if self.vocabulary is not None and self.vocabulary not in VOCABULARY_OPTIONS:
            raise XdistillError(
                f"params train.student.vocabulary must be null or one of {list(VOCABULARY_OPTIONS)}, "
                f"got {self.vocabulary!r}"
            )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def head_dimension(config: StudentConfig, base_dim: int, teacher_dim: int | None) -> int | None:
    """The output dimension of the student's Dense head, or None when it has none.

    ``output_dim`` when set; else, for ``align_to_teacher``, the teacher's dimension (a 384-d mE5
    student of a 768-d mpnet teacher gets a 384 -> 768 head, so MSE applies directly).
    """
    if config.output_dim is not None:
        if (
            config.align_to_teacher
            and teacher_dim
            and config.output_dim != teacher_dim
            and config.output_dim >= base_dim
        ):
            raise XdistillError(
                f"train.student: align_to_teacher needs output_dim null, the teacher's dimension "
                f"({teacher_dim}) or a dimension below the student's ({base_dim}); got {config.output_dim}"
            )
        return config.output_dim
    if config.align_to_teacher:
        return teacher_dim or base_dim
    return None


def check_length_fits(max_seq_length: int, model: SentenceTransformer, spec: str) -> None:
    """Refuse a ``train.max_seq_length`` beyond the positions the untrained student has: the tokenizer would
    hand the model position ids it has no embedding for (an index error deep in a forward pass)."""
    limit = model.max_seq_length
    if limit is not None and max_seq_length > limit:
        raise XdistillError(
            f"params train.max_seq_length is {max_seq_length}, but the student {spec} reads at most {limit} tokens"
        )


def build_student(
    config: StudentConfig,
    device: str | torch.device = "cpu",
    seed: int = 0,
    teacher_dim: int | None = None,
    parallel_files: Sequence[str | Path] = DEFAULT_PARALLEL_FILES,
    raw_dir: str | Path | None = DEFAULT_RAW_DIR,
) -> SentenceTransformer:
    """Load the untrained student and apply the configured changes. Deterministic for a given ``seed``.

    ``teacher_dim`` sizes the Dense head of an ``align_to_teacher`` student with no ``output_dim``;
    ``parallel_files`` and ``raw_dir`` are the texts a ``vocabulary: corpus`` student keeps the pieces of.
    """
    from xdistill.models import load_sentence_transformer

    # model.max_seq_length (the tokenizer's limit) stays the untrained student's: the trainer truncates
    # its own training inputs to config.max_seq_length, and the exported student must embed whole
    # inputs up to the untrained student's limit.
    model = load_sentence_transformer(config.spec)
    check_length_fits(config.max_seq_length, model, config.spec)
    if config.keep_layers is not None:
        keep_layers(model, config.keep_layers, config.layer_selection)
    if config.dropout is not None:
        set_dropout(model, config.dropout)
    apply_vocabulary_option(model, config.vocabulary, parallel_files, raw_dir)
    if config.freeze_word_embeddings:
        freeze_word_embeddings(model)
    if config.freeze_layers:
        freeze_lower_layers(model, config.freeze_layers)
    if config.lora is not None:
        add_lora_adapters(model, config.lora, config.freeze_layers)
    base_dim = model.get_embedding_dimension()
    assert base_dim is not None  # the untrained student ends in Pooling, which fixes its dimension
    head_dim = head_dimension(config, base_dim, teacher_dim)
    if head_dim is not None:
        # The Dense head's random init must not depend on what ran before in the process
        # (an align_to_teacher head is then set by the trainer).
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            add_output_dense(model, head_dim)
        if config.align_to_teacher and config.head_fit == "pca":
            freeze_output_dense(model)
    return model.to(device)


def layer_stack(backbone: nn.Module) -> tuple[nn.Module, str, nn.ModuleList]:
    """Find the ModuleList of transformer layers (BERT/XLM-R/MPNet ``encoder.layer``, DistilBERT
    ``transformer.layer``)."""
    n_layers = getattr(backbone.config, "num_hidden_layers", None) or getattr(backbone.config, "n_layers", None)
    for _, module in backbone.named_modules():
        for child_name, child in module.named_children():
            if isinstance(child, nn.ModuleList) and len(child) == n_layers:
                return module, child_name, child
    raise XdistillError(f"cannot find the {n_layers} transformer layers of {type(backbone).__name__}")


def kept_layer_indices(n_layers: int, k: int, selection: str = "first") -> list[int]:
    """The 0-based indices of the ``k`` layers of an ``n_layers`` stack that ``selection`` keeps.

    ``first``: 0..k-1. ``spread``: evenly spaced and ending with the last layer (12 -> 6 keeps
    1, 3, 5, 7, 9, 11; 12 -> 4 keeps 2, 5, 8, 11).
    """
    if not 1 <= k <= n_layers:
        raise XdistillError(f"train.student.keep_layers={k}: the untrained student has {n_layers} layers")
    if selection == "first":
        return list(range(k))
    return [round((i + 1) * n_layers / k) - 1 for i in range(k)]


def keep_layers(model: SentenceTransformer, k: int, selection: str = "first") -> None:
    """Keep ``k`` transformer layers chosen by ``selection`` (updates the saved config too)."""
    backbone = transformer_backbone(model)
    parent, attr, layers = layer_stack(backbone)
    indices = kept_layer_indices(len(layers), k, selection)
    kept = [layers[i] for i in indices]
    # Attention modules know their position for key/value caches; renumber them to the new stack.
    for position, layer in enumerate(kept):
        for module in layer.modules():
            if getattr(module, "layer_idx", None) is not None:
                # torch annotates Module.__setattr__ for tensors and modules only; a plain int is stored as is
                module.layer_idx = position  # type: ignore[assignment]
    setattr(parent, attr, nn.ModuleList(kept))
    for key in ("num_hidden_layers", "n_layers"):
        if hasattr(backbone.config, key):
            setattr(backbone.config, key, k)
    logger.info("student: kept layers %s of %d", indices, len(layers))


def set_dropout(model: SentenceTransformer, probability: float) -> None:
    """Set every dropout probability of the student (modules and saved config)."""
    if not 0.0 <= probability < 1.0:
        raise XdistillError(f"train.student.dropout must be in [0, 1), got {probability}")
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = probability
    config = transformer_backbone(model).config
    for key in ("hidden_dropout_prob", "attention_probs_dropout_prob", "dropout", "attention_dropout"):
        if hasattr(config, key):
            setattr(config, key, probability)


def freeze_word_embeddings(model: SentenceTransformer) -> None:
    """Stop gradient updates of the word-embedding table (position/type embeddings stay trainable)."""
    embeddings = transformer_backbone(model).get_input_embeddings()
    assert isinstance(embeddings, nn.Embedding)  # the word-embedding table of every supported encoder
    embeddings.weight.requires_grad_(False)
    logger.info("student: froze the word-embedding table (%s parameters)", f"{embeddings.weight.numel():,}")


def freeze_lower_layers(model: SentenceTransformer, k: int) -> None:
    """Freeze the embedding block (word, position, type embeddings, their LayerNorm) and the first ``k`` layers."""
    backbone = transformer_backbone(model)
    _, _, layers = layer_stack(backbone)
    if k > len(layers):
        raise XdistillError(f"train.student.freeze_layers={k}: the student has {len(layers)} layers")
    embeddings = getattr(backbone, "embeddings", None)
    frozen = [embeddings] if isinstance(embeddings, nn.Module) else [backbone.get_input_embeddings()]
    for module in [*frozen, *list(layers)[:k]]:
        for parameter in module.parameters():
            parameter.requires_grad_(False)
    logger.info("student: froze the embedding block and the first %d of %d layers", k, len(layers))


LORA_TARGETS = ("query", "key", "value", "dense")  # BERT/XLM-R attention and feed-forward projections


def add_lora_adapters(model: SentenceTransformer, settings: LoraSettings, frozen_layers: int) -> None:
    """Replace full fine-tuning of the transformer by low-rank adapters (peft LoRA).

    Every transformer weight is frozen; adapters of rank ``settings.rank`` are added to the
    attention and feed-forward projections of the layers above ``frozen_layers``. A Dense head,
    when present, stays fully trainable. :func:`merge_lora_adapters` folds them back in.
    """
    from peft import LoraConfig, inject_adapter_in_model

    backbone = transformer_backbone(model)
    _, _, layers = layer_stack(backbone)
    for parameter in backbone.parameters():
        parameter.requires_grad_(False)
    layer_ids = list(range(frozen_layers, len(layers)))
    # peft annotates lora_alpha as int, but only divides it by the rank: a float alpha is honoured
    config = LoraConfig(
        r=settings.rank,
        lora_alpha=settings.alpha,  # type: ignore[arg-type]
        lora_dropout=settings.dropout,
        target_modules=list(LORA_TARGETS),
        layers_to_transform=layer_ids,
        bias="none",
    )
    inject_adapter_in_model(config, backbone)
    trainable = sum(p.numel() for p in backbone.parameters() if p.requires_grad)
    logger.info(
        "student: LoRA rank %d on layers %d-%d (%s trainable parameters)",
        settings.rank,
        frozen_layers,
        len(layers) - 1,
        f"{trainable:,}",
    )


def has_lora_adapters(model: nn.Module) -> bool:
    return any("lora_" in name for name, _ in model.named_parameters())


def merge_lora_adapters(model: SentenceTransformer) -> None:
    """Fold every LoRA adapter into the untrained student weight and restore plain ``nn.Linear`` layers."""
    from peft.tuners.lora import LoraLayer

    backbone = transformer_backbone(model)
    for parent in list(backbone.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, LoraLayer):
                child.merge()
                setattr(parent, name, child.get_base_layer())


def output_dense(model: SentenceTransformer) -> Dense | None:
    """The student's Dense head (None when it has none)."""
    # matched by class name, not isinstance: a student's Dense head is sentence-transformers' Dense
    return cast("Dense | None", next((m for m in model if type(m).__name__ == "Dense"), None))


def normalized_after_head(model: SentenceTransformer) -> bool:
    """Whether a Normalize module follows the student's Dense head. The orthogonal head fits (procrustes, pca),
    the export rotation and the identity head are fitted on unit vectors: they hold only for such a student."""
    names = [type(module).__name__ for module in model]
    return "Dense" in names and "Normalize" in names[names.index("Dense") + 1 :]


def add_output_dense(
    model: SentenceTransformer,
    output_dim: int,
    init_weight: torch.Tensor | None = None,
    init_bias: torch.Tensor | None = None,
) -> None:
    """Insert a linear Dense layer to ``output_dim`` right after pooling (before Normalize)."""
    from sentence_transformers.base.modules.dense import Dense

    in_dim = model.get_embedding_dimension()
    assert in_dim is not None  # the student ends in Pooling, which fixes its dimension
    if output_dim < 1:
        raise XdistillError(f"train.student.output_dim must be positive, got {output_dim}")
    dense = Dense(
        in_dim, output_dim, bias=True, activation_function=nn.Identity(), init_weight=init_weight, init_bias=init_bias
    )
    modules = list(model._modules.items())
    insert_at = next((i + 1 for i, (_, m) in enumerate(modules) if type(m).__name__ == "Pooling"), len(modules))
    for name, _ in modules:
        del model._modules[name]
    reordered = [m for _, m in modules[:insert_at]] + [dense] + [m for _, m in modules[insert_at:]]
    for index, module in enumerate(reordered):
        model._modules[str(index)] = module
    logger.info("student: added a Dense output layer %d -> %d", in_dim, output_dim)


def freeze_output_dense(model: SentenceTransformer) -> None:
    """Keep the Dense head as the trainer fits it (head_fit 'pca': the back-map of the PCA-reduced target)."""
    head = output_dense(model)
    assert head is not None  # build_student calls this right after add_output_dense
    for parameter in head.parameters():
        parameter.requires_grad_(False)
    logger.info("student: the Dense head is fixed (fitted before training, never trained)")


def trainable_state_dict(model: SentenceTransformer) -> dict[str, torch.Tensor]:
    """The parameters that training changes plus all buffers (frozen weights are rebuilt from the spec).

    A Dense head is always kept, frozen or not: it is fitted from data, not rebuilt from the spec.
    """
    parameters = dict(model.named_parameters())
    head = output_dense(model)
    fitted = {id(p) for p in head.parameters()} if head is not None else set()
    return {
        name: tensor.detach().clone()
        for name, tensor in model.state_dict().items()
        if name not in parameters or parameters[name].requires_grad or id(parameters[name]) in fitted
    }


def load_trainable_state_dict(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Load a :func:`trainable_state_dict`; every key it lacks must be a frozen parameter."""
    missing, unexpected = model.load_state_dict(state, strict=False)
    frozen = {name for name, p in model.named_parameters() if not p.requires_grad}
    bad_missing = [k for k in missing if k not in frozen]
    if unexpected or bad_missing:
        raise XdistillError(
            f"checkpoint does not match the student (unexpected {unexpected[:5]}, missing {bad_missing[:5]})"
        )


def save_student(model: SentenceTransformer, output_dir: str | Path) -> Path:
    """Write the student as a sentence-transformers folder, atomically (replaces ``output_dir``)."""
    output_dir = Path(output_dir)
    if has_lora_adapters(model):
        model = copy.deepcopy(model)
        merge_lora_adapters(model)
    with atomic_path(output_dir, is_dir=True) as tmp:
        model.save(str(tmp))
    return output_dir
