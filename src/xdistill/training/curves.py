"""Training curves as one PNG: train loss, dev MSE, dev translation accuracy, learning rate."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from xdistill.io import atomic_path


def plot_training_curves(
    history: list[dict[str, Any]],
    path: str | Path,
    best_step: int | None = None,
    exported: Mapping[str, Any] | None = None,
    exported_label: str = "exported student",
) -> Path:
    """Draw the history of :func:`xdistill.training.trainer.train_student` into a 2x2 PNG.

    ``exported``: the dev metrics of the student the run exported (the WiSE-FT interpolation, or the best
    checkpoint), drawn as stars after the last step: the exported model is not on the training curve, and
    without it the panel would show only the curve's fall from step 0."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = [row for row in history if row.get("kind") == "train"]
    dev = [row for row in history if row.get("kind") == "dev"]
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    (loss_ax, mse_ax), (acc_ax, lr_ax) = axes

    steps = [row["step"] for row in train]
    for key in sorted({k for row in train for k in row} - {"step", "kind", "lr", "grad_norm", "pairs_per_second"}):
        loss_ax.plot(steps, [row.get(key, float("nan")) for row in train], label=key, lw=1.8 if key == "loss" else 1)
    loss_ax.set(title="training loss", xlabel="step", yscale="log")
    if train:
        loss_ax.legend(fontsize=8)

    dev_steps = [row["step"] for row in dev]
    for key, marker, label in (
        ("dev_mse_x100_src", "o-", "student(src) vs teacher(src)"),
        ("dev_mse_x100_tgt", "s-", "student(tgt) vs teacher(src)"),
    ):
        mse_ax.plot(dev_steps, [row.get(key, float("nan")) for row in dev], marker, label=label)
    mse_ax.set(title="dev MSE to the teacher (x 100)", xlabel="step")
    mse_ax.legend(fontsize=8)

    for key, marker, label in (
        ("dev_score", "D-", "dev score (selection)"),
        ("dev_sts", "o-", "STS dev (Spearman x 100)"),
        ("dev_accuracy", "s-", "translation retrieval %"),
        ("dev_teacher_accuracy", "^-", "teacher-space retrieval %"),
    ):
        (line,) = acc_ax.plot(dev_steps, [row.get(key, float("nan")) for row in dev], marker, label=label)
        if exported and exported.get(key) is not None and dev_steps:
            acc_ax.plot([dev_steps[-1] * 1.04], [exported[key]], "*", ms=12, c=line.get_color())
    if exported and dev_steps:
        acc_ax.plot([], [], "*", ms=10, c="grey", label=exported_label)
    acc_ax.set(title="dev quality (points)", xlabel="step")
    acc_ax.legend(fontsize=8)

    lr_ax.plot(steps, [row["lr"] for row in train], c="tab:purple")
    lr_ax.set(title="learning rate", xlabel="step")
    if best_step:
        for ax in (mse_ax, acc_ax):
            ax.axvline(best_step, c="tab:green", ls="--", lw=1)
    fig.tight_layout()
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
    return path
