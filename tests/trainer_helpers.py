"""Tiny real data and models for the trainer and student tests.

- data: the first pairs of the mirror's Tatoeba en-de training file (real sentences), written as
  the parallel stage's gzipped TSV;
- teacher: the default teacher (pypi:all-minilm-l6-v2) embedded into a real TeacherStore;
- student: the same MiniLM folder cut to one transformer layer (``keep_layers: 1``), so a
  training step takes a fraction of a second on CPU.
"""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
TEACHER_SPEC = "pypi:all-minilm-l6-v2"
TATOEBA_DE = "train/tatoeba-challenge/tatoeba-challenge.minus-laser-test.en-de.tsv.gz"


def mirror_dir() -> Path:
    from xdistill.env import find_mirror

    return find_mirror(REPO_ROOT)


def minilm_folder() -> str:
    from xdistill.models import resolve_model_dir

    return str(resolve_model_dir(TEACHER_SPEC))


def write_parallel_files(folder: Path, n_train: int = 48, n_dev: int = 24) -> tuple[Path, Path]:
    """``train.tsv.gz`` and ``dev.tsv.gz`` from the first real Tatoeba en-de pairs."""
    from xdistill.data.parallel_tsv import write_parallel_tsv

    folder.mkdir(parents=True, exist_ok=True)
    rows: list[tuple[str, str]] = []
    with gzip.open(mirror_dir() / TATOEBA_DE, "rt", encoding="utf-8") as handle:
        next(handle)
        for line in handle:
            english, german = line.rstrip("\n").split("\t")[:2]
            rows.append((english, german))
            if len(rows) == n_train + n_dev:
                break
    paths = []
    for name, part in (("train", rows[:n_train]), ("dev", rows[n_train:])):
        path = folder / f"{name}.tsv.gz"
        write_parallel_tsv(path, ((en, de, "de", "tatoeba") for en, de in part))
        paths.append(path)
    return paths[0], paths[1]


def build_store(folder: Path, parallel_files: list[Path]) -> Path:
    from xdistill.teacher.embed import build_teacher_store

    store = folder / "teacher"
    build_teacher_store(parallel_files, store, {"teacher": TEACHER_SPEC, "batch_size": 32})
    return store


def tiny_train_params(**overrides: Any) -> dict[str, Any]:
    """A ``train`` section that trains a 1-layer MiniLM for a few steps in seconds."""
    params: dict[str, Any] = {
        "seed": 7,
        "steps": 8,
        "batch_size": 8,
        "learning_rate": 2e-4,
        "warmup_ratio": 0.25,
        "max_seq_length": 32,
        "eval_every": 4,
        "checkpoint_every": 2,
        "dev_max_pairs": 24,
        "dev_sts_max_pairs": 16,
        "align_pairs": 64,
        "early_stopping_patience": None,
        "student": {"keep_layers": 1, "dropout": 0.0},
        "loss": {"mse": 1.0},
    }
    params.update(overrides)
    return params


TINY_RUNTIME = {"threads": 1, "log_every": 2}


def write_params(path: Path, train: dict[str, Any], student_spec: str, runtime: dict[str, Any] | None = None) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "models": {"teacher": TEACHER_SPEC, "student": student_spec},
                "train": train,
                "runtime": {**TINY_RUNTIME, **(runtime or {})},
            }
        ),
        encoding="utf-8",
    )
    return path


def stsb_dir() -> Path:
    """The mirror's stsb-multi-mt folder (its dev split validates checkpoints)."""
    return mirror_dir() / "eval" / "stsb-multi-mt"


def cli_args(workdir: Path, data: Path, store: Path, params_file: Path) -> list[str]:
    """``xdistill train`` arguments reading and writing nothing of the project it runs in: every output
    under ``workdir``, no dev mining (the project's dev_mining.tsv.gz is not this data's)."""
    return [
        "train",
        "--params",
        str(params_file),
        "--train",
        str(data / "train.tsv.gz"),
        "--dev",
        str(data / "dev.tsv.gz"),
        "--teacher-dir",
        str(store),
        "--dev-sts",
        str(stsb_dir()),
        "--dev-mining",
        "",
        "--output",
        str(workdir / "student"),
        "--start-output",
        str(workdir / "student_start"),
        "--checkpoints",
        str(workdir / "checkpoints"),
        "--metrics",
        str(workdir / "train.json"),
        "--history",
        str(workdir / "history.csv"),
        "--plot",
        str(workdir / "curves.png"),
        "--device",
        "cpu",
    ]


def run_cli(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "xdistill.cli.main", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def load_weights(model_dir: Path) -> dict[str, Any]:
    """Every tensor of a saved sentence-transformers folder, by module and name."""
    from safetensors.torch import load_file

    tensors = {}
    for file in sorted(model_dir.rglob("*.safetensors")):
        for name, tensor in load_file(str(file)).items():
            tensors[f"{file.relative_to(model_dir)}:{name}"] = tensor
    assert tensors, f"no weights under {model_dir}"
    return tensors
