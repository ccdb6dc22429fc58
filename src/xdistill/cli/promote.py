"""``xdistill promote``: the promotion gate (see :mod:`xdistill.registry.promotion`).

Reads ``register.tracking_uri`` / ``register.model_name`` and the ``promote`` section of
params.yaml; flags override them. Prints the decision as JSON; exit status 0 whether the
candidate was promoted or refused (``--strict``: 3 when refused).
"""

from __future__ import annotations

import argparse
import json

from xdistill.io import load_params

REFUSED_STATUS = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--version", default=None, help="candidate version (default: the newest)")
    parser.add_argument("--margin", type=float, default=None, help="override promote.margin")
    parser.add_argument("--tolerance", type=float, default=None, help="override promote.tolerance")
    add_registry_arguments(parser)
    parser.add_argument("--strict", action="store_true", help=f"exit with status {REFUSED_STATUS} when refused")
    # Keeps the decision window open (seconds); used by the race test.
    parser.add_argument("--hold-s", type=float, default=0.0, help=argparse.SUPPRESS)


def add_registry_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags shared by promote and rollback."""
    parser.add_argument("--params", default="params.yaml", help="params file (default: params.yaml)")
    parser.add_argument("--tracking-uri", default=None, help="override register.tracking_uri")
    parser.add_argument("--model-name", default=None, help="override register.model_name")


def registry_settings(args: argparse.Namespace) -> tuple[str, str, dict]:
    """(tracking URI, model name, promote section) from params.yaml and the flags."""
    params = load_params(None, args.params)
    register = params.get("register") or {}
    tracking_uri = args.tracking_uri or register.get("tracking_uri")
    model_name = args.model_name or register.get("model_name") or "xdistill-student"
    return tracking_uri, model_name, dict(params.get("promote") or {})


def run(args: argparse.Namespace) -> int:
    from xdistill.registry.promotion import PromoteConfig, promote

    tracking_uri, model_name, section = registry_settings(args)
    if args.margin is not None:
        section["margin"] = args.margin
    if args.tolerance is not None:
        section["tolerance"] = args.tolerance
    result = promote(
        model_name, args.version, tracking_uri=tracking_uri, config=PromoteConfig.from_params(section),
        hold_s=args.hold_s,
    )
    print(json.dumps(result.as_dict(), indent=2))
    return REFUSED_STATUS if args.strict and result.decision == "refused" else 0
