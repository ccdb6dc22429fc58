"""Stable identities of model weights, by content, to key cached embeddings.

``model_fingerprint(spec)`` is ``<spec>@<16 hex digits>``: a SHA-256 over every model file's
relative name, size and content hash. It does not depend on where the folder lives or on file
times, so it is the same on every machine with the same weights, and it changes whenever any
file's bytes change (a teacher fine-tuned in place, even with the same file sizes).

Hashing a model's files reads them all (~0.5 GB for mpnet), so each file's hash is cached by
:mod:`xdistill.models.file_hashes`: a file is read again only after it was written.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from xdistill.models.file_hashes import file_hashes
from xdistill.models.resolve import resolve_model_dir
from xdistill.models.sources import is_inference_only, muse_resources_dir


def model_files(folder: Path) -> list[Path]:
    """Every file of a model folder, sorted; hidden bookkeeping (``.cache/``, ``.gitattributes``) left out.

    Symlinked subfolders are followed, as the model loaders follow them (``rglob`` would skip them: new
    weights behind a link would keep the old fingerprint and the store would serve stale vectors); a link
    back to a folder already on the path is not entered twice.
    """
    files = []
    # real paths of each walked folder's ancestors, built once per folder from its parent's set
    above = {str(folder): frozenset(os.path.realpath(p) for p in [folder, *Path(folder).absolute().parents])}
    for root, dirs, names in os.walk(folder, followlinks=True):
        kept = []
        for name in dirs:
            real = os.path.realpath(os.path.join(root, name))
            if not name.startswith(".") and real not in above[root]:
                kept.append(name)
                above[os.path.join(root, name)] = above[root] | {real}
        dirs[:] = kept
        files += [Path(root, name) for name in names if not name.startswith(".") and Path(root, name).is_file()]
    return sorted(files)


def folder_digest(folder: Path) -> str:
    """SHA-256 hex over the relative name, size and content hash of every model file in ``folder``."""
    files = model_files(folder)
    digest = hashlib.sha256()
    for file, content in zip(files, file_hashes(files)):
        digest.update(f"{file.relative_to(folder).as_posix()}\0{file.stat().st_size}\0{content}\0".encode())
    return digest.hexdigest()


def model_fingerprint(spec: str) -> str:
    """A stable identity of the weights behind ``spec``: ``<spec>@<16 hex digits of their content>``."""
    folder = muse_resources_dir() if is_inference_only(spec) else resolve_model_dir(spec)
    return f"{spec}@{folder_digest(folder)[:16]}"
