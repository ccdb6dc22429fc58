"""Reading a rendered Markdown table back by cell, so a test checks RESULTS.md's numbers where they are shown."""

from __future__ import annotations


def markdown_table_after(text: str, heading: str) -> dict[str, dict[str, str]]:
    """``{row: {column: cell}}`` of the first Markdown table after ``heading``."""
    after = text.split(heading, 1)[1].splitlines()
    start = next(i for i, line in enumerate(after) if line.startswith("|"))
    end = next((i for i in range(start, len(after)) if not after[i].startswith("|")), len(after))
    lines = after[start:end]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[cells[0]] = dict(zip(header[1:], cells[1:], strict=True))
    return rows
