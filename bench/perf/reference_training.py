"""The reference side of the training benchmarks: sentence-transformers' own trainer with ``MSELoss``.

``SentenceTransformerTrainer`` + ``MSELoss`` is how sentence-transformers' documentation distils a
multilingual student (Reimers & Gurevych); the benchmarks time it on the same pairs, teacher vectors,
student build and batch as ours, with the optimiser settings of our default recipe.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any


def train_reference(
    model: Any,
    sources: list[str],
    translations: list[str],
    targets: Any,
    *,
    batch_size: int,
    steps: int,
    output_dir: Path,
    device: str = "cpu",
    precision: str = "fp32",
    prompt: str | None = None,
) -> dict[str, float]:
    """Train ``model`` for ``steps`` steps of ``batch_size`` pairs; its pairs/s (the trainer's own step time),
    the whole call's wall seconds and the mean training loss."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.sentence_transformer.losses import MSELoss

    dataset = Dataset.from_dict({"english": sources, "non_english": translations, "label": targets.tolist()})
    training_args = SentenceTransformerTrainingArguments(
        output_dir=str(output_dir),
        per_device_train_batch_size=batch_size,
        max_steps=steps,
        learning_rate=5e-5,
        warmup_steps=0.1,
        weight_decay=0.01,
        max_grad_norm=1.0,
        logging_steps=max(1, steps // 4),
        save_strategy="no",
        report_to="none",
        seed=1,
        dataloader_num_workers=0,
        use_cpu=not device.startswith("cuda"),
        prompts=prompt or None,
        disable_tqdm=True,
        bf16=precision == "bf16",
        fp16=precision == "fp16",
    )
    trainer = SentenceTransformerTrainer(model=model, args=training_args, train_dataset=dataset, loss=MSELoss(model))
    start = time.perf_counter()
    output = trainer.train()
    wall = time.perf_counter() - start
    return {
        "pairs_per_second": steps * batch_size / float(output.metrics["train_runtime"]),
        "wall_seconds": wall,
        "train_loss": float(output.metrics.get("train_loss", float("nan"))),
    }
