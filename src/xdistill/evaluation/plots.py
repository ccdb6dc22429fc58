"""PNG plots of the merged results: per-language bars and the language-bias PCA picture."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from xdistill.io import atomic_path


def _save(figure: plt.Figure, path: Path) -> Path:
    with atomic_path(path) as tmp:
        figure.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(figure)
    return path


def _or_minus_one(value: float | None) -> float:
    """A missing value ranks below every score."""
    return value if value is not None else -1.0


def grouped_bars(
    groups: list[str], series: Mapping[str, list[float | None]], title: str, ylabel: str, path: Path
) -> Path:
    """One group of bars per language/track, one bar per model (missing values left out).

    The axis starts just below the lowest bar rather than at 0 (gains of 1-3 points must be visible), each
    bar carries its value when there are few enough to read, and the legend sits beside the plot, never
    over a bar."""
    figure, axis = plt.subplots(figsize=(max(6.0, 0.9 * len(groups) * max(1, len(series)) / 2 + 2) + 2.5, 4.2))
    width = 0.8 / max(1, len(series))
    positions = np.arange(len(groups))
    label_bars = len(groups) * len(series) <= MAX_LABELLED_BARS
    for offset, (label, values) in enumerate(series.items()):
        heights = [np.nan if v is None else v for v in values]
        bars = axis.bar(positions + (offset - (len(series) - 1) / 2) * width, heights, width, label=label)
        if label_bars:
            axis.bar_label(bars, fmt="%.1f", fontsize=6, padding=1)
    axis.set_xticks(
        positions, groups, rotation=30 if len(groups) > 8 else 0, ha="right" if len(groups) > 8 else "center"
    )
    axis.set_ylabel(ylabel)
    axis.set_title(title)
    axis.set_ylim(*_value_range([v for values in series.values() for v in values if v is not None]))
    axis.axhline(0, color="black", linewidth=0.6)
    axis.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axis.grid(axis="y", alpha=0.3)
    return _save(figure, path)


MAX_LABELLED_BARS = 48


def _value_range(values: list[float]) -> tuple[float, float]:
    """The y-axis span: from a little below the lowest value (0 when a value is near 0 or negative, so the
    sign stays visible) to a little above the highest, with room for the value labels."""
    if not values:
        return 0.0, 1.0
    low, high = min(values), max(values)
    margin = max(1.0, 0.15 * (high - low))
    bottom = 0.0 if low - 2 * margin <= 0 < high else low - 2 * margin
    if low < 0:
        bottom = low - margin
    return bottom, high + margin


def ranked_lines(
    groups: list[str], series: Mapping[str, list[float | None]], title: str, ylabel: str, path: Path
) -> Path:
    """Many groups (e.g. 112 languages) ordered by the first series, high to low, one line per model.

    Bars stop being readable past a few dozen groups; a ranked profile shows where each model
    gains or loses against the first one at a glance.
    """
    reference = next(iter(series.values()))
    order = sorted(range(len(groups)), key=lambda i: -_or_minus_one(reference[i]))
    figure, axis = plt.subplots(figsize=(max(8.0, 0.12 * len(groups) + 2), 4.5))
    positions = np.arange(len(groups))
    for label, values in series.items():
        heights = [np.nan if value is None else value for value in (values[i] for i in order)]
        axis.plot(positions, heights, marker="o", markersize=2.5, linewidth=0.9, label=label)
    axis.set_xticks(positions, [groups[i] for i in order], rotation=90, fontsize=5)
    axis.set_xlim(-1, len(groups))
    axis.set_ylabel(ylabel)
    axis.set_title(title)
    axis.legend(fontsize="small")
    axis.grid(alpha=0.3)
    return _save(figure, path)


def bars_from_scores(
    all_results: Mapping[str, Mapping[str, Any]], benchmark: str, key: str | None, title: str, ylabel: str, path: Path
) -> Path | None:
    """Bars of ``scores[group]`` (or ``scores[group][key]``) for each group any model has."""
    per_model = {label: r.get("benchmarks", {}).get(benchmark, {}).get("scores") for label, r in all_results.items()}
    per_model = {label: scores for label, scores in per_model.items() if scores}
    if not per_model:
        return None
    groups = list(dict.fromkeys(g for scores in per_model.values() for g in scores if not g.startswith("average")))
    summary_groups = ("average_monolingual", "average_crosslingual", "average")
    groups += [g for g in summary_groups if any(g in scores for scores in per_model.values())]

    def value(scores: Mapping[str, Any], group: str) -> float | None:
        item = scores.get(group)
        if isinstance(item, Mapping):
            return item.get(key) if key else None
        return item

    series = {label: [value(per_model.get(label, {}), g) for g in groups] for label in all_results}
    return grouped_bars(groups, series, title, ylabel, path)


def pca_figure(all_results: Mapping[str, Mapping[str, Any]], path: Path) -> Path | None:
    """One panel per model: English FLORES sentences and their translations in the model's 2-D PCA.

    Reimers & Gurevych's Figure 2: in a well-aligned space translations sit next to their English
    source (short grey lines); a language-biased space separates languages into clusters.
    """
    panels = [(label, r["pca"]) for label, r in all_results.items() if r.get("pca")]
    if not panels:
        return None
    figure, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4.2), squeeze=False)
    for axis, (label, pca) in zip(axes[0], panels):
        coords = np.asarray(pca["coords"])
        langs = np.asarray(pca["languages"])
        ids = np.asarray(pca["sentence_ids"])
        for sentence in np.unique(ids):
            members = coords[ids == sentence]
            english = coords[(ids == sentence) & (langs == "en")]
            for point in members:
                if len(english):
                    axis.plot(
                        [english[0, 0], point[0]], [english[0, 1], point[1]], color="grey", linewidth=0.5, alpha=0.6
                    )
        for lang in dict.fromkeys(langs.tolist()):
            chosen = langs == lang
            axis.scatter(coords[chosen, 0], coords[chosen, 1], s=18, label=lang, marker="*" if lang == "en" else "o")
        share = pca.get("explained_variance", [0, 0])
        axis.set_title(f"{label}\n(PC1 {100 * share[0]:.0f}%, PC2 {100 * share[1]:.0f}% of variance)", fontsize=9)
        axis.set_xticks([])
        axis.set_yticks([])
    axes[0][0].legend(fontsize="small")
    figure.suptitle("English FLORES sentences (*) and their translations, 2-D PCA per model", y=1.06)
    return _save(figure, path)


def write_plots(all_results: Mapping[str, Mapping[str, Any]], plots_dir: Path) -> list[Path]:
    """Every plot of the evaluate stage into ``plots_dir``."""
    made = [
        bars_from_scores(
            all_results,
            "tatoeba",
            "average",
            "Tatoeba accuracy (avg of both directions)",
            "accuracy %",
            plots_dir / "tatoeba.png",
        ),
        bars_from_scores(
            all_results,
            "sts17",
            None,
            "STS17 official tracks (4b outside the average)",
            "Spearman x100",
            plots_dir / "sts17.png",
        ),
        bars_from_scores(
            all_results,
            "sts_crosslingual",
            None,
            "Cross-lingual STSb (stsb-multi-mt)",
            "Spearman x100",
            plots_dir / "sts_crosslingual.png",
        ),
        bars_from_scores(
            all_results,
            "sts_monolingual",
            None,
            "Monolingual STSb (stsb-multi-mt)",
            "Spearman x100",
            plots_dir / "sts_monolingual.png",
        ),
        bars_from_scores(
            all_results,
            "mining_flores",
            "f1",
            "Bitext mining F1, FLORES BUCC-style",
            "F1 %",
            plots_dir / "mining_flores.png",
        ),
        pca_figure(all_results, plots_dir / "pca_language_bias.png"),
    ]
    return [p for p in made if p is not None]
