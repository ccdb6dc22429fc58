"""The data report of a ``parallel`` run: JSON (DVC metrics), a Markdown table and a PNG bar chart.

Per source x language pair: pairs read, remaining after each cleaning step, held out for dev,
available for training and drawn into the training file; examples of what each filter dropped;
malformed rows per file with a few ``file:line`` quotes; rows each format leaves out by design, by reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from xdistill.data.clean import DROP_STEPS
from xdistill.io import atomic_path, write_json_atomic, write_text_atomic


def assemble(
    languages, config, cleaner, checkers, dev_counts, overlap, available, written, dev_mining_counts=None
) -> dict[str, Any]:
    """Collect the counts of one run into the report dict."""
    sources: dict[str, dict[str, dict[str, int]]] = {}
    for (corpus, lang), counts in sorted(cleaner.counts.items()):
        row: dict[str, Any] = {
            "read": counts.read,
            "normalized_changed": counts.normalized,
            "dropped": dict(counts.dropped),
            "remaining": counts.after_each_step(),  # pairs left after each step, in chain order
            "kept": counts.kept,
        }
        row.update(
            dev=dev_counts.get((corpus, lang), 0),
            dev_mining=(dev_mining_counts or {}).get((corpus, lang), 0),
            dev_overlap=overlap.get((corpus, lang), 0),
            available=available.get((corpus, lang), 0),
            train=written.get((corpus, lang), 0),
        )
        sources.setdefault(corpus, {})[lang] = row
    malformed = {path: c.summary() for path, c in sorted(checkers.by_file.items()) if c.bad}
    skipped = {path: dict(c.skipped) for path, c in sorted(checkers.by_file.items()) if c.skipped}
    totals = {
        key: sum(r[key] for per in sources.values() for r in per.values())
        for key in ("read", "kept", "dev", "dev_mining", "train")
    }
    totals["kept_after_cleaning"] = totals.pop("kept")
    totals["malformed_rows"] = sum(m["bad"] for m in malformed.values())
    totals["skipped_by_format"] = sum(n for reasons in skipped.values() for n in reasons.values())
    totals["files_read"] = len(checkers.by_file)
    return {
        "languages": list(languages),
        "steps": list(DROP_STEPS),
        "sources": sources,
        "totals": totals,
        "weights": {s.name: s.weight for s in config.sources},
        "dropped_examples": cleaner.examples,
        "malformed": malformed,
        "skipped": skipped,
        "dedup_false_positive_rate": cleaner.seen.false_positive_rate(),
        "evaluation_sentences": len(cleaner.evaluation),
    }


def to_markdown(report: dict[str, Any]) -> str:
    """A table a person reads at a glance, then the dropped examples and malformed rows."""
    steps = report["steps"]
    head = ["source", "pair", "read", *(f"-{s}" for s in steps), "kept", "dev", "dev mining", "-dev overlap", "train"]
    lines = [
        "# Parallel data report",
        "",
        f"Languages: {', '.join(report['languages'])}. Per source and language pair: pairs read, dropped by "
        "each cleaning step (in chain order), kept, held out for dev, held out as the dev mining block "
        "(the last pairs in file order), dropped for sharing a sentence with a held-out pair, and drawn into the "
        "training file (weights: "
        + ", ".join(f"{k} {v:g}" for k, v in report["weights"].items())
        + f"; small sources repeated). Decontaminated against {report['evaluation_sentences']:,} evaluation sentences.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for corpus, per_lang in report["sources"].items():
        for lang, row in per_lang.items():
            cells = [
                corpus,
                f"en-{lang}",
                f"{row['read']:,}",
                *(f"{row['dropped'][s]:,}" for s in steps),
                f"{row['kept']:,}",
                f"{row['dev']:,}",
                f"{row.get('dev_mining', 0):,}",
                f"{row['dev_overlap']:,}",
                f"**{row['train']:,}**",
            ]
            lines.append("| " + " | ".join(cells) + " |")
    totals = report["totals"]
    lines += [
        "",
        f"**Total**: {totals['read']:,} pairs read, {totals['kept_after_cleaning']:,} after cleaning, "
        f"{totals['dev']:,} dev, {totals.get('dev_mining', 0):,} dev mining, {totals['train']:,} train; "
        f"{totals['malformed_rows']:,} malformed rows skipped in {totals['files_read']} files. "
        f"Duplicate filter false-positive rate: {report['dedup_false_positive_rate']:.1e}.",
        "",
        "## What each filter dropped (first examples)",
        "",
    ]
    for step, examples in report["dropped_examples"].items():
        lines.append(f"- **{step}**: " + ("; ".join(f"`{e}`" for e in examples) if examples else "nothing"))
    lines += ["", "## Malformed rows", ""]
    if not report["malformed"]:
        lines.append("None.")
    for path, info in report["malformed"].items():
        reasons = ", ".join(f"{n} {r}" for r, n in info["reasons"].items())
        lines.append(f"- `{path}`: {info['bad']:,} of {info['rows']:,} rows ({reasons})")
        lines += [f"  - `{q}`" for q in info["quotes"]]
    lines += ["", "## Left out by the format (not malformed)", ""]
    if not report.get("skipped"):
        lines.append("None.")
    for path, reasons in report.get("skipped", {}).items():
        lines.append(f"- `{path}`: " + ", ".join(f"{n:,} {reason}" for reason, n in reasons.items()))
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: str | Path) -> None:
    """Left: pairs read / after cleaning / in train per source x pair. Right: what each step dropped."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = [(f"{c} en-{lang}", r) for c, per in report["sources"].items() for lang, r in per.items()]
    labels = [name for name, _ in rows] or ["(no data)"]
    y = np.arange(len(labels))
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 2.2 + 0.45 * len(labels)), sharey=True)
    for offset, (key, label) in zip(
        (-0.27, 0, 0.27), (("read", "read"), ("kept", "after cleaning"), ("train", "train"))
    ):
        left.barh(y + offset, [r[key] for _, r in rows] or [0], height=0.27, label=label)
    left.set_xscale("log")
    left.set_xlim(left=1)
    left.set_xlabel("pairs (log scale)")
    left.set_title("pairs per source x language")
    left.legend(loc="upper center", bbox_to_anchor=(0.5, -0.08 - 0.3 / len(labels)), ncol=3, fontsize=8)
    left.set_yticks(y, labels)
    left.invert_yaxis()
    start = np.zeros(len(labels))
    for step in report["steps"]:
        dropped = np.array([r["dropped"][step] for _, r in rows] or [0], dtype=float)
        share = dropped / np.maximum([r["read"] for _, r in rows] or [1], 1)
        right.barh(y, share * 100, left=start, height=0.6, label=step)
        start += share * 100
    right.set_xlabel("% of pairs read dropped, by step")
    right.set_title("cleaning")
    right.legend(loc="upper center", bbox_to_anchor=(0.5, -0.08 - 0.3 / len(labels)), ncol=4, fontsize=7)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)


def write_all(report: dict[str, Any], metrics_path, markdown_path, plot_path) -> None:
    write_json_atomic(metrics_path, report)
    write_text_atomic(markdown_path, to_markdown(report))
    plot(report, plot_path)
