"""How far can a map fitted on top of an exported student carry it into the teacher's space?

Quality target 3: an English index built with the teacher should answer queries the student
embeds in any language, and the reverse. A WiSE-FT student (a < 1) keeps most of the untrained student's
geometry, which no rotation changes (``bench/probes/teacher_space_rotation.py``: +1.6 dev points). This
probe compares maps fitted on the student's *final* embeddings of training pairs (both sides)
against the teacher's vectors of the sources, all applied after the student and leaving its own
embeddings untouched:

- ``rotated``: orthogonal Procrustes (what ``train.export_rotation`` folds into the head);
- ``affine``: ridge least squares with a bias (lambda by grouped cross-validation);
- ``mlp_mse``: a residual two-layer MLP trained on MSE to the teacher vectors;
- ``mlp_ranking``: the same MLP on MSE plus an in-batch ranking loss against the teacher vectors
  (both directions), which targets retrieval in the teacher's space directly.

Each is measured on the member's held-out dev pairs (teacher(English) <-> map(student(translation)));
FLORES devtest is reported beside them, as the evaluate stage does, and decides nothing.

Usage: ``python -m bench.probes.teacher_space_adapter WORKSPACE OUT.json [N_PAIRS [BASE_SPEC]]`` (WORKSPACE as for
the rotation probe: a finished member's ``models/student`` and ``data/parallel/{train,dev}.tsv.gz``;
BASE_SPEC, e.g. ``pypi:multilingual-e5-small``, fits the same maps on the untrained student, so the
adapter's share of the result and the distillation's can be told apart).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from bench.paths import mirror_dir
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
from xdistill.training.alignment import procrustes_map, ridge_map


def encode_pairs(model, sources: list[str], translations: list[str], cache: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's embeddings of both sides, kept in ``cache`` (.npz) so that a rerun skips the encoding."""
    if cache.is_file():
        stored = np.load(cache)
        if len(stored["sources"]) == len(sources):
            return torch.from_numpy(stored["sources"]), torch.from_numpy(stored["translations"])
    began = time.time()
    emb_src, emb_tgt = encode(model, sources), encode(model, translations)
    print(f"{cache.name}: encoded {len(sources)} pairs in {time.time() - began:.0f} s", flush=True)
    cache.parent.mkdir(parents=True, exist_ok=True)
    partial = cache.with_suffix(".partial.npz")
    np.savez(partial, sources=emb_src, translations=emb_tgt)
    partial.replace(cache)
    return torch.from_numpy(emb_src), torch.from_numpy(emb_tgt)


def fit_maps(
    model,
    sources: list[str],
    translations: list[str],
    target: torch.Tensor,
    prefix: str,
    fit_seconds: dict[str, int],
    cache: Path,
) -> dict:
    """Every map of the module docstring, fitted on ``model``'s embeddings of the pairs."""
    emb_src, emb_tgt = encode_pairs(model, sources, translations, cache)
    both, targets = torch.cat([emb_src, emb_tgt]).double(), torch.cat([target, target]).double()
    rotation = procrustes_map(both, targets).float().numpy()
    weight, bias = ridge_map(both, targets, groups=torch.cat([torch.arange(len(sources))] * 2))
    weight, bias = weight.float(), bias.float()
    maps = {f"{prefix}as_exported": lambda x: x} if emb_src.shape[1] == target.shape[1] else {}
    maps |= {
        f"{prefix}rotated": lambda x: x @ rotation,
        f"{prefix}affine": lambda x: F.normalize(torch.from_numpy(x) @ weight + bias, dim=-1).numpy(),
    }
    for name, ranking in (("mlp_mse", 0.0), ("mlp_ranking", 1.0)):
        began = time.time()
        adapter, _ = fit_teacher_adapter(emb_src, emb_tgt, target, AdapterSettings(pairs=len(sources), ranking=ranking))
        fit_seconds[prefix + name] = round(time.time() - began)
        maps[prefix + name] = adapter.map
        print(f"{prefix}{name} fitted in {fit_seconds[prefix + name]} s", flush=True)
    return maps


def main(workspace: Path, out: Path, n_pairs: int, base_spec: str | None) -> None:
    started = time.time()
    models = {"": load_sentence_transformer(str(workspace / "models/student"))}
    if base_spec:
        models["base_"] = load_sentence_transformer(base_spec)
    teacher = load_sentence_transformer(TEACHER)
    sources, translations, teacher_vectors = parallel_sample(workspace / TRAIN_TSV, n_pairs)
    target = torch.from_numpy(teacher_vectors)
    fit_seconds: dict[str, int] = {}
    maps = {
        prefix: fit_maps(
            model,
            sources,
            translations,
            target,
            prefix,
            fit_seconds,
            workspace / "probe_cache" / f"{prefix or 'student_'}{len(sources)}.npz",
        )
        for prefix, model in models.items()
    }
    names = [name for family in maps.values() for name in family]

    def measure(pairs: dict[str, tuple[list[str], list[str]]]) -> dict[str, dict[str, dict[str, float]]]:
        results: dict[str, dict[str, dict[str, float]]] = {}
        for lang, (english, xx) in pairs.items():
            en_teacher = encode(teacher, english)
            results[lang] = {}
            for prefix, model in models.items():
                xx_model = encode(model, xx)
                with torch.no_grad():
                    results[lang].update(
                        {
                            name: retrieval(np.ascontiguousarray(fn(xx_model), dtype=np.float32), en_teacher)
                            for name, fn in maps[prefix].items()
                        }
                    )
            print(lang, {k: round(v["average"], 1) for k, v in results[lang].items()}, flush=True)
        return results

    dev_results = measure(dev_pairs_by_language(workspace / "data/parallel/dev.tsv.gz", LANGUAGES, 200))
    flores_dir = mirror_dir() / "eval/flores200-devtest"
    english = read_flores(flores_file(flores_dir, "en"))
    flores_results = measure({lang: (english, read_flores(flores_file(flores_dir, lang))) for lang in LANGUAGES})
    report = {
        "what": "teacher-space retrieval (map(model(translation)) <-> teacher(English)) of an exported student "
        "(and, prefixed base_, of the untrained student) under maps fitted on its embeddings of training pairs",
        "command": (
            f"python -m bench.probes.teacher_space_adapter {workspace} {out} {n_pairs} {base_spec or ''}"
        ).strip(),
        "teacher": TEACHER,
        "fit_pairs": len(sources),
        "fit_seconds": fit_seconds,
        "dev": {name: summarise({lang: r[name] for lang, r in dev_results.items()}) for name in names},
        "flores": {name: summarise({lang: r[name] for lang, r in flores_results.items()}) for name in names},
        "per_language": {"dev": dev_results, "flores": flores_results},
        "seconds": round(time.time() - started),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: report[k] for k in ("dev", "flores", "seconds")}, indent=1))


if __name__ == "__main__":
    main(
        Path(sys.argv[1]),
        Path(sys.argv[2]),
        int(sys.argv[3]) if len(sys.argv) > 3 else 16000,
        sys.argv[4] if len(sys.argv) > 4 else None,
    )
