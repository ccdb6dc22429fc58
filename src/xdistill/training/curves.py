"""Training curves as one PNG: train loss, dev MSE, dev translation accuracy, learning rate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from xdistill.io import atomic_path


def plot_training_curves(history: list[dict[str, Any]], path: str | Path, best_step: int | None = None) -> Path:
    """Draw the history of :func:`xdistill.training.trainer.train_student` into a 2x2 PNG."""
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
    mse_ax.plot(dev_steps, [row["dev_mse_src"] for row in dev], "o-", label="student(src) vs teacher(src)")
    mse_ax.plot(dev_steps, [row["dev_mse_tgt"] for row in dev], "s-", label="student(tgt) vs teacher(src)")
    mse_ax.set(title="dev MSE", xlabel="step")
    mse_ax.legend(fontsize=8)

    acc_ax.plot(dev_steps, [row["dev_accuracy_src2tgt"] for row in dev], "o-", label="src -> tgt")
    acc_ax.plot(dev_steps, [row["dev_accuracy_tgt2src"] for row in dev], "s-", label="tgt -> src")
    acc_ax.plot(dev_steps, [row["dev_mean_pairwise_cosine"] for row in dev], ":", c="grey", label="mean pairwise cos")
    acc_ax.set(title="dev translation accuracy", xlabel="step", ylim=(0, 1.02))
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
