"""Text normalisation shared by every component that compares sentences.

Training data cleaning, decontamination, the teacher-embedding store and evaluation all key
sentences by :func:`normalize_text`, so "the same sentence" means the same thing everywhere.
"""

from __future__ import annotations

import string
import unicodedata

# Around a sentence: ASCII punctuation, quotes, dashes and CJK punctuation (the marks copies differ by)
_EDGE_MARKS = string.punctuation + string.whitespace + "’‘“”«»„‚‹›¿¡…–—·。，、！？；：「」『』（）【】《》\u00a0"


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


def decontamination_key(text: str) -> str:
    """``text`` as decontamination compares it: normalised (:func:`normalize_text`), case-folded, one
    apostrophe, without the punctuation, quotes and spaces around it. "A dog runs." and "a dog runs",
    '"Tough, tough, tough."' and "Tough, tough, tough.", o'clock and o’clock are one sentence here
    (exact matching let such copies of evaluation sentences into training data). Other punctuation inside
    a sentence still counts: folding it too takes a regex pass per side, which halved the cleaning
    chain's speed (BENCHMARKS.md, parallel). ``str.replace`` and ``strip`` keep it under a microsecond."""
    text = normalize_text(text).casefold()
    if not text.isascii():
        text = text.replace("’", "'").replace("‘", "'").replace("´", "'")
    return text.replace("`", "'").strip(_EDGE_MARKS)
