"""Where a cluster job's files live: a local folder, or a network store that every host reaches.

A work location is either a path (one host, or a folder every worker mounts under the same path) or the
URL of a network store:

- ``webdav://host:8080/share/job`` (``webdavs://`` over TLS): the WebDAV server of the multi-host setup
  (docs/multi-host.md), logged in to with ``XDISTILL_DVC_USER`` / ``XDISTILL_DVC_PASSWORD``, the account its
  env file gives every host (the DVC remote's);
- any other fsspec URL whose filesystem is installed (``s3://bucket/job`` with s3fs, ...), with that
  filesystem's own credentials.

With a URL, the client uploads each file it writes (under a temporary name, then moved into place, so a reader
never sees half a file) and the workers read their rows from the store by range requests: the hosts share the
store's address, not a disk.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from xdistill.errors import XdistillError
from xdistill.mining.stream import NpyRows

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

WEBDAV_SCHEMES = {"webdav": "http", "dav": "http", "webdavs": "https", "davs": "https"}
WEBDAV_USER_ENV, WEBDAV_PASSWORD_ENV = "XDISTILL_DVC_USER", "XDISTILL_DVC_PASSWORD"


def is_url(location: str | Path) -> bool:
    """Whether ``location`` names a network store (``scheme://...``) rather than a path."""
    return "://" in str(location)


def filesystem(location: str) -> tuple[AbstractFileSystem, str]:
    """The filesystem holding the URL ``location`` and the path within it."""
    import fsspec.core

    parts = urlsplit(location)
    if parts.scheme in WEBDAV_SCHEMES:
        from webdav4.fsspec import WebdavFileSystem

        user, password = os.environ.get(WEBDAV_USER_ENV), os.environ.get(WEBDAV_PASSWORD_ENV)
        auth = (user, password) if user and password else None
        base = f"{WEBDAV_SCHEMES[parts.scheme]}://{parts.netloc}"
        return WebdavFileSystem(base, auth=auth), parts.path.lstrip("/")
    try:
        fs, path = fsspec.core.url_to_fs(location)
    except (ImportError, ValueError) as exc:
        raise XdistillError(f"{location}: no filesystem for this URL ({exc})") from None
    return fs, path


def join(location: str | Path, name: str) -> str:
    """The location of file ``name`` in the work location ``location`` (a path stays a resolved path)."""
    if is_url(location):
        return f"{str(location).rstrip('/')}/{name}"
    return str(Path(location).resolve() / name)


def open_rows(location: str | Path) -> NpyRows:
    """Row-range reads from the ``.npy`` matrix at ``location`` (a path or a URL)."""
    if not is_url(location):
        return NpyRows(location)
    fs, path = filesystem(str(location))
    return NpyRows(path, fs=fs, name=str(location))


def upload(local: Path, location: str) -> str:
    """Copy the local file ``local`` to the URL ``location``: written under a temporary name, then moved."""
    fs, path = filesystem(location)
    parent = path.rsplit("/", 1)[0] if "/" in path else ""
    partial = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        if parent:
            fs.makedirs(parent, exist_ok=True)
        fs.put_file(str(local), partial)
        fs.mv(partial, path)
    except Exception as exc:  # the store's own errors (HTTP, permissions): name the file and the store
        raise XdistillError(f"cannot upload {local} to {location}: {exc}") from exc
    return location
