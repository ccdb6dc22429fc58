"""What the trainer measures on held-out data to pick checkpoints and the interpolation weight.

Only development data is used here, never an evaluation set:

- the held-out parallel pairs (``data/parallel/dev.tsv.gz``): MSE to the teacher, translation
  retrieval between the student's embeddings of both sides, and *teacher-space retrieval*, the
  teacher's vector of the English source against the student's vector of the translation, both
  directions (what a user relies on when querying an index the teacher built);
- the stsb-multi-mt **dev** split (the evaluation reads its test split) for the languages that
  have it: English, each language on its own and each language against English;
- the dev mining blocks (``data/parallel/dev_mining.tsv.gz``): per language, the last pairs of a
  news source in document order, never trained on, mined as FLORES is (:func:`block_mining_f1`).

``dev_score``, the default selection metric, is the weighted mean of four numbers in points:
STS (the mean of the monolingual and the cross-lingual averages, Spearman x 100), retrieval
accuracy (%), teacher-space retrieval accuracy (%) and *dev mining* F1 (x 100): the BUCC task
rebuilt from the held-out pairs (:func:`dev_mining_f1`). It covers what users need from the
model (similarity, retrieval, mining, a shared space with the teacher) so no single one is
traded away unseen. Weights are ``train.dev_score_weights``.

Why mining has its own part: margin mining among distractors reacts to changes of the embedding
geometry that leave nearest-neighbour retrieval untouched. On the embedded default, 120 steps
of MSE moved dev retrieval by +1 point while FLORES mining F1 fell by 6 (metrics/eval), and a
dev score without mining could not see it.

Which mining: where dev mining blocks exist, the mining part is their F1 (``dev_block_mining_f1``),
else the pooled task on the held-out pairs (``dev_mining_f1``). Measured along one student's WiSE-FT
line (bench/results/diagnostics/dev_mining_proxy.json), the pooled task (short, off-topic pairs
of every language, 20 % gold) rose towards the distilled end while FLORES mining fell by 14
points; mining on held-out news blocks (on-topic distractors, FLORES's gold share) fell with it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from xdistill.config import SECTION_CONFIG, parse_section
from xdistill.errors import XdistillError
from xdistill.evaluation.metrics import mean_or_nan, paired_cosine, spearman_x100
from xdistill.training.batches import tokenize_texts
from xdistill.training.tokenized import Featurizer, TokenizedPairs, encode_token_ids
from xdistill.vectors import l2_normalise

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

log = logging.getLogger(__name__)

# selection metric -> "max" or "min"
SELECTION_METRICS = {"dev_score": "max", "dev_mse_x100": "min", "dev_accuracy": "max", "dev_sts": "max"}


@dataclass(frozen=True)
class DevScoreWeights:
    """``train.dev_score_weights``: how much each part counts in ``dev_score`` (0 = left out)."""

    __pydantic_config__ = SECTION_CONFIG

    sts: float = 1.0
    accuracy: float = 1.0
    teacher_accuracy: float = 1.0
    mining: float = 1.0

    def __post_init__(self) -> None:
        if min(asdict(self).values()) < 0 or not any(asdict(self).values()):
            raise XdistillError(
                f"params train.dev_score_weights: weights must be >= 0, one of them > 0; got {asdict(self)}"
            )

    @classmethod
    def from_params(cls, section: Mapping[str, Any] | None) -> DevScoreWeights:
        return parse_section(cls, section, "train.dev_score_weights")

    def combine(self, parts: Mapping[str, float]) -> float:
        """Weighted mean of the finite parts (a part that cannot be measured drops out)."""
        pairs = [(w, parts[name]) for name, w in asdict(self).items() if w > 0 and np.isfinite(parts.get(name, np.nan))]
        if not pairs:
            return float("nan")
        return float(sum(w * v for w, v in pairs) / sum(w for w, _ in pairs))


@dataclass
class TokenizedSTS:
    """One STS dev set, tokenised: pairs of token-id lists and their gold scores."""

    name: str
    first: list[list[int]]
    second: list[list[int]]
    gold: np.ndarray

    @property
    def monolingual(self) -> bool:
        left, _, right = self.name.partition("-")
        return left == right


def load_sts_dev(
    stsb_dir: str | Path | None,
    languages: Sequence[str],
    tokenizer,
    prompt: str,
    max_length: int,
    max_pairs: int | None,
) -> list[TokenizedSTS]:
    """The stsb-multi-mt dev sets of ``languages`` (and English), tokenised; [] when off or absent."""
    from xdistill.evaluation.sts import build_stsb_sets

    if stsb_dir is None or max_pairs == 0:
        return []
    if not Path(stsb_dir).is_dir():
        log.warning("%s: no stsb-multi-mt folder, so no STS in the dev score (the corpora stage stages it)", stsb_dir)
        return []
    monolingual, crosslingual = build_stsb_sets(stsb_dir, sorted(set(languages)), max_pairs, split="dev")
    return [
        TokenizedSTS(
            s.name,
            tokenize_texts(tokenizer, s.sentences1, max_length, prompt),
            tokenize_texts(tokenizer, s.sentences2, max_length, prompt),
            np.asarray(s.gold),
        )
        for s in monolingual + crosslingual
    ]


def sts_dev_digests(stsb_dir: str | Path | None, languages: Sequence[str]) -> dict[str, str]:
    """A digest of each STS dev file :func:`load_sts_dev` reads, by language: part of the checkpoints' key
    (other dev data select other checkpoints), independent of where the folder lies."""
    from xdistill.evaluation.sts import STSB_SPLIT_FILE
    from xdistill.training.checkpoint import file_digest

    if stsb_dir is None:
        return {}
    paths = {lang: Path(stsb_dir) / STSB_SPLIT_FILE.format(lang=lang, split="dev") for lang in {"en", *languages}}
    return {lang: file_digest(path) for lang, path in sorted(paths.items()) if path.is_file()}


@dataclass
class TokenizedBlock:
    """One language's dev mining block, tokenised: English sources and their translations, in file order."""

    lang: str
    src: list[list[int]]
    tgt: list[list[int]]


def load_mining_blocks(path: str | Path | None, tokenizer, prompt: str, max_length: int) -> list[TokenizedBlock]:
    """The dev mining blocks of ``path`` (the parallel stage's ``dev_mining.tsv.gz``), one per language."""
    from xdistill.data.parallel_tsv import has_pairs, read_parallel_pairs

    if path is None:
        return []
    if not Path(path).is_file():
        log.warning("%s: no dev mining file, so no dev mining (the parallel stage writes it)", path)
        return []
    if not has_pairs(path):
        return []
    pairs = read_parallel_pairs(path)
    blocks = []
    for lang in sorted(set(pairs.langs)):
        rows = [i for i, row_lang in enumerate(pairs.langs) if row_lang == lang]
        blocks.append(
            TokenizedBlock(
                lang,
                tokenize_texts(tokenizer, [pairs.sources[i] for i in rows], max_length, prompt),
                tokenize_texts(tokenizer, [pairs.translations[i] for i in rows], max_length, prompt),
            )
        )
    return blocks


@dataclass
class ValidationData:
    """Everything :func:`validate` measures on."""

    pairs: TokenizedPairs
    sts: list[TokenizedSTS]
    mining_blocks: list[TokenizedBlock] = field(default_factory=list)


class _UniqueTexts:
    """Embeds each distinct token-id list once per validation (STS sets share many sentences)."""

    def __init__(self) -> None:
        self.index: dict[tuple[int, ...], int] = {}
        self.ids: list[list[int]] = []

    def add(self, token_ids: Iterable[Sequence[int]]) -> np.ndarray:
        rows = []
        for ids in token_ids:
            key = tuple(ids)
            if key not in self.index:
                self.index[key] = len(self.ids)
                self.ids.append(list(ids))
            rows.append(self.index[key])
        return np.asarray(rows, dtype=np.int64)


def validate(
    student: SentenceTransformer,
    objective: torch.nn.Module,
    featurize: Featurizer,
    data: ValidationData,
    batch_size: int,
    weights: DevScoreWeights,
    mining_threshold: str = "oracle",
) -> dict[str, float]:
    """Every dev metric of the student as it is now (see the module docstring); all in points but MSE and cosine.

    ``mining_threshold`` is how dev mining sets its score threshold (:func:`dev_mining_f1`)."""
    from xdistill.mining.knn import retrieval_accuracy

    texts = _UniqueTexts()
    pair_rows = texts.add(data.pairs.src), texts.add(data.pairs.tgt)
    sts_rows = [(texts.add(s.first), texts.add(s.second)) for s in data.sts]
    block_rows = [(texts.add(b.src), texts.add(b.tgt)) for b in data.mining_blocks]
    embeddings, src, tgt = _encode(student, featurize, texts, pair_rows, batch_size)

    metrics = _teacher_metrics(src, tgt, data, objective)
    src2tgt, tgt2src = retrieval_accuracy(src.numpy(), tgt.numpy())
    metrics.update(
        dev_accuracy_src2tgt=100 * src2tgt, dev_accuracy_tgt2src=100 * tgt2src, dev_accuracy=50 * (src2tgt + tgt2src)
    )
    metrics["dev_mean_pairwise_cosine"] = mean_pairwise_cosine(torch.cat([src, tgt]))
    metrics["dev_mining_f1"] = dev_mining_f1(src.numpy(), tgt.numpy(), threshold=mining_threshold)
    metrics.update(_sts_scores(data.sts, sts_rows, embeddings.numpy()))
    metrics.update(_block_mining_scores(data.mining_blocks, block_rows, embeddings.numpy(), mining_threshold))
    metrics["dev_score"] = _dev_score(metrics, weights)
    return metrics


def validate_rotated(
    before: Mapping[str, float],
    student: SentenceTransformer,
    objective: torch.nn.Module,
    featurize: Featurizer,
    data: ValidationData,
    batch_size: int,
    weights: DevScoreWeights,
) -> dict[str, float]:
    """:func:`validate` of a student whose output was just rotated (multiplied by an orthogonal matrix), given
    its metrics ``before`` the rotation: only the dev pairs are encoded again.

    A rotation keeps every cosine between two of the student's embeddings, so STS, retrieval, mining and the
    mean cosine stay as they were; what compares the student with the teacher (MSE, teacher-space retrieval),
    and the dev score through it, is measured anew."""
    texts = _UniqueTexts()
    pair_rows = texts.add(data.pairs.src), texts.add(data.pairs.tgt)
    _, src, tgt = _encode(student, featurize, texts, pair_rows, batch_size)
    metrics = {**before, **_teacher_metrics(src, tgt, data, objective)}
    metrics["dev_score"] = _dev_score(metrics, weights)
    return metrics


def _encode(
    student: SentenceTransformer,
    featurize: Featurizer,
    texts: _UniqueTexts,
    pair_rows: tuple[np.ndarray, np.ndarray],
    batch_size: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every distinct text's embedding, and the dev pairs' sources and translations among them."""
    embeddings = encode_token_ids(student, featurize, texts.ids, batch_size)
    return embeddings, embeddings[torch.as_tensor(pair_rows[0])], embeddings[torch.as_tensor(pair_rows[1])]


def _teacher_metrics(
    src: torch.Tensor, tgt: torch.Tensor, data: ValidationData, objective: torch.nn.Module
) -> dict[str, float]:
    """The dev pairs' metrics against the teacher's vectors: MSE (through the objective's projection, where the
    student's dimension differs) and teacher-space retrieval (only a student in the teacher's space has it)."""
    from xdistill.mining.knn import retrieval_accuracy

    teacher = torch.as_tensor(data.pairs.teacher.numpy())  # dev pairs: every vector, whether held or mapped
    metrics: dict[str, float] = {}
    src_t, tgt_t = (
        _in_teacher_space(src, objective, teacher.shape[1]),
        _in_teacher_space(tgt, objective, teacher.shape[1]),
    )
    if src_t is not None:
        assert tgt_t is not None  # the same objective maps both sides, or neither
        metrics["dev_mse_x100_src"] = 100 * float(torch.mean((src_t - teacher) ** 2))
        metrics["dev_mse_x100_tgt"] = 100 * float(torch.mean((tgt_t - teacher) ** 2))
        metrics["dev_mse_x100"] = (metrics["dev_mse_x100_src"] + metrics["dev_mse_x100_tgt"]) / 2
    else:
        metrics["dev_mse_x100"] = float("nan")
    if src.shape[1] == teacher.shape[1]:
        # only a student whose exported embeddings live in the teacher's space can share its index
        en2xx, xx2en = retrieval_accuracy(teacher.numpy(), tgt.numpy())
        metrics.update(
            dev_teacher_accuracy_en2xx=100 * en2xx,
            dev_teacher_accuracy_xx2en=100 * xx2en,
            dev_teacher_accuracy=50 * (en2xx + xx2en),
        )
    else:
        metrics["dev_teacher_accuracy"] = float("nan")
    return metrics


def _dev_score(metrics: Mapping[str, float], weights: DevScoreWeights) -> float:
    """The weighted dev score of the metrics (the module docstring): block mining where it was measured."""
    mining = metrics.get("dev_block_mining_f1", float("nan"))
    return weights.combine(
        {
            "sts": metrics["dev_sts"],
            "accuracy": metrics["dev_accuracy"],
            "teacher_accuracy": metrics["dev_teacher_accuracy"],
            "mining": mining if np.isfinite(mining) else metrics["dev_mining_f1"],
        }
    )


DEV_MINING_GOLD_SHARE = 0.2  # FLORES mining uses 5 %; on a few hundred dev pairs that is too few gold pairs
DEV_MINING_MIN_PAIRS = 20
DEV_MINING_THRESHOLDS = ("oracle", "transfer")


def dev_mining_f1(
    src: np.ndarray,
    tgt: np.ndarray,
    *,
    gold_share: float = DEV_MINING_GOLD_SHARE,
    k: int = 4,
    seed: int = 0,
    threshold: str = "oracle",
) -> float:
    """BUCC-style mining F1 x 100 on held-out pairs (rows of ``src``/``tgt`` are translations).

    A fixed random ``gold_share`` of the pairs keeps both sides; of the rest, half keep only the
    translation and half only the English source, so every kept sentence without its partner is
    a distractor. Translations are mined against sources with the ratio margin (k neighbours, both
    directions, as the evaluation's mining). NaN with fewer than 20 pairs (per half with ``transfer``).

    ``threshold``: ``oracle`` takes F1 at the best threshold on the same pairs; ``transfer`` splits
    the pairs in two halves, builds the task on each, tunes the threshold on one half and scores it
    on the other (both ways, F1 averaged), as the evaluation's mining tunes on its train split and
    reports its test split: a student whose margin scores shift between samples loses precision
    here as it does there, which the oracle cannot see.
    """
    if threshold not in DEV_MINING_THRESHOLDS:
        raise XdistillError(
            f"dev mining threshold must be one of {', '.join(DEV_MINING_THRESHOLDS)}, got {threshold!r}"
        )
    from xdistill.mining.bucc import tune_threshold

    order = np.random.default_rng(seed).permutation(len(src))
    if threshold == "oracle":
        task = _dev_mining_task(src[order], tgt[order], gold_share, k)
        return float("nan") if task is None else 100 * tune_threshold(*task)[1]
    halves = [order[: len(order) // 2], order[len(order) // 2 :]]
    first, second = (_dev_mining_task(src[half], tgt[half], gold_share, k) for half in halves)
    if first is None or second is None:
        return float("nan")
    scores = []
    for tune, test in ((first, second), (second, first)):
        cut, _ = tune_threshold(*tune)
        scores.append(_f1_at(cut, *test))
    return 100 * float(np.mean(scores))


BLOCK_MINING_GOLD_SHARE = 13 / 506  # FLORES mining: 13 gold pairs in each half of 506 sentence numbers
BLOCK_MINING_SEEDS = 5  # which pairs are gold is drawn at random: the mean over draws is steadier


def block_mining_f1(src: np.ndarray, tgt: np.ndarray, threshold: str = "oracle") -> float:
    """Mining F1 x 100 on one dev mining block, built as the FLORES mining benchmark is.

    The block's pairs come from whole news documents in file order, so the distractors are on-topic
    as FLORES's are (its sentences run through whole articles); the gold share is FLORES's. The
    task is :func:`dev_mining_f1`'s, averaged over ``BLOCK_MINING_SEEDS`` draws of the gold pairs.
    """
    return float(
        np.mean(
            [
                dev_mining_f1(src, tgt, gold_share=BLOCK_MINING_GOLD_SHARE, seed=seed, threshold=threshold)
                for seed in range(BLOCK_MINING_SEEDS)
            ]
        )
    )


def _block_mining_scores(
    blocks: list[TokenizedBlock], rows: list[tuple[np.ndarray, np.ndarray]], embeddings: np.ndarray, threshold: str
) -> dict[str, float]:
    if not blocks:
        return {}
    scores = {
        f"dev_block_mining_f1_{b.lang}": block_mining_f1(embeddings[s], embeddings[t], threshold)
        for b, (s, t) in zip(blocks, rows, strict=True)
    }
    return {**scores, "dev_block_mining_f1": mean_or_nan(list(scores.values()))}


def _dev_mining_task(
    src: np.ndarray, tgt: np.ndarray, gold_share: float, k: int
) -> tuple[np.ndarray, np.ndarray, int] | None:
    """Mine the task built from these pairs (the first ``gold_share`` of rows are gold):
    ``(margin scores, is_gold per candidate, n_gold)``, or None with too few pairs."""
    from xdistill.mining.margin import mine_embeddings

    n = len(src)
    if n < DEV_MINING_MIN_PAIRS:
        return None
    n_gold = max(1, round(n * gold_share))
    rest = np.arange(n_gold, n)
    translations = np.concatenate([np.arange(n_gold), rest[: len(rest) // 2]])
    sources = np.concatenate([np.arange(n_gold), rest[len(rest) // 2 :]])
    # k neighbours as the FLORES benchmark has, whatever the gold count (with k = 1 every mutual nearest
    # neighbour's ratio margin is exactly 1 and no threshold separates them); the search caps k at the pool
    mined = mine_embeddings(
        l2_normalise(tgt[translations]), l2_normalise(src[sources]), k=k, margin="ratio", retrieval="max"
    )
    is_gold = (mined.src == mined.tgt) & (mined.src < n_gold)  # gold rows share their index on both sides
    return mined.scores, is_gold, n_gold


def _f1_at(cut: float, scores: np.ndarray, is_gold: np.ndarray, n_gold: int) -> float:
    """F1 of keeping the candidates scoring at least ``cut``."""
    kept = scores >= cut
    correct = int(np.sum(is_gold & kept))
    if correct == 0:
        return 0.0
    precision, recall = correct / int(np.sum(kept)), correct / n_gold
    return 2 * precision * recall / (precision + recall)


def _in_teacher_space(embeddings: torch.Tensor, objective: torch.nn.Module, teacher_dim: int) -> torch.Tensor | None:
    """The embeddings as the teacher-space losses see them: as they are when the MSE trains them towards the
    teacher (or nothing else could), through the feature-distillation projection when only it does."""
    projection = getattr(objective, "projection", None)
    mse_trained = getattr(getattr(objective, "config", None), "mse", 0.0) > 0
    if embeddings.shape[1] == teacher_dim and (projection is None or mse_trained):
        return embeddings
    if projection is None:
        return None
    with torch.no_grad():
        device = next(projection.parameters()).device
        return projection(embeddings.to(device)).float().cpu()


def _sts_scores(
    sets: list[TokenizedSTS], rows: list[tuple[np.ndarray, np.ndarray]], embeddings: np.ndarray
) -> dict[str, float]:
    scores = {
        f"dev_sts_{s.name}": spearman_x100(paired_cosine(embeddings[a], embeddings[b]), s.gold)
        for s, (a, b) in zip(sets, rows, strict=True)
    }
    mono = mean_or_nan([scores[f"dev_sts_{s.name}"] for s in sets if s.monolingual])
    cross = mean_or_nan([scores[f"dev_sts_{s.name}"] for s in sets if not s.monolingual])
    return {**scores, "dev_sts_monolingual": mono, "dev_sts_crosslingual": cross, "dev_sts": mean_or_nan([mono, cross])}


def mean_pairwise_cosine(embeddings: torch.Tensor) -> float:
    """Mean cosine similarity over all distinct pairs of rows (1.0 = every row identical)."""
    n = embeddings.shape[0]
    if n < 2:
        return 0.0
    unit = torch.nn.functional.normalize(embeddings.double(), dim=1)
    total = unit.sum(dim=0)
    return float((total @ total - n) / (n * (n - 1)))


def is_better(metric: str, value: float, best: float | None) -> bool:
    """Whether ``value`` of selection ``metric`` beats ``best`` (NaN never does; anything beats None)."""
    if not np.isfinite(value):
        return False
    if best is None or not np.isfinite(best):
        return True
    return value < best if SELECTION_METRICS[metric] == "min" else value > best


class TrainingCollapsedError(XdistillError):
    """Dev embeddings collapsed towards one direction: ``mean_cosine`` > ``threshold`` at ``step``."""

    def __init__(self, message: str, *, step: int, mean_cosine: float, threshold: float) -> None:
        super().__init__(message)
        self.step, self.mean_cosine, self.threshold = step, mean_cosine, threshold


def check_collapse(metrics: Mapping[str, float], threshold: float, step: int) -> None:
    """Fail loud when dev embeddings have collapsed towards one direction."""
    value = metrics["dev_mean_pairwise_cosine"]
    if value > threshold:
        raise TrainingCollapsedError(
            f"training collapsed at step {step}: mean pairwise cosine of dev embeddings is {value:.4f} "
            f"> train.collapse_threshold {threshold} (all sentences map to nearly the same vector; "
            "lower train.learning_rate, check the loss weights, or raise the threshold if the untrained student "
            "is this anisotropic from the start)",
            step=step,
            mean_cosine=float(value),
            threshold=threshold,
        )
