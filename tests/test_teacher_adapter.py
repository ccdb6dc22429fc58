"""train.teacher_adapter: the student's second, teacher-space output, on a real (one-layer) model.

The adapter must move the student's vectors towards the teacher's (it would fail as a no-op),
leave the student's own output exactly as it was, travel with the folder (load, export) and
serve ``xdistill encode/search --teacher-space``; a folder without one fails clearly."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.trainer_helpers import (
    TEACHER_SPEC,
    build_store,
    minilm_folder,
    stsb_dir,
    tiny_train_params,
    write_parallel_files,
)
from xdistill.cli.main import main
from xdistill.errors import XdistillError
from xdistill.training.settings import OutputPaths
from xdistill.training.trainer import train_student

ADAPTER = {"pairs": 48, "hidden": 64, "epochs": 40, "batch_pairs": 16, "learning_rate": 3e-3}


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The same tiny training run twice: without and with the adapter."""
    root = tmp_path_factory.mktemp("adapter")
    train, dev = write_parallel_files(root / "data")
    store = build_store(root, [train, dev])
    folders = {}
    for name, extra in (("plain", {}), ("adapter", {"teacher_adapter": ADAPTER})):
        out = root / name
        outputs = OutputPaths(out / "student", out / "ckpt", out / "train.json", None, None)
        train_student(
            train,
            dev,
            store,
            minilm_folder(),
            tiny_train_params(steps=4, eval_every=4, **extra),
            outputs,
            device="cpu",
            dev_sts_dir=stsb_dir(),
            teacher_spec=TEACHER_SPEC,
        )
        folders[name] = out
    return {"train": train, "dev": dev, "store": store, **folders}


def _train_sources(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        next(handle)
        return [line.split("\t")[0] for line in handle]


def test_adapter_maps_into_the_teacher_space_and_leaves_the_student_alone(trained: dict[str, Path]) -> None:
    from xdistill.adapter.model import load_encoder_with_adapter

    texts = _train_sources(trained["train"])[:32]
    plain = load_encoder_with_adapter(str(trained["plain"] / "student"))
    student = load_encoder_with_adapter(str(trained["adapter"] / "student"))
    adapted = load_encoder_with_adapter(str(trained["adapter"] / "student"), teacher_space=True)
    teacher = load_encoder_with_adapter(TEACHER_SPEC).encode(texts)
    own = student.encode(texts)
    np.testing.assert_allclose(own, plain.encode(texts), atol=1e-5)  # the student's own output is unchanged
    assert plain.teacher_adapter is None and student.teacher_adapter is not None
    mapped = adapted.encode(texts)
    assert mapped.shape == teacher.shape
    np.testing.assert_allclose(np.linalg.norm(mapped, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(mapped, student.teacher_adapter.map(own), atol=1e-6)
    # fitted on these pairs: far closer to the teacher's vectors than the student's own output
    assert np.mean((mapped - teacher) ** 2) < 0.5 * np.mean((own - teacher) ** 2)
    report = json.loads((trained["adapter"] / "train.json").read_text())["teacher_adapter"]
    assert report["pairs"] == 48 and report["steps"] > 0 and 0 <= report["dev_teacher_accuracy"] <= 100
    assert json.loads((trained["plain"] / "train.json").read_text())["teacher_adapter"] is None
    config = json.loads((trained["adapter"] / "student" / "teacher_space" / "config.json").read_text())
    assert config["teacher"] == TEACHER_SPEC and config["dim_out"] == 384


def test_start_adapter_stage_fits_what_the_trainer_fits(trained: dict[str, Path], tmp_path: Path) -> None:
    """The start_adapter stage fits a saved student's adapter on exactly the trainer's inputs (pairs, token
    lengths, batches): run on the exported student, it writes the adapter the trainer saved with it. The
    adapter loads beside that student and refuses any other; with pairs 0 the stage records that there is
    none, and the evaluation loads the model without one."""
    from safetensors.torch import load_file

    from xdistill.adapter.model import load_encoder_with_adapter
    from xdistill.adapter.start import DISABLED_FILE, fit_start_adapter
    from xdistill.training.settings import TrainParams

    student = trained["adapter"] / "student"
    params = TrainParams.from_params(tiny_train_params(steps=4, eval_every=4, teacher_adapter=ADAPTER))
    report = fit_start_adapter(
        student,
        trained["train"],
        trained["dev"],
        trained["store"],
        params,
        tmp_path / "fitted",
        teacher_spec=TEACHER_SPEC,
        device="cpu",
    )
    saved = json.loads((student / "teacher_space" / "config.json").read_text())["fit"]
    assert report["pairs"] == saved["pairs"] == 48
    assert report["dev_teacher_accuracy"] == pytest.approx(saved["dev_teacher_accuracy"], abs=1e-6)
    refitted, original = (
        load_file(str(folder / "teacher_space" / "model.safetensors")) for folder in (tmp_path / "fitted", student)
    )
    for name, weight in original.items():
        torch.testing.assert_close(refitted[name], weight, atol=1e-5, rtol=1e-4)
    encoder = load_encoder_with_adapter(str(student), adapter_from=tmp_path / "fitted")
    texts = _train_sources(trained["train"])[:4]
    np.testing.assert_allclose(
        encoder.teacher_adapter.map(encoder.encode(texts)),
        load_encoder_with_adapter(str(student), teacher_space=True).encode(texts),
        atol=1e-5,
    )
    plain = trained["plain"] / "student"
    with pytest.raises(XdistillError, match="fitted on another student"):  # a stale adapter is never applied
        load_encoder_with_adapter(str(plain), adapter_from=tmp_path / "fitted")

    off = TrainParams.from_params(tiny_train_params(teacher_adapter={"pairs": 0}))
    assert fit_start_adapter(plain, trained["train"], trained["dev"], trained["store"], off, tmp_path / "off") is None
    assert [p.name for p in (tmp_path / "off").iterdir()] == [DISABLED_FILE]
    assert load_encoder_with_adapter(str(plain), adapter_from=tmp_path / "off").teacher_adapter is None
    with pytest.raises(XdistillError, match="not a student folder"):
        fit_start_adapter(
            tmp_path / "missing", trained["train"], trained["dev"], trained["store"], params, tmp_path / "never"
        )
    assert not (tmp_path / "never").exists()


def test_adapter_settings_are_checked() -> None:
    from xdistill.training.settings import TrainParams

    with pytest.raises(XdistillError, match="teacher_adapter"):
        TrainParams.from_params({"teacher_adapter": {"pairs": 10, "epochs": 0}})
    with pytest.raises(XdistillError, match="teacher_adapter"):
        TrainParams.from_params({"teacher_adapter": {"pairs": 10, "layers": 2}})


def test_adapter_settings_leave_the_checkpoints_valid() -> None:
    """Export-only keys are outside the checkpoint fingerprint: changing them re-exports, not retrains."""
    from xdistill.training.settings import TrainParams

    one = TrainParams.from_params({"teacher_adapter": {"pairs": 10}, "export_rotation": True})
    two = TrainParams.from_params({})
    assert one.loop_settings() == two.loop_settings()
    assert TrainParams.from_params({"steps": 3}).loop_settings() != two.loop_settings()


def test_cli_encode_and_search_in_the_teacher_space(trained: dict[str, Path], tmp_path: Path) -> None:
    from xdistill.adapter.model import load_adapter

    sentences = _train_sources(trained["train"])[:12]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    index, queries = tmp_path / "index.npy", tmp_path / "queries.npy"
    assert main(["encode", str(corpus), "--model", TEACHER_SPEC, "-o", str(index), "--no-progress"]) == 0
    student = str(trained["adapter"] / "student")
    assert (
        main(["encode", str(corpus), "--model", student, "-o", str(queries), "--teacher-space", "--no-progress"]) == 0
    )
    own = tmp_path / "own.npy"
    assert main(["encode", str(corpus), "--model", student, "-o", str(own), "--no-progress"]) == 0
    adapter, _ = load_adapter(student)
    np.testing.assert_allclose(np.load(queries), adapter.map(np.load(own)), atol=1e-5)
    hits = tmp_path / "hits.tsv"
    assert (
        main(
            [
                "search",
                str(corpus),
                "--index",
                str(index),
                "--corpus",
                str(corpus),
                "--model",
                student,
                "--teacher-space",
                "-k",
                "1",
                "-o",
                str(hits),
            ]
        )
        == 0
    )
    assert len(hits.read_text(encoding="utf-8").splitlines()) >= len(sentences)


def test_teacher_space_without_an_adapter_fails_clearly(trained: dict[str, Path], tmp_path: Path, capsys) -> None:
    from xdistill.adapter.model import load_encoder_with_adapter

    plain = trained["plain"] / "student"
    with pytest.raises(XdistillError, match="no teacher-space adapter"):
        load_encoder_with_adapter(str(plain), teacher_space=True)
    corpus = tmp_path / "c.txt"
    corpus.write_text("Hallo Welt\n", encoding="utf-8")
    assert main(["encode", str(corpus), "--model", str(plain), "-o", str(tmp_path / "x.npy"), "--teacher-space"]) != 0
    assert "no teacher-space adapter" in capsys.readouterr().err
    assert not (tmp_path / "x.npy").exists()


def test_export_carries_the_adapter(trained: dict[str, Path], tmp_path: Path) -> None:
    from xdistill.adapter.model import load_encoder_with_adapter
    from xdistill.export.writer import export_student

    report = export_student(trained["adapter"] / "student", tmp_path / "export", ["fp16"])
    assert report.teacher_adapter
    texts = ["Der Zug fährt um zwölf Uhr ab.", "The train leaves at noon."]
    original = load_encoder_with_adapter(str(trained["adapter"] / "student"), teacher_space=True).encode(texts)
    exported = load_encoder_with_adapter(str(tmp_path / "export"), teacher_space=True).encode(texts)
    assert float(np.min(np.sum(original * exported, axis=1))) > 0.999  # fp16 encoder, fp32 adapter


def test_fit_learns_a_nonlinear_map() -> None:
    """On synthetic pairs whose target is a non-linear function of the input, the adapter beats the best
    affine map on held-out rows (the correction branch does work)."""
    from xdistill.adapter.fit import AdapterSettings, fit_teacher_adapter
    from xdistill.training.alignment import ridge_map

    generator = torch.Generator().manual_seed(0)
    x = torch.nn.functional.normalize(torch.randn(1200, 16, generator=generator), dim=-1)
    linear, quadratic = torch.randn(16, 24, generator=generator), torch.randn(16, 24, generator=generator)
    y = torch.nn.functional.normalize(x @ linear + (x @ quadratic) ** 2, dim=-1)
    noisy = torch.nn.functional.normalize(x + 0.01 * torch.randn(x.shape, generator=generator), dim=-1)
    adapter, report = fit_teacher_adapter(
        x[:1000],
        noisy[:1000],
        y[:1000],
        AdapterSettings(pairs=1000, hidden=128, epochs=60, batch_pairs=50, ranking=0.0),
    )
    weight, bias = ridge_map(x[:1000].double(), y[:1000].double(), ridge=1e-6)
    affine = torch.nn.functional.normalize(x[1000:].double() @ weight + bias, dim=-1).float()
    with torch.no_grad():
        mse_adapter = float(torch.mean((adapter(x[1000:]) - y[1000:]) ** 2))
    assert mse_adapter < 0.6 * float(torch.mean((affine - y[1000:]) ** 2)), report


@pytest.mark.parametrize(
    ("config", "weights"),
    [
        ({"dim_in": 4, "dim_out": 4, "hidden": 8}, b"\xff" * 64),  # safetensors' own error type
        ({"dim_in": None, "dim_out": 4, "hidden": 8}, b""),  # int(None): a TypeError
    ],
)
def test_a_damaged_adapter_is_named_not_a_traceback(tmp_path: Path, config: dict, weights: bytes) -> None:
    from xdistill.adapter.model import CONFIG_FILE, WEIGHTS_FILE, adapter_dir, load_adapter

    folder = adapter_dir(tmp_path)
    folder.mkdir()
    (folder / CONFIG_FILE).write_text(json.dumps(config), encoding="utf-8")
    (folder / WEIGHTS_FILE).write_bytes(weights)
    with pytest.raises(XdistillError, match="not a readable teacher-space adapter"):
        load_adapter(tmp_path)


def test_dev_report_names_the_worst_language_and_direction() -> None:
    from xdistill.adapter.fit import dev_retrieval_report

    en2xx = np.array([True, True, False, True, True, True])
    xx2en = np.array([True, False, False, True, True, True])
    report = dev_retrieval_report(en2xx, xx2en, ["ar", "ar", "ar", "de", "de", "de"])
    assert report["dev_teacher_accuracy_ar_en2xx"] == pytest.approx(200 / 3)
    assert report["dev_teacher_accuracy_ar_xx2en"] == pytest.approx(100 / 3)
    assert report["dev_teacher_accuracy_de_xx2en"] == 100.0
    assert report["dev_teacher_accuracy_min"] == pytest.approx(100 / 3)
    assert report["dev_teacher_accuracy"] == pytest.approx(50 * (5 / 6 + 4 / 6))
    assert "dev_teacher_accuracy_min" not in dev_retrieval_report(en2xx, xx2en, None)
