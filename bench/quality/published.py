"""The published figures RESULTS.md shows beside ours (bench/quality/published.yaml), read once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

PUBLISHED_FILE = Path(__file__).resolve().parent / "published.yaml"

_published = yaml.safe_load(PUBLISHED_FILE.read_text(encoding="utf-8"))
# {benchmark: {"columns": {column: {row: value}}, "note": text}}
PUBLISHED: dict[str, dict[str, Any]] = _published["benchmarks"]
# {model: 112-language Tatoeba average}
PUBLISHED_TATOEBA_ALL: dict[str, float] = _published["tatoeba_all"]
