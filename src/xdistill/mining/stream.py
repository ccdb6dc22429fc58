"""Out-of-core building blocks for mining corpora larger than memory.

- Text files are read by line without loading them whole (:class:`LineFile` keeps only the
  byte offset of every line, 8 bytes a line, to fetch mined sentences back).
- Embeddings are written shard by shard into one ``.npy`` file (plain appends after the header,
  so only one shard is ever in memory) and read back by row ranges (:class:`NpyRows`).
- k-NN search runs corpus shard x query shard, keeping a running top-k per query
  (:func:`sharded_knn`); with ``index="ivf"`` one IVF index is trained on a sample of the
  corpus and filled shard by shard.
"""

from __future__ import annotations

import codecs
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import faiss
import numpy as np
from tqdm.auto import tqdm

from xdistill.errors import InputFileError, XdistillError
from xdistill.io import atomic_path
from xdistill.mining.knn import INDEX_KINDS, build_index, check_finite
from xdistill.mining.margin import MinedPairs, NeighbourLists, mine_from_neighbours
from xdistill.vectors import as_float32_matrix

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

    from xdistill.models.encoders import Encoder

logger = logging.getLogger(__name__)

DEFAULT_SHARD_ROWS = 100_000
_READ_CHUNK = 1 << 24
_TEXT_ROWS_BATCH = 100_000


class LineFile:
    """A UTF-8 text file of sentences, addressed by line number (offsets indexed once, text read on demand).

    Opening it reads the file once and refuses, naming the file (and line), what cannot be a text of
    sentences: an empty file, a file of empty lines, a binary file (a NUL byte), UTF-16 text and any
    other encoding that is not valid UTF-8. A UTF-8 byte-order mark is skipped. Lines end in LF or CRLF, or in
    a lone CR when the file's first block holds CRs and no LF (old Mac text), so no file is read as one line.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise InputFileError(self.path, "file not found")
        self.offsets = self._index_lines()

    def _index_lines(self) -> np.ndarray:
        """Byte offset of the start of every line, plus the file size at the end; checks the text on the way."""
        starts = [np.zeros(1, np.int64)]
        position = 0
        decoder = codecs.getincrementaldecoder("utf-8")()
        has_text = False
        line_end = ord("\n")
        with self.path.open("rb") as handle:
            while chunk := handle.read(_READ_CHUNK):
                if position == 0:
                    self._check_start(chunk)
                    line_end = ord("\r") if b"\r" in chunk and b"\n" not in chunk else line_end
                newlines = np.flatnonzero(np.frombuffer(chunk, np.uint8) == line_end)
                nul = chunk.find(b"\x00")
                if nul >= 0:
                    raise InputFileError(
                        self.path,
                        "binary file (a NUL byte), expected UTF-8 text with one sentence per line",
                        self._line_at(starts, newlines, position, nul),
                    )
                try:
                    text = decoder.decode(chunk)
                except UnicodeDecodeError as exc:
                    raise InputFileError(
                        self.path,
                        f"not valid UTF-8 ({exc.reason}); save the file as UTF-8",
                        self._line_at(starts, newlines, position, max(exc.start, 0)),
                    ) from None
                has_text = has_text or bool(text.replace("\ufeff", "").strip())
                starts.append(newlines.astype(np.int64) + position + 1)
                position += len(chunk)
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise InputFileError(
                self.path, "not valid UTF-8 (the file ends inside a character)", sum(len(s) for s in starts)
            ) from None
        if position == 0:
            raise InputFileError(self.path, "empty file: no sentence (expected one sentence per line)")
        if not has_text:
            raise InputFileError(self.path, "no sentence: every line is empty")
        offsets = np.concatenate(starts)
        if offsets[-1] != position:  # last line without a final newline
            offsets = np.append(offsets, position)
        return offsets

    def _check_start(self, chunk: bytes) -> None:
        if chunk.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
            raise InputFileError(self.path, "UTF-16 text (byte-order mark); save the file as UTF-8")

    @staticmethod
    def _line_at(starts: list[np.ndarray], newlines: np.ndarray, position: int, offset: int) -> int:
        """1-based line number of byte ``offset`` of the chunk that starts at ``position``."""
        before = sum(len(s) for s in starts) - 1  # newlines in the earlier chunks
        return before + int(np.searchsorted(newlines, offset)) + 1

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def _decode(self, raw: bytes, number: int) -> str:
        if number == 0:
            raw = raw.removeprefix(codecs.BOM_UTF8)
        try:
            return raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError as exc:
            raise InputFileError(self.path, f"not valid UTF-8 ({exc.reason})", number + 1) from exc

    def text_rows(self) -> np.ndarray:
        """0-based numbers of the lines that hold text (blank and whitespace-only lines left out).

        Mining embeds only these: an empty line is no sentence, and empty lines are each other's
        nearest neighbours, so they would come out as the best "pairs".
        """
        rows = [
            start + np.flatnonzero([holds_text(text) for text in texts])
            for start, texts in zip(range(0, len(self), _TEXT_ROWS_BATCH), self.batches(_TEXT_ROWS_BATCH))
        ]
        return np.concatenate(rows).astype(np.int64) if rows else np.zeros(0, np.int64)

    def batches(self, size: int) -> Iterator[list[str]]:
        """Consecutive lines in lists of at most ``size``."""
        with self.path.open("rb") as handle:
            for start in range(0, len(self), size):
                stop = min(start + size, len(self))
                block = handle.read(int(self.offsets[stop] - self.offsets[start]))
                bounds = self.offsets[start : stop + 1] - self.offsets[start]
                yield [self._decode(block[bounds[i] : bounds[i + 1]], start + i) for i in range(stop - start)]

    def lines(self, numbers: np.ndarray) -> list[str]:
        """The lines with the given 0-based numbers, in the given order."""
        result = []
        with self.path.open("rb") as handle:
            for number in numbers.tolist():
                handle.seek(int(self.offsets[number]))
                result.append(self._decode(handle.read(int(self.offsets[number + 1] - self.offsets[number])), number))
        return result


def holds_text(line: str) -> bool:
    """Whether a line is a sentence: blank and whitespace-only lines are not (mining and search skip them)."""
    return bool(line.strip())


def tsv_field(text: str) -> str:
    """``text`` as one field of a TSV line: a tab or line break inside it would shift the columns or
    split the row, so each becomes a space (the mining and search outputs are read back by column)."""
    return text.translate(_TSV_UNSAFE)


_TSV_UNSAFE = str.maketrans(
    {
        "\t": " ",
        "\n": " ",
        "\r": " ",
        "\v": " ",
        "\f": " ",
        "\x1c": " ",
        "\x1d": " ",
        "\x1e": " ",
        "\x85": " ",
        "\u2028": " ",
        "\u2029": " ",
    }
)


class NpyRows:
    """Row-range reads from a 2-D float32 ``.npy`` file without mapping the whole file.

    ``fs`` (an fsspec filesystem, ``path`` a path within it) reads a file of a network store by range
    requests instead (:func:`xdistill.cluster.staging.open_rows`); ``name`` is what errors call it.
    """

    def __init__(self, path: str | Path, fs: AbstractFileSystem | None = None, name: str | None = None) -> None:
        self.path: str | Path = Path(path) if fs is None else str(path)
        self.fs, self.name = fs, name or str(path)
        try:
            with self._open() as handle:
                version = np.lib.format.read_magic(handle)
                read_header = (
                    np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
                )
                shape, fortran, dtype = read_header(handle)
                self.data_offset = handle.tell()
        except (OSError, ValueError) as exc:
            raise self._error(f"not a readable .npy file ({exc})") from exc
        if len(shape) != 2 or fortran or dtype != np.float32:
            raise self._error(f"expected a C-order float32 matrix, found shape {shape} dtype {dtype}")
        self.shape: tuple[int, int] = shape
        expected = self.data_offset + shape[0] * shape[1] * 4
        size = Path(self.path).stat().st_size if fs is None else int(fs.size(self.path))
        if size < expected:  # a cut-off copy: reads would quietly return fewer rows
            raise self._error(
                f"truncated: its header promises {shape[0]} x {shape[1]} float32 "
                f"({expected} bytes), the file has {size}"
            )

    def _open(self) -> Any:
        return Path(self.path).open("rb") if self.fs is None else self.fs.open(self.path, "rb")

    def _error(self, problem: str) -> XdistillError:
        return InputFileError(self.path, problem) if self.fs is None else XdistillError(f"{self.name}: {problem}")

    def __len__(self) -> int:
        return self.shape[0]

    def read(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` as an in-memory array."""
        stop = min(stop, self.shape[0])
        count = max(stop - start, 0) * self.shape[1]
        offset = self.data_offset + start * self.shape[1] * 4
        if self.fs is not None:  # one range request
            data = self.fs.cat_file(self.path, start=offset, end=offset + count * 4) if count else b""
            return np.frombuffer(data, dtype=np.float32).reshape(-1, self.shape[1])
        with Path(self.path).open("rb") as handle:
            handle.seek(offset)
            rows = np.fromfile(handle, dtype=np.float32, count=count)
        return rows.reshape(-1, self.shape[1])

    def shards(self, rows: int) -> Iterator[tuple[int, np.ndarray]]:
        """``(first_row, block)`` for consecutive blocks of at most ``rows`` rows."""
        for start in range(0, len(self), rows):
            block = self.read(start, start + rows)
            # faiss would give a NaN row no neighbour and mining would drop it without a word
            yield start, check_finite(block, f"{self.path} (rows {start}-{start + len(block) - 1})")


def write_npy_shards(blocks: Iterator[np.ndarray], n_rows: int, out_path: str | Path) -> Path:
    """Write ``n_rows`` rows arriving in blocks into one float32 ``.npy``, atomically.

    The header needs the width, so it is written when the first block arrives; every block is
    appended and dropped, keeping one block in memory.
    """
    written = 0
    with atomic_path(out_path) as tmp, tmp.open("wb") as handle:
        for block in blocks:
            block = as_float32_matrix(block, "embedding block")
            if written == 0:
                header = {
                    "descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)),
                    "fortran_order": False,
                    "shape": (n_rows, block.shape[1]),
                }
                np.lib.format.write_array_header_2_0(handle, header)
            handle.write(block.tobytes())
            written += len(block)
        if written == 0:
            np.save(handle, np.zeros((0, 0), np.float32))
        if written != n_rows:
            raise XdistillError(f"{out_path}: expected {n_rows} embedding rows, got {written}")
    return Path(out_path)


def encode_file(
    encoder: Encoder,
    text_path: str | Path | LineFile,
    out_path: str | Path,
    *,
    batch_size: int = 64,
    shard_rows: int = 10_000,
    progress: bool = True,
    rows: np.ndarray | None = None,
) -> Path:
    """Embed the lines of ``text_path`` into ``out_path`` (.npy, float32, one row a line).

    ``text_path`` may be an already indexed :class:`LineFile` (the file is then not read twice to index
    it). ``rows`` (sorted 0-based line numbers, e.g. :meth:`LineFile.text_rows`) keeps only those lines,
    in that order; default: every line.
    """
    lines = text_path if isinstance(text_path, LineFile) else LineFile(text_path)
    keep = None
    if rows is not None:
        keep = np.zeros(len(lines), bool)
        keep[rows] = True
    total = len(lines) if keep is None else int(keep.sum())

    def blocks() -> Iterator[np.ndarray]:
        with tqdm(total=total, unit="sent", desc=f"encode {lines.path.name}", disable=not progress) as bar:
            for start, texts in zip(range(0, len(lines), shard_rows), lines.batches(shard_rows)):
                if keep is not None:
                    texts = [text for text, wanted in zip(texts, keep[start : start + len(texts)]) if wanted]
                if texts:
                    yield encoder.encode(texts, batch_size=batch_size, show_progress_bar=False)
                    bar.update(len(texts))

    return write_npy_shards(blocks(), total, out_path)


def merge_top_k(
    best_scores: np.ndarray, best_ids: np.ndarray, new_scores: np.ndarray, new_ids: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Running top-k: merge two per-query candidate lists, keep the k best, sorted descending."""
    scores = np.concatenate([best_scores, new_scores], axis=1)
    ids = np.concatenate([best_ids, new_ids], axis=1)
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, order, axis=1), np.take_along_axis(ids, order, axis=1)


def sharded_knn(
    queries: NpyRows,
    corpus: NpyRows,
    k: int,
    *,
    shard_rows: int = DEFAULT_SHARD_ROWS,
    index: str = "flat",
    nlist: int | None = None,
    nprobe: int = 16,
    train_rows: int = 200_000,
    progress: bool = True,
    desc: str = "k-NN",
) -> tuple[np.ndarray, np.ndarray]:
    """k-NN of every query row among the corpus rows, reading both files shard by shard.

    ``flat`` (exact): each corpus shard gets an exact index and every query shard is searched
    against it, merging into a running top-k. ``ivf``: one IVF index trained on evenly spaced
    corpus rows (at most ``train_rows``), filled shard by shard, searched query shard by shard.
    """
    if queries.shape[1] != corpus.shape[1]:
        raise XdistillError(f"dimension mismatch: {queries.path} {queries.shape[1]} vs {corpus.path} {corpus.shape[1]}")
    k = min(k, len(corpus))
    best_scores = np.full((len(queries), k), -np.inf, np.float32)
    best_ids = np.full((len(queries), k), -1, np.int64)
    if k == 0 or len(queries) == 0:
        return best_scores, best_ids
    if index == "flat":
        n_query_shards = -(-len(queries) // shard_rows)
        n_corpus_shards = -(-len(corpus) // shard_rows)
        with tqdm(total=n_query_shards * n_corpus_shards, desc=desc, unit="block", disable=not progress) as bar:
            for corpus_start, corpus_block in corpus.shards(shard_rows):
                searcher = build_index(corpus_block)
                for query_start, query_block in queries.shards(shard_rows):
                    scores, ids = searcher.search(query_block, min(k, len(corpus_block)))
                    ids = np.where(ids >= 0, ids + corpus_start, -1)
                    rows = slice(query_start, query_start + len(query_block))
                    best_scores[rows], best_ids[rows] = merge_top_k(best_scores[rows], best_ids[rows], scores, ids, k)
                    bar.update()
                del searcher
    elif index == "ivf":
        searcher = _ivf_from_shards(corpus, shard_rows, nlist, nprobe, train_rows)
        with tqdm(total=len(queries), desc=desc, unit="sent", disable=not progress) as bar:
            for query_start, query_block in queries.shards(shard_rows):
                scores, ids = searcher.search(query_block, k)
                rows = slice(query_start, query_start + len(query_block))
                best_scores[rows], best_ids[rows] = scores, ids
                bar.update(len(query_block))
        best_scores[best_ids < 0] = -np.inf
    else:
        raise XdistillError(f"unknown index kind {index!r}; choose one of {', '.join(INDEX_KINDS)}")
    return best_scores, best_ids


def _ivf_from_shards(corpus: NpyRows, shard_rows: int, nlist: int | None, nprobe: int, train_rows: int) -> faiss.Index:
    """An IVF inner-product index trained on a spread sample of the corpus, filled by shards."""
    step = max(1, -(-len(corpus) // train_rows))  # rounded up: the sample stays within train_rows
    sample = np.concatenate([block[(-start) % step :: step] for start, block in corpus.shards(shard_rows)])
    if nlist is None:
        nlist = max(1, min(int(4 * np.sqrt(len(corpus))), len(sample) // 39))
    searcher = build_index(sample, index="ivf", nlist=nlist, nprobe=nprobe, add=False)
    del sample
    for _, block in corpus.shards(shard_rows):
        searcher.add(block)
    return searcher


def mine_npy(
    src: str | Path,
    tgt: str | Path,
    *,
    k: int = 4,
    margin: str = "ratio",
    retrieval: str = "max",
    shard_rows: int = DEFAULT_SHARD_ROWS,
    index: str = "flat",
    progress: bool = True,
    **index_options,
) -> MinedPairs:
    """Mine pairs between two embedding ``.npy`` files, searching shard by shard."""
    src_rows, tgt_rows = NpyRows(src), NpyRows(tgt)
    fwd = sharded_knn(
        src_rows,
        tgt_rows,
        k,
        shard_rows=shard_rows,
        index=index,
        progress=progress,
        desc="k-NN src->tgt",
        **index_options,
    )
    bwd = sharded_knn(
        tgt_rows,
        src_rows,
        k,
        shard_rows=shard_rows,
        index=index,
        progress=progress,
        desc="k-NN tgt->src",
        **index_options,
    )
    return mine_from_neighbours(NeighbourLists(fwd[0], fwd[1], bwd[0], bwd[1]), margin=margin, retrieval=retrieval)
