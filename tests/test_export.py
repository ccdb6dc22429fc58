"""`xdistill export` on a tiny real mE5 student: ONNX fp32 / int8 and fp16 match PyTorch; encode and mine run on
them."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tests.lightweight_helpers import E5_SPEC, LANGUAGES, tatoeba_pairs, tiny_e5_student
from xdistill.cli.main import main
from xdistill.errors import InputFileError, XdistillError
from xdistill.export.files import ONNX_FILES
from xdistill.export.onnx import narrowing_matmuls, outlier_matmuls
from xdistill.export.runtime import load_student
from xdistill.export.writer import ONNX_FP32_MIN_COSINE, ONNX_INT8_MIN_COSINE, export_student
from xdistill.models import load_encoder
from xdistill.models.vocabulary import trim_vocabulary
from xdistill.training.student import StudentConfig, build_student, save_student

pytestmark = pytest.mark.slow  # every test here is over ~4 s, or shares a fixture that is

PAIRS = {lang: tatoeba_pairs(lang, 12) for lang in LANGUAGES}
SENTENCES = [text for pairs in PAIRS.values() for pair in pairs for text in pair]


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[Path, Path]:
    """(the PyTorch student folder, its export): one transformer layer, vocabulary trimmed to SENTENCES."""
    root = tmp_path_factory.mktemp("export")
    student = tiny_e5_student()
    trim_vocabulary(student, SENTENCES)
    source = save_student(student, root / "student")
    assert main(["export", str(source), "-o", str(root / "exported")]) == 0  # every format, through the CLI
    return source, root / "exported"


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_export_writes_sentence_transformers_onnx_layout_and_report(exported) -> None:
    import json

    _, folder = exported
    report = json.loads((folder / "export.json").read_text())
    assert report["files"] == {
        "onnx": "onnx/model.onnx",
        "onnx-int8": "onnx/model_qint8_avx512_vnni.onnx",
        "fp16": "model.safetensors",
    }
    assert (folder / "modules.json").is_file() and (folder / "tokenizer.json").is_file()
    assert report["size_mb"]["fp16"] < report["size_mb"]["onnx"]
    assert report["size_mb"]["onnx-int8"] < report["size_mb"]["onnx"]
    assert report["min_cosine_to_fp32"]["onnx"] >= ONNX_FP32_MIN_COSINE


def test_a_dense_head_stays_float32_beside_the_fp16_weights(tmp_path: Path) -> None:
    """The head's files serve the fp32 ONNX backend too: only the transformer is halved."""
    from safetensors import safe_open

    source = save_student(tiny_e5_student(output_dim=32), tmp_path / "student")
    export_student(source, tmp_path / "exported", ["onnx", "fp16"])
    dense = next((tmp_path / "exported").glob("*_Dense/model.safetensors"))
    with safe_open(str(dense), "pt") as weights:
        assert {str(weights.get_tensor(name).dtype) for name in weights.keys()} == {"torch.float32"}
    with safe_open(str(tmp_path / "exported" / "model.safetensors"), "pt") as weights:
        assert str(weights.get_tensor(next(iter(weights.keys()))).dtype) == "torch.float16"


def test_graph_is_fused_and_int8_keeps_only_the_outlier_projection_in_fp32(tmp_path: Path) -> None:
    """Three real mE5 layers: attention and GELU fused; every weight MatMul int8 except layer 0's FFN output.

    Layer 0's GELU outputs span ~33, layers 1-2's ~12-14 (untrained mE5-small, measured on the check texts,
    which were the calibration sample until it got its own sentences).
    """
    import onnx

    student = build_student(StudentConfig(E5_SPEC, keep_layers=3, max_seq_length=64))
    report = export_student(save_student(student, tmp_path / "student"), tmp_path / "exported", ["onnx", "onnx-int8"])
    fp32 = onnx.load(str(tmp_path / "exported" / ONNX_FILES["onnx"]))
    ops = Counter(node.op_type for node in fp32.graph.node)
    assert ops["MultiHeadAttention"] == 3 and ops["BiasGelu"] == 3
    assert ops["Attention"] == 0 and ops["SkipLayerNormalization"] == 0  # see xdistill.export.onnx.fuse_for_cpu
    assert report.fusions["mha_bias"] == 3
    narrowing = narrowing_matmuls(fp32)
    assert len(narrowing) == 3 and report.int8_fp32_matmuls == [narrowing[0]]
    int8 = onnx.load(str(tmp_path / "exported" / ONNX_FILES["onnx-int8"]))
    weights = {init.name for init in int8.graph.initializer}
    fp32_left = [n.name for n in int8.graph.node if n.op_type == "MatMul" and n.input[1] in weights]
    assert fp32_left == [narrowing[0]]
    assert Counter(n.op_type for n in int8.graph.node)["MatMulInteger"] == 3 * 6 - 1  # Q, K, V, out, FFN in/out


@pytest.mark.parametrize("backend", ["onnx", "onnx-int8"])
def test_a_line_longer_than_the_model_is_cut_as_pytorch_cuts_it(exported, backend: str) -> None:
    """sentence-transformers 6 saves no max_seq_length: the ONNX graph must still never see more positions."""
    source, folder = exported
    long_line = " ".join(SENTENCES) * 8  # thousands of tokens, past the 512 positions
    reference = load_student(source, "torch", device="cpu").encode([long_line])
    onnx_student = load_student(folder, backend)
    assert onnx_student.max_seq_length == 512
    assert cosines(onnx_student.encode([long_line]), reference)[0] >= ONNX_INT8_MIN_COSINE


def test_outlier_matmuls_are_those_spanning_over_twice_the_median() -> None:
    assert outlier_matmuls({"a": 12.0, "b": 70.0, "c": 33.0, "d": 6.0, "e": 11.0}) == ["b", "c"]
    assert outlier_matmuls({"only": 50.0}) == [] and outlier_matmuls({}) == []


@pytest.mark.parametrize(
    ("backend", "bound"),
    [("onnx", ONNX_FP32_MIN_COSINE), ("onnx-int8", ONNX_INT8_MIN_COSINE), ("torch", ONNX_FP32_MIN_COSINE)],
)
def test_exported_embeddings_match_pytorch_in_every_language(exported, backend: str, bound: float) -> None:
    source, folder = exported
    reference = load_student(source, "torch", device="cpu").encode(SENTENCES)
    model = load_student(folder, backend, device="cpu")
    if backend == "torch":  # the fp16 weights, loaded back as float32 on CPU
        assert next(model.parameters()).dtype.is_floating_point and next(model.parameters()).element_size() == 4
    vectors = model.encode(SENTENCES)
    assert vectors.shape == reference.shape
    assert cosines(vectors, reference).min() >= bound


def test_encode_runs_on_the_int8_export(exported, tmp_path: Path) -> None:
    source, folder = exported
    text = tmp_path / "sentences.txt"
    text.write_text("\n".join(SENTENCES[:30]) + "\n", encoding="utf-8")
    out = tmp_path / "vectors.npy"
    assert (
        main(["encode", str(text), "--model", str(folder), "--backend", "onnx-int8", "-o", str(out), "--no-progress"])
        == 0
    )
    vectors = np.load(out)
    reference = load_encoder(str(source)).encode(SENTENCES[:30])
    assert vectors.shape == reference.shape and cosines(vectors, reference).min() >= ONNX_INT8_MIN_COSINE


def test_mine_finds_translations_with_the_onnx_export(exported, tmp_path: Path) -> None:
    _, folder = exported
    german = PAIRS["de"]
    (tmp_path / "src.txt").write_text("".join(de + "\n" for _, de in german), encoding="utf-8")
    (tmp_path / "tgt.txt").write_text("".join(en + "\n" for en, _ in reversed(german)), encoding="utf-8")
    out = tmp_path / "pairs.tsv"
    assert (
        main(
            [
                "mine",
                str(tmp_path / "src.txt"),
                str(tmp_path / "tgt.txt"),
                "--model",
                str(folder),
                "--backend",
                "onnx",
                "-k",
                "2",
                "-o",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    mined = {tuple(line.split("\t")[1:]) for line in out.read_text(encoding="utf-8").splitlines()}
    correct = sum((de, en) in mined for en, de in german)
    assert correct >= len(german) // 2  # a one-layer student, but translations still find each other


def test_folders_without_weights_give_clear_errors(exported, tmp_path: Path, capsys) -> None:
    source, folder = exported
    bare = tmp_path / "bare"
    shutil.copytree(folder, bare, ignore=shutil.ignore_patterns("*.safetensors", "*.onnx"))
    with pytest.raises(XdistillError, match="model folder without weights"):  # resolve_model_dir checks first
        load_encoder(str(bare))
    with pytest.raises(XdistillError, match=r"no onnx/model_qint8_avx512_vnni.onnx for backend 'onnx-int8'"):
        load_student(bare, "onnx-int8")
    text = tmp_path / "s.txt"
    text.write_text("Hallo Welt\n", encoding="utf-8")
    assert main(["encode", str(text), "--model", str(source), "--backend", "onnx", "-o", str(tmp_path / "v.npy")]) == 2
    assert f"{source}: no {ONNX_FILES['onnx']} for backend 'onnx'; it has weights for: torch" in capsys.readouterr().err
    with pytest.raises(XdistillError, match="student folder not found"):
        export_student(tmp_path / "missing", tmp_path / "out")
    with pytest.raises(XdistillError, match="export formats must be among"):
        export_student(source, tmp_path / "out", ["tflite"])
    assert main(["export", str(source), "-o", str(tmp_path / "out"), "--formats", "tflite"]) == 2
    assert "'tflite' is not one of 'onnx', 'onnx-int8', 'fp16'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("damage", ["truncated", "empty"])
def test_a_damaged_onnx_graph_is_named_not_a_traceback(exported, tmp_path: Path, damage: str, capsys) -> None:
    _, folder = exported
    copy = tmp_path / "damaged"
    shutil.copytree(folder, copy)
    graph = copy / ONNX_FILES["onnx"]
    graph.write_bytes(graph.read_bytes()[: graph.stat().st_size // 2] if damage == "truncated" else b"")
    with pytest.raises(InputFileError, match="onnxruntime cannot load it") as refused:
        load_student(copy, "onnx")
    assert refused.value.path == graph
    text = tmp_path / "s.txt"
    text.write_text("Hallo Welt\n", encoding="utf-8")
    out = tmp_path / "v.npy"
    assert main(["encode", str(text), "--model", str(copy), "--backend", "onnx", "-o", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"error: {graph}: onnxruntime cannot load it (" in err and "the file is damaged" in err
    assert "Traceback" not in err and not out.exists()


def test_export_never_replaces_the_student(exported, capsys) -> None:
    source, _ = exported
    before = sorted(p.name for p in source.iterdir())
    for output, problem in (
        (source, "is or holds the student"),
        (source.parent, "is or holds the student"),
        (source / "onnx-export", "lies inside the student"),
    ):
        assert main(["export", str(source), "-o", str(output), "--formats", "onnx"]) == 2
        assert problem in capsys.readouterr().err
    assert sorted(p.name for p in source.iterdir()) == before and (source / "model.safetensors").is_file()


@pytest.mark.parametrize(
    ("bound", "formats", "problem"),
    [
        ("ONNX_INT8_MIN_COSINE", ["onnx", "onnx-int8"], "the onnx-int8 export does not reproduce the student"),
        # an int8-only export still checks the fp32 graph it was quantised from (then drops it)
        ("ONNX_FP32_MIN_COSINE", ["onnx-int8"], "the onnx export does not reproduce the student"),
    ],
)
def test_an_export_below_its_cosine_bound_is_not_written(
    exported, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bound: str, formats: list[str], problem: str
) -> None:
    """Each ONNX graph must reproduce the student; the bound is raised past 1 so that the real one fails."""
    import xdistill.export.writer as writer

    source, _ = exported
    monkeypatch.setattr(writer, bound, 1.01)
    with pytest.raises(XdistillError, match=problem):
        export_student(source, tmp_path / "out", formats)
    assert not (tmp_path / "out").exists()


def test_an_export_whose_embeddings_overflow_is_not_written(exported, tmp_path: Path) -> None:
    """Hidden states past float16's range (65504) are inf in the fp16 copy and its embeddings NaN: a NaN
    minimum cosine would slip past every bound and into the report."""
    import shutil

    from safetensors.torch import load_file, save_file

    source, _ = exported
    loud = shutil.copytree(source, tmp_path / "loud")
    weights = load_file(loud / "model.safetensors")
    last_norm = sorted(name for name in weights if name.endswith("output.LayerNorm.weight"))[-1]
    weights[last_norm] = weights[last_norm] * 1e6  # fp32 still fine: the embeddings are normalised
    save_file(weights, loud / "model.safetensors")
    with pytest.raises(XdistillError, match="the fp16 export produces non-finite embeddings"):
        export_student(loud, tmp_path / "out", ["fp16"])
    assert not (tmp_path / "out").exists()


def test_an_int8_only_export_holds_only_the_int8_graph(exported, tmp_path: Path) -> None:
    source, _ = exported
    report = export_student(source, tmp_path / "out", ["onnx-int8"])
    assert sorted(report.min_cosine_to_fp32) == ["onnx-int8"] and report.min_cosine_to_fp32["onnx-int8"] >= 0.98
    assert sorted(p.name for p in (tmp_path / "out" / "onnx").iterdir()) == [Path(ONNX_FILES["onnx-int8"]).name]


def test_the_onnx_backend_refuses_module_classes_outside_sentence_transformers(tmp_path: Path, monkeypatch) -> None:
    """modules.json names the classes to import: one outside sentence_transformers.* runs code the folder chose,
    which sentence-transformers' own loader refuses without trust_remote_code; so does the ONNX backend."""
    import json

    payload = tmp_path / "site"
    payload.mkdir()
    marker = tmp_path / "ran"
    (payload / "xdistill_probe_payload.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\nclass Payload:\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(payload))
    folder = tmp_path / "student"
    (folder / Path(ONNX_FILES["onnx"])).parent.mkdir(parents=True)
    (folder / ONNX_FILES["onnx"]).write_bytes(b"not read: the gate comes first")
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.sentence_transformer.modules.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Payload", "type": "xdistill_probe_payload.Payload"},
    ]
    (folder / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(XdistillError, match="not part of sentence-transformers"):
        load_student(folder, "onnx")
    assert not marker.exists()
