"""Which dev mining proxy tracks FLORES mining? A diagnostic over the WiSE-FT line of one trained student.

For each interpolation weight a between the starting student (a=0: the untrained mE5 with its
Procrustes head, the untrained student's cosines) and the best checkpoint (a=1), it measures four mining scores:

- ``dev_pooled``: the trainer's dev mining (held-out pairs of every language in one task, 20 % gold);
- ``dev_per_language``: the same task built per language and averaged;
- ``wmt_oracle`` / ``wmt_transfer``: FLORES-like mining on news blocks: per language, 1012 WMT
  newstest pairs in document order (so fillers are on-topic, as FLORES's runs from one article),
  none of them in the member's training file, 13 gold pairs per 506; oracle threshold, or tuned on
  one half and scored on the other; 10 seeds;
- ``flores_tune_oracle``: FLORES mining on the benchmark's *tune* half only (the 506 sentence
  numbers the evaluation uses for its threshold; oracle threshold, 10 seeds). The test half, which
  the evaluation reports, is never read.

Usage: ``python -m bench.probes.dev_mining_proxy WORKSPACE bench/results/diagnostics/dev_mining_proxy.json
[0.25,0.5]``, where WORKSPACE holds a finished member's ``models/student``,
``data/checkpoints/{start,best}.pt`` and ``data/parallel`` (a copy of the member's experiment
workspace, taken before ``python -m bench.quality`` removes it). Resumable: a weight already in
OUT.json is skipped.
"""

from __future__ import annotations

import gzip
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from bench.paths import mirror_dir
from xdistill.data.eval_formats import read_flores
from xdistill.data.parallel_tsv import read_parallel_pairs
from xdistill.mining.flores import ENGLISH, flores_file, split_plan
from xdistill.training.interpolation import interpolate_states
from xdistill.training.validation import dev_mining_f1

WS = Path(sys.argv[1])
OUT = Path(sys.argv[2])
# optional third argument: the weights to measure, e.g. 0.25,0.5 (default: the trainer's five)
WEIGHTS = [float(a) for a in sys.argv[3].split(",")] if len(sys.argv) > 3 else [0.0, 0.25, 0.5, 0.75, 1.0]
MIRROR = mirror_dir()  # the corpora mirror, found as every benchmark finds it
FLORES = MIRROR / "eval/flores200-devtest"
LANGS = ["ar", "de", "es", "fr", "it", "nl", "ru", "tr", "zh"]
WMT_SETS = {
    "de": "newstest2018.deu-eng",
    "es": "newstest2013",
    "fr": "newstest2013",
    "it": "newstest2009",
    "ru": "newstest2018.eng-rus",
    "tr": "newstest2018.eng-tur",
    "zh": "newstest2018.eng-zho",
}
BLOCK = 1012
GOLD = 13 / 506  # FLORES: 13 gold of 259 per side in a half of 506
SEEDS = range(10)


def wmt_blocks(train_sentences: set[str]) -> dict[str, tuple[list[str], list[str]]]:
    blocks = {}
    for lang, testset in WMT_SETS.items():
        en, xx = [], []
        with gzip.open(MIRROR / f"train/wmt-newstest/newstest.en-{lang}.tsv.gz", "rt", encoding="utf-8") as f:
            next(f)
            for line in f:
                name, s, t = line.rstrip("\n").split("\t")[:3]
                if name != testset or s in train_sentences or t in train_sentences or len(en) >= BLOCK:
                    continue
                en.append(s)
                xx.append(t)
        blocks[lang] = (en, xx)
    return blocks


def mining(src: np.ndarray, tgt: np.ndarray, gold: float, threshold: str) -> float:
    return float(np.mean([dev_mining_f1(src, tgt, gold_share=gold, seed=s, threshold=threshold) for s in SEEDS]))


def main() -> None:
    from sentence_transformers import SentenceTransformer

    train = read_parallel_pairs(WS / "data/parallel/train.tsv.gz")
    train_sentences = set(train.sources) | set(train.translations)
    dev = read_parallel_pairs(WS / "data/parallel/dev.tsv.gz").spread(900)
    blocks = wmt_blocks(train_sentences)
    print({k: len(v[0]) for k, v in blocks.items()}, flush=True)
    english = read_flores(flores_file(FLORES, ENGLISH))
    tune = split_plan(13, 0.05)["train"]
    tune_numbers = np.concatenate([tune["gold"], tune["xx_only"], tune["en_only"]])
    flores = {lang: read_flores(flores_file(FLORES, lang)) for lang in LANGS}

    model = SentenceTransformer(str(WS / "models/student"), device="cpu")
    init = torch.load(WS / "data/checkpoints/start.pt", map_location="cpu", weights_only=False)["model"]
    best = torch.load(WS / "data/checkpoints/best.pt", map_location="cpu", weights_only=False)["model"]
    models = {f"a={a:g}": a for a in WEIGHTS}
    results = json.loads(OUT.read_text()) if OUT.exists() else {}
    for name, a in models.items():
        if name in results:
            continue
        started = time.time()
        missing, unexpected = model.load_state_dict(interpolate_states(init, best, a), strict=False)
        assert not unexpected and all("word_embeddings" in k for k in missing), (missing, unexpected)

        def enc(texts):
            return model.encode(list(texts), batch_size=64, normalize_embeddings=True, convert_to_numpy=True)

        row = {}
        s, t = enc(dev.sources), enc(dev.translations)
        row["dev_pooled"] = dev_mining_f1(s, t)
        langs = np.asarray(dev.langs)
        row["dev_per_language"] = float(np.mean([dev_mining_f1(s[langs == lang], t[langs == lang]) for lang in LANGS]))
        wmt = {}
        for lang, (en, xx) in blocks.items():
            e, x = enc(en), enc(xx)
            wmt[lang] = (mining(e, x, GOLD, "oracle"), mining(e, x, GOLD, "transfer"))
        row["wmt_oracle"] = float(np.mean([v[0] for v in wmt.values()]))
        row["wmt_transfer"] = float(np.mean([v[1] for v in wmt.values()]))
        row["wmt_by_lang"] = wmt
        en_tune = enc([english[n] for n in tune_numbers])
        fl = {}
        for lang in LANGS:
            xx_tune = enc([flores[lang][n] for n in tune_numbers])
            fl[lang] = mining(en_tune, xx_tune, GOLD, "oracle")
        row["flores_tune_oracle"] = float(np.mean(list(fl.values())))
        row["flores_tune_by_lang"] = fl
        row["seconds"] = round(time.time() - started)
        results[name] = row
        OUT.write_text(json.dumps(results, indent=1))
        print(name, {k: (round(v, 2) if isinstance(v, float) else None) for k, v in row.items()}, flush=True)


if __name__ == "__main__":
    main()
