"""Language codes: the project speaks ISO 639-1 (``de``); datasets name files in other schemes."""

from __future__ import annotations

from pathlib import Path

from xdistill.errors import XdistillError

# ISO 639-1 -> (ISO 639-3 as used by Tatoeba/LASER/FreeDict file names, FLORES-200 code)
_CODES: dict[str, tuple[str, str]] = {
    "en": ("eng", "eng_Latn"),
    "ar": ("ara", "arb_Arab"),
    "de": ("deu", "deu_Latn"),
    "es": ("spa", "spa_Latn"),
    "fr": ("fra", "fra_Latn"),
    "it": ("ita", "ita_Latn"),
    "nl": ("nld", "nld_Latn"),
    "ru": ("rus", "rus_Cyrl"),
    "tr": ("tur", "tur_Latn"),
    "zh": ("cmn", "zho_Hans"),
    "pt": ("por", "por_Latn"),
    "pl": ("pol", "pol_Latn"),
    "ja": ("jpn", "jpn_Jpan"),
    "ko": ("kor", "kor_Hang"),
    "uk": ("ukr", "ukr_Cyrl"),
    "cs": ("ces", "ces_Latn"),
    "bg": ("bul", "bul_Cyrl"),
    "el": ("ell", "ell_Grek"),
    "fi": ("fin", "fin_Latn"),
    "he": ("heb", "heb_Hebr"),
    "hi": ("hin", "hin_Deva"),
    "hu": ("hun", "hun_Latn"),
    "id": ("ind", "ind_Latn"),
    "ro": ("ron", "ron_Latn"),
    "th": ("tha", "tha_Thai"),
    "vi": ("vie", "vie_Latn"),
    "fa": ("pes", "pes_Arab"),
    "ur": ("urd", "urd_Arab"),
}


def placeholders(lang: str) -> dict[str, str]:
    """Values for the ``{lang}``, ``{lang3}`` and ``{flores}`` placeholders of file patterns."""
    if lang not in _CODES:
        raise XdistillError(
            f"language '{lang}' has no known ISO 639-3 / FLORES code; known: {', '.join(sorted(_CODES))}"
        )
    lang3, flores = _CODES[lang]
    return {"lang": lang, "lang3": lang3, "flores": flores}


def expand(pattern: str, lang: str) -> str:
    """Fill a file pattern's language placeholders for ``lang`` (a pattern without any is returned as is)."""
    if "{" not in pattern:
        return pattern
    try:
        return pattern.format(**placeholders(lang))
    except KeyError as exc:
        raise XdistillError(
            f"file pattern '{pattern}': unknown placeholder {exc} (use {{lang}}, {{lang3}}, {{flores}})"
        ) from exc


def known_codes() -> set[str]:
    """Every ISO 639-1 and 639-3 code this module knows (header detection uses them)."""
    return set(_CODES) | {lang3 for lang3, _ in _CODES.values()}


def check_languages(languages: object, where: str | Path) -> list[str]:
    """The ``languages`` param as a list of known ISO 639-1 codes; a clear error naming ``where`` otherwise."""
    if not isinstance(languages, list) or not languages or not all(isinstance(lang, str) for lang in languages):
        raise XdistillError(f"{where}: `languages` must be a non-empty list of ISO 639-1 codes, got {languages!r}")
    unknown = [lang for lang in languages if lang not in _CODES]
    if unknown:
        raise XdistillError(
            f"{where}: unknown language code(s) {', '.join(map(repr, unknown))} in `languages` "
            f"(ISO 639-1; known: {', '.join(sorted(_CODES))})"
        )
    return list(languages)
