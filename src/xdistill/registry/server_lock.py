"""The promotion lock of a tracking server, kept in the server's own database: promoters on any host share it.

Hosts that share a tracking server share no disk, so a lock file cannot serialise their promotions.
The lock is a ticket queue in the registry instead: a registered model :data:`LOCK_MODEL` whose model
versions are the tickets. A promoter takes a ticket by creating a version (the server numbers versions
in its database, one after another and never twice, deleted ones included), waits until no lower
live version is left, and deletes its version when done: the lowest live ticket holds the lock.

A promoter that crashed while holding (or waiting) leaves its ticket behind. A waiter that has seen
the same lowest ticket for :data:`LEASE_S` seconds of its own clock (no clock is compared across hosts)
takes it for abandoned and deletes it; deleting a version twice is harmless, so several waiters doing
so at once never remove any other ticket. A promotion takes seconds; the lease is minutes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from xdistill.errors import XdistillError

if TYPE_CHECKING:
    from mlflow import MlflowClient

log = logging.getLogger(__name__)

LOCK_MODEL = "xdistill-promotion-lock"
LOCK_DESCRIPTION = (
    "Lock of xdistill's promotions and rollbacks on this server, not a model: each version is a promoter "
    "holding (the lowest) or waiting for the lock. Deleting a version by hand frees its place."
)
# A version needs a source; a ticket has no files: a URI of no artifact store, which the server accepts.
LOCK_SOURCE = "none:/xdistill-promotion-lock"
OWNER_TAG = "owner"
LEASE_S = 300.0
POLL_S = 0.5


class ServerLockTimeout(XdistillError):
    """The lock was not ours within the timeout."""


@contextlib.contextmanager
def server_lock(client: MlflowClient, timeout_s: float) -> Iterator[str]:
    """Hold the server's promotion lock; yields a description of the ticket (for logs)."""
    _ensure_lock_model(client)
    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
    tags = {OWNER_TAG: owner, "taken_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    ticket = int(client.create_model_version(LOCK_MODEL, LOCK_SOURCE, tags=tags).version)
    try:
        _wait_for_turn(client, ticket, timeout_s)
        log.debug("holding the server's promotion lock (%s version %d, %s)", LOCK_MODEL, ticket, owner)
        yield f"{LOCK_MODEL} version {ticket}"
    finally:
        _delete_ticket(client, ticket)


def _ensure_lock_model(client: MlflowClient) -> None:
    from mlflow.exceptions import MlflowException

    try:
        client.create_registered_model(LOCK_MODEL, description=LOCK_DESCRIPTION)
    except MlflowException as exc:
        if getattr(exc, "error_code", None) != "RESOURCE_ALREADY_EXISTS":
            raise


def live_tickets(client: MlflowClient) -> list[int]:
    """The lock's tickets not yet deleted, lowest (the holder) first."""
    versions = client.search_model_versions(f"name = '{LOCK_MODEL}'")
    return sorted(int(version.version) for version in versions)


def _wait_for_turn(client: MlflowClient, ticket: int, timeout_s: float) -> None:
    """Return once no ticket below ``ticket`` is left; delete one that stayed first for :data:`LEASE_S`."""
    deadline = time.monotonic() + timeout_s
    first_seen: dict[int, float] = {}  # lowest ticket -> when this promoter first saw it lowest
    while True:
        ahead = [other for other in live_tickets(client) if other < ticket]
        if not ahead:
            return
        holder = ahead[0]
        now = time.monotonic()
        seen = first_seen.setdefault(holder, now)
        if now - seen >= LEASE_S:
            log.warning(
                "promotion lock: %s version %d held it for over %.0f s (its promoter crashed?): deleting it",
                LOCK_MODEL,
                holder,
                LEASE_S,
            )
            _delete_ticket(client, holder)
            continue
        if now >= deadline:
            raise ServerLockTimeout(
                f"{LOCK_MODEL} version {holder} held the server's promotion lock for the whole {timeout_s:.0f} s"
            )
        time.sleep(POLL_S)


def _delete_ticket(client: MlflowClient, ticket: int) -> None:
    from mlflow.exceptions import MlflowException

    try:
        client.delete_model_version(LOCK_MODEL, str(ticket))
    except MlflowException as exc:
        if getattr(exc, "error_code", None) != "RESOURCE_DOES_NOT_EXIST":  # another waiter deleted it first
            raise
