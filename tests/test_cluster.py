"""The Dask engine for real: a 2-worker local cluster (processes, one thread each) against the
single-process paths, with the MiniLM teacher on mirror sentences; a worker killed mid-job."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.lightweight_helpers import tatoeba_pairs, write_parallel
from xdistill.cli.main import main
from xdistill.cluster.embed import embed_on_cluster, pending_shards, plan_shards, run_shards, save_shard
from xdistill.cluster.knn import IndexOptions, distributed_knn, recall_at_k
from xdistill.cluster.settings import ClusterSettings, dask_client
from xdistill.errors import XdistillError
from xdistill.mining.stream import NpyRows, sharded_knn
from xdistill.teacher.embed import embed_into_store
from xdistill.teacher.store import TeacherStore, teacher_fingerprint
from xdistill.vectors import OWN_SPACE, check_sidecar_matches, read_sidecar

pytestmark = pytest.mark.slow  # every test here is over ~4 s, or shares a fixture that is

TEACHER = "pypi:all-minilm-l6-v2"
FP16_TOLERANCE = 2e-3  # unit vectors in fp16: batches of other lengths round the last digit differently


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    """240 real English sentences, a few repeated (the store keeps one vector per distinct sentence)."""
    english = [en for en, _ in tatoeba_pairs("de", 230)]
    return english + english[:10]


@pytest.fixture(scope="module")
def single_store(tmp_path_factory, sentences) -> TeacherStore:
    """What the single-process teacher_embed stage writes for the sentences."""
    root = tmp_path_factory.mktemp("single") / "teacher"
    embed_into_store(root, TEACHER, sentences, batch_size=32, progress=False)
    return TeacherStore.open(root, teacher_spec=TEACHER)


@pytest.fixture(scope="module")
def cluster() -> Iterator:
    with dask_client(ClusterSettings(workers=2)) as client:
        yield client


def client_of(client):
    """A client factory that hands out the module's running cluster (started once for every test)."""

    class _Same:
        def __enter__(self):
            return client

        def __exit__(self, *_):
            return False

    return _Same


def assert_same_store(root: Path, reference: TeacherStore) -> None:
    store = TeacherStore.open(root, teacher_spec=TEACHER)
    assert np.array_equal(store.sorted_keys, reference.sorted_keys)
    ours = store.gather(store.rows_in_key_order())
    theirs = reference.gather(reference.rows_in_key_order())
    assert np.abs(ours - theirs).max() <= FP16_TOLERANCE


def test_cluster_store_equals_the_single_process_store(cluster, sentences, single_store, tmp_path):
    root = tmp_path / "teacher"
    stats = embed_on_cluster(client_of(cluster), root, TEACHER, sentences, shard_rows=40, batch_size=32)
    assert (stats.n_requested, stats.n_new, stats.n_cached) == (230, 230, 0)
    assert_same_store(root, single_store)
    assert not (tmp_path / "teacher.shards").exists()  # shard files go once merged
    # nothing left to embed: no cluster is even asked for
    again = embed_on_cluster(_no_cluster, root, TEACHER, sentences, shard_rows=40)
    assert (again.n_new, again.n_cached) == (0, 230)


def _no_cluster():
    raise AssertionError("a cluster was started although the store held every sentence")


def test_a_stopped_run_resumes_from_its_shard_files(cluster, sentences, single_store, tmp_path):
    root, work = tmp_path / "teacher", tmp_path / "shards"
    shards = plan_shards(sentences, 40, None)
    teacher_id = teacher_fingerprint(TEACHER)
    work.mkdir()
    # a run that wrote two shard files and stopped
    finished = run_shards(cluster, shards[:2], TEACHER, teacher_id, 32, None, "fp32")
    for shard, result in finished:
        save_shard(work, shard, result)
    written = {path.name: path.stat().st_mtime_ns for path in work.iterdir()}
    assert len(written) == 2 and len(pending_shards(shards, work)) == len(shards) - 2
    stats = embed_on_cluster(client_of(cluster), root, TEACHER, sentences, work_dir=work, shard_rows=40, batch_size=32)
    assert stats.n_new == 230
    assert_same_store(root, single_store)


def test_a_store_with_part_of_the_corpus_gets_only_the_rest(cluster, sentences, single_store, tmp_path):
    root = tmp_path / "teacher"
    embed_into_store(root, TEACHER, sentences[:100], batch_size=32, progress=False)
    stats = embed_on_cluster(client_of(cluster), root, TEACHER, sentences, shard_rows=40, batch_size=32)
    assert (stats.n_new, stats.n_cached) == (130, 100)
    assert_same_store(root, single_store)


def kill_a_busy_worker(client, key_prefix: str, timeout: float = 60.0) -> threading.Thread:
    """Start a thread that SIGKILLs a worker process as soon as it runs a task whose key starts so."""
    pids = client.run(os.getpid)  # worker address -> process id
    killed: list[str] = []

    def watch() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not killed:
            for worker, keys in client.processing().items():
                if worker in pids and any(str(key).startswith(key_prefix) for key in keys):
                    os.kill(pids[worker], signal.SIGKILL)
                    killed.append(worker)
                    return
            time.sleep(0.02)

    thread = threading.Thread(target=watch, daemon=True)
    thread.killed = killed  # type: ignore[attr-defined]
    thread.start()
    return thread


def test_a_worker_killed_mid_job_changes_nothing(sentences, single_store, tmp_path):
    root = tmp_path / "teacher"
    with dask_client(ClusterSettings(workers=2)) as client:
        client.wait_for_workers(2)
        before = set(client.scheduler_info()["workers"])
        killer = kill_a_busy_worker(client, "teacher-shard-")
        stats = embed_on_cluster(client_of(client), root, TEACHER, sentences, shard_rows=20, batch_size=8)
        killer.join()
        assert killer.killed, "no worker was caught running a shard"
        client.wait_for_workers(2, timeout=60)
        assert set(client.scheduler_info()["workers"]) != before  # the nanny started a new worker process
    assert stats.n_new == 230
    assert_same_store(root, single_store)


# --------------------------------------------------------------------------------------------
# Mining
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus_pair(mirror_dir, tmp_path_factory) -> tuple[Path, Path]:
    """30 German and 30 English FLORES sentences, 20 of them translations of each other."""
    flores = mirror_dir / "eval" / "flores200-devtest"
    german = (flores / "deu_Latn.devtest").read_text(encoding="utf-8").splitlines()
    english = (flores / "eng_Latn.devtest").read_text(encoding="utf-8").splitlines()
    folder = tmp_path_factory.mktemp("mine")
    src, tgt = folder / "de.txt", folder / "en.txt"
    src.write_text("\n".join(german[:30]) + "\n", encoding="utf-8")
    tgt.write_text("\n".join(english[10:40]) + "\n", encoding="utf-8")
    return src, tgt


def read_pairs(path: Path) -> list[tuple[float, str, str]]:
    rows = [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()]
    return [(float(score), src, tgt) for score, src, tgt in rows]


def test_cluster_mine_gives_the_pairs_and_vector_sidecars_of_mine(corpus_pair, tmp_path):
    src, tgt = corpus_pair
    single, clustered = tmp_path / "single.tsv", tmp_path / "cluster.tsv"
    common = [str(src), str(tgt), "--model", TEACHER, "--shard-rows", "7"]
    kept, cluster_kept = tmp_path / "mine-work", tmp_path / "cluster-work"
    assert main(["mine", *common, "-o", str(single), "--no-progress", "--work-dir", str(kept)]) == 0
    assert main(["cluster-mine", *common, "-o", str(clustered), "--workers", "2", "--work-dir", str(cluster_kept)]) == 0
    ours, theirs = read_pairs(clustered), read_pairs(single)
    assert len(ours) > 20
    assert [(s, t) for _, s, t in ours] == [(s, t) for _, s, t in theirs]
    assert np.allclose([score for score, _, _ in ours], [score for score, _, _ in theirs], atol=2e-6)
    # the kept embeddings say which model and space made them, as mine's do, so search can check them
    for side in ("src.npy", "tgt.npy"):
        info = read_sidecar(cluster_kept / side)
        assert info is not None and info == read_sidecar(kept / side)
        assert (info.model, info.space, info.dimension, info.rows) == (TEACHER, OWN_SPACE, 384, 30)
        check_sidecar_matches(cluster_kept / side, info, np.load(cluster_kept / side).shape)


def clustered_vectors(rng: np.random.Generator, rows: int, dim: int = 64, clusters: int = 50) -> np.ndarray:
    """Unit vectors around random centres (sentence embeddings cluster by topic; uniform noise does not)."""
    centres = rng.standard_normal((clusters, dim), dtype=np.float32)
    vectors = centres[rng.integers(0, clusters, rows)] + 0.5 * rng.standard_normal((rows, dim), dtype=np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def vector_files(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("vectors")
    rng = np.random.default_rng(0)
    np.save(folder / "queries.npy", clustered_vectors(rng, 3000))
    np.save(folder / "corpus.npy", clustered_vectors(rng, 8000))
    return folder / "queries.npy", folder / "corpus.npy"


def test_sharded_exact_search_is_the_single_process_search(cluster, vector_files):
    queries, corpus = vector_files
    scores, ids = distributed_knn(cluster, queries, corpus, 4, shard_rows=1000)
    exact_scores, exact_ids = sharded_knn(NpyRows(queries), NpyRows(corpus), 4, shard_rows=1000, progress=False)
    assert np.array_equal(ids, exact_ids)
    assert np.allclose(scores, exact_scores, atol=1e-5)  # BLAS on 1 thread per worker sums in another order


def test_ivfpq_shards_find_most_exact_neighbours(cluster, vector_files):
    queries, corpus = vector_files
    _, exact_ids = sharded_knn(NpyRows(queries), NpyRows(corpus), 4, progress=False)
    options = IndexOptions(kind="ivfpq", nprobe=16, pq_m=8, train_rows=8000)
    scores, ids = distributed_knn(cluster, queries, corpus, 4, shard_rows=2000, options=options)
    assert recall_at_k(ids, exact_ids) >= 0.9
    assert np.all(np.diff(scores, axis=1) <= 0)  # merged lists stay sorted best first
    plain = IndexOptions(kind="ivfpq", nprobe=16, pq_m=8, train_rows=8000, rerank=1)
    _, unranked = distributed_knn(cluster, queries, corpus, 4, shard_rows=2000, options=plain)
    assert recall_at_k(ids, exact_ids) > recall_at_k(unranked, exact_ids)  # exact re-scoring is what lifts it


@pytest.mark.parametrize("retrieval", ["max", "fwd", "bwd", "intersect"])
def test_margin_scored_on_the_workers_gives_the_single_process_pairs(cluster, vector_files, retrieval):
    """Blocks of query rows margin-scored on the workers (the client gathers neighbour means and each row's best
    candidate, never the k-NN lists) give the pairs of the single-process miner, score for score."""
    from xdistill.cluster.mine import mine_on_cluster
    from xdistill.mining.margin import mine_embeddings

    queries, corpus = vector_files
    ours = mine_on_cluster(cluster, queries, corpus, k=4, retrieval=retrieval, shard_rows=1500)
    theirs = mine_embeddings(np.load(queries), np.load(corpus), k=4, retrieval=retrieval)
    assert len(ours.src) > 1000
    # as sets: BLAS sums in another order on a worker's one thread, which may swap the order of two equal scores
    mine, single = (dict(zip(zip(p.src.tolist(), p.tgt.tolist()), p.scores.tolist())) for p in (ours, theirs))
    assert mine.keys() == single.keys()
    assert np.allclose([mine[pair] for pair in single], list(single.values()), atol=1e-5)


def test_a_worker_killed_during_the_search_changes_nothing(vector_files):
    queries, corpus = vector_files
    exact_scores, exact_ids = sharded_knn(NpyRows(queries), NpyRows(corpus), 4, shard_rows=500, progress=False)
    with dask_client(ClusterSettings(workers=2)) as client:
        client.wait_for_workers(2)
        killer = kill_a_busy_worker(client, "search_shard-")  # its shard indexes are rebuilt from the file
        scores, ids = distributed_knn(client, queries, corpus, 4, shard_rows=500, query_rows=250)
        killer.join()
        assert killer.killed, "no worker was caught searching"
    assert np.array_equal(ids, exact_ids)
    assert np.allclose(scores, exact_scores, atol=1e-5)


# --------------------------------------------------------------------------------------------
# Hosts that share no disk: the embeddings through a WebDAV store
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def webdav(tmp_path_factory) -> Iterator[tuple[str, dict[str, str]]]:
    """The multi-host setup's WebDAV server (basic auth) on a free loopback port: its URL and its account's env."""
    from flows.local_stack import free_port
    from flows.services import Services, services_credentials

    state = tmp_path_factory.mktemp("services")
    credentials = services_credentials(state)
    server = Services("127.0.0.1", state, {"webdav": free_port()}, credentials=credentials)
    try:
        server.start_webdav()
        env = {"XDISTILL_DVC_USER": credentials.dvc_user, "XDISTILL_DVC_PASSWORD": credentials.dvc_password}
        yield server.url("webdav"), env
    finally:
        server.stop()


def test_cluster_mine_through_a_webdav_store_gives_the_pairs_of_mine(
    corpus_pair, webdav, tmp_path, monkeypatch, capsys
):
    """The client uploads both sides' vectors and sidecars to the store and keeps no copy; the workers read
    their rows from it: the same pairs as the single-process miner."""
    from xdistill.cluster.staging import filesystem

    url, env = webdav
    for name, value in env.items():
        monkeypatch.setenv(name, value)  # the local cluster's workers start after this, with the account
    src, tgt = corpus_pair
    single, clustered = tmp_path / "single.tsv", tmp_path / "out" / "cluster.tsv"
    common = [str(src), str(tgt), "--model", TEACHER, "--shard-rows", "7"]
    assert main(["mine", *common, "-o", str(single), "--no-progress", "--work-dir", str(tmp_path / "kept")]) == 0
    store = f"{url}/jobs/mine-1"
    args = [*common, "-o", str(clustered), "--workers", "2", "--work-dir", store, "--index", "ivfpq", "--nlist", "2"]
    assert main(["cluster-mine", *args]) == 0
    ours, theirs = read_pairs(clustered), read_pairs(single)
    assert len(ours) > 20 and [(s, t) for _, s, t in ours] == [(s, t) for _, s, t in theirs]
    assert np.allclose([score for score, _, _ in ours], [score for score, _, _ in theirs], atol=2e-6)
    assert sorted(p.name for p in clustered.parent.iterdir()) == ["cluster.tsv"]  # no local copy left behind
    fs, folder = filesystem(store)
    assert sorted(name.rsplit("/", 1)[-1] for name in fs.ls(folder, detail=False)) == [
        "src.npy",
        "src.npy.json",
        "tgt.npy",
        "tgt.npy.json",
    ]
    with fs.open(f"{folder}/tgt.npy", "rb") as handle:
        np.testing.assert_allclose(np.load(handle), np.load(tmp_path / "kept" / "tgt.npy"), atol=1e-6)
    monkeypatch.delenv("XDISTILL_DVC_PASSWORD")  # no account: the store refuses, and the error names it
    capsys.readouterr()
    refused = [*common, "-o", str(tmp_path / "refused.tsv"), "--workers", "1", "--work-dir", store]
    assert main(["cluster-mine", *refused]) == 2
    assert "cannot upload" in capsys.readouterr().err and not (tmp_path / "refused.tsv").exists()


def test_sharded_search_of_a_webdav_store_is_the_search_of_local_files(vector_files, webdav, monkeypatch):
    """Exact and IVF-PQ shards built from the store's rows find what they find from the same local files."""
    from xdistill.cluster.staging import upload

    url, env = webdav
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    queries, corpus = vector_files
    remote = [upload(path, f"{url}/jobs/search/{path.name}") for path in (queries, corpus)]
    ivfpq = IndexOptions(kind="ivfpq", nprobe=16, pq_m=8, train_rows=8000)
    with dask_client(ClusterSettings(workers=2)) as client:
        for options in (IndexOptions(), ivfpq):
            local_scores, local_ids = distributed_knn(client, queries, corpus, 4, shard_rows=3000, options=options)
            scores, ids = distributed_knn(client, *remote, 4, shard_rows=3000, options=options)
            assert np.array_equal(ids, local_ids), options.kind
            assert np.allclose(scores, local_scores, atol=1e-6), options.kind


# --------------------------------------------------------------------------------------------
# Command line and settings
# --------------------------------------------------------------------------------------------


def test_cluster_embed_command_reads_parallel_tsv_and_text(sentences, single_store, tmp_path, capsys):
    pairs = tatoeba_pairs("de", 230)
    tsv = write_parallel(tmp_path / "train.tsv.gz", {"de": pairs[:150]})
    text = tmp_path / "more.txt"
    text.write_text("\n".join(en for en, _ in pairs[150:]) + "\n\n", encoding="utf-8")
    root = tmp_path / "teacher"
    args = ["cluster-embed", str(tsv), str(text), "--teacher", TEACHER, "--store", str(root), "--shard-rows", "100"]
    assert main([*args, "--workers", "2"]) == 0
    assert "230 sentences: 230 embedded now" in capsys.readouterr().out
    assert_same_store(root, single_store)


def test_bad_cluster_settings_are_named():
    with pytest.raises(XdistillError, match="workers: must be at least 1"):
        ClusterSettings(workers=0)
    with pytest.raises(XdistillError, match="expected an address"):
        ClusterSettings(scheduler="nowhere")
    with pytest.raises(XdistillError, match=r"tcp://127.0.0.1:9: cannot connect"):
        with dask_client(ClusterSettings(scheduler="tcp://127.0.0.1:9")):
            pass


@pytest.mark.slow
def test_corpus_embed_flow_on_the_dask_task_runner(sentences, single_store, tmp_path, monkeypatch):
    """The Prefect flow with prefect-dask's DaskTaskRunner (a local 2-worker cluster) against a real server."""
    from prefect.testing.utilities import prefect_test_harness

    from flows.corpus_embed import corpus_embed

    text = tmp_path / "corpus.txt"
    text.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    root = tmp_path / "teacher"
    with prefect_test_harness(server_startup_timeout=180):
        result = corpus_embed(corpus=[str(text)], teacher=TEACHER, store=str(root), shard_rows=60, batch_size=32)
    assert result == {"requested": 230, "new": 230, "cached": 0}
    assert_same_store(root, single_store)
