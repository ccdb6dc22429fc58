"""The GPU paths: half-precision teacher encoding, training on cuda in every precision, a 1-GPU DDP run.

Tests marked ``gpu`` need CUDA and are skipped without it (``make gpu-check`` runs them on a GPU
machine, with nothing but torch, transformers and sentence-transformers installed there: the models
are built from configs, the tokenizer from a generated vocabulary; :mod:`bench.perf.gpu_models`).
The rest run anywhere: the precision settings' refusals on a CPU, and the teacher store keeping each
precision's vectors apart.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from bench.perf.gpu_models import (
    TINY_BERT,
    TINY_MPNET,
    build_model_folder,
    synthetic_sentences,
    synthetic_words,
    write_parallel_files,
)
from bench.perf.gpu_train import run_training, train_params
from xdistill.errors import XdistillError
from xdistill.teacher.embed import TeacherEmbedSettings, embed_into_store
from xdistill.teacher.store import TeacherStore, substore_name, teacher_fingerprint
from xdistill.teacher.store_writer import substore_writer

REPO_ROOT = Path(__file__).resolve().parent.parent
HAS_CUDA = torch.cuda.is_available()


@pytest.fixture(scope="module")
def assets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A tiny mpnet-shaped teacher, a tiny BERT student, synthetic sentences and their parallel files."""
    root = tmp_path_factory.mktemp("gpu_assets")
    words = synthetic_words(600)
    sources = synthetic_sentences(96, words, seed=1, mean_words=10)
    translations = synthetic_sentences(96, words, seed=2, mean_words=10)
    train, dev = write_parallel_files(root / "data", sources, translations, n_dev=16)
    return {
        "teacher": str(build_model_folder(root / "teacher", TINY_MPNET, words, max_seq_length=64, normalize=True)),
        "student": str(
            build_model_folder(root / "student", TINY_BERT, words, max_seq_length=64, normalize=True, seed=1)
        ),
        "sources": sources,
        "train": train,
        "dev": dev,
    }


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


# --------------------------------------------------------------------------------------------
# Anywhere: the settings and the store's identity
# --------------------------------------------------------------------------------------------


def test_a_half_precision_is_a_teacher_of_its_own_in_the_store(assets: dict[str, Any]) -> None:
    spec = assets["teacher"]
    fp32 = teacher_fingerprint(spec)
    assert teacher_fingerprint(spec, "fp32") == fp32  # the identity stores had before the setting existed
    assert teacher_fingerprint(spec, "fp16") == f"{fp32}+fp16"
    names = {substore_name(teacher_fingerprint(spec, p)) for p in ("fp32", "fp16", "bf16")}
    assert len(names) == 3
    with pytest.raises(XdistillError, match="teacher_embed.precision: unknown precision 'fp8'"):
        teacher_fingerprint(spec, "fp8")
    with pytest.raises(XdistillError, match="teacher_embed.precision"):
        TeacherEmbedSettings(precision="half")


def test_half_precision_on_a_cpu_is_refused_before_the_teacher_loads(assets: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(XdistillError, match=r"teacher_embed.precision: fp16 runs on a GPU only.*fp32"):
        embed_into_store(tmp_path / "store", assets["teacher"], assets["sources"], device="cpu", precision="fp16")
    assert not list((tmp_path / "store").glob("teacher-*")), "a refused run leaves no sub-store behind"


def test_the_shared_store_never_serves_one_precision_to_another(assets: dict[str, Any], tmp_path: Path) -> None:
    """fp16 vectors in the shared store are not copied into an fp32 request; an fp16 request takes them
    (and needs no GPU when nothing is left to encode)."""
    spec, sentences = assets["teacher"], assets["sources"][:40]
    shared = tmp_path / "shared"
    marker = np.full((len(sentences), 48), 0.125, dtype=np.float32)  # unit length: 0.125**2 * 48 = 0.75, near
    from xdistill.teacher.store import keys_of_normalized, normalized_texts

    keys = keys_of_normalized(list(dict.fromkeys(normalized_texts(sentences))))
    with substore_writer(shared, teacher_fingerprint(spec, "fp16"), spec) as writer:
        writer.append(keys, marker[: len(keys)])

    stats = embed_into_store(tmp_path / "fp32", spec, sentences, device="cpu", shared_dir=shared, progress=False)
    assert (stats.n_shared, stats.n_new) == (0, len(keys))
    encoded = TeacherStore.open(tmp_path / "fp32", teacher_spec=spec).lookup(sentences)
    assert not np.allclose(encoded, 0.125), "the fp16 vectors of the shared store reached an fp32 store"

    stats = embed_into_store(
        tmp_path / "fp16", spec, sentences, device="cpu", shared_dir=shared, precision="fp16", progress=False
    )
    assert (stats.n_shared, stats.n_new) == (len(keys), 0)
    copied = TeacherStore.open(tmp_path / "fp16", teacher_spec=spec, precision="fp16").lookup(sentences)
    np.testing.assert_array_equal(copied, 0.125)
    with pytest.raises(XdistillError, match="holds this teacher's vectors encoded in fp16"):
        TeacherStore.open(tmp_path / "fp16", teacher_spec=spec)  # an fp32 reader of an fp16-only store


def test_evaluate_precision_is_checked_refused_on_a_cpu_and_part_of_a_half_protocol() -> None:
    from xdistill.evaluation.pipeline import in_precision
    from xdistill.evaluation.settings import EvaluationSettings, evaluation_protocol
    from xdistill.models.encoders import SentenceTransformerEncoder

    with pytest.raises(XdistillError, match="evaluate.precision: unknown precision 'fp64'"):
        EvaluationSettings.from_params({"precision": "fp64"}, ["de"])
    fp32 = EvaluationSettings.from_params({}, ["de"]).as_dict()
    assert "precision" not in evaluation_protocol(fp32)  # the protocol of evaluations recorded before it
    half = EvaluationSettings.from_params({"precision": "bf16"}, ["de"]).as_dict()
    assert evaluation_protocol(half)["precision"] == "bf16"

    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    encoder = SentenceTransformerEncoder(SentenceTransformer(modules=[Pooling(4)], device="cpu"), "tiny")
    assert in_precision(encoder, "fp32") is encoder
    with pytest.raises(XdistillError, match=r"evaluate.precision: bf16 runs on a GPU only"):
        in_precision(encoder, "bf16")


# --------------------------------------------------------------------------------------------
# On a GPU
# --------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU (make gpu-check on a GPU machine)")
@pytest.mark.parametrize("precision, least_cosine", [("fp16", 0.999), ("bf16", 0.99)])
def test_half_precision_teacher_agrees_with_fp32(
    assets: dict[str, Any], tmp_path: Path, precision: str, least_cosine: float
) -> None:
    spec, sentences = assets["teacher"], assets["sources"]
    vectors = {}
    for device, wanted in (("cpu", "fp32"), ("cuda", "fp32"), ("cuda", precision)):
        store = tmp_path / f"{device}-{wanted}"
        stats = embed_into_store(store, spec, sentences, device=device, precision=wanted, progress=False, batch_size=16)
        assert stats.n_new == len(sentences)
        vectors[device, wanted] = TeacherStore.open(store, teacher_spec=spec, precision=wanted).lookup(sentences)
    # fp32 on the GPU is exact fp32 (no TF32): the CPU's vectors up to the store's fp16 rounding
    assert _cosines(vectors["cuda", "fp32"], vectors["cpu", "fp32"]).min() > 0.99999
    agreement = _cosines(vectors["cuda", precision], vectors["cuda", "fp32"])
    assert agreement.min() > least_cosine, f"{precision} vs fp32: cosine down to {agreement.min():.5f}"


@pytest.fixture(scope="module")
def teacher_store(assets: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny teacher's vectors of every training and dev sentence (encoded on the GPU when there is one)."""
    from xdistill.data.parallel_tsv import read_parallel_pairs

    store = tmp_path_factory.mktemp("gpu_store") / "teacher"
    sentences = [*read_parallel_pairs(assets["train"]).sources, *read_parallel_pairs(assets["dev"]).sources]
    embed_into_store(store, assets["teacher"], sentences, device="cuda" if HAS_CUDA else "cpu", progress=False)
    return store


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU (make gpu-check on a GPU machine)")
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_training_on_cuda_gives_finite_losses(
    assets: dict[str, Any], teacher_store: Path, tmp_path: Path, precision: str
) -> None:
    params = train_params(device="cuda", precision=precision, steps=6, batch_size=16, max_seq_length=64)
    result = run_training(
        tmp_path, assets["train"], assets["dev"], teacher_store, assets["teacher"], assets["student"], params
    )
    assert result["steps"] == 6
    assert result["finite"], f"{precision}: losses {result['losses']}"
    assert (Path(result["student"]) / "modules.json").is_file()


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU (make gpu-check on a GPU machine)")
def test_one_gpu_ddp_run_under_torchrun_writes_the_student(
    assets: dict[str, Any], teacher_store: Path, tmp_path: Path
) -> None:
    config = tmp_path / "run.json"
    params = train_params(device="cuda", precision="bf16", steps=4, batch_size=16, max_seq_length=64)
    config.write_text(
        json.dumps(
            {
                "workdir": str(tmp_path / "run"),
                "train": str(assets["train"]),
                "dev": str(assets["dev"]),
                "store": str(teacher_store),
                "teacher_spec": assets["teacher"],
                "student_spec": assets["student"],
                "params": params,
            }
        ),
        encoding="utf-8",
    )
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1"]
    command += ["-m", "bench.perf.gpu_train", str(config)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(config.with_suffix(".result.json").read_text(encoding="utf-8"))
    assert result["world_size"] == 1 and result["finite"] and result["steps"] == 4
    assert (tmp_path / "run" / "student" / "modules.json").is_file()
