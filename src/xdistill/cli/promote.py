"""``xdistill promote``: the promotion gate (see :mod:`xdistill.registry.gate` and :mod:`xdistill.registry.promotion`).

Reads ``register.tracking_uri`` / ``register.model_name`` and the ``promote`` section of
params.yaml; flags override them. Prints the decision as JSON; exit status 0 whether the
candidate was promoted or refused (``--strict``: 3 when refused).

As the pipeline's last stage (``promote`` in dvc.yaml) it judges the version the register stage
recorded (``--registration metrics/register.json``) and writes the decision and its reasons to
``--output``, so ``dvc repro`` ends with a champion whenever the gate passes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from xdistill.errors import XdistillError
from xdistill.io import PARAMS_FILE, load_params

REFUSED_STATUS = 3


def registry_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """The flags shared by promote and rollback: --params, --tracking-uri, --model-name."""
    function = click.option("--model-name", default=None, help="override register.model_name")(function)
    function = click.option("--tracking-uri", default=None, help="override register.tracking_uri")(function)
    return click.option("--params", default=PARAMS_FILE, show_default=True, help="params file")(function)


def registry_settings(params: str, tracking_uri: str | None, model_name: str | None) -> tuple[str, str, dict]:
    """(tracking URI, model name, promote section) from params.yaml and the flags.

    A relative store named in the params file (or the default one) lies in that file's project, as for
    ``register``; one given with ``--tracking-uri`` is relative to the current folder. ``XDISTILL_REGISTRY_ROOT``,
    when set, replaces both folders (:func:`~xdistill.registry.store.registry_root`). A relative
    ``promote.lock_file`` resolves the same way, so every promoter of the project holds the same lock. A local
    store that does not exist is an error: promoting in an empty store made on the spot would only say "no versions".
    """
    from xdistill.registry.store import (
        local_store_path,
        project_promote_section,
        registry_root,
        resolve_tracking_uri,
    )

    all_params = load_params(None, params)
    register = all_params.get("register") or {}
    if tracking_uri:
        tracking_uri = resolve_tracking_uri(tracking_uri)
    else:
        tracking_uri = resolve_tracking_uri(register.get("tracking_uri"), registry_root(Path(params).parent))
    store = local_store_path(tracking_uri)
    if store is not None and not store.exists():
        raise XdistillError(
            f"no MLflow store at {store}: register a student first (the register stage) "
            "or point --tracking-uri / register.tracking_uri at the store"
        )
    model_name = model_name or register.get("model_name") or "xdistill-student"
    return tracking_uri, model_name, project_promote_section(all_params.get("promote"), Path(params).parent)


@click.command()
@click.option("--version", "version", default=None, help="candidate version (default: the newest)")
@click.option("--margin", type=float, default=None, help="override promote.margin")
@click.option("--tolerance", type=float, default=None, help="override promote.tolerance")
@click.option("--teacher-tolerance", type=float, default=None, help="override promote.teacher_tolerance")
@registry_options
@click.option("--strict", is_flag=True, help=f"exit with status {REFUSED_STATUS} when refused")
@click.option(
    "--registration",
    default=None,
    help="judge the version this register.json records, in its store (the pipeline's promote stage)",
)
@click.option("--output", default=None, help="also write the decision JSON here")
def command(
    version: str | None,
    margin: float | None,
    tolerance: float | None,
    teacher_tolerance: float | None,
    params: str,
    tracking_uri: str | None,
    model_name: str | None,
    strict: bool,
    registration: str | None,
    output: str | None,
) -> int:
    """Make the candidate version champion if it beats the champion (the promotion gate)."""
    from xdistill.io import write_json_atomic
    from xdistill.registry.gate import PromoteConfig
    from xdistill.registry.promotion import promote
    from xdistill.registry.register import read_registration

    if registration is not None:
        if version is not None or tracking_uri is not None or model_name is not None:
            raise XdistillError("--registration names the version, its model and its store: give none of the three")
        record = read_registration(registration)
        version, tracking_uri, model_name = record["model_version"], record["tracking_uri"], record["model_name"]
    tracking_uri, model_name, section = registry_settings(params, tracking_uri, model_name)
    if margin is not None:
        section["margin"] = margin
    if tolerance is not None:
        section["tolerance"] = tolerance
    if teacher_tolerance is not None:
        section["teacher_tolerance"] = teacher_tolerance
    result = promote(model_name, version, tracking_uri=tracking_uri, config=PromoteConfig.from_params(section))
    click.echo(json.dumps(result.as_dict(), indent=2))
    if output is not None:
        write_json_atomic(Path(output), result.as_dict())
    return REFUSED_STATUS if strict and result.decision == "refused" else 0
