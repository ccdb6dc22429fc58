"""Where the MLflow store is, how to reach it, and the lock that serialises promotions.

The default tracking URI ``sqlite:///mlflow.db`` is relative: it resolves against the *registry
root*, which is the project root (the current folder, where DVC runs stages) unless the
environment variable ``XDISTILL_REGISTRY_ROOT`` names another folder. The Prefect flows run
stages in a private copy of the project and set that variable, so every run lands in the one
store of the user's checkout. Server URIs (``http://...``) are used as given. ``env:NAME`` reads the
URI from the environment variable ``NAME`` of the process that uses it: the multi-host profile sets
``env:MLFLOW_TRACKING_URI``, so every host reaches the shared server under the one params.yaml value
(docs/multi-host.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from xdistill.errors import XdistillError

if TYPE_CHECKING:
    from mlflow import MlflowClient

log = logging.getLogger(__name__)

REGISTRY_ROOT_ENV = "XDISTILL_REGISTRY_ROOT"
DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
ENV_URI_PREFIX = "env:"  # env:MLFLOW_TRACKING_URI: the URI is that variable's value
# Artifacts of runs tracked in a local sqlite store live next to the database: MLflow's own
# default (./mlruns relative to the current folder) would put them inside whatever temporary
# workspace happened to create the experiment.
LOCAL_ARTIFACTS_DIR = "mlartifacts"
PROMOTION_LOCK_TIMEOUT_S = 600.0

_METRIC_KEY_FORBIDDEN = re.compile(r"[^A-Za-z0-9_\-. :/]")


def registry_root(project: str | Path | None = None) -> Path:
    """The folder relative store paths resolve against: ``XDISTILL_REGISTRY_ROOT``, else ``project``
    (the project a command was pointed at), else the current folder."""
    return Path(os.environ.get(REGISTRY_ROOT_ENV) or project or Path.cwd()).resolve()


def resolve_tracking_uri(uri: str | None, root: str | Path | None = None) -> str:
    """Make a relative ``sqlite:///file.db`` (or ``file:``/plain path) store absolute under ``root``.

    ``sqlite:///mlflow.db`` -> ``sqlite:////abs/root/mlflow.db`` (four slashes: absolute path).
    """
    uri = from_environment(uri or DEFAULT_TRACKING_URI)
    base = Path(root).resolve() if root is not None else registry_root()
    if uri.startswith("sqlite:///"):
        path = uri[len("sqlite:///") :]
        if not path.startswith("/"):
            return f"sqlite:///{(base / path).resolve()}"
        return uri
    if uri.startswith("file:"):
        file_path = Path(urlparse(uri).path or uri[len("file:") :])
        return (file_path if file_path.is_absolute() else base / file_path).resolve().as_uri()
    if "://" not in uri:
        return (Path(uri) if Path(uri).is_absolute() else base / uri).resolve().as_uri()
    return uri


def from_environment(uri: str) -> str:
    """``env:NAME`` -> the value of the environment variable ``NAME`` (an error when unset); others unchanged."""
    if not uri.startswith(ENV_URI_PREFIX):
        return uri
    name = uri[len(ENV_URI_PREFIX) :]
    value = os.environ.get(name, "").strip()
    if not value:
        raise XdistillError(
            f"tracking URI {uri!r}: the environment variable {name} is not set; set it to the tracking server "
            "(e.g. the MLFLOW_TRACKING_URI line of the env file scripts/services_up.sh writes)"
        )
    if value.startswith(ENV_URI_PREFIX):
        raise XdistillError(f"tracking URI {uri!r}: {name} names another variable ({value!r}), not a URI")
    return value


def local_store_path(tracking_uri: str) -> Path | None:
    """The database file or store folder of a local (sqlite / file) tracking URI, else None."""
    if tracking_uri.startswith("sqlite:///"):
        return Path(tracking_uri[len("sqlite:///") :])
    if tracking_uri.startswith("file:"):
        return Path(urlparse(tracking_uri).path)
    return None


def default_artifact_location(tracking_uri: str) -> str | None:
    """Artifact location for new experiments: next to a local store; the server's choice otherwise."""
    store = local_store_path(tracking_uri)
    if store is None:
        return None
    folder = store.parent if tracking_uri.startswith("sqlite:") else store
    return (folder / LOCAL_ARTIFACTS_DIR).resolve().as_uri()


def client_for(tracking_uri: str) -> MlflowClient:
    """An MLflow client on ``tracking_uri`` (tracking and registry in the same store)."""
    from mlflow import MlflowClient

    store = local_store_path(tracking_uri)
    if store is not None and tracking_uri.startswith("sqlite:"):
        store.parent.mkdir(parents=True, exist_ok=True)
        check_sqlite_store(store)
    return MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)


def check_sqlite_store(path: Path) -> None:
    """Refuse a local store file that is not an SQLite database (damaged, truncated, another file), naming it,
    before MLflow's SQLAlchemy layer fails on it with a traceback; a missing file is a new, empty store."""
    import sqlite3

    if not path.exists() or path.stat().st_size == 0:
        return
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as connection:
            connection.execute("PRAGMA schema_version").fetchone()
    except sqlite3.DatabaseError as exc:
        raise XdistillError(
            f"{path}: the MLflow store is not a readable SQLite database ({exc}); restore it from a backup "
            "or move it away to start an empty store"
        ) from exc


def promotion_lock_path(tracking_uri: str, lock_file: str | None = None) -> Path:
    """The lock file that serialises promotions and rollbacks on one store.

    ``lock_file`` when given (relative to the registry root). Else, a local store: in its artifact
    folder next to the database (``mlartifacts/.mlflow.db.promote.lock``: already git-ignored with the
    artifacts); a remote server: a lock named after its URI in the xdistill cache
    (``locks/<host>_<port>-<digest>.promote.lock``). Either way every process using the store on this
    host derives the same path, whatever folder it runs in (a flow's worker, a promoter's shell).
    Promoters on several hosts sharing one server need no file: :func:`promotion_lock` holds the server's
    own lock (:mod:`xdistill.registry.server_lock`) when no ``lock_file`` is set.
    """
    if lock_file:
        path = Path(lock_file)
        return path if path.is_absolute() else registry_root() / path
    store = local_store_path(tracking_uri)
    if store is not None:
        folder = store.parent if tracking_uri.startswith("sqlite:") else store
        return folder / LOCAL_ARTIFACTS_DIR / f".{store.name}.promote.lock"
    from xdistill.models.cache import cache_root

    server = tracking_uri.rstrip("/")
    parsed = urlparse(server)  # host and port only: the URI's netloc may carry a user and a password
    readable = re.sub(r"[^A-Za-z0-9.-]+", "_", f"{parsed.hostname or 'server'}_{parsed.port or ''}")
    return cache_root() / "locks" / f"{readable}-{hashlib.sha256(server.encode()).hexdigest()[:12]}.promote.lock"


def project_promote_section(section: Mapping[str, Any] | None, project: str | Path) -> dict[str, Any]:
    """The ``promote`` section with a relative ``lock_file`` placed under the project's registry root
    (:func:`registry_root`, where a relative store lies too), so that ``xdistill promote`` and the flows
    of one project hold the same lock wherever they run."""
    section = dict(section or {})
    if section.get("lock_file"):
        section["lock_file"] = str(registry_root(project) / section["lock_file"])
    return section


class PromotionLockBusy(XdistillError):
    """Another promotion held the lock past the timeout: it may be free a moment later (worth a retry)."""


@contextlib.contextmanager
def promotion_lock(tracking_uri: str, lock_file: str | None = None) -> Iterator[str]:
    """Hold the promotion lock of ``tracking_uri``; yields where it is (for logs).

    A tracking server (``http://...``) without ``lock_file``: the lock kept in the server's database
    (:mod:`xdistill.registry.server_lock`), which every host using the server shares. A local store, or a
    ``lock_file``: an OS-level file lock (:func:`promotion_lock_path`), released on crash.
    """
    if lock_file is None and local_store_path(tracking_uri) is None:
        from xdistill.registry.server_lock import ServerLockTimeout, server_lock

        try:
            with server_lock(client_for(tracking_uri), PROMOTION_LOCK_TIMEOUT_S) as ticket:
                yield f"{ticket} on {_server_name(tracking_uri)}"
        except ServerLockTimeout as exc:
            raise PromotionLockBusy(f"{_server_name(tracking_uri)}: another promotion held the lock ({exc})") from exc
        return
    from filelock import FileLock, Timeout

    path = promotion_lock_path(tracking_uri, lock_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path), timeout=PROMOTION_LOCK_TIMEOUT_S)
    try:
        with lock:
            log.debug("holding promotion lock %s", path)
            yield str(path)
    except Timeout as exc:
        raise PromotionLockBusy(
            f"{path}: another promotion held the lock for {PROMOTION_LOCK_TIMEOUT_S:.0f} s"
        ) from exc


def _server_name(tracking_uri: str) -> str:
    """The server's scheme, host and port: never a password of the URI."""
    parsed = urlparse(tracking_uri)
    return f"{parsed.scheme}://{parsed.hostname or ''}{f':{parsed.port}' if parsed.port else ''}"


def flatten(tree: Mapping[str, Any], prefix: str = "", sep: str = ".") -> dict[str, Any]:
    """Flatten nested mappings into ``{"a.b.c": leaf}``; list items get their index as a key part."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{sep}{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            flat.update(flatten(value, name, sep))
        else:
            flat[name] = value
    return flat


def numeric_leaves(tree: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """Finite numeric leaves of a JSON tree (lists of numbers indexed), keyed as MLflow metric names.

    Booleans, strings and non-finite numbers are left out: they are not metrics.
    """
    metrics: dict[str, float] = {}
    for key, value in flatten(tree, prefix).items():
        items = enumerate(value) if isinstance(value, list) else [(None, value)]
        for index, item in items:
            if isinstance(item, Mapping):
                nested = numeric_leaves(item, f"{key}.{index}")
                metrics.update(nested)
                continue
            if isinstance(item, bool) or not isinstance(item, int | float) or not math.isfinite(item):
                continue
            name = key if index is None else f"{key}.{index}"
            metrics[_METRIC_KEY_FORBIDDEN.sub("_", name)] = float(item)
    return metrics
