"""Where each dataset of the corpora mirror comes from, and the checksum of every file in it.

``checksums.tsv`` (package data beside this module, ``path<TAB>sha256<TAB>bytes`` under a header
row; regenerated from the reference mirror with ``python -m xdistill.data.catalog MIRROR``) records
every mirror file; :func:`checksums` reads it. Every staged file, copied or downloaded, is verified
against it.

``CANONICAL_URLS`` gives, per dataset folder, the public URL template of files that the mirror
holds verbatim (raw GitHub files at the commit recorded in the dataset's MANIFEST.md). The other
datasets were re-packed when the mirror was built (merged, converted, extracted from archives), so
no public URL serves those bytes: they download only from a copy of the mirror served over HTTP
(``corpora.base_url``).
"""

from __future__ import annotations

import functools
import hashlib
import sys
from importlib import resources
from pathlib import Path

from xdistill.errors import InputFileError
from xdistill.io import write_text_atomic

_GITHUB_RAW = "https://raw.githubusercontent.com"

CANONICAL_URLS: dict[str, str] = {
    "eval/tatoeba-laser": (
        f"{_GITHUB_RAW}/facebookresearch/LASER/74bc6ae7ffb7cba670fe0f428d0ede9f666fb821/data/tatoeba/v1/{{name}}"
    ),
    "eval/flores200-devtest": (
        f"{_GITHUB_RAW}/Helsinki-NLP/OPUS-MT-testsets/ac0f19c0be3cb4e0d9450fcb2d7a9847c4bdd180"
        "/datasets/facebook/flores/flores200_dataset/devtest/{name}"
    ),
    "eval/stsb-multi-mt": f"{_GITHUB_RAW}/PhilipMay/stsb-multi-mt/30de0dec4ee199b7f42351d3f1a0b19592955385/{{name}}",
    "train/multi30k": f"{_GITHUB_RAW}/multi30k/dataset/a3d2e0d26b56f3846f66a952536ffed4e401d05a/{{name}}",
}

# A dataset is the first two components of a mirror path: train/<x>, eval/<x>, dict/<x>.
DATASET_DEPTH = 2


def split_dataset(path: str) -> tuple[str, str]:
    """``'eval/sts17/a/b.txt'`` -> ``('eval/sts17', 'a/b.txt')``."""
    parts = path.split("/")
    return "/".join(parts[:DATASET_DEPTH]), "/".join(parts[DATASET_DEPTH:])


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """SHA-256 hex digest of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def scan_mirror(mirror: Path) -> dict[str, tuple[str, int]]:
    """Checksum every data file of a mirror (MANIFEST/README files at dataset level are docs, skipped)."""
    entries: dict[str, tuple[str, int]] = {}
    for path in sorted(mirror.rglob("*")):
        rel = path.relative_to(mirror).as_posix()
        if not path.is_file() or len(rel.split("/")) <= DATASET_DEPTH or path.name.startswith("MANIFEST"):
            continue
        entries[rel] = (sha256_file(path), path.stat().st_size)
    return entries


CHECKSUM_FILE = "checksums.tsv"
CHECKSUM_HEADER = ("path", "sha256", "bytes")


def write_checksum_file(mirror: Path, target: Path) -> int:
    """Regenerate the checksum table from ``mirror`` into ``target``; returns the number of files."""
    entries = scan_mirror(mirror)
    rows = ["\t".join(CHECKSUM_HEADER), *(f"{rel}\t{sha}\t{size}" for rel, (sha, size) in entries.items())]
    write_text_atomic(target, "\n".join(rows) + "\n")
    return len(entries)


@functools.cache
def checksums() -> dict[str, tuple[str, int]]:
    """The checksum table shipped with the package: mirror path -> ``(sha256, bytes)``."""
    table = resources.files(__package__) / CHECKSUM_FILE
    lines = table.read_text(encoding="utf-8").splitlines()
    if not lines or tuple(lines[0].split("\t")) != CHECKSUM_HEADER:
        raise InputFileError(str(table), f"expected the header {'<TAB>'.join(CHECKSUM_HEADER)!r}", 1)
    entries: dict[str, tuple[str, int]] = {}
    for number, line in enumerate(lines[1:], start=2):
        fields = line.split("\t")
        if len(fields) != 3 or len(fields[1]) != 64 or not fields[2].isdigit():
            raise InputFileError(str(table), f"expected 'path<TAB>sha256<TAB>bytes', found {line[:80]!r}", number)
        entries[fields[0]] = (fields[1], int(fields[2]))
    return entries


def known_files(dataset: str) -> list[str]:
    """Dataset-relative names of the catalogued files of ``dataset``."""
    prefix = dataset.rstrip("/") + "/"
    return [rel[len(prefix) :] for rel in checksums() if rel.startswith(prefix)]


def expected_checksum(path: str) -> tuple[str, int] | None:
    """``(sha256, bytes)`` recorded for a mirror path, or None for a file the catalog does not know."""
    return checksums().get(path)


if __name__ == "__main__":
    count = write_checksum_file(Path(sys.argv[1]), Path(__file__).with_name(CHECKSUM_FILE))
    print(f"catalogued {count} files")
