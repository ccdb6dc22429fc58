"""Profiles: named params.yaml overlays for a kind of machine (``profiles/gpu.yaml``, ``profiles/gpu-fp16.yaml``).

A profile is a YAML file shaped like params.yaml that holds only the settings it changes. Applying it
deep-merges it into params.yaml in place: each value it names replaces the one in params.yaml (a list
as a whole), everything else stays, and so do the file's comments and layout
(:func:`xdistill.params_file.write_params`, which also writes atomically). A profile may only name
settings params.yaml already has: a typo must not add a setting that no stage reads.

    xdistill profile            # the profiles there are
    xdistill profile gpu        # params.yaml for one datacenter GPU (bf16)

The distill flow applies one to its run's workspace (its ``profile`` field).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from xdistill.errors import XdistillError

PROFILES_DIR = "profiles"  # beside params.yaml


def profiles_dir(project: Path) -> Path:
    """The folder holding the profiles of the project at ``project``."""
    return project / PROFILES_DIR


def list_profiles(project: Path | None = None) -> list[str]:
    """Names of the profiles in ``project``/profiles (default: the current folder), sorted."""
    folder = profiles_dir(project if project is not None else Path.cwd())
    return sorted(path.stem for path in folder.glob("*.yaml")) if folder.is_dir() else []


def profile_path(params_file: Path, name_or_path: str) -> Path:
    """The profile file: a name (``gpu``) is looked up in the profiles folder beside ``params_file``,
    anything that looks like a path (a ``/`` or a ``.yaml`` ending) is taken as it is."""
    if "/" in name_or_path or name_or_path.endswith((".yaml", ".yml")):
        path = Path(name_or_path)
        if not path.is_file():
            raise XdistillError(f"profile {path}: file not found")
        return path
    path = profiles_dir(params_file.parent) / f"{name_or_path}.yaml"
    if not path.is_file():
        known = ", ".join(list_profiles(params_file.parent)) or "none"
        raise XdistillError(f"unknown profile '{name_or_path}': no {path} (profiles there: {known})")
    return path


def load_profile(path: Path) -> dict[str, Any]:
    """The overlay of profile file ``path`` as params values by dotted key (its leaves; lists are leaves)."""
    try:
        overlay = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise XdistillError(f"profile {path}: not valid YAML ({exc})") from None
    if overlay is None:
        return {}
    if not isinstance(overlay, dict):
        raise XdistillError(f"profile {path}: must be a mapping of params.yaml sections, not {type(overlay).__name__}")
    return _flatten(overlay)


def apply_profile(params_file: Path, name_or_path: str) -> dict[str, Any]:
    """Deep-merge a profile into ``params_file`` in place; return the values it set, by dotted key.

    ``name_or_path`` is a profile name (``gpu``: ``profiles/gpu.yaml`` beside ``params_file``) or a
    profile file. A setting the profile names that ``params_file`` lacks is refused, naming both
    files and the setting, before anything is written; so is a value of another kind than the one it
    replaces (:func:`~xdistill.params_file.write_params`).
    """
    from xdistill.params_file import write_params

    params_file = Path(params_file)
    path = profile_path(params_file, name_or_path)
    values = load_profile(path)
    params = yaml.safe_load(params_file.read_text(encoding="utf-8")) or {}
    if unknown := [key for key in values if not _has_key(params, key)]:
        what = "is not a setting" if len(unknown) == 1 else "are not settings"
        raise XdistillError(
            f"profile {path}: {', '.join(unknown)} {what} of {params_file} (a profile only changes existing ones)"
        )
    if values:
        try:
            write_params(params_file, values)
        except ValueError as exc:
            raise XdistillError(f"profile {path}: {exc}") from None
    return values


def _flatten(mapping: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in mapping.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, f"{dotted}."))
        else:
            flat[dotted] = value
    return flat


def _has_key(params: dict[str, Any], dotted: str) -> bool:
    node: Any = params
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True
