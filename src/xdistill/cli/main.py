"""Entry point of the ``xdistill`` command.

Each sub-command lives in its own module under ``xdistill.cli`` exposing two functions:

- ``add_arguments(parser: argparse.ArgumentParser) -> None``
- ``run(args: argparse.Namespace) -> int | None``

Modules are imported only when their command runs, so ``xdistill --help`` and light commands
start fast (torch, transformers and MLflow are heavy imports). An :class:`XdistillError`
is printed as one line, ``error: <message>``, with exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from xdistill.errors import XdistillError

# command name -> (module under xdistill.cli, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "corpora": ("corpora", "stage: copy or download the raw corpora into data/raw"),
    "parallel": ("parallel", "stage: extract, clean and decontaminate parallel train/dev data"),
    "teacher-embed": ("teacher_embed", "stage: embed every distinct source sentence with the teacher (cached)"),
    "train": ("train", "stage: distill the student from the teacher"),
    "evaluate": ("evaluate", "stage: run the benchmarks for the student and the baselines"),
    "register": ("register", "stage: log the run to MLflow and register the student"),
    "promote": ("promote", "promote a registered student to champion if it passes the gate"),
    "rollback": ("rollback", "move the champion alias back to the previous champion"),
    "models": ("models", "resolve, convert and cache model specs (pypi:..., folders, hub ids)"),
    "encode": ("encode", "embed a text file (one sentence per line) into a .npy file"),
    "mine": ("mine", "mine parallel sentence pairs between two text files (margin scoring)"),
    "export": ("export", "write a student as ONNX fp32, ONNX int8 and fp16 safetensors"),
}


def _top_level_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="xdistill",
        description="Multilingual sentence embeddings by knowledge distillation.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="commands:\n" + "\n".join(f"  {name:<14} {help_}" for name, (_, help_) in COMMANDS.items()),
    )
    parser.add_argument("command", choices=sorted(COMMANDS), metavar="command")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    top = _top_level_parser()
    if not argv or argv[0] in {"-h", "--help"}:
        top.print_help()
        return 0
    verbose = "-v" in argv or "--verbose" in argv
    argv = [a for a in argv if a not in {"-v", "--verbose"}]
    command = argv[0]
    if command not in COMMANDS:
        top.error(f"unknown command '{command}' (choose from {', '.join(COMMANDS)})")
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    module = importlib.import_module(f"xdistill.cli.{COMMANDS[command][0]}")
    parser = argparse.ArgumentParser(prog=f"xdistill {command}", description=COMMANDS[command][1])
    module.add_arguments(parser)
    args = parser.parse_args(argv[1:])
    try:
        status = module.run(args)
    except XdistillError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return int(status or 0)


if __name__ == "__main__":
    sys.exit(main())
