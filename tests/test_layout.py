"""docs/layout.md's annotated tree names every folder of the project, and only folders that exist."""

from __future__ import annotations

import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
LAYOUT = REPO_ROOT / "docs" / "layout.md"
# folders the tree describes, with their sub-folders (results, caches and outputs are not code)
DESCRIBED = ("src/xdistill", "flows", "bench", "testbed", "tests", "scripts", "docs")
NOT_LAYOUT = {"__pycache__", "results"}


def _tree_paths() -> set[str]:
    """The paths of the tree, each line's name prefixed with its parents' (two spaces a level)."""
    block = re.search(r"```text\n(.*?)```", LAYOUT.read_text(encoding="utf-8"), re.S)
    assert block, "docs/layout.md has no ```text tree"
    paths, parents = set(), []
    for line in block.group(1).splitlines():
        name = line.split()[0]
        depth = (len(line) - len(line.lstrip(" "))) // 2
        parents = [*parents[:depth], name.rstrip("/")]
        paths.add("/".join(parents))
    return paths


def _folders() -> set[str]:
    found = set()
    for top in DESCRIBED:
        found.add(top)
        for path in (REPO_ROOT / top).rglob("*"):
            relative = path.relative_to(REPO_ROOT)
            if path.is_dir() and not NOT_LAYOUT & set(relative.parts) and not relative.name.endswith(".egg-info"):
                found.add(relative.as_posix())
    return found


def test_every_folder_is_in_the_layout() -> None:
    missing = sorted(_folders() - _tree_paths())
    assert missing == [], f"docs/layout.md does not describe these folders: {missing}"


def test_every_path_in_the_layout_exists() -> None:
    gone = sorted(p for p in _tree_paths() if not (REPO_ROOT / p).exists())
    assert gone == [], f"docs/layout.md names paths that do not exist: {gone}"
