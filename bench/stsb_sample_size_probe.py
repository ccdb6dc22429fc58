"""How many STSb pairs does it take to tell a student from its base within the 0.5-point tolerance?

The promotion gate and RESULTS.md's targets call a student "below its base" when a score drops
more than a tolerance (0.5 point in the issue's targets) under the untrained student's. Whether a
benchmark can see a difference that small depends on its size. This probe scores two models on the
stsb-multi-mt test sets (monolingual and cross-lingual, as the evaluate stage builds them) at several
sizes (the same evenly spaced subsets `evaluate.stsb_max_pairs` takes) and gives each difference a
paired bootstrap 95 % interval: both models are scored on the same resampled pairs, 2000 times. For
the averages each set is resampled on its own and the differences averaged per replicate.

Usage: ``python bench/stsb_sample_size_probe.py RAW_DIR OUT.json CANDIDATE BASE LANG[,LANG...]``
(RAW_DIR a corpora stage's ``data/raw``; CANDIDATE and BASE model specs such as ``models/student``
and ``pypi:multilingual-e5-small``; the languages those of the stsb-multi-mt sets to build).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from xdistill.evaluation.metrics import paired_cosine, spearman_x100
from xdistill.evaluation.sts import STSSet, build_stsb_sets, evenly_spaced
from xdistill.io import write_json_atomic
from xdistill.models.resolve import load_sentence_transformer

SIZES = (100, 300, None)  # None: every pair of the set (1379)
REPLICATES = 2000


def set_cosines(model, sts_set: STSSet) -> np.ndarray:
    """The model's cosine of each sentence pair of the set."""
    def embed(texts: list[str]) -> np.ndarray:
        return model.encode(texts, batch_size=64, normalize_embeddings=True)

    return paired_cosine(embed(sts_set.sentences1), embed(sts_set.sentences2))


def bootstrap_differences(candidate: np.ndarray, base: np.ndarray, gold: np.ndarray,
                          rng: np.random.Generator) -> np.ndarray:
    """Spearman x 100 of the candidate minus the base's, on REPLICATES resamples of the same pairs."""
    draws = rng.integers(0, len(gold), size=(REPLICATES, len(gold)))
    return np.array([spearman_x100(candidate[i], gold[i]) - spearman_x100(base[i], gold[i]) for i in draws])


def interval(values: np.ndarray) -> list[float]:
    """The central 95 % of the bootstrap differences, rounded for the report."""
    return [round(float(v), 2) for v in np.percentile(values, [2.5, 97.5])]


def compare(sets: list[STSSet], cosines: dict[str, dict[str, np.ndarray]], size: int | None,
            seed: int) -> dict:
    """Per set and on average: both scores, the difference and its bootstrap interval at one size."""
    rng = np.random.default_rng(seed)
    rows, replicate_sum = {}, np.zeros(REPLICATES)
    for sts_set in sets:
        # the pairs STSSet.subset keeps, so the probe scores what the evaluation scores
        keep = np.arange(len(sts_set)) if size is None or size >= len(sts_set) else evenly_spaced(len(sts_set), size)
        gold = sts_set.gold[keep]
        candidate, base = cosines["candidate"][sts_set.name][keep], cosines["base"][sts_set.name][keep]
        scores = [spearman_x100(candidate, gold), spearman_x100(base, gold)]
        replicates = bootstrap_differences(candidate, base, gold, rng)
        replicate_sum += replicates
        rows[sts_set.name] = {"candidate": round(scores[0], 2), "base": round(scores[1], 2),
                              "difference": round(scores[0] - scores[1], 2), "ci95": interval(replicates)}
    differences = [row["difference"] for row in rows.values()]
    rows["average"] = {"difference": round(float(np.mean(differences)), 2),
                       "ci95": interval(replicate_sum / len(sets))}
    return rows


def main(raw_dir: str, out: str, candidate: str, base: str, languages: str) -> None:
    monolingual, crosslingual = build_stsb_sets(Path(raw_dir) / "eval" / "stsb-multi-mt", languages.split(","))
    groups = {"monolingual": monolingual, "cross-lingual": crosslingual}
    cosines: dict[str, dict[str, np.ndarray]] = {}
    for role, spec in (("candidate", candidate), ("base", base)):
        model = load_sentence_transformer(spec)
        cosines[role] = {s.name: set_cosines(model, s) for s in monolingual + crosslingual}
    result = {"what": "STSb test: Spearman x 100 of candidate and base, their difference and its paired "
                      f"bootstrap 95 % interval ({REPLICATES} resamples), at each evaluate.stsb_max_pairs",
              "command": "python bench/stsb_sample_size_probe.py " + " ".join(
                  [raw_dir, out, candidate, base, languages]),
              "candidate": candidate, "base": base, "sizes": {}}
    for size in SIZES:
        label = "all" if size is None else str(size)
        result["sizes"][label] = {group: compare(sets, cosines, size, seed=13) for group, sets in groups.items()}
        for group, rows in result["sizes"][label].items():
            print(f"{label:>4} pairs, {group}: {rows['average']}", flush=True)
    write_json_atomic(out, result)


if __name__ == "__main__":
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    main(*sys.argv[1:])
