"""Text normalisation shared by every component that compares sentences.

Training data cleaning, decontamination, the teacher-embedding store and evaluation all key
sentences by :func:`normalize_text`, so "the same sentence" means the same thing everywhere.
"""

from __future__ import annotations

import unicodedata


def normalize_text(text: str) -> str:
    """Return ``text`` in Unicode NFC with every whitespace run collapsed to one space, stripped.

    Whitespace is Python's notion (``str.split()``): spaces, tabs, newlines, CR, NBSP, thin and
    ideographic spaces, ... A tab or newline can therefore never survive into a TSV cell.
    """
    if not text.isascii():
        text = unicodedata.normalize("NFC", text)
    # Fast path (this runs twice per training pair): a printable string has no whitespace other than
    # the ASCII space (every other space or control character is non-printable), so it is already
    # normal unless it has a double, leading or trailing space.
    if text.isprintable() and "  " not in text and text[:1] != " " and text[-1:] != " ":
        return text
    return " ".join(text.split())
