"""The code dependencies of each DVC stage, generated from the import graph and written into dvc.yaml.

A stage re-runs when, and only when, code it runs changes: its ``deps`` list the stage CLI module's
import closure (:meth:`xdistill.imports.ImportGraph.closure`), every file that holds code, plus each
data file under ``src/`` whose name that code mentions. Nobody keeps these lists by hand::

    python -m xdistill.stage_deps            # rewrite the src/ entries of every stage's deps
    python -m xdistill.stage_deps --check    # exit 1 when dvc.yaml is out of step (CI, tests)

Only the ``- src/...`` items of each ``deps:`` block are replaced; data dependencies, comments and
everything else in dvc.yaml stay as written.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import yaml

from xdistill.imports import PACKAGE, ImportGraph

CLI_PACKAGE = f"{PACKAGE}.cli"
DEPS_ITEM = re.compile(r"^(\s*)- (\S+)\s*$")
STAGE_KEY = re.compile(r"^  ([A-Za-z0-9_-]+):\s*$")
DEPS_KEY = re.compile(r"^(\s+)deps:\s*$")


def stage_module(cmd: str) -> str:
    """``xdistill evaluate --baselines`` -> ``xdistill.cli.evaluate``, the module the stage runs."""
    from xdistill.cli.main import COMMANDS

    words = cmd.split()
    if not words or words[0] != PACKAGE or len(words) < 2 or words[1] not in COMMANDS:
        raise ValueError(f"stage command {cmd!r} does not run an xdistill sub-command")
    return f"{CLI_PACKAGE}.{COMMANDS[words[1]][0]}"


def code_deps(graph: ImportGraph, module: str, root: Path) -> list[str]:
    """The files under ``src/`` that ``module`` runs or reads, relative to ``root``, sorted."""
    closure = graph.closure(module)
    code = sorted(graph.files[name] for name in closure if graph.has_code(name))
    sources = "".join(path.read_text(encoding="utf-8") for path in code)
    data = [path for path in _data_files(graph.src_dir) if path.name in sources]
    return sorted(path.relative_to(root).as_posix() for path in [*code, *data])


def _data_files(src_dir: Path) -> list[Path]:
    """Files of the package that are not Python (tables the code reads at run time)."""
    return sorted(
        p
        for p in (src_dir / PACKAGE).rglob("*")
        if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts
    )


def generated_deps(root: Path) -> dict[str, list[str]]:
    """Stage name -> its code deps, for every stage of ``root/dvc.yaml`` that runs an xdistill command."""
    stages = yaml.safe_load((root / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    graph = ImportGraph(root / "src")
    return {
        name: code_deps(graph, stage_module(stage["cmd"]), root)
        for name, stage in stages.items()
        if str(stage.get("cmd", "")).startswith(PACKAGE + " ")
    }


def rewrite(text: str, deps: dict[str, list[str]]) -> str:
    """``text`` (dvc.yaml) with the ``src/`` items of each stage's ``deps:`` replaced by ``deps[stage]``."""
    out: list[str] = []
    stage, in_deps, indent = None, False, ""
    for line in text.splitlines():
        if match := STAGE_KEY.match(line):
            stage, in_deps = match.group(1), False
        elif match := DEPS_KEY.match(line):
            in_deps, indent = stage in deps, match.group(1) + "  "
            out.append(line)
            continue
        elif in_deps and not _inside_block(line, indent):
            out.extend(f"{indent}- {dep}" for dep in deps[stage or ""])
            in_deps = False
        if in_deps and (item := DEPS_ITEM.match(line)) and item.group(2).startswith("src/"):
            continue
        out.append(line)
    if in_deps:
        out.extend(f"{indent}- {dep}" for dep in deps[stage or ""])
    return "\n".join(out) + "\n"


def _inside_block(line: str, indent: str) -> bool:
    """A deps item, or a comment or blank line within the block (indented at least as deep as its items)."""
    stripped = line.strip()
    return line.startswith(indent) and (stripped.startswith("- ") or stripped.startswith("#"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m xdistill.stage_deps", description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the repository (holds dvc.yaml and src/)")
    parser.add_argument("--check", action="store_true", help="only report whether dvc.yaml is in step (exit 1 if not)")
    args = parser.parse_args(argv)
    path = args.root / "dvc.yaml"
    current = path.read_text(encoding="utf-8")
    wanted = rewrite(current, generated_deps(args.root))
    if args.check:
        if wanted != current:
            print(
                f"{path}: stage deps are out of step with the code; run `python -m xdistill.stage_deps`",
                file=sys.stderr,
            )
            return 1
        return 0
    if wanted != current:
        from xdistill.io import write_text_atomic

        write_text_atomic(path, wanted)
        print(f"{path}: stage deps rewritten")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
