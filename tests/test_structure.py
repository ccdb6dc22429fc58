"""The code's structure, read from the source: no import cycles, and every DVC stage depends on
exactly the code it runs (a change anywhere in that code re-runs the stage, and nothing else does)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from import_graph import ImportGraph

from xdistill.cli.main import COMMANDS

REPO_ROOT = Path(__file__).resolve().parent.parent
SRC = REPO_ROOT / "src"


@pytest.fixture(scope="module")
def graph() -> ImportGraph:
    return ImportGraph(SRC)


def test_no_import_cycles(graph: ImportGraph) -> None:
    assert graph.cycles() == []


def _stage_module(cmd: str) -> str:
    """``xdistill evaluate --baselines`` -> ``xdistill.cli.evaluate`` (the stage's CLI module)."""
    words = cmd.split()
    assert words[0] == "xdistill", f"stage command {cmd!r} does not run the xdistill CLI"
    return f"xdistill.cli.{COMMANDS[words[1]][0]}"


def _relative(path: Path) -> str:
    return path.relative_to(REPO_ROOT).as_posix()


def _code_files(graph: ImportGraph, modules: set[str]) -> set[str]:
    """The files of ``modules`` that hold code (a docstring-only ``__init__`` changes nothing)."""
    return {_relative(graph.files[m]) for m in modules if graph.has_code(m)}


def _listed_code(graph: ImportGraph, deps: list[str]) -> tuple[set[str], set[str]]:
    """(code files the ``deps`` under src/ cover, data files they name), folders expanded."""
    code = {_relative(path) for path in graph.files.values()}
    covered, data = set(), set()
    for dep in deps:
        if not dep.startswith("src/"):
            continue
        path = REPO_ROOT / dep
        assert path.exists(), f"dvc.yaml lists {dep}, which does not exist"
        if path.is_dir():
            covered |= {c for c in code if c.startswith(dep.rstrip("/") + "/")}
        elif dep in code:
            covered.add(dep)
        else:
            data.add(dep)
    return covered, data


def _stages() -> list[tuple[str, dict]]:
    pipeline = yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text(encoding="utf-8"))
    return sorted(pipeline["stages"].items())


@pytest.mark.parametrize(("name", "stage"), _stages(), ids=[name for name, _ in _stages()])
def test_stage_deps_are_exactly_the_code_it_imports(graph: ImportGraph, name: str, stage: dict) -> None:
    # the dispatcher (xdistill.cli.main) only routes to the stage's module: not a dependency
    closure = graph.closure(_stage_module(stage["cmd"]))
    needed = _code_files(graph, closure)
    deps = [next(iter(d)) if isinstance(d, dict) else d for d in stage.get("deps", [])]
    covered, data_files = _listed_code(graph, deps)
    covered = {c for c in covered if graph.has_code(_module_of(graph, c))}
    missing, unused = sorted(needed - covered), sorted(covered - needed)
    assert not missing, f"stage {name}: imports code dvc.yaml does not list: {missing}"
    assert not unused, f"stage {name}: dvc.yaml lists code the stage does not import: {unused}"
    # a data file under src/ is a dependency only when the stage's code reads it (names it)
    sources = "".join(graph.files[m].read_text(encoding="utf-8") for m in closure)
    unread = [f for f in data_files if Path(f).name not in sources]
    assert unread == [], f"stage {name}: dvc.yaml lists data files its code never names"


def _module_of(graph: ImportGraph, relative: str) -> str:
    return next(m for m, path in graph.files.items() if _relative(path) == relative)
