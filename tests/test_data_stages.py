"""The corpora and parallel stages end to end: mirror copy, download, faults, outputs, report, DVC."""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import shutil
import threading
from pathlib import Path

import pytest
import yaml
from data_helpers import TINY_EVAL_DATASETS, read_tsv_gz, stage_tiny_raw, write_lines

from xdistill.cli.main import main
from xdistill.data.corpora import stage_corpora
from xdistill.data.parallel import build_parallel
from xdistill.errors import InputFileError, XdistillError

TATOEBA = "train/tatoeba-challenge"
TATOEBA_FILE = "tatoeba-challenge.minus-laser-test.en-{lang}.tsv.gz"


def fake_mirror(tmp_path: Path, mirror: Path, paths: list[str]) -> Path:
    """A partial copy of the real mirror that a test may damage."""
    root = tmp_path / "mirror"
    for rel in paths:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(mirror / rel, root / rel)
    return root


# ----------------------------------------------------------------- corpora


def test_corpora_copies_only_configured_files_with_manifest(tmp_path, mirror_dir):
    raw = tmp_path / "raw"
    manifest = stage_tiny_raw(raw, mirror_dir, ["de", "tr"], {TATOEBA: [TATOEBA_FILE]})
    files = manifest["files"]
    assert set(files) == {
        "eval/sts17/STS2017.eval.v1.1/STS.input.track5.en-en.txt",
        "eval/sts17/STS2017.eval.v1.1/STS.input.track1.ar-ar.txt",
        "eval/tatoeba-laser/tatoeba.deu-eng.deu",
        "eval/tatoeba-laser/tatoeba.deu-eng.eng",
        "eval/tatoeba-laser/tatoeba.tur-eng.tur",
        "eval/tatoeba-laser/tatoeba.tur-eng.eng",
        f"{TATOEBA}/tatoeba-challenge.minus-laser-test.en-de.tsv.gz",
        f"{TATOEBA}/tatoeba-challenge.minus-laser-test.en-tr.tsv.gz",
    }
    on_disk = json.loads((raw / "MANIFEST.json").read_text())
    assert on_disk["files"] == files
    for rel, info in files.items():
        data = (raw / rel).read_bytes()
        assert info == {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
        assert data == (mirror_dir / rel).read_bytes()


def test_default_params_stage_a_small_raw_folder(mirror_dir, repo_root):
    from xdistill.data.corpora import select_files

    params = yaml.safe_load((repo_root / "params.yaml").read_text())
    paths = select_files(params["corpora"]["datasets"], params["languages"], mirror_dir)
    assert sum((mirror_dir / p).stat().st_size for p in paths) < 40e6
    assert any(p.startswith("eval/flores200-devtest/arb_Arab") for p in paths)
    assert not any("en-fr" in p or "freedict" in p for p in paths)


def test_corpora_cli_mirror_paths(tmp_path, mirror_dir, monkeypatch):
    """corpora.mirror in a params file is relative to that file's folder; --mirror to the current folder."""
    from xdistill.data.corpora import select_files

    fake_mirror(tmp_path, mirror_dir, select_files(TINY_EVAL_DATASETS, ["de"], mirror_dir))
    (tmp_path / "project").mkdir()
    params = {"languages": ["de"], "corpora": {"datasets": TINY_EVAL_DATASETS, "mirror": "../mirror"}}
    (tmp_path / "project" / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert main(["corpora", "--params", "project/params.yaml", "--out", "from-params"]) == 0
    assert main(["corpora", "--params", "project/params.yaml", "--out", "from-cli", "--mirror", "mirror"]) == 0
    for out in ("from-params", "from-cli"):
        assert (tmp_path / out / "eval/sts17/STS2017.eval.v1.1/STS.input.track5.en-en.txt").is_file()


def test_missing_mirror_dataset_and_file_fail_clearly(tmp_path, mirror_dir):
    with pytest.raises(InputFileError, match="corpora mirror folder not found"):
        stage_corpora(tmp_path / "raw", TINY_EVAL_DATASETS, ["de"], tmp_path / "nowhere")
    mirror = fake_mirror(tmp_path, mirror_dir, ["eval/sts17/STS2017.eval.v1.1/STS.input.track5.en-en.txt"])
    with pytest.raises(InputFileError, match="dataset folder missing") as info:
        stage_corpora(tmp_path / "raw", TINY_EVAL_DATASETS, ["de"], mirror)
    assert "eval/tatoeba-laser" in str(info.value)
    # a catalogued file the mirror lost
    with pytest.raises(InputFileError, match="missing from the corpora mirror") as info:
        stage_corpora(
            tmp_path / "raw", {"eval/sts17": ["STS2017.eval.v1.1/STS.input.track1.ar-ar.txt"]}, ["de"], mirror
        )
    assert "STS.input.track1.ar-ar.txt" in str(info.value)
    with pytest.raises(InputFileError, match="not found"):
        stage_corpora(tmp_path / "raw", {"eval/sts17": ["no-such-file.txt"]}, ["de"], mirror)


@pytest.mark.parametrize(
    ("datasets", "problem"),
    [
        ({"../outside": ["victim.txt"]}, "corpora.datasets key '../outside'"),
        ({"/etc": ["passwd"]}, "corpora.datasets key '/etc'"),
        ({"eval/sts17": ["../../outside/victim.txt"]}, "pattern '../../outside/victim.txt'"),
    ],
)
def test_a_dataset_path_cannot_reach_outside_the_mirror_or_data_raw(tmp_path, mirror_dir, datasets, problem):
    """A key or pattern with '..' (or an absolute one) once wrote, or truncated, files outside the project."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("keep me", encoding="utf-8")
    project = tmp_path / "project"
    project.mkdir()
    with pytest.raises(XdistillError, match="must be a relative path inside the mirror") as info:
        stage_corpora(project / "data" / "raw", datasets, ["de"], mirror_dir)
    assert problem in str(info.value)
    assert (outside / "victim.txt").read_text(encoding="utf-8") == "keep me"
    assert not (project / "data" / "raw").exists()


def test_checksum_mismatch_and_truncated_gzip_fail_and_keep_old_output(tmp_path, mirror_dir):
    rel = f"{TATOEBA}/tatoeba-challenge.minus-laser-test.en-de.tsv.gz"
    mirror = fake_mirror(tmp_path, mirror_dir, [rel])
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "previous.txt").write_text("old output")
    damaged = mirror / rel
    damaged.write_bytes(damaged.read_bytes()[:-10] + b"0123456789")
    with pytest.raises(InputFileError, match="checksum mismatch") as info:
        stage_corpora(raw, {TATOEBA: [TATOEBA_FILE]}, ["de"], mirror)
    assert rel in str(info.value)
    # an uncatalogued gzip (a user's own dataset) is still checked for truncation
    own = mirror / "train/own/pairs.tsv.gz"
    write_lines(own, [f"sentence {i}\tSatz {i}" for i in range(2000)])
    own.write_bytes(own.read_bytes()[:-40])
    with pytest.raises(InputFileError, match="truncated or corrupt gzip") as info:
        stage_corpora(raw, {"train/own": ["pairs.tsv.gz"]}, ["de"], mirror)
    assert "pairs.tsv.gz" in str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".raw")) == []  # no temp left
    assert (raw / "previous.txt").read_text() == "old output" and not (raw / "MANIFEST.json").exists()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # keep test output clean
        pass


@pytest.fixture()
def http_mirror(tmp_path, mirror_dir):
    """The tiny mirror subset served on 127.0.0.1 by a real HTTP server."""
    paths = [
        "eval/sts17/STS2017.eval.v1.1/STS.input.track5.en-en.txt",
        "eval/sts17/STS2017.eval.v1.1/STS.input.track1.ar-ar.txt",
        "eval/tatoeba-laser/tatoeba.deu-eng.deu",
        "eval/tatoeba-laser/tatoeba.deu-eng.eng",
        f"{TATOEBA}/tatoeba-challenge.minus-laser-test.en-de.tsv.gz",
    ]
    root = fake_mirror(tmp_path, mirror_dir, paths)
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_download_from_http_base_url_and_file_url(tmp_path, mirror_dir, http_mirror):
    root, url = http_mirror
    datasets = {**TINY_EVAL_DATASETS, TATOEBA: [TATOEBA_FILE]}
    downloaded = stage_corpora(tmp_path / "dl", datasets, ["de"], None, base_url=url)
    copied = stage_corpora(tmp_path / "cp", datasets, ["de"], mirror_dir)
    assert downloaded["files"] == copied["files"] and len(downloaded["files"]) == 5
    # canonical-URL datasets: a file:// template override stands in for the public URL
    laser = stage_corpora(
        tmp_path / "file",
        {"eval/tatoeba-laser": ["tatoeba.{lang3}-eng.eng"]},
        ["de"],
        None,
        urls={"eval/tatoeba-laser": (root / "eval/tatoeba-laser").as_uri() + "/{name}"},
    )
    assert (
        laser["files"]["eval/tatoeba-laser/tatoeba.deu-eng.eng"]
        == copied["files"]["eval/tatoeba-laser/tatoeba.deu-eng.eng"]
    )
    # a re-packed dataset has no public URL: say so
    with pytest.raises(XdistillError, match="no public URL"):
        stage_corpora(tmp_path / "x", {TATOEBA: [TATOEBA_FILE]}, ["de"], None)


def test_download_checksum_mismatch_and_missing_url(tmp_path, http_mirror):
    root, url = http_mirror
    served = root / "eval/tatoeba-laser/tatoeba.deu-eng.eng"
    served.write_text("not the LASER file\n")
    with pytest.raises(XdistillError, match="checksum mismatch") as info:
        stage_corpora(tmp_path / "dl", {"eval/tatoeba-laser": ["tatoeba.deu-eng.eng"]}, ["de"], None, base_url=url)
    assert f"{url}/eval/tatoeba-laser/tatoeba.deu-eng.eng" in str(info.value)
    with pytest.raises(XdistillError, match="download failed"):
        stage_corpora(
            tmp_path / "dl",
            {"eval/tatoeba-laser": ["tatoeba.deu-eng.deu"]},
            ["de"],
            None,
            base_url=url + "/nothing-here",
        )


# ----------------------------------------------------------------- parallel


# The duplicate filter is a Bloom filter: at 2**20 bits the ~39k pairs read here gave about five false
# "duplicates" per run (when it hashed with Python's per-process salted hash these differed between the stage
# and this test's own chain, which failed the block test in CI once; it now hashes with XXH3, the same in
# every process). At 2**26 bits (8 MiB) the expected count per run is about 1e-6.
DEDUP = {"dedup_bits_log2": 26}


def tiny_parallel_params(**overrides):
    params = {
        "sources": [
            {"name": "tatoeba-challenge", "format": "tatoeba", "files": f"{TATOEBA}/{TATOEBA_FILE}", "weight": 1.0},
            {
                "name": "ted2020",
                "format": "ted2020",
                "files": "train/ted2020-sample/TED2020-v1.en-de.sample.tsv",
                "weight": 0.5,
            },
            {
                "name": "own",
                "format": "st_parallel",
                "files": "train/own/pairs-{lang}.tsv",
                "weight": 0.2,
                "dev": False,
            },
        ],
        "dev_pairs_per_language": 25,
        "max_train_pairs": 600,
        "max_repeats": 2.0,
        "max_bad_share": 0.3,
        "seed": 7,
        "cleaning": dict(DEDUP),
    }
    params.update(overrides)
    return params


@pytest.fixture(scope="module")
def tiny_raw(tmp_path_factory, mirror_dir):
    raw = tmp_path_factory.mktemp("parallel") / "raw"
    stage_tiny_raw(
        raw,
        mirror_dir,
        ["de", "es"],
        {TATOEBA: [TATOEBA_FILE], "train/ted2020-sample": ["TED2020-v1.en-de.sample.tsv"]},
    )
    laser = (raw / "eval/tatoeba-laser/tatoeba.deu-eng.deu").read_text(encoding="utf-8").splitlines()
    # a user's own source with a planted evaluation sentence and one malformed row
    write_lines(
        raw / "train/own/pairs-de.tsv",
        [
            "The first own sentence.\tDer erste eigene Satz.",
            f"A sentence that must not be trained on.\t{laser[3]}",
            "broken row without a tab",
            "The last own sentence.\tDer letzte eigene Satz.",
        ],
    )
    return raw, laser[3]


def run_parallel(raw: Path, out: Path, **overrides) -> dict:
    return build_parallel(
        raw,
        ["de", "es"],
        tiny_parallel_params(**overrides),
        train_path=out / "data/parallel/train.tsv.gz",
        dev_path=out / "data/parallel/dev.tsv.gz",
        dev_mining_path=out / "data/parallel/dev_mining.tsv.gz",
        metrics_path=out / "metrics/data_report.json",
        markdown_path=out / "reports/data_report.md",
        plot_path=out / "plots/data_report.png",
    )


def test_the_train_and_dev_files_are_replaced_together(tmp_path, tiny_raw, monkeypatch):
    """A run that fails while writing the dev file leaves the previous train file too: a new train file
    beside an old dev file could hold the old dev pairs."""
    import xdistill.data.parallel as parallel

    raw, _ = tiny_raw
    run_parallel(raw, tmp_path)
    folder = tmp_path / "data/parallel"
    before = {path.name: path.read_bytes() for path in folder.iterdir()}
    real_write = parallel.write_parallel_tsv

    def fail_on_dev(path, rows):
        if ".dev.tsv.gz" in Path(path).name:
            raise OSError("disk full")
        real_write(path, rows)

    monkeypatch.setattr(parallel, "write_parallel_tsv", fail_on_dev)
    with pytest.raises(OSError, match="disk full"):
        run_parallel(raw, tmp_path, seed=5)  # another seed: another sample, had it been written
    assert {path.name: path.read_bytes() for path in folder.iterdir()} == before  # no temporary left either


def test_parallel_stage_outputs_report_and_decontamination(tmp_path, tiny_raw):
    raw, planted = tiny_raw
    report = run_parallel(raw, tmp_path)
    train = read_tsv_gz(tmp_path / "data/parallel/train.tsv.gz")
    dev = read_tsv_gz(tmp_path / "data/parallel/dev.tsv.gz")
    assert train[0] == dev[0] == ["source", "translation", "lang", "corpus"]
    train, dev = train[1:], dev[1:]
    assert len(train) == 600 and all(len(r) == 4 for r in train)
    assert {r[3] for r in train} == {"tatoeba-challenge", "ted2020", "own"}
    own_limit = 2 * 2  # two clean pairs, repeated at most twice
    ted = report["sources"]["ted2020"]["de"]
    assert sum(r[3] == "own" for r in train) == own_limit
    # the rest shared 1 : 0.5 between tatoeba and ted2020 (ted2020 can give at most 2 x its size)
    assert sum(r[3] == "ted2020" for r in train) == min(round((600 - own_limit) / 3), 2 * ted["available"])
    assert sum(r[2] == "de" for r in dev) == 25 == sum(r[2] == "es" for r in dev)
    assert not {r[3] for r in dev} & {"own"}  # dev: false
    dev_sentences = {s for r in dev for s in r[:2]}
    assert not any(r[0] in dev_sentences or r[1] in dev_sentences for r in train)
    assert planted not in {s for r in train + dev for s in r[:2]}
    own = report["sources"]["own"]["de"]
    assert own["read"] == 3 and own["kept"] == 2 and own["dropped"]["contaminated"] == 1 and own["train"] == own_limit
    assert report["totals"]["malformed_rows"] == 1
    quote = report["malformed"]["train/own/pairs-de.tsv"]["quotes"][0]
    assert quote.startswith("train/own/pairs-de.tsv:3: 1 columns, expected at least 2")
    assert ted["read"] == 100 and ted["train"] <= 2 * ted["available"]
    markdown = (tmp_path / "reports/data_report.md").read_text()
    assert "| ted2020 | en-de | 100 | 0 |" in markdown and "pairs-de.tsv:3" in markdown
    assert report["totals"]["skipped_by_format"] == sum(
        n for reasons in report["skipped"].values() for n in reasons.values()
    )
    assert "## Left out by the format (not malformed)" in markdown
    assert (tmp_path / "plots/data_report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((tmp_path / "metrics/data_report.json").read_text())["totals"] == report["totals"]


def test_dev_mining_blocks_are_the_last_pairs_in_file_order_and_never_trained_on(tmp_path, tiny_raw):
    raw, _ = tiny_raw
    plain = run_parallel(raw, tmp_path / "plain")
    assert read_tsv_gz(tmp_path / "plain/data/parallel/dev_mining.tsv.gz") == [
        ["source", "translation", "lang", "corpus"]
    ]
    params = tiny_parallel_params(dev_mining_block=40)
    params["sources"][0]["dev_mining"] = True
    report = build_parallel(
        raw,
        ["de", "es"],
        params,
        train_path=tmp_path / "train.tsv.gz",
        dev_path=tmp_path / "dev.tsv.gz",
        dev_mining_path=tmp_path / "dev_mining.tsv.gz",
        metrics_path=tmp_path / "report.json",
        markdown_path=tmp_path / "report.md",
        plot_path=tmp_path / "report.png",
    )
    train = read_tsv_gz(tmp_path / "train.tsv.gz")[1:]
    blocks = read_tsv_gz(tmp_path / "dev_mining.tsv.gz")[1:]
    assert [sum(r[2] == lang for r in blocks) for lang in ("de", "es")] == [40, 40]
    assert {r[3] for r in blocks} == {"tatoeba-challenge"}
    held = {s for r in blocks for s in r[:2]}
    assert not any(r[0] in held or r[1] in held for r in train)
    # the dev sample is the one drawn without blocks (so stages that read only dev pairs stay cached)
    assert (tmp_path / "dev.tsv.gz").read_bytes() == (tmp_path / "plain/data/parallel/dev.tsv.gz").read_bytes()
    for lang in ("de", "es"):
        # the cleaned pairs of the source in file order: the block is their tail, in the same order
        cleaned = [(s, t) for _, s, t in _tatoeba_pairs(raw, lang)]
        assert [(r[0], r[1]) for r in blocks if r[2] == lang] == cleaned[-40:]
    row = report["sources"]["tatoeba-challenge"]["de"]
    assert row["dev_mining"] == 40 and report["totals"]["dev_mining"] == 80
    assert row["available"] < plain["sources"]["tatoeba-challenge"]["de"]["available"] - 40 + 25
    assert "| dev mining |" in (tmp_path / "report.md").read_text()
    with pytest.raises(XdistillError, match="dev_mining_block must be >= 0"):
        run_parallel(raw, tmp_path / "bad", dev_mining_block=-1)


def _tatoeba_pairs(raw: Path, lang: str):
    """The Tatoeba pairs of ``lang`` as the stage's cleaning chain passes them on, in file order."""
    from xdistill.data.clean import Cleaner, CleaningConfig
    from xdistill.data.decontaminate import evaluation_sentences
    from xdistill.data.formats import Checkers, read_tatoeba

    cleaner = Cleaner(CleaningConfig.from_params(DEDUP), evaluation_sentences(raw), [lang])
    return cleaner.run(
        "tatoeba-challenge", read_tatoeba(raw / TATOEBA / TATOEBA_FILE.format(lang=lang), lang, Checkers(1.0))
    )


def test_parallel_stage_is_deterministic_and_seed_dependent(tmp_path, tiny_raw):
    raw, _ = tiny_raw
    run_parallel(raw, tmp_path / "a")
    run_parallel(raw, tmp_path / "b")
    run_parallel(raw, tmp_path / "c", seed=8)
    name = "data/parallel/train.tsv.gz"
    assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert (tmp_path / "a" / name).read_bytes() != (tmp_path / "c" / name).read_bytes()
    assert not list((tmp_path / "a/data/parallel").glob(".*"))  # spools and temp files gone


def test_parallel_fails_on_a_file_with_too_many_bad_rows(tmp_path, tiny_raw):
    raw, _ = tiny_raw
    with pytest.raises(InputFileError, match=r"/raw/train/own/pairs-de.tsv: 1 of 4 rows malformed"):
        run_parallel(raw, tmp_path, max_bad_share=0.1)
    assert not (tmp_path / "data/parallel/train.tsv.gz").exists()


def test_cli_reports_missing_raw_folder(tmp_path, capsys):
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"languages": ["de"], "parallel": tiny_parallel_params()}))
    status = main(["parallel", "--params", str(params), "--raw", str(tmp_path / "nope"), "--out", str(tmp_path / "p")])
    assert status == 2 and "raw corpora folder not found" in capsys.readouterr().err


@pytest.mark.slow
def test_dvc_reruns_parallel_only_when_its_inputs_change(tmp_path, mirror_dir):
    from testbed.pipeline_project import make_pipeline_project, run

    overrides = {
        "corpora": {"datasets": {**TINY_EVAL_DATASETS, TATOEBA: [TATOEBA_FILE]}},
        "parallel": {
            "sources": tiny_parallel_params()["sources"][:1],
            "max_train_pairs": 200,
            "dev_pairs_per_language": 10,
        },
    }
    project = make_pipeline_project(tmp_path / "project", mirror_dir, overrides)
    first = run(["dvc", "repro", "parallel"], project)
    assert "Running stage 'corpora'" in first.stdout and "Running stage 'parallel'" in first.stdout
    assert len(read_tsv_gz(project / "data/parallel/train.tsv.gz")) == 201
    again = run(["dvc", "repro", "parallel"], project)
    assert "Running stage" not in again.stdout
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["train"] = {**(params.get("train") or {}), "xdistill_test_marker": 1}
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    assert "Running stage" not in run(["dvc", "repro", "parallel"], project).stdout
    params["parallel"]["seed"] = 99
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    changed = run(["dvc", "repro", "parallel"], project)
    assert "Running stage 'parallel'" in changed.stdout and "Running stage 'corpora'" not in changed.stdout


def test_stsb_train_split_is_trained_on_only_with_its_decontamination_off(tmp_path, mirror_dir):
    """The STS Benchmark's train split (no benchmark scores it) may be a parallel source; its dev and test
    splits, and every other evaluation set, stay decontaminated."""
    from xdistill.data.decontaminate import evaluation_sentences
    from xdistill.data.eval_formats import read_stsb_multi_mt
    from xdistill.data.normalize import decontamination_key

    raw = tmp_path / "raw"
    stage_tiny_raw(
        raw,
        mirror_dir,
        ["de"],
        {
            "eval/stsb-multi-mt": ["data/stsb-en-*.csv", "data/stsb-{lang}-*.csv"],
            "eval/stsb": ["stsbenchmark/sts-*.csv"],
        },
    )
    source = {
        "name": "stsb",
        "format": "stsb_multi_mt",
        "files": "eval/stsb-multi-mt/data/stsb-{lang}-train.csv",
        "dev": False,
    }
    params = {"sources": [source], "dev_pairs_per_language": 0, "max_train_pairs": None, "cleaning": dict(DEDUP)}
    outputs = {
        "train_path": tmp_path / "train.tsv.gz",
        "dev_path": tmp_path / "dev.tsv.gz",
        "dev_mining_path": tmp_path / "dev_mining.tsv.gz",
        "metrics_path": tmp_path / "report.json",
        "markdown_path": tmp_path / "report.md",
        "plot_path": tmp_path / "report.png",
    }
    with pytest.raises(XdistillError, match="set it to false"):
        build_parallel(raw, ["de"], params, **outputs)
    report = build_parallel(raw, ["de"], {**params, "decontaminate_train_splits": False}, **outputs)
    train = read_tsv_gz(tmp_path / "train.tsv.gz")[1:]
    row = report["sources"]["stsb"]["de"]
    assert row["read"] == 2 * 5749 and len(train) == row["train"] > 5000
    # what is left out is what a benchmark or the checkpoint selection reads: dev, test, STS17, Tatoeba
    scored = evaluation_sentences(raw, train_splits=False)
    assert not {decontamination_key(s) for r in train for s in r[:2]} & scored
    assert row["dropped"]["contaminated"] > 0
    first = read_stsb_multi_mt(raw / "eval/stsb-multi-mt/data/stsb-en-train.csv")[0]
    assert decontamination_key(first.sentence1) in evaluation_sentences(raw) - scored
    assert first.sentence1 in {r[0] for r in train}


def test_without_a_cap_every_language_gives_its_pairs_times_the_weight():
    """max_train_pairs null: a source's pairs x its weight per language, not the source's total split
    evenly over its languages (which doubled a small language and dropped pairs of a large one)."""
    from xdistill.data.parallel import ParallelConfig, _plan

    source = {"name": "news", "format": "moses", "files": "train/news.{lang}.gz", "weight": 0.5}
    config = ParallelConfig.from_params({"sources": [source], "max_train_pairs": None, "max_repeats": 3})
    assert _plan(config, {}, {("news", "de"): 1_000_000, ("news", "ar"): 1_000}) == {
        ("news", "de"): 500_000,
        ("news", "ar"): 500,
    }


def test_missing_source_file_and_bad_source_config_fail_clearly(tmp_path, tiny_raw):
    raw, _ = tiny_raw
    missing = {"name": "multi30k", "format": "moses", "languages": ["de"], "files": "train/multi30k/train.{lang}.gz"}
    with pytest.raises(InputFileError, match="lists language 'de' but its file is missing") as info:
        run_parallel(raw, tmp_path, sources=[missing])
    assert "train/multi30k/train.de.gz" in str(info.value)
    with pytest.raises(XdistillError, match="unknown format 'csv'"):
        run_parallel(raw, tmp_path, sources=[{**missing, "format": "csv"}])
    with pytest.raises(XdistillError, match="unknown keys"):
        run_parallel(raw, tmp_path, sources=[{**missing, "wieght": 2}])
    with pytest.raises(XdistillError, match=r"\[multi30k\]: english_side must be 'src' or 'trg', not 'en'"):
        run_parallel(raw, tmp_path, sources=[{**missing, "format": "opus_sample", "english_side": "en"}])
    with pytest.raises(XdistillError, match=r"\[multi30k\]: source_column must be 0 or 1"):
        run_parallel(raw, tmp_path, sources=[{**missing, "format": "dictionary", "source_column": 2}])


def test_a_parallel_run_that_keeps_no_training_pair_fails_with_the_reason(tmp_path, tiny_raw):
    """Every pair filtered out (no sentence is one character long): the stage fails, naming why, and
    writes nothing, instead of exiting 0 with an empty train file that training then reads."""
    raw, _ = tiny_raw
    with pytest.raises(XdistillError, match=r"parallel: 0 training pairs for languages de, es .* after cleaning"):
        run_parallel(raw, tmp_path, cleaning={**DEDUP, "max_chars": 1})
    assert not (tmp_path / "data/parallel/train.tsv.gz").exists()
