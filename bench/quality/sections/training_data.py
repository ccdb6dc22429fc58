"""RESULTS.md's training data section: sources, languages and pair counts through cleaning and sampling."""

from __future__ import annotations

import json
from typing import Any


def data_section(members: list[tuple[dict[str, Any], dict[str, Any]]]) -> str:
    spec, data = members[0]
    report = data["data"] or {}
    totals = report.get("totals", {})
    rows = ["| source | language | read | after cleaning | in train |", "|---|---|---:|---:|---:|"]
    for source, per_lang in sorted(report.get("sources", {}).items()):
        for lang, facts in sorted(per_lang.items()):
            rows.append(
                f"| {source} | {lang} | {facts.get('read', '-')} | {facts.get('kept', '-')} "
                f"| {facts.get('train', '-')} |"
            )
    params = data["params"]
    return (
        "\n".join(
            [
                "## Training data",
                "",
                f"Languages: {', '.join(params['languages'])}. Every training source of the corpora mirror is read, "
                f"cleaned and decontaminated against every evaluation set ({totals.get('read', '-')} pairs read, "
                f"{totals.get('kept_after_cleaning', '-')} kept); the sampler then draws "
                f"{params['parallel']['max_train_pairs']} training pairs by source weight "
                f"({json.dumps(report.get('weights', {}))}) and holds out "
                f"{params['parallel']['dev_pairs_per_language']} dev pairs per language. "
                f"Every member trains on the same files (member `{spec['name']}` shown).",
                "",
                *rows,
                "",
            ]
        )
        + "\n"
    )
