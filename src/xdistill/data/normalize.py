"""Text normalisation shared by every component that compares sentences.

Training data cleaning, decontamination, the teacher-embedding store and evaluation all key
sentences by :func:`normalize_text`, so "the same sentence" means the same thing everywhere.
"""

from __future__ import annotations

import functools
import re
import string
import sys
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


@functools.cache
def _format_characters() -> dict[int, None]:
    """A ``str.translate`` table deleting every Unicode format character (category Cf: zero-width, bidi and
    byte-order marks); built once, on the first non-ASCII key."""
    return dict.fromkeys(c for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf")


def decontamination_key(text: str) -> str:
    """``text`` as decontamination compares it: normalised (:func:`normalize_text`), case-folded, one
    apostrophe, without the punctuation, quotes and spaces around it. "A dog runs." and "a dog runs",
    '"Tough, tough, tough."' and "Tough, tough, tough.", o'clock and o’clock are one sentence here
    (exact matching let such copies of evaluation sentences into training data). Other punctuation inside
    a sentence still counts: folding it too takes a regex pass per side, which halved the cleaning
    chain's speed (BENCHMARKS.md, parallel). ``str.replace`` and ``strip`` keep it under a microsecond.

    Beyond ASCII the key is NFKC without format characters: "１２時です。" and "12時です。", a sentence with
    a byte-order mark or a right-to-left mark and the same one without are one sentence here, as they are
    for the student's tokenizer (XLM-R's normalises with NFKC and drops such marks)."""
    text = normalize_text(text)
    if not text.isascii():
        if not text.isprintable():  # format characters are not printable: translate (8 us a line) only then
            text = text.translate(_format_characters())
        # the apostrophes before NFKC, which turns the acute accent (´) into a space and a combining mark
        text = unicodedata.normalize("NFKC", text.replace("’", "'").replace("‘", "'").replace("´", "'"))
    text = text.casefold()
    return text.replace("`", "'").strip(_EDGE_MARKS)


# A sentence end inside a text: ., ! or ? (and the Arabic question mark) followed by a space and more text, or a
# CJK full stop, exclamation or question mark followed by anything (CJK text puts no space after them).
_INNER_SENTENCE_END = re.compile(r"(?<=[.!?\u061f])\s+(?=\S)|(?<=[\u3002\uff01\uff1f])(?=\S)")
_CJK_SENTENCE_ENDS = frozenset("\u3002\uff01\uff1f")


def _may_hold_inner_sentence_end(text: str) -> bool:
    """A cheap pre-check for :data:`_INNER_SENTENCE_END`: most training sides are one sentence, and a few
    substring tests (C speed) rule them out faster than a regex search (the sentence check cost ~25 % of the
    cleaning chain, BENCHMARKS.md). Whitespace other than the ASCII space is not printable, so a text holding
    any goes to the regex; a CJK mark that only ends the text splits nothing, so the last character is not looked at."""
    # an or-chain of ``in`` tests, not any() over a tuple: the generator's overhead was a third of the time
    if ". " in text or "? " in text or "! " in text or "\u061f " in text or not text.isprintable():
        return True
    return not text.isascii() and not _CJK_SENTENCE_ENDS.isdisjoint(text[:-1])


def inner_sentences(text: str) -> list[str]:
    """The sentences of a multi-sentence ``text`` (a TED subtitle line, an OPUS unit, a Tatoeba entry of two
    sentences), split after sentence-final punctuation; ``[]`` for a text of one sentence. Decontamination looks
    each of them up too: an evaluation sentence inside a longer training unit is still that sentence. An
    abbreviation ("Mr. Smith") makes a piece that no evaluation set holds, so a wrong split costs nothing."""
    if not _may_hold_inner_sentence_end(text) or _INNER_SENTENCE_END.search(text) is None:
        return []
    return [piece for piece in _INNER_SENTENCE_END.split(text) if piece.strip(_EDGE_MARKS)]


def holds_evaluation_sentence(text: str, evaluation: set[str] | frozenset[str]) -> bool:
    """Whether ``text`` or one of its :func:`inner_sentences` is, by :func:`decontamination_key`, in ``evaluation``."""
    return decontamination_key(text) in evaluation or any(
        decontamination_key(piece) in evaluation for piece in inner_sentences(text)
    )
