"""Cross-model semantic search: query an index of one model's embeddings with another model.

A distilled student lives in its teacher's vector space, so an English collection embedded once
with the teacher (``xdistill encode english.txt --model <teacher> -o index.npy``) can be searched
with queries in any language embedded by the student, and a student-built index with teacher
queries. :func:`search_index` checks that both sides have the same dimension and returns the
``k`` nearest corpus lines (cosine) of every query.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from xdistill.errors import InputFileError
from xdistill.mining.knn import knn_search
from xdistill.mining.stream import LineFile, tsv_field
from xdistill.vectors import as_float32_matrix


@dataclass(frozen=True)
class Hit:
    query: int  # 0-based line of the query file
    rank: int  # 1 = nearest
    corpus: int  # 0-based line of the corpus file
    score: float  # cosine similarity


INDEX_CHECK_ROWS = 1000  # rows whose length is checked when an index is opened
INDEX_NORM_TOLERANCE = 1e-2  # float16 indexes round lengths by ~1e-3
MAX_EXTRA_NEIGHBOURS = 1024  # blank corpus lines searched past; more: the text rows are searched alone


def load_index(path: str | Path) -> np.ndarray:
    """A ``.npy`` matrix of L2-normalised corpus embeddings (what ``xdistill encode`` writes)."""
    path = Path(path)
    if not path.is_file():
        raise InputFileError(path, "index file not found (embed the corpus with `xdistill encode` first)")
    try:
        matrix = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, EOFError, OSError) as exc:
        # an empty file ends early (EOFError), a text file reads as a refused pickle (ValueError)
        raise InputFileError(
            path,
            f"not a .npy file (expected the embedding matrix `xdistill encode` writes): {exc or type(exc).__name__}",
        ) from None
    if not isinstance(matrix, np.ndarray):  # an .npz archive loads as a mapping of arrays
        matrix.close()
        raise InputFileError(path, "not a .npy file but an .npz archive; give the .npy matrix `xdistill encode` writes")
    if matrix.ndim != 2 or matrix.shape[0] == 0:
        raise InputFileError(path, f"expected a non-empty 2-D embedding matrix, got shape {matrix.shape}")
    if not np.issubdtype(matrix.dtype, np.floating):
        raise InputFileError(path, f"expected float embeddings, got dtype {matrix.dtype}")
    # scores are cosines only on unit rows (inner product search); a sample keeps a huge index cheap to open
    norms = np.linalg.norm(np.asarray(matrix[:INDEX_CHECK_ROWS], dtype=np.float64), axis=1)
    off = np.flatnonzero(~(np.abs(norms - 1) <= INDEX_NORM_TOLERANCE))
    if off.size:
        raise InputFileError(
            path,
            f"row {off[0]} has length {norms[off[0]]:.4g}, not 1: the index must hold "
            "L2-normalised embeddings (as `xdistill encode` writes them)",
        )
    return matrix


def search_index(
    queries: np.ndarray,
    corpus: np.ndarray,
    k: int,
    *,
    index_path: str | Path = "index",
    query_source: str = "queries",
    skip_rows: np.ndarray | None = None,
) -> Iterator[Hit]:
    """The ``k`` nearest corpus rows of each query row (both L2-normalised), best first.

    ``skip_rows``: corpus rows never returned (the blank lines of the corpus: `xdistill encode` embeds
    every line, and the embedding of nothing sits close to short queries).
    """
    if queries.shape[1] != corpus.shape[1]:
        raise InputFileError(
            index_path,
            f"the index holds {corpus.shape[1]}-d vectors but {query_source} embeds "
            f"{queries.shape[1]}-d: query with a model that shares the index model's "
            "space (the teacher and its distilled student do)",
        )
    skipped = np.zeros(len(corpus), bool)
    if skip_rows is not None:
        skipped[skip_rows] = True
    extra, kept_rows = int(skipped.sum()), None
    if extra > MAX_EXTRA_NEIGHBOURS:
        # many blank lines (a corpus of paragraphs): asking for k + (blank lines) neighbours would grow the
        # result with each one, so search a copy of the text rows instead (memory for speed)
        kept_rows, extra = np.flatnonzero(~skipped), 0
        corpus = corpus[kept_rows]
    if not len(corpus):
        return
    scores, ids = knn_search(as_float32_matrix(queries, "queries"), as_float32_matrix(corpus, "index"), k + extra)
    if kept_rows is not None:
        ids = np.where(ids >= 0, kept_rows[np.maximum(ids, 0)], -1)
    for row in range(len(queries)):
        # an IVF search may fill slots with -1; a few skipped rows were searched past
        kept = [column for column in range(ids.shape[1]) if ids[row, column] >= 0 and not skipped[ids[row, column]]]
        for rank, column in enumerate(kept[:k], start=1):
            yield Hit(row, rank, int(ids[row, column]), float(scores[row, column]))


def write_hits(hits: list[Hit], queries: list[str], corpus: LineFile | None, output: Path) -> int:
    """``query_line<TAB>rank<TAB>corpus_line<TAB>score<TAB>query<TAB>corpus_text`` (1-based lines); returns rows.

    ``corpus_text`` is read from the corpus text file when one is given (else left empty).
    """
    from xdistill.io import atomic_path

    texts = corpus.lines(np.array([hit.corpus for hit in hits], dtype=np.int64)) if corpus and hits else None
    with atomic_path(output) as tmp, open(tmp, "w", encoding="utf-8", newline="") as handle:
        handle.write("query_line\trank\tcorpus_line\tscore\tquery\tcorpus_text\n")
        handle.writelines(
            f"{hit.query + 1}\t{hit.rank}\t{hit.corpus + 1}\t{hit.score:.4f}\t"
            f"{tsv_field(queries[hit.query])}\t{tsv_field(texts[number]) if texts else ''}\n"
            for number, hit in enumerate(hits)
        )
    return len(hits)
