"""Where the Dask scheduler is, and a client connected to it.

``scheduler`` (the ``--scheduler`` option, or the ``XDISTILL_SCHEDULER`` environment variable) is the
address of a running ``dask scheduler`` (``tcp://host:8786``) whose workers were started on the GPU
hosts (``dask worker tcp://host:8786 --nworkers 1 --nthreads 1``, one per GPU). Empty (the default)
starts a local cluster of ``workers`` processes with one thread each on this machine, and stops it
at the end: the same code runs on a laptop and on a cluster.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from xdistill.errors import XdistillError

if TYPE_CHECKING:
    from distributed import Client

logger = logging.getLogger(__name__)

SCHEDULER_ENV = "XDISTILL_SCHEDULER"
DEFAULT_WORKERS = 2
# a dead worker's tasks are re-run elsewhere; a task that kills this many workers in a row is a bug, not bad luck
ALLOWED_FAILURES = 3
CONNECT_TIMEOUT = "10s"


@dataclass(frozen=True)
class ClusterSettings:
    """``scheduler``: "" = a local cluster of ``workers`` single-threaded processes; else its address."""

    scheduler: str = ""
    workers: int = DEFAULT_WORKERS
    memory_limit: str = "auto"  # per local worker (dask's syntax, e.g. "4GiB"); auto = the machine's share

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise XdistillError(f"cluster workers: must be at least 1 (got {self.workers})")
        if self.scheduler and "://" not in self.scheduler and ":" not in self.scheduler:
            raise XdistillError(
                f"cluster scheduler {self.scheduler!r}: expected an address like tcp://host:8786 "
                "(or '' for a local cluster)"
            )


@contextlib.contextmanager
def dask_client(settings: ClusterSettings) -> Iterator[Client]:
    """A client of the configured scheduler, or of a local cluster started (and stopped) here."""
    import dask
    from distributed import Client, LocalCluster

    with dask.config.set({"distributed.scheduler.allowed-failures": ALLOWED_FAILURES}):
        if settings.scheduler:
            try:
                client = Client(settings.scheduler, timeout=CONNECT_TIMEOUT)
            except OSError as exc:
                raise XdistillError(f"cluster scheduler {settings.scheduler}: cannot connect ({exc})") from None
            with client:
                logger.info("connected to %s (%d workers)", settings.scheduler, len(client.scheduler_info()["workers"]))
                yield client
            return
        cluster = LocalCluster(
            n_workers=settings.workers,
            threads_per_worker=1,
            processes=True,
            memory_limit=settings.memory_limit,
            dashboard_address=None,  # no web UI: nothing listens beyond the scheduler's own port
        )
        with cluster, Client(cluster) as client:
            logger.info("local cluster of %d worker processes at %s", settings.workers, cluster.scheduler_address)
            yield client


def cluster_options(command: Any) -> Any:
    """``--scheduler`` and ``--workers``, the options every cluster command takes (into ``settings``)."""
    import click

    command = click.option(
        "--workers",
        type=click.IntRange(min=1),
        default=DEFAULT_WORKERS,
        show_default=True,
        help="worker processes of the local cluster (ignored with --scheduler)",
    )(command)
    return click.option(
        "--scheduler",
        default="",
        envvar=SCHEDULER_ENV,
        show_envvar=True,
        help="Dask scheduler address (tcp://host:8786); empty: a local cluster on this machine",
    )(command)
