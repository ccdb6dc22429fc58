"""``models:/<name>@<alias>`` and ``models:/<name>/<version>``: a registered student as a local folder.

The registry is MLflow's, at ``MLFLOW_TRACKING_URI`` (a relative ``sqlite:///mlflow.db`` is relative to the
current folder, as MLflow reads it). An alias is resolved to its version first, and the version's files are
downloaded once into the xdistill cache, ``<cache>/registry/<store>/<name>/<version>/``: keyed by the version,
so moving ``champion`` to another version downloads that version, and a version already fetched is not
fetched again. The folder is the sentence-transformers folder the flavor logged
(``model.sentence_transformer/``), plus the student's teacher-space adapter where the version carries one:
inside the logged model, or as the artifact :data:`ADAPTER_ARTIFACT` of the run that registered it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from xdistill.errors import XdistillError

log = logging.getLogger(__name__)

REGISTRY_PREFIX = "models:/"
TRACKING_URI_ENV = "MLFLOW_TRACKING_URI"
# where the sentence-transformers flavor keeps the model inside a logged model (mlflow.sentence_transformers)
FLAVOR_DATA_DIR = "model.sentence_transformer"
# the run artifact holding a registered student's teacher-space adapter (the ``teacher_space/`` folder's files);
# also the folder's name inside the student, :data:`xdistill.adapter.model.ADAPTER_DIR` (not imported: the adapter
# module's loaders import this one; a test holds the two equal)
ADAPTER_ARTIFACT = "teacher_space"
# what the cached folder was downloaded from (the cache's source record)
SOURCE_FILE = "xdistill_registry.json"

_URI = re.compile(r"^models:/(?P<name>[^/@]+)(?:@(?P<alias>[^/@]+)|/(?P<version>[0-9]+))/?$")


@dataclass(frozen=True)
class RegistryModel:
    """One registered model version, resolved: what to download and where the store is."""

    name: str
    version: str
    tracking_uri: str
    alias: str | None = None

    @property
    def uri(self) -> str:
        """The version's own URI, ``models:/<name>/<version>`` (stable, unlike an alias)."""
        return f"{REGISTRY_PREFIX}{self.name}/{self.version}"


def is_registry_uri(spec: str) -> bool:
    return spec.startswith(REGISTRY_PREFIX)


def parse_registry_uri(spec: str) -> tuple[str, str | None, str | None]:
    """``models:/name@alias`` -> (name, alias, None); ``models:/name/3`` -> (name, None, "3")."""
    match = _URI.match(spec.strip())
    if match is None:
        raise XdistillError(
            f"model URI '{spec}' is not models:/<name>@<alias> or models:/<name>/<version> "
            "(e.g. models:/xdistill-student@champion, models:/xdistill-student/3)"
        )
    return match["name"], match["alias"], match["version"]


def tracking_uri_from_environment(spec: str) -> str:
    """``MLFLOW_TRACKING_URI``, a relative local store made absolute; a clear error when it is not set."""
    from xdistill.registry.store import resolve_tracking_uri

    uri = os.environ.get(TRACKING_URI_ENV, "").strip()
    if not uri:
        raise XdistillError(
            f"model '{spec}' is in an MLflow registry, but {TRACKING_URI_ENV} is not set: set it to the store, "
            f"e.g. {TRACKING_URI_ENV}=sqlite:///mlflow.db in the project folder (params.yaml register.tracking_uri)"
        )
    return resolve_tracking_uri(uri, Path.cwd())


def without_credentials(uri: str) -> str:
    """``https://user:secret@host:5000/x`` -> ``https://host:5000/x``: what an error or a cache record may show."""
    parts = urlsplit(uri)
    if parts.username is None and parts.password is None:
        return uri
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def _store_label(tracking_uri: str) -> str:
    """A short, credential-free folder name for one tracking store."""
    return hashlib.sha256(without_credentials(tracking_uri).encode()).hexdigest()[:16]


def find_version(spec: str, tracking_uri: str | None = None) -> RegistryModel:
    """The version ``spec`` names now; a clear error for a missing model, alias or version."""
    from mlflow.exceptions import MlflowException

    from xdistill.registry.store import client_for

    name, alias, version = parse_registry_uri(spec)
    tracking_uri = tracking_uri or tracking_uri_from_environment(spec)
    store = without_credentials(tracking_uri)
    client = client_for(tracking_uri)
    try:
        registered = client.get_registered_model(name)
    except MlflowException as exc:
        raise XdistillError(f"model '{spec}': no registered model '{name}' in {store} ({_first_line(exc)})") from None
    if alias is not None:
        aliases = dict(getattr(registered, "aliases", None) or {})
        if alias not in aliases:
            known = ", ".join(f"@{a} (version {v})" for a, v in sorted(aliases.items())) or "none"
            raise XdistillError(f"model '{spec}': '{name}' has no alias @{alias} in {store}; its aliases: {known}")
        version = str(aliases[alias])
    assert version is not None  # the URI names an alias or a version
    try:
        client.get_model_version(name, version)
    except MlflowException:
        versions = sorted(int(v.version) for v in client.search_model_versions(f"name='{name}'"))
        raise XdistillError(
            f"model '{spec}': '{name}' has no version {version} in {store}; its versions: "
            f"{', '.join(map(str, versions)) or 'none'}"
        ) from None
    return RegistryModel(name=name, version=version, tracking_uri=tracking_uri, alias=alias)


def registry_cache_dir(model: RegistryModel) -> Path:
    """``<cache>/registry/<store>/<name>/<version>``: one folder per store and version."""
    from xdistill.models.cache import cache_root

    return cache_root() / "registry" / _store_label(model.tracking_uri) / model.name / model.version


# Versions fetched in this process, by store and version URI: a version's files never change, so one command
# that resolves ``models:/<name>/<version>`` several times (loader, adapter, sidecar) asks the store once. An
# alias is asked every time (it moves); commands pin it first (:func:`pin_version`).
_FETCHED: dict[tuple[str, str], Path] = {}


def pin_version(spec: str) -> str:
    """``models:/<name>@<alias>`` -> ``models:/<name>/<version>`` of the version the alias names now; any other
    spec unchanged. A command pins its model once, so every part of it uses one version even if the alias moves
    meanwhile, and what it writes names that version."""
    if not is_registry_uri(spec):
        return spec
    model = find_version(spec)
    if model.alias is not None:
        log.info("%s is %s", spec, model.uri)
    return model.uri


def resolve_registry_model(spec: str, force: bool = False) -> Path:
    """The local sentence-transformers folder of the version ``spec`` names (downloaded once, then cached)."""
    name, alias, version = parse_registry_uri(spec)
    tracking_uri = tracking_uri_from_environment(spec)
    key = (tracking_uri, f"{REGISTRY_PREFIX}{name}/{version}")
    if alias is None and not force and key in _FETCHED and _FETCHED[key].is_dir():
        return _FETCHED[key]
    model = find_version(spec, tracking_uri)
    folder = fetch_version(model, force=force)
    log.debug("%s is %s, in %s", spec, model.uri, folder)
    _FETCHED[(tracking_uri, model.uri)] = folder
    return folder


def fetch_version(model: RegistryModel, force: bool = False) -> Path:
    """Download ``model`` into :func:`registry_cache_dir` unless it is there (atomic; one process builds)."""
    from xdistill.models.cache import build_once

    record = {"model": model.uri, "tracking_uri": without_credentials(model.tracking_uri)}
    folder = registry_cache_dir(model)
    return build_once(folder, record, lambda tmp: _download(model, tmp), f"registered model {model.uri}", force)


def _download(model: RegistryModel, target: Path) -> None:
    """Fill ``target`` with the version's sentence-transformers folder and, where there is one, its adapter."""
    import mlflow
    from mlflow.exceptions import MlflowException

    from xdistill.registry.store import client_for

    with tempfile.TemporaryDirectory(prefix=".download-", dir=target.parent) as scratch:
        try:
            root = Path(
                mlflow.artifacts.download_artifacts(
                    artifact_uri=model.uri, dst_path=scratch, tracking_uri=model.tracking_uri
                )
            )
        except (MlflowException, OSError) as exc:
            raise XdistillError(f"model '{model.uri}': could not download its files ({_first_line(exc)})") from None
        source = root / FLAVOR_DATA_DIR if (root / FLAVOR_DATA_DIR).is_dir() else root
        if not (source / "modules.json").is_file() and not (source / "config.json").is_file():
            raise XdistillError(
                f"model '{model.uri}': not a sentence-transformers model (no {FLAVOR_DATA_DIR}/modules.json in "
                "what the version holds); register students with the register stage"
            )
        for item in source.iterdir():
            shutil.move(str(item), target / item.name)
        if not (target / ADAPTER_ARTIFACT).is_dir() and (root / ADAPTER_ARTIFACT).is_dir():
            shutil.move(str(root / ADAPTER_ARTIFACT), target / ADAPTER_ARTIFACT)
    if not (target / ADAPTER_ARTIFACT).is_dir():
        _download_run_adapter(client_for(model.tracking_uri), model, target / ADAPTER_ARTIFACT)


def _download_run_adapter(client, model: RegistryModel, target: Path) -> None:
    """The adapter logged beside the student by the run that registered it, where there is one."""
    from mlflow.exceptions import MlflowException

    run_id = client.get_model_version(model.name, model.version).run_id
    if not run_id:
        return
    try:
        listed = [Path(item.path).name for item in client.list_artifacts(run_id, ADAPTER_ARTIFACT)]
    except MlflowException:
        return
    if not listed:
        return
    with tempfile.TemporaryDirectory(prefix=".adapter-", dir=target.parent) as scratch:
        fetched = Path(client.download_artifacts(run_id, ADAPTER_ARTIFACT, scratch))
        shutil.move(str(fetched), target)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
