"""The code's structure, read from the source: no import cycles, and every DVC stage depends on
exactly the code it runs (a change anywhere in that code re-runs the stage, and nothing else does)."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest
import tomllib
import yaml

from xdistill.cli.main import COMMANDS
from xdistill.imports import ImportGraph

REPO_ROOT = Path(__file__).resolve().parent.parent
SRC = REPO_ROOT / "src"


@pytest.fixture(scope="module")
def graph() -> ImportGraph:
    return ImportGraph(SRC)


def test_no_import_cycles(graph: ImportGraph) -> None:
    """Type-only imports (``if TYPE_CHECKING:``) count: a knot they tie is still a knot."""
    assert graph.cycles(include_type_checking=True) == []


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


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared_distributions() -> set[str]:
    """Every distribution pyproject.toml declares (dependencies and extras) or the Makefile installs with --no-deps."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    requirements = [
        *project["dependencies"],
        *(r for extra in project["optional-dependencies"].values() for r in extra),
    ]
    makefile = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    no_deps = re.search(r"NO_DEPS_PACKAGES :=(.*?)\n\n", makefile, re.S).group(1)
    requirements += re.findall(r"([A-Za-z0-9_.-]+)==", no_deps)
    return {_normalise(re.match(r"[A-Za-z0-9_.-]+", r).group(0)) for r in requirements}


def test_every_third_party_import_is_declared() -> None:
    import importlib.metadata

    local = {
        path.stem for folder in ("tests", "bench", "flows", "scripts") for path in (REPO_ROOT / folder).glob("*.py")
    }
    local |= {"xdistill", "tests", "bench", "flows", "testbed", "__future__"}
    imported: dict[str, set[str]] = {}
    for folder in ("src", "flows", "bench", "tests", "testbed", "scripts"):
        for path in (REPO_ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else ([node.module] if isinstance(node, ast.ImportFrom) and not node.level and node.module else [])
                )
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in local:
                        imported.setdefault(top, set()).add(_relative(path))
    distributions = importlib.metadata.packages_distributions()
    declared = _declared_distributions()
    undeclared = {
        module: sorted(files)[:3]
        for module, files in imported.items()
        if not {_normalise(d) for d in distributions.get(module, [module])} & declared
    }
    assert undeclared == {}, f"imported but not declared in pyproject.toml: {undeclared}"


def test_code_digest_follows_the_imported_code_only(tmp_path: Path) -> None:
    """The trainer's checkpoints are keyed by the code they came from (xdistill.imports.code_digest)."""
    from xdistill.imports import code_digest

    package = tmp_path / "xdistill"
    package.mkdir()
    (package / "__init__.py").write_text('"""pkg"""\n')
    (package / "trainer.py").write_text("from xdistill import losses\n")
    (package / "losses.py").write_text("SCALE = 20\n")
    (package / "mining.py").write_text("K = 4\n")
    before = code_digest("xdistill.trainer", tmp_path)
    (package / "mining.py").write_text("K = 8\n")  # not imported by the trainer
    assert code_digest("xdistill.trainer", tmp_path) == before
    (package / "losses.py").write_text("SCALE = 30\n")
    assert code_digest("xdistill.trainer", tmp_path) != before


def test_dvc_yaml_deps_are_generated_from_the_imports() -> None:
    """dvc.yaml's code deps are what `python -m xdistill.stage_deps` writes (`make deps`)."""
    from xdistill.stage_deps import generated_deps, rewrite

    current = (REPO_ROOT / "dvc.yaml").read_text(encoding="utf-8")
    assert rewrite(current, generated_deps(REPO_ROOT)) == current, "run `make deps` (python -m xdistill.stage_deps)"


def test_the_deps_rewrite_keeps_data_deps_and_comments() -> None:
    from xdistill.stage_deps import rewrite

    text = (
        "stages:\n  train:\n    cmd: xdistill train\n    deps:\n      - data/a\n      # why b\n"
        "      - src/xdistill/old.py\n      - data/b\n    params:\n      - train\n"
    )
    assert rewrite(text, {"train": ["src/xdistill/new.py", "src/xdistill/z.py"]}) == (
        "stages:\n  train:\n    cmd: xdistill train\n    deps:\n      - data/a\n      # why b\n      - data/b\n"
        "      - src/xdistill/new.py\n      - src/xdistill/z.py\n    params:\n      - train\n"
    )
