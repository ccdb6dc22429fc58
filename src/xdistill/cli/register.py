"""``xdistill register``: the register stage (see :mod:`xdistill.registry.register`)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from xdistill.io import load_params


@click.command()
@click.option("--root", default=".", show_default=True, help="project root holding the pipeline outputs")
@click.option("--params", default=None, help="params file (default: <root>/params.yaml)")
@click.option("--tracking-uri", default=None, help="override register.tracking_uri")
def command(root: str, params: str | None, tracking_uri: str | None) -> int:
    """Log the pipeline run to MLflow and register the student as a new model version."""
    from xdistill.registry.register import RegisterConfig, register_run

    root_dir = Path(root)
    params_file = Path(params) if params else root_dir / "params.yaml"
    section = load_params("register", params_file) or {}  # a section of comments only is all defaults
    if tracking_uri:
        section = {**section, "tracking_uri": tracking_uri}
    registration = register_run(root_dir, RegisterConfig.from_params(section), params_file=params_file)
    click.echo(json.dumps(registration.as_dict(), indent=2))
    return 0
