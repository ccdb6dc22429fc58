"""Each lever of the distillation recipe does what it says, on a real (one-layer) model:
the least-squares head fit, frozen lower layers, LoRA adapters, weight-space interpolation
(WiSE-FT), CPU bf16 autocast, and the exported student's input length."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer

from tests.trainer_helpers import (
    build_store,
    load_weights,
    minilm_folder,
    stsb_dir,
    tiny_train_params,
    write_parallel_files,
)
from xdistill.errors import XdistillError
from xdistill.training.settings import OutputPaths
from xdistill.training.trainer import train_student

PROBE = ["Der Zug fährt um zwölf Uhr ab.", "The train leaves at noon.", "Ich lese ein Buch im Garten."]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("levers")
    train, dev = write_parallel_files(root / "data")
    return {
        "root": root,
        "train": train,
        "dev": dev,
        "store": build_store(root, [train, dev]),
        "student": Path(minilm_folder()),
    }


def _train(setup: dict[str, Path], folder: Path, **overrides):
    outputs = OutputPaths(folder / "student", folder / "ckpt", folder / "train.json", None, None)
    result = train_student(
        setup["train"],
        setup["dev"],
        setup["store"],
        str(setup["student"]),
        tiny_train_params(**overrides),
        outputs,
        device="cpu",
        dev_sts_dir=stsb_dir(),
    )
    return result, SentenceTransformer(str(folder / "student"), device="cpu")


def _encode(model: SentenceTransformer) -> np.ndarray:
    return model.encode(PROBE, convert_to_numpy=True, normalize_embeddings=True)


def test_least_squares_head_fits_what_an_orthogonal_map_cannot(setup: dict[str, Path]) -> None:
    """A teacher that is an affine, non-orthogonal function of the student's pooled embeddings (with
    a common offset, as mE5's space has): the least-squares head hits it, Procrustes cannot."""
    from xdistill.training.alignment import align_head_to_teacher, modules_bypassed
    from xdistill.training.student import StudentConfig, build_student
    from xdistill.training.tokenized import Featurizer, TokenizedPairs, encode_token_ids

    texts = [line for pair in _pairs(setup["train"]) for line in pair]
    mse = {}
    for fit in ("procrustes", "least_squares"):
        student = build_student(
            StudentConfig(str(setup["student"]), keep_layers=1, dropout=0.0, align_to_teacher=True, head_fit=fit),
            seed=1,
            teacher_dim=384,
        )
        featurize = Featurizer(student, torch.device("cpu"))
        ids = [student.tokenizer(t)["input_ids"] for t in texts]
        with modules_bypassed(student, "Dense", "Normalize"):
            pooled = encode_token_ids(student, featurize, ids, 16).double()
        generator = torch.Generator().manual_seed(0)
        mixing = torch.randn(384, 384, generator=generator, dtype=torch.float64) / 20
        teacher = torch.nn.functional.normalize(pooled @ mixing + 0.05 * torch.ones(384, dtype=torch.float64), dim=-1)
        half = len(ids) // 2
        # both sides the same texts: the fit sees each text with its own synthetic teacher vector
        pairs = TokenizedPairs(ids[:half], ids[:half], teacher[:half].float())
        mse[fit] = align_head_to_teacher(
            student, torch.nn.Module(), featurize, pairs, n_pairs=half, batch_size=16, method=fit
        )
    assert mse["least_squares"] < 0.05 * mse["procrustes"], mse


def test_pca_head_maps_back_from_the_teachers_principal_subspace(setup: dict[str, Path]) -> None:
    """head_fit pca on a 768-d teacher: the head is a fixed, norm-keeping map whose range is the teacher's
    top-384 principal subspace; it keeps more of the teacher than the Procrustes head's 384 directions."""
    from xdistill.training.alignment import align_head_to_teacher
    from xdistill.training.student import StudentConfig, build_student, output_dense
    from xdistill.training.tokenized import Featurizer, TokenizedPairs

    texts = [line for pair in _pairs(setup["train"]) for line in pair]
    generator = torch.Generator().manual_seed(0)
    basis, _ = torch.linalg.qr(torch.randn(768, 768, generator=generator, dtype=torch.float64))
    scales = torch.linspace(3.0, 0.05, 768, dtype=torch.float64)  # distinct variances: a unique top-384
    teacher = torch.nn.functional.normalize(
        torch.randn(600, 768, generator=generator, dtype=torch.float64) * scales @ basis.T, dim=-1
    ).float()
    heads = {}
    for fit in ("pca", "procrustes"):
        student = build_student(
            StudentConfig(str(setup["student"]), keep_layers=1, dropout=0.0, align_to_teacher=True, head_fit=fit),
            seed=1,
            teacher_dim=768,
        )
        ids = [student.tokenizer(t)["input_ids"] for t in texts]
        ids = (ids * (600 // len(ids) + 1))[:600]  # more rows than axes: each with its own teacher vector
        align_head_to_teacher(
            student,
            torch.nn.Module(),
            Featurizer(student, torch.device("cpu")),
            TokenizedPairs(ids, ids, teacher),
            n_pairs=600,
            batch_size=32,
            method=fit,
        )
        head = output_dense(student)
        assert all(p.requires_grad == (fit != "pca") for p in head.parameters())
        heads[fit] = head.linear.weight.detach().double().T  # [384, 768]: y -> y @ map
    mapping = heads["pca"]
    torch.testing.assert_close(mapping @ mapping.T, torch.eye(384, dtype=torch.float64), atol=1e-5, rtol=0)
    top = torch.linalg.svd(teacher.double(), full_matrices=False)[2][:384]  # the teacher sample's principal axes
    torch.testing.assert_close(top @ mapping.T @ mapping, top, atol=1e-4, rtol=0)

    def kept(head_map: torch.Tensor) -> float:  # the share of the teacher's energy inside the head's range
        return float((teacher.double() @ head_map.T).pow(2).sum() / teacher.double().pow(2).sum())

    assert kept(mapping) > kept(heads["procrustes"]) + 0.05, (kept(mapping), kept(heads["procrustes"]))


def test_pca_head_stays_fixed_while_the_encoder_learns_the_reduced_target(
    setup: dict[str, Path], tmp_path: Path
) -> None:
    """Training with head_fit pca: the exported head is the fitted one (also after a resume), the encoder moved."""
    common = {
        "steps": 6,
        "eval_every": 3,
        "checkpoint_every": 3,
        "learning_rate": 5e-4,
        "student": {"keep_layers": 1, "dropout": 0.0, "align_to_teacher": True, "head_fit": "pca"},
    }
    _train(setup, tmp_path / "run", **common)
    trained = load_weights(tmp_path / "run" / "student")
    exported = {name.split(":", 1)[1]: tensor for name, tensor in trained.items() if "Dense" in name}
    start_checkpoint = torch.load(tmp_path / "run" / "ckpt" / "start.pt", map_location="cpu", weights_only=False)
    # the frozen head is checkpointed (a resumed run gets the fitted head back) and exported unchanged
    fitted = {key.split(".", 1)[1]: value for key, value in start_checkpoint["model"].items() if ".linear." in key}
    assert set(fitted) == set(exported) == {"linear.weight", "linear.bias"}, (sorted(fitted), sorted(exported))
    for name, tensor in exported.items():
        torch.testing.assert_close(tensor, fitted[name], atol=0, rtol=0)
    base = {name.split(":", 1)[1]: tensor for name, tensor in load_weights(setup["student"]).items()}
    layer0 = [n for n in trained if ".layer.0." in n]
    assert any(not torch.equal(trained[n], base[n.split(":", 1)[1]]) for n in layer0), "the encoder did not train"


def _pairs(path: Path) -> list[tuple[str, str]]:
    import gzip

    with gzip.open(path, "rt", encoding="utf-8") as handle:
        next(handle)
        return [tuple(line.split("\t")[:2]) for line in handle]


def test_a_low_dimensional_head_fits_on_fewer_rows_than_its_dimension(setup: dict[str, Path]) -> None:
    """20 pairs (40 rows) span at most 40 principal axes of a 128-d head: the rest of its basis is completed
    (it used to stop on a tensor-size mismatch)."""
    from xdistill.training.alignment import align_head_to_teacher
    from xdistill.training.student import StudentConfig, build_student, output_dense
    from xdistill.training.tokenized import Featurizer, TokenizedPairs

    pairs = _pairs(setup["train"])[:20]
    student = build_student(
        StudentConfig(str(setup["student"]), keep_layers=1, dropout=0.0, output_dim=128, align_to_teacher=True),
        seed=1,
        teacher_dim=384,
    )
    ids = [student.tokenizer(t)["input_ids"] for pair in pairs for t in pair[:1]]
    teacher = torch.nn.functional.normalize(
        torch.randn(len(ids), 384, generator=torch.Generator().manual_seed(0)), dim=-1
    )
    align_head_to_teacher(
        student,
        torch.nn.Module(),
        Featurizer(student, torch.device("cpu")),
        TokenizedPairs(ids, ids, teacher),
        n_pairs=20,
        batch_size=8,
    )
    weight = output_dense(student).linear.weight.detach().double()  # [128, 384], orthonormal rows
    torch.testing.assert_close(weight @ weight.T, torch.eye(128, dtype=torch.float64), atol=1e-5, rtol=0)


def test_lora_students_are_interpolated_on_the_straight_line() -> None:
    """The low-rank update B A at alpha is alpha * B1 A1 (B starts at zero), not a product of two mixtures."""
    from xdistill.training.interpolation import interpolate_states

    generator = torch.Generator().manual_seed(0)
    a_name, b_name = "encoder.layer.0.query.lora_A.default.weight", "encoder.layer.0.query.lora_B.default.weight"
    start = {a_name: torch.randn(4, 16, generator=generator), b_name: torch.zeros(16, 4), "bias": torch.zeros(16)}
    end = {
        a_name: torch.randn(4, 16, generator=generator),
        b_name: torch.randn(16, 4, generator=generator),
        "bias": torch.ones(16),
    }
    mixed = interpolate_states(start, end, 0.25)
    torch.testing.assert_close(mixed[b_name] @ mixed[a_name], 0.25 * end[b_name] @ end[a_name])
    torch.testing.assert_close(mixed["bias"], torch.full((16,), 0.25))


def test_ridge_map_recovers_an_affine_teacher_exactly() -> None:
    from xdistill.training.alignment import ridge_map

    generator = torch.Generator().manual_seed(0)
    source = torch.randn(500, 12, generator=generator, dtype=torch.float64)
    weight = torch.randn(12, 20, generator=generator, dtype=torch.float64)
    bias = torch.randn(20, generator=generator, dtype=torch.float64)
    fitted_w, fitted_b = ridge_map(source, source @ weight + bias, ridge=0.0)
    torch.testing.assert_close(fitted_w, weight)
    torch.testing.assert_close(fitted_b, bias)
    # cross-validated strength: noise-free data picks the weakest shrinkage and still recovers the map
    fitted_w, fitted_b = ridge_map(source, source @ weight + bias)
    torch.testing.assert_close(fitted_w, weight, atol=1e-2, rtol=1e-2)


def test_frozen_lower_layers_keep_their_weights(setup: dict[str, Path], tmp_path: Path) -> None:
    _, model = _train(
        setup, tmp_path, steps=4, learning_rate=1e-3, student={"keep_layers": 2, "dropout": 0.0, "freeze_layers": 1}
    )
    trained = load_weights(tmp_path / "student")
    base = {name.split(":", 1)[1]: tensor for name, tensor in load_weights(setup["student"]).items()}
    layer0 = [n for n in trained if ".layer.0." in n]
    layer1 = [n for n in trained if ".layer.1." in n]
    embeddings = [n for n in trained if "embeddings." in n]
    assert layer0 and layer1 and embeddings
    for name in layer0 + embeddings:
        assert torch.equal(trained[name], base[name.split(":", 1)[1]]), f"{name} changed although frozen"
    assert any(not torch.equal(trained[n], base[n.split(":", 1)[1]]) for n in layer1), "layer 1 did not train"


def test_lora_adapters_train_and_are_merged_into_a_plain_export(setup: dict[str, Path], tmp_path: Path) -> None:
    result, model = _train(
        setup,
        tmp_path,
        steps=4,
        learning_rate=5e-3,
        student={"keep_layers": 1, "dropout": 0.0, "lora": {"rank": 4, "alpha": 8}},
    )
    weights = load_weights(tmp_path / "student")
    assert not any("lora" in name for name in weights), "adapters must be merged before export"
    base = SentenceTransformer(str(setup["student"]), device="cpu")
    from xdistill.training.student import keep_layers

    keep_layers(base, 1)
    assert not np.allclose(_encode(model), _encode(base), atol=1e-4), "LoRA changed nothing"
    assert result.best["dev_mse_x100"] < result.start["dev_mse_x100"]


def test_lora_settings_are_checked() -> None:
    from xdistill.training.student import StudentConfig

    with pytest.raises(XdistillError, match="lora: unknown keys"):
        StudentConfig.from_params("x", {"lora": {"rnk": 4}}, 32)
    with pytest.raises(XdistillError, match="head_fit must be one of"):
        StudentConfig.from_params("x", {"head_fit": "pcaa"}, 32)
    with pytest.raises(XdistillError, match="leave output_dim null"):
        StudentConfig.from_params("x", {"head_fit": "pca", "output_dim": 128}, 32)


@pytest.mark.slow
def test_interpolation_ends_reproduce_the_start_and_the_trained_student(setup: dict[str, Path], tmp_path: Path) -> None:
    common = {
        "steps": 6,
        "eval_every": 6,
        "learning_rate": 2e-3,
        "student": {"keep_layers": 1, "dropout": 0.0, "align_to_teacher": True, "head_fit": "least_squares"},
    }
    ends = {}
    for alpha in (0.0, 1.0):
        result, model = _train(setup, tmp_path / f"only-{alpha:g}", interpolation=[alpha], **common)
        assert result.interpolation["alpha"] == alpha
        ends[alpha] = _encode(model)
    _, plain = _train(setup, tmp_path / "plain", **common)
    _, start = _train(setup, tmp_path / "start", **{**common, "steps": 1, "learning_rate": 1e-30})
    np.testing.assert_allclose(ends[1.0], _encode(plain), atol=1e-5)  # a = 1: the trained student
    np.testing.assert_allclose(ends[0.0], _encode(start), atol=1e-5)  # a = 0: the student as training started
    assert not np.allclose(ends[0.0], ends[1.0], atol=1e-3)

    result, model = _train(setup, tmp_path / "sweep", interpolation=[0.0, 0.5, 1.0], **common)
    report = json.loads((tmp_path / "sweep" / "train.json").read_text())
    assert set(report["interpolation"]["by_alpha"]) == {"0", "0.5", "1"}
    chosen = result.interpolation["alpha"]
    scores = {float(a): m["dev_score"] for a, m in report["interpolation"]["by_alpha"].items()}
    assert scores[chosen] == max(scores.values())
    assert report["exported"] == report["interpolation"]["by_alpha"][f"{chosen:g}"]

    # the tolerance rule: the smallest a within the tolerance of the best (the same deterministic sweep again);
    # a huge tolerance takes the start, one just under the spread leaves out the worst a
    spread = max(scores.values()) - min(scores.values())
    for tolerance in (1e3, spread - 1e-6):
        within = [a for a, v in scores.items() if a <= chosen and max(scores.values()) - v <= tolerance]
        result, _ = _train(
            setup,
            tmp_path / f"tol-{tolerance:g}",
            interpolation=[0.0, 0.5, 1.0],
            interpolation_tolerance=tolerance,
            **common,
        )
        assert result.interpolation["alpha"] == min(within) and result.interpolation["tolerance"] == tolerance
        assert tolerance < spread or result.interpolation["alpha"] == 0.0


def test_interpolation_from_the_untrained_student_starts_at_it(setup: dict[str, Path], tmp_path: Path) -> None:
    """interpolation_from: untrained -> a = 0 is the untrained student (its weights, identity head): same embeddings."""
    from xdistill.training.student import keep_layers

    common = {
        "steps": 4,
        "eval_every": 4,
        "learning_rate": 2e-3,
        "student": {"keep_layers": 1, "dropout": 0.0, "align_to_teacher": True, "head_fit": "least_squares"},
    }
    result, model = _train(setup, tmp_path / "base0", interpolation=[0.0], interpolation_from="untrained", **common)
    assert result.interpolation["from"] == "untrained" and result.interpolation["alpha"] == 0.0
    base = SentenceTransformer(str(setup["student"]), device="cpu")
    keep_layers(base, 1)
    np.testing.assert_allclose(_encode(model), _encode(base), atol=1e-5)
    # the untrained student is not in the teacher's space; the trained end is
    _, trained = _train(setup, tmp_path / "base1", interpolation=[1.0], interpolation_from="untrained", **common)
    assert not np.allclose(_encode(trained), _encode(base), atol=1e-3)
    # a narrow (LEALLA) head cannot be the identity: refused before the first training step
    narrow = {**common, "student": {**common["student"], "output_dim": 64, "head_fit": "procrustes"}}
    with pytest.raises(XdistillError, match="interpolation_from: untrained needs a head at least as wide"):
        _train(setup, tmp_path / "narrow", interpolation=[0.0, 1.0], interpolation_from="untrained", **narrow)
    assert not (tmp_path / "narrow" / "ckpt" / "last.pt").exists()


def test_export_rotation_moves_the_student_into_the_teacher_space_and_keeps_every_cosine(
    setup: dict[str, Path], tmp_path: Path
) -> None:
    """train.export_rotation: the same WiSE-FT student, rotated onto the teacher's space after the choice of a."""
    common = {
        "steps": 6,
        "eval_every": 6,
        "learning_rate": 2e-3,
        "interpolation": [0.5],
        "student": {"keep_layers": 1, "dropout": 0.0, "align_to_teacher": True, "head_fit": "least_squares"},
    }
    _, plain = _train(setup, tmp_path / "plain", **common)
    _, rotated = _train(setup, tmp_path / "rotated", export_rotation=True, **common)
    before, after = _encode(plain), _encode(rotated)
    np.testing.assert_allclose(after @ after.T, before @ before.T, atol=1e-5)  # every student-student cosine
    assert not np.allclose(after, before, atol=1e-2)  # ... yet every vector moved
    plain_report = json.loads((tmp_path / "plain" / "train.json").read_text())
    report = json.loads((tmp_path / "rotated" / "train.json").read_text())
    fit = report["export_rotation"]
    assert plain_report["export_rotation"] is None and fit["pairs"] > 0
    assert fit["mse_after"] < fit["mse_before"]
    # measured again on held-out dev pairs: closer to the teacher, the same STS
    assert report["exported"]["dev_mse_x100"] < plain_report["exported"]["dev_mse_x100"]
    assert report["exported"]["dev_sts"] == pytest.approx(plain_report["exported"]["dev_sts"], abs=0.05)


def test_interpolate_states_is_linear() -> None:
    from xdistill.training.interpolation import interpolate_states

    start = {"w": torch.zeros(3), "steps": torch.tensor([1])}
    end = {"w": torch.tensor([2.0, 4.0, 6.0]), "steps": torch.tensor([5])}
    mixed = interpolate_states(start, end, 0.25)
    torch.testing.assert_close(mixed["w"], torch.tensor([0.5, 1.0, 1.5]))
    assert mixed["steps"].item() == 5
    with pytest.raises(XdistillError, match="different weights"):
        interpolate_states({"a": torch.zeros(1)}, end, 0.5)


def test_interpolation_moves_the_start_to_the_trained_weights_device() -> None:
    """The start is loaded from its checkpoint onto the CPU; on a GPU run the trained end is not there
    (the meta device stands in for the GPU: both refuse a CPU operand)."""
    from xdistill.training.interpolation import interpolate_states

    end = {"w": torch.ones(3, device="meta")}
    with pytest.raises(RuntimeError):
        torch.lerp(torch.zeros(3), end["w"], 0.5)  # what interpolating as the states come would do
    assert interpolate_states({"w": torch.zeros(3)}, end, 0.5)["w"].device.type == "meta"


def test_exported_student_embeds_whole_inputs(setup: dict[str, Path], tmp_path: Path) -> None:
    """Training truncates at train.max_seq_length; the exported model keeps the untrained student's limit."""
    base_limit = SentenceTransformer(str(setup["student"]), device="cpu").max_seq_length
    _, model = _train(setup, tmp_path, steps=1, eval_every=1, max_seq_length=16)
    assert model.max_seq_length == base_limit > 16
    config = json.loads((tmp_path / "student" / "tokenizer_config.json").read_text())
    assert config.get("model_max_length", base_limit) >= base_limit
    long_text = " ".join(["word"] * 100)
    short = model.encode([" ".join(["word"] * 14)])
    assert not np.allclose(model.encode([long_text]), short, atol=1e-4)


def test_similarity_ranking_teaches_the_student_the_teachers_order(setup: dict[str, Path], tmp_path: Path) -> None:
    """Trained on the teacher-ranked similarity loss alone, the 1-layer student orders the training pairs'
    cosines (English with English, German with English) more like the 6-layer teacher than it did at the start."""
    from scipy.stats import spearmanr

    from xdistill.teacher.store import TeacherStore

    outputs = OutputPaths(
        tmp_path / "student", tmp_path / "ckpt", tmp_path / "train.json", None, None, start_dir=tmp_path / "start"
    )
    train_student(
        setup["train"],
        setup["dev"],
        setup["store"],
        str(setup["student"]),
        tiny_train_params(
            steps=30,
            learning_rate=1e-3,
            eval_every=30,
            checkpoint_every=30,
            interpolation=None,
            loss={"mse": 0.0, "similarity_ranking": 1.0},
        ),
        outputs,
        device="cpu",
        dev_sts_dir=stsb_dir(),
    )
    english, german = map(list, zip(*_pairs(setup["train"])))
    teacher = TeacherStore.open(setup["store"]).lookup(english)
    teacher_cosines = teacher @ teacher.T
    upper = np.triu_indices(len(english), k=1)
    off_diagonal = ~np.eye(len(english), dtype=bool)

    def agreement(folder: Path) -> float:
        model = SentenceTransformer(str(folder), device="cpu")
        en, de = (model.encode(texts, convert_to_numpy=True, normalize_embeddings=True) for texts in (english, german))
        return float(
            np.mean(
                [
                    spearmanr((en @ en.T)[upper], teacher_cosines[upper]).statistic,
                    spearmanr((de @ en.T)[off_diagonal], teacher_cosines[off_diagonal]).statistic,
                ]
            )
        )

    before, after = agreement(tmp_path / "start"), agreement(tmp_path / "student")
    assert after > before + 0.05, (before, after)


def test_cpu_bf16_autocast_lowers_the_steps_and_keeps_fp32_weights(setup: dict[str, Path], tmp_path: Path) -> None:
    """train.precision bf16 runs the training steps' matrix products in bf16 on a CPU (a real bf16 run: its
    weights move as the fp32 run's do, not identically); fp32 (the default) leaves them in fp32."""
    dtypes: dict[str, set[torch.dtype]] = {}
    weights: dict[str, dict[str, torch.Tensor]] = {}

    def record(module: torch.nn.Module, inputs: object, output: object) -> None:
        if isinstance(module, torch.nn.Linear) and module.training:  # training steps, not validation
            dtypes[mode].add(output.dtype)

    handle = torch.nn.modules.module.register_module_forward_hook(record)
    try:
        for mode in ("bf16", "fp32"):
            dtypes[mode] = set()
            _train(setup, tmp_path / mode, steps=3, eval_every=3, interpolation=None, precision=mode)
            weights[mode] = load_weights(tmp_path / mode / "student")
    finally:
        handle.remove()
    assert dtypes == {"bf16": {torch.bfloat16}, "fp32": {torch.float32}}
    names = weights["fp32"].keys()
    assert weights["bf16"].keys() == names
    assert all(weights["bf16"][n].dtype == weights["fp32"][n].dtype for n in names)  # exported as trained: fp32
    base = {name.split(":", 1)[1]: tensor for name, tensor in load_weights(setup["student"]).items()}
    moved = {
        n: base[n.split(":", 1)[1]]
        for n in names
        if n.split(":", 1)[1] in base and not torch.equal(weights["fp32"][n], base[n.split(":", 1)[1]])
    }
    assert moved, "the fp32 run trained nothing"
    update = torch.cat([(weights["fp32"][n] - start).flatten() for n, start in moved.items()])
    gap = torch.cat([(weights["bf16"][n] - weights["fp32"][n]).flatten() for n in moved])
    assert 0 < gap.norm() < 0.5 * update.norm(), (float(gap.norm()), float(update.norm()))


def _frozen_student(frozen: int = 2):
    from xdistill.training.student import StudentConfig, build_student

    config = StudentConfig(
        str(minilm_folder()), keep_layers=3, dropout=0.0, freeze_layers=frozen, cache_frozen=True, max_seq_length=32
    )
    return build_student(config)


def test_cached_frozen_states_replace_the_lower_layers_exactly(setup: dict[str, Path]) -> None:
    """A step from cached states never runs the frozen layers, and gives the student's own embeddings and gradients."""
    from xdistill.teacher.store import TeacherStore
    from xdistill.training.batches import read_parallel_pairs
    from xdistill.training.frozen_cache import compute_frozen_states
    from xdistill.training.setup import DistillationModule, build_objective
    from xdistill.training.tokenized import Featurizer, tokenize_pairs

    student = _frozen_student()
    store = TeacherStore.open(setup["store"])
    pairs = tokenize_pairs(read_parallel_pairs(setup["train"]), student, "", 32, store)
    featurize = Featurizer(student, torch.device("cpu"))
    objective = build_objective({"mse": 1.0}, student.get_embedding_dimension(), store.dimension)
    batch = [5, 0, 17, 3]
    teacher = pairs.teacher[torch.as_tensor(batch)]
    backbone = student[0].auto_model
    lower = [backbone.embeddings, backbone.encoder.layer[0], backbone.encoder.layer[1]]

    def step(module, features):
        student.zero_grad(set_to_none=True)
        student.train()
        calls = []
        hooks = [m.register_forward_hook(lambda *_: calls.append(1)) for m in lower]
        try:
            loss, _ = module(features, teacher)
        finally:
            for hook in hooks:
                hook.remove()
        loss.backward()
        grads = {n: p.grad.clone() for n, p in student.named_parameters() if p.grad is not None}
        return float(loss.detach()), grads, len(calls)

    uncached = step(
        DistillationModule(student, objective), featurize([pairs.src[i] for i in batch] + [pairs.tgt[i] for i in batch])
    )
    assert uncached[2] == 3
    for dtype, tolerance in ((torch.float32, 1e-5), (torch.float16, 2e-3)):
        states = compute_frozen_states(student, featurize, pairs, 2, batch_size=7, dtype=dtype)
        assert states.summary()["texts"] == 2 * len(pairs) and states.states.dtype == dtype
        cached = step(
            DistillationModule(student, objective, cached_layers=2), states.features(batch, torch.device("cpu"))
        )
        assert cached[2] == 0, "the frozen layers ran although their states were cached"
        assert cached[0] == pytest.approx(uncached[0], rel=tolerance)
        assert set(cached[1]) == set(uncached[1]) and any(".layer.2." in n for n in cached[1])
        assert not any(".layer.0." in n or ".layer.1." in n or "embeddings" in n for n in cached[1])
        for name, grad in cached[1].items():
            torch.testing.assert_close(grad, uncached[1][name], rtol=tolerance * 10, atol=tolerance * 1e-2)
    # the student is whole again after a cached step: its own forward runs every layer
    assert len(backbone.encoder.layer) == 3 and not type(backbone.embeddings).__name__.startswith("_")


def test_training_on_cached_frozen_states_takes_the_uncached_steps(setup: dict[str, Path], tmp_path: Path) -> None:
    common = {"steps": 4, "learning_rate": 1e-3}
    student = {"keep_layers": 2, "dropout": 0.0, "freeze_layers": 1}
    plain, plain_model = _train(setup, tmp_path / "plain", student=student, **common)
    cached, cached_model = _train(setup, tmp_path / "cached", student={**student, "cache_frozen": True}, **common)
    assert plain.frozen_cache is None
    report = json.loads((tmp_path / "cached" / "train.json").read_text())["frozen_cache"]
    assert report["texts"] == 2 * 48 and report["tokens"] > 2 * 48 and report["frozen_layers"] == 1
    base = SentenceTransformer(str(setup["student"]), device="cpu")
    from xdistill.training.student import keep_layers

    keep_layers(base, 2)
    assert not np.allclose(_encode(cached_model), _encode(base), atol=1e-3), "training on cached states changed nothing"
    # the same steps up to the states' fp16 rounding
    np.testing.assert_allclose(_encode(cached_model), _encode(plain_model), atol=2e-3)
    assert cached.best["dev_mse_x100"] == pytest.approx(plain.best["dev_mse_x100"], rel=1e-2)


def test_cache_frozen_needs_frozen_layers() -> None:
    from xdistill.training.student import StudentConfig

    with pytest.raises(XdistillError, match="freeze_layers >= 1"):
        StudentConfig("x", cache_frozen=True)
