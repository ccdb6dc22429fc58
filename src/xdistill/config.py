"""Typed params sections: the one place a params.yaml mapping becomes a checked settings object.

Every section (``train``, ``train.student``, ``train.loss``, ``evaluate``, ``promote``, ...) is a
dataclass whose fields are the section's keys, with their types and defaults. :func:`parse_section`
validates a mapping against it with pydantic: an unknown key (a typo must never silently do
nothing), a value of the wrong type, and YAML's habit of reading ``2e-5`` as a string (coerced to
the field's number type) are all handled here, once, with an error that names the section and key.
Checks that involve several fields stay in the dataclass's ``__post_init__``.

A dataclass opts in with ``__pydantic_config__ = SECTION_CONFIG`` (unknown keys forbidden).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any, TypeVar

from pydantic import ConfigDict, TypeAdapter, ValidationError

from xdistill.errors import XdistillError

SECTION_CONFIG = ConfigDict(extra="forbid")
T = TypeVar("T")


@cache
def _adapter(cls: type) -> TypeAdapter:
    return TypeAdapter(cls)


def parse_section(
    cls: type[T], section: Mapping[str, Any] | None, where: str, *, null_is_default: bool = False, **fixed: Any
) -> T:
    """``cls`` built from ``section`` (plus ``fixed`` values that do not come from params.yaml).

    ``where`` names the section in errors, e.g. ``"train.student"``; ``null_is_default``: a key
    set to null takes the field's default (sections whose every field has a non-null default).
    """
    if section is not None and not isinstance(section, Mapping):
        raise XdistillError(f"params {where}: expected a mapping of settings, got {type(section).__name__}")
    values = {k: v for k, v in (section or {}).items() if not (null_is_default and v is None)}
    shadowed = sorted(set(values) & set(fixed))
    if shadowed:  # set elsewhere (models.student, train.max_seq_length, ...): a value here would be ignored
        raise XdistillError(
            f"params {where}: unknown keys {shadowed} (known: "
            f"{sorted(k for k in getattr(cls, '__dataclass_fields__', {}) if k not in fixed)})"
        )
    try:
        dataclass_type: type = cls  # the cache's Hashable argument: mypy does not see type[T] as one
        return _adapter(dataclass_type).validate_python({**values, **fixed})
    except ValidationError as exc:
        raise XdistillError(describe(exc, cls, where, fixed)) from None


UNKNOWN_KEY_ERRORS = ("unexpected_keyword_argument", "extra_forbidden")


def describe(exc: ValidationError, cls: type, where: str, fixed: Mapping[str, Any]) -> str:
    """``params <section>: <problem>``, one clause per problem: unknown keys grouped per (sub-)section
    (with the known ones at the top level), then each bad value with the key it belongs to."""
    unknown: dict[tuple, list[str]] = {}
    values = []
    for error in exc.errors():
        loc = tuple(str(part) for part in error["loc"])
        if error["type"] in UNKNOWN_KEY_ERRORS:
            unknown.setdefault(loc[:-1], []).append(loc[-1])
            continue
        value = f" (got {error['input']!r})" if "input" in error and not isinstance(error["input"], Mapping) else ""
        key = ".".join(loc)
        values.append(f"params {where}{'.' + key if key else ''}: {error['msg'].removeprefix('Value error, ')}{value}")
    clauses = []
    for parent, keys in unknown.items():
        known = (
            ""
            if parent
            else f" (known: {sorted(k for k in getattr(cls, '__dataclass_fields__', {}) if k not in fixed)})"
        )
        clauses.append(f"params {'.'.join((where, *parent))}: unknown keys {sorted(keys)}{known}")
    return "; ".join(clauses + values)
