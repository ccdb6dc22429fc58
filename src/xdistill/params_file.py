"""params.yaml written the way the stages read it: values set by dotted key, comments and layout kept.

Why not ``dvc exp run -S``: DVC writes the overridden file with a YAML 1.2 writer (``1e-05``), which
the stages' reader (PyYAML, YAML 1.1) takes for the *string* "1e-05". :func:`write_params` sets the
values itself, keeps the file's comments, and checks that PyYAML reads back exactly what was set.
:func:`check_stage_params` builds every stage's settings from a params mapping, so that a value a
stage would refuse fails before the pipeline starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from xdistill.io import write_text_atomic


def write_params(params_file: Path, values: dict[str, Any]) -> None:
    """Set ``values`` (dotted keys) in a params file, keeping its comments and layout.

    Every key must already exist (a typo must not silently add a setting no stage reads). The
    file is written so that PyYAML, the stages' reader, reads back exactly ``values``: floats
    always carry a dot (``1.0e-05``), which YAML 1.1 needs to read a float.
    """
    from ruamel.yaml import YAML

    rt_yaml = YAML()  # round-trip: comments, key order, quotes and flow style survive
    rt_yaml.preserve_quotes = True
    rt_yaml.width = 100
    rt_yaml.indent(mapping=2, sequence=4, offset=2)
    rt_yaml.representer.add_representer(float, _represent_yaml11_float)
    rt_yaml.representer.add_representer(type(None), _represent_null)
    rt_yaml.representer.add_representer(str, _represent_str)
    data = rt_yaml.load(params_file.read_text(encoding="utf-8"))
    for key, value in values.items():
        parent, leaf = _dotted_parent(data, key, params_file)
        _check_same_kind(key, parent[leaf], value, params_file)
        parent[leaf] = _same_style(parent[leaf], value)
    text = _dump(rt_yaml, data)
    # the stages read params.yaml with PyYAML, DVC (its params diff, `dvc exp show`) with ruamel
    for reader in (yaml.safe_load, lambda text: YAML(typ="safe").load(text)):
        read_back = reader(text)
        for key, value in values.items():
            parent, leaf = _dotted_parent(read_back, key, params_file)
            if parent[leaf] != value or type(parent[leaf]) is not type(value):
                raise ValueError(f"{params_file}: {key}={value!r} would be read back as {parent[leaf]!r}")
    write_text_atomic(params_file, text)


def _value_kind(value: Any) -> str | None:
    """What a stage expects of a setting: a number (int or float alike), a flag, a text, a list or a mapping."""
    if value is None:
        return None  # null: "every pair", "off", ... any kind may replace it, and be replaced by it
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return "a number"
    # isinstance: the round-trip reader's values are subclasses (CommentedSeq, ScalarFloat, ...)
    kinds = ((str, "a text"), (list, "a list"), (dict, "a mapping"))
    return next((kind for cls, kind in kinds if isinstance(value, cls)), type(value).__name__)


def _check_same_kind(key: str, current: Any, value: Any, params_file: Path) -> None:
    """Refuse a value of another kind than the one it replaces ("3e-5" for a learning rate): it would read back
    as itself and fail only in the stage that reads it, maybe hours into the run."""
    was, new = _value_kind(current), _value_kind(value)
    # "auto" stands for a number a stage works out itself (runtime.nproc: every visible GPU)
    if {was, new} == {"a number", "a text"} and "auto" in (current, value):
        return
    if was is not None and new is not None and was != new:
        raise ValueError(f"{params_file}: {key} is {was} ({current!r}), not {new} ({value!r})")


def check_stage_params(params: dict[str, Any], params_file: Path) -> None:
    """Build every stage's settings from the run's params before `dvc exp run`: a value the stage would refuse
    (every loss weight 0, a batch that grad_accumulation does not divide, a negative promotion margin, a
    learning rate of 0, an unknown device) fails the run now, with the stage's own message, not when that
    stage starts."""
    from xdistill.config import parse_section
    from xdistill.data.parallel import ParallelConfig
    from xdistill.evaluation.settings import EvaluationSettings
    from xdistill.registry.gate import PromoteConfig
    from xdistill.registry.register import RegisterConfig
    from xdistill.teacher.embed import TeacherEmbedSettings
    from xdistill.training.settings import RuntimeSettings, TrainParams
    from xdistill.training.student import StudentConfig

    try:
        if "train" in params:
            train = TrainParams.from_params(params["train"])
            StudentConfig.from_params(
                str((params.get("models") or {}).get("student", "")), train.student, train.max_seq_length
            )
            train.check_world_size(1)
        if "parallel" in params:
            ParallelConfig.from_params(params["parallel"])
        parse_section(TeacherEmbedSettings, params.get("teacher_embed"), "teacher_embed")
        if "evaluate" in params:
            EvaluationSettings.from_params(params["evaluate"], params.get("languages") or [])
        RuntimeSettings.from_params(params.get("runtime"))
        RegisterConfig.from_params(params.get("register"))
        PromoteConfig.from_params(params.get("promote"))
    except Exception as exc:
        raise ValueError(f"{params_file}: {exc}") from exc


def _dotted_parent(data: Any, key: str, params_file: Path) -> tuple[dict[str, Any], str]:
    """The mapping that holds the last part of a dotted key, and that part; a clear error if absent."""
    *path, leaf = key.split(".")
    node = data
    for depth, part in enumerate(path):
        node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            raise ValueError(f"{params_file}: no section '{'.'.join(path[: depth + 1])}' for the parameter '{key}'")
    if leaf not in node:
        known = ", ".join(sorted(node)) or "none"
        raise ValueError(f"{params_file}: unknown parameter '{key}' (keys there: {known})")
    return node, leaf


def _represent_yaml11_float(representer: Any, value: float) -> Any:
    text = repr(value)
    mantissa, exp_mark, exponent = text.partition("e")
    if exp_mark and "." not in mantissa:
        text = f"{mantissa}.0e{exponent}"  # PyYAML reads 1e-05 as a string, 1.0e-05 as a float
    elif text in ("inf", "-inf", "nan"):
        text = {"inf": ".inf", "-inf": "-.inf", "nan": ".nan"}[text]
    return representer.represent_scalar("tag:yaml.org,2002:float", text)


def _represent_str(representer: Any, value: str) -> Any:
    # DVC's YAML parser rejects a plain `pypi:name` inside a flow mapping ({teacher: pypi:...}): quote it
    style = '"' if ":" in value else None
    return representer.represent_scalar("tag:yaml.org,2002:str", value, style=style)


def _represent_null(representer: Any, value: None) -> Any:
    return representer.represent_scalar("tag:yaml.org,2002:null", "null")


def _same_style(old: Any, new: Any) -> Any:
    """``new`` as a flow-style list/mapping (``[a, b]``) where the value it replaces was one."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    if isinstance(new, list) and isinstance(old, CommentedSeq) and old.fa.flow_style():
        styled: Any = CommentedSeq(new)
    elif isinstance(new, dict) and isinstance(old, CommentedMap) and old.fa.flow_style():
        styled = CommentedMap(new)
    else:
        return new
    styled.fa.set_flow_style()
    return styled


def _dump(rt_yaml: Any, data: Any) -> str:
    from io import StringIO

    stream = StringIO()
    rt_yaml.dump(data, stream)
    return stream.getvalue()
