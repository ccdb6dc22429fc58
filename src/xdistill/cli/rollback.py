"""``xdistill rollback``: move ``champion`` back to the previous champion."""

from __future__ import annotations

import json

import click

from xdistill.cli.promote import registry_options, registry_settings


@click.command()
@registry_options
def command(params: str, tracking_uri: str | None, model_name: str | None) -> int:
    """Move the champion alias back to the previous champion."""
    from xdistill.registry.gate import PromoteConfig
    from xdistill.registry.promotion import rollback

    tracking_uri, model_name, section = registry_settings(params, tracking_uri, model_name)
    demoted, restored = rollback(model_name, tracking_uri=tracking_uri, config=PromoteConfig.from_params(section))
    click.echo(json.dumps({"model_name": model_name, "demoted": demoted, "champion": restored}, indent=2))
    return 0
