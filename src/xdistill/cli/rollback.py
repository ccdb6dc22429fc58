"""``xdistill rollback``: move ``champion`` back to the previous champion."""

from __future__ import annotations

import argparse
import json

from xdistill.cli.promote import add_registry_arguments, registry_settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_registry_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from xdistill.registry.promotion import PromoteConfig, rollback

    tracking_uri, model_name, section = registry_settings(args)
    demoted, restored = rollback(model_name, tracking_uri=tracking_uri, config=PromoteConfig.from_params(section))
    print(json.dumps({"model_name": model_name, "demoted": demoted, "champion": restored}, indent=2))
    return 0
