"""The ``corpora`` stage: stage the configured datasets into ``data/raw`` with the mirror's layout.

Each configured dataset (a mirror folder such as ``train/tatoeba-challenge``) lists file patterns
relative to it; ``{lang}``, ``{lang3}`` and ``{flores}`` expand over the configured languages and
shell wildcards (``*``) match catalogued names. Files are copied from an offline mirror or, when
no mirror is configured, downloaded (:mod:`xdistill.data.catalog` has the URLs); every file is
checked against its recorded SHA-256 and every gzip is decompressed to the end once, so a corrupt
or truncated source stops the stage with a message naming it. ``data/raw`` is built in a temporary
folder and moved into place only when complete, with ``MANIFEST.json`` (sha256 + bytes per file).
"""

from __future__ import annotations

import fnmatch
import gzip
import hashlib
import logging
import urllib.error
import urllib.request
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from xdistill.data import catalog
from xdistill.data.languages import expand
from xdistill.errors import InputFileError, XdistillError
from xdistill.io import atomic_path, write_json_atomic

log = logging.getLogger(__name__)

_GLOB_CHARS = set("*?[")
DOWNLOAD_TIMEOUT_S = 60


@dataclass(frozen=True)
class StagedFile:
    """One file of ``data/raw``: its mirror-relative path and where its bytes come from."""

    path: str  # e.g. "eval/sts17/STS2017.gs/STS.gs.track1.ar-ar.txt"
    origin: str  # a local file path or a URL


def select_files(datasets: dict[str, list[str]], languages: Iterable[str], mirror: Path | None) -> list[str]:
    """Mirror-relative paths of every file the configuration needs, sorted and unique.

    A pattern with language placeholders that matches nothing for a language is fine (not every
    dataset covers every language); a literal name or a wildcard that matches nothing at all is
    a configuration error.
    """
    languages = list(languages)
    selected: set[str] = set()
    for dataset, patterns in datasets.items():
        check_inside(dataset, f"corpora.datasets key {dataset!r}")
        for pattern in patterns:
            check_inside(pattern, f"corpora.datasets[{dataset!r}] pattern {pattern!r}")
        candidates = set(catalog.known_files(dataset))
        if mirror is not None:
            folder = mirror / dataset
            if not folder.is_dir():
                raise InputFileError(folder, "dataset folder missing from the corpora mirror")
            candidates |= {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
        for pattern in patterns:
            selected |= _match(dataset, pattern, languages, candidates, mirror)
    return sorted(selected)


def check_inside(value: str, what: str) -> None:
    """Refuse a configured path that could reach outside the mirror or data/raw (absolute, or with ``..``)."""
    path = PurePosixPath(value)
    if not value or path.is_absolute() or ".." in path.parts or "\\" in value or ":" in value:
        raise XdistillError(f"{what}: must be a relative path inside the mirror (no '..', no drive, not absolute)")


def _match(dataset: str, pattern: str, languages: list[str], candidates: set[str], mirror: Path | None) -> set[str]:
    has_lang = "{" in pattern
    expanded = {expand(pattern, lang) for lang in languages} if has_lang else {pattern}
    found: set[str] = set()
    for name in expanded:
        if _GLOB_CHARS & set(name):
            found |= {c for c in candidates if fnmatch.fnmatchcase(c, name)}
        elif name in candidates:
            found.add(name)
        elif not has_lang:
            where = mirror / dataset / name if mirror else f"{dataset}/{name}"
            raise InputFileError(where, "configured corpus file not found (neither in the mirror nor in the catalog)")
        else:
            log.info("%s: no file %s (language not covered by this dataset)", dataset, name)
    if not found and not has_lang:
        raise XdistillError(f"corpora.datasets['{dataset}']: pattern '{pattern}' matches no file")
    return {f"{dataset}/{name}" for name in found}


def plan_origins(paths: list[str], mirror: Path | None, base_url: str | None, urls: dict[str, str]) -> list[StagedFile]:
    """Decide where each file comes from: the mirror, ``base_url`` or the dataset's canonical URL."""
    plan = []
    for path in paths:
        dataset, name = catalog.split_dataset(path)
        if mirror is not None:
            origin = str(mirror / path)
        elif base_url:
            origin = f"{base_url.rstrip('/')}/{path}"
        elif dataset in urls or dataset in catalog.CANONICAL_URLS:
            origin = urls.get(dataset, catalog.CANONICAL_URLS.get(dataset, "")).format(name=name)
        else:
            raise XdistillError(
                f"{dataset}: no public URL serves this dataset as the mirror holds it (it was re-packed, "
                "see its MANIFEST.md); set corpora.mirror to a mirror folder or corpora.base_url to a copy served "
                "over HTTP"
            )
        plan.append(StagedFile(path, origin))
    return plan


def _open_origin(origin: str):
    if "://" not in origin:
        path = Path(origin)
        if not path.is_file():
            raise InputFileError(path, "file missing from the corpora mirror")
        return open(path, "rb")
    try:
        # http, https and file URLs by design (corpora.base_url may be a local copy)
        return urllib.request.urlopen(origin, timeout=DOWNLOAD_TIMEOUT_S)
    except (urllib.error.URLError, OSError) as exc:
        raise XdistillError(f"{origin}: download failed: {getattr(exc, 'reason', exc)}") from exc


def fetch_file(item: StagedFile, target: Path) -> tuple[str, int]:
    """Copy or download one file to ``target``; verify checksum and gzip integrity. Returns (sha256, bytes)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    size = 0
    with _open_origin(item.origin) as source, open(target, "wb") as sink:
        try:
            while block := source.read(1 << 20):
                digest.update(block)
                size += len(block)
                sink.write(block)
        except OSError as exc:
            raise XdistillError(f"{item.origin}: read failed after {size} bytes: {exc}") from exc
    sha = digest.hexdigest()
    expected = catalog.expected_checksum(item.path)
    if expected is None:
        log.warning("%s: not in the checksum catalog; recorded but not verified", item.path)
    elif (sha, size) != tuple(expected):
        raise _origin_error(
            item.origin,
            f"checksum mismatch for {item.path}: got sha256 {sha[:16]}... ({size} bytes), "
            f"expected {expected[0][:16]}... ({expected[1]} bytes)",
        )
    if target.name.endswith(".gz"):
        try:
            check_gzip(target)
        except InputFileError as exc:
            raise _origin_error(item.origin, exc.problem) from exc
    return sha, size


def _origin_error(origin: str, problem: str) -> XdistillError:
    """An error naming a local file (InputFileError) or a URL (kept verbatim)."""
    if "://" in origin:
        return XdistillError(f"{origin}: {problem}")
    return InputFileError(origin, problem)


def check_gzip(path: Path) -> None:
    """Decompress ``path`` to the end; a truncated or corrupt gzip raises InputFileError."""
    try:
        with gzip.open(path, "rb") as handle:
            while handle.read(1 << 20):
                pass
    except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as exc:
        raise InputFileError(path, f"truncated or corrupt gzip: {exc}") from exc


def stage_corpora(
    raw_dir: str | Path,
    datasets: dict[str, list[str]],
    languages: Iterable[str],
    mirror: str | Path | None,
    base_url: str | None = None,
    urls: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Build ``raw_dir`` (atomically) with the configured files; returns the manifest written into it."""
    mirror_path = Path(mirror) if mirror is not None else None
    if mirror_path is not None and not mirror_path.is_dir():
        raise InputFileError(mirror_path, "corpora mirror folder not found (set corpora.mirror, or null to download)")
    paths = select_files(datasets, languages, mirror_path)
    plan = plan_origins(paths, mirror_path, base_url, urls or {})
    files: dict[str, dict[str, Any]] = {}
    with atomic_path(raw_dir, is_dir=True) as tmp:
        for number, item in enumerate(plan, 1):
            target = tmp / item.path
            if not target.resolve().is_relative_to(tmp.resolve()):  # the checks above make this unreachable
                raise XdistillError(f"{item.path}: would be written outside {raw_dir}")
            sha, size = fetch_file(item, target)
            files[item.path] = {"sha256": sha, "bytes": size}
            if number % 50 == 0 or number == len(plan):
                log.info("staged %d/%d files", number, len(plan))
        manifest = {
            "source": str(mirror_path) if mirror_path is not None else (base_url or "canonical URLs"),
            "files": files,
            "total_bytes": sum(f["bytes"] for f in files.values()),
        }
        write_json_atomic(tmp / "MANIFEST.json", manifest)
    log.info("data/raw: %d files, %.1f MB", len(files), manifest["total_bytes"] / 1e6)
    return manifest
