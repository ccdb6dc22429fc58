"""Typed params sections: the one place a params.yaml mapping becomes a checked settings object.

Every section (``train``, ``train.student``, ``train.loss``, ``evaluate``, ``promote``, ...) is a
dataclass whose fields are the section's keys, with their types and defaults. :func:`parse_section`
validates a mapping against it with pydantic: an unknown key (a typo must never silently do
nothing), a value of the wrong type, and YAML's habit of reading ``2e-5`` as a string (coerced to
the field's number type) are all handled here, once, with an error that names the section and key.
Ranges live on the fields themselves (:data:`Count`, :data:`PositiveFloat`, ... below), numbers must be
finite (NaN and infinity are refused everywhere) and a YAML boolean is never read as a number (``steps:
true`` would otherwise silently become 1). Checks that involve several fields stay in the dataclass's
``__post_init__``.

A dataclass opts in with ``__pydantic_config__ = SECTION_CONFIG`` (unknown keys forbidden, finite numbers).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from functools import cache
from typing import Annotated, Any, TypeVar

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError

from xdistill.errors import XdistillError

SECTION_CONFIG = ConfigDict(extra="forbid", allow_inf_nan=False)
T = TypeVar("T")

# Field types with their range: a section declares ``steps: Count = 200`` and pydantic refuses 0 with
# "Input should be greater than or equal to 1", naming the key.
Count = Annotated[int, Field(ge=1)]
NonNegativeInt = Annotated[int, Field(ge=0)]
PositiveFloat = Annotated[float, Field(gt=0)]
NonNegativeFloat = Annotated[float, Field(ge=0)]
Fraction = Annotated[float, Field(ge=0, le=1)]  # a share or a probability, both ends included


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
    _refuse_booleans_as_numbers(cls, values, where)
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


def _refuse_booleans_as_numbers(cls: type, values: Mapping[str, Any], where: str) -> None:
    """pydantic's lax mode reads ``true`` as 1 for a number field: a YAML slip (``steps: true``,
    ``mse: yes``) that must fail, not train for one step."""
    if not dataclasses.is_dataclass(cls):
        return
    hints = typing.get_type_hints(cls, include_extras=True)
    for key, value in values.items():
        if isinstance(value, bool) and key in hints and _number_not_bool(hints[key]):
            raise XdistillError(f"params {where}.{key}: expected a number, got the boolean {str(value).lower()}")


def _number_not_bool(hint: Any) -> bool:
    """Whether a field typed ``hint`` takes a number (int or float, possibly optional or annotated) and no bool."""
    members = _members(hint)
    return bool(members & {int, float}) and not members & {bool, Any}


def _members(hint: Any) -> set[Any]:
    origin = typing.get_origin(hint)
    if origin is Annotated:
        return _members(typing.get_args(hint)[0])
    if origin in (typing.Union, types.UnionType):
        return set().union(*(_members(arg) for arg in typing.get_args(hint)))
    if origin is typing.Literal:
        return {type(arg) for arg in typing.get_args(hint)}
    return {hint}


RANGE_ERRORS = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}


def _problem(error: Any, cls: type, loc: tuple[str, ...]) -> str:
    """`` must be >= 1, got 0`` for a value out of range (`` or null`` where the key may be null), else
    ``: <pydantic's message> (got <value>)``."""
    got = error.get("input")
    if error["type"] in RANGE_ERRORS:
        bound = next(iter(error["ctx"].values()))
        hints = typing.get_type_hints(cls) if dataclasses.is_dataclass(cls) and len(loc) == 1 else {}
        nullable = type(None) in _members(hints.get(loc[0])) if hints else False
        return f" must be {RANGE_ERRORS[error['type']]} {bound:g}{' or null' if nullable else ''}, got {got!r}"
    value = f" (got {got!r})" if "input" in error and not isinstance(got, Mapping) else ""
    return f": {error['msg'].removeprefix('Value error, ')}{value}"


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
        key = ".".join(loc)
        values.append(f"params {where}{'.' + key if key else ''}{_problem(error, cls, loc)}")
    clauses = []
    for parent, keys in unknown.items():
        known = (
            ""
            if parent
            else f" (known: {sorted(k for k in getattr(cls, '__dataclass_fields__', {}) if k not in fixed)})"
        )
        clauses.append(f"params {'.'.join((where, *parent))}: unknown keys {sorted(keys)}{known}")
    return "; ".join(clauses + values)
