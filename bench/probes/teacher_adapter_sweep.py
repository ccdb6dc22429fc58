"""Which settings of the teacher-space adapter (``train.teacher_adapter``) retrieve best on dev data?

Quality target 3, through ``--teacher-space``: the worst language and direction of teacher-space
FLORES retrieval sits at 89-91 for every quality member, always Arabic xx->en. Fitting the adapter on
all 100k training pairs instead of 32k did not move the dev figure (quality-mpnet-rank-lr2e4-adapter-all),
so this sweep varies how it is fitted instead, on one finished member's student: each variant is an
:class:`~xdistill.adapter.fit.AdapterSettings` override, fitted on the same cached student
embeddings of the same training pairs (:func:`bench.probes.teacher_space_adapter.encode_pairs`).

The variants are judged on the member's held-out dev pairs (teacher(English) <-> adapter(student(translation)),
200 pairs a language, both directions; the worst language and direction first, then the average); FLORES
devtest is measured beside them, as the evaluate stage does, and decides nothing.

Usage: ``python -m bench.probes.teacher_adapter_sweep WORKSPACE OUT.json N_PAIRS VARIANT [VARIANT ...]`` where a
VARIANT is ``name:key=value,key=value`` over AdapterSettings (e.g. ``b1024:batch_pairs=1024``); the
default settings always run as ``default``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from bench.paths import mirror_dir
from bench.probes.teacher_space_adapter import encode_pairs
from bench.probes.teacher_space_rotation import (
    LANGUAGES,
    TEACHER,
    TRAIN_TSV,
    encode,
    parallel_sample,
    retrieval,
    summarise,
)
from xdistill.adapter.fit import AdapterSettings, fit_teacher_adapter
from xdistill.data.eval_formats import read_flores
from xdistill.evaluation.dev import dev_pairs_by_language
from xdistill.mining.flores import flores_file
from xdistill.models.resolve import load_sentence_transformer


def parse_variant(text: str) -> tuple[str, dict[str, float]]:
    """``b1024:batch_pairs=1024,scale=30`` -> ("b1024", {"batch_pairs": 1024, "scale": 30.0})."""
    name, _, assignments = text.partition(":")
    fields = AdapterSettings.__dataclass_fields__
    overrides = {}
    for item in filter(None, assignments.split(",")):
        key, _, value = item.partition("=")
        if key not in fields:
            raise SystemExit(f"variant {text!r}: {key!r} is no AdapterSettings field ({', '.join(fields)})")
        overrides[key] = type(getattr(AdapterSettings(), key))(float(value))
    return name, overrides


def workspace_commit(workspace: Path) -> str | None:
    """The commit the workspace's student came from (a DVC experiment commit checked out as a git worktree)."""
    found = subprocess.run(["git", "-C", str(workspace), "rev-parse", "HEAD"], capture_output=True, text=True)
    return found.stdout.strip() if found.returncode == 0 else None


def main(workspace: Path, out: Path, n_pairs: int, variants: list[str]) -> None:
    started = time.time()
    student = load_sentence_transformer(str(workspace / "models/student"))
    teacher = load_sentence_transformer(TEACHER)
    sources, translations, teacher_vectors = parallel_sample(workspace / TRAIN_TSV, n_pairs)
    emb_src, emb_tgt = encode_pairs(
        student, sources, translations, workspace / "probe_cache" / f"student_{len(sources)}.npz"
    )
    target = torch.from_numpy(teacher_vectors)
    flores_dir = mirror_dir() / "eval/flores200-devtest"
    english_flores = read_flores(flores_file(flores_dir, "en"))
    sets = {
        "dev": dev_pairs_by_language(workspace / "data/parallel/dev.tsv.gz", LANGUAGES, 200),
        "flores": {lang: (english_flores, read_flores(flores_file(flores_dir, lang))) for lang in LANGUAGES},
    }
    encoded = {
        kind: {lang: (encode(teacher, english), encode(student, xx)) for lang, (english, xx) in pairs.items()}
        for kind, pairs in sets.items()
    }
    results = {}
    for name, overrides in [("default", {})] + [parse_variant(v) for v in variants]:
        settings = AdapterSettings(pairs=len(sources), **overrides)
        began = time.time()
        adapter, report = fit_teacher_adapter(emb_src, emb_tgt, target, settings)
        per_kind = {}
        for kind, by_lang in encoded.items():
            with torch.no_grad():
                per_language = {
                    lang: retrieval(np.ascontiguousarray(adapter.map(xx), dtype=np.float32), en)
                    for lang, (en, xx) in by_lang.items()
                }
            per_kind[kind] = {**summarise(per_language), "per_language": per_language}
        results[name] = {
            "overrides": overrides,
            "fit_seconds": round(time.time() - began),
            "steps": report["steps"],
            **per_kind,
        }
        print(
            f"{name}: dev min {per_kind['dev']['min']:.1f} avg {per_kind['dev']['average']:.2f} | "
            f"FLORES min {per_kind['flores']['min']:.1f} avg {per_kind['flores']['average']:.2f} "
            f"({results[name]['fit_seconds']} s)",
            flush=True,
        )
    chosen = max(results, key=lambda n: (results[n]["dev"]["min"], results[n]["dev"]["average"]))
    report = {
        "what": "teacher-space retrieval through adapters fitted with other train.teacher_adapter settings on one "
        "member's student; chosen on dev (worst language and direction, then average), FLORES reports",
        "command": f"python -m bench.probes.teacher_adapter_sweep {workspace} {out} {n_pairs} {' '.join(variants)}",
        "teacher": TEACHER,
        "student_commit": workspace_commit(workspace),
        "fit_pairs": len(sources),
        "chosen_on_dev": chosen,
        "variants": results,
        "seconds": round(time.time() - started),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"chosen on dev: {chosen}")


if __name__ == "__main__":
    if len(sys.argv) < 4:
        raise SystemExit(__doc__)
    main(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4:])
