"""``xdistill register``: the register stage (see :mod:`xdistill.registry.register`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from xdistill.io import load_params


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", default=".", help="project root holding the pipeline outputs (default: .)")
    parser.add_argument("--params", default=None, help="params file (default: <root>/params.yaml)")
    parser.add_argument("--tracking-uri", default=None, help="override register.tracking_uri")


def run(args: argparse.Namespace) -> int:
    from xdistill.registry.register import RegisterConfig, register_run

    root = Path(args.root)
    section = load_params("register", args.params or root / "params.yaml")
    if args.tracking_uri:
        section = {**section, "tracking_uri": args.tracking_uri}
    registration = register_run(root, RegisterConfig.from_params(section))
    print(json.dumps(registration.as_dict(), indent=2))
    return 0
