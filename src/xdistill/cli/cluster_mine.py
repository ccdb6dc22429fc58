"""``xdistill cluster-mine SRC.txt TGT.txt --model SPEC -o OUT.tsv``: ``xdistill mine`` on a Dask cluster.

Encoding runs in blocks on the workers; each side's search index is sharded across them (exact, or
IVF-PQ so a shard of a corpus far larger than one machine fits a worker); the k-NN lists of both
directions are merged and margin-scored as ``xdistill mine`` does, and written the same way.
``--scheduler`` (or ``XDISTILL_SCHEDULER``) names a running Dask scheduler; without it a local cluster
of ``--workers`` processes runs on this machine. The embeddings kept in ``--work-dir`` carry the sidecar
``xdistill encode`` writes (``src.npy.json``: which model and space made them), as those of ``xdistill mine`` do.

The workers read the embeddings from ``--work-dir``: a folder they all reach under the same path, or the URL
of a network store (``webdav://host:8080/share/job``, ``s3://...``; :mod:`xdistill.cluster.staging`) to
which this command uploads them, for hosts that share no disk.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from xdistill.cli.export import backend_option
from xdistill.cluster.knn import CLUSTER_INDEX_KINDS
from xdistill.cluster.settings import cluster_options
from xdistill.mining.margin import MARGINS, RETRIEVALS

if TYPE_CHECKING:
    from xdistill.vectors import VectorsInfo

logger = logging.getLogger(__name__)

_TEXT_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)


@click.command()
@click.argument("src", type=_TEXT_FILE)
@click.argument("tgt", type=_TEXT_FILE)
@click.option("--model", required=True, help="model spec: pypi:<name>, a local folder or a hub id")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True, help="output TSV")
@click.option("-k", "--k", type=click.IntRange(min=1), default=4, show_default=True, help="neighbours per direction")
@click.option("--margin", type=click.Choice(MARGINS), default="ratio", show_default=True, help="margin function")
@click.option("--retrieval", type=click.Choice(RETRIEVALS), default="max", show_default=True, help="retrieval mode")
@click.option("--threshold", type=float, default=None, help="keep only pairs scoring at least this")
@click.option(
    "--index",
    type=click.Choice(CLUSTER_INDEX_KINDS),
    default="flat",
    show_default=True,
    help="flat: exact; ivfpq: compressed shards (48 bytes a 384-d row), for corpora beyond one machine",
)
@click.option("--nprobe", type=click.IntRange(min=1), default=16, show_default=True, help="IVF cells per query")
@click.option("--nlist", type=click.IntRange(min=1), default=None, help="IVF cells (default 4 sqrt(rows))")
@click.option("--pq-m", type=click.IntRange(min=1), default=None, help="PQ bytes per row (default dim/8)")
@click.option(
    "--rerank", type=click.IntRange(min=1), default=16, show_default=True, help="ivfpq: re-score rerank x k exactly"
)
@click.option(
    "--shard-rows", type=click.IntRange(min=1), default=100_000, show_default=True, help="corpus rows per shard"
)
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True, help="sentences per pass")
@click.option(
    "--work-dir",
    default=None,
    help="where the workers read the embeddings: a folder every worker reaches under the same path, or a network "
    "store's URL (webdav://host:port/path, s3://...) for hosts that share no disk (default: a temporary folder "
    "beside the output)",
)
@click.option("--device", default=None, help="torch device of the workers (default: cuda where present)")
@backend_option
@cluster_options
def command(src: Path, tgt: Path, output: Path, work_dir: str | None, **options: Any) -> int:
    """Mine parallel sentence pairs between SRC and TGT on a Dask cluster."""
    from xdistill.cluster.staging import is_url
    from xdistill.mining.stream import LineFile
    from xdistill.models.registry_model import pin_version
    from xdistill.outputs import check_output_file

    check_output_file(output, [src, tgt, options.get("model")])
    src_lines, tgt_lines = LineFile(src), LineFile(tgt)
    options["model"] = pin_version(options["model"])  # one version on every worker, named in the sidecars
    output.parent.mkdir(parents=True, exist_ok=True)
    if work_dir is not None and not is_url(work_dir):
        Path(work_dir).mkdir(parents=True, exist_ok=True)
        count = _mine(src_lines, tgt_lines, output, Path(work_dir), None, **options)
    else:  # encoded here first; uploaded to the store when work_dir is a URL
        with tempfile.TemporaryDirectory(prefix="xdistill-cluster-mine-", dir=output.resolve().parent) as work:
            count = _mine(src_lines, tgt_lines, output, Path(work), work_dir, **options)
    logger.info("wrote %d pairs to %s", count, output)
    return 0


def _mine(src_lines, tgt_lines, output: Path, work_dir: Path, store: str | None, **options: Any) -> int:
    """Encode both sides into ``work_dir`` (uploaded to the URL ``store`` when given), then mine them."""
    from xdistill.cli.mine import write_pairs
    from xdistill.cluster.knn import IndexOptions
    from xdistill.cluster.mine import encode_on_cluster, mine_on_cluster
    from xdistill.cluster.settings import ClusterSettings, dask_client
    from xdistill.cluster.staging import join, upload
    from xdistill.mining.margin import MinedPairs
    from xdistill.vectors import write_sidecar

    settings = ClusterSettings(scheduler=options["scheduler"], workers=options["workers"])
    index = IndexOptions(
        kind=options["index"],
        nlist=options["nlist"],
        nprobe=options["nprobe"],
        pq_m=options["pq_m"],
        rerank=options["rerank"],
    )
    text_rows = [src_lines.text_rows(), tgt_lines.text_rows()]  # blank lines are no candidates
    model, device, backend = options["model"], options["device"], options["backend"]
    with dask_client(settings) as client:
        # on a worker: the workers resolve the model (the client may not have it) and keep its encoder loaded
        info = client.submit(worker_vectors_info, model, device, backend, pure=False).result()
        embeddings: list[str | Path] = []
        for side, lines, rows in (("src", src_lines, text_rows[0]), ("tgt", tgt_lines, text_rows[1])):
            vectors = encode_on_cluster(
                client,
                lines,
                rows,
                work_dir.resolve() / f"{side}.npy",
                model=model,
                device=device,
                backend=backend,
                batch_size=options["batch_size"],
            )
            sidecar = write_sidecar(vectors, replace(info, rows=len(rows)))
            if store is None:
                embeddings.append(vectors)
                continue
            upload(sidecar, join(store, sidecar.name))  # the workers read the store; the local copies go at once
            embeddings.append(upload(vectors, join(store, vectors.name)))
            sidecar.unlink()
            vectors.unlink()
        pairs = mine_on_cluster(
            client,
            embeddings[0],
            embeddings[1],
            k=options["k"],
            margin=options["margin"],
            retrieval=options["retrieval"],
            shard_rows=options["shard_rows"],
            options=index,
        )
    pairs = MinedPairs(text_rows[0][pairs.src], text_rows[1][pairs.tgt], pairs.scores)
    if options["threshold"] is not None:
        pairs = pairs.above(options["threshold"])
    return write_pairs(pairs, src_lines, tgt_lines, output, progress=False)


def worker_vectors_info(model: str, device: str | None, backend: str) -> VectorsInfo:
    """The sidecar record of ``model``'s vectors, computed on a worker with the encoder it encodes with."""
    from xdistill.cluster.mine import worker_encoder
    from xdistill.models.identity import vectors_info

    dimension = worker_encoder(model, device, backend).dimension
    return vectors_info(model, dimension, teacher_space=False, backend=backend)
