"""Errors that reach the user as one clear message (the CLI prints them without a traceback)."""

from __future__ import annotations

from pathlib import Path


class XdistillError(Exception):
    """A problem the user can fix: missing input, bad file, missing package, bad config."""


class InputFileError(XdistillError):
    """A bad input file, reported with its path and, when known, the 1-based line number."""

    def __init__(self, path: str | Path, problem: str, line: int | None = None) -> None:
        self.path = Path(path)
        self.line = line
        self.problem = problem
        where = f"{self.path}:{line}" if line is not None else str(self.path)
        super().__init__(f"{where}: {problem}")
