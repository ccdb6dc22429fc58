"""How many STSb pairs does it take to tell a student from the untrained student within the 0.5-point tolerance?

The promotion gate and RESULTS.md's targets call a student "below the untrained student" when a score drops
more than a tolerance (0.5 point in the quality targets) under the untrained student's. Whether a
benchmark can see a difference that small depends on its size. This probe scores two models on the
stsb-multi-mt test sets (monolingual and cross-lingual, as the evaluate stage builds them) at several
sizes (the same evenly spaced subsets `evaluate.stsb_max_pairs` takes) and gives each difference a
paired bootstrap 95 % interval: both models are scored on the same resampled pairs, 2000 times. For
the averages each set is resampled on its own and the differences averaged per replicate.

Usage: ``python -m bench.probes.stsb_sample_size RAW_DIR OUT.json CANDIDATE BASE LANG[,LANG...]``
(RAW_DIR a corpora stage's ``data/raw``; CANDIDATE and BASE model specs such as ``models/student``
and ``pypi:multilingual-e5-small``; the languages those of the stsb-multi-mt sets to build).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from xdistill.evaluation.encoding import CachedEncoder
from xdistill.evaluation.metrics import paired_cosine, spearman_x100
from xdistill.evaluation.sts import STSSet, build_stsb_sets
from xdistill.io import write_json_atomic
from xdistill.models.encoders import load_encoder

SIZES = (100, 300, None)  # None: every pair of the set (1379)
REPLICATES = 2000


def pair_cosines(encoder: CachedEncoder, sts_set: STSSet) -> np.ndarray:
    """The model's cosine of each sentence pair of the set (the encoder's memo encodes a sentence once
    over every set and size: the English side recurs in each cross-lingual set)."""
    return paired_cosine(encoder.encode(sts_set.sentences1), encoder.encode(sts_set.sentences2))


def bootstrap_differences(
    candidate: np.ndarray, base: np.ndarray, gold: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Spearman x 100 of the candidate minus the untrained student's, on REPLICATES resamples of the same pairs."""
    draws = rng.integers(0, len(gold), size=(REPLICATES, len(gold)))
    return np.array([spearman_x100(candidate[i], gold[i]) - spearman_x100(base[i], gold[i]) for i in draws])


def interval(values: np.ndarray) -> list[float]:
    """The central 95 % of the bootstrap differences, rounded for the report."""
    return [round(float(v), 2) for v in np.percentile(values, [2.5, 97.5])]


def compare(sets: list[STSSet], candidate: CachedEncoder, base: CachedEncoder, seed: int) -> dict:
    """Per set and on average: both scores, the difference and its bootstrap interval."""
    rng = np.random.default_rng(seed)
    rows, replicate_sum = {}, np.zeros(REPLICATES)
    for sts_set in sets:
        candidate_cosines, base_cosines = pair_cosines(candidate, sts_set), pair_cosines(base, sts_set)
        scores = [spearman_x100(candidate_cosines, sts_set.gold), spearman_x100(base_cosines, sts_set.gold)]
        replicates = bootstrap_differences(candidate_cosines, base_cosines, sts_set.gold, rng)
        replicate_sum += replicates
        rows[sts_set.name] = {
            "candidate": round(scores[0], 2),
            "base": round(scores[1], 2),
            "difference": round(scores[0] - scores[1], 2),
            "ci95": interval(replicates),
        }
    differences = [row["difference"] for row in rows.values()]
    rows["average"] = {"difference": round(float(np.mean(differences)), 2), "ci95": interval(replicate_sum / len(sets))}
    return rows


def main(raw_dir: str, out: str, candidate: str, base: str, languages: str) -> None:
    monolingual, crosslingual = build_stsb_sets(Path(raw_dir) / "eval" / "stsb-multi-mt", languages.split(","))
    groups = {"monolingual": monolingual, "cross-lingual": crosslingual}
    # the evaluate stage's encoders; STSSet.subset takes the pairs evaluate.stsb_max_pairs takes
    encoders = [CachedEncoder(load_encoder(spec)) for spec in (candidate, base)]
    result = {
        "what": "STSb test: Spearman x 100 of candidate and base, their difference and its paired "
        f"bootstrap 95 % interval ({REPLICATES} resamples), at each evaluate.stsb_max_pairs",
        "command": "python -m bench.probes.stsb_sample_size " + " ".join([raw_dir, out, candidate, base, languages]),
        "candidate": candidate,
        "base": base,
        "sizes": {},
    }
    for size in SIZES:
        label = "all" if size is None else str(size)
        result["sizes"][label] = {
            group: compare([s.subset(size) for s in sets], *encoders, seed=13) for group, sets in groups.items()
        }
        for group, rows in result["sizes"][label].items():
            print(f"{label:>4} pairs, {group}: {rows['average']}", flush=True)
    write_json_atomic(out, result)


if __name__ == "__main__":
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    main(*sys.argv[1:])
