"""The import graph of the xdistill package, read from the source with :mod:`ast` (nothing is imported).

Two users: the structure tests (no import cycles; every DVC stage lists exactly the code it imports)
and :func:`code_digest`, which keys the trainer's checkpoints by the code that produced them.

Every ``import`` / ``from ... import`` of an ``xdistill`` module counts, at module level or inside a
function (the package imports heavy modules lazily), except those under ``if TYPE_CHECKING:``, which
never run: :meth:`ImportGraph.closure` (the stage deps, :func:`code_digest`) follows runtime imports
only. The cycle check can count ``TYPE_CHECKING`` imports too (:meth:`ImportGraph.cycles`): a type-only
import of a module that imports back still ties the two into one knot. Importing ``xdistill.a.b`` runs
``xdistill/__init__.py`` and ``xdistill/a/__init__.py`` too, so parent packages are edges as well.
``from xdistill.a import b`` is an edge to the sub-module ``xdistill.a.b`` when that is a module, and
to the package ``xdistill.a`` in any case.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

PACKAGE = "xdistill"


@dataclass(frozen=True)
class ImportGraph:
    """Module name -> the xdistill modules it imports, for every module under ``src_dir/xdistill``."""

    src_dir: Path

    @cached_property
    def files(self) -> dict[str, Path]:
        """Module name -> file (``xdistill.models`` -> ``.../xdistill/models/__init__.py``)."""
        modules = {}
        for path in sorted((self.src_dir / PACKAGE).rglob("*.py")):
            parts = path.relative_to(self.src_dir).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
        return modules

    def _is_package(self, name: str) -> bool:
        return self.files[name].name == "__init__.py"

    @cached_property
    def edges(self) -> dict[str, set[str]]:
        """Module -> the modules it imports at runtime (``if TYPE_CHECKING:`` blocks left out)."""
        return {name: self._imports_of(name) for name in self.files}

    @cached_property
    def typing_edges(self) -> dict[str, set[str]]:
        """Module -> the modules it imports, those under ``if TYPE_CHECKING:`` included."""
        return {name: self._imports_of(name, include_type_checking=True) for name in self.files}

    def _imports_of(self, name: str, include_type_checking: bool = False) -> set[str]:
        tree = ast.parse(self.files[name].read_text(encoding="utf-8"), filename=str(self.files[name]))
        nodes = ast.walk(tree) if include_type_checking else _runtime_nodes(tree)
        targets: set[str] = set()
        for node in nodes:
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = self._absolute(name, node)
                targets.add(base)
                targets.update(f"{base}.{alias.name}" for alias in node.names)
        found: set[str] = set()
        for target in targets:
            if target.split(".")[0] != PACKAGE:
                continue
            parts = target.split(".")
            # the module itself (when it is one) and every package above it
            found.update(".".join(parts[:i]) for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in self.files)
        found.discard(name)
        return found

    def _absolute(self, name: str, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        package = name if self._is_package(name) else name.rsplit(".", 1)[0]
        base = package.split(".")[: len(package.split(".")) - node.level + 1]
        return ".".join(base + ([node.module] if node.module else []))

    def closure(self, start: str) -> set[str]:
        """``start`` and every module it reaches, with the packages above ``start``."""
        parts = start.split(".")
        seen = {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
        todo = list(seen)
        while todo:
            for target in self.edges[todo.pop()]:
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
        return seen

    def has_code(self, name: str) -> bool:
        """False for a module that is only a docstring (most package ``__init__`` files)."""
        body = ast.parse(self.files[name].read_text(encoding="utf-8")).body
        return any(not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)) for s in body)

    def cycles(self, within: str = PACKAGE, *, include_type_checking: bool = False) -> list[list[str]]:
        """Import cycles among the modules under ``within`` (each cycle as a list of modules); with
        ``include_type_checking``, imports under ``if TYPE_CHECKING:`` count as edges too."""
        edges = self.typing_edges if include_type_checking else self.edges
        names = [n for n in self.files if n == within or n.startswith(within + ".")]
        # a package's __init__ importing its own sub-modules is how packages re-export, not a cycle
        graph = {n: {t for t in edges[n] if t in names and not t.startswith(n + ".")} for n in names}
        return [component for component in _strongly_connected(graph) if len(component) > 1]


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node except those inside ``if TYPE_CHECKING:`` blocks."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from (n for child in node.orelse for n in [child, *_runtime_nodes(child)])
            continue
        yield node
        yield from _runtime_nodes(node)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def package_src_dir() -> Path:
    """The folder holding the ``xdistill`` package this process runs (``src/`` of a checkout)."""
    import xdistill

    return Path(xdistill.__file__).resolve().parent.parent


def code_digest(module: str, src_dir: Path | None = None) -> str:
    """SHA-256 over the source of ``module`` and every xdistill module it imports (paths and bytes):
    changes whenever code that can change ``module``'s results changes."""
    graph = ImportGraph(src_dir or package_src_dir())
    digest = hashlib.sha256()
    for name in sorted(graph.closure(module)):
        path = graph.files[name]
        digest.update(f"{path.relative_to(graph.src_dir).as_posix()}\0".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()
